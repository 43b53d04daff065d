import Clocks
import Locking
import Synchronization

/// Sample rate and channel count of 16-bit interleaved PCM.
public struct AudioFormat: Sendable, Equatable, CustomStringConvertible {
    public var sampleRate: Int
    public var channels: Int
    public init(sampleRate: Int = 48_000, channels: Int = 1) {
        self.sampleRate = sampleRate
        self.channels = channels
    }
    public var description: String { "\(sampleRate) Hz, \(channels) ch" }
}

/// Why an audio endpoint could not be opened or used.
public enum AudioDeviceError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No such device (ALSA name unknown, file missing).
    case notFound(String)
    /// The device exists but another program holds it.
    case busy(String)
    /// The device or file cannot do the requested format.
    case unsupportedFormat(String)
    /// Any other failure, with the underlying message.
    case failed(String)

    public var description: String {
        switch self {
        case let .notFound(detail): "audio device not found: \(detail) (`callnode devices` lists the ALSA devices)"
        case let .busy(detail): "audio device busy: \(detail) (another program holds it; close it or pick another device)"
        case let .unsupportedFormat(detail): "unsupported audio format: \(detail)"
        case let .failed(detail): "audio device error: \(detail)"
        }
    }
}

/// Where a call's outgoing audio comes from. Mono 16-bit frames at ``format``'s rate.
///
/// The media actor calls ``read(into:)`` once per frame period from its own isolation;
/// hardware-backed sources buffer on their own thread in between.
public protocol AudioSource: AnyObject, Sendable {
    var format: AudioFormat { get }
    /// Opens the device or file. Called before the first read, and again after ``stop()`` for
    /// the restart mute mode.
    func start() throws(AudioDeviceError)
    /// Fills `frame` completely (its count is one frame). Returns `false` once the source has
    /// ended; the frame is then silence.
    func read(into frame: inout [Int16]) -> Bool
    /// Releases the device. Idempotent.
    func stop()
    /// Drops audio captured but not read yet, all but the newest `samples`. A device kept
    /// running between calls (always-prepared recording) calls this before media reads again,
    /// so the first frame is fresh audio, not a backlog. Sources without a buffer do nothing.
    func discardBuffered(keepingLatest samples: Int)
    /// Samples captured and not read yet (0 for sources without a buffer).
    var bufferedSamples: Int { get }
    /// The call's clock skipped `samples` samples' worth of frame periods (the process was
    /// paused). Sources that run on media time (files, tones) move on by as much, so what is
    /// sent stays on real time; devices captured nothing meanwhile and do nothing.
    func skip(samples: Int)
    /// Why the device stopped delivering for good (unplugged, its server went away), once it
    /// has; the source then reads silence. Nil for sources that cannot fail so.
    var failure: String? { get }
    /// Whether ``failure`` can ever be set (a device, not a file or a tone): the audio session
    /// checks only such endpoints, and with none open it wakes nothing to check.
    var canFail: Bool { get }
}

extension AudioSource {
    public func discardBuffered(keepingLatest samples: Int) {}
    public var bufferedSamples: Int { 0 }
    public func skip(samples: Int) {}
    public var failure: String? { nil }
    public var canFail: Bool { false }
}

/// Where a call's incoming audio goes. Mono 16-bit frames at ``format``'s rate.
public protocol AudioSink: AnyObject, Sendable {
    var format: AudioFormat { get }
    func start() throws(AudioDeviceError)
    func write(_ frame: [Int16])
    /// Flushes and releases the device or file. Idempotent.
    func stop()
    /// The call's clock skipped `samples` samples' worth of frame periods (the process was
    /// paused). Recordings write that much silence, so they stay on real time; devices played
    /// nothing meanwhile (an underrun) and do nothing.
    func fillSkipped(samples: Int)
    /// Why the device stopped playing for good (unplugged, its server went away), once it has;
    /// what is written then goes nowhere. Nil for sinks that cannot fail so.
    var failure: String? { get }
    /// Whether ``failure`` can ever be set (see ``AudioSource/canFail``).
    var canFail: Bool { get }
}

