internal import CALSA
import Clocks
import Locking
import POSIX
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Opens an ALSA PCM for 16-bit interleaved I/O, mapping open errors to ``AudioDeviceError``.
private func openPCM(_ device: String, capture: Bool, format: AudioFormat, latency: Duration) throws(AudioDeviceError) -> OpaquePointer {
    _ = calsa_silence_errors()
    var pcm: OpaquePointer?
    let stream = capture ? SND_PCM_STREAM_CAPTURE : SND_PCM_STREAM_PLAYBACK
    let direction = capture ? "capture" : "playback"
    let opened = snd_pcm_open(&pcm, device, stream, 0)
    guard opened == 0, let pcm else {
        let message = String(cString: snd_strerror(opened))
        switch -opened {
        case ENOENT, ENODEV, ENXIO: throw .notFound("ALSA \(direction) device '\(device)': \(message)")
        case EBUSY, EAGAIN: throw .busy("ALSA \(direction) device '\(device)' is in use by another program")
        default: throw .failed("ALSA \(direction) device '\(device)': \(message)")
        }
    }
    let latencyMicroseconds = UInt32(latency.components.seconds * 1_000_000 + latency.components.attoseconds / 1_000_000_000_000)
    let configured = snd_pcm_set_params(pcm, SND_PCM_FORMAT_S16_LE, SND_PCM_ACCESS_RW_INTERLEAVED,
                                        UInt32(format.channels), UInt32(format.sampleRate), 1, latencyMicroseconds)
    guard configured == 0 else {
        snd_pcm_close(pcm)
        throw .unsupportedFormat("ALSA \(direction) device '\(device)' cannot do \(format): \(String(cString: snd_strerror(configured)))")
    }
    return pcm
}

/// Counters of an ALSA endpoint.
public struct AudioDeviceStatistics: Sendable, Equatable {
    /// Overruns (capture) or underruns (playback) the device reported and that were recovered.
    public var xruns = 0
    /// Samples dropped: captured ones the call did not read in time, or handed to playback
    /// faster than the device played them; either way, rather than kept as delay.
    public var droppedSamples = 0
    /// Samples of silence played because the call had nothing ready (playback).
    public var silenceSamples = 0
    /// Set when the device failed for good (unplugged); the endpoint then runs silent.
    public var failure: String?
}

/// Shared machinery of ALSA capture and playback: the PCM handle lives on the I/O thread.
private final class ALSAStream: Sendable {
    let device: String
    let format: AudioFormat
    let capture: Bool
    let ring: SampleRing
    let periodFrames: Int
    private let running = Atomic<Bool>(false)
    /// Playback samples dropped as delay (see ``ALSAPlaybackSink/write(_:)``).
    let trimmed = Atomic<Int>(0)
    private let stats = Locked(AudioDeviceStatistics())
    /// The I/O thread: blocking device reads and writes never run on the cooperative pool.
    private let thread = Locked<SystemThread?>(nil)

    init(device: String, format: AudioFormat, capture: Bool, period: Duration) {
        self.device = device
        self.format = format
        self.capture = capture
        periodFrames = max(1, Int(Double(format.sampleRate) * period.seconds))
        // Half a second either way: enough to ride out scheduling hiccups, bounded.
        ring = SampleRing(capacity: format.sampleRate / 2 * format.channels)
    }

    var failure: String? { stats.withLock { $0.failure } }

    var statistics: AudioDeviceStatistics {
        var s = stats.withLock { $0 }
        s.droppedSamples = ring.overflowed + trimmed.load(ordering: .relaxed)  // trimmed: playback only
        if !capture { s.silenceSamples = ring.underflowed }
        return s
    }

    func start() throws(AudioDeviceError) {
        guard !running.load(ordering: .acquiring) else { return }
        let pcm = try openPCM(device, capture: capture, format: format, latency: .milliseconds(Int64(4 * periodFrames * 1000 / format.sampleRate)))
        nonisolated(unsafe) let handle = pcm  // moved to the I/O thread, which alone uses and closes it
        ring.removeAll()
        running.store(true, ordering: .releasing)
        let io: SystemThread
        do {
            io = try SystemThread.start(name: capture ? "callnode-alsa-in" : "callnode-alsa-out") { [self] in
                if capture { captureLoop(handle) } else { playbackLoop(handle) }
                snd_pcm_close(handle)
            }
        } catch {
            running.store(false, ordering: .releasing)
            snd_pcm_close(handle)
            throw .failed("ALSA \(capture ? "capture" : "playback") device '\(device)': no I/O thread (\(error))")
        }
        thread.withLock { $0 = io }
    }

    func stop() {
        guard running.exchange(false, ordering: .acquiringAndReleasing) else { return }
        thread.withLock { $0.take() }?.join()
    }

    /// Recovers from an xrun or suspend; returns false if the device is gone.
    private func recover(_ pcm: OpaquePointer, _ error: Int) -> Bool {
        let recovered = snd_pcm_recover(pcm, Int32(error), 1)
        if recovered == 0 {
            stats.withLock { $0.xruns += 1 }
            return true
        }
        let message = String(cString: snd_strerror(recovered))
        stats.withLock { $0.failure = "ALSA device '\(device)' failed: \(message)" }
        return false
    }

