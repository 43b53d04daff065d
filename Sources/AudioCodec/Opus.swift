internal import COpus
import Clocks

/// A libopus call that failed.
public struct OpusError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The libopus function.
    public var function: String
    /// The libopus error code (negative).
    public var code: Int32

    public var description: String {
        "\(function) failed: \(String(cString: opus_strerror(code))) (\(code))"
    }
}

/// The one funnel for libopus return codes.
@discardableResult
func opus(_ result: Int32, _ function: String = #function) throws(OpusError) -> Int32 {
    guard result >= 0 else { throw OpusError(function: function, code: result) }
    return result
}

/// Encoder settings (RFC 7587 payload, VoIP application).
public struct OpusConfiguration: Sendable, Equatable {
    /// 8 000, 12 000, 16 000, 24 000 or 48 000 Hz.
    public var sampleRate: Int
    /// 1 (mono) or 2.
    public var channels: Int
    /// 10, 20, 40 or 60 ms.
    public var frameDuration: Duration
    /// Target bitrate in bit/s.
    public var bitrate: Int
    /// 0–10: CPU spent for quality.
    public var complexity: Int
    public var variableBitrate: Bool
    /// In-band forward error correction (needs ``expectedLossPercent`` > 0 to take effect).
    public var inbandFEC: Bool
    /// The loss the encoder plans FEC for, 0–100.
    public var expectedLossPercent: Int
    /// Discontinuous transmission: near-empty packets during silence, which are not sent.
    public var discontinuousTransmission: Bool

    /// The default profile: 48 kHz mono, 20 ms, 40 kbit/s VBR, complexity 8, in-band FEC on but
    /// planned for 0 % loss until the peer reports loss (``MediaActor`` adapts it from RTCP), no
    /// DTX. It scores PESQ-WB 4.02 on synthesized speech; see BENCHMARKS.md for the trade-offs.
    public init(sampleRate: Int = 48_000, channels: Int = 1, frameDuration: Duration = .milliseconds(20),
                bitrate: Int = 40_000, complexity: Int = 8, variableBitrate: Bool = true, inbandFEC: Bool = true,
                expectedLossPercent: Int = 0, discontinuousTransmission: Bool = false) {
        self.sampleRate = sampleRate
        self.channels = channels
        self.frameDuration = frameDuration
        self.bitrate = bitrate
        self.complexity = complexity
        self.variableBitrate = variableBitrate
        self.inbandFEC = inbandFEC
        self.expectedLossPercent = expectedLossPercent
        self.discontinuousTransmission = discontinuousTransmission
    }

    /// Samples per channel in one frame.
    public var samplesPerFrame: Int { Int(Int64(sampleRate) * frameDuration.milliseconds / 1000) }

    /// Why this configuration cannot work, or `nil`.
    public func problem() -> String? {
        if ![8_000, 12_000, 16_000, 24_000, 48_000].contains(sampleRate) {
            return "Opus sample rate must be 8000, 12000, 16000, 24000 or 48000 Hz (got \(sampleRate))"
        }
        if channels != 1 && channels != 2 { return "Opus channels must be 1 or 2 (got \(channels))" }
        if ![10, 20, 40, 60].contains(frameDuration.milliseconds) || frameDuration.milliseconds * 1_000_000 != frameDuration.nanoseconds {
            return "Opus frame duration must be 10, 20, 40 or 60 ms (got \(frameDuration))"
        }
        if !(6_000...510_000).contains(bitrate) { return "Opus bitrate must be 6000–510000 bit/s (got \(bitrate))" }
        if !(0...10).contains(complexity) { return "Opus complexity must be 0–10 (got \(complexity))" }
        if !(0...100).contains(expectedLossPercent) { return "expected loss must be 0–100 % (got \(expectedLossPercent))" }
        return nil
    }
}

/// An Opus encoder. Owns its `OpusEncoder*`; use from one isolation domain.
public final class OpusEncoder {
    public let configuration: OpusConfiguration
    private let encoder: OpaquePointer
    private var output = [UInt8](repeating: 0, count: 1500)

