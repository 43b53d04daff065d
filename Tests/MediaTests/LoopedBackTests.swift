import MediaTiming
import CallNodeTestKit
import Locking
import Media
import Testing

/// A peer that sends a call's own packets back to it (an echo test, SIPp's `-rtp_echo`): the
/// call's own stream is not the peer's, so it is dropped and counted, and the peer's stream
/// plays on instead of restarting at every packet as a "new source".
@Suite struct LoopedBackTests {
    /// Passes everything to and from `inner`, and hands each datagram sent straight back to
    /// the sender's own receiver as well.
    final class Echoing: MediaTransport {
        let inner: any MediaTransport
        private let handler = Locked<(@Sendable (UnsafeRawBufferPointer) -> Void)?>(nil)
        init(_ inner: any MediaTransport) { self.inner = inner }
        nonisolated(nonsending) func send(_ datagram: [UInt8]) async {
            await inner.send(datagram)
            if let handler = handler.withLock({ $0 }) { datagram.withUnsafeBytes { handler($0) } }
        }
        func setReceiveHandler(_ handler: (@Sendable (UnsafeRawBufferPointer) -> Void)?) {
            self.handler.withLock { $0 = handler }
            inner.setReceiveHandler(handler)
        }
    }

    @Test func aCallsOwnPacketsSentBackAreDroppedAndThePeerPlaysOn() async throws {
        let clock = MediaClock.manual()
        let link = InMemoryMediaLink(clock: clock)
        clock.add(link)
        var configuration = MediaConfiguration()
        configuration.encoding = .pcmu
        configuration.payloadType = 0
        // Plain RTP, as with a SIP peer: nothing else would tell its packets from the peer's.
        let plain = MediaKeys(outbound: nil, inbound: nil)
        let a = try MediaActor(configuration: configuration, transport: link.a, keys: plain,
                               source: ToneSource(frequency: 1_000, amplitude: 0.5), sink: NullSink(), clock: clock)
        let b = try MediaActor(configuration: configuration, transport: Echoing(link.b), keys: plain,
                               source: ToneSource(frequency: 440, amplitude: 0.5), sink: NullSink(), clock: clock)
        try await a.start()
        try await b.start()
        await clock.advance(frames: 150)
        let stats = await b.statistics
        await a.stop()
        await b.stop()
        #expect(stats.loopedBack >= 140, "\(stats.loopedBack) of B's own packets came back and were dropped")
        #expect(stats.jitterBuffer.packetsPlayed >= 140, "B played \(stats.jitterBuffer.packetsPlayed) of A's 150 frames")
        #expect(stats.receiveLevel > -20, "B hears A at \(stats.receiveLevel) dB")
        // A hears B as ever (nothing comes back to it).
        #expect(await a.statistics.loopedBack == 0)
    }
}
