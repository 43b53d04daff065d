import Dispatch
import Locking
import POSIX

#if canImport(Glibc)
import Glibc
#endif

/// 16-bit PCM WAV (RIFF) reading and writing.
public enum WAV {
    /// Reads a whole 16-bit PCM WAV file.
    ///
    /// - Throws: ``AudioDeviceError/notFound(_:)`` for a missing file,
    ///   ``AudioDeviceError/unsupportedFormat(_:)`` for anything but 16-bit PCM.
    public static func read(path: String) throws(AudioDeviceError) -> (format: AudioFormat, samples: [Int16]) {
        guard let file = fopen(path, "rb") else {
            let error = SystemError.last("fopen")
            throw error.errno == ENOENT ? .notFound(path) : .failed("\(path): \(error.reason)")
        }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = fread(&chunk, 1, chunk.count, file)
            if n == 0 { break }
            bytes.append(contentsOf: chunk[0..<n])
        }
        return try parse(bytes, name: path)
    }

    /// Parses WAV bytes (see ``read(path:)``).
    public static func parse(_ bytes: [UInt8], name: String = "WAV data") throws(AudioDeviceError) -> (format: AudioFormat, samples: [Int16]) {
        func u32(_ i: Int) -> UInt32 { UInt32(bytes[i]) | UInt32(bytes[i + 1]) << 8 | UInt32(bytes[i + 2]) << 16 | UInt32(bytes[i + 3]) << 24 }
        func u16(_ i: Int) -> UInt16 { UInt16(bytes[i]) | UInt16(bytes[i + 1]) << 8 }
        guard bytes.count >= 12, bytes[0..<4].elementsEqual("RIFF".utf8), bytes[8..<12].elementsEqual("WAVE".utf8) else {
            throw .unsupportedFormat("\(name) is not a RIFF/WAVE file")
        }
        var offset = 12
        var format: AudioFormat?
        var encoding: (kind: UInt16, bits: Int) = (1, 16)
        while offset + 8 <= bytes.count {
            let id = String(decoding: bytes[offset..<(offset + 4)], as: UTF8.self)
            let size = Int(u32(offset + 4))
            let body = offset + 8
            guard body + size <= bytes.count || id == "data" else {
                throw .unsupportedFormat("\(name): chunk '\(id)' overruns the file")
            }
            if id == "fmt " {
                guard size >= 16 else { throw .unsupportedFormat("\(name): short fmt chunk") }
                let tag = u16(body), channels = Int(u16(body + 2)), rate = Int(u32(body + 4)), bits = Int(u16(body + 14))
                // 1 = integer PCM, 3 = IEEE float; 0xFFFE = WAVE_FORMAT_EXTENSIBLE, whose sub-format
                // GUID begins with the same code (sox and many editors write it).
                var kind = tag
                if tag == 0xFFFE {
                    guard size >= 40 else { throw .unsupportedFormat("\(name): short extensible fmt chunk") }
                    kind = u16(body + 24)
                }
                switch (kind, bits) {
                case (1, 8), (1, 16), (1, 24), (1, 32), (3, 32), (3, 64): break
                default:
                    throw .unsupportedFormat("\(name): only PCM of 8, 16, 24 or 32 bits and 32- or 64-bit float are supported (format \(kind), \(bits) bits)")
                }
                guard channels >= 1, rate > 0 else { throw .unsupportedFormat("\(name): \(channels) channels at \(rate) Hz") }
                format = AudioFormat(sampleRate: rate, channels: channels)
                encoding = (kind, bits)
            } else if id == "data" {
                guard let format else { throw .unsupportedFormat("\(name): data before fmt") }
                let end = min(bytes.count, body + size)  // tolerate a truncated final chunk
                let width = encoding.bits / 8
                var samples = [Int16](repeating: 0, count: (end - body) / width)
                for i in samples.indices {
                    let at = body + width * i
                    switch (encoding.kind, encoding.bits) {
                    case (1, 8): samples[i] = Int16(Int(bytes[at]) - 128) << 8  // 8-bit PCM is unsigned
                    case (1, 16): samples[i] = Int16(bitPattern: u16(at))
                    case (1, 24): samples[i] = Int16(bitPattern: UInt16(bytes[at + 1]) | UInt16(bytes[at + 2]) << 8)
                    case (1, 32): samples[i] = Int16(bitPattern: UInt16(truncatingIfNeeded: u32(at) >> 16))
                    case (3, 32): samples[i] = Self.clamped(Double(Float(bitPattern: u32(at))))
                    default: samples[i] = Self.clamped(Double(bitPattern: UInt64(u32(at)) | UInt64(u32(at + 4)) << 32))
                    }
                }
                return (format, samples)
            }
            offset = body + size + (size & 1)
        }
        throw .unsupportedFormat("\(name): no data chunk")
    }

    /// A float sample (full scale ±1) as 16-bit PCM, clipped; NaN becomes silence.
    static func clamped(_ value: Double) -> Int16 {
        guard value.isFinite else { return 0 }
        return Int16(max(-32_768, min(32_767, (value * 32_767).rounded())))
    }

    /// The bytes of a 16-bit PCM WAV file holding `samples`.
    /// Mixes interleaved samples down to mono and resamples them linearly to `rate`, once.
    public static func monoResampled(_ interleaved: [Int16], from format: AudioFormat, to rate: Int) -> [Int16] {
        let channels = max(1, format.channels)
        let mono = (0..<(interleaved.count / channels)).map { i in
            Int16((0..<channels).reduce(0) { $0 + Int(interleaved[i * channels + $1]) } / channels)
        }
        guard !mono.isEmpty, format.sampleRate != rate else { return mono }
        let ratio = Double(format.sampleRate) / Double(rate)
        let count = Int(Double(mono.count) / ratio)
        return (0..<max(1, count)).map { i in
            let x = Double(i) * ratio
            let j = min(Int(x), mono.count - 1), k = min(j + 1, mono.count - 1)
            return Int16(Double(mono[j]) + (Double(mono[k]) - Double(mono[j])) * (x - Double(j)))
        }
    }

    public static func encode(_ samples: [Int16], format: AudioFormat) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(44 + 2 * samples.count)
        func put32(_ v: UInt32) { for s in stride(from: 0, to: 32, by: 8) { out.append(UInt8((v >> UInt32(s)) & 0xFF)) } }
        func put16(_ v: UInt16) { out.append(UInt8(v & 0xFF)); out.append(UInt8(v >> 8)) }
        out.append(contentsOf: "RIFF".utf8); put32(UInt32(36 + 2 * samples.count)); out.append(contentsOf: "WAVE".utf8)
        out.append(contentsOf: "fmt ".utf8); put32(16); put16(1); put16(UInt16(format.channels))
        put32(UInt32(format.sampleRate)); put32(UInt32(format.sampleRate * format.channels * 2))
        put16(UInt16(format.channels * 2)); put16(16)
        out.append(contentsOf: "data".utf8); put32(UInt32(2 * samples.count))
        for s in samples { put16(UInt16(bitPattern: s)) }
        return out
    }

    /// Writes a 16-bit PCM WAV file.
    public static func write(_ samples: [Int16], format: AudioFormat, path: String) throws(AudioDeviceError) {
        let bytes = encode(samples, format: format)
        guard let file = fopen(path, "wb") else { throw .failed("cannot create \(path): \(SystemError.last("fopen").reason)") }
        defer { fclose(file) }
        guard fwrite(bytes, 1, bytes.count, file) == bytes.count else { throw .failed("short write to \(path)") }
    }
}

