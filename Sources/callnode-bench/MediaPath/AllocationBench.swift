import ArgumentParser
import AudioSession
import CallNode
import Foundation
import MallocInterposerSwift
@_spi(Benchmarks) import Media

#if canImport(Glibc)
import Glibc
#endif

/// Heap allocations a call makes per frame once it runs steadily: two media legs over the
/// in-memory link on a manual clock (speech both ways, SRTP, RTCP, statistics), counted by
/// ordo-one's malloc interposer (every `malloc`, `calloc`, `realloc` and aligned allocation in
/// the process, whichever library makes it).
struct AllocationBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "allocations",
        abstract: "Heap allocations per frame of a running call (malloc interposer).",
        discussion: """
            Runs one call (two legs, Opus at the node's defaults, DTLS-SRTP keys, speech both \
            ways) on a manual clock for --warm-up frames, then counts every allocation in the \
            process over --frames frames. The interposer is preloaded: the command restarts \
            itself with LD_PRELOAD set to the libMallocInterposerSwift.so built beside it.
            """)

    @Option(help: "Frames (20 ms) to run before counting.")
    var warmUp = 250

    @Option(help: "Frames (20 ms) to count over.")
    var frames = 500

    @Option(help: "Encrypt frames end to end (the node's default for node-to-node calls): on, off.")
    var frameEncryption: Toggle = .on

    @Flag(help: "One leg plays and captures through an audio session's bridge port, as a node's call does (the node's file and null devices: a tone in, nothing out), instead of on a plain source and sink.")
    var throughSession = false

    @Option(help: "Exit with status 1 if a leg makes more allocations than this per frame.")
    var maximumPerFrame: Double?

    enum Toggle: String, ExpressibleByArgument { case on, off }

    func validate() throws {
        guard warmUp >= 0, frames >= 50 else { throw ValidationError("--frames is at least 50, --warm-up at least 0") }
    }

    func run() async throws {
        try Self.preloadInterposer()
        var configuration = MediaConfiguration()
        configuration.statisticsInterval = .seconds(1)
        let clock = MediaClock.manual()
        var session: AudioSessionOwner<AppOwned>?
        var endpoints: (any AudioSource, any AudioSink)?
        if throughSession {
            let owner = AudioSessionOwner<AppOwned>(name: "allocations", configuration: AudioSessionConfiguration(),
                                                    backend: NodeAudioBackend(input: .tone(440), output: .null))
            try await owner.setVoiceProcessingEnabled(false)
            _ = try await owner.activate()
            let port = try await owner.port()
            session = owner
            endpoints = (port.source, port.sink)
        }
        let (a, b) = try await MediaBench.makeCall(clock: clock, speech: SyntheticSpeech.samples(seconds: 10),
                                                    configuration: configuration, frameEncryption: frameEncryption == .on,
                                                    endpointsA: endpoints)
        await clock.advance(frames: warmUp)
        MallocInterposerSwift.reset()
        MallocInterposerSwift.hook()
        await clock.advance(frames: frames)
        MallocInterposerSwift.unhook()
        let counted = MallocInterposerSwift.getStatistics()
        let sa = await a.statistics, sb = await b.statistics
        await a.stop()
        await b.stop()
        if let session { try await session.deactivate() }
        guard min(sa.jitterBuffer.packetsPlayed, sb.jitterBuffer.packetsPlayed) >= warmUp + frames - 2 else {
            throw ValidationError("the call did not carry every frame (played \(sa.jitterBuffer.packetsPlayed)/\(sb.jitterBuffer.packetsPlayed))")
        }
        let perFrame = Double(counted.mallocCount) / Double(2 * frames)
        print(String(format: "allocations: %.2f per leg per frame (%d allocations, %.0f bytes per leg per frame, %d frees) over %d frames of two legs, frames encrypted end to end %@%@",
                     perFrame, counted.mallocCount, Double(counted.mallocBytesCount) / Double(2 * frames), counted.freeCount, frames,
                     frameEncryption.rawValue, throughSession ? ", one leg on an audio session's bridge port" : ""))
        if let maximumPerFrame, perFrame > maximumPerFrame {
            print(String(format: "allocations: more than the %.2f per leg per frame allowed", maximumPerFrame))
            throw ExitCode(1)
        }
    }

    /// Restarts this process with the interposer preloaded unless it is already counting.
    static func preloadInterposer() throws {
        MallocInterposerSwift.initialize()
        MallocInterposerSwift.reset()
        MallocInterposerSwift.hook()
        let probe = UnsafeMutableRawPointer.allocate(byteCount: 64, alignment: 8)
        probe.deallocate()
        MallocInterposerSwift.unhook()
        guard MallocInterposerSwift.getStatistics().mallocCount == 0 else { return }
        guard ProcessInfo.processInfo.environment["CALLNODE_INTERPOSER_PRELOADED"] == nil else {
            throw ValidationError("the malloc interposer is preloaded but counts nothing")
        }
        let executable = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        let library = executable.deletingLastPathComponent().appendingPathComponent("libMallocInterposerSwift.so").path
        guard FileManager.default.fileExists(atPath: library) else {
            throw ValidationError("\(library) is missing: build callnode-bench with the package (swift build --product callnode-bench)")
        }
        setenv("LD_PRELOAD", library, 1)
        setenv("CALLNODE_INTERPOSER_PRELOADED", "1", 1)
        let argv: [UnsafeMutablePointer<CChar>?] = CommandLine.arguments.map { strdup($0) } + [nil]
        execv(executable.path, argv)
        throw ValidationError("cannot restart \(executable.path) with the interposer: \(String(cString: strerror(errno)))")
    }
}