    /// - Throws: ``OpusError`` if libopus rejects the configuration.
    public init(configuration: OpusConfiguration) throws(OpusError) {
        if let problem = configuration.problem() { throw OpusError(function: "configuration: \(problem)", code: -1) }
        self.configuration = configuration
        var error: Int32 = 0
        guard let encoder = opus_encoder_create(Int32(configuration.sampleRate), Int32(configuration.channels),
                                                copus_application_voip(), &error), error == 0 else {
            throw OpusError(function: "opus_encoder_create", code: error)
        }
        self.encoder = encoder
        do throws(OpusError) {
            try opus(copus_set_bitrate(encoder, Int32(configuration.bitrate)), "OPUS_SET_BITRATE")
            try opus(copus_set_complexity(encoder, Int32(configuration.complexity)), "OPUS_SET_COMPLEXITY")
            try opus(copus_set_vbr(encoder, configuration.variableBitrate ? 1 : 0), "OPUS_SET_VBR")
            try opus(copus_set_inband_fec(encoder, configuration.inbandFEC ? 1 : 0), "OPUS_SET_INBAND_FEC")
            try opus(copus_set_packet_loss_perc(encoder, Int32(configuration.expectedLossPercent)), "OPUS_SET_PACKET_LOSS_PERC")
            try opus(copus_set_dtx(encoder, configuration.discontinuousTransmission ? 1 : 0), "OPUS_SET_DTX")
            try opus(copus_set_signal_voice(encoder), "OPUS_SET_SIGNAL")
        } catch {
            opus_encoder_destroy(encoder)
            throw error
        }
    }

    deinit { opus_encoder_destroy(encoder) }

    /// The complexity the encoder uses now (the configuration's until changed).
    public private(set) lazy var complexity = configuration.complexity

    /// Changes how much work the encoder does per frame (0–10): lower under load, at some
    /// quality (see the encoder profile in BENCHMARKS.md).
    public func setComplexity(_ value: Int) throws(OpusError) {
        let value = max(0, min(10, value))
        guard value != complexity else { return }
        try opus(copus_set_complexity(encoder, Int32(value)), "OPUS_SET_COMPLEXITY")
        complexity = value
    }

    /// The bitrate the encoder aims at now, bit/s (the configuration's until changed).
    public private(set) lazy var bitrate = configuration.bitrate

    /// Changes the bitrate (6 000–510 000 bit/s): lower while each frame also goes out again
    /// as several redundant copies.
    public func setBitrate(_ value: Int) throws(OpusError) {
        let value = max(6_000, min(510_000, value))
        guard value != bitrate else { return }
        try opus(copus_set_bitrate(encoder, Int32(value)), "OPUS_SET_BITRATE")
        bitrate = value
    }

    /// The loss, in percent, in-band FEC currently plans for.
    public private(set) lazy var expectedLossPercent = configuration.expectedLossPercent

    /// Changes the loss FEC plans for (0–100): more redundancy when the network loses more,
    /// none (and full quality for the bits) when it loses nothing.
    public func setExpectedLoss(percent: Int) throws(OpusError) {
        let value = max(0, min(100, percent))
        try opus(copus_set_packet_loss_perc(encoder, Int32(value)), "OPUS_SET_PACKET_LOSS_PERC")
        expectedLossPercent = value
    }

    /// Encodes one frame of interleaved samples (exactly ``OpusConfiguration/samplesPerFrame`` ×
    /// channels). Returns the packet; with DTX on, 1–2 byte packets mean "silence, do not send".
    /// Forgets the audio encoded so far (its prediction and the in-band FEC copy of the last
    /// frame), settings kept: the next frame is coded as the first of a stream. After a pause
    /// (a hold), so that the first packet does not carry audio from before it.
    public func reset() {
        _ = copus_encoder_reset(encoder)
    }

    public func encode(_ pcm: [Int16]) throws(OpusError) -> ArraySlice<UInt8> {
        precondition(pcm.count == configuration.samplesPerFrame * configuration.channels, "one whole frame")
        let length = pcm.withUnsafeBufferPointer { input in
            output.withUnsafeMutableBufferPointer { out in
                // Both buffers are non-empty: one whole frame in, 1500 bytes out.
                opus_encode(encoder, input.baseAddress!, Int32(configuration.samplesPerFrame), out.baseAddress!, Int32(out.count))
            }
        }
        try opus(length, "opus_encode")
        return output[0..<Int(length)]
    }
}

/// An Opus decoder with packet-loss concealment and FEC recovery. Use from one isolation domain.
public final class OpusDecoder {
    public let sampleRate: Int
    public let channels: Int
    private let decoder: OpaquePointer