extension AudioSink {
    public func fillSkipped(samples: Int) {}
    public var failure: String? { nil }
    public var canFail: Bool { false }
}

/// A sine tone.
///
/// A tone of a whole number of hertz repeats after `rate / gcd(rate, frequency)` samples (660 Hz
/// at 48 kHz: 800 samples, 11 cycles): those are computed once and a frame is copied out of
/// them, where computing each sample's sine cost a call more CPU than its G.711 coding (48 000
/// `sin` calls a second). Other frequencies are computed sample by sample.
public final class ToneSource: AudioSource {
    public let format: AudioFormat
    public let frequency: Double
    public let amplitude: Double
    /// The tone's samples until it repeats, or nil when it does not within a second.
    private let cycle: [Int16]?
    /// Where the next read starts: an index into `cycle`, or the phase (radians) without one.
    private let position = Locked(0.0)

    /// - Parameter amplitude: 0–1 of full scale (louder clips).
    public init(frequency: Double = 440, amplitude: Double = 0.3, format: AudioFormat = AudioFormat()) {
        self.frequency = frequency
        self.amplitude = amplitude
        self.format = format
        let rate = format.sampleRate
        if frequency > 0, frequency == frequency.rounded(), frequency < Double(rate) {
            let length = rate / Self.greatestCommonDivisor(rate, Int(frequency))
            let scale = amplitude * 32767
            cycle = length <= rate ? (0..<length).map { i in
                Self.sample(sin(2 * Double.pi * frequency * Double(i) / Double(rate)) * scale)
            } : nil
        } else {
            cycle = nil
        }
    }

    public func start() throws(AudioDeviceError) {}
    public func stop() {}

    public func skip(samples: Int) {
        if let cycle {
            position.withLock { $0 = Double((Int($0) + samples) % cycle.count) }
            return
        }
        let step = 2 * Double.pi * frequency / Double(format.sampleRate)
        position.withLock { $0 = ($0 + step * Double(samples)).truncatingRemainder(dividingBy: 2 * Double.pi) }
    }

    public func read(into frame: inout [Int16]) -> Bool {
        if let cycle {
            position.withLock { position in
                var at = Int(position)
                frame.withUnsafeMutableBufferPointer { out in
                    cycle.withUnsafeBufferPointer { tone in
                        var filled = 0
                        while filled < out.count {
                            let run = min(out.count - filled, tone.count - at)
                            (out.baseAddress! + filled).update(from: tone.baseAddress! + at, count: run)
                            filled += run
                            at = (at + run) % tone.count
                        }
                    }
                }
                position = Double(at)
            }
            return true
        }
        let step = 2 * Double.pi * frequency / Double(format.sampleRate)
        let scale = amplitude * 32767
        position.withLock { phase in
            for i in frame.indices {
                frame[i] = Self.sample(sin(phase) * scale)
                phase += step
                if phase > 2 * Double.pi { phase -= 2 * Double.pi }
            }
        }
        return true
    }

    private static func sample(_ value: Double) -> Int16 {
        Int16(max(-32768, min(32767, value.rounded())))
    }

    private static func greatestCommonDivisor(_ a: Int, _ b: Int) -> Int {
        var (a, b) = (a, b)
        while b != 0 { (a, b) = (b, a % b) }
        return a
    }
}

/// Endless digital silence.
public final class SilenceSource: AudioSource {
    public let format: AudioFormat
    public init(format: AudioFormat = AudioFormat()) { self.format = format }
    public func start() throws(AudioDeviceError) {}
    public func stop() {}
    public func read(into frame: inout [Int16]) -> Bool {
        for i in frame.indices { frame[i] = 0 }
        return true
    }
}

/// Discards audio, counting frames.
public final class NullSink: AudioSink {
    public let format: AudioFormat
    private let frames = Atomic<Int>(0)
    public init(format: AudioFormat = AudioFormat()) { self.format = format }
    public var framesWritten: Int { frames.load(ordering: .relaxed) }
    public func start() throws(AudioDeviceError) {}
    public func stop() {}
    public func write(_ frame: [Int16]) { frames.add(1, ordering: .relaxed) }
}

