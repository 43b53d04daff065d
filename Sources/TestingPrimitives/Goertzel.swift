#if canImport(Glibc)
import Glibc
#endif

/// Power of one frequency in a block of samples (the Goertzel algorithm), normalised per
/// sample: how the audio tests find a tone in a recording.
public enum Goertzel {
    public static func power<C: Collection>(of frequency: Double, in samples: C, rate: Double = 48_000) -> Double where C.Element == Int16 {
        let k = 2 * cos(2 * Double.pi * frequency / rate)
        var s1 = 0.0, s2 = 0.0
        for x in samples {
            let s0 = Double(x) + k * s1 - s2
            s2 = s1
            s1 = s0
        }
        return (s1 * s1 + s2 * s2 - k * s1 * s2) / Double(max(1, samples.count))
    }
}