    public init(sampleRate: Int = 48_000, channels: Int = 1) throws(OpusError) {
        var error: Int32 = 0
        guard let decoder = opus_decoder_create(Int32(sampleRate), Int32(channels), &error), error == 0 else {
            throw OpusError(function: "opus_decoder_create", code: error)
        }
        self.decoder = decoder
        self.sampleRate = sampleRate
        self.channels = channels
    }

    deinit { opus_decoder_destroy(decoder) }

    /// Makes this decoder's state a copy of `other`'s (same rate and channels): libopus keeps a
    /// decoder's state in one block of memory, and a shallow copy is a whole copy.
    public func copyState(from other: OpusDecoder) {
        precondition(other.sampleRate == sampleRate && other.channels == channels, "decoders of another format")
        UnsafeMutableRawPointer(decoder).copyMemory(from: UnsafeRawPointer(other.decoder), byteCount: Int(opus_decoder_get_size(Int32(channels))))
    }

    /// Decodes `packet` into `pcm` (sized to one frame × channels), returning samples per
    /// channel written.
    @discardableResult
    public func decode(_ packet: [UInt8], into pcm: inout [Int16]) throws(OpusError) -> Int {
        try decode(packet, fec: false, into: &pcm)
    }

    /// Recovers the frame *before* `nextPacket` from its in-band FEC data (falls back to PLC
    /// inside libopus when the packet carries none).
    @discardableResult
    public func recover(fromNext nextPacket: [UInt8], into pcm: inout [Int16]) throws(OpusError) -> Int {
        try decode(nextPacket, fec: true, into: &pcm)
    }

    /// Conceals one missing frame of `pcm.count / channels` samples (PLC).
    @discardableResult
    public func conceal(into pcm: inout [Int16]) throws(OpusError) -> Int {
        let frames = Int32(pcm.count / channels)
        let n = pcm.withUnsafeMutableBufferPointer { out in opus_decode(decoder, nil, 0, out.baseAddress!, frames, 0) }  // one frame, non-empty
        return Int(try opus(n, "opus_decode(PLC)"))
    }

    private func decode(_ packet: [UInt8], fec: Bool, into pcm: inout [Int16]) throws(OpusError) -> Int {
        let frames = Int32(pcm.count / channels)
        let n = packet.withUnsafeBufferPointer { input in
            pcm.withUnsafeMutableBufferPointer { out in
                opus_decode(decoder, input.baseAddress, Int32(input.count), out.baseAddress!, frames, fec ? 1 : 0)  // one frame, non-empty
            }
        }
        return Int(try opus(n, fec ? "opus_decode(FEC)" : "opus_decode"))
    }
}

/// What can be read from an Opus packet without decoding it.
public enum OpusPacket {
    /// Whether the packet carries in-band FEC (SILK's LBRR data) for the frame before it, as
    /// libopus 1.5's `opus_packet_has_lbrr` reads it (this libopus is older): CELT-only packets
    /// never do; otherwise the LBRR flag follows the VAD flags of each 20 ms SILK frame at the
    /// start of the first frame. Malformed packets carry nothing.
    public static func carriesFEC(_ packet: [UInt8]) -> Bool {
        guard let toc = packet.first, toc >> 3 < 16 else { return false }  // configurations 16–31: CELT only
        return packet.withUnsafeBufferPointer { bytes -> Bool in
            guard let base = bytes.baseAddress else { return false }
            let samples = opus_packet_get_samples_per_frame(base, 48_000)
            let silkFrames = samples > 960 ? Int(samples / 960) : 1
            let stereo = opus_packet_get_nb_channels(base) == 2
            var frames = [UnsafePointer<UInt8>?](repeating: nil, count: 48)
            var sizes = [Int16](repeating: 0, count: 48)
            let count = frames.withUnsafeMutableBufferPointer { f in
                sizes.withUnsafeMutableBufferPointer { s in
                    opus_packet_parse(base, Int32(bytes.count), nil, f.baseAddress, s.baseAddress!, nil)  // 48 entries, never empty
                }
            }
            guard count > 0, sizes[0] > 0, let first = frames[0]?.pointee else { return false }
            var lbrr = (first >> (7 - silkFrames)) & 1 == 1
            if stereo { lbrr = lbrr || (first >> (6 - 2 * silkFrames)) & 1 == 1 }
            return lbrr
        }
    }
}
