import CallNode
import CallNodeTestKit
import ICE
import Locking
import Testing

/// A path calls its datagram receiver once per packet, for the whole call. The receiver must cost
/// the same on the last packet as on the first: a closure kept directly as a locked generic value
/// was wrapped in one more reabstraction thunk on every read, so each packet ran through a chain
/// of thunks that grew by two a packet (CPU rising through a call, and a deep enough chain
/// overflows the receiving thread's stack). The receiver notes the stack address it runs at;
/// a growing chain moves it down by tens of bytes per packet.
@Suite struct ReceiverDepthTests {
    /// Where the receiver ran: the address of one of its locals, first and last time.
    final class DepthProbe: Sendable {
        private let state = Locked((first: UInt?.none, last: UInt(0), calls: 0))
        func note() {
            var local = 0
            let address = withUnsafeMutablePointer(to: &local) { UInt(bitPattern: $0) }
            state.withLock { s in
                if s.first == nil { s.first = address }
                s.last = address
                s.calls += 1
            }
        }
        var calls: Int { state.withLock { $0.calls } }
        /// How far below the first call's frame the last call's ran (bytes).
        var drift: Int { state.withLock { s in Int(bitPattern: s.first ?? 0) - Int(bitPattern: s.last) } }
    }

    @Test func theInMemoryLinkCallsItsReceiverAtTheSameDepthOnTheLastPacketAsOnTheFirst() async throws {
        let link = InMemoryMediaLink(clock: MediaClock())
        let probe = DepthProbe()
        link.b.setReceiveHandler { _ in probe.note() }
        for _ in 0..<5_000 { await link.a.send([0x80, 0, 0, 1]) }
        #expect(probe.calls == 5_000)
        #expect(abs(probe.drift) < 256, "the receiver ran \(probe.drift) bytes deeper after 5 000 packets")
    }

    @Test func libnicesPortCallsItsReceiverAtTheSameDepthOnTheLastPacketAsOnTheFirst() async throws {
        let (a, b) = try await LoopbackAgents.connectedPair()
        let sender = try #require(a.datagramPort), receiver = try #require(b.datagramPort)
        let probe = DepthProbe()
        receiver.setReceiver { _ in probe.note() }
        // In bursts a loopback socket's buffer takes whole, until enough arrived (bounded).
        let deadline = ContinuousClock.now + .seconds(20)
        var sent = 0
        while probe.calls < 2_000 && ContinuousClock.now < deadline {
            for _ in 0..<50 { sender.send([0x80, 0, 0, 1]) }
            sent += 50
            try await Task.sleep(for: .milliseconds(5))
        }
        receiver.setReceiver(nil)
        await a.close()
        await b.close()
        #expect(probe.calls >= 2_000, "\(probe.calls) of \(sent) datagrams arrived")
        #expect(abs(probe.drift) < 1_024, "the receiver ran \(probe.drift) bytes deeper after \(probe.calls) datagrams")
    }
}
