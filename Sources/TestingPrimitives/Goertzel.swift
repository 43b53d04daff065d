#if canImport(Glibc)
import Glibc
#endif

/// Power of one frequency in a block of samples (the Goertzel algorithm), normalised per
/// sample: how the audio tests find a tone in a recording.
public enum Goertzel {
    /// The share of the block's energy at `frequency`: about 1 for a pure tone of it (whole
    /// periods in the block), about 1/n for one of n equal tones, 0 for silence. Power alone
    /// grows with the block's length (a tone of amplitude A gives A²·N/4 over N samples), so a
    /// threshold on power over the mean square is one on a share N/2 times smaller than it reads.
    public static func share<C: Collection>(of frequency: Double, in samples: C, rate: Double = 48_000) -> Double where C.Element == Int16 {
        var sumOfSquares = 0.0
        for sample in samples { sumOfSquares += Double(sample) * Double(sample) }
        guard sumOfSquares > 0 else { return 0 }
        return 2 * power(of: frequency, in: samples, rate: rate) / sumOfSquares
    }

    public static func power<C: Collection>(of frequency: Double, in samples: C, rate: Double = 48_000) -> Double where C.Element == Int16 {
        // Arrays and slices (every caller) take the plain loop over their storage: in a debug
        // build, iterating a generic collection costs a witness call per sample, and the
        // simulator probes every frame of every call.
        if let power = samples.withContiguousStorageIfAvailable({ power(of: frequency, in: $0, rate: rate) }) { return power }
        return power(of: frequency, in: Array(samples), rate: rate)
    }

    static func power(of frequency: Double, in samples: UnsafeBufferPointer<Int16>, rate: Double) -> Double {
        let k = 2 * cos(2 * Double.pi * frequency / rate)
        var s1 = 0.0, s2 = 0.0
        var index = 0
        let count = samples.count
        guard let base = samples.baseAddress else { return 0 }
        while index < count {
            let s0 = Double(base[index]) + k * s1 - s2
            s2 = s1
            s1 = s0
            index += 1
        }
        return (s1 * s1 + s2 * s2 - k * s1 * s2) / Double(max(1, count))
    }
}
