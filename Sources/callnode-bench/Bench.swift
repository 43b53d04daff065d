import ArgumentParser
import CallNode
import CallNodeTestKit
@_spi(Benchmarks) import ICE
@_spi(Benchmarks) import Media
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// The entry point: the command runs in a task while the main thread waits for it. (An async
/// `main` parks the main thread in `dispatch_main`, which valgrind 3.19 cannot follow: it
/// crashes at the first worker thread, and `scripts/perf-budget` counts instructions under
/// callgrind.)
@main
enum BenchMain {
    static func main() {
        let done = DispatchSemaphore(value: 0)
        // Detached: `main` is on the main actor, whose thread waits below.
        Task.detached {
            await Bench.main()
            done.signal()
        }
        done.wait()
    }
}

struct Bench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "callnode-bench",
        abstract: "CallNode benchmarks. Build with -c release; figures go to BENCHMARKS.md.",
        subcommands: [SetupBench.self, LatencyBench.self, IceBench.self, MediaBench.self, QualityBench.self, CodecBench.self, CallsBench.self, VoiceBench.self, SoakBench.self, BridgeBench.self, ProcessBench.self, AllocationBench.self, FramesBench.self, MouthToEarBench.self, JanusBench.self, OpusCaptureBench.self, BareG711Bench.self, BareOpusBench.self])
}

extension Array {
    func asyncMap<T>(_ transform: (Element) async -> T) async -> [T] {
        var out: [T] = []
        for element in self { out.append(await transform(element)) }
        return out
    }
}

/// A clock client that does nothing: the idle clock's baseline.
final class IdleClient: MediaClockClient {
    func tick(now: Duration) async {}
}
