import MediaTiming
import CallNodeTestKit
import ArgumentParser
import Foundation
import Media

/// Latency through two media pipelines with manual rendering endpoints: a chirp is pushed into
/// the caller's capture side frame by frame, on a manual media clock, and found again in what
/// the callee's pipeline hands to its speaker. No device buffer hides or adds anything; what is
/// measured is framing, Opus, SRTP, the jitter buffer and the clock.
struct LatencyBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "latency",
        abstract: "Encoder input → decoder output and mouth-to-ear latency through two pipelines (manual clock).",
        discussion: """
            Two MediaActors over the in-memory link (no loss, no delay), driven by a manual media \
            clock. After the jitter buffer settles, a 10 ms chirp goes into the caller's capture \
            every half second and is located in the callee's playback by cross-correlation. \
            Mouth-to-ear runs from the chirp's capture to its playback (framing included); encoder \
            input → decoder output runs from the tick its frame enters the encoder to the tick \
            the decoder hands it to the speaker. Opus's algorithmic delay (2.5 ms + frame + 4 ms) \
            is the floor of both.
            """)

    @Option(help: "Frame lengths to measure, in ms.")
    var frames: [Int] = [20, 10]

    @Option(help: "Chirps per frame length; the median is reported.")
    var chirps = 20

    @Flag(help: "One JSON object per frame length on stdout.")
    var json = false

    func validate() throws {
        guard frames.allSatisfy({ [10, 20, 40, 60].contains($0) }) else { throw ValidationError("--frames are 10, 20, 40 or 60") }
        guard chirps > 0 else { throw ValidationError("--chirps must be at least 1") }
    }

    func run() async throws {
        for frameMs in frames {
            let (mouthToEar, encoderToDecoder, jitterDelay) = try await Self.measure(frameMs: frameMs, chirps: chirps)
            if json {
                print("{\"group\":\"latency\",\"frame_ms\":\(frameMs),\"chirps\":\(chirps),\"mouth_to_ear_ms\":\(String(format: "%.2f", mouthToEar)),\"encoder_to_decoder_ms\":\(String(format: "%.2f", encoderToDecoder)),\"jitter_target_ms\":\(String(format: "%.1f", jitterDelay))}")
            } else {
                print(String(format: "latency, %d ms frames: encoder input → decoder output %.2f ms, mouth-to-ear %.2f ms (jitter buffer target %.1f ms; median of %d chirps)",
                             frameMs, encoderToDecoder, mouthToEar, jitterDelay, chirps))
            }
        }
    }

    /// A 10 ms linear chirp, 300 Hz → 3 kHz, Hann-windowed, at half of full scale.
    static let chirp: [Double] = {
        let count = 480
        return (0..<count).map { i in
            let t = Double(i) / 48_000, duration = Double(count) / 48_000
            let phase = 2 * Double.pi * (300 * t + (3_000 - 300) / (2 * duration) * t * t)
            let window = 0.5 - 0.5 * cos(2 * Double.pi * Double(i) / Double(count - 1))
            return sin(phase) * window * 16_000
        }
    }()

    static func measure(frameMs: Int, chirps: Int) async throws -> (mouthToEar: Double, encoderToDecoder: Double, jitterTarget: Double) {
        let frameDuration = Duration.milliseconds(frameMs)
        let frame = 48 * frameMs
        let clock = MediaClock.manual(frameDuration: frameDuration)
        let link = InMemoryMediaLink(clock: clock)
        clock.add(link)
        var configuration = MediaConfiguration()
        configuration.opus.frameDuration = frameDuration
        configuration.jitterBuffer.frameDuration = frameDuration
        configuration.jitterBuffer.minimumDelay = frameDuration / 2  // the default floor, at this frame size
        let capture = ManualAudioEndpoint(), playback = ManualAudioEndpoint()
        let keyA = SRTPKey.random(), keyB = SRTPKey.random()
        let caller = try MediaActor(configuration: configuration, transport: link.a, keys: MediaKeys(outbound: keyA, inbound: keyB),
                                    source: capture, sink: NullSink(), clock: clock)
        let callee = try MediaActor(configuration: configuration, transport: link.b, keys: MediaKeys(outbound: keyB, inbound: keyA),
                                    source: SilenceSource(), sink: playback, clock: clock)
        try await caller.start()
        try await callee.start()

        // Tick k: frame k of capture is read by the encoder; what the decoder wrote is pulled.
        var input: [Int16] = [], output: [Int16] = []
        let spacing = 24_000 / frame * frame  // every half second, frame-aligned
        let settle = 2 * 48_000 / frame * frame
        var chirpStarts: [Int] = []
        let total = settle + chirps * spacing + spacing
        var tick = 0
        while input.count < total {
            var next = [Int16](repeating: 0, count: frame)
            for i in 0..<frame {
                let n = input.count + i
                if n >= settle, (n - settle) % spacing >= frame / 2, (n - settle) % spacing < frame / 2 + chirp.count {
                    let index = (n - settle) % spacing - frame / 2
                    if index == 0 { chirpStarts.append(n) }
                    next[i] = Int16(chirp[index])
                }
            }
            input += next
            capture.pushCapture(next)
            await clock.advance()
            tick += 1
            let played = playback.pullPlayback(maximum: frame)
            // Before the jitter buffer starts the decoder writes nothing; keep ticks aligned.
            output += played.count == frame ? played : [Int16](repeating: 0, count: frame)
        }
        let target = await callee.statistics.jitterBuffer.targetDelay
        await caller.stop()
        await callee.stop()

        // Input sample n is captured during tick n / frame's frame and read at the end of it;
        // output sample m is written at tick m / frame and played from then on.
        var mouthToEar: [Double] = [], encoderToDecoder: [Double] = []
        for start in chirpStarts where start + spacing < output.count {
            let lag = Self.bestLag(of: chirp, in: output, from: start, within: spacing - chirp.count)
            let outputIndex = start + lag
            let inTick = start / frame, outTick = outputIndex / frame
            let shift = Double((outputIndex % frame) - (start % frame)) / 48.0
            mouthToEar.append(Double(outTick - inTick + 1) * Double(frameMs) + shift)
            encoderToDecoder.append(Double(outTick - inTick) * Double(frameMs) + shift)
        }
        guard !mouthToEar.isEmpty else { throw ValidationError("no chirp was found in the output") }
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        return (median(mouthToEar), median(encoderToDecoder), target.milliseconds)
    }

    /// The lag (0..<within) at which `template` best matches `signal` after `from`.
    static func bestLag(of template: [Double], in signal: [Int16], from: Int, within: Int) -> Int {
        var best = (lag: 0, score: -Double.infinity)
        for lag in 0..<within where from + lag + template.count <= signal.count {
            var dot = 0.0
            for i in 0..<template.count { dot += template[i] * Double(signal[from + lag + i]) }
            if dot > best.score { best = (lag, dot) }
        }
        return best.lag
    }
}
