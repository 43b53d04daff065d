import CallNode
import CallNodeTestKit
import Testing

/// The whole media path on real parts: libnice ICE on loopback, SRTP, Opus, and the real-time
/// media clock. Checks outcomes (audio arrived, reports flowed), not timings.
extension RealTimeTests {
@Suite(.serialized) struct MediaOverIceTests {
    @Test func aToneCrossesRealICEWithSRTPBothWays() async throws {
        let (iceA, iceB) = try await LoopbackAgents.connectedPair()

        let clock = MediaClock()
        let keyA = SRTPKey.random(), keyB = SRTPKey.random(suite: .aeadAES128GCM)
        let sinkA = ManualAudioEndpoint(), sinkB = ManualAudioEndpoint()
        let a = try MediaActor(transport: IceMediaTransport(agent: iceA), keys: MediaKeys(outbound: keyA, inbound: keyB),
                               source: ToneSource(frequency: 440), sink: sinkA, clock: clock)
        let b = try MediaActor(transport: IceMediaTransport(agent: iceB), keys: MediaKeys(outbound: keyB, inbound: keyA),
                               source: ToneSource(frequency: 880), sink: sinkB, clock: clock)
        try await a.start()
        try await b.start()
        let ticking = Task { await clock.run() }
        // Wait for outcomes, bounded: both sides hear the other and have a round-trip time.
        let deadline = ContinuousClock.now + .seconds(20)
        var statsA = await a.statistics, statsB = await b.statistics
        while (statsA.roundTripTime == nil || statsB.roundTripTime == nil || statsA.receiveLevel < -20 || statsB.receiveLevel < -20)
                && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(100))
            statsA = await a.statistics
            statsB = await b.statistics
        }
        ticking.cancel()
        await a.stop()
        await b.stop()
        await iceA.close()
        await iceB.close()

        #expect(statsA.packetsReceived > 20 && statsB.packetsReceived > 20)
        #expect(statsA.receiveLevel > -20, "A hears B at \(statsA.receiveLevel) dBFS")
        #expect(statsB.receiveLevel > -20, "B hears A at \(statsB.receiveLevel) dBFS")
        #expect(statsA.roundTripTime != nil && statsB.roundTripTime != nil)
        #expect(statsA.authenticationFailures == 0 && statsB.authenticationFailures == 0)
        #expect(sinkB.playbackAvailable > 0)
    }

    /// On loopback a round trip takes well under a millisecond, and RTCP says so: a datagram
    /// is stamped when it reached the host (the kernel's stamp), not when the media tick read
    /// it (which added up to a frame on each side: 16–40 ms reported on loopback).
    @Test func theRoundTripOnLoopbackIsMeasuredAsNearZero() async throws {
        let (iceA, iceB) = try await LoopbackAgents.connectedPair()
        let clock = MediaClock()
        let keyA = SRTPKey.random(), keyB = SRTPKey.random()
        let a = try MediaActor(transport: IceMediaTransport(agent: iceA), keys: MediaKeys(outbound: keyA, inbound: keyB),
                               source: ToneSource(frequency: 440), sink: ManualAudioEndpoint(), clock: clock)
        let b = try MediaActor(transport: IceMediaTransport(agent: iceB), keys: MediaKeys(outbound: keyB, inbound: keyA),
                               source: ToneSource(frequency: 880), sink: ManualAudioEndpoint(), clock: clock)
        try await a.start()
        try await b.start()
        let ticking = Task { await clock.run() }
        // Reports every second or so, from when both read on their ticks (after the first audio).
        var rtts: [Duration] = []
        for _ in 0..<40 {
            try await Task.sleep(for: .milliseconds(100))
            for actor in [a, b] {
                if let rtt = await actor.statistics.roundTripTime { rtts.append(rtt) }
            }
        }
        ticking.cancel()
        await a.stop()
        await b.stop()
        await iceA.close()
        await iceB.close()
        let late = rtts.suffix(20)
        #expect(late.count == 20)
        #expect(late.allSatisfy { $0 < .milliseconds(5) }, "round trips on loopback: \(late.map { "\($0)" })")
    }
}
}
