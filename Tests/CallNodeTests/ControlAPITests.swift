import CallNode
import CallNodeTestKit
import CallNodeTestSupport
import Foundation
import Locking
@testable import NodeControl
import Testing

/// The control API's requests on in-memory nodes and manual time: what each does to the call,
/// what the peer then hears or sees, and the clear refusal of what does not fit.
@Suite struct ControlAPITests {
    /// A request's status and JSON answer.
    static func send(_ api: ControlAPI, _ method: String, _ path: String, _ body: [String: Any]? = nil,
                     raw: String? = nil) async -> (status: Int, object: [String: Any]) {
        let bytes = raw.map { Array($0.utf8) } ?? body.map { Array(try! JSONSerialization.data(withJSONObject: $0)) } ?? []
        let response = await api.respond(to: ControlRequest(method: method, uri: path, body: bytes))
        let object = (try? JSONSerialization.jsonObject(with: Data(response.body))) as? [String: Any] ?? [:]
        return (response.status, object)
    }

    /// Events the API publishes, collected as they come.
    final class Collected: Sendable {
        /// The lines as they came (JSON objects are not Sendable; they are parsed when read).
        let lines = Locked<[[UInt8]]>([])
        let task: Task<Void, Never>

        /// - Parameter feeding: Also feed the node's events to the API, as the server does.
        init(_ api: ControlAPI, call: UUID? = nil, feeding: Bool = false) {
            let (_, stream) = api.events.subscribe(call: call) { _ in }
            let lines = self.lines
            let nodeEvents = feeding ? api.node.events() : nil
            task = Task {
                await withDiscardingTaskGroup { group in
                    if let nodeEvents {
                        group.addTask { for await event in nodeEvents { await api.nodeEvent(event) } }
                    }
                    for await line in stream { lines.withLock { $0.append(line) } }
                    group.cancelAll()
                }
            }
        }

        func named(_ name: String) -> [[String: Any]] {
            lines.withLock { $0 }.compactMap(ControlClient.parseEvent).filter { $0["event"] as? String == name }
        }
        deinit { task.cancel() }
    }

    /// Steps manual time until `condition` holds (at most `frames` frames).
    static func step(_ f: InMemoryNodes, frames: Int = 500, until condition: () async -> Bool) async -> Bool {
        for _ in 0..<frames {
            if await condition() { return true }
            await f.step()
        }
        return await condition()
    }

    /// How much of `frequency` the recording holds between `from` and `to` seconds, against
    /// all its energy there (1: a pure tone of it).
    static func share(of frequency: Double, in path: String, from: Double, to: Double) throws -> Double {
        let samples = try WAV.read(path: path).samples
        let slice = samples[min(samples.count, Int(from * 48_000))..<min(samples.count, Int(to * 48_000))]
        guard !slice.isEmpty else { return 0 }
        return Goertzel.share(of: frequency, in: slice)
    }

    /// For each 20 ms frame of a recording: whether it is mostly `frequency`, and loud.
    static func frames(of frequency: Double, in path: String) throws -> [Bool] {
        let samples = try WAV.read(path: path).samples
        return stride(from: 0, to: samples.count - 959, by: 960).map { start in
            let frame = samples[start..<(start + 960)]
            let energy = frame.reduce(0.0) { $0 + Double($1) * Double($1) } / 960
            return energy > 1e6 && Goertzel.share(of: frequency, in: frame) > 0.8
        }
    }

    /// Alice calls Bob, whose API (fed his node's events, as the server does) the test drives;
    /// returned a second after the call connected, with the API's events collected.
    static func connectedCall(alice aliceInput: NodeAudioInput, bob bobInput: NodeAudioInput) async throws
        -> (InMemoryNodes, ControlAPI, Collected, UUID) {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", input: aliceInput)
        let bob = try await f.node("bob", input: bobInput)
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let api = ControlAPI(node: bob)
        let events = Collected(api, feeding: true)
        let call = try await alice.call(.contact("bob"))
        try await f.waitFor("alice", advancing: true) { if case .connected(call, _) = $0 { true } else { false } }
        for _ in 0..<50 { await f.step() }
        return (f, api, events, call)
    }