/// Plays a WAV file as the call's outgoing audio, once or looping. Multi-channel files are
/// mixed down to mono; the call runs at the file's sample rate (8/12/16/24/48 kHz).
public final class WAVFileSource: AudioSource {
    public let format: AudioFormat
    public let loops: Bool
    private let samples: [Int16]
    private let position = Locked(0)

    /// - Throws: ``AudioDeviceError`` for a missing or non-16-bit-PCM file.
    public convenience init(path: String, loops: Bool = false) throws(AudioDeviceError) {
        let (fileFormat, interleaved) = try WAV.read(path: path)
        self.init(samples: interleaved, format: fileFormat, loops: loops)
    }

    /// A source over samples already in memory (interleaved, mixed down if multi-channel).
    public init(samples interleaved: [Int16], format fileFormat: AudioFormat, loops: Bool = false) {
        if fileFormat.channels == 1 {
            samples = interleaved
        } else {
            let c = fileFormat.channels
            samples = (0..<(interleaved.count / c)).map { i in
                var sum = 0
                for ch in 0..<c { sum += Int(interleaved[i * c + ch]) }
                return Int16(sum / c)
            }
        }
        format = AudioFormat(sampleRate: fileFormat.sampleRate, channels: 1)
        self.loops = loops
    }

    /// Total length of the file's audio.
    public var duration: Duration { .microseconds(Int64(samples.count) * 1_000_000 / Int64(format.sampleRate)) }

