import Media
import RTP
import Testing

/// Redundancy at the start of a call, before the peer's first report has said what the path
/// loses: three copies per packet from the first frame, then what the reports ask for.
@Suite struct RedundancyStartTests {
    /// A call of looped speech from A to B: for each of `steps` frame counts, advanced by that
    /// many frames, what A sends and what B's jitter buffer did.
    static func run(_ configuration: MediaConfiguration, conditions: LinkConditions = LinkConditions(), seed: UInt64 = 1,
                    steps: [Int]) async throws -> [(sender: MediaStatistics, receiver: JitterBufferStatistics)] {
        let call = try MediaActorTests.makeCall(source: WAVFileSource(samples: SyntheticSpeech.samples(seconds: 4), format: AudioFormat(), loops: true),
                                                sink: NullSink(), conditions: conditions, seed: seed, configuration: configuration)
        try await call.a.start()
        try await call.b.start()
        var seen: [(sender: MediaStatistics, receiver: JitterBufferStatistics)] = []
        for frames in steps {
            await call.clock.advance(frames: frames)
            seen.append((await call.a.statistics, await call.b.statistics.jitterBuffer))
        }
        await call.a.stop()
        await call.b.stop()
        return seen
    }

    @Test func aCallStartsWithThreeCopiesAndItsFirstCleanReportTakesItToOne() async throws {
        let seen = try await Self.run(MediaActorTests.redundant(.adaptive), steps: [5, 50])
        let first = seen[0].sender, reported = seen[1].sender
        #expect(first.sendingRedundancy && first.redundancyDepth == 3, "first frames: depth \(first.redundancyDepth)")
        #expect(reported.sendingRedundancy && reported.redundancyDepth == 1, "after a clean report: depth \(reported.redundancyDepth)")
    }

    @Test func aBrowserPeerGetsTheOneCopyItTakesFromTheStart() async throws {
        var configuration = MediaActorTests.redundant(.adaptive)
        configuration.maximumRedundancyDepth = 1
        let seen = try await Self.run(configuration, steps: [5])
        #expect(seen[0].sender.redundancyDepth == 1)
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
                let seen = try await Self.run(configuration, conditions: LinkConditions(loss: 0.3), seed: seed, steps: [150])
                concealed[depth, default: 0] += seen[0].receiver.concealed
            }
        }
        #expect(concealed[3, default: 0] < concealed[1, default: 0], "concealed in the first 3 s, by first depth: \(concealed)")
    }
}
