import AudioCodec
import AudioDevices
#if canImport(Glibc)
import Glibc
#endif
import Testing

@Suite struct OpusTests {
    static func speechLike(seconds: Double, rate: Int = 48_000, seed: UInt64 = 1) -> [Int16] {
        SyntheticSpeech.samples(seconds: seconds, sampleRate: rate, seed: seed)
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

/// Reading whether a packet carries in-band FEC (SILK's LBRR) without decoding it.
@Suite struct OpusPacketTests {
    static func packets(fec: Bool, loss: Int, bitrate: Int = 24_000) throws -> [[UInt8]] {
        var configuration = OpusConfiguration()
        configuration.bitrate = bitrate
        configuration.inbandFEC = fec
        configuration.expectedLossPercent = loss
        let encoder = try OpusEncoder(configuration: configuration)
        let speech = OpusTests.speechLike(seconds: 3)
        return stride(from: 0, to: speech.count - 959, by: 960).compactMap { start in
            (try? encoder.encode(Array(speech[start..<(start + 960)]))).map(Array.init)
        }
    }

    @Test func anEncoderPlanningForLossPutsFECInItsPacketsAndOneThatDoesNotPutsNone() throws {
        let withFEC = try Self.packets(fec: true, loss: 20)
        let without = try Self.packets(fec: false, loss: 0)
        let carrying = withFEC.filter(OpusPacket.carriesFEC).count
        // Speech frames after the first carry LBRR for the one before (silent ones may not).
        #expect(carrying > withFEC.count / 2, "\(carrying) of \(withFEC.count) packets carry FEC")
        #expect(!without.contains(where: OpusPacket.carriesFEC))
        // The flag is what libopus decodes: a packet read as carrying FEC rebuilds its
        // predecessor with FEC, and the decoder accepts it.
        let decoder = try OpusDecoder()
        var pcm = [Int16](repeating: 0, count: 960)
        for packet in withFEC.prefix(20) where OpusPacket.carriesFEC(packet) {
            #expect(try decoder.recover(fromNext: packet, into: &pcm) == 960)
        }
    }

    @Test func celtOnlyAndMalformedPacketsCarryNoFEC() {
        #expect(!OpusPacket.carriesFEC([]))
        #expect(!OpusPacket.carriesFEC([0xFC, 0xFF, 0xFF]))  // configuration 31: CELT only
        #expect(!OpusPacket.carriesFEC([0x0B]))  // SILK, but no frame data
        #expect(!OpusPacket.carriesFEC([0x03, 0x85]))  // code 3 with a frame count it cannot hold
    }
}
