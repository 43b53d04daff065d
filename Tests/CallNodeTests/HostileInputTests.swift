import CallNode
import CallNodeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

extension RealTimeTests {
/// Input nobody should send, arriving at a live call: the call keeps playing.
@Suite struct HostileInputTests {
    /// Sends `count` hostile datagrams to 127.0.0.1:`port` from one socket: random bytes of
    /// random length, STUN binding requests with a made-up username and integrity, and
    /// RTP-looking packets (version 2, the call's payload type) under random SSRCs.
    static func flood(port: UInt16, count: Int, seed: UInt64) async throws {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { throw TestFailure("no UDP socket") }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var rng = SplitMix64(seed: seed)
        for index in 0..<count {
            var packet: [UInt8]
            switch index % 3 {
            case 0:
                packet = (0..<Int(rng.next() % 1_400 + 1)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            case 1:
                // Binding request: type, length, magic cookie, transaction ID, then USERNAME and a
                // MESSAGE-INTEGRITY that cannot verify.
                packet = [0x00, 0x01, 0x00, 0x00, 0x21, 0x12, 0xA4, 0x42] + (0..<12).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
                packet += [0x00, 0x06, 0x00, 0x08] + Array("evil:bad".utf8)
                packet += [0x00, 0x08, 0x00, 0x14] + (0..<20).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
                let length = UInt16(packet.count - 20)
                packet[2] = UInt8(length >> 8)
                packet[3] = UInt8(length & 0xFF)
            default:
                packet = [0x80, 111, UInt8(truncatingIfNeeded: index >> 8), UInt8(truncatingIfNeeded: index)]
                packet += (0..<8).map { _ in UInt8(truncatingIfNeeded: rng.next()) }  // timestamp, SSRC
                packet += (0..<Int(rng.next() % 160 + 10)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            }
            _ = withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(fd, packet, packet.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            if index % 200 == 199 { try await Task.sleep(for: .milliseconds(2)) }  // about 100 000 packets/s at most
        }
    }

    @Test func aFloodOfGarbageAndForgedPacketsAtTheCallsICEPortLeavesTheCallPlaying() async throws {
        let f = try TwoNodeTests.Fixture()
        let alice = try await f.node("alice", input: .tone(440))
        let bob = try await f.node("bob", output: .wav(f.path("bob-out.wav")))
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let aliceEvents = alice.events(), bobEvents = bob.events()
        let call = try await alice.call(.contact("bob"))
        guard case let .selectedPair(bobCall, pair) = try await TwoNodeTests.next(bobEvents, where: {
            if case .selectedPair = $0 { true } else { false }
        }) else { return }
        guard let portText = pair.local.split(separator: ":").last, let port = UInt16(portText) else {
            throw TestFailure("no port in the selected pair's local address \(pair.local)")
        }
        _ = try await TwoNodeTests.next(bobEvents) { if case let .statistics(_, s) = $0 { s.packetsReceived >= 50 } else { false } }

        try await Self.flood(port: port, count: 30_000, seed: 7)

        // After the flood: Bob still hears Alice's tone, packets keep coming, and the call never
        // ended. None of the forged RTP reached media at all: libnice hands the application only
        // datagrams from a validated pair, and the flood came from another address.
        guard case let .statistics(_, after) = try await TwoNodeTests.next(bobEvents, where: {
            if case let .statistics(_, s) = $0 { s.packetsReceived >= 150 && s.receiveLevel > -40 } else { false }
        }) else { return }
        print("hostile UDP: Bob after the flood: \(after.packetsReceived) packets, level \(after.receiveLevel) dBFS, "
              + "dropped by SRTP: \(after.authenticationFailures) failed authentication, \(after.malformedDropped) malformed, \(after.replaysDropped) replays")
        let statistics = try #require(await bob.statistics(bobCall))
        #expect(statistics.authenticationFailures == 0 && statistics.malformedDropped == 0 && statistics.replaysDropped == 0,
                "datagrams from a stranger's address reached SRTP: \(statistics.authenticationFailures) / \(statistics.malformedDropped) / \(statistics.replaysDropped)")
        try await alice.hangUp(call)
        guard case let .ended(_, reason, _, _) = try await TwoNodeTests.next(bobEvents, where: { if case .ended = $0 { true } else { false } }) else { return }
        #expect(reason == .remoteEnded, "the call ended as \(reason), not by the hang-up")
        _ = aliceEvents
        await alice.shutdown()
        await bob.shutdown()
        let heard = try WAV.read(path: f.path("bob-out.wav")).samples
        // The tone throughout: no second of the recording after the first is silent.
        for second in 1..<(heard.count / 48_000) {
            let slice = heard[(second * 48_000)..<((second + 1) * 48_000)]
            #expect(slice.map { abs(Int($0)) }.max() ?? 0 > 3_000, "second \(second) of the recording is silent")
        }
    }
}
}
