import Media
#if canImport(Glibc)
import Glibc
#endif
import Testing

@Suite struct OpusTests {
    /// A voiced, speech-like signal: harmonics of a gliding pitch (100–160 Hz) shaped by three
    /// formants that move between vowels, in syllables of three a second, with a little noise.
    static func speechLike(seconds: Double, rate: Int = 48_000, seed: UInt64 = 1) -> [Int16] {
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

    static func snr(_ reference: ArraySlice<Int16>, _ test: ArraySlice<Int16>) -> Double {
        var signal = 0.0, error = 0.0
        for (r, t) in zip(reference, test) {
            signal += Double(r) * Double(r)
            error += (Double(r) - Double(t)) * (Double(r) - Double(t))
        }
        return 10 * log10(signal / max(error, 1))
    }

    @Test func aLostFrameRecoveredByFECIsCloserToTheOriginalThanPLC() throws {
        let config = OpusConfiguration(bitrate: 32_000, inbandFEC: true, expectedLossPercent: 20)
        let encoder = try OpusEncoder(configuration: config)
        let n = config.samplesPerFrame
        let input = Self.speechLike(seconds: 2)
        let packets = try stride(from: 0, to: input.count - n + 1, by: n).map { try Array(encoder.encode(Array(input[$0..<($0 + n)]))) }

        // Decode everything through three decoders: clean, FEC for lost frames, PLC for them.
        let clean = try OpusDecoder(), fec = try OpusDecoder(), plc = try OpusDecoder()
        var frame = [Int16](repeating: 0, count: n)
        var cleanOut: [Int16] = [], fecOut: [Int16] = [], plcOut: [Int16] = []
        let lost = Set(stride(from: 10, to: packets.count - 1, by: 7))
        for (i, packet) in packets.enumerated() {
            try clean.decode(packet, into: &frame); cleanOut += frame
            if lost.contains(i) {
                try fec.recover(fromNext: packets[i + 1], into: &frame); fecOut += frame
                try plc.conceal(into: &frame); plcOut += frame
            } else {
                try fec.decode(packet, into: &frame); fecOut += frame
                try plc.decode(packet, into: &frame); plcOut += frame
            }
        }
        // Compare the lost frames only, against the clean decode (same codec delay).
        var fecSNR = 0.0, plcSNR = 0.0
        for i in lost {
            let range = (i * n)..<((i + 1) * n)
            fecSNR += Self.snr(cleanOut[range], fecOut[range])
            plcSNR += Self.snr(cleanOut[range], plcOut[range])
        }
        fecSNR /= Double(lost.count)
        plcSNR /= Double(lost.count)
        #expect(fecSNR > plcSNR + 3, "FEC \(fecSNR) dB vs PLC \(plcSNR) dB")
    }

    @Test(arguments: [8_000, 12_000, 16_000, 24_000, 48_000])
    func everyOpusRateEncodesAndDecodes(_ rate: Int) throws {
        let config = OpusConfiguration(sampleRate: rate, frameDuration: .milliseconds(20))
        let encoder = try OpusEncoder(configuration: config)
        let decoder = try OpusDecoder(sampleRate: rate)
        var out = [Int16](repeating: 0, count: config.samplesPerFrame)
        let input = Self.speechLike(seconds: 0.2, rate: rate)
        for start in stride(from: 0, to: input.count - config.samplesPerFrame + 1, by: config.samplesPerFrame) {
            let packet = try encoder.encode(Array(input[start..<(start + config.samplesPerFrame)]))
            #expect(try decoder.decode(Array(packet), into: &out) == config.samplesPerFrame)
        }
    }

    @Test func badSettingsAreRefusedWithTheReason() {
        #expect(OpusConfiguration(sampleRate: 44_100).problem()?.contains("44100") == true)
        #expect(OpusConfiguration(frameDuration: .milliseconds(25)).problem()?.contains("frame duration") == true)
        #expect(OpusConfiguration(complexity: 11).problem() != nil)
        #expect(OpusConfiguration().problem() == nil)
        #expect(throws: OpusError.self) { try OpusEncoder(configuration: OpusConfiguration(bitrate: 1)) }
        let decoder = try? OpusDecoder()
        var out = [Int16](repeating: 0, count: 960)
        #expect(throws: OpusError.self) { try decoder?.decode([0xFF, 0xFF, 0xFF], into: &out) }
    }

    @Test func dtxProducesTinyPacketsForSilence() throws {
        let encoder = try OpusEncoder(configuration: OpusConfiguration(discontinuousTransmission: true))
        let silence = [Int16](repeating: 0, count: 960)
        let sizes = try (0..<50).map { _ in try encoder.encode(silence).count }
        #expect(sizes.suffix(20).allSatisfy { $0 <= 2 } || sizes.suffix(20).filter { $0 <= 2 }.count >= 15, "\(sizes)")
    }
}
