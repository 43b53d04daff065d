import ArgumentParser
import CallNode
import CallNodeTestKit
@_spi(Benchmarks) import ICE
@_spi(Benchmarks) import Media
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// One WAV file through the encoder profile and back (no network), for quality scoring:
/// `scripts/measure-quality` scores the output with PESQ-WB.
struct CodecBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "codec",
        abstract: "Encode and decode a 48 kHz mono WAV with an Opus profile; print CPU per call-second.")

    @Option(help: "Input WAV (16-bit PCM, mono, 48 kHz).")
    var input: String

    @Option(help: "Output WAV.")
    var output: String

    @Option(help: "Opus bitrate, bit/s.")
    var bitrate = 32_000

    @Option(help: "Opus complexity, 0–10.")
    var complexity = 5

    @Option(help: "Expected loss the encoder plans in-band FEC for, % (0 turns FEC off).")
    var expectedLoss = OpusConfiguration().expectedLossPercent

    func run() throws {
        let (format, samples) = try WAV.read(path: input)
        guard format == AudioFormat(sampleRate: 48_000, channels: 1) else {
            throw ValidationError("\(input) is \(format); the quality run needs 48000 Hz mono")
        }
        var opus = OpusConfiguration()
        opus.bitrate = bitrate
        opus.complexity = complexity
        opus.expectedLossPercent = expectedLoss
        opus.inbandFEC = expectedLoss > 0
        let encoder = try OpusEncoder(configuration: opus)
        let decoder = try OpusDecoder()
        var frame = [Int16](repeating: 0, count: 960)
        var decoded: [Int16] = []
        decoded.reserveCapacity(samples.count)
        var bytes = 0
        let start = BareMediaBenchmark.cpuTime()
        for offset in stride(from: 0, to: samples.count - 959, by: 960) {
            let packet = try encoder.encode(Array(samples[offset..<(offset + 960)]))
            bytes += packet.count
            try decoder.decode(Array(packet), into: &frame)
            decoded += frame
        }
        let cpu = (BareMediaBenchmark.cpuTime() - start).seconds
        // Undo the codec's delay (lookahead) so the output lines up with the input.
        let delay = 312  // 6.5 ms at 48 kHz: libopus's encoder lookahead in VoIP mode
        let aligned = Array(decoded.dropFirst(delay)) + [Int16](repeating: 0, count: delay)
        try WAV.write(aligned, format: format, path: output)
        let seconds = Double(samples.count) / 48_000
        print(String(format: "quality: %d bit/s target, %.1f kbit/s actual, complexity %d, FEC for %d %% loss, %.4f CPU s per call-second (encode+decode)",
                     bitrate, Double(bytes * 8) / seconds / 1000, complexity, expectedLoss, cpu / seconds))
    }
}
