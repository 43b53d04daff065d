import Foundation
@testable import ICE
import Locking
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The media path without ICE, on loopback sockets: RTP goes where the SDP said, turns to
/// where the peer's first packet came from (symmetric RTP), and then to nowhere else.
@Suite struct PlainRTPPathTests {
    /// An RTP packet (version 2, payload type 111) carrying `marker`.
    static func rtp(_ marker: UInt8) -> [UInt8] { [0x80, 111, 0, 1, 0, 0, 0, 1, 0, 0, 0, 7, marker] }
    /// An RTCP receiver report header.
    static let rtcp: [UInt8] = [0x80, 201, 0, 1, 0, 0, 0, 7]

    /// Collects what `path` receives.
    final class Received: Sendable {
        let packets = Locked<[[UInt8]]>([])
        init(_ path: PlainRTPPath) {
            path.setReceiver { [packets] bytes in packets.withLock { $0.append(Array(bytes)) } }
        }
        func wait(for count: Int) async -> [[UInt8]] {
            for _ in 0..<200 {
                let now = packets.withLock { $0 }
                if now.count >= count { return now }
                try? await Task.sleep(for: .milliseconds(10))
            }
            return packets.withLock { $0 }
        }
    }

    static func candidate(_ path: PlainRTPPath, component: Int = 1) -> IceCandidate {
        IceCandidate(foundation: "sdp", component: component, priority: 1, address: path.local.address, port: path.local.port, type: .host)
    }

    @Test func rtpGoesWhereTheSDPSaidBothWays() async throws {
        let a = try PlainRTPPath(bindingTo: "127.0.0.1"), b = try PlainRTPPath(bindingTo: "127.0.0.1")
        let atA = Received(a), atB = Received(b)
        #expect(!a.send(Self.rtp(1)), "nowhere to send before the peer's address is known")
        var events = a.events.makeAsyncIterator()
        #expect(try await a.setRemote(IceCredentials(ufrag: "", pwd: ""), candidates: [Self.candidate(b)], endOfCandidates: true).isEmpty)
        #expect(await events.next() == .selectedPair(IceCandidatePair(local: a.local, remote: Self.candidate(b))))
        #expect(await events.next() == .stateChanged(.connected))
        _ = try await b.setRemote(IceCredentials(ufrag: "", pwd: ""), candidates: [Self.candidate(a)], endOfCandidates: true)
        #expect(a.send(Self.rtp(1)) && b.send(Self.rtp(2)))
        #expect(await atB.wait(for: 1) == [Self.rtp(1)])
        #expect(await atA.wait(for: 1) == [Self.rtp(2)])
        await a.close()
        await b.close()
    }

    /// With `--stun`, a path without ICE asks a STUN server (coturn) where its packets come
    /// from, and names that address: behind a NAT (here a source NAT on loopback, so coturn sees
    /// 127.0.0.5) the NAT's, which a peer outside can reach. The answer is not media: nothing
    /// reaches the receiver, and RTP still flows after it.
    @Test func itNamesTheAddressAStunServerSawItsPacketsComeFrom() async throws {
        let stun = try await Coturn()
        defer { stun.stop() }
        let nat = try LoopbackSourceNAT(stunPort: stun.port, mappedAddress: "127.0.0.5")
        defer { nat.remove() }
        let path = try PlainRTPPath(bindingTo: "127.0.0.1"), peer = try PlainRTPPath(bindingTo: "127.0.0.1")
        let received = Received(path)
        #expect(path.advertised == path.local, "its own address until a STUN server says otherwise")
        let mapped = try #require(await path.map(through: stun.address), "coturn did not answer")
        #expect(mapped.address == "127.0.0.5" && mapped.type == .serverReflexive, "\(mapped)")
        #expect(path.advertised == mapped)
        #expect(received.packets.withLock { $0.isEmpty }, "the STUN answer went to the media")
        _ = try await path.setRemote(IceCredentials(ufrag: "", pwd: ""), candidates: [Self.candidate(peer)], endOfCandidates: true)
        _ = try await peer.setRemote(IceCredentials(ufrag: "", pwd: ""), candidates: [Self.candidate(path)], endOfCandidates: true)
        #expect(peer.send(Self.rtp(3)))
        #expect(await received.wait(for: 1) == [Self.rtp(3)])
        await path.close()
        await peer.close()
    }

    @Test func aStunServerThatDoesNotAnswerLeavesTheSocketsOwnAddress() async throws {
        // A port nothing listens on: three requests, no answer.
        let silent = try PlainRTPPath(bindingTo: "127.0.0.1")
        let path = try PlainRTPPath(bindingTo: "127.0.0.1")
        #expect(await path.map(through: IceServerAddress(host: "127.0.0.1", port: silent.local.port)) == nil)
        #expect(path.advertised == path.local)
        await path.close()
        await silent.close()
    }

