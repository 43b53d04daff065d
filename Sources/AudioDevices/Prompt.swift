#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

import Locking

/// A prompt played into a call (a greeting, a menu, a beep): a WAV file or a tone, held in
/// memory at the call's rate, played once or looping. It says once, through `finished`, when it
/// has played to its end (never for a loop, nor when it is stopped before).
///
/// A file at another rate is resampled by linear interpolation, which is fine for speech
/// prompts; multi-channel files are mixed down to mono. Reads happen on the media path: each is
/// a copy under a lock, and `finished` is called on that path, so it must be quick (yield to a
/// stream, say).
public final class PromptSource: AudioSource {
    public let format: AudioFormat
    public let loops: Bool
    private let samples: [Int16]
    private struct State {
        var position = 0
        var done = false
    }
    private let state = Locked(State())
    private let finished = Locked<Finished?>(nil)

    /// Holds the end handler in a class: a closure stored directly in `Locked` is re-wrapped
    /// on every access (see ``Locked``).
    private final class Finished: Sendable {
        let call: @Sendable () -> Void
        init(_ call: @escaping @Sendable () -> Void) { self.call = call }
    }

    /// The longest prompt taken: ten minutes (a file longer than that is music on hold,
    /// which a call plays with `--hold-audio`, or a mistake).
    public static let longest: Duration = .seconds(600)

    /// A prompt over samples already in memory (interleaved when `format` has several channels).
    /// - Parameters:
    ///   - rate: The call's sample rate; the samples are resampled to it.
    ///   - finished: Called once when a prompt that does not loop has played to its end.
    /// - Throws: ``AudioDeviceError/unsupportedFormat(_:)`` for an empty prompt or one longer
    ///   than ``longest``.
    public init(samples interleaved: [Int16], format source: AudioFormat, rate: Int = 48_000, loops: Bool = false,
                finished: (@Sendable () -> Void)? = nil) throws(AudioDeviceError) {
        let channels = max(1, source.channels)
        let frames = interleaved.count / channels
        guard frames > 0, source.sampleRate > 0 else { throw .unsupportedFormat("the prompt has no audio") }
        guard Int64(frames) * 1000 / Int64(source.sampleRate) <= 600_000 else {
            throw .unsupportedFormat("the prompt is longer than ten minutes")
        }
        var mono = [Int16](repeating: 0, count: frames)
        for i in 0..<frames {
            var sum = 0
            for c in 0..<channels { sum += Int(interleaved[i * channels + c]) }
            mono[i] = Int16(sum / channels)
        }
        samples = source.sampleRate == rate ? mono : Self.resample(mono, from: source.sampleRate, to: rate)
        format = AudioFormat(sampleRate: rate, channels: 1)
        self.loops = loops
        if let finished { self.finished.withLock { $0 = Finished(finished) } }
    }

    /// A WAV file (16-bit PCM) as a prompt.
    /// - Throws: ``AudioDeviceError`` for a missing file, one that is not 16-bit PCM WAV, an empty
    ///   one or one longer than ``longest``.
    public convenience init(path: String, rate: Int = 48_000, loops: Bool = false,
                            finished: (@Sendable () -> Void)? = nil) throws(AudioDeviceError) {
        let (fileFormat, interleaved) = try WAV.read(path: path)
        try self.init(samples: interleaved, format: fileFormat, rate: rate, loops: loops, finished: finished)
    }

    /// A sine tone of `frequency` Hz for `seconds`, at -10 dBFS, faded in and out over 10 ms so
    /// it starts and stops without a click.
    /// - Throws: ``AudioDeviceError/unsupportedFormat(_:)`` for a frequency outside 20 Hz to
    ///   half the rate, or a length outside 10 ms to ten minutes.
    public convenience init(tone frequency: Double, seconds: Double, rate: Int = 48_000, loops: Bool = false,
                            finished: (@Sendable () -> Void)? = nil) throws(AudioDeviceError) {
        guard frequency >= 20, frequency < Double(rate) / 2 else {
            throw .unsupportedFormat("a tone's frequency must be between 20 Hz and \(rate / 2) Hz")
        }
        guard seconds >= 0.01, seconds <= 600 else { throw .unsupportedFormat("a tone lasts from 0.01 to 600 seconds") }
        let count = Int(seconds * Double(rate))
        let fade = min(count / 2, rate / 100)
        let amplitude = 32767 * 0.316  // -10 dBFS
        var tone = [Int16](repeating: 0, count: count)
        for i in 0..<count {
            let ramp = min(1, Double(min(i, count - 1 - i)) / Double(max(1, fade)))
            tone[i] = Int16(amplitude * ramp * sin(2 * Double.pi * frequency * Double(i) / Double(rate)))
        }
        try self.init(samples: tone, format: AudioFormat(sampleRate: rate, channels: 1), rate: rate, loops: loops, finished: finished)
    }

    /// How long one pass of the prompt plays.
    public var duration: Duration { .microseconds(Int64(samples.count) * 1_000_000 / Int64(format.sampleRate)) }

    /// Whether the prompt has played to its end (never, for a loop).
    public var hasFinished: Bool { state.withLock { $0.done } }

    public func start() throws(AudioDeviceError) {}

    /// Stops the prompt where it is: nothing more is played and `finished` is not called.
    public func stop() {
        finished.withLock { $0 = nil }
    }

    public func skip(samples count: Int) {
        var silence = [Int16](repeating: 0, count: count)
        _ = read(into: &silence)
    }

    public func read(into frame: inout [Int16]) -> Bool {
        let endedNow: Bool = state.withLock { state in
            guard !state.done else {
                for i in frame.indices { frame[i] = 0 }
                return false
            }
            frame.withUnsafeMutableBufferPointer { out in
                samples.withUnsafeBufferPointer { prompt in
                    var i = 0
                    while i < out.count {
                        if state.position >= prompt.count {
                            guard loops else {
                                for j in i..<out.count { out[j] = 0 }
                                state.done = true
                                return
                            }
                            state.position = 0
                        }
                        let run = min(out.count - i, prompt.count - state.position)
                        for j in 0..<run { out[i + j] = prompt[state.position + j] }
                        i += run
                        state.position += run
                    }
                }
            }
            if !loops, state.position >= samples.count { state.done = true }
            return state.done
        }
        if endedNow {
            let handler = finished.withLock { handler in
                let taken = handler
                handler = nil
                return taken
            }
            handler?.call()
        }
        return true
    }

    /// Linear interpolation from one rate to another.
    static func resample(_ input: [Int16], from: Int, to: Int) -> [Int16] {
        let count = Int(Int64(input.count) * Int64(to) / Int64(from))
        guard count > 0 else { return [] }
        var output = [Int16](repeating: 0, count: count)
        let step = Double(from) / Double(to)
        for i in 0..<count {
            let position = Double(i) * step
            let index = Int(position)
            let fraction = position - Double(index)
            let a = Double(input[min(index, input.count - 1)])
            let b = Double(input[min(index + 1, input.count - 1)])
            output[i] = Int16((a + (b - a) * fraction).rounded())
        }
        return output
    }
}
