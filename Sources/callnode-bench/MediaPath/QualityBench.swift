import MediaTiming
import CallNodeTestKit
import ArgumentParser
import Foundation
import Media

/// A loss case of the quality run: an average loss and how long its bursts are on average
/// (`10` is 10 % random loss; `10b3` 10 % in bursts of 3 packets on average, a Gilbert model).
struct LossCase: ExpressibleByArgument, CustomStringConvertible, Hashable {
    var percent: Int
    var meanBurst: Int

    init(percent: Int, meanBurst: Int = 1) {
        self.percent = percent
        self.meanBurst = meanBurst
    }

    init?(argument: String) {
        let parts = argument.split(separator: "b", maxSplits: 1)
        guard let percent = parts.first.flatMap({ Int($0) }), (0...90).contains(percent) else { return nil }
        let burst = parts.count == 2 ? Int(parts[1]) : 1
        guard let burst, (1...50).contains(burst) else { return nil }
        self.init(percent: percent, meanBurst: burst)
    }

    var isBursty: Bool { meanBurst > 1 }
    /// `10` or `10b3`: the argument, and the recordings' file name part.
    var description: String { isBursty ? "\(percent)b\(meanBurst)" : "\(percent)" }
    /// As a person reads it.
    var label: String { isBursty ? "\(percent) % bursty loss (bursts of \(meanBurst))" : "\(percent) % loss" }
    var conditions: LinkConditions { LinkConditions(loss: Double(percent) / 100, meanBurst: Double(meanBurst)) }
}

/// A stall of the caller's host: what it sends for `milliseconds` from `second` into the call
/// arrives together when the stall ends (`30@2.1`), as a loaded host's late ticks send it.
struct Stall: ExpressibleByArgument, Hashable {
    var milliseconds: Int
    var second: Double

    init?(argument: String) {
        let parts = argument.split(separator: "@")
        guard parts.count == 2, let milliseconds = Int(parts[0]), (1...2_000).contains(milliseconds),
              let second = Double(parts[1]), second >= 0 else { return nil }
        self.milliseconds = milliseconds
        self.second = second
    }

    var start: Duration { .milliseconds(Int64((second * 1_000).rounded())) }
    var end: Duration { start + .milliseconds(milliseconds) }

    /// The delay of a packet sent at `time` under these stalls (none outside them).
    static func delay(at time: Duration, _ stalls: [Stall]) -> Duration {
        stalls.first { $0.start <= time && time < $0.end }.map { $0.end - time } ?? .zero
    }
}