    @Test func aStunAnswerIsReadOnlyForItsOwnRequest() {
        let binding = STUNBinding()
        let request = binding.request()
        // A Binding request (class and method 0x0001), the magic cookie, a transaction id.
        #expect(request.count >= 20 && request[0] == 0x00 && request[1] == 0x01 && Array(request[4..<8]) == [0x21, 0x12, 0xA4, 0x42])
        let cookie: [UInt8] = [0x21, 0x12, 0xA4, 0x42], transaction = Array(request[8..<20])
        /// A Binding success response for `transaction` whose XOR-MAPPED-ADDRESS is 192.0.2.7:40000.
        func answer(_ transaction: [UInt8]) -> [UInt8] {
            let port = UInt16(40_000) ^ 0x2112
            let address = [192, 0, 2, 7].enumerated().map { UInt8($0.element) ^ cookie[$0.offset] }
            return [0x01, 0x01, 0x00, 0x0C] + cookie + transaction + [0x00, 0x20, 0x00, 0x08, 0x00, 0x01, UInt8(port >> 8), UInt8(port & 0xFF)] + address
        }
        func mapped(_ bytes: [UInt8]) -> (address: String, port: UInt16)? { bytes.withUnsafeBytes { binding.mapped($0) } }
        #expect(mapped(Array(answer(transaction).prefix(30))) == nil, "cut short")
        #expect(mapped(answer(Array(repeating: 9, count: 12))) == nil, "another request's answer")
        let found = mapped(answer(transaction))
        #expect(found?.address == "192.0.2.7" && found?.port == 40_000, "\(String(describing: found))")
        // An error response to a request (its transaction ends with it).
        let second = binding.request()
        var error = answer(Array(second[8..<20]))
        error[1] = 0x11
        #expect(mapped(error) == nil)
        // An indication: no answer expected, so no transaction of its own to answer.
        let indication = binding.indication()
        #expect(indication.count >= 20 && indication[0] == 0x00 && indication[1] == 0x11)
    }

    @Test func itLatchesOnceToThePeersRealAddressAndDropsStrangers() async throws {
        // The SDP names an address the peer does not send from (a NAT's inside address).
        let a = try PlainRTPPath(bindingTo: "127.0.0.1"), peer = try PlainRTPPath(bindingTo: "127.0.0.1")
        let stranger = try PlainRTPPath(bindingTo: "127.0.0.1"), elsewhere = try PlainRTPPath(bindingTo: "127.0.0.1")
        let atA = Received(a), atPeer = Received(peer)
        _ = try await a.setRemote(IceCredentials(ufrag: "", pwd: ""), candidates: [Self.candidate(elsewhere)], endOfCandidates: true)
        _ = try await peer.setRemote(IceCredentials(ufrag: "", pwd: ""), candidates: [Self.candidate(a)], endOfCandidates: true)
        _ = try await stranger.setRemote(IceCredentials(ufrag: "", pwd: ""), candidates: [Self.candidate(a)], endOfCandidates: true)
        #expect(peer.send(Self.rtp(1)))
        #expect(await atA.wait(for: 1).count == 1)
        // A answers to where the packet came from, not to the SDP's address.
        #expect(a.send(Self.rtp(9)))
        #expect(await atPeer.wait(for: 1) == [Self.rtp(9)])
        // Latched: a stranger's RTP is dropped and counted, and A's media still goes to the peer.
        #expect(stranger.send(Self.rtp(66)))
        #expect(peer.send(Self.rtp(2)))
        let received = await atA.wait(for: 2)
        #expect(received == [Self.rtp(1), Self.rtp(2)], "\(received)")
        for _ in 0..<100 where a.droppedFromStrangers == 0 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(a.droppedFromStrangers == 1)
        #expect(a.send(Self.rtp(10)))
        #expect(await atPeer.wait(for: 2) == [Self.rtp(9), Self.rtp(10)])
        for path in [a, peer, stranger, elsewhere] { await path.close() }
    }

