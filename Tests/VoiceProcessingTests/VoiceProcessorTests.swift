import AudioDevices
import CallNodeTestSupport
import Foundation
import VoiceProcessing
import Testing

/// Echo cancellation, noise suppression, gain control and bypass, on known signals: every
/// input is computed, so each figure is the same on every run.
@Suite struct VoiceProcessorTests {
    static let rate = 48_000
    static let frame = 960  // 20 ms, as media reads it

    /// The far end: speech-like, played on "the speaker".
    static let far = SyntheticSpeech.samples(seconds: 10, seed: 1)

    /// A near-end talker unlike the far end: two tones in bursts of 0.3 s.
    static func nearTalker(count: Int, amplitude: Double, from start: Int = 0) -> [Double] {
        (0..<count).map { n in
            guard n >= start else { return 0 }
            let t = Double(n) / Double(rate)
            let burst = Int(t / 0.3) % 2 == 0 ? 1.0 : 0.0
            return burst * amplitude * 32_767 * (0.6 * sin(2 * .pi * 700 * t) + 0.4 * sin(2 * .pi * 1_130 * t))
        }
    }

    /// The room: the speaker's sound reaches the microphone 30 ms later at half amplitude, with
    /// a weaker reflection 10 ms after that.
    static func echo(of played: [Int16]) -> [Double] {
        let direct = 1_440, reflection = 1_920
        return played.indices.map { n in
            (n >= direct ? 0.5 * Double(played[n - direct]) : 0) + (n >= reflection ? 0.2 * Double(played[n - reflection]) : 0)
        }
    }

    static func clip(_ values: [Double]) -> [Int16] { values.map { Int16(max(-32_768, min(32_767, $0.rounded()))) } }

    /// Feeds `far` to the playback side and `microphone` to the capture side frame by frame,
    /// as a media tick does (play, then read), and returns what the processor made of the
    /// microphone. `beforeFrame` may change the processor between frames.
    static func run(_ processor: VoiceProcessor, microphone: [Int16], far: [Int16]? = nil,
                    beforeFrame: (Int) -> Void = { _ in }) -> [Int16] {
        var out = [Int16]()
        out.reserveCapacity(microphone.count)
        var index = 0
        for start in stride(from: 0, to: microphone.count - frame + 1, by: frame) {
            beforeFrame(index)
            if let far { processor.playback(Array(far[start..<start + frame])) }
            var captured = Array(microphone[start..<start + frame])
            processor.process(&captured)
            out += captured
            index += 1
        }
        return out
    }

    static func energy(_ samples: ArraySlice<Int16>) -> Double {
        samples.reduce(0) { $0 + Double($1) * Double($1) }
    }

    static func cosine(_ a: [Double], _ b: [Double]) -> Double {
        var ab = 0.0, aa = 0.0, bb = 0.0
        for (x, y) in zip(a, b) { ab += x * y; aa += x * x; bb += y * y }
        return ab / max(1e-9, (aa * bb).squareRoot())
    }

    static func decibels(_ a: Double, over b: Double) -> Double { 10 * log10(max(a, 1e-9) / max(b, 1e-9)) }