    public func start() throws(AudioDeviceError) {}
    public func stop() {}

    public func skip(samples count: Int) {
        position.withLock { pos in
            pos += count
            if loops && !samples.isEmpty { pos %= samples.count }
        }
    }

    public func read(into frame: inout [Int16]) -> Bool {
        position.withLock { pos in
            if !loops && pos >= samples.count {
                for i in frame.indices { frame[i] = 0 }
                return false
            }
            // In runs up to the end of the file (then from its start, or silence).
            frame.withUnsafeMutableBufferPointer { out in
                samples.withUnsafeBufferPointer { file in
                    var i = 0
                    while i < out.count {
                        if pos >= file.count {
                            guard loops && !file.isEmpty else {
                                for j in i..<out.count { out[j] = 0 }
                                return
                            }
                            pos = 0
                        }
                        let run = min(out.count - i, file.count - pos)
                        for j in 0..<run { out[i + j] = file[pos + j] }
                        i += run
                        pos += run
                    }
                }
            }
            return true
        }
    }
}

/// Records the call's incoming audio to a 16-bit PCM WAV file as it plays, playable at any
/// moment: about once a second the audio so far is handed to the kernel and the header's RIFF
/// and `data` sizes are brought up to it, then the file is synced to disk on a thread of its
/// own. A process killed mid-call (an OOM kill, `kill -9`) or a power cut leaves a valid file
/// missing at most about the last second. The header is kept current rather than repaired on
/// the next start: a recording someone copies off the disk mid-call is valid too, and nothing
/// depends on the node starting again.
///
/// A write that fails (a full disk, the directory removed) stops the recording where it
/// succeeded: the header says that much, the file is closed, the call goes on, and
/// ``failure`` (and the `failed` handler) says why.
public final class WAVFileSink: AudioSink {
    public let format: AudioFormat
    public let path: String
    private struct State {
        var fileBits: UInt?  // the FILE* as a bit pattern (pointers are not Sendable); used only under the lock
        var file: UnsafeMutablePointer<FILE>? { fileBits.flatMap { UnsafeMutablePointer(bitPattern: $0) } }
        var samples = 0
        /// Samples the header says the file holds (as of the last sync).
        var synced = 0
        var buffer: [UInt8] = []
        var failure: String?
        var failed: (@Sendable (String) -> Void)?
    }
    private let state = Locked(State())
    /// How many samples between syncs: one second.
    private var syncInterval: Int { format.sampleRate * format.channels }
    /// Where files are synced to disk, away from the media threads that write them.
    private static let syncQueue = DispatchQueue(label: "callnode-recording-sync", qos: .utility)

    public init(path: String, format: AudioFormat = AudioFormat()) {
        self.path = path
        self.format = format
    }

    /// Called once, on the writing thread, if a write fails (with the reason); the recording has
    /// stopped at what was written.
    public func onFailure(_ handler: @escaping @Sendable (String) -> Void) {
        state.withLock { $0.failed = handler }
    }

    /// Why the recording stopped early, if it did.
    public var failure: String? { state.withLock { $0.failure } }
    /// Creates the file (so a bad path fails at start, not at hang-up).
    public func start() throws(AudioDeviceError) {
        let opened = fopen(path, "wb")
        guard let opened else { throw .failed("cannot create \(path): \(SystemError.last("fopen").reason)") }
        let header = WAV.encode([], format: format)
        guard fwrite(header, 1, header.count, opened) == header.count, fflush(opened) == 0 else {
            let reason = SystemError.last("fwrite").reason
            fclose(opened)
            throw .failed("cannot write \(path): \(reason)")
        }
        let bits = UInt(bitPattern: opened)
        state.withLock { $0.fileBits = bits; $0.samples = 0; $0.synced = 0; $0.failure = nil }
    }

