import AudioDevices
import Locking

/// Samples at another rate, converted once with the same filter a call's G.711 path uses
/// (speexdsp at its VoIP quality): a prompt loaded at 48 kHz becomes a G.711 call's 8 kHz
/// source before the first call, so no call resamples it frame after frame.
///
/// `looping` samples (a greeting played again and again) are filtered as the loop plays them:
/// the filter sees the end before the start and the start after the end, so the loop has no
/// seam (cut at the file's end, the filter's delay would hold its last sample for some 3 ms).
///
/// - Returns: `samples` itself when the rates are the same; `nil` when no resampler can be
///   made for them.
public func resampled(_ samples: [Int16], from inputRate: Int, to outputRate: Int, looping: Bool = false) -> [Int16]? {
    guard inputRate != outputRate else { return samples }
    guard let resampler = Resampler(from: inputRate, to: outputRate, skippingSilence: false) else { return nil }
    let count = Int((Int64(samples.count) * Int64(outputRate) / Int64(inputRate)))
    guard looping, !samples.isEmpty else {
        var output = [Int16](repeating: 0, count: count)
        resampler.process(samples, into: &output)
        return output
    }
    // A lead of whole steps of the ratio (so the loop's first sample falls on an output
    // sample), longer than the filter's memory, taken from the loop's end; and as much of its
    // start after the end.
    var divisor = inputRate, other = outputRate
    while other != 0 { (divisor, other) = (other, divisor % other) }
    let step = inputRate / divisor
    let lead = (resampler.memory / step + 1) * step
    let wrapped = (0..<(samples.count + 2 * lead)).map { samples[(($0 - lead) % samples.count + samples.count) % samples.count] }
    var output = [Int16](repeating: 0, count: Int(Int64(wrapped.count) * Int64(outputRate) / Int64(inputRate)))
    resampler.process(wrapped, into: &output)
    let skip = lead / step * (outputRate / divisor)
    return Array(output[skip..<(skip + count)])
}

/// A source at another rate than the call's, read a frame at a time and resampled to it: app
/// audio and hold audio an embedder made at 48 kHz, sent on a call whose source runs at the
/// codec's 8 kHz.
final class ResampledSource: AudioSource {
    let inner: any AudioSource
    let format: AudioFormat
    /// The converter and the inner source's frame, used only by the call's tick (one reader).
    private struct Conversion {
        let resampler: Resampler
        var frame: [Int16]
    }
    // One reader at a time (the media tick), so the lock is never contended; Resampler is
    // not Sendable, and Locked keeps it to one thread at a time.
    private let conversion: Locked<Conversion>

    /// - Returns: `nil` when no resampler can be made for the two rates.
    init?(_ inner: any AudioSource, to rate: Int) {
        guard inner.format.channels == 1, let resampler = Resampler(from: inner.format.sampleRate, to: rate) else { return nil }
        self.inner = inner
        format = AudioFormat(sampleRate: rate, channels: 1)
        conversion = Locked(Conversion(resampler: resampler, frame: []))
    }

    func start() throws(AudioDeviceError) { try inner.start() }
    func stop() { inner.stop() }
    func skip(samples: Int) { inner.skip(samples: samples * inner.format.sampleRate / max(1, format.sampleRate)) }
    var failure: String? { inner.failure }
    var canFail: Bool { inner.canFail }

    func read(into frame: inout [Int16]) -> Bool {
        let wanted = frame.count * inner.format.sampleRate / format.sampleRate
        return conversion.withLock { conversion in
            if conversion.frame.count != wanted { conversion.frame = [Int16](repeating: 0, count: wanted) }
            let more = inner.read(into: &conversion.frame)
            conversion.resampler.process(conversion.frame, into: &frame)
            return more
        }
    }
}