    /// Polled (a call's media reads on its clock's ticks): what arrives waits in the socket
    /// until `poll()`, which hands it all over in order, each with the kernel's stamp of when it
    /// arrived; unpolled, the process's socket watcher reads again.
    @Test func polledItHandsOverWhatArrivedOnlyWhenPolledWithWhenItArrived() async throws {
        let a = try PlainRTPPath(bindingTo: "127.0.0.1"), b = try PlainRTPPath(bindingTo: "127.0.0.1")
        let ages = Locked<[Duration]>([])
        let packets = Locked<[[UInt8]]>([])
        b.setReceiver { [b] bytes in
            packets.withLock { $0.append(Array(bytes)) }
            ages.withLock { $0.append(b.lastArrivalAge) }
        }
        _ = try await a.setRemote(IceCredentials(ufrag: "", pwd: ""), candidates: [Self.candidate(b)], endOfCandidates: true)
        _ = try await b.setRemote(IceCredentials(ufrag: "", pwd: ""), candidates: [Self.candidate(a)], endOfCandidates: true)
        b.setPolled(true)
        // The kernel turns its receive stamps on a moment after a socket first asks (the switch is
        // global and set by a deferred work item): until then a datagram carries none and reads as
        // just arrived. Wait until one sent 30 ms before its poll says so.
        for _ in 0..<100 {
            #expect(a.send(Self.rtp(0)))
            try await Task.sleep(for: .milliseconds(30))
            b.poll()
            if ages.withLock({ $0 }).last.map({ $0 >= .milliseconds(20) }) == true { break }
        }
        #expect(ages.withLock { $0 }.last.map { $0 >= .milliseconds(20) } == true, "the kernel never stamped a datagram")
        packets.withLock { $0 = [] }
        ages.withLock { $0 = [] }
        let sent = ContinuousClock.now
        for marker: UInt8 in 1...3 { #expect(a.send(Self.rtp(marker))) }
        try await Task.sleep(for: .milliseconds(80))
        #expect(packets.withLock { $0 }.isEmpty, "the watcher read while polled")
        b.poll()
        let waited = ContinuousClock.now - sent
        #expect(packets.withLock { $0 } == [Self.rtp(1), Self.rtp(2), Self.rtp(3)])
        // Each arrived as it was sent, at least 80 ms before the poll (however long the poll
        // came after, on a loaded host), and says so.
        let stamped = ages.withLock { $0 }
        #expect(stamped.count == 3 && stamped.allSatisfy { $0 >= .milliseconds(60) && $0 <= waited + .milliseconds(20) },
                "arrival ages \(stamped), the poll \(waited) after the sends")
        #expect(b.lastArrivalAge == .zero, "an age outside the receiver's call")
        b.poll()
        #expect(packets.withLock { $0 }.count == 3, "a second poll found the same datagrams again")
        // Unpolled: the watcher reads as things arrive.
        b.setPolled(false)
        #expect(a.send(Self.rtp(4)))
        for _ in 0..<100 where packets.withLock({ $0.count }) < 4 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(packets.withLock { $0 }.last == Self.rtp(4))
        await a.close()
        await b.close()
    }

    /// A DTLS record's header (content type 22, a handshake; DTLS 1.2), then `marker`.
    static func dtls(_ marker: UInt8) -> [UInt8] { [22, 0xFE, 0xFD, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, marker] }

    /// A DTLS-SRTP peer's first packet is its handshake, not RTP: it latches too (baresip answers
    /// a node's ClientHello from loopback while its SDP named the host's other address). Bytes
    /// that are neither RTP nor DTLS do not.
    @Test func aDTLSPeersFirstHandshakeFromElsewhereLatchesAndNoiseDoesNot() async throws {
        let a = try PlainRTPPath(bindingTo: "127.0.0.1"), peer = try PlainRTPPath(bindingTo: "127.0.0.1")
        let noisy = try PlainRTPPath(bindingTo: "127.0.0.1"), elsewhere = try PlainRTPPath(bindingTo: "127.0.0.1")
        let atA = Received(a), atPeer = Received(peer), atElsewhere = Received(elsewhere)
        _ = try await a.setRemote(IceCredentials(ufrag: "", pwd: ""), candidates: [Self.candidate(elsewhere)], endOfCandidates: true)
        for path in [peer, noisy] {
            _ = try await path.setRemote(IceCredentials(ufrag: "", pwd: ""), candidates: [Self.candidate(a)], endOfCandidates: true)
        }
        #expect(noisy.send(Array("not a media packet".utf8)))
        for _ in 0..<100 where a.droppedFromStrangers == 0 { try await Task.sleep(for: .milliseconds(10)) }
        #expect(a.droppedFromStrangers == 1, "noise from elsewhere is dropped, not latched to")
        #expect(peer.send(Self.dtls(1)))
        #expect(await atA.wait(for: 1) == [Self.dtls(1)])
        #expect(a.send(Self.dtls(2)))
        #expect(await atPeer.wait(for: 1) == [Self.dtls(2)], "the answer goes to where the handshake came from")
        #expect(await atElsewhere.wait(for: 0).isEmpty)
        for path in [a, peer, noisy, elsewhere] { await path.close() }
    }

