import MediaTiming
import CallNodeTestKit
import Media
import RTP
import Testing

/// A stall of the sender's host on a clean path: what it sends for 40 ms arrives together when
/// the stall ends (a loaded host's late ticks). On the manual clock, two calls with the same
/// speech, one with the stall and one without, play the same samples but where the stall is.
@Suite struct SenderStallTests {
    /// The callee's playout, a frame per tick, with a stall of the caller of `stallTicks` ticks
    /// (20 ms each) `stallAt` ticks into the call when given; and the callee's statistics at the end.
    static func played(ticks: Int, stallAt: Int?, stallTicks: Int = 2) async throws -> (frames: [[Int16]], stats: MediaStatistics) {
        let sink = ManualAudioEndpoint()
        let call = try MediaActorTests.makeCall(source: WAVFileSource(samples: SyntheticSpeech.samples(seconds: 4), format: AudioFormat(), loops: true),
                                                sink: sink)
        try await call.a.start()
        try await call.b.start()
        var frames: [[Int16]] = []
        for tick in 0..<ticks {
            if let stallAt {
                // Sent during the stall's ticks: all arrive together as it ends.
                let left = stallAt + stallTicks - tick
                let delay: Duration = tick >= stallAt && left > 0 ? .milliseconds(20 * Int64(left)) : .zero
                call.link.setConditions(LinkConditions(delay: delay), fromA: true)
            }
            await call.clock.advance()
            frames.append(sink.pullPlayback(maximum: 960))
        }
        let stats = await call.b.statistics
        await call.a.stop()
        await call.b.stop()
        return (frames, stats)
    }

    @Test func aStallAfterACleanStretchCostsOneConcealedFrameAndPlayoutCatchesTheStreamExactly() async throws {
        let clean = try await Self.played(ticks: 220, stallAt: nil)
        let stalled = try await Self.played(ticks: 220, stallAt: 150)
        // Nothing held, nothing lost: one frame concealed in place, its packet counted late.
        let jb = stalled.stats.jitterBuffer
        #expect(jb.concealed == 1 && jb.late == 1 && jb.lost == 0, "\(jb)")
        #expect(jb.stretched == 0 && jb.expanded == 0 && jb.compressed == 0, "\(jb)")
        #expect(clean.stats.jitterBuffer.concealed == 0 && clean.stats.jitterBuffer.late == 0)
        // The same delay before and after the stall: the frames line up tick for tick.
        #expect(stalled.frames.count == clean.frames.count)
        let differing = stalled.frames.indices.filter { stalled.frames[$0] != clean.frames[$0] }
        let first = try #require(differing.first, "the stall changed nothing played")
        #expect(first >= 150, "frames before the stall differ: \(differing)")
        // The concealed frame and the one faded into the stream differ; from the next frame the
        // decoder's state is the stream's again (the late packet decoded from its state before
        // the concealment), so what plays is exactly what the clean call played. A decoder left
        // with its own concealment's state plays quieter, then louder frames for a while.
        #expect(differing.count <= 2 && differing.last == first + differing.count - 1, "frames that differ: \(differing)")
    }

    @Test func aLongerStallIsConcealedFrameByFrameAndPlayoutCatchesTheStreamExactly() async throws {
        let clean = try await Self.played(ticks: 220, stallAt: nil)
        let stalled = try await Self.played(ticks: 220, stallAt: 150, stallTicks: 3)
        // 60 ms: its frames concealed in place, none held, nothing lost; each packet counted late.
        let jb = stalled.stats.jitterBuffer
        #expect(jb.concealed >= 2 && jb.late == jb.concealed && jb.lost == 0, "\(jb)")
        #expect(jb.stretched == 0 && jb.expanded == 0 && jb.compressed == 0, "\(jb)")
        #expect(stalled.frames.count == clean.frames.count)
        // The late packets go to the decoder from its state before the first concealed frame:
        // after the concealed frames and the one faded into the stream, what plays is exactly
        // what the clean call played. (Its state kept again at the second frame concealed, the
        // decoder would go on from a concealment's state and differ for several frames more.)
        let differing = stalled.frames.indices.filter { stalled.frames[$0] != clean.frames[$0] }
        let first = try #require(differing.first, "the stall changed nothing played")
        #expect(first >= 150, "frames before the stall differ: \(differing)")
        #expect(differing.count <= jb.concealed + 1 && differing.last == first + differing.count - 1, "frames that differ: \(differing)")
    }
}
