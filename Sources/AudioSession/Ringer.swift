import AudioDevices
import MediaTiming
import Locking

/// Plays the provider's ringtone (a WAV file, looped) while an incoming call rings.
///
/// The call manager starts it when the first incoming call starts ringing and stops it when no
/// incoming call rings any more. The output is opened only while ringing; pacing comes from a
/// ``MediaClock`` (the node's, or a manual one in tests).
public final class Ringer: MediaClockClient {
    private let samples: [Int16]
    private let makeOutput: @Sendable () -> any AudioSink
    private let clock: MediaClock
    private let state = Locked<(output: (any AudioSink)?, position: Int, frame: [Int16])>((nil, 0, []))

    /// - Parameters:
    ///   - soundPath: A 16-bit PCM WAV file (any rate, any channel count: mixed to mono and
    ///     resampled to the output's rate).
    ///   - output: Opens the device to ring on (not yet started).
    /// - Throws: ``AudioDeviceError`` when the file is missing or not 16-bit PCM, so a bad
    ///   ringtone is reported at start-up rather than at the first call.
    public init(soundPath: String, output: @escaping @Sendable () -> any AudioSink, format: AudioFormat = AudioFormat(),
                clock: MediaClock) throws(AudioDeviceError) {
        let (fileFormat, interleaved) = try WAV.read(path: soundPath)
        samples = WAV.monoResampled(interleaved, from: fileFormat, to: format.sampleRate)
        guard !samples.isEmpty else { throw .unsupportedFormat("the ringtone \(soundPath) has no audio") }
        makeOutput = output
        self.clock = clock
        let period = clock.frameDuration.components
        let frameLength = Int(Double(format.sampleRate) * (Double(period.seconds) + Double(period.attoseconds) / 1e18))
        state.withLock { $0.frame = [Int16](repeating: 0, count: frameLength) }
    }

    /// Whether the ringtone is playing.
    public var isRinging: Bool { state.withLock { $0.output != nil } }

    /// Opens the output and starts the ringtone from its beginning. Idempotent.
    /// - Throws: ``AudioDeviceError`` when the output cannot open.
    public func start() throws(AudioDeviceError) {
        let output: (any AudioSink)? = state.withLock { $0.output == nil ? makeOutput() : nil }
        guard let output else { return }
        try output.start()
        state.withLock {
            $0.output = output
            $0.position = 0
        }
        clock.add(self)
    }

    /// Stops the ringtone and closes the output. Idempotent.
    public func stop() {
        clock.remove(self)
        let output = state.withLock { state in
            defer { state.output = nil }
            return state.output
        }
        output?.stop()
    }

    public func tick(now: Duration) async {
        let (output, frame): ((any AudioSink)?, [Int16]) = state.withLock { state in
            guard state.output != nil else { return (nil, []) }
            for i in state.frame.indices {
                state.frame[i] = samples[state.position]
                state.position = (state.position + 1) % samples.count
            }
            return (state.output, state.frame)
        }
        output?.write(frame)
    }
}
