#if canImport(Glibc)
import Glibc
#endif

/// A deterministic speech-like signal for demos, tests and benchmarks, when no recording is
/// at hand: voiced and formant-shaped like a vowel sequence, in syllables.
public enum SyntheticSpeech {
    /// A voiced, speech-like signal: harmonics of a gliding pitch (100–160 Hz) shaped by three
    /// formants that move between vowels, in syllables of three a second, with a little noise.
    public static func samples(seconds: Double, sampleRate rate: Int = 48_000, seed: UInt64 = 1) -> [Int16] {
        var rng = seed
        func noise() -> Double {
            rng &+= 0x9E37_79B9_7F4A_7C15
            var z = rng
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return Double((z ^ (z >> 31)) % 20001) / 10000 - 1
        }
        let count = Int(seconds * Double(rate))
        let top = min(3800.0, Double(rate) / 2 - 200)
        var phase = 0.0
        var out = [Int16](repeating: 0, count: count)
        var amplitudes = [Double](repeating: 0, count: 40)
        for i in 0..<count {
            let t = Double(i) / Double(rate)
            let pitch = 130 + 30 * sin(2 * .pi * 0.7 * t)
            phase += 2 * .pi * pitch / Double(rate)
            if i % 240 == 0 {  // formants move slowly: refresh the harmonic weights every 5 ms
                let vowel = 0.5 + 0.5 * sin(2 * .pi * 1.5 * t)
                let formants = [(500 + 300 * vowel, 120.0, 1.0), (1500 - 500 * vowel, 160.0, 0.6), (2500, 200.0, 0.3)]
                for h in 1...40 {
                    let f = Double(h) * pitch
                    amplitudes[h - 1] = f > top ? 0 : formants.reduce(0.02) { sum, formant in
                        sum + formant.2 * exp(-((f - formant.0) * (f - formant.0)) / (2 * formant.1 * formant.1))
                    }
                }
            }
            var voiced = 0.0
            for h in 1...40 where amplitudes[h - 1] > 0 { voiced += amplitudes[h - 1] * sin(Double(h) * phase) }
            let syllable = max(0, sin(2 * .pi * 3 * t))
            let sample = (0.22 * voiced * syllable + 0.005 * noise()) * 32767
            out[i] = Int16(max(-32768, min(32767, sample)))
        }
        return out
    }

}
