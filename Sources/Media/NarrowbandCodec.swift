internal import CSpeexDSP
import RTP

/// speexdsp's resampler for one mono stream at fixed rates, at its "VoIP" quality (3): flat to
/// 3 kHz going down to 8 kHz and 1 dB down at 3.4 (where the telephone band ends), and about
/// 80 dB of stop band, far below G.711's own noise (some 38 dB under a full-scale signal).
/// Quality 5 filtered with 480 taps per 8 kHz sample where this takes 288, for nothing a G.711
/// call can carry.
///
/// Digital silence is not filtered: once a whole frame of zeros has gone through (the filter's
/// memory then holds only zeros), the frames of zeros after it come out as zeros without the
/// filter, exactly what it would have made of them. A node that sends silence, or a caller
/// who says nothing, costs no resampling. (Only where the rates divide one another and the
/// frame holds whole steps of the ratio, so that the filter's phase is the same after every
/// frame and skipping one changes nothing that follows.)
final class Resampler {
    private let state: OpaquePointer
    let inputRate: Int, outputRate: Int
    /// speexdsp's `SPEEX_RESAMPLER_QUALITY_VOIP`.
    static let quality: Int32 = 3
    /// Input samples the filter remembers (its length on the input side).
    let memory: Int
    /// Frames of zeros in a row so far (the first went through the filter).
    private var silentFrames = 0
    private let skipsSilence: Bool
    /// Frames of silence that skipped the filter, since the start.
    private(set) var skippedFrames = 0

    /// - Parameter skippingSilence: false runs the filter on every frame (tests compare).
    init?(from inputRate: Int, to outputRate: Int, skippingSilence: Bool = true) {
        var error: Int32 = 0
        guard let state = speex_resampler_init(1, spx_uint32_t(inputRate), spx_uint32_t(outputRate), Self.quality, &error),
              error == 0 else { return nil }
        // No ramp-up of zeros: the first frame comes out as long as every other.
        speex_resampler_skip_zeros(state)
        self.state = state
        self.inputRate = inputRate
        self.outputRate = outputRate
        memory = 2 * Int(speex_resampler_get_input_latency(state)) + 1
        skipsSilence = skippingSilence
    }

    deinit { speex_resampler_destroy(state) }

    /// Resamples `input` into `output`, which keeps its length: short output (the filter's
    /// start) is padded by repeating its last sample, extra is dropped.
    func process(_ input: [Int16], into output: inout [Int16]) {
        if Self.isSilent(input) {
            silentFrames += 1
            if skipsSilence && silentFrames > 1 && Self.skips(frame: input.count, memory: memory, from: inputRate, to: outputRate) {
                output.withUnsafeMutableBufferPointer { $0.update(repeating: 0) }
                skippedFrames += 1
                return
            }
        } else {
            silentFrames = 0
        }
        let wanted = output.count
        var inputLength = spx_uint32_t(input.count), outputLength = spx_uint32_t(wanted)
        input.withUnsafeBufferPointer { source in
            output.withUnsafeMutableBufferPointer { target in
                _ = speex_resampler_process_int(state, 0, source.baseAddress, &inputLength, target.baseAddress, &outputLength)
            }
        }
        let produced = Int(outputLength)
        if produced < wanted {
            let last = produced > 0 ? output[produced - 1] : 0
            for i in produced..<wanted { output[i] = last }
        }
    }

    /// Whether a frame of `frame` zeros after a frame of zeros the filter took may skip it:
    /// the filter's memory is shorter than a frame, and the frame is whole steps of the ratio.
    private static func skips(frame: Int, memory: Int, from inputRate: Int, to outputRate: Int) -> Bool {
        guard frame >= memory else { return false }
        if inputRate >= outputRate {
            return inputRate % outputRate == 0 && frame % (inputRate / outputRate) == 0
        }
        return outputRate % inputRate == 0
    }

    /// Whether every sample is zero (OR-ed together: one pass, no branch per sample).
    static func isSilent(_ samples: [Int16]) -> Bool {
        samples.withUnsafeBufferPointer { buffer in
            var any: Int16 = 0
            for sample in buffer { any |= sample }
            return any == 0
        }
    }
}

/// A call's G.711 path: the endpoints' frames resampled to 8 kHz and coded a byte a sample,
/// and back; a lost frame concealed by repeating the last one, fading out.
final class NarrowbandCodec {
    let law: G711.Law
    /// Samples of one frame at 8 kHz.
    let samplesPerFrame: Int
    private let down: Resampler?
    private let up: Resampler?
    private var narrow: [Int16]
    private var decoded: [Int16] = []
    private var payload: [UInt8] = []
    /// The last frame played (at the sink's rate) and how many frames have been concealed since.
    private var last: [Int16]
    private var concealed = 0

    /// - Returns: `nil` when a resampler cannot be made for the rates.
    init?(encoding: AudioEncoding, frameDuration: Duration, captureRate: Int, playbackRate: Int, playbackSamples: Int) {
        guard encoding.isG711 else { return nil }
        law = encoding == .pcmu ? .mu : .a
        samplesPerFrame = Int(Int64(encoding.clockRate) * frameDuration.milliseconds / 1000)
        if captureRate == encoding.clockRate {
            down = nil
        } else {
            guard let resampler = Resampler(from: captureRate, to: encoding.clockRate) else { return nil }
            down = resampler
        }
        if playbackRate == encoding.clockRate {
            up = nil
        } else {
            guard let resampler = Resampler(from: encoding.clockRate, to: playbackRate) else { return nil }
            up = resampler
        }
        narrow = [Int16](repeating: 0, count: samplesPerFrame)
        last = [Int16](repeating: 0, count: playbackSamples)
    }

    /// One captured frame as a G.711 payload (a buffer reused frame after frame).
    func encode(_ frame: [Int16]) -> ArraySlice<UInt8> {
        if let down {
            down.process(frame, into: &narrow)
            G711.encode(narrow, law: law, into: &payload)
        } else {
            G711.encode(frame, law: law, into: &payload)
        }
        return payload[...]
    }

    /// Decodes one payload into `frame`; `false` (nothing written) for a payload that is not
    /// one frame long (another packet time than the call's).
    func decode(_ payload: [UInt8], into frame: inout [Int16]) -> Bool {
        guard payload.count == samplesPerFrame else { return false }
        G711.decode(payload, law: law, into: &decoded)
        if let up {
            up.process(decoded, into: &frame)
        } else {
            for i in frame.indices { frame[i] = i < decoded.count ? decoded[i] : 0 }
        }
        // Copied into the kept buffer (assigning would share the caller's, which it then writes).
        if last.count == frame.count {
            last.withUnsafeMutableBufferPointer { kept in frame.withUnsafeBufferPointer { _ = kept.update(fromContentsOf: $0) } }
        } else {
            last = frame
        }
        concealed = 0
        return true
    }

    /// A lost frame: the last one again at half the level each time, silence after three.
    func conceal(into frame: inout [Int16]) {
        concealed += 1
        let shift = concealed
        for i in frame.indices {
            frame[i] = shift > 3 || i >= last.count ? 0 : last[i] >> shift
        }
    }
}