    private func captureLoop(_ pcm: OpaquePointer) {
        var buffer = [Int16](repeating: 0, count: periodFrames * format.channels)
        let periodMicroseconds = UInt32(periodFrames * 1_000_000 / format.sampleRate)
        while running.load(ordering: .acquiring) {
            // Devices that are not paced in real time (ALSA null/file) would fill the ring at
            // full speed: wait while the call has a few periods unread.
            if ring.count >= 4 * buffer.count {
                usleep(periodMicroseconds)
                continue
            }
            let n = buffer.withUnsafeMutableBufferPointer { calsa_readi(pcm, $0.baseAddress, snd_pcm_uframes_t(periodFrames)) }
            if n < 0 {
                if !recover(pcm, Int(n)) { return }
                continue
            }
            buffer.withUnsafeBufferPointer { ring.write(UnsafeBufferPointer(rebasing: $0[0..<(Int(n) * format.channels)])) }
        }
    }

    private func playbackLoop(_ pcm: OpaquePointer) {
        var buffer = [Int16](repeating: 0, count: periodFrames * format.channels)
        let periodMicroseconds = UInt32(periodFrames * 1_000_000 / format.sampleRate)
        while running.load(ordering: .acquiring) {
            let real = buffer.withUnsafeMutableBufferPointer { ring.read(into: $0) }
            var offset = 0
            while offset < periodFrames && running.load(ordering: .acquiring) {
                let n = buffer.withUnsafeBufferPointer { b in
                    calsa_writei(pcm, b.baseAddress! + offset * format.channels, snd_pcm_uframes_t(periodFrames - offset))  // non-empty buffer
                }
                if n < 0 {
                    if !recover(pcm, Int(n)) { return }
                    continue
                }
                offset += Int(n)
            }
            // Nothing real to play: do not spin on devices that accept audio instantly.
            if real == 0 { usleep(periodMicroseconds) }
        }
        snd_pcm_drain(pcm)
    }
}

/// Capture from an ALSA device (`default`, `hw:0`, `pulse`, `plughw:1,0`, …) on a dedicated thread.
public final class ALSACaptureSource: AudioSource {
    public let format: AudioFormat
    private let stream: ALSAStream

    /// - Parameters:
    ///   - device: The ALSA PCM name.
    ///   - period: How much audio each device read carries (default 10 ms; the device buffer
    ///     holds four periods).
    public init(device: String = "default", format: AudioFormat = AudioFormat(), period: Duration = .milliseconds(10)) {
        self.format = format
        stream = ALSAStream(device: device, format: format, capture: true, period: period)
    }

    public var device: String { stream.device }
    public var statistics: AudioDeviceStatistics { stream.statistics }
    public var failure: String? { stream.failure }
    public var canFail: Bool { true }

    /// Opens the device and starts reading.
    /// - Throws: ``AudioDeviceError/notFound(_:)``, ``AudioDeviceError/busy(_:)`` or
    ///   ``AudioDeviceError/unsupportedFormat(_:)``.
    public func start() throws(AudioDeviceError) { try stream.start() }
    public func stop() { stream.stop() }

    public func read(into frame: inout [Int16]) -> Bool {
        frame.withUnsafeMutableBufferPointer { _ = stream.ring.read(into: $0) }
        return true
    }

    /// Samples captured and not read yet.
    public var bufferedSamples: Int { stream.ring.count }

    public func discardBuffered(keepingLatest samples: Int) { stream.ring.keepLatest(samples) }
}

/// Playback to an ALSA device on a dedicated thread.
public final class ALSAPlaybackSink: AudioSink {
    public let format: AudioFormat
    private let stream: ALSAStream

    public init(device: String = "default", format: AudioFormat = AudioFormat(), period: Duration = .milliseconds(10)) {
        self.format = format
        stream = ALSAStream(device: device, format: format, capture: false, period: period)
    }

    public var device: String { stream.device }
    public var statistics: AudioDeviceStatistics { stream.statistics }
    public var failure: String? { stream.failure }
    public var canFail: Bool { true }

    public func start() throws(AudioDeviceError) { try stream.start() }
    public func stop() { stream.stop() }

    /// Queues a frame for the device. The playback thread keeps the device's buffer full and
    /// the call writes a frame per tick at the device's pace, so before a write the queue holds
    /// about a period; more than a frame and two periods is delay that a late start of the
    /// device (audio written before it played anything) or a stall left behind, and it would
    /// stay for the rest of the call (half a second of it, once the queue had filled: measured
    /// through PulseAudio, 586 ms mouth-to-ear where 126 ms is due). The oldest of it is dropped
    /// (counted in ``AudioDeviceStatistics/droppedSamples``), keeping a period ahead of the frame.
    public func write(_ frame: [Int16]) {
        let slack = stream.periodFrames * format.channels
        if stream.ring.count > frame.count + 2 * slack {
            stream.trimmed.add(stream.ring.keepLatest(slack), ordering: .relaxed)
        }
        frame.withUnsafeBufferPointer { stream.ring.write($0) }
    }

    /// Samples queued and not handed to the device yet.
    public var bufferedSamples: Int { stream.ring.count }
}
