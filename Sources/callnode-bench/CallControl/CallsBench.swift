import ArgumentParser
import CallNode
import CallNodeTestKit
import Foundation
import GRDB

#if canImport(Glibc)
import Glibc
#endif

/// Call control cost: whole call lifecycles (start → ring → answer → media connected → end)
/// through two call managers joined by ``InMemoryCallPeers``, with and without Recents in
/// SQLite, against the bare SQLite writes the same calls make.
struct CallsBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "calls",
        abstract: "Call lifecycles per second through two CallManagers, with and without Recents, vs bare SQLite writes.")

    @Option(help: "Calls per measurement.")
    var calls = 2_000

    @Option(help: "Tasks placing calls at once.")
    var concurrency = 8

    @Flag(help: "One JSON object per measurement on stdout.")
    var json = false

    func run() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("callnode-bench-\(getpid())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }

        let memory = try await lifecycles(stores: nil)
        report("lifecycle, no store", memory)
        let stored = try await lifecycles(stores: (try CallStore(path: directory + "/a.sqlite"), try CallStore(path: directory + "/b.sqlite")))
        report("lifecycle, Recents in SQLite", stored)
        let bare = try await bareWrites(path: directory + "/bare.sqlite")
        report("bare SQLite writes of the same rows", bare)
        if !json {
            print(String(format: "call control without storage: %.1f µs CPU per call; Recents add %.1f µs; the bare writes cost %.1f µs",
                         memory.cpuPerCall, stored.cpuPerCall - memory.cpuPerCall, bare.cpuPerCall))
        }
    }

    struct Figures {
        var calls: Int
        var wall: Duration
        var cpu: Double
        var callsPerSecond: Double { Double(calls) / max(1e-9, wall.seconds) }
        var cpuPerCall: Double { cpu / Double(calls) * 1e6 }
    }

    func report(_ what: String, _ figures: Figures) {
        if json {
            print("{\"group\":\"calls\",\"subject\":\"\(what)\",\"calls\":\(figures.calls),\"calls_per_second\":\(Int(figures.callsPerSecond)),\"cpu_us_per_call\":\(String(format: "%.1f", figures.cpuPerCall))}")
        } else {
            print(String(format: "%@: %d calls, %.0f calls/s, %.1f µs CPU per call", what, figures.calls, figures.callsPerSecond, figures.cpuPerCall))
        }
    }

    static func cpuSeconds() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    func lifecycles(stores: (CallStore, CallStore)?) async throws -> Figures {
        let configuration = ProviderConfiguration(maximumCallGroups: concurrency * 2, maximumCallsPerCallGroup: 1)
        let a = try await CallManager(configuration: configuration, audio: .appOwned, store: stores?.0)
        let b = try await CallManager(configuration: configuration, audio: .appOwned, store: stores?.1)
        let peers = InMemoryCallPeers(a: a, b: b)
        let perTask = calls / concurrency
        let wallStart = ContinuousClock.now, cpuStart = Self.cpuSeconds()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<concurrency {
                group.addTask {
                    for _ in 0..<perTask {
                        let uuid = UUID()
                        let start = try await a.controller.request(.start(call: uuid, handle: CallHandle(.generic, "b")))
                        guard try await a.outcome(of: start) == .fulfilled else { throw ValidationError("start failed") }
                        let answer = try await b.controller.request(.answer(call: uuid))
                        guard try await b.outcome(of: answer) == .fulfilled else { throw ValidationError("answer failed") }
                        let end = try await a.controller.request(.end(call: uuid))
                        guard try await a.outcome(of: end) == .fulfilled else { throw ValidationError("end failed") }
                    }
                }
            }
            try await group.waitForAll()
        }
        try await stores?.0.flush()
        try await stores?.1.flush()
        let figures = Figures(calls: perTask * concurrency, wall: ContinuousClock.now - wallStart, cpu: Self.cpuSeconds() - cpuStart)
        await peers.stop()
        return figures
    }

    /// The rows the stored lifecycle writes — three per call on each side (ringing or started,
    /// connected, ended) — written straight through GRDB, one transaction each.
    func bareWrites(path: String) async throws -> Figures {
        let pool = try DatabasePool(path: path)
        try await pool.write { db in
            try db.execute(sql: """
                CREATE TABLE recents (id TEXT PRIMARY KEY, handle TEXT NOT NULL, handleKind TEXT NOT NULL,
                  direction TEXT NOT NULL, state TEXT NOT NULL, started DATETIME NOT NULL, connected DATETIME,
                  ended DATETIME, duration DOUBLE, reason TEXT)
                """)
        }
        let total = (calls / concurrency) * concurrency
        let wallStart = ContinuousClock.now, cpuStart = Self.cpuSeconds()
        for _ in 0..<total {
            for direction in ["outgoing", "incoming"] {
                let id = UUID().uuidString, now = Date()
                for (state, ended) in [("invitationReceived", false), ("connected", false), ("ended(localEnded)", true)] {
                    pool.asyncWrite({ db in
                        try db.execute(sql: "INSERT OR REPLACE INTO recents VALUES (?, 'b', 'generic', ?, ?, ?, ?, ?, ?, ?)",
                                       arguments: [id, direction, state, now, now, ended ? now : nil, ended ? 0.0 : nil, ended ? "localEnded" : nil])
                    }, completion: { _, _ in })
                }
            }
        }
        try await pool.write { _ in }
        return Figures(calls: total, wall: ContinuousClock.now - wallStart, cpu: Self.cpuSeconds() - cpuStart)
    }
}