/// Speech through a whole call (two media pipelines over the in-memory link with random or
/// bursty loss, on a manual clock) at several loss rates, beside an offline libopus
/// encode/decode at the same settings. Writes the aligned recordings for PESQ
/// (`scripts/measure-call-quality`) and prints the SNR of each against the input, what was
/// rebuilt and concealed, and the bitrate each case sent.
struct QualityBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "quality",
        abstract: "Speech through a call at random and bursty loss (in-memory, redundancy, FEC, PLC) vs offline Opus; SNR, WAVs for PESQ.",
        discussion: """
            Writes DIR/offline.wav (libopus encode/decode, no network), DIR/offline-LOSS-sSEED.wav \
            (the ideal-receiver anchor at that loss and loss pattern) and DIR/call-LOSS-sSEED.wav \
            (what the callee played), all aligned with the input, and prints the SNR of each. A loss case is a \
            percentage (random loss) or PERCENTbBURST (a Gilbert model: that average loss in \
            bursts of BURST packets on average), e.g. --loss 10 --loss 10b3. \
            scripts/measure-call-quality adds PESQ-WB scores when the pesq package is present.
            """)

    @Option(help: "Speech WAV (16-bit PCM; mono 48 kHz). Default: the synthetic speech-like signal.")
    var input: String?

    @Option(help: "Directory for the aligned WAVs.")
    var outputDirectory = "/tmp/callnode-quality"

    @Option(help: ArgumentHelp("Loss cases to run: PERCENT (random) or PERCENTbBURST (bursty).", valueName: "CASE"))
    var loss: [LossCase] = [0, 10, 20, 30, 50].map { LossCase(percent: $0) } + [LossCase(percent: 10, meanBurst: 3), LossCase(percent: 20, meanBurst: 5)]

    @Option(help: "Seed of the link's loss pattern (the first of --seeds).")
    var seed: UInt64 = 7

    @Option(help: "How many loss patterns each lossy case runs (seeds SEED, SEED+1, …): one pattern of a 17 s call is a small sample of bursty loss.")
    var seeds = 5

    @Option(help: ArgumentHelp("Plan FEC for this loss from the first frame, not from the peer's reports.", valueName: "PERCENT"))
    var planLoss: Int?

    @Option(help: ArgumentHelp("RFC 2198 redundancy, as two nodes negotiate it: adaptive (the default), always or off (Opus in-band FEC alone).", valueName: "WHEN"))
    var redundancy = RedundancyPolicy.adaptive.rawValue

    @Flag(help: "Reports on the RTCP interval only (no early feedback when loss starts), for comparison.")
    var noEarlyFeedback = false

    @Option(help: ArgumentHelp("A stall of the caller's host: what it sends for MS milliseconds from SECOND arrives together when the stall ends (a loaded host's late ticks, not network jitter), e.g. 30@2.1; repeatable.", valueName: "MS@SECOND"))
    var stall: [Stall] = []

    @Flag(help: "One JSON object per case on stdout.")
    var json = false

    func validate() throws {
        if let planLoss, !(0...100).contains(planLoss) { throw ValidationError("--plan-loss is 0–100") }
        guard RedundancyPolicy(rawValue: redundancy) != nil else { throw ValidationError("--redundancy is adaptive, always or off") }
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
        if noEarlyFeedback { configuration.earlyReportAfterPackets = nil }
        if let planLoss {
            configuration.opus.expectedLossPercent = planLoss
            configuration.adaptiveFEC = false
        }

        var clean = configuration.opus
        clean.expectedLossPercent = MediaConfiguration().opus.expectedLossPercent
        let offline = try Self.offline(speech, opus: clean)
        try WAV.write(offline.samples, format: AudioFormat(), path: outputDirectory + "/offline.wav")
        report("offline libopus", loss: nil, snr: Self.snr(reference: speech, signal: offline.samples), extra: [
            "send_kbps": String(format: "%.1f", Double(offline.bytesPerSecond.reduce(0, +) * 8) / Double(speech.count) * 48),
        ])

        let patterns = seedsToRun, first = seed
        for lossCase in loss where lossCase.percent > 0 {
            for seed in patterns {
                let ideal = try Self.offline(speech, opus: configuration.opus, loss: lossCase, seed: seed)
                try WAV.write(ideal.samples, format: AudioFormat(), path: outputDirectory + "/offline-\(lossCase)-s\(seed).wav")
                report("offline libopus, ideal receiver", loss: lossCase, snr: Self.snr(reference: speech, signal: ideal.samples),
                       extra: ["seed": "\(seed)"])
            }
        }
        for lossCase in loss {
            for seed in lossCase.percent == 0 ? [first] : patterns {
                let run = try await Self.call(speech, conditions: lossCase.conditions, stalls: stall, seed: seed, configuration: configuration)
                let (played, stats, sent) = (run.played, run.received, run.sent)
                let lag = Self.lag(of: speech, in: played, maximum: 9_600)
                let aligned = Array(played.dropFirst(lag).prefix(speech.count))
                    + [Int16](repeating: 0, count: max(0, speech.count - (played.count - lag)))
                try WAV.write(aligned, format: AudioFormat(), path: outputDirectory + "/call-\(lossCase)-s\(seed).wav")
                var extra = [
                    "seed": "\(seed)",
                    "delay_ms": String(format: "%.1f", Double(lag) / 48), "lost": "\(stats.jitterBuffer.lost)",
                    "fec_recovered": "\(stats.jitterBuffer.fecRecovered)", "concealed": "\(stats.jitterBuffer.concealed)",
                    "redundancy_recovered": "\(stats.jitterBuffer.redundancyRecovered)",
                    "send_kbps": String(format: "%.1f", Double(sent.bytesSent * 8) / Double(speech.count + 48_000) * 48),
                    "stretched": "\(stats.jitterBuffer.stretched)", "shrunk": "\(stats.jitterBuffer.shrunk)",
                    "expanded": "\(stats.jitterBuffer.expanded)", "compressed": "\(stats.jitterBuffer.compressed)",
                    "dtx_silence": "\(stats.jitterBuffer.silence)", "late": "\(stats.jitterBuffer.late)",
                    "redundancy_depth_frames": "[" + run.framesAtDepth.map(String.init).joined(separator: ",") + "]",
                ]
                if lossCase.percent == 0 {
                    // When the payload sent is back to what libopus alone makes of the same speech
                    // (each second within 10 % of the offline encode's, from then to the end).
                    let back = Self.backToBase(call: run.bytesPerSecond, offline: offline.bytesPerSecond)
                    extra["base_bitrate_after_s"] = back.map { "\($0)" } ?? "null"
                }
                report("call", loss: lossCase, snr: Self.blockSNR(reference: speech, signal: played), extra: extra)
            }
        }
    }

    var seedsToRun: [UInt64] { (0..<UInt64(max(1, seeds))).map { seed &+ $0 } }

    /// The first whole second from which every second of the call's payload is within 10 % of
    /// the offline encode's (the plain bitrate), or nil if the call never got there.
    static func backToBase(call: [Int], offline: [Int]) -> Int? {
        let seconds = min(call.count, offline.count)
        guard seconds > 0 else { return nil }
        var from: Int? = nil
        for second in (0..<seconds).reversed() {
            guard Double(call[second]) <= 1.1 * Double(offline[second]) + 200 else { break }
            from = second
        }
        return from
    }

    func report(_ subject: String, loss: LossCase?, snr: Double, extra: [String: String]) {
        if json {
            var fields = ["\"group\":\"quality\"", "\"subject\":\"\(subject)\"", "\"snr_db\":\(String(format: "%.2f", snr))"]
            if let loss {
                fields.append("\"loss_percent\":\(loss.percent)")
                fields.append("\"mean_burst\":\(loss.meanBurst)")
                fields.append("\"case\":\"\(loss)\"")
            }
            fields += extra.sorted { $0.key < $1.key }.map { "\"\($0.key)\":\($0.value)" }
            print("{" + fields.joined(separator: ",") + "}")
        } else {
            let details = extra.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ")
            print(String(format: "quality, %@%@: SNR %.2f dB%@", subject, loss.map { ", \($0.label)" } ?? "", snr,
                         details.isEmpty ? "" : " (\(details))"))
        }
    }

    /// libopus alone at the call's settings (FEC planned for no loss, as a call starts). With
    /// `loss`, the anchor for a lossy call: FEC planned for that loss from the first frame,
    /// packets dropped at random, and an ideal receiver that always has the next packet (FEC
    /// for a lost frame when the next arrived, PLC otherwise) and never changes its delay.
    static func offline(_ speech: [Int16], opus: OpusConfiguration, loss: LossCase = LossCase(percent: 0),
                        seed: UInt64 = 7) throws -> (samples: [Int16], bytesPerSecond: [Int]) {
        var opus = opus
        if loss.percent > 0 { opus.expectedLossPercent = loss.percent }
        let encoder = try OpusEncoder(configuration: opus)
        let decoder = try OpusDecoder()
        let frame = opus.samplesPerFrame
        var packets: [[UInt8]?] = []
        var pattern = LossPattern(loss: Double(loss.percent) / 100, meanBurst: Double(loss.meanBurst), seed: seed)
        var bytesPerSecond: [Int] = []
        for offset in stride(from: 0, to: speech.count, by: frame) {
            var chunk = Array(speech[offset..<min(speech.count, offset + frame)])
            if chunk.count < frame { chunk += [Int16](repeating: 0, count: frame - chunk.count) }
            let packet = Array(try encoder.encode(chunk))
            if offset % 48_000 == 0 { bytesPerSecond.append(0) }
            bytesPerSecond[bytesPerSecond.count - 1] += packet.count
            packets.append(pattern.dropsNext() ? nil : packet)
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
        return (Array(decoded.dropFirst(lag).prefix(speech.count)), bytesPerSecond)
    }

    /// What a quality call measured.
    struct CallRun {
        var played: [Int16]
        var received: MediaStatistics
        var sent: MediaStatistics
        /// Payload bytes the caller sent in each second of the speech.
        var bytesPerSecond: [Int]
        /// How many frames the caller sent with 0, 1, 2 and 3 redundant copies.
        var framesAtDepth: [Int]
    }

    /// The speech through a caller's and a callee's MediaActor over the lossy in-memory link.
    static func call(_ speech: [Int16], conditions: LinkConditions, stalls: [Stall] = [], seed: UInt64,
                     configuration: MediaConfiguration) async throws -> CallRun {
        let clock = MediaClock.manual(frameDuration: configuration.opus.frameDuration)
        let link = InMemoryMediaLink(clock: clock, aToB: conditions, seed: seed)
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
        var bytesPerSecond: [Int] = [], framesAtDepth = [0, 0, 0, 0, 0, 0]
        var sentBefore = 0
        // One more second after the speech so the tail plays out.
        for offset in stride(from: 0, to: speech.count + 48_000, by: frame) {
            var chunk = offset < speech.count ? Array(speech[offset..<min(speech.count, offset + frame)]) : []
            if chunk.count < frame { chunk += [Int16](repeating: 0, count: frame - chunk.count) }
            capture.pushCapture(chunk)
            if !stalls.isEmpty {
                var now = conditions
                now.delay = conditions.delay + Stall.delay(at: clock.now + configuration.opus.frameDuration, stalls)
                link.setConditions(now, fromA: true)
            }
            await clock.advance()
            played += playback.pullPlayback(maximum: frame)
            let sent = await caller.statistics
            framesAtDepth[min(5, sent.sendingRedundancy ? sent.redundancyDepth : 0)] += 1
            if (offset + frame) % 48_000 == 0 || offset + frame >= speech.count, offset < speech.count {
                bytesPerSecond.append(Int(sent.bytesSent) - sentBefore)
                sentBefore = Int(sent.bytesSent)
            }
        }
        let stats = await callee.statistics
        let sent = await caller.statistics
        await caller.stop()
        await callee.stop()
        return CallRun(played: played, received: stats, sent: sent, bytesPerSecond: bytesPerSecond, framesAtDepth: framesAtDepth)
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