    @Test func echoCancellationRemovesAKnownEcho() throws {
        let far = Self.far
        let echo = Self.echo(of: far)
        // Echo alone for 6 s, then the near end talks over it (double talk) for the rest.
        let nearStart = 6 * Self.rate
        let near = Self.nearTalker(count: far.count, amplitude: 0.15, from: nearStart)
        let microphone = Self.clip(zip(echo, near).map { $0 + $1 })

        var options = VoiceProcessingOptions(echoCancellation: true, noiseSuppression: false, automaticGainControl: false)
        options.echoTail = .milliseconds(120)
        let processor = try VoiceProcessor(options: options)
        let out = Self.run(processor, microphone: microphone, far: far)

        // Echo-return-loss enhancement once converged (seconds 3–6: echo only).
        let window = (3 * Self.rate)..<nearStart
        let erle = Self.decibels(Self.energy(microphone[window]), over: Self.energy(out[window]))
        // Double talk: the near end talks in bursts of 0.3 s from second 6. In its pauses the
        // canceller must still remove the echo (it did not diverge while both talked); in its
        // bursts the output must still be the near end.
        var pauses: [Int] = [], bursts: [Int] = []
        for n in (nearStart + Self.rate / 2)..<out.count {
            let phase = Double(n) / Double(Self.rate) / 0.3
            let inside = phase - phase.rounded(.down)
            guard inside > 0.1 && inside < 0.9 else { continue }  // away from burst edges
            if Int(phase) % 2 == 0 { bursts.append(n) } else { pauses.append(n) }
        }
        let erlePauses = Self.decibels(pauses.reduce(0) { $0 + pow(Double(microphone[$1]), 2) },
                                       over: pauses.reduce(0) { $0 + pow(Double(out[$1]), 2) })
        // The output lags the microphone by the processor's latency (one block).
        let lag = processor.latency
        let similarity = Self.cosine(bursts.map { Double(out[$0]) }, bursts.map { near[$0 - lag] })
        let similarityBefore = Self.cosine(bursts.map { Double(microphone[$0]) }, bursts.map { near[$0] })
        print("AEC: ERLE \(String(format: "%.1f", erle)) dB with echo only, \(String(format: "%.1f", erlePauses)) dB in the near end's pauses during double talk; near-end similarity in its bursts \(String(format: "%.3f", similarity)) (microphone: \(String(format: "%.3f", similarityBefore)))")
        #expect(erle >= 20, "echo-return-loss enhancement \(erle) dB is under 20 dB")
        #expect(erlePauses >= 15, "after double talk the echo is only \(erlePauses) dB down")
        #expect(similarity >= 0.9 && similarity > similarityBefore + 0.1,
                "the near end is not clearer than in the raw microphone: similarity \(similarity) against \(similarityBefore)")
        #expect(lag == processor.blockSize)
        #expect(processor.statistics.blocks == out.count / processor.blockSize)
        #expect(processor.statistics.blocksWithoutReference == 0)
    }

    @Test func withoutAReferenceNothingIsCancelled() throws {
        // The same echo, but the playback path never reports what it played: the canceller has
        // nothing to subtract and the microphone passes (the stage cannot invent a reference).
        let microphone = Self.clip(Self.echo(of: Self.far))
        let processor = try VoiceProcessor(options: VoiceProcessingOptions(echoCancellation: true, noiseSuppression: false, automaticGainControl: false))
        let out = Self.run(processor, microphone: microphone)
        let window = (3 * Self.rate)..<(6 * Self.rate)
        let erle = Self.decibels(Self.energy(microphone[window]), over: Self.energy(out[window]))
        #expect(abs(erle) < 3, "without a reference the echo changed by \(erle) dB")
        #expect(processor.statistics.blocksWithoutReference == processor.statistics.blocks)
    }

    @Test func noiseSuppressionLowersStationaryNoise() throws {
        var rng = SplitMix64(seed: 42)
        let count = 8 * Self.rate
        // Stationary white noise at about −40 dBFS throughout; speech from second 4.
        let noise = (0..<count).map { _ in Double(Int64(rng.next() % 2001) - 1000) * 0.55 }
        let speech = SyntheticSpeech.samples(seconds: 8, seed: 3)
        let microphone = Self.clip((0..<count).map { noise[$0] + ($0 >= 4 * Self.rate ? Double(speech[$0]) : 0) })
        let processor = try VoiceProcessor(options: VoiceProcessingOptions(echoCancellation: false, noiseSuppression: true, automaticGainControl: false))
        let out = Self.run(processor, microphone: microphone)

        let noiseOnly = (2 * Self.rate)..<(4 * Self.rate)
        let reduction = Self.decibels(Self.energy(microphone[noiseOnly]), over: Self.energy(out[noiseOnly]))
        let talk = (5 * Self.rate)..<(8 * Self.rate)
        let speechLoss = Self.decibels(Self.energy(microphone[talk]), over: Self.energy(out[talk]))
        print("NS: stationary noise \(String(format: "%.1f", reduction)) dB lower; speech segment \(String(format: "%.1f", speechLoss)) dB lower")
        #expect(reduction >= 10, "noise lowered by only \(reduction) dB")
        #expect(speechLoss <= 3, "speech lost \(speechLoss) dB")
    }

    @Test func gainControlRaisesAQuietTalker() throws {
        let quiet = SyntheticSpeech.samples(seconds: 8, seed: 5).map { Int16(Double($0) * 0.08) }
        let processor = try VoiceProcessor(options: VoiceProcessingOptions(echoCancellation: false, noiseSuppression: false, automaticGainControl: true))
        let out = Self.run(processor, microphone: quiet)
        let late = (5 * Self.rate)..<(8 * Self.rate)
        let gain = Self.decibels(Self.energy(out[late]), over: Self.energy(quiet[late]))
        print("AGC: a talker at -28 dB of the synthetic level is \(String(format: "%.1f", gain)) dB louder after 5 s")
        #expect(gain >= 6, "gain control added only \(gain) dB")
    }

    @Test func bypassTogglesMidStreamWithOneCrossFadedBlock() throws {
        let far = Self.far
        let microphone = Self.clip(zip(Self.echo(of: far), Self.nearTalker(count: far.count, amplitude: 0.1)).map { $0 + $1 })
        let options = VoiceProcessingOptions()
        let toggled = try VoiceProcessor(options: options)
        let reference = try VoiceProcessor(options: options)  // never bypassed
        let onAt = 100, offAt = 200  // frames (2 s, 4 s)
        let out = Self.run(toggled, microphone: microphone, far: far) { index in
            if index == onAt { toggled.isBypassed = true }
            if index == offAt { toggled.isBypassed = false }
        }
        let processed = Self.run(reference, microphone: microphone, far: far)
        let block = toggled.blockSize
        let on = onAt * Self.frame, off = offAt * Self.frame

        // Before the toggle and from the second block after each change, the output is exactly
        // one of the two paths: the chain ran on while bypassed, so it resumes converged.
        #expect(Array(out[0..<on]) == Array(processed[0..<on]))
        let lag = toggled.latency
        let delayed = [Int16](repeating: 0, count: lag) + microphone  // the bypass path lags as processing does
        #expect(Array(out[(on + block)..<off]) == Array(delayed[(on + block)..<off]))
        #expect(Array(out[(off + block)...]) == Array(processed[(off + block)...]))
        // The changing blocks lie between the two paths: a linear fade, no click.
        for (start, from, to) in [(on, processed, delayed), (off, delayed, processed)] {
            for n in start..<(start + block) {
                let low = min(from[n], to[n]), high = max(from[n], to[n])
                #expect(out[n] >= low - 1 && out[n] <= high + 1, "sample \(n) leaves the fade")
            }
        }
        #expect(toggled.statistics.bypassChanges == 2)
    }

    @Test func framesThatAreNotWholeBlocksPassThrough() throws {
        let processor = try VoiceProcessor()
        var odd = [Int16](repeating: 1_000, count: 500)
        processor.process(&odd)
        #expect(odd == [Int16](repeating: 1_000, count: 500))
        #expect(processor.statistics.unprocessedFrames == 1)
        #expect(throws: AudioDeviceError.self) { try VoiceProcessor(format: AudioFormat(sampleRate: 48_000, channels: 2)) }
        #expect(throws: AudioDeviceError.self) { try VoiceProcessor(format: AudioFormat(sampleRate: 44_123, channels: 1)) }
    }
}

extension VoiceProcessorTests {
    @Test func aChainBypassedFromTheStartPassesTheMicrophoneThroughDelayedByItsLatency() throws {
        let processor = try VoiceProcessor()
        processor.isBypassed = true
        let microphone = SyntheticSpeech.samples(seconds: 1, seed: 4)
        let out = Self.run(processor, microphone: microphone, far: Self.far)
        let lag = processor.latency
        #expect(out.prefix(lag).allSatisfy { $0 == 0 })
        #expect(Array(out[lag...]) == Array(microphone[0..<(out.count - lag)]))
        #expect(processor.statistics.bypassChanges == 0, "nothing to fade from at the first block")
    }
}
