import Media
import RTP
import Testing

/// Redundancy at the start of a call, before the peer's first report has said what the path
/// loses: three copies per packet from the first frame, then what the reports ask for.
@Suite struct RedundancyStartTests {
    @Test func aCallStartsWithThreeCopiesAndItsFirstCleanReportTakesItToOne() async throws {
        let call = try MediaActorTests.makeCall(source: WAVFileSource(samples: SyntheticSpeech.samples(seconds: 4), format: AudioFormat(), loops: true),
                                                sink: NullSink(), configuration: MediaActorTests.redundant(.adaptive))
        try await call.a.start()
        try await call.b.start()
        await call.clock.advance(frames: 5)
        let first = await call.a.statistics
        await call.clock.advance(frames: 50)
        let reported = await call.a.statistics
        await call.a.stop()
        await call.b.stop()
        #expect(first.sendingRedundancy && first.redundancyDepth == 3, "first frames: depth \(first.redundancyDepth)")
        #expect(reported.sendingRedundancy && reported.redundancyDepth == 1, "after a clean report: depth \(reported.redundancyDepth)")
    }

    @Test func aBrowserPeerGetsTheOneCopyItTakesFromTheStart() async throws {
        var configuration = MediaActorTests.redundant(.adaptive)
        configuration.maximumRedundancyDepth = 1
        let call = try MediaActorTests.makeCall(source: WAVFileSource(samples: SyntheticSpeech.samples(seconds: 4), format: AudioFormat(), loops: true),
                                                sink: NullSink(), configuration: configuration)
        try await call.a.start()
        try await call.b.start()
        await call.clock.advance(frames: 5)
        let first = await call.a.statistics
        await call.a.stop()
        await call.b.stop()
        #expect(first.redundancyDepth == 1)
    }

    /// 30 % random loss from the first packet, five loss patterns: with three copies from the
    /// start, the first three seconds leave fewer frames to concealment than with one (the
    /// receiver's delay is set for three copies at its first loss, not grown again later).
    @Test func underLossFromTheFirstPacketThreeCopiesAtTheStartConcealLess() async throws {
        var concealed: [Int: Int] = [:]
        for depth in [1, 3] {
            for seed in UInt64(1)...5 {
                var configuration = MediaActorTests.redundant(.adaptive)
                configuration.initialRedundancyDepth = depth
                let call = try MediaActorTests.makeCall(source: WAVFileSource(samples: SyntheticSpeech.samples(seconds: 4), format: AudioFormat(), loops: true),
                                                        sink: NullSink(), conditions: LinkConditions(loss: 0.3), seed: seed,
                                                        configuration: configuration)
                try await call.a.start()
                try await call.b.start()
                await call.clock.advance(frames: 150)
                let jb = await call.b.statistics.jitterBuffer
                await call.a.stop()
                await call.b.stop()
                concealed[depth, default: 0] += jb.concealed
            }
        }
        #expect(concealed[3, default: 0] < concealed[1, default: 0], "concealed in the first 3 s, by first depth: \(concealed)")
    }
}