/// A bounded FIFO of samples shared between one producer and one consumer thread. When full,
/// the oldest samples are dropped (late audio is worth less than new audio); when empty, reads
/// are padded with silence. Both cases are counted.
public final class SampleRing: Sendable {
    private struct State {
        var storage: [Int16]
        var head = 0  // next read
        var count = 0
        var overflowed = 0
        var underflowed = 0
    }
    private let state: Locked<State>
    public let capacity: Int

    public init(capacity: Int) {
        self.capacity = capacity
        state = Locked(State(storage: [Int16](repeating: 0, count: capacity)))
    }

    public var count: Int { state.withLock { $0.count } }
    /// Samples dropped because the ring was full.
    public var overflowed: Int { state.withLock { $0.overflowed } }
    /// Samples of silence handed out because the ring was empty.
    public var underflowed: Int { state.withLock { $0.underflowed } }

    public func write(_ samples: UnsafeBufferPointer<Int16>) {
        state.withLock { s in
            for sample in samples {
                if s.count == capacity {
                    s.head = (s.head + 1) % capacity
                    s.count -= 1
                    s.overflowed += 1
                }
                s.storage[(s.head + s.count) % capacity] = sample
                s.count += 1
            }
        }
    }

    /// Reads exactly `out.count` samples, padding with zeros. Returns how many were real.
    @discardableResult
    public func read(into out: UnsafeMutableBufferPointer<Int16>) -> Int {
        state.withLock { s in
            let real = min(out.count, s.count)
            for i in 0..<real {
                out[i] = s.storage[s.head]
                s.head = (s.head + 1) % capacity
            }
            s.count -= real
            for i in real..<out.count { out[i] = 0 }
            s.underflowed += out.count - real
            return real
        }
    }

    public func removeAll() { state.withLock { $0.count = 0 } }

    /// Drops the oldest samples so that at most `count` remain (the newest). Returns how many
    /// were dropped; they are not counted as overflow.
    @discardableResult
    public func keepLatest(_ count: Int) -> Int {
        state.withLock { s in
            let excess = s.count - max(0, count)
            guard excess > 0 else { return 0 }
            s.head = (s.head + excess) % capacity
            s.count -= excess
            return excess
        }
    }
}

/// Manual rendering: no device. The embedder pushes capture audio and pulls playback audio
/// itself (an answering service feeding prompts, a test rig checking what was heard).
///
/// One object is both the call's source and its sink. Push and pull from any thread.
public final class ManualAudioEndpoint: AudioSource, AudioSink {
    public let format: AudioFormat
    /// The embedder feeds and drains it: it cannot fail as a device does.
    public var canFail: Bool { false }
    public var failure: String? { nil }
    private let capture: SampleRing
    private let playback: SampleRing

    /// - Parameter bufferDuration: How much audio each direction holds before dropping the oldest.
    public init(format: AudioFormat = AudioFormat(), bufferDuration: Duration = .seconds(2)) {
        self.format = format
        let samples = Int(Double(format.sampleRate) * bufferDuration.seconds) * format.channels
        capture = SampleRing(capacity: max(1, samples))
        playback = SampleRing(capacity: max(1, samples))
    }

    public func start() throws(AudioDeviceError) {}
    public func stop() {}

    /// Queues audio for the call to send.
    public func pushCapture(_ samples: [Int16]) {
        samples.withUnsafeBufferPointer { capture.write($0) }
    }

    /// Takes up to `count` samples the call has played (fewer if fewer are there).
    public func pullPlayback(maximum count: Int) -> [Int16] {
        let available = min(count, playback.count)
        var out = [Int16](repeating: 0, count: available)
        out.withUnsafeMutableBufferPointer { _ = playback.read(into: $0) }
        return out
    }

    /// Samples played and not yet pulled.
    public var playbackAvailable: Int { playback.count }

    public func read(into frame: inout [Int16]) -> Bool {
        frame.withUnsafeMutableBufferPointer { _ = capture.read(into: $0) }
        return true
    }

    public func write(_ frame: [Int16]) {
        frame.withUnsafeBufferPointer { playback.write($0) }
    }
}

#if canImport(Glibc)
import Glibc
#endif