    public func write(_ frame: [Int16]) {
        let failed = state.withLock { s -> (@Sendable (String) -> Void, String)? in
            guard let file = s.file else { return nil }
            s.buffer.removeAll(keepingCapacity: true)
            for sample in frame {
                let bits = UInt16(bitPattern: sample)
                s.buffer.append(UInt8(bits & 0xFF))
                s.buffer.append(UInt8(bits >> 8))
            }
            guard fwrite(s.buffer, 1, s.buffer.count, file) == s.buffer.count else {
                return fail(&s, file, SystemError.last("fwrite").reason)
            }
            s.samples += frame.count
            guard s.samples - s.synced >= syncInterval else { return nil }
            guard sync(&s, file) else { return fail(&s, file, SystemError.last("fflush").reason) }
            return nil
        }
        if let (handler, reason) = failed { handler(reason) }
    }

    /// Hands what was written to the kernel, brings the header's sizes up to it, and syncs the
    /// file to disk in the background. False when a write failed.
    private func sync(_ s: inout State, _ file: UnsafeMutablePointer<FILE>) -> Bool {
        guard fflush(file) == 0 else { return false }
        guard patchHeader(file, samples: s.samples) else { return false }
        s.synced = s.samples
        // fsync may take long on a busy disk: off the media thread, on the file's own descriptor.
        // The file is closed only on the same serial queue, after every sync queued before it, so
        // the number is the file's while the sync runs (a duplicate for the sync's time would be
        // a descriptor that comes and goes under whoever looks at the process's open files).
        let descriptor = fileno(file)
        Self.syncQueue.async { fsync(descriptor) }
        return true
    }

    /// Writes the RIFF and `data` sizes for `samples`, then returns to the end.
    private func patchHeader(_ file: UnsafeMutablePointer<FILE>, samples: Int) -> Bool {
        let dataBytes = UInt32(truncatingIfNeeded: 2 * samples)
        func put(_ value: UInt32, at offset: Int) -> Bool {
            var le = value.littleEndian
            return fseek(file, offset, SEEK_SET) == 0 && fwrite(&le, 4, 1, file) == 1
        }
        let ok = put(36 &+ dataBytes, at: 4) && put(dataBytes, at: 40)
        return fseek(file, 0, SEEK_END) == 0 && fflush(file) == 0 && ok
    }

    /// A write failed: the file keeps what the kernel took (its header says so) and closes.
    private func fail(_ s: inout State, _ file: UnsafeMutablePointer<FILE>, _ reason: String) -> (@Sendable (String) -> Void, String)? {
        let seconds = Double(s.synced) / Double(max(1, syncInterval))
        let message = "the recording \(path) stopped after \((seconds * 10).rounded() / 10) s: \(reason)"
        // What reached the file for sure is what the last sync covered; say that much.
        _ = patchHeader(file, samples: s.synced)
        let bits = UInt(bitPattern: file)
        Self.syncQueue.async { UnsafeMutablePointer<FILE>(bitPattern: bits).map { _ = fclose($0) } }  // after the syncs queued
        s.fileBits = nil
        s.failure = message
        guard let handler = s.failed else { return nil }
        s.failed = nil
        return (handler, message)
    }

    /// Silence for the time the process was paused, so the recording stays on real time.
    public func fillSkipped(samples: Int) {
        var left = samples
        while left > 0 {
            let chunk = min(left, 4_800)
            write([Int16](repeating: 0, count: chunk))
            left -= chunk
        }
    }

    /// Samples written so far.
    public var samplesWritten: Int { state.withLock { $0.samples } }

    public func stop() {
        let failed = state.withLock { s -> (@Sendable (String) -> Void, String)? in
            guard let file = s.file else { return nil }
            // The lengths as they are now, and the file closed.
            guard fflush(file) == 0, patchHeader(file, samples: s.samples) else {
                return fail(&s, file, SystemError.last("fflush").reason)
            }
            s.fileBits = nil
            // Synced and closed when this returns, after the syncs queued before.
            Self.syncQueue.sync {
                fsync(fileno(file))
                fclose(file)
            }
            return nil
        }
        if let (handler, reason) = failed { handler(reason) }
    }
}