    @Test func requestsTakeACallFromRingingToItsEndAndThePeerSeesEach() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", input: .tone(440))
        let bob = try await f.node("bob", autoAnswer: false)
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let api = ControlAPI(node: bob)
        let call = try await alice.call(.contact("bob"))
        try await f.waitFor("bob", advancing: true) { if case .incoming = $0 { true } else { false } }

        let listed = await Self.send(api, "GET", "/v1/calls")
        let calls = try #require(listed.object["calls"] as? [[String: Any]])
        #expect(listed.status == 200 && calls.count == 1)
        #expect(calls.first?["status"] as? String == "ringing" && calls.first?["direction"] as? String == "incoming")
        #expect(calls.first?["name"] as? String == "alice")
        let short = String(call.uuidString.prefix(6))

        // What a ringing call cannot do is refused, with why.
        let hold = await Self.send(api, "POST", "/v1/calls/\(short)/hold")
        #expect(hold.status == 409 && (hold.object["error"] as? String)?.contains("ringing") == true)
        #expect(await Self.send(api, "POST", "/v1/calls/\(short)/dtmf", ["digits": "1"]).status == 409)
        #expect(await Self.send(api, "POST", "/v1/calls/\(short)/play", ["tone": 440]).status == 409)

        // Answered by the start of its ID.
        let answered = await Self.send(api, "POST", "/v1/calls/\(short)/answer")
        #expect(answered.status == 200, "\(answered.object)")
        try await f.waitFor("alice", advancing: true) { if case .connected(call, _) = $0 { true } else { false } }
        #expect(await Self.send(api, "POST", "/v1/calls/\(short)/answer").status == 409)
        for _ in 0..<60 { await f.step() }
        let shown = await Self.send(api, "GET", "/v1/calls/\(call.uuidString)")
        #expect(shown.object["status"] as? String == "connected")
        let stats = try #require(shown.object["stats"] as? [String: Any])
        #expect((stats["packets_received"] as? Int ?? 0) > 20)

        // Mute and hold, each seen by the node (and hold by the peer).
        let muted = await Self.send(api, "POST", "/v1/calls/\(short)/mute")
        #expect(muted.status == 200 && muted.object["muted"] as? Bool == true)
        #expect(await Self.send(api, "POST", "/v1/calls/\(short)/unmute").object["muted"] as? Bool == false)
        let held = await Self.send(api, "POST", "/v1/calls/\(short)/hold")
        #expect(held.status == 200 && held.object["held"] as? Bool == true && held.object["status"] as? String == "held")
        try await f.waitFor("alice", advancing: true) { if case .remoteHold(call, true) = $0 { true } else { false } }
        #expect(await Self.send(api, "POST", "/v1/calls/\(short)/resume").object["held"] as? Bool == false)
        try await f.waitFor("alice", advancing: true) { if case .remoteHold(call, false) = $0 { true } else { false } }

        // Digits reach the peer.
        #expect(await Self.send(api, "POST", "/v1/calls/\(short)/dtmf", ["digits": "4#"]).status == 200)
        try await f.waitFor("alice", advancing: true) { if case .dtmf(call, "#") = $0 { true } else { false } }
        #expect(f.events("alice").compactMap { event -> Character? in if case let .dtmf(_, digit) = event { digit } else { nil } } == ["4", "#"])

