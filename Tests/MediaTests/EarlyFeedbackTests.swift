import CallNodeTestSupport
import Media
import RTP
import Testing

/// Early RTCP feedback (RFC 4585 §3.5): loss that starts on a clean path is reported at once,
/// so the sender's redundancy grows within a fraction of a second of it.
@Suite struct EarlyFeedbackTests {
    /// Frames from the start of 30 % loss (after 3 s clean) until the sender sends three copies.
    static func framesUntilDepthThree(early: Int?) async throws -> Int {
        var configuration = MediaActorTests.redundant(.adaptive)
        configuration.earlyReportAfterPackets = early
        let call = try MediaActorTests.makeCall(source: WAVFileSource(samples: SyntheticSpeech.samples(seconds: 4), format: AudioFormat(), loops: true),
                                                sink: NullSink(), seed: 3, configuration: configuration)
        try await call.a.start()
        try await call.b.start()
        // Clean for 3 s, with the reports landing mid-interval from the loss's point of view.
        await call.clock.advance(frames: 160)
        call.link.setConditions(LinkConditions(loss: 0.3), fromA: true)
        var frames = 0
        while await call.a.statistics.redundancyDepth < 3 && frames < 500 {
            await call.clock.advance()
            frames += 1
        }
        await call.a.stop()
        await call.b.stop()
        return frames
    }

    @Test func lossOnACleanPathIsReportedAtOnceAndTheCopiesFollow() async throws {
        let early = try await Self.framesUntilDepthThree(early: 10)
        let onInterval = try await Self.framesUntilDepthThree(early: nil)
        // At least ten packets of the interval, then the report: well within half a second.
        #expect(early <= 20, "three copies \(early * 20) ms after the loss began")
        // Without it the report waits for its interval (up to a second).
        #expect(onInterval > early + 10, "on the interval: \(onInterval * 20) ms; early: \(early * 20) ms")
    }
}

/// The early report crosses the lossy path it reports on; when it is lost, the copies must not
/// wait for the next regular report.
@Suite struct LostEarlyReportTests {
    /// Frames from the loss's start until three copies, when everything B sends back is lost
    /// for the first `blackout` frames of it (the early report among it).
    static func framesUntilDepthThree(blackout: Int) async throws -> (frames: Int, early: Int) {
        let configuration = MediaActorTests.redundant(.adaptive)
        let call = try MediaActorTests.makeCall(source: WAVFileSource(samples: SyntheticSpeech.samples(seconds: 4), format: AudioFormat(), loops: true),
                                                sink: NullSink(), seed: 3, configuration: configuration)
        try await call.a.start()
        try await call.b.start()
        await call.clock.advance(frames: 160)
        call.link.setConditions(LinkConditions(loss: 0.3), fromA: true)
        call.link.setConditions(LinkConditions(loss: 1), fromA: false)
        var frames = 0
        while await call.a.statistics.redundancyDepth < 3 && frames < 500 {
            if frames == blackout { call.link.setConditions(LinkConditions(), fromA: false) }
            await call.clock.advance()
            frames += 1
        }
        await call.a.stop()
        await call.b.stop()
        return (frames, blackout)
    }

    @Test func aLostEarlyReportIsSentAgainWhileTheCopiesDoNotFollow() async throws {
        // The first early report goes out after ten packets of the loss (frame ~10-14): black
        // out the way back until frame 20, so it is lost.
        let result = try await Self.framesUntilDepthThree(blackout: 20)
        // Sent again ten packets later (~frame 25-30), it arrives: three copies well before
        // the regular report a second after the first early one (~frame 60).
        #expect(result.frames <= 40, "three copies \(result.frames * 20) ms after the loss began")
    }
}
