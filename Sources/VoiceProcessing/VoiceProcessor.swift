internal import CSpeexDSP
import AudioDevices
import Clocks
import Locking
import Synchronization

/// What voice processing does to the microphone signal.
public struct VoiceProcessingOptions: Sendable, Equatable {
    /// Acoustic echo cancellation: removes the far end's voice, played on the speaker, from the
    /// microphone, using the playback signal as reference.
    public var echoCancellation = true
    /// Stationary noise suppression (fans, hum, hiss).
    public var noiseSuppression = true
    /// Automatic gain control: brings quiet and loud talkers toward one speech level.
    public var automaticGainControl = true
    /// The longest echo path the canceller models: speaker → room → microphone, plus the
    /// device buffers on both sides. Longer costs CPU and converges more slowly.
    public var echoTail: Duration = .milliseconds(200)
    /// Suppression of the echo the linear canceller leaves, by speexdsp's preprocessor, in dB
    /// (negative; 0 turns it off): `residualEchoSuppression` while only the far end talks,
    /// `residualEchoSuppressionActive` while the near end talks too.
    public var residualEchoSuppression = -40
    public var residualEchoSuppressionActive = -15
    /// Most the noise suppressor attenuates noise, in dB (negative).
    public var noiseSuppressionLevel = -30
    /// Speech level the gain control aims for, as a sample magnitude (of 32 767).
    public var gainTargetLevel = 8_000
    /// Most the gain control amplifies, in dB.
    public var maximumGain = 30

    public init(echoCancellation: Bool = true, noiseSuppression: Bool = true, automaticGainControl: Bool = true) {
        self.echoCancellation = echoCancellation
        self.noiseSuppression = noiseSuppression
        self.automaticGainControl = automaticGainControl
    }

    /// Whether any stage is on.
    public var doesAnything: Bool { echoCancellation || noiseSuppression || automaticGainControl }
}

/// Counters of a ``VoiceProcessor``.
public struct VoiceProcessingStatistics: Sendable, Equatable {
    /// 10 ms blocks of microphone audio processed.
    public var blocks = 0
    /// Blocks processed with no playback reference (nothing was playing): echo cancellation
    /// then has nothing to remove.
    public var blocksWithoutReference = 0
    /// Capture frames left unprocessed because their length is not a multiple of 10 ms.
    public var unprocessedFrames = 0
    /// Times ``VoiceProcessor/isBypassed`` changed while audio flowed (each is one cross-faded block).
    public var bypassChanges = 0
}

/// Echo cancellation, noise suppression and gain control for one microphone, with speexdsp.
///
/// The playback path calls ``playback(_:)`` with every frame it plays (the echo reference);
/// the capture path calls ``process(_:)`` on every frame it reads. Both may run on any thread.
/// Processing runs in 10 ms blocks: speexdsp's multidelay echo canceller, then its
/// preprocessor (noise suppression, residual echo suppression, gain control).
///
/// The reference is kept short — at most one 20 ms frame and one block ahead of the capture —
/// so it never runs later than the echo it describes: an echo that arrives before its
/// reference cannot be cancelled.
///
/// ``isBypassed`` passes the microphone through untouched and can be toggled at any time: the
/// chain keeps running (and adapting) while bypassed, and the block after each change fades
/// linearly between the two signals, so a toggle never clicks.
public final class VoiceProcessor: Sendable {
    public let format: AudioFormat
    public let options: VoiceProcessingOptions
    /// Samples per processing block (10 ms).
    public let blockSize: Int
    /// How many samples the output lags the input: one block when the preprocessor runs (its
    /// overlap-add), else none. The bypassed path is delayed by the same amount, so that the
    /// two paths stay aligned and a toggle neither skips nor repeats audio.
    public let latency: Int
    private let reference: SampleRing
    private let referenceLimit: Int
    private let bypassed = Atomic<Bool>(false)
    private let chain: Locked<Chain>

    /// The speexdsp states and scratch buffers, used only under the lock.
    private struct Chain: ~Copyable {
        var echo: OpaquePointer?
        var preprocess: OpaquePointer?
        var input: [Int16]
        var referenceBlock: [Int16]
        var output: [Int16]
        /// The previous block's input: the bypass path, delayed as the preprocessor delays.
        var previous: [Int16]
        /// The bypass state of the last block; `nil` before the first block (nothing to fade from).
        var lastBypassed: Bool?
        var statistics = VoiceProcessingStatistics()

        deinit {
            if let preprocess { speex_preprocess_state_destroy(preprocess) }
            if let echo { speex_echo_state_destroy(echo) }
        }
    }

