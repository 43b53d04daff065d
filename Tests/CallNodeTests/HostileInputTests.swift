import CallNode
@_spi(Testing) import Signaling
import CallNodeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

extension RealTimeTests {
/// Input nobody should send, arriving at a live call: the call keeps playing.
@Suite(.serialized, .realTimeAlone) struct HostileInputTests {
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
        _ = aliceEvents
        try await Self.hangUpAndExpectTheToneThroughout(alice, bob, call, bobEvents, recording: f.path("bob-out.wav"))
    }

    /// Alice hangs up; the call must end by that hang-up, and Bob's recording must hold the
    /// tone in every second after the first.
    static func hangUpAndExpectTheToneThroughout(_ alice: CallNode, _ bob: CallNode, _ call: UUID,
                                                 _ bobEvents: AsyncStream<NodeEvent>, recording: String) async throws {
        try await alice.hangUp(call)
        guard case let .ended(_, reason, _, _) = try await TwoNodeTests.next(bobEvents, where: { if case .ended = $0 { true } else { false } }) else { return }
        #expect(reason == .remoteEnded, "the call ended as \(reason), not by the hang-up")
        await alice.shutdown()
        await bob.shutdown()
        let heard = try WAV.read(path: recording).samples
        for second in 1..<(heard.count / 48_000) {
            let slice = heard[(second * 48_000)..<((second + 1) * 48_000)]
            #expect(slice.map { abs(Int($0)) }.max() ?? 0 > 3_000, "second \(second) of the recording is silent")
        }
    }

    /// Copies of UDP datagrams from `source` port to `destination` port on loopback, read
    /// from a raw socket (root only), until `count` RTP packets (not RTCP, not STUN) came.
    static func capture(from source: UInt16, to destination: UInt16, count: Int) async throws -> [[UInt8]] {
        let fd = socket(AF_INET, Int32(SOCK_RAW.rawValue), Int32(IPPROTO_UDP))
        guard fd >= 0 else { throw TestFailure("cannot open a raw socket (errno \(errno)): this test needs root or CAP_NET_RAW") }
        return try await withCheckedThrowingContinuation { continuation in
            Thread.detachNewThread {
                defer { close(fd) }
                // A bound for a sender that stopped, not a timing check (the suite's start can
                // hold the senders' pool for most of a minute).
                var timeout = timeval(tv_sec: 60, tv_usec: 0)
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                var captured: [[UInt8]] = []
                var buffer = [UInt8](repeating: 0, count: 2048)
                while captured.count < count {
                    let n = recv(fd, &buffer, buffer.count, 0)
                    guard n > 0 else {
                        continuation.resume(throwing: TestFailure("captured \(captured.count) of \(count) packets"))
                        return
                    }
                    let ipHeader = Int(buffer[0] & 0x0F) * 4
                    guard n >= ipHeader + 8 + 12 else { continue }
                    let sport = UInt16(buffer[ipHeader]) << 8 | UInt16(buffer[ipHeader + 1])
                    let dport = UInt16(buffer[ipHeader + 2]) << 8 | UInt16(buffer[ipHeader + 3])
                    let payload = Array(buffer[(ipHeader + 8)..<n])
                    // RTP version 2, and not an RTCP packet type (200–204 with the marker bit).
                    guard sport == source, dport == destination, payload[0] >> 6 == 2, !(200...204).contains(payload[1]) else { continue }
                    captured.append(payload)
                }
                continuation.resume(returning: captured)
            }
        }
    }

