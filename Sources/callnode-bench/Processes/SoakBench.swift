import ArgumentParser
import CallNode
import Foundation

/// Many calls in one process: file descriptors, threads and resident memory at checkpoints.
struct SoakBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "soak",
        abstract: "Sets up and tears down --calls calls between two nodes on loopback; reports fds, threads and RSS at checkpoints.",
        discussion: """
            Each call is complete: TCP + TLS signaling, ICE, SRTP, Opus, the callee's first \
            decoded audio, hang-up, both ends reporting the end. Before each checkpoint the ICE \
            agent pools are refilled, so every checkpoint sees the node at rest.
            """)

    @Option(help: "Calls in all.")
    var calls = 1_000

    @Option(parsing: .upToNextOption, help: "Report after these many calls (space-separated).")
    var checkpoints: [Int] = [100, 500, 1_000]

    func validate() throws {
        guard calls > 0 else { throw ValidationError("--calls must be at least 1") }
        guard checkpoints.allSatisfy({ (1...calls).contains($0) }) else { throw ValidationError("--checkpoints must lie within 1...--calls") }
    }

    struct Snapshot {
        var fileDescriptors: Int
        var threads: Int
        var residentKiB: Int

        static func current() -> Snapshot {
            let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1
            let threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? -1
            let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
            let rss = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }
                .flatMap { Int($0.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "") } ?? -1
            return Snapshot(fileDescriptors: fds, threads: threads, residentKiB: rss)
        }
    }

    func run() async throws {
        let pair = try await NodePair()
        defer { pair.removeHome() }
        let start = ContinuousClock.now
        var setup: [Double] = []
        let baseline = try await Self.atRest(pair)
        print("calls     fds  threads   RSS MiB   median setup (last block)")
        print(String(format: "%5d  %6d  %7d  %8.1f", 0, baseline.fileDescriptors, baseline.threads, Double(baseline.residentKiB) / 1024))
        for index in 1...calls {
            let run = try await SetupBench.measure(caller: pair.caller, callee: pair.callee)
            setup.append(run.firstAudio)
            if checkpoints.contains(index) {
                let snapshot = try await Self.atRest(pair)
                let median = setup.sorted()[setup.count / 2]
                print(String(format: "%5d  %6d  %7d  %8.1f   %.1f ms", index, snapshot.fileDescriptors, snapshot.threads,
                             Double(snapshot.residentKiB) / 1024, median))
                setup.removeAll()
            }
        }
        await pair.shutdown()
        // The Recents databases grow with every call; SQLite's page cache grows with them (up
        // to its bound), which shows in the resident memory.
        let databases = ["alice", "bob"].map { name in
            ["", "-wal"].reduce(0) { sum, suffix in
                sum + (((try? FileManager.default.attributesOfItem(atPath: "\(pair.directory)/\(name)/callnode.sqlite\(suffix)"))?[.size] as? Int) ?? 0)
            }
        }
        print(String(format: "%d calls in %.0f s; Recents databases %.1f MiB (caller) and %.1f MiB (callee) with their WAL",
                     calls, (ContinuousClock.now - start).milliseconds / 1000, Double(databases[0]) / 1_048_576, Double(databases[1]) / 1_048_576))
    }

    /// Waits (bounded) until both nodes' ICE agent pools are full again, then measures.
    static func atRest(_ pair: NodePair) async throws -> Snapshot {
        let deadline = ContinuousClock.now + .seconds(10)
        while true {
            let pools = (await pair.caller.pooledICEAgents, await pair.callee.pooledICEAgents)
            if pools.0 >= 1 && pools.1 >= 1 { break }
            guard ContinuousClock.now < deadline else { throw ValidationError("the ICE agent pools did not refill within 10 s") }
            try await Task.sleep(for: .milliseconds(5))
        }
        return Snapshot.current()
    }
}
