import CallNodeTestSupport
import Foundation
@testable import Media
@testable import RTP
import Testing

/// Time-stretching: decoded speech lengthened or shortened by one pitch period, seamlessly, and
/// the playout delay moved that way instead of by frames dropped or inserted.
@Suite struct TimeStretcherTests {
    static func tone(_ frequencies: [Double], count: Int, from start: Int = 0) -> [Int16] {
        (start..<(start + count)).map { i in
            let t = Double(i) / 48_000
            return Int16(frequencies.enumerated().reduce(0.0) { sum, item in
                sum + 8_000 / Double(item.offset + 1) * sin(2 * .pi * item.element * t)
            })
        }
    }

    @Test(arguments: [200.0, 150.0])
    func lengtheningAVoicedFrameRepeatsOnePeriodSeamlessly(pitch: Double) {
        let stretcher = TimeStretcher(frameSamples: 960, sampleRate: 48_000)
        let voice = [pitch, 2 * pitch, 3 * pitch]
        let frame = Self.tone(voice, count: 960)
        let longer = stretcher.lengthened(frame)
        let period = Int((48_000 / pitch).rounded())
        #expect(longer.count == 960 + period, "\(longer.count)")
        // One period inserted into a periodic signal: the same signal, continuing in phase.
        let ideal = Self.tone(voice, count: longer.count)
        let worst = zip(longer, ideal).map { abs(Int($0) - Int($1)) }.max() ?? 0
        #expect(worst <= 16, "off the ideal by \(worst)")
    }

    @Test func shorteningTwoVoicedFramesRemovesOnePeriodSeamlessly() {
        let stretcher = TimeStretcher(frameSamples: 960, sampleRate: 48_000)
        let frames = Self.tone([200, 400, 600], count: 1_920)
        let shorter = stretcher.shortened(frames)
        #expect(shorter.count == 1_920 - 240)
        let ideal = Self.tone([200, 400, 600], count: shorter.count)
        let worst = zip(shorter, ideal).map { abs(Int($0) - Int($1)) }.max() ?? 0
        #expect(worst <= 16, "off the ideal by \(worst)")
    }

