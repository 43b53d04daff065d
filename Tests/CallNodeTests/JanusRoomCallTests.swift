import CallNode
import CallNodeTestKit
import CallNodeTestSupport
import Foundation
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

    static func janus(_ f: Fixture, rooms: [JanusServer.Room]) async throws -> JanusServer {
        let server = try JanusServer(directory: f.path("janus"), port: FreePort.udpAndTCP(), rooms: rooms)
        try await server.start()
        return server
    }

    static func room(_ janus: JanusServer, _ id: Int, pin: String? = nil) throws -> CallTarget {
        guard let address = JanusRoomAddress(janus.address(room: id)) else { throw TestFailure("bad room address \(janus.address(room: id))") }
        return .janus(address, pin: pin)
    }

    static func connected(_ events: AsyncStream<NodeEvent>, _ call: UUID) async throws {
        _ = try await TwoNodeTests.next(events, within: .seconds(20)) { if case .connected(call, _) = $0 { true } else { false } }
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
            try await Self.connected(stream, call)
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
            let samples = try WAV.read(path: f.path("\(name)-out.wav")).samples
            #expect(samples.count > 96_000, "\(name) recorded \(samples.count) samples")
            let end = samples.count - 9_600
            let blocks = stride(from: max(0, end - 72_000), to: end - 4_799, by: 4_800).map { Self.voices(in: samples[$0..<($0 + 4_800)]) }
            let wrong = blocks.filter { $0 != others }
            #expect(wrong.count <= 2, "\(name) should hear \(others.sorted()), heard \(blocks.map { $0.sorted() })")
        }
    }

    @Test func aMissingJanusRoomOrPINEndsThatCallWithTheReasonAndTheRoomCallGoesOn() async throws {
        let f = try Fixture()
        let janus = try await Self.janus(f, rooms: [.init(id: 4100), .init(id: 4200, pin: "4242")])
        defer { janus.stop() }
        let node = try await f.node("a", input: .tone(440), output: .wav(f.path("a-out.wav")), maximumCalls: 8, iceAddresses: [janus.mediaAddress])
        let events = node.events()
        let inRoom = try await node.call(Self.room(janus, 4100))
        try await Self.connected(events, inRoom)

        let noPIN = try await node.call(Self.room(janus, 4200))
        let (reason, detail) = try await Self.ended(events, noPIN)
        #expect(reason == .failed)
        #expect(detail?.contains("PIN") == true, "\(detail ?? "no detail")")

        let wrongPIN = try await node.call(Self.room(janus, 4200, pin: "0000"))
        #expect(try await Self.ended(events, wrongPIN).1?.contains("PIN") == true)

        let rightPIN = try await node.call(Self.room(janus, 4200, pin: "4242"))
        try await Self.connected(events, rightPIN)
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
