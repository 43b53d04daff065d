import ArgumentParser
import CallNode
import CallNodeTestKit
@_spi(Benchmarks) import Media
import Foundation

/// A fixed call of a given length and nothing else, for counting instructions: two
/// `MediaActor`s over the in-memory link on a manual media clock (speech-like audio, the node's
/// default profile: Opus, SRTP, jitter buffer, decoding), or the bare Opus + SRTP loop doing the
/// same C calls. Counted twice under callgrind at two lengths, the difference divided by the
/// frames between them is what one more frame costs, the process's start and the call's set-up
/// left out (`scripts/perf-budget`).
struct FramesBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "frames",
        abstract: "Run one fixed in-memory call (or the bare Opus+SRTP loop) for N frames each way, for instruction counts.")

    @Option(help: "Frames each leg sends and plays (20 ms each).")
    var frames = 250

    @Flag(help: "The bare Opus+SRTP loop instead of the call (one leg's C work per frame, twice per frame: both directions).")
    var bare = false

    @Option(help: "The call: opus (the node's default profile: Opus, SRTP) or pcmu (a SIP phone's call: G.711 µ-law over plain RTP).")
    var profile = "opus"

    func validate() throws {
        guard (10...50_000).contains(frames) else { throw ValidationError("--frames is 10–50000") }
        guard ["opus", "pcmu"].contains(profile) else { throw ValidationError("--profile is opus or pcmu") }
        guard !(bare && profile != "opus") else { throw ValidationError("--bare is the Opus+SRTP loop: --profile opus only") }
    }

    func run() async throws {
        let speech = SyntheticSpeech.samples(seconds: 10)
        let configuration = Self.callConfiguration()
        if bare {
            guard BareMediaBenchmark.run(frames: 2 * frames, pcm: speech, bitrate: Int32(configuration.opus.bitrate),
                                         complexity: Int32(configuration.opus.complexity),
                                         expectedLossPercent: Int32(configuration.opus.expectedLossPercent)) != nil else {
                throw ValidationError("the bare Opus/SRTP loop failed")
            }
            print("frames: bare loop, \(2 * frames) frames encoded, protected, unprotected and decoded")
            return
        }
        let clock = MediaClock.manual()
        var callConfiguration = configuration
        if profile == "pcmu" {
            callConfiguration.encoding = .pcmu
            callConfiguration.payloadType = 0
        }
        let call = try await MediaBench.makeCall(clock: clock, speech: speech, configuration: callConfiguration, plainRTP: profile == "pcmu")
        await clock.advance(frames: frames)
        let a = await call.0.statistics, b = await call.1.statistics
        await call.0.stop()
        await call.1.stop()
        // A call that did not carry every frame would make a count of nothing.
        guard min(a.packetsSent, b.packetsSent) == frames, min(a.jitterBuffer.packetsPlayed, b.jitterBuffer.packetsPlayed) >= frames - 2 else {
            throw ValidationError("the call did not carry every frame: sent \(a.packetsSent)/\(b.packetsSent), played \(a.jitterBuffer.packetsPlayed)/\(b.jitterBuffer.packetsPlayed)")
        }
        print("frames: \(frames) frames each way; sent \(a.packetsSent)/\(b.packetsSent), played \(a.jitterBuffer.packetsPlayed)/\(b.jitterBuffer.packetsPlayed)")
    }

    /// The node's default profile without the report timer's randomness: a statistics
    /// interval longer than any run, so every frame is the same work however long the call.
    static func callConfiguration() -> MediaConfiguration {
        var configuration = MediaConfiguration()
        configuration.statisticsInterval = .seconds(3600)
        return configuration
    }
}