    /// Sends `payloads` to 127.0.0.1:`destination` as if from 127.0.0.1:`source`: the address
    /// of the call's validated pair, so libnice hands them to the node like the peer's own.
    /// One a millisecond (twenty times a call's rate), on a thread of its own: sent from the
    /// test's task it blocked a cooperative-pool thread for the whole burst, and the nodes'
    /// media clock skipped its ticks meanwhile (9 ticks, 218 ms, seen once in five runs); a
    /// call's socket is read by its ticks, so the burst overflowed the socket's buffer then.
    static func spoof(_ payloads: [[UInt8]], from source: UInt16, to destination: UInt16) async throws {
        let fd = socket(AF_INET, Int32(SOCK_RAW.rawValue), Int32(IPPROTO_RAW))
        guard fd >= 0 else { throw TestFailure("cannot open a raw socket (errno \(errno)): this test needs root or CAP_NET_RAW") }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            Thread.detachNewThread {
                defer { close(fd) }
                var address = sockaddr_in()
                address.sin_family = sa_family_t(AF_INET)
                address.sin_addr.s_addr = inet_addr("127.0.0.1")
                for payload in payloads {
                    let udpLength = 8 + payload.count, total = 20 + udpLength
                    // IPv4 header (the kernel fills in the checksum and ID), then UDP without a checksum.
                    var packet: [UInt8] = [0x45, 0, UInt8(total >> 8), UInt8(total & 0xFF), 0, 0, 0x40, 0, 64, 17, 0, 0,
                                           127, 0, 0, 1, 127, 0, 0, 1]
                    packet += [UInt8(source >> 8), UInt8(source & 0xFF), UInt8(destination >> 8), UInt8(destination & 0xFF),
                               UInt8(udpLength >> 8), UInt8(udpLength & 0xFF), 0, 0]
                    packet += payload
                    let sent = withUnsafePointer(to: &address) { pointer in
                        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                            sendto(fd, packet, packet.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                        }
                    }
                    guard sent == packet.count else {
                        continuation.resume(throwing: TestFailure("raw send failed (errno \(errno))"))
                        return
                    }
                    usleep(1_000)
                }
                continuation.resume()
            }
        }
    }

    /// Someone on the path records the caller's SRTP and sends it again, then sends it
    /// altered, all from the caller's own address. Every copy is dropped and counted; the
    /// call plays on.
    @Test func replayedAndTamperedSRTPFromThePeersAddressIsDroppedAndCountedAndTheCallPlaysOn() async throws {
        let f = try TwoNodeTests.Fixture()
        let (alice, bob, bobEvents, call) = try await f.toneCall()
        guard case let .selectedPair(bobCall, pair) = try await TwoNodeTests.next(bobEvents, where: {
            if case .selectedPair = $0 { true } else { false }
        }) else { return }
        guard let bobPort = pair.local.split(separator: ":").last.flatMap({ UInt16($0) }),
              let alicePort = pair.remote.split(separator: ":").last.flatMap({ UInt16($0) }) else {
            throw TestFailure("no ports in the selected pair \(pair.local) ← \(pair.remote)")
        }
        let recorded = try await Self.capture(from: alicePort, to: bobPort, count: 100)
        let before = try #require(await bob.statistics(bobCall))

        // 1. The same 100 packets again: each is a replay.
        try await Self.spoof(recorded, from: alicePort, to: bobPort)
        // 2. Altered: moved 500 sequence numbers ahead (so they are not replays) with one
        //    payload bit flipped. The header and payload are both authenticated.
        let tampered = recorded.map { packet -> [UInt8] in
            var packet = packet
            let sequence = (UInt16(packet[2]) << 8 | UInt16(packet[3])) &+ 500
            packet[2] = UInt8(sequence >> 8)
            packet[3] = UInt8(sequence & 0xFF)
            packet[packet.count / 2] ^= 0x10
            return packet
        }
        try await Self.spoof(tampered, from: alicePort, to: bobPort)

        let counted: NodeEvent
        do {
            counted = try await TwoNodeTests.next(bobEvents, where: {
                if case let .statistics(_, s) = $0 {
                    s.replaysDropped - before.replaysDropped >= 100 && s.authenticationFailures - before.authenticationFailures >= 100
                        && s.packetsReceived >= before.packetsReceived + 100 && s.receiveLevel > -40
                } else { false }
            })
        } catch {
            let now = await bob.statistics(bobCall)
            throw TestFailure("\(error); Bob's statistics before the spoofing: \(before); now: \(now.map { "\($0)" } ?? "none")")
        }
        guard case let .statistics(_, after) = counted else { return }
        print("hostile SRTP: Bob dropped \(after.replaysDropped - before.replaysDropped) replays and "
              + "\(after.authenticationFailures - before.authenticationFailures) tampered packets; "
              + "\(after.packetsReceived) received, level \(String(format: "%.1f", after.receiveLevel)) dBFS")
        #expect(after.replaysDropped - before.replaysDropped == 100)
        #expect(after.authenticationFailures - before.authenticationFailures == 100)
        #expect(after.malformedDropped == before.malformedDropped)
        try await Self.hangUpAndExpectTheToneThroughout(alice, bob, call, bobEvents, recording: f.path("bob-out.wav"))
    }
}

