import ArgumentParser
import Foundation
import Media

/// Speech through a whole call (two media pipelines over the in-memory link with random loss,
/// on a manual clock) at several loss rates, beside an offline libopus encode/decode at the same
/// settings. Writes the aligned recordings for PESQ (`scripts/measure-call-quality`) and prints
/// the SNR of each against the input.
struct QualityBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "quality",
        abstract: "Speech through a call at 0/10/30 % loss (in-memory, FEC and PLC) vs offline Opus; SNR, WAVs for PESQ.",
        discussion: """
            Writes DIR/offline.wav (libopus encode/decode, no network) and DIR/call-LOSS.wav \
            (what the callee played), both aligned with the input, and prints the SNR of each. \
            scripts/measure-call-quality adds PESQ-WB scores when the pesq package is present.
            """)

    @Option(help: "Speech WAV (16-bit PCM; mono 48 kHz). Default: the synthetic speech-like signal.")
    var input: String?

    @Option(help: "Directory for the aligned WAVs.")
    var outputDirectory = "/tmp/callnode-quality"

    @Option(help: "Loss rates to run, in percent.")
    var loss: [Int] = [0, 10, 30]

    @Option(help: "Seed of the link's loss pattern.")
    var seed: UInt64 = 7

    @Option(help: ArgumentHelp("Plan FEC for this loss from the first frame, not from the peer's reports.", valueName: "PERCENT"))
    var planLoss: Int?

    @Option(help: ArgumentHelp("RFC 2198 redundancy, as two nodes negotiate it: adaptive (the default), always or off (Opus in-band FEC alone).", valueName: "WHEN"))
    var redundancy = RedundancyPolicy.adaptive.rawValue

    @Flag(help: "One JSON object per case on stdout.")
    var json = false

    func validate() throws {
        if let planLoss, !(0...100).contains(planLoss) { throw ValidationError("--plan-loss is 0–100") }
        guard RedundancyPolicy(rawValue: redundancy) != nil else { throw ValidationError("--redundancy is adaptive, always or off") }
        guard loss.allSatisfy({ (0...90).contains($0) }) else { throw ValidationError("--loss values are 0–90") }
    }

    func run() async throws {
        let speech: [Int16]
        if let input {
            let (format, samples) = try WAV.read(path: input)
            guard format == AudioFormat(sampleRate: 48_000, channels: 1) else {
                throw ValidationError("\(input) is \(format); the quality run needs 48000 Hz mono (sox IN -r 48000 -c 1 -b 16 OUT)")
            }
            speech = samples
        } else {
            speech = SyntheticSpeech.samples(seconds: 8, seed: 3)
        }
        try FileManager.default.createDirectory(atPath: outputDirectory, withIntermediateDirectories: true)
        var configuration = MediaConfiguration()
        // What two nodes agree on: red/48000/2 at 63 (AudioCapabilities), used as the policy says.
        configuration.redundancyPayloadType = 63
        configuration.redundancy = RedundancyPolicy(rawValue: redundancy) ?? .adaptive
        if let planLoss {
            configuration.opus.expectedLossPercent = planLoss
            configuration.adaptiveFEC = false
        }

        var clean = configuration.opus
        clean.expectedLossPercent = MediaConfiguration().opus.expectedLossPercent
        let offline = try Self.offline(speech, opus: clean)
        try WAV.write(offline, format: AudioFormat(), path: outputDirectory + "/offline.wav")
        report("offline libopus", loss: nil, snr: Self.snr(reference: speech, signal: offline), extra: [:])

        for percent in loss where percent > 0 {
            let ideal = try Self.offline(speech, opus: configuration.opus, loss: percent, seed: seed)
            try WAV.write(ideal, format: AudioFormat(), path: outputDirectory + "/offline-\(percent).wav")
            report("offline libopus, ideal receiver", loss: percent, snr: Self.snr(reference: speech, signal: ideal), extra: [:])
        }
        for percent in loss {
            let (played, stats, sent) = try await Self.call(speech, loss: Double(percent) / 100, seed: seed, configuration: configuration)
            let lag = Self.lag(of: speech, in: played, maximum: 9_600)
            let aligned = Array(played.dropFirst(lag).prefix(speech.count))
                + [Int16](repeating: 0, count: max(0, speech.count - (played.count - lag)))
            try WAV.write(aligned, format: AudioFormat(), path: outputDirectory + "/call-\(percent).wav")
            report("call", loss: percent, snr: Self.blockSNR(reference: speech, signal: played), extra: [
                "delay_ms": String(format: "%.1f", Double(lag) / 48), "lost": "\(stats.jitterBuffer.lost)",
                "fec_recovered": "\(stats.jitterBuffer.fecRecovered)", "concealed": "\(stats.jitterBuffer.concealed)",
                "redundancy_recovered": "\(stats.jitterBuffer.redundancyRecovered)",
                "send_kbps": String(format: "%.1f", Double(sent.bytesSent * 8) / Double(speech.count + 48_000) * 48),
                "stretched": "\(stats.jitterBuffer.stretched)", "shrunk": "\(stats.jitterBuffer.shrunk)",
                "dtx_silence": "\(stats.jitterBuffer.silence)",
            ])
        }
    }

    func report(_ subject: String, loss: Int?, snr: Double, extra: [String: String]) {
        if json {
            var fields = ["\"group\":\"quality\"", "\"subject\":\"\(subject)\"", "\"snr_db\":\(String(format: "%.2f", snr))"]
            if let loss { fields.append("\"loss_percent\":\(loss)") }
            fields += extra.sorted { $0.key < $1.key }.map { "\"\($0.key)\":\($0.value)" }
            print("{" + fields.joined(separator: ",") + "}")
        } else {
            let details = extra.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
            print(String(format: "quality, %@%@: SNR %.2f dB%@", subject, loss.map { ", \($0) % loss" } ?? "", snr,
                         details.isEmpty ? "" : " (\(details))"))
        }
    }

    /// libopus alone at the call's settings (FEC planned for no loss, as a call starts). With
    /// `loss`, the anchor for a lossy call: FEC planned for that loss from the first frame,
    /// packets dropped at random, and an ideal receiver that always has the next packet (FEC
    /// for a lost frame when the next arrived, PLC otherwise) and never changes its delay.
    static func offline(_ speech: [Int16], opus: OpusConfiguration, loss: Int = 0, seed: UInt64 = 7) throws -> [Int16] {
        var opus = opus
        if loss > 0 { opus.expectedLossPercent = loss }
        let encoder = try OpusEncoder(configuration: opus)
        let decoder = try OpusDecoder()
        let frame = opus.samplesPerFrame
        var packets: [[UInt8]?] = []
        var rng = seed &+ 0x9E37_79B9_7F4A_7C15
        func random() -> Double {  // SplitMix64
            rng &+= 0x9E37_79B9_7F4A_7C15
            var z = rng
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return Double((z ^ (z >> 31)) >> 11) / Double(1 << 53)
        }
        for offset in stride(from: 0, to: speech.count, by: frame) {
            var chunk = Array(speech[offset..<min(speech.count, offset + frame)])
            if chunk.count < frame { chunk += [Int16](repeating: 0, count: frame - chunk.count) }
            let packet = Array(try encoder.encode(chunk))
            packets.append(random() < Double(loss) / 100 ? nil : packet)
        }
        var decoded: [Int16] = [], out = [Int16](repeating: 0, count: frame)
        for (index, packet) in packets.enumerated() {
            if let packet {
                _ = try decoder.decode(packet, into: &out)
            } else if index + 1 < packets.count, let next = packets[index + 1] {
                _ = try decoder.recover(fromNext: next, into: &out)
            } else {
                _ = try decoder.conceal(into: &out)
            }
            decoded += out
        }
        decoded += [Int16](repeating: 0, count: frame)
        let lag = lag(of: speech, in: decoded, maximum: 2_400)
        return Array(decoded.dropFirst(lag).prefix(speech.count))
    }

    /// The speech through a caller's and a callee's MediaActor over the lossy in-memory link.
    static func call(_ speech: [Int16], loss: Double, seed: UInt64, configuration: MediaConfiguration) async throws -> ([Int16], MediaStatistics, MediaStatistics) {
        let clock = MediaClock.manual(frameDuration: configuration.opus.frameDuration)
        let link = InMemoryMediaLink(clock: clock, aToB: LinkConditions(loss: loss), seed: seed)
        clock.add(link)
        let capture = ManualAudioEndpoint(), playback = ManualAudioEndpoint()
        let keyA = SRTPKey.random(), keyB = SRTPKey.random()
        let caller = try MediaActor(configuration: configuration, transport: link.a, keys: MediaKeys(outbound: keyA, inbound: keyB),
                                    source: capture, sink: NullSink(), clock: clock)
        let callee = try MediaActor(configuration: configuration, transport: link.b, keys: MediaKeys(outbound: keyB, inbound: keyA),
                                    source: SilenceSource(), sink: playback, clock: clock)
        try await caller.start()
        try await callee.start()
        let frame = configuration.opus.samplesPerFrame
        var played: [Int16] = []
        // One more second after the speech so the tail plays out.
        for offset in stride(from: 0, to: speech.count + 48_000, by: frame) {
            var chunk = offset < speech.count ? Array(speech[offset..<min(speech.count, offset + frame)]) : []
            if chunk.count < frame { chunk += [Int16](repeating: 0, count: frame - chunk.count) }
            capture.pushCapture(chunk)
            await clock.advance()
            played += playback.pullPlayback(maximum: frame)
        }
        let stats = await callee.statistics
        let sent = await caller.statistics
        await caller.stop()
        await callee.stop()
        return (played, stats, sent)
    }

    /// The delay (0...maximum samples) at which `signal` best matches `reference`, over the
    /// reference's first two seconds: a coarse search refined around its best.
    static func lag(of reference: [Int16], in signal: [Int16], maximum: Int) -> Int {
        let window = min(96_000, reference.count)
        func score(_ lag: Int, step: Int) -> Double {
            var dot = 0.0, energy = 0.0
            var i = 0
            while i < window && i + lag < signal.count {
                let x = Double(reference[i]), y = Double(signal[i + lag])
                dot += x * y; energy += y * y
                i += step
            }
            return energy > 0 ? dot / energy.squareRoot() : 0
        }
        var best = (lag: 0, score: -Double.infinity)
        for lag in stride(from: 0, through: maximum, by: 4) {
            let s = score(lag, step: 4)
            if s > best.score { best = (lag, s) }
        }
        var refined = (lag: best.lag, score: score(best.lag, step: 1))
        for lag in max(0, best.lag - 4)...(best.lag + 4) {
            let s = score(lag, step: 1)
            if s > refined.score { refined = (lag, s) }
        }
        return refined.lag
    }

    /// The SNR with each second aligned on its own: the jitter buffer changes its delay during
    /// a lossy call (one frame more for FEC), which one global alignment would count as noise.
    static func blockSNR(reference: [Int16], signal: [Int16]) -> Double {
        var power = 0.0, noise = 0.0
        for start in stride(from: 0, to: reference.count, by: 48_000) {
            let block = Array(reference[start..<min(reference.count, start + 48_000)])
            let tail = Array(signal.dropFirst(start))
            let lag = lag(of: block, in: tail, maximum: 9_600)
            for i in 0..<block.count where i + lag < tail.count {
                let x = Double(block[i]), e = x - Double(tail[i + lag])
                power += x * x; noise += e * e
            }
        }
        return 10 * log10(power / max(noise, 1))
    }

    /// 10·log10 of the reference's energy over the error's, sample by sample.
    static func snr(reference: [Int16], signal: [Int16]) -> Double {
        var power = 0.0, noise = 0.0
        for i in 0..<min(reference.count, signal.count) {
            let x = Double(reference[i]), e = x - Double(signal[i])
            power += x * x; noise += e * e
        }
        return 10 * log10(power / max(noise, 1))
    }
}