        // Hung up: the peer sees the end, and the call is gone from the API.
        #expect(await Self.send(api, "POST", "/v1/calls/\(short)/hangup").status == 200)
        try await f.waitFor("alice", advancing: true) { if case .ended(call, .remoteEnded, _, _) = $0 { true } else { false } }
        let gone = await Self.send(api, "GET", "/v1/calls/\(call.uuidString)")
        #expect(gone.status == 404 && (gone.object["error"] as? String)?.contains("ended") == true)
        await f.shutdown()
    }

    @Test func aCallPlacedThroughTheAPIConnectsAndADeclineEndsARingingOne() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", autoAnswer: false)
        let bob = try await f.node("bob", autoAnswer: false)
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let api = ControlAPI(node: alice)
        let placed = await Self.send(api, "POST", "/v1/calls", ["to": "bob", "title": "from the API"])
        #expect(placed.status == 201, "\(placed.object)")
        let call = try #require((placed.object["id"] as? String).flatMap(UUID.init(uuidString:)))
        try await f.waitFor("bob", advancing: true) { if case .incoming(call, _, _, _) = $0 { true } else { false } }
        // The caller's side is not ringing here: it cannot be declined, only hung up.
        let declinedHere = await Self.send(api, "POST", "/v1/calls/\(call.uuidString)/decline")
        #expect(declinedHere.status == 409 && (declinedHere.object["error"] as? String)?.contains("hang it up") == true)
        // Bob declines through his own API.
        let bobAPI = ControlAPI(node: bob)
        #expect(await Self.send(bobAPI, "POST", "/v1/calls/\(call.uuidString)/decline").status == 200)
        try await f.waitFor("alice", advancing: true) { if case .ended(call, _, _, _) = $0 { true } else { false } }
        #expect(await Self.send(api, "GET", "/v1/calls").object["calls"] as? [Any] != nil)
        #expect((await Self.send(api, "GET", "/v1/calls").object["calls"] as? [Any])?.isEmpty == true)
        await f.shutdown()
    }

    @Test func badRequestsGetAReasonAndChangeNothing() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", input: .tone(440))
        let bob = try await f.node("bob")
        let carol = try await f.node("carol")
        try await f.trust(alice, as: "alice", bob, as: "bob")
        try await f.trust(carol, as: "carol", bob, as: "bob")
        let api = ControlAPI(node: bob)
        let first = try await alice.call(.contact("bob"))
        try await f.waitFor("alice", advancing: true) { if case .connected(first, _) = $0 { true } else { false } }
        let id = first.uuidString

        let cases: [(String, String, String?, Int, String)] = [
            ("POST", "/v1/calls", "{not json", 400, "not JSON"),
            ("POST", "/v1/calls", "[1, 2]", 400, "JSON object"),
            ("POST", "/v1/calls", "{}", 400, "whom to call"),
            ("POST", "/v1/calls", #"{"to": "nobody"}"#, 400, "no contact named"),
            ("POST", "/v1/calls", #"{"to": "\#(String(repeating: "ab", count: 32))"}"#, 400, "relay"),
            ("POST", "/v1/calls", #"{"to": "janus:http://127.0.0.1:8088/janus"}"#, 400, "the room is missing"),
            ("POST", "/v1/calls", #"{"to": "janus:wss://127.0.0.1:8189#1234"}"#, 400, "http:// or ws://"),
            ("POST", "/v1/calls", #"{"to": "janus:http://127.0.0.1:8088/janus#1234", "pin": 1234}"#, 400, "pin must be text"),
            ("GET", "/v1/nowhere", nil, 404, "no such route"),
            ("DELETE", "/v1/calls", nil, 405, "GET, POST"),
            ("POST", "/v1/calls/\(UUID().uuidString)/hangup", nil, 404, "no call"),
            ("POST", "/v1/calls/zzzz/hangup", nil, 404, "starts with"),
            ("POST", "/v1/calls//hangup", nil, 404, "starts with ''"),
            ("POST", "/v1/calls/\(id)/dtmf", "{}", 400, "give the digits"),
            ("POST", "/v1/calls/\(id)/dtmf", #"{"digits": "12x"}"#, 400, "cannot send"),
            ("POST", "/v1/calls/\(id)/play", "{}", 400, "WAV file"),
            ("POST", "/v1/calls/\(id)/play", #"{"file": "/nonexistent/greeting.wav"}"#, 400, "not found"),
            ("POST", "/v1/calls/\(id)/play", #"{"tone": 5}"#, 400, "tone"),
            ("POST", "/v1/calls/\(id)/play", #"{"tone": 440, "volume": 9}"#, 400, "volume"),
            ("DELETE", "/v1/calls/\(id)/play", nil, 409, "nothing is playing"),
            ("POST", "/v1/calls/\(id)/record", #"{"path": ""}"#, 400, "where to record"),
            ("POST", "/v1/calls/\(id)/record", #"{"path": 7}"#, 400, "where to record"),
            ("POST", "/v1/calls/\(id)/record", #"{"path": "/nonexistent/dir/m.wav"}"#, 400, "no directory"),
            ("POST", "/v1/calls/\(id)/record", #"{"path": "/tmp/x.wav", "sides": "left"}"#, 400, "sides"),
            ("DELETE", "/v1/calls/\(id)/record", nil, 409, "not being recorded"),
            ("POST", "/v1/calls/\(id)/merge", "{}", 400, "merge with"),
            ("POST", "/v1/calls/\(id)/merge", #"{"with": "\#(id)"}"#, 409, "itself"),
            ("PUT", "/v1/do-not-disturb", #"{"on": "yes"}"#, 400, "true"),
            ("POST", "/v1/drain", #"{"grace_s": -1}"#, 400, "grace_s"),
        ]
        for (method, path, body, status, reason) in cases {
            let answer = await Self.send(api, method, path, raw: body)
            let error = answer.object["error"] as? String ?? ""
            #expect(answer.status == status && error.contains(reason), "\(method) \(path) \(body ?? ""): \(answer.status) \(error)")
        }
        let second = try await carol.call(.contact("bob"))
        try await f.waitFor("carol", advancing: true) { if case .connected(second, _) = $0 { true } else { false } }
        // Nothing changed: both calls up, not muted, not held; nothing refused the node.
        for _ in 0..<20 { await f.step() }
        let calls = await Self.send(api, "GET", "/v1/calls").object["calls"] as? [[String: Any]] ?? []
        #expect(calls.count == 2)
        #expect(calls.allSatisfy { $0["muted"] as? Bool == false && $0["held"] as? Bool != nil })
        let (draining, taking) = (await bob.draining, await bob.isTakingCalls)
        #expect(!draining && taking)
        await f.shutdown()
    }

    @Test func aPromptIsHeardByThePeerAndItsEndIsSaid() async throws {
        let (f, api, events, call) = try await Self.connectedCall(alice: .silence, bob: .silence)
        defer { events.task.cancel() }

        let played = await Self.send(api, "POST", "/v1/calls/\(call.uuidString)/play", ["tone": 1_000, "seconds": 1.0])
        #expect(played.status == 202 && played.object["seconds"] as? Double == 1.0, "\(played.object)")
        let playback = try #require(played.object["playback"] as? String)
        #expect(await Self.step(f, frames: 200) { !events.named("playback-finished").isEmpty })
        #expect(events.named("playback-finished").first?["playback"] as? String == playback)
        for _ in 0..<50 { await f.step() }
        // What Alice heard: a second of the tone in one piece, and no tone before or after it.
        let frames = try Self.frames(of: 1_000, in: f.path("alice-heard.wav"))
        let first = try #require(frames.firstIndex(of: true)), last = try #require(frames.lastIndex(of: true))
        let count = frames.filter { $0 }.count
        #expect((48...52).contains(count) && last - first + 1 == count, "\(count) frames of the tone between \(first) and \(last)")
        #expect(first > 45, "the tone began before it was asked for (frame \(first))")

        // A looping prompt plays until stopped; stopping says so, and it is not "finished".
        let looped = await Self.send(api, "POST", "/v1/calls/\(call.uuidString)/play", ["tone": 700, "seconds": 0.2, "loop": true])
        #expect(looped.status == 202)
        for _ in 0..<50 { await f.step() }
        #expect((await Self.send(api, "GET", "/v1/calls/\(call.uuidString)").object["playback"] as? String) == looped.object["playback"] as? String)
        let stopped = await Self.send(api, "DELETE", "/v1/calls/\(call.uuidString)/play")
        #expect(stopped.status == 200)
        for _ in 0..<10 { await f.step() }
        #expect(events.named("playback-finished").count == 1 && events.named("playback-stopped").count == 1)
        await f.shutdown()
    }

    @Test func aCallIsRecordedOnDemandAndTheEndOfTheCallStopsTheRecording() async throws {
        let (f, api, events, call) = try await Self.connectedCall(alice: .tone(440), bob: .tone(660))
        defer { events.task.cancel() }
        let alice = try #require(f.nodes["alice"])

        // Gains: Bob's microphone down to a quarter (-12 dB) is what Alice hears; the output's
        // gain leaves a recording as it was. Out of range, or none given, is refused.
        let quieter = await Self.send(api, "PUT", "/v1/calls/\(call.uuidString)/volume", ["microphone": 0.25])
        #expect(quieter.status == 200 && quieter.object["microphone"] as? Double == 0.25 && quieter.object["output"] as? Double == 1)
        #expect(await Self.send(api, "PUT", "/v1/calls/\(call.uuidString)/volume", ["output": 5]).status == 400)
        #expect(await Self.send(api, "PUT", "/v1/calls/\(call.uuidString)/volume", [:]).status == 400)
        let levels = f.events("alice").compactMap { event -> Double? in if case let .statistics(_, s) = event { s.receiveLevel } else { nil } }
        for _ in 0..<150 { await f.step() }
        let after = f.events("alice").compactMap { event -> Double? in if case let .statistics(_, s) = event { s.receiveLevel } else { nil } }
        let before = try #require(levels.last), now = try #require(after.last)
        #expect(abs((before - now) - 12) < 1.5, "Alice heard Bob at \(before) dB, then \(now) dB after -12 dB")
        _ = await Self.send(api, "PUT", "/v1/calls/\(call.uuidString)/volume", ["microphone": 1, "output": 0.5])

        // What Bob hears only: Alice's 440 Hz, none of his own 660 Hz.
        let heard = f.path("message.wav")
        let started = await Self.send(api, "POST", "/v1/calls/\(call.uuidString)/record", ["path": heard, "sides": "received"])
        #expect(started.status == 201, "\(started.object)")
        #expect(await Self.send(api, "POST", "/v1/calls/\(call.uuidString)/record", ["path": heard]).status == 409)
        for _ in 0..<100 { await f.step() }
        let stopped = await Self.send(api, "DELETE", "/v1/calls/\(call.uuidString)/record")
        #expect(stopped.status == 200 && stopped.object["path"] as? String == heard)
        let seconds = try #require(stopped.object["seconds"] as? Double)
        #expect(abs(seconds - 2) < 0.1, "\(seconds) s recorded of 2 s")
        #expect(try Self.share(of: 440, in: heard, from: 0.5, to: 1.8) > 0.8)
        // The output at half its gain: the recording still holds Alice at full level.
        let recorded = try WAV.read(path: heard).samples[24_000..<86_400]
        let rms = (recorded.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(recorded.count)).squareRoot()
        #expect(rms > 0.3 * 32_768 * 0.707 * 0.8, "the recording's level \(rms) was lowered with the output")
        #expect(try Self.share(of: 660, in: heard, from: 0.5, to: 1.8) < 0.05)

        // Both sides, mixed; the call's end stops it, and says so.
        let both = f.path("both.wav")
        #expect(await Self.send(api, "POST", "/v1/calls/\(call.uuidString)/record", ["path": both]).status == 201)
        for _ in 0..<100 { await f.step() }
        try await alice.hangUp(call)
        try await f.waitFor("bob", advancing: true) { if case .ended(call, _, _, _) = $0 { true } else { false } }
        #expect(await Self.step(f, frames: 50) { events.named("recording-stopped").count == 2 })
        #expect(events.named("recording-stopped").last?["reason"] as? String == "the call ended")
        #expect(try Self.share(of: 440, in: both, from: 0.5, to: 1.8) > 0.3)
        #expect(try Self.share(of: 660, in: both, from: 0.5, to: 1.8) > 0.3)
        await f.shutdown()
    }

    @Test func doNotDisturbRefusesCallersAndADrainStartsWithoutWaitingForTheCalls() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice")
        let bob = try await f.node("bob")
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let drains = Locked<[Duration?]>([])
        let api = ControlAPI(node: bob) { grace in drains.withLock { $0.append(grace) } }
        let on = await Self.send(api, "PUT", "/v1/do-not-disturb", ["on": true])
        #expect(on.status == 200 && on.object["do_not_disturb"] as? Bool == true)
        #expect(await Self.send(api, "GET", "/v1/node").object["do_not_disturb"] as? Bool == true)
        #expect(try await CallControlTests.rejection(f, "alice", calling: .contact("bob")).0 == .doNotDisturb)
        #expect(await Self.send(api, "PUT", "/v1/do-not-disturb", ["on": false]).status == 200)
        let call = try await alice.call(.contact("bob"))
        try await f.waitFor("alice", advancing: true) { if case .connected(call, _) = $0 { true } else { false } }

        let drained = await Self.send(api, "POST", "/v1/drain", ["grace_s": 30])
        #expect(drained.status == 202 && drained.object["calls"] as? Int == 1)
        #expect(await Self.step(f, frames: 10) { drains.withLock { $0 } == [.seconds(30)] })
        await f.shutdown()
    }
}