/// Many connections at a node's signaling port at once, each misbehaving in its own way.
@Suite(.serialized, .exclusiveProcessResources) struct SignalingFloodTests {
    /// Opens `count` TCP connections that never start TLS and waits (up to `bound`) until the
    /// node has closed each. Returns how many it closed. Runs on its own thread: the sockets
    /// are plain blocking POSIX ones.
    static func silentConnections(port: Int, count: Int, bound: Duration) async -> Int {
        await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                var sockets: [Int32] = []
                for _ in 0..<count {
                    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
                    var address = sockaddr_in()
                    address.sin_family = sa_family_t(AF_INET)
                    address.sin_port = in_port_t(UInt16(port).bigEndian)
                    address.sin_addr.s_addr = inet_addr("127.0.0.1")
                    let connected = withUnsafePointer(to: &address) {
                        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
                    }
                    if connected == 0 { sockets.append(fd) } else { close(fd) }
                }
                var open = Set(sockets)
                let deadline = ContinuousClock.now + bound
                var buffer = [UInt8](repeating: 0, count: 256)
                while !open.isEmpty && ContinuousClock.now < deadline {
                    var polls = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
                    _ = poll(&polls, nfds_t(polls.count), 200)
                    for entry in polls where entry.revents != 0 {
                        // EOF or a reset: the node closed it. (A TLS server sends nothing first.)
                        if read(entry.fd, &buffer, buffer.count) <= 0 { open.remove(entry.fd) }
                    }
                }
                for fd in sockets { close(fd) }
                continuation.resume(returning: sockets.count - open.count)
            }
        }
    }

    enum Misbehaviour: String, CaseIterable, Sendable {
        /// Garbage JSON frames, one after another.
        case malformed
        /// Most of a 60 KiB frame (under the 64 KiB limit), then silence.
        case partial
        /// A frame that announces 2 GiB.
        case oversized
        /// A valid handshake, then nothing at all.
        case idle
    }

    /// One stranger with its own certificate: connects, misbehaves, and reports the error
    /// replies it got before the node closed the connection (nil if it never closed).
    static func stranger(_ misbehaviour: Misbehaviour, port: Int) async throws -> [String]? {
        try await SignalingClient.connect(host: "127.0.0.1", port: port, identity: try NodeIdentity.generate(), pin: nil) { connection, messages in
            var bytes: [UInt8]
            switch misbehaviour {
            case .malformed: bytes = (0..<20).flatMap { _ in Self.frame(Array("{not json".utf8)) }
            case .partial: bytes = [0, 0, 0xF0, 0] + [UInt8](repeating: 0x7B, count: 60_000)
            case .oversized: bytes = [0x7F, 0xFF, 0xFF, 0xFF] + [UInt8](repeating: 0x41, count: 1024)
            case .idle: bytes = []
            }
            if !bytes.isEmpty { try await connection.sendRaw(bytes) }
            // A bound, so that a node that never closes fails the test instead of hanging it.
            let watchdog = Task {
                try await Task.sleep(for: .seconds(30))
                connection.close()
            }
            var errors: [String] = []
            for await reply in messages {
                if case let .success(envelope) = reply, case let .error(text) = envelope.message { errors.append(text) }
            }
            watchdog.cancel()
            if case .success = await watchdog.result { return nil }  // the watchdog closed it
            return errors
        }
    }

    static func frame(_ body: [UInt8]) -> [UInt8] {
        let n = UInt32(body.count)
        return [UInt8(n >> 24), UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)] + body
    }

    static func residentMiB() -> Double {
        guard let statm = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8),
              let pages = statm.split(separator: " ").dropFirst().first.flatMap({ Double($0) }) else { return 0 }
        return pages * Double(sysconf(Int32(_SC_PAGESIZE))) / 1_048_576
    }

    @Test func aFloodFromManyConnectionsIsCutOffWithReasonsAndTheNodeStillTakesACall() async throws {
        let f = try TwoNodeTests.Fixture()
        var limits = SignalingLimits()
        limits.handshakeTimeout = .seconds(2)
        limits.idleTimeout = .seconds(2)
        let alice = try await f.node("alice", input: .tone(440))
        let bob = try await f.node("bob", signalingLimits: limits)
        let port = Int(try #require(bob.listenAddress).port)
        let before = (ProcessResourceCounts.current(), Self.residentMiB())

        // First 150 silent TCP connections: over twice the 64 allowed in their handshake at
        // once. While they last, new callers are refused too (the limit does not tell a
        // flood from a caller); the handshake timeout clears them.
        let closedSilent = await Self.silentConnections(port: port, count: 150, bound: .seconds(30))
        // Then 30 strangers of each kind at once, kind after kind.
        let perKind = 30
        var outcomes: [(Misbehaviour, Result<[String]?, any Error>)] = []
        for kind in Misbehaviour.allCases {
            outcomes += await withTaskGroup(of: (Misbehaviour, Result<[String]?, any Error>).self) { group in
                for _ in 0..<perKind {
                    group.addTask {
                        do { return (kind, .success(try await Self.stranger(kind, port: port))) } catch { return (kind, .failure(error)) }
                    }
                }
                var all: [(Misbehaviour, Result<[String]?, any Error>)] = []
                for await outcome in group { all.append(outcome) }
                return all
            }
        }
        let peak = Self.residentMiB()

        #expect(closedSilent == 150, "the node closed \(closedSilent) of 150 connections that never started TLS")
        for kind in Misbehaviour.allCases {
            let mine = outcomes.filter { $0.0 == kind }
            let replies: [[String]?] = mine.compactMap { try? $0.1.get() }
            let failed: [String] = mine.compactMap { if case let .failure(error) = $0.1 { "\(error)" } else { nil } }
            #expect(failed.isEmpty, "\(kind): \(failed.prefix(3))")
            #expect(replies.count == perKind && !replies.contains(nil), "\(kind): \(replies.compactMap { $0 }.count) of \(perKind) connections were closed by the node")
            switch kind {
            case .malformed:
                // Each malformed frame is answered, and the eighth closes the connection.
                #expect(replies.allSatisfy { $0?.count == limits.maximumMalformedFrames && $0?.allSatisfy { $0.contains("malformed") } == true },
                        "\(replies.map { $0?.count ?? -1 })")
            case .oversized:
                #expect(replies.allSatisfy { $0?.first?.contains("exceeds the 65536-byte limit") == true }, "\(replies.prefix(2))")
            case .partial, .idle:
                // Closed at the idle timeout, without a word (nothing they sent was a message).
                #expect(replies.allSatisfy { $0?.isEmpty == true }, "\(replies.prefix(2))")
            }
        }
        let after = ProcessResourceCounts.current()
        print("signaling flood: 150 silent + \(perKind * Misbehaviour.allCases.count) misbehaving connections; RSS \(String(format: "%.1f", before.1)) MiB before, \(String(format: "%.1f", peak)) MiB after; \(before.0) → \(after)")

        // The node then takes a real call.
        let events = alice.events()
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        _ = try await TwoNodeTests.next(events) { if case let .statistics(uuid, s) = $0 { uuid == call && s.packetsReceived > 10 } else { false } }
        try await alice.hangUp(call)
        await alice.shutdown()
        await bob.shutdown()
    }
}
}