    @Test func rtcpGoesToItsOwnPortWhenThePeerDoesNotMuxAndIsTakenFromIt() async throws {
        let a = try PlainRTPPath(bindingTo: "127.0.0.1"), rtpPort = try PlainRTPPath(bindingTo: "127.0.0.1")
        let rtcpPort = try PlainRTPPath(bindingTo: "127.0.0.1")
        let atA = Received(a), atRTP = Received(rtpPort), atRTCP = Received(rtcpPort)
        _ = try await a.setRemote(IceCredentials(ufrag: "", pwd: ""),
                                  candidates: [Self.candidate(rtpPort), Self.candidate(rtcpPort, component: 2)], endOfCandidates: true)
        #expect(a.send(Self.rtp(1)) && a.send(Self.rtcp))
        #expect(await atRTP.wait(for: 1) == [Self.rtp(1)])
        #expect(await atRTCP.wait(for: 1) == [Self.rtcp])
        // The peer's RTCP from its RTCP port is the peer's, not a stranger's.
        for path in [rtpPort, rtcpPort] {
            _ = try await path.setRemote(IceCredentials(ufrag: "", pwd: ""), candidates: [Self.candidate(a)], endOfCandidates: true)
        }
        #expect(rtpPort.send(Self.rtp(2)) && rtcpPort.send(Self.rtcp))
        #expect(await atA.wait(for: 2).count == 2)
        #expect(a.droppedFromStrangers == 0)
        for path in [a, rtpPort, rtcpPort] { await path.close() }
    }

    /// SIP calls' paths keep no thread each: however many are open, one thread of the process
    /// (the socket watcher's) reads them all until their media polls them.
    @Test func manyPathsShareOneReaderThread() async throws {
        let paths = try (0..<24).map { _ in try PlainRTPPath(bindingTo: "127.0.0.1") }
        let sender = try PlainRTPPath(bindingTo: "127.0.0.1")
        let received = paths.map { Received($0) }
        for (index, path) in paths.enumerated() {
            _ = try await sender.setRemote(IceCredentials(ufrag: "", pwd: ""), candidates: [Self.candidate(path)], endOfCandidates: true)
            #expect(sender.send(Self.rtp(UInt8(index))))
            #expect(await received[index].wait(for: 1) == [Self.rtp(UInt8(index))], "path \(index) heard nothing")
        }
        let readers = Self.threads(named: "callnode-rtp")
        #expect(readers == 1, "\(readers) threads read RTP for \(paths.count + 1) paths")
        for path in paths + [sender] { await path.close() }
    }

    /// The threads of this process whose name is `name`.
    static func threads(named name: String) -> Int {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.filter { task in
            (try? String(contentsOfFile: "/proc/self/task/\(task)/comm", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) == name
        }.count
    }

    @Test func anAddressThatIsNotThisHostsIsAClearError() {
        #expect(throws: IceError.self) { _ = try PlainRTPPath(bindingTo: "not-an-address") }
        #expect(throws: IceError.self) { _ = try PlainRTPPath(bindingTo: "192.0.2.123") }
        #expect(PlainRTPPath.localAddress(toward: "127.0.0.1") == "127.0.0.1")
    }

    @Test func twoSocketAddressesAreTheSameOnlyForTheSameFamilyAddressAndPort() throws {
        func address(_ host: String, _ port: UInt16) throws -> sockaddr_storage {
            var storage = sockaddr_storage()
            _ = try #require(PlainRTPPath.fill(&storage, address: host, port: port))
            return storage
        }
        #expect(PlainRTPPath.same(try address("127.0.0.1", 4000), try address("127.0.0.1", 4000)))
        #expect(!PlainRTPPath.same(try address("127.0.0.1", 4000), try address("127.0.0.1", 4001)), "another port")
        #expect(!PlainRTPPath.same(try address("127.0.0.1", 4000), try address("127.0.0.2", 4000)), "another address")
        #expect(PlainRTPPath.same(try address("[2001:db8::1]", 4000), try address("2001:db8::1", 4000)))
        #expect(!PlainRTPPath.same(try address("2001:db8::1", 4000), try address("2001:db8::2", 4000)))
        #expect(!PlainRTPPath.same(try address("2001:db8::1", 4000), try address("2001:db8::1", 4002)))
        #expect(!PlainRTPPath.same(try address("::ffff:127.0.0.1", 4000), try address("127.0.0.1", 4000)), "another family")
        // What lies in the storage past the address (a stale longer address before) does not count.
        var reused = try address("2001:db8::ffff", 9)
        _ = PlainRTPPath.fill(&reused, address: "10.0.0.1", port: 5)
        #expect(PlainRTPPath.same(reused, try address("10.0.0.1", 5)))
    }
}
