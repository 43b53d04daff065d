import Foundation
import Glibc
@testable import ICE
import Locking
import Testing

/// What the peer sees of an agent's checks and media, on a plain UDP socket: the role a
/// check claims (an agent made ahead of a call, as a pool makes them, may have to change it
/// after gathering), and where an agent that took its peer's pair sends.
@Suite struct IcePeerPairTests {
    static let peerCredentials = IceCredentials(ufrag: "peer", pwd: "0123456789abcdefghijkl")

    /// An agent made controlling and switched before it gathered checks as controlled; once it
    /// has gathered, the switch is refused rather than silently not made. (libnice reads the
    /// new role back at once but keeps checking in the role it gathered in: both sides of a
    /// node's outgoing call claimed control, and through loss the conflict cost seconds.)
    @Test(arguments: [false, true])
    func theRoleAnAgentChecksInIsTheOneItTook(gatheredFirst: Bool) async throws {
        let agent = try await IceAgent(configuration: IceAgentTests.configuration(.controlling))
        if gatheredFirst {
            let gathering = try await agent.gather()
            for await _ in gathering.candidates {}
            await #expect(throws: IceError.self) { try await agent.setRole(.controlled) }
        } else {
            try await agent.setRole(.controlled)
            let gathering = try await agent.gather()
            for await _ in gathering.candidates {}
        }
        let peer = try UDPPeer()
        try await agent.setRemote(Self.peerCredentials, candidates: [peer.candidate], endOfCandidates: true)
        let check = try #require(await peer.first { STUNRoles.of($0) != nil })
        #expect(STUNRoles.of(check) == (gatheredFirst ? .controlling : .controlled))
        await agent.close()
        peer.stop()
    }

    /// The peer's checks found a pair this side's have not (here: the peer never answers
    /// them): this side takes it, connects, and its media goes to the peer's candidate.
    @Test func anAgentTakesThePairItsPeerFoundAndSendsOnIt() async throws {
        // Its own checks, unanswered, keep the pair checking for half a minute (not libnice's
        // 2.5 s), however slowly a loaded machine runs this test's steps before the peer's pair
        // comes.
        let agent = try await IceAgent(configuration: IceAgentTests.configuration(.controlled) { $0.checkRetransmissions = 6 })
        let events = EventRecorder(agent)
        let gathering = try await agent.gather()
        var locals: [IceCandidate] = []
        for await candidate in gathering.candidates { locals.append(candidate) }
        let local = try #require(locals.first)
        let peer = try UDPPeer()
        // Before the peer's credentials there is no round to take a pair in.
        #expect(await !agent.adoptPeerPair(local: IceEndpoint(local), remote: peer.endpoint, peerUfrag: "peer"))
        try await agent.setRemote(Self.peerCredentials, candidates: [peer.candidate], endOfCandidates: true)
        #expect(await peer.first { STUNRoles.of($0) != nil } != nil, "the agent's own checks go out")

        // A pair of another round (another ufrag), or one whose candidates this round does not
        // know, is not taken.
        #expect(await !agent.adoptPeerPair(local: IceEndpoint(local), remote: peer.endpoint, peerUfrag: "earlier"))
        #expect(await !agent.adoptPeerPair(local: IceEndpoint(local), remote: IceEndpoint(address: "127.0.0.1", port: 9), peerUfrag: "peer"))
        #expect(await agent.state == .checking)

        #expect(await agent.adoptPeerPair(local: IceEndpoint(local), remote: peer.endpoint, peerUfrag: "peer"))
        #expect(await events.wait(for: .connected) != nil, "\(events.states)")
        let selected = try #require(await agent.selectedPair)
        #expect(IceEndpoint(selected.local) == IceEndpoint(local) && IceEndpoint(selected.remote) == peer.endpoint)
        // Connected: a second pair is not taken over the first.
        #expect(await !agent.adoptPeerPair(local: IceEndpoint(local), remote: peer.endpoint, peerUfrag: "peer"))

        let media = Array("on the peer's pair".utf8)
        try await agent.send(media)
        #expect(await peer.first { $0 == media } != nil)
        await agent.close()
        peer.stop()
    }
}

/// The role a STUN binding request claims (RFC 8445 §7.1.3: ICE-CONTROLLED 0x8029,
/// ICE-CONTROLLING 0x802A); nil for anything else.
enum STUNRoles {
    static func of(_ datagram: [UInt8]) -> IceRole? {
        guard datagram.count >= 20, datagram[0] == 0x00, datagram[1] == 0x01,
              datagram[4...7].elementsEqual([0x21, 0x12, 0xA4, 0x42]) else { return nil }
        var offset = 20
        while offset + 4 <= datagram.count {
            let type = Int(datagram[offset]) << 8 | Int(datagram[offset + 1])
            let length = Int(datagram[offset + 2]) << 8 | Int(datagram[offset + 3])
            if type == 0x8029 { return .controlled }
            if type == 0x802A { return .controlling }
            offset += 4 + (length + 3) / 4 * 4
        }
        return nil
    }
}

/// A peer that is only a UDP socket on 127.0.0.1: it keeps what arrives (read on a thread of
/// its own) and answers nothing.
final class UDPPeer: Sendable {
    private let fd: Int32
    let port: UInt16
    private let received = Locked<[[UInt8]]>([])
    private let stopped = Locked(false)

    init() throws {
        let descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0
            }
        }
        guard descriptor >= 0, bound else { throw IceError.invalidConfiguration("cannot bind a UDP socket on 127.0.0.1") }
        fd = descriptor
        port = UInt16(bigEndian: address.sin_port)
        var timeout = timeval(tv_sec: 0, tv_usec: 50_000)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let fd = self.fd, received = self.received, stopped = self.stopped
        Thread.detachNewThread {
            var buffer = [UInt8](repeating: 0, count: 2048)
            while !stopped.withLock({ $0 }) {
                let count = recv(fd, &buffer, buffer.count, 0)
                if count > 0 { received.withLock { $0.append(Array(buffer.prefix(count))) } }
            }
            close(fd)
        }
    }

    var endpoint: IceEndpoint { IceEndpoint(address: "127.0.0.1", port: port) }
    var candidate: IceCandidate {
        IceCandidate(foundation: "1", component: 1, priority: 2_130_706_431, address: "127.0.0.1", port: port, type: .host)
    }

    /// The first datagram so far or within five seconds that `matches`.
    func first(_ matches: @Sendable ([UInt8]) -> Bool) async -> [UInt8]? {
        let deadline = ContinuousClock.now + .seconds(5)
        while ContinuousClock.now < deadline {
            if let found = received.withLock({ $0.first(where: matches) }) { return found }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return nil
    }

    func stop() { stopped.withLock { $0 = true } }
}
