import CallNode
import CallNodeTestKit
import CallNodeTestSupport
import Foundation
import Locking
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Nodes in a room of a real Janus (Debian's 1.1.2, started privately for each test): three
/// nodes join one AudioBridge room and each hears the two others in the room's mix; a missing
/// Janus, a missing room and a wrong PIN end the call with the reason, while the node's call in
/// the room goes on.
extension RealTimeTests {
@Suite(.serialized, .realTimeAlone, .enabled(if: JanusServer.isInstalled, "janus is not installed (scripts/bootstrap installs it)"))
struct JanusRoomCallTests {
    typealias Fixture = TwoNodeTests.Fixture
    static let voices: [String: Double] = ["a": 440, "b": 620, "c": 830]

    static func voices(in samples: ArraySlice<Int16>) -> Set<String> {
        let energy = samples.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(max(1, samples.count))
        guard energy > 100 else { return [] }
        return Set(voices.filter { Goertzel.share(of: $0.value, in: samples) > 0.05 }.keys)
    }

    /// What `name` heard in each 100 ms of the second and a half before the last 0.2 s of its
    /// recording (`skipping` samples more at the end): the voices of `voices` found there.
    static func lastBlocks(_ f: Fixture, _ name: String, skipping: Int = 0,
                           voices: (ArraySlice<Int16>) -> Set<String> = voices(in:)) throws -> [Set<String>] {
        let samples = try WAV.read(path: f.path("\(name)-out.wav")).samples
        let end = samples.count - 9_600 - skipping
        return stride(from: max(0, end - 72_000), to: end - 4_799, by: 4_800).map { voices(samples[$0..<($0 + 4_800)]) }
    }

    static func janus(_ f: Fixture, rooms: [JanusServer.Room], videoRooms: [Int] = []) async throws -> JanusServer {
        let server = try JanusServer(directory: f.path("janus"), port: FreePort.udpAndTCP(), rooms: rooms, videoRooms: videoRooms)
        try await server.start()
        return server
    }

    static func room(_ janus: JanusServer, _ id: Int, pin: String? = nil) throws -> CallTarget {
        guard let address = JanusRoomAddress(janus.address(room: id)) else { throw TestFailure("bad room address \(janus.address(room: id))") }
        return .janus(address, pin: pin)
    }

    /// Waits for `call` to connect; a failure quotes what came of it and the end of Janus's log.
    static func connected(_ events: AsyncStream<NodeEvent>, _ call: UUID, janus: JanusServer? = nil) async throws {
        let seen = Locked<[String]>([])
        do {
            _ = try await TwoNodeTests.next(events, within: .seconds(20)) { event in
                if case .statistics = event {} else { seen.withLock { $0.append("\(event)".prefix(200).description) } }
                if case .connected(call, _) = event { return true }
                return false
            }
        } catch {
            let log = janus.flatMap { try? String(contentsOfFile: $0.logPath, encoding: .utf8) }?.split(separator: "\n").suffix(25) ?? []
            throw TestFailure("call \(call) did not connect: \(error)\nits node said:\n\(seen.withLock { $0.suffix(25) }.joined(separator: "\n"))"
                              + "\nJanus's log ends:\n\(log.joined(separator: "\n"))")
        }
    }

    static func ended(_ events: AsyncStream<NodeEvent>, _ call: UUID) async throws -> (CallEndReason, String?) {
        guard case let .ended(_, reason, detail, _) = try await TwoNodeTests.next(events, within: .seconds(20), where: {
            if case .ended(call, _, _, _) = $0 { true } else { false }
        }) else { throw TestFailure("the call did not end") }
        return (reason, detail)
    }

    @Test func threeNodesInOneAudioBridgeRoomEachHearTheOtherTwo() async throws {
        let f = try Fixture()
        let janus = try await Self.janus(f, rooms: [.init(id: 4000)])
        defer { janus.stop() }
        var nodes: [String: CallNode] = [:]
        var calls: [String: UUID] = [:]
        var events: [String: AsyncStream<NodeEvent>] = [:]
        for (name, frequency) in Self.voices.sorted(by: { $0.key < $1.key }) {
            let node = try await f.node(name, input: .tone(frequency), output: .wav(f.path("\(name)-out.wav")), iceAddresses: [janus.mediaAddress])
            let stream = node.events()
            let call = try await node.call(Self.room(janus, 4000))
            try await Self.connected(stream, call, janus: janus)
            nodes[name] = node
            calls[name] = call
            events[name] = stream
        }
        // The first to come hears of the two others joining; Janus lists all three.
        var joined: Set<String> = []
        let aEvents = try #require(events["a"])
        while joined.count < 2 {
            guard case let .room(_, .participantJoined(who)) = try await TwoNodeTests.next(aEvents, where: {
                if case .room(_, .participantJoined) = $0 { true } else { false }
            }) else { continue }
            joined.insert(who.name ?? who.id)
        }
        #expect(joined == ["b", "c"])
        #expect(try await janus.participants(room: 4000).sorted() == ["a", "b", "c"])

        try await Task.sleep(for: .seconds(3))
        for (name, node) in nodes { try await node.hangUp(try #require(calls[name])) }
        // Leaving the room leaves no one behind at Janus.
        var left = try await janus.participants(room: 4000)
        for _ in 0..<20 where !left.isEmpty {
            try await Task.sleep(for: .milliseconds(100))
            left = try await janus.participants(room: 4000)
        }
        #expect(left.isEmpty, "Janus still lists \(left)")
        for node in nodes.values { await node.shutdown() }

        // The last second and a half before the hang-ups, each heard the two others and not itself
        // (the AudioBridge sends each participant the mix less its own voice).
        for name in Self.voices.keys {
            let others = Set(Self.voices.keys).subtracting([name])
            let blocks = try Self.lastBlocks(f, name)
            #expect(blocks.count == 15, "\(name) recorded too little: \(blocks.count) blocks")
            let wrong = blocks.filter { $0 != others }
            #expect(wrong.count <= 2, "\(name) should hear \(others.sorted()), heard \(blocks.map { $0.sorted() })")
        }
    }

    /// Cascade: node x answers two SIP callers into its conference and node y one node caller
    /// into its own; each node's conference is in the room as one participant (its mix up, the
    /// room's down), so each caller hears the two others, wherever they called.
    @Test func callersOfTwoNodesMeetInOneRoomThroughTheirNodesConferences() async throws {
        let f = try Fixture()
        let janus = try await Self.janus(f, rooms: [.init(id: 4300)])
        defer { janus.stop() }
        let here = [janus.mediaAddress, "127.0.0.1"]
        let x = try await f.node("x", output: .wav(f.path("x-out.wav")), acceptUnknown: true, iceAddresses: here, conference: true)
        let y = try await f.node("y", output: .wav(f.path("y-out.wav")), acceptUnknown: true, iceAddresses: here, conference: true)
        let a = try await f.node("a", input: .tone(440), output: .wav(f.path("a-out.wav")), keyExchange: .sdes)
        let b = try await f.node("b", input: .tone(620), output: .wav(f.path("b-out.wav")), keyExchange: .sdes)
        let c = try await f.node("c", input: .tone(830), output: .wav(f.path("c-out.wav")))
        try await f.trust(c, as: "c", y, as: "y")
        let xURI = try await x.listenSIP(SIPListenSettings(host: "127.0.0.1", port: FreePort.udpAndTCP(), user: "x"))
        for (node, name) in [(a, "a"), (b, "b")] {
            _ = try await node.listenSIP(SIPListenSettings(host: "127.0.0.1", port: FreePort.udpAndTCP(), user: name))
        }
        // Each node's conference joins the room first; callers answered after it merge in.
        let xEvents = x.events(), yEvents = y.events()
        let xRoom = try await x.call(Self.room(janus, 4300))
        try await Self.connected(xEvents, xRoom, janus: janus)
        let yRoom = try await y.call(Self.room(janus, 4300))
        try await Self.connected(yEvents, yRoom, janus: janus)
        var placed: [(CallNode, UUID)] = []
        for (node, target, at) in [(a, CallTarget.sip(xURI), xEvents), (b, .sip(xURI), xEvents), (c, .contact("y"), yEvents)] {
            let call = try await node.call(target)
            _ = try await TwoNodeTests.next(at, within: .seconds(20)) { event in
                if case let .connected(answered, _) = event, answered != xRoom, answered != yRoom { true } else { false }
            }
            placed.append((node, call))
        }
        await x.manager.settleHoldsAndGroups()
        await y.manager.settleHoldsAndGroups()
        #expect(Set(x.conference(of: xRoom)).count == 3, "x's conference: \(x.conference(of: xRoom))")
        #expect(Set(y.conference(of: yRoom)).count == 2, "y's conference: \(y.conference(of: yRoom))")
        #expect(try await janus.participants(room: 4300).sorted() == ["x", "y"])

        try await Task.sleep(for: .seconds(4))
        for (node, call) in placed { try await node.hangUp(call) }
        try await x.hangUp(xRoom)
        try await y.hangUp(yRoom)
        for node in [a, b, c, x, y] { await node.shutdown() }

        for name in ["a", "b", "c"] {
            let others = Set(["a", "b", "c"]).subtracting([name])
            let blocks = try Self.lastBlocks(f, name)
            #expect(blocks.count == 15, "\(name) recorded too little: \(blocks.count) blocks")
            let wrong = blocks.filter { $0 != others }
            #expect(wrong.count <= 2, "\(name) should hear \(others.sorted()), heard \(blocks.map { $0.sorted() })")
        }
    }

    /// Janus restarts under two nodes whose conferences it carries: each node says it lost the
    /// room, joins again within seconds, and the callers hear each other through it again.
    @Test func afterAJanusRestartTheNodesJoinTheRoomAgainAndTheirCallersHearEachOther() async throws {
        let f = try Fixture()
        let janus = try await Self.janus(f, rooms: [.init(id: 4400)])
        defer { janus.stop() }
        let here = [janus.mediaAddress, "127.0.0.1"]
        // Nodes in one process each need devices of their own (else one interrupts the other).
        let x = try await f.node("x", output: .wav(f.path("x-out.wav")), acceptUnknown: true, iceAddresses: here, conference: true)
        let y = try await f.node("y", output: .wav(f.path("y-out.wav")), acceptUnknown: true, iceAddresses: here, conference: true)
        let a = try await f.node("a", input: .tone(440), output: .wav(f.path("a-out.wav")))
        let c = try await f.node("c", input: .tone(830), output: .wav(f.path("c-out.wav")))
        try await f.trust(a, as: "a", x, as: "x")
        try await f.trust(c, as: "c", y, as: "y")
        let room = try #require(JanusRoomAddress(janus.address(room: 4400)))
        let xEvents = x.events(), yEvents = y.events()
        func joined(_ events: AsyncStream<NodeEvent>) async throws {
            _ = try await TwoNodeTests.next(events, within: .seconds(30)) { if case .conferenceRoom(_, .joined) = $0 { true } else { false } }
        }
        await x.keepConference(in: room)
        await y.keepConference(in: room)
        try await joined(xEvents)
        try await joined(yEvents)
        let aCall = try await a.call(.contact("x"))
        let cCall = try await c.call(.contact("y"))
        for events in [xEvents, yEvents] {
            _ = try await TwoNodeTests.next(events) { if case .connected = $0 { true } else { false } }
        }
        try await Task.sleep(for: .seconds(2))

        let restartedAt = ContinuousClock.now
        try await janus.restart()
        for events in [xEvents, yEvents] {
            guard case let .conferenceRoom(_, .lost(reason, _)) = try await TwoNodeTests.next(events, within: .seconds(30), where: {
                if case .conferenceRoom(_, .lost) = $0 { true } else { false }
            }) else { continue }
            #expect(reason.contains("Janus"), "lost the room: \(reason)")
        }
        try await joined(xEvents)
        try await joined(yEvents)
        let back = ContinuousClock.now - restartedAt
        #expect(back < .seconds(15), "the nodes were back in the room \(back) after the restart")
        try await Task.sleep(for: .seconds(3))
        try await a.hangUp(aCall)
        try await c.hangUp(cCall)
        await x.leaveConferenceRoom()
        await y.leaveConferenceRoom()
        for node in [a, c, x, y] { await node.shutdown() }

        // The last second and a half: each caller hears the other through the rejoined room.
        for (name, other) in [("a", "c"), ("c", "a")] {
            let blocks = try Self.lastBlocks(f, name)
            #expect(blocks.filter { $0 != [other] }.count <= 2, "\(name) should hear \(other), heard \(blocks.map { $0.sorted() })")
        }
    }

    /// Janus's WebSocket and Unix-socket APIs serve as its HTTP API does: a node over each, in one
    /// room, each hears the two others; a WebSocket or socket where no Janus listens says so.
    @Test func nodesOverJanussWebSocketUnixSocketAndHTTPHearEachOther() async throws {
        let f = try Fixture()
        let janus = try await Self.janus(f, rooms: [.init(id: 4700)])
        defer { janus.stop() }
        let addresses = [("a", janus.webSocketAddress(room: 4700)), ("b", janus.address(room: 4700)), ("c", janus.unixSocketAddress(room: 4700))]
        var nodes: [(CallNode, UUID, AsyncStream<NodeEvent>)] = []
        for (name, text) in addresses {
            let node = try await f.node(name, input: .tone(try #require(Self.voices[name])), output: .wav(f.path("\(name)-out.wav")),
                                        iceAddresses: [janus.mediaAddress])
            let events = node.events()
            let call = try await node.call(.janus(try #require(JanusRoomAddress(text), "\(text)")))
            try await Self.connected(events, call, janus: janus)
            nodes.append((node, call, events))
        }
        // The WebSocket brings the room's news too.
        _ = try await TwoNodeTests.next(nodes[0].2) { if case let .room(_, .participantJoined(who)) = $0 { who.name == "c" } else { false } }
        try await Task.sleep(for: .seconds(2))
        for (node, call, _) in nodes { try await node.hangUp(call) }
        let (a, _, aEvents) = nodes[0]
        for nowhere in ["janus:ws://127.0.0.1:\(FreePort.udpAndTCP())#4700", "janus:unix:\(f.path("no-janus.sock"))#4700"] {
            let failed = try await a.call(.janus(try #require(JanusRoomAddress(nowhere))))
            let (reason, detail) = try await Self.ended(aEvents, failed)
            #expect(reason == .failed && detail?.contains("no Janus at janus:") == true, "\(String(describing: detail))")
        }
        for (node, _, _) in nodes { await node.shutdown() }
        for name in Self.voices.keys {
            let others = Set(Self.voices.keys).subtracting([name])
            let blocks = try Self.lastBlocks(f, name)
            #expect(blocks.filter { $0 != others }.count <= 2, "\(name) should hear \(others.sorted()), heard \(blocks.map { $0.sorted() })")
        }
    }

    /// Hold and resume in a room: the held node's new offers go to Janus as `configure` with a
    /// JSEP (a renegotiation); while held, the other hears nothing of it, and after the resume
    /// both hear each other again.
    @Test func aNodeHoldsItsRoomCallAndResumesIt() async throws {
        let f = try Fixture()
        let janus = try await Self.janus(f, rooms: [.init(id: 4800)])
        defer { janus.stop() }
        let a = try await f.node("a", input: .tone(440), output: .wav(f.path("a-out.wav")), iceAddresses: [janus.mediaAddress])
        let b = try await f.node("b", input: .tone(620), output: .wav(f.path("b-out.wav")), iceAddresses: [janus.mediaAddress])
        let aEvents = a.events(), bEvents = b.events()
        let aCall = try await a.call(Self.room(janus, 4800))
        try await Self.connected(aEvents, aCall, janus: janus)
        let bCall = try await b.call(Self.room(janus, 4800))
        try await Self.connected(bEvents, bCall, janus: janus)
        let started = ContinuousClock.now
        func at() -> Double {
            let elapsed = ContinuousClock.now - started
            return Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        }
        try await Task.sleep(for: .seconds(2))
        let heldAt = at()
        try await a.setHeld(aCall, true)
        try await Task.sleep(for: .seconds(3))
        let resumedAt = at()
        try await a.setHeld(aCall, false)
        try await Task.sleep(for: .seconds(3))
        let endedAt = at()
        try await a.hangUp(aCall)
        try await b.hangUp(bCall)
        await a.shutdown()
        await b.shutdown()
        // b's recording: a's tone before the hold, none in its middle, again well after the resume.
        let samples = try WAV.read(path: f.path("b-out.wav")).samples
        let offset = samples.count - Int(endedAt * 48_000)  // b's recording began a moment before `started`
        func heard(from: Double, to: Double) -> [Set<String>] {
            stride(from: max(0, offset + Int(from * 48_000)), to: min(samples.count, offset + Int(to * 48_000)) - 4_799, by: 4_800)
                .map { Self.voices(in: samples[$0..<($0 + 4_800)]) }
        }
        let before = heard(from: heldAt - 1.5, to: heldAt - 0.2), during = heard(from: heldAt + 1, to: resumedAt - 0.2)
        let after = heard(from: resumedAt + 1.5, to: endedAt - 0.2)
        #expect(before.filter { $0 == ["a"] }.count >= before.count - 1, "before the hold b heard \(before)")
        #expect(during.allSatisfy { !$0.contains("a") }, "during the hold b heard \(during)")
        #expect(after.filter { $0 == ["a"] }.count >= after.count - 1, "after the resume b heard \(after)")
    }

    /// The VideoRoom as an SFU, one step: a node publishes its audio to a VideoRoom, and another
    /// subscribes to that publisher's feed (Janus offers it, the node answers) and hears it,
    /// forwarded as it was sent, not mixed. A feed that is not there says so.
    @Test func aNodeHearsAnotherNodesFeedThroughAVideoRoom() async throws {
        let f = try Fixture()
        let janus = try await Self.janus(f, rooms: [], videoRooms: [5000])
        defer { janus.stop() }
        let a = try await f.node("a", input: .tone(440), output: .wav(f.path("a-out.wav")), iceAddresses: [janus.mediaAddress])
        let b = try await f.node("b", input: .tone(620), output: .wav(f.path("b-out.wav")), iceAddresses: [janus.mediaAddress])
        let aEvents = a.events(), aRoom = a.events(), bEvents = b.events()
        let publish = try #require(JanusRoomAddress("janus:\(janus.url)#videoroom:5000"))
        let aCall = try await a.call(.janus(publish))
        try await Self.connected(aEvents, aCall, janus: janus)
        guard case let .room(_, .joined(_, feed, others)) = try await TwoNodeTests.next(aRoom, where: {
            if case .room(_, .joined) = $0 { true } else { false }
        }) else { throw TestFailure("a did not join the VideoRoom") }
        #expect(others.isEmpty)
        let listen = try #require(JanusRoomAddress("janus:\(janus.url)#videoroom:5000/\(feed)"))
        let bCall = try await b.call(.janus(listen))
        try await Self.connected(bEvents, bCall, janus: janus)
        try await Task.sleep(for: .seconds(3))
        let missing = try await b.call(.janus(try #require(JanusRoomAddress("janus:\(janus.url)#videoroom:5000/12345"))))
        let (reason, detail) = try await Self.ended(bEvents, missing)
        #expect(reason == .failed && detail?.contains("no feed 12345") == true, "\(String(describing: detail))")
        try await b.hangUp(bCall)
        try await a.hangUp(aCall)
        await a.shutdown()
        await b.shutdown()
        // b heard a's tone (the last second and a half of its subscription), and only a's.
        let blocks = try Self.lastBlocks(f, "b")
        #expect(blocks.filter { $0 != ["a"] }.count <= 2, "b should hear a, heard \(blocks.map { $0.sorted() })")
    }

    /// A group on a VideoRoom, mixed at the edge: three nodes publish to one VideoRoom, each
    /// subscribes to the two others' feeds (Janus forwards them as sent) and hears them both,
    /// never itself; one leaving is hung up at the others.
    @Test func threeNodesInAVideoRoomGroupEachHearTheOtherTwoMixedAtTheirEdge() async throws {
        let f = try Fixture()
        let janus = try await Self.janus(f, rooms: [], videoRooms: [5100])
        defer { janus.stop() }
        let room = try #require(JanusRoomAddress("janus:\(janus.url)#videoroom:5100"))
        var members: [(name: String, node: CallNode, call: UUID)] = []
        for (name, frequency) in Self.voices.sorted(by: { $0.key < $1.key }) {
            // Each feed is a call of its own: the manager's default allows two side by side.
            let node = try await f.node(name, input: .tone(frequency), output: .wav(f.path("\(name)-out.wav")), maximumCalls: 4,
                                        iceAddresses: [janus.mediaAddress])
            let events = node.events()
            let call = try await node.call(.janus(room))
            try await Self.connected(events, call, janus: janus)
            members.append((name, node, call))
        }
        // Each hears the two others' feeds: two feed calls connected at each node.
        for member in members {
            var feeds = member.node.manager.observer.calls.filter { $0.id != member.call && $0.hasConnected && !$0.hasEnded }
            for _ in 0..<100 where feeds.count < 2 {
                try await Task.sleep(for: .milliseconds(100))
                feeds = member.node.manager.observer.calls.filter { $0.id != member.call && $0.hasConnected && !$0.hasEnded }
            }
            #expect(feeds.count == 2, "\(member.name) hears \(feeds.count) feeds")
        }
        try await Task.sleep(for: .seconds(3))
        let recordedUntil = ContinuousClock.now
        // c leaves: a's feed of c is hung up, its feed of b stays.
        try await members[2].node.hangUp(members[2].call)
        var aFeeds = members[0].node.manager.observer.calls.filter { $0.id != members[0].call && !$0.hasEnded }
        for _ in 0..<100 where aFeeds.count > 1 {
            try await Task.sleep(for: .milliseconds(100))
            aFeeds = members[0].node.manager.observer.calls.filter { $0.id != members[0].call && !$0.hasEnded }
        }
        #expect(aFeeds.count == 1, "a still has \(aFeeds.count) feeds after c left")
        let afterwards = ContinuousClock.now - recordedUntil
        for member in members.prefix(2) { try await member.node.hangUp(member.call) }
        for member in members { await member.node.shutdown() }
        let skipped = Int(Double(afterwards.components.seconds) * 48_000 + Double(afterwards.components.attoseconds) / 1e18 * 48_000)
        for name in Self.voices.keys {
            let others = Set(Self.voices.keys).subtracting([name])
            if name != "c" {
                // Judge a and b on the stretch before c left.
                let blocks = try Self.lastBlocks(f, name, skipping: skipped)
                #expect(blocks.filter { $0 != others }.count <= 2, "\(name) should hear \(others.sorted()), heard \(blocks.map { $0.sorted() })")
                continue
            }
            let blocks = try Self.lastBlocks(f, name)
            #expect(blocks.filter { $0 != others }.count <= 2, "\(name) should hear \(others.sorted()), heard \(blocks.map { $0.sorted() })")
        }
    }

    /// Each packet carries its frame's audio level (RFC 6464), from which a room with
    /// `audiolevel_event` tells who talks: b hears that a talks while a's tone plays; a muted is
    /// shown muted to b by the room, and stops talking.
    @Test func aRoomTellsWhoTalksFromTheLevelsInTheNodesPackets() async throws {
        let f = try Fixture()
        let janus = try await Self.janus(f, rooms: [.init(id: 4600, talkingEvents: true)])
        defer { janus.stop() }
        let a = try await f.node("a", input: .tone(440), output: .wav(f.path("a-out.wav")), iceAddresses: [janus.mediaAddress])
        let b = try await f.node("b", input: .silence, output: .wav(f.path("b-out.wav")), iceAddresses: [janus.mediaAddress])
        let aEvents = a.events(), bEvents = b.events()
        let bCall = try await b.call(Self.room(janus, 4600))
        try await Self.connected(bEvents, bCall, janus: janus)
        let aCall = try await a.call(Self.room(janus, 4600))
        try await Self.connected(aEvents, aCall, janus: janus)
        func talking(_ on: Bool) async throws -> RoomParticipant {
            guard case let .room(_, .talking(who, _)) = try await TwoNodeTests.next(bEvents, within: .seconds(15), where: {
                if case let .room(_, .talking(_, now)) = $0 { now == on } else { false }
            }) else { throw TestFailure("no talking event") }
            return who
        }
        #expect(try await talking(true).name == "a")
        let bMuted = b.events()
        try await a.setMuted(aCall, true)
        // The room marks a muted for the others, and a stops talking.
        guard case let .room(_, .participantMuted(who, on)) = try await TwoNodeTests.next(bMuted, within: .seconds(10), where: {
            if case .room(_, .participantMuted) = $0 { true } else { false }
        }) else { throw TestFailure("b never heard that a was muted") }
        #expect(who.name == "a" && on)
        #expect(try await talking(false).name == "a")
        try await a.hangUp(aCall)
        try await b.hangUp(bCall)
        await a.shutdown()
        await b.shutdown()
    }

    @Test func aMissingJanusRoomOrPINEndsThatCallWithTheReasonAndTheRoomCallGoesOn() async throws {
        let f = try Fixture()
        let janus = try await Self.janus(f, rooms: [.init(id: 4100), .init(id: 4200, pin: "4242")])
        defer { janus.stop() }
        let node = try await f.node("a", input: .tone(440), output: .wav(f.path("a-out.wav")), maximumCalls: 8, iceAddresses: [janus.mediaAddress])
        let events = node.events()
        let inRoom = try await node.call(Self.room(janus, 4100))
        try await Self.connected(events, inRoom, janus: janus)

        let noPIN = try await node.call(Self.room(janus, 4200))
        let (reason, detail) = try await Self.ended(events, noPIN)
        #expect(reason == .failed)
        #expect(detail?.contains("PIN") == true, "\(detail ?? "no detail")")

        let wrongPIN = try await node.call(Self.room(janus, 4200, pin: "0000"))
        #expect(try await Self.ended(events, wrongPIN).1?.contains("PIN") == true)

        let rightPIN = try await node.call(Self.room(janus, 4200, pin: "4242"))
        try await Self.connected(events, rightPIN, janus: janus)
        try await node.hangUp(rightPIN)

        let noRoom = try await node.call(Self.room(janus, 999))
        let missing = try await Self.ended(events, noRoom)
        #expect(missing.0 == .failed && missing.1?.contains("no room 999") == true, "\(missing)")

        let nowhere = try #require(JanusRoomAddress("janus:http://127.0.0.1:\(FreePort.udpAndTCP())/janus#4100"))
        let noJanus = try await node.call(.janus(nowhere))
        let absent = try await Self.ended(events, noJanus)
        #expect(absent.0 == .failed && absent.1?.contains("no Janus at") == true, "\(absent)")

        // Through all of it, the first call stayed in its room.
        let call = node.manager.observer.calls.first { $0.id == inRoom }
        #expect(call?.hasConnected == true && call?.hasEnded == false, "the room's call: \(String(describing: call))")
        #expect(try await janus.participants(room: 4100) == ["a"])
        try await node.hangUp(inRoom)
        await node.shutdown()
    }
}
}