    /// The coarse-then-fine period search finds a period that matches the signal as well as
    /// trying every lag at the full rate does: on voices from 100 to 400 Hz and on every
    /// frame of two seconds of speech-like audio.
    @Test func theCoarseSearchFindsAPeriodAsGoodAsTheExhaustiveOne() {
        let stretcher = TimeStretcher(frameSamples: 960, sampleRate: 48_000)
        #expect(stretcher.decimation == 4)
        func score(_ x: [Int16], _ lag: Int) -> Double {
            var dot = 0.0, a = 0.0, b = 0.0
            for i in stride(from: 0, to: stretcher.maximumPeriod, by: 2) {
                let u = Double(x[i]), v = Double(x[i + lag])
                dot += u * v; a += u * u; b += v * v
            }
            return a > 0 && b > 0 ? dot / (a * b).squareRoot() : 0
        }
        for pitch in [100.0, 133.0, 200.0, 250.0, 310.0, 400.0] {
            let frame = Self.tone([pitch, 2 * pitch, 3 * pitch], count: 960)
            let found = stretcher.bestPeriod(frame, from: 0)
            let period = 48_000 / pitch
            // The pitch period itself, or (below 160 Hz, the search's window being 10 ms) a
            // multiple of it: never a lag between.
            let multiple = Double(found) / period
            #expect(abs(multiple - multiple.rounded()) * period <= 1.5, "\(pitch) Hz: \(found)")
            if pitch >= 200 { #expect(abs(Double(found) - period) <= 1.5, "\(pitch) Hz: \(found)") }
        }
        let speech = SyntheticSpeech.samples(seconds: 2, seed: 3)
        // Voiced frames (the exhaustive search finds a lag at which the frame repeats itself);
        // in the rest no lag matches, and any does as well as another.
        var voiced = 0, worse: [Int] = []
        for start in stride(from: 0, to: speech.count - 960, by: 960) {
            let frame = Array(speech[start..<(start + 960)])
            let exhaustive = TimeStretcher.bestLag(frame, from: 0, lags: stretcher.minimumPeriod...stretcher.maximumPeriod,
                                                   window: stretcher.maximumPeriod, step: 2)
            guard score(frame, exhaustive) >= 0.5 else { continue }
            voiced += 1
            if score(frame, stretcher.bestPeriod(frame, from: 0)) < score(frame, exhaustive) - 0.05 { worse.append(start / 960) }
        }
        #expect(voiced >= 20, "only \(voiced) voiced frames: the check says little")
        #expect(worse.isEmpty, "frames \(worse) of \(voiced) voiced got a clearly worse period than the exhaustive search's")
    }

    @Test func noiseChangesLengthByAPeriodWithoutClicks() {
        var rng = SplitMix64(seed: 5)
        let noise = (0..<1_920).map { _ in Int16(Int(rng.next() % 4_001) - 2_000) }
        let stretcher = TimeStretcher(frameSamples: 960, sampleRate: 48_000)
        let longer = stretcher.lengthened(Array(noise[0..<960])), shorter = stretcher.shortened(noise)
        #expect((960 + 120...960 + 480).contains(longer.count))
        #expect((1_920 - 480...1_920 - 120).contains(shorter.count))
        // A cross-fade of two stretches of noise stays within the noise's own range.
        #expect(longer.allSatisfy { abs(Int($0)) <= 2_000 } && shorter.allSatisfy { abs(Int($0)) <= 2_000 })
    }

    @Test func theBacklogPlaysAWholeFrameOnItsOwn() {
        var stretcher = TimeStretcher(frameSamples: 960, sampleRate: 48_000)
        stretcher.push([Int16](repeating: 7, count: 1_200))
        #expect(stretcher.hasWholeFrame)
        var frame = [Int16](repeating: 0, count: 960)
        stretcher.take(into: &frame)
        #expect(frame.allSatisfy { $0 == 7 } && stretcher.backlogSamples == 240 && !stretcher.hasWholeFrame)
        stretcher.take(into: &frame)
        #expect(frame[0..<240].allSatisfy { $0 == 7 } && frame[240...].allSatisfy { $0 == 0 })
    }

    /// A call under 10 % loss with redundancy: when the first losses make the buffer hold more
    /// delay, a time-stretching receiver lengthens frames (and plays the built-up frame on its
    /// own) instead of inserting concealed frames into the tone; a receiver without it inserts
    /// them. Every frame the stretching receiver plays carries the tone, save those lost for good.
    @Test func theDelayGrowsByStretchingTheToneNotByFramesInserted() async throws {
        var results: [Bool: (jb: JitterBufferStatistics, quiet: Int)] = [:]
        for stretching in [true, false] {
            var configuration = MediaConfiguration()
            configuration.redundancyPayloadType = 63
            configuration.timeStretching = stretching
            let sink = ManualAudioEndpoint(bufferDuration: .seconds(8))
            let call = try MediaActorTests.makeCall(source: ToneSource(frequency: 440, amplitude: 0.3), sink: sink,
                                                    conditions: LinkConditions(loss: 0.1), seed: 21, configuration: configuration)
            try await call.a.start()
            try await call.b.start()
            await call.clock.advance(frames: 300)
            let jb = await call.b.statistics.jitterBuffer
            await call.a.stop()
            await call.b.stop()
            let played = sink.pullPlayback(maximum: sink.playbackAvailable)
            // Frames (after the first half second) in which the tone is missing or faint.
            let frames = stride(from: 24_000, to: played.count - 960, by: 960).map { Goertzel.power(of: 440, in: played[$0..<($0 + 960)]) }
            let typical = frames.sorted()[frames.count / 2]
            results[stretching] = (jb, frames.filter { $0 < typical / 4 }.count)
        }
        let stretched = try #require(results[true]), framed = try #require(results[false])
        #expect(stretched.jb.expanded > 0, "\(stretched.jb)")
        #expect(stretched.jb.shrunk == 0 && stretched.jb.stretched <= 1, "one frame held at the first gap at most: \(stretched.jb)")
        #expect(framed.jb.stretched > stretched.jb.stretched, "without stretching, frames are inserted: \(framed.jb)")
        #expect(stretched.jb.lost == stretched.jb.redundancyRecovered + stretched.jb.fecRecovered + stretched.jb.concealed)
        #expect(stretched.quiet <= stretched.jb.concealed + stretched.jb.stretched, "\(stretched.quiet) frames without the tone: \(stretched.jb)")
    }

    /// A move of the delay is made where it is not heard when it can be: at once in a quiet
    /// frame, a whole frame's worth. In speech a longer delay moves a period per frame at once
    /// (the copies it holds for are needed now); a shorter one waits for a quiet frame first.
    @Test func aQuietFrameTakesTheWholeMoveAndAShorterDelayWaitsForOne() {
        var stretcher = TimeStretcher(frameSamples: 960, sampleRate: 48_000)
        let loud = Self.tone([200, 400, 600], count: 960)
        let quiet = loud.map { $0 / 20 }  // 26 dB under the speech
        func plan(_ adjustment: DelayAdjustment, _ frame: [Int16]) -> TimeStretcher.Stretch { stretcher.plan(adjustment, for: frame) }
        func isQuiet(_ frame: [Int16]) -> Bool { stretcher.isQuiet(frame) }
        #expect(plan(.none, loud) == .none)
        #expect(plan(.grow, quiet) == .wholeFrame)
        #expect(plan(.grow, loud) == .period)
        #expect(plan(.shrink, quiet) == .wholeFrame)
        for frame in 0..<TimeStretcher.shrinkWait { #expect(plan(.shrink, loud) == .none, "frame \(frame)") }
        #expect(plan(.shrink, loud) == .period)
        #expect(plan(.shrink, loud) == .period)
        #expect(plan(.shrink, quiet) == .wholeFrame)
        // A move no longer wanted forgets the wait.
        #expect(plan(.shrink, loud) == .none)
        #expect(plan(.none, loud) == .none)
        #expect(plan(.shrink, loud) == .none)
        // Quiet is against the speech heard lately: 10 dB under it is still speech.
        #expect(!isQuiet(loud.map { $0 / 3 }))
        #expect(isQuiet([Int16](repeating: 0, count: 960)))
    }

    @Test func aQuietFrameLengthensAndShortensByAWholeFrameWithoutAJump() {
        let stretcher = TimeStretcher(frameSamples: 960, sampleRate: 48_000)
        var rng = SplitMix64(seed: 9)
        let hiss = (0..<960).map { _ in Int16(Int(rng.next() % 201) - 100) }
        let longer = stretcher.lengthenedByAFrame(hiss)
        #expect(longer.count == 1_920)
        // It starts as the frame does and ends as it does (the next frame follows on without a
        // jump), and the cross-fades stay within the hiss's own level.
        #expect(Array(longer.prefix(480)) == Array(hiss.prefix(480)))
        #expect(Array(longer.suffix(480)) == Array(hiss.suffix(480)))
        #expect(longer.allSatisfy { abs(Int($0)) <= 100 })
        let next = hiss.reversed().map { $0 / 2 }
        let shorter = stretcher.shortenedByAFrame(hiss + next)
        #expect(shorter.count == 960)
        #expect(abs(Int(shorter[0]) - Int(hiss[0])) <= 1 && abs(Int(shorter[959]) - Int(next[959])) <= 1)
    }

    /// Syllables with pauses (180 ms bursts of a voiced tone, 300 ms apart) through a path
    /// whose jitter made the buffer hold 100 ms and then calms: the delay comes down in the
    /// pauses — every burst afterwards plays as long as it was spoken, none is shortened by a
    /// period in its middle (as when each frame over the target was shortened, speech or not).
    @Test func aShorterDelayComesInThePausesAndTheBurstsKeepTheirLength() async throws {
        let burst = 8_640, pause = 14_400
        let voice = Self.tone([200, 400, 600], count: burst).map { Int16(Double($0) * 0.6) }
        let speech = voice + [Int16](repeating: 0, count: pause)
        var configuration = MediaConfiguration()
        configuration.timeStretching = true
        let sink = ManualAudioEndpoint(bufferDuration: .seconds(20))
        let call = try MediaActorTests.makeCall(source: WAVFileSource(samples: speech, format: AudioFormat(), loops: true), sink: sink,
                                                conditions: LinkConditions(jitter: .milliseconds(90)), seed: 21, configuration: configuration)
        try await call.a.start()
        try await call.b.start()
        await call.clock.advance(frames: 250)
        let held = await call.b.statistics.jitterBuffer
        _ = sink.pullPlayback(maximum: sink.playbackAvailable)
        call.link.setConditions(LinkConditions(), fromA: true)
        await call.clock.advance(frames: 750)
        let jb = await call.b.statistics.jitterBuffer
        await call.a.stop()
        await call.b.stop()
        let played = sink.pullPlayback(maximum: sink.playbackAvailable)
        // Each burst's length: from the first to the last 2.5 ms window loud at half the voice's
        // level or more.
        let window = 120
        let loud = stride(from: 0, to: played.count - window, by: window).map { start in
            (played[start..<(start + window)].map { Double($0) * Double($0) }.reduce(0, +) / Double(window)).squareRoot() > 1_500
        }
        var lengths: [Int] = [], run = 0
        for isLoud in loud {
            if isLoud { run += 1 } else if run > 0 { lengths.append(run * window); run = 0 }
        }
        let whole = lengths.dropFirst().dropLast()  // the first and last may be cut by the switch and the end
        #expect(held.currentDelay >= .milliseconds(60), "the jitter never made the buffer hold more: \(held)")
        #expect(jb.compressed > held.compressed && jb.currentDelay < held.currentDelay - .milliseconds(30), "the delay never came down: \(held) → \(jb)")
        #expect(whole.count >= 20, "\(lengths)")
        let shortened = whole.filter { abs($0 - burst) > window * 2 }
        #expect(shortened.isEmpty, "bursts of \(shortened) samples (spoken \(burst)): \(jb)")
    }
}