    /// - Throws: ``AudioDeviceError/unsupportedFormat(_:)`` for anything but mono audio at a
    ///   rate that has whole 10 ms blocks; ``AudioDeviceError/failed(_:)`` if speexdsp cannot
    ///   make its state.
    public init(format: AudioFormat = AudioFormat(), options: VoiceProcessingOptions = VoiceProcessingOptions()) throws(AudioDeviceError) {
        guard format.channels == 1, format.sampleRate >= 8_000, format.sampleRate % 100 == 0 else {
            throw .unsupportedFormat("voice processing needs mono audio at a rate of whole 10 ms blocks, not \(format)")
        }
        self.format = format
        self.options = options
        let block = format.sampleRate / 100
        blockSize = block
        referenceLimit = block + format.sampleRate / 50
        reference = SampleRing(capacity: 4 * referenceLimit)

        var echo: OpaquePointer?
        if options.echoCancellation {
            let tail = max(block, Int(Double(format.sampleRate) * options.echoTail.seconds))
            echo = speex_echo_state_init(Int32(block), Int32(tail))
            guard let echo else { throw .failed("speexdsp could not make an echo canceller (\(tail)-sample tail)") }
            var rate = Int32(format.sampleRate)
            speex_echo_ctl(echo, SPEEX_ECHO_SET_SAMPLING_RATE, &rate)
        }
        var preprocess: OpaquePointer?
        if options.noiseSuppression || options.automaticGainControl || echo != nil {
            preprocess = speex_preprocess_state_init(Int32(block), Int32(format.sampleRate))
            guard let preprocess else {
                if let echo { speex_echo_state_destroy(echo) }
                throw .failed("speexdsp could not make a preprocessor")
            }
            var on: Int32 = options.noiseSuppression ? 1 : 0
            speex_preprocess_ctl(preprocess, SPEEX_PREPROCESS_SET_DENOISE, &on)
            var level = Int32(min(0, options.noiseSuppressionLevel))
            speex_preprocess_ctl(preprocess, SPEEX_PREPROCESS_SET_NOISE_SUPPRESS, &level)
            var agc: Int32 = options.automaticGainControl ? 1 : 0
            speex_preprocess_ctl(preprocess, SPEEX_PREPROCESS_SET_AGC, &agc)
            var target = Float(max(1, min(32_767, options.gainTargetLevel)))
            speex_preprocess_ctl(preprocess, SPEEX_PREPROCESS_SET_AGC_LEVEL, &target)
            var maximum = Int32(max(0, options.maximumGain))
            speex_preprocess_ctl(preprocess, SPEEX_PREPROCESS_SET_AGC_MAX_GAIN, &maximum)
            if let echo, options.residualEchoSuppression < 0 {
                var suppress = Int32(options.residualEchoSuppression)
                speex_preprocess_ctl(preprocess, SPEEX_PREPROCESS_SET_ECHO_SUPPRESS, &suppress)
                var active = Int32(min(0, options.residualEchoSuppressionActive))
                speex_preprocess_ctl(preprocess, SPEEX_PREPROCESS_SET_ECHO_SUPPRESS_ACTIVE, &active)
                // Residual echo suppression: the preprocessor reads the canceller's estimate.
                speex_preprocess_ctl(preprocess, SPEEX_PREPROCESS_SET_ECHO_STATE, UnsafeMutableRawPointer(echo))
            }
        }
        latency = preprocess == nil ? 0 : block
        chain = Locked(Chain(echo: echo, preprocess: preprocess,
                            input: [Int16](repeating: 0, count: block),
                            referenceBlock: [Int16](repeating: 0, count: block),
                            output: [Int16](repeating: 0, count: block),
                            previous: [Int16](repeating: 0, count: block)))
    }

    /// Passes the microphone through untouched while `true`. Takes effect at the next block,
    /// cross-faded over that block.
    public var isBypassed: Bool {
        get { bypassed.load(ordering: .acquiring) }
        set { bypassed.store(newValue, ordering: .releasing) }
    }

    public var statistics: VoiceProcessingStatistics { chain.withLock { $0.statistics } }

    /// Records a frame as played (the echo reference). Call it with every frame sent to the
    /// speaker, when it is sent.
    public func playback(_ frame: [Int16]) {
        guard options.echoCancellation else { return }
        frame.withUnsafeBufferPointer { reference.write($0) }
    }

    /// Processes a captured frame in place. Its length must be a multiple of ``blockSize``;
    /// other frames pass through untouched (and are counted).
    public func process(_ frame: inout [Int16]) {
        let block = blockSize
        let bypass = isBypassed
        chain.withLock { chain in
            guard frame.count % block == 0, !frame.isEmpty else {
                chain.statistics.unprocessedFrames += 1
                return
            }
            for start in stride(from: 0, to: frame.count, by: block) {
                for i in 0..<block { chain.input[i] = frame[start + i] }
                runBlock(&chain)
                let changed = chain.lastBypassed.map { $0 != bypass } ?? false
                if changed { chain.statistics.bypassChanges += 1 }
                let delayed = latency > 0
                for i in 0..<block {
                    let raw = Float(delayed ? chain.previous[i] : chain.input[i])
                    let processed = Float(chain.output[i])
                    let sample: Float
                    if changed {
                        let t = Float(i + 1) / Float(block)  // toward the new path
                        sample = bypass ? processed + (raw - processed) * t : raw + (processed - raw) * t
                    } else {
                        sample = bypass ? raw : processed
                    }
                    frame[start + i] = Int16(max(-32_768, min(32_767, sample.rounded())))
                }
                chain.lastBypassed = bypass
                if delayed { swap(&chain.previous, &chain.input) }
            }
        }
    }

    /// Runs one block from `chain.input` into `chain.output`.
    private func runBlock(_ chain: inout Chain) {
        chain.statistics.blocks += 1
        if let echo = chain.echo {
            reference.keepLatest(referenceLimit)
            let real = chain.referenceBlock.withUnsafeMutableBufferPointer { reference.read(into: $0) }
            if real == 0 { chain.statistics.blocksWithoutReference += 1 }
            chain.input.withUnsafeBufferPointer { input in
                chain.referenceBlock.withUnsafeBufferPointer { played in
                    chain.output.withUnsafeMutableBufferPointer { output in
                        speex_echo_cancellation(echo, input.baseAddress, played.baseAddress, output.baseAddress)
                    }
                }
            }
        } else {
            for i in 0..<chain.input.count { chain.output[i] = chain.input[i] }
        }
        if let preprocess = chain.preprocess {
            _ = chain.output.withUnsafeMutableBufferPointer { speex_preprocess_run(preprocess, $0.baseAddress) }
        }
    }
}
