import CallNodeTestSupport
import Foundation
import Testing

/// What a running call allocates per frame, counted by the malloc interposer in a real
/// process (`callnode-bench allocations`: two legs on a manual clock, so the count is the same
/// every run). Release builds make ~0.5 allocations per leg per frame, all of them RTCP reports
/// and statistics (BENCHMARKS.md); this debug build makes ~29 (unspecialized generic iteration
/// allocates there). The bound catches what matters: anything allocating per sample or per
/// byte (a frame has 960 samples; the level meter once made ~1 900 a frame in debug builds,
/// SRTP's room for the tag ~45 a packet) or per packet beyond today's few. Measured on plain
/// endpoints and with one leg on an audio session's bridge port, as a node's calls play.
@Suite struct AllocationTests {
    @Test(arguments: [false, true])
    func aRunningCallAllocatesAFewTimesPerFrameNotPerSample(throughSession: Bool) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("allocations-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let log = directory + "/allocations.log"
        let status = try await ChildProcess.running(try BuildProducts.executable("callnode-bench"),
                                          ["allocations", "--frames", "250", "--maximum-per-frame", "40"] + (throughSession ? ["--through-session"] : []),
                                          output: log)
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        let line = try #require(output.split(separator: "\n").first { $0.hasPrefix("allocations: ") && $0.contains("per leg per frame (") }, "\(output)")
        let perFrame = try #require(Double(line.dropFirst("allocations: ".count).prefix { $0 != " " }))
        // Counting worked (the interposer was preloaded), and stayed under the bound.
        #expect(perFrame > 1, "\(line)")
        #expect(perFrame <= 40, "\(line)")
        #expect(status == 0, "\(output)")
    }
}
