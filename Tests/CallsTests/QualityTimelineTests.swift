import Calls
import Foundation
import Testing

/// A call's quality over time: one sample a second, bounded by halving its resolution, kept in
/// the store beside Recents and cleared with it.
@Suite struct QualityTimelineTests {
    static func second(_ at: Int, lost: Int = 0, concealed: Int = 0, jitter: Double = 2, rtt: Double? = 20) -> QualityTimeline.Sample {
        QualityTimeline.Sample(at: at, lost: lost, concealed: concealed, jitterMs: jitter, rttMs: rtt, sendLevel: -20, receiveLevel: -25,
                               sendKbps: 40, receiveKbps: 42, redundancy: 1)
    }

    @Test func theWorstSecondsAreTheOnesThatLostOrConcealedMost() {
        var timeline = QualityTimeline()
        for at in 0..<10 { timeline.append(Self.second(at, lost: at == 4 ? 9 : at == 7 ? 2 : 0, concealed: at == 4 ? 3 : 0)) }
        #expect(timeline.step == 1 && timeline.samples.count == 10)
        #expect(timeline.worst(3).map(\.at) == [4, 7], "only seconds with something lost, worst first")
    }

    /// Past the limit the samples pair up (counts add, peaks stay) and each covers twice as long;
    /// later seconds fold into the last sample until it covers the new step.
    @Test func aLongCallHalvesItsResolutionRatherThanGrow() {
        var timeline = QualityTimeline()
        for at in 0..<QualityTimeline.limit { timeline.append(Self.second(at, lost: 1, jitter: at == 11 ? 30 : 2)) }
        #expect(timeline.samples.count == QualityTimeline.limit && timeline.step == 1)
        timeline.append(Self.second(QualityTimeline.limit, lost: 1))
        #expect(timeline.step == 2)
        #expect(timeline.samples.count == QualityTimeline.limit / 2 + 1)
        #expect(timeline.samples[5].at == 10 && timeline.samples[5].lost == 2 && timeline.samples[5].jitterMs == 30)
        timeline.append(Self.second(QualityTimeline.limit + 1, lost: 4))
        #expect(timeline.samples.count == QualityTimeline.limit / 2 + 1, "the second folds into the last sample")
        #expect(timeline.samples.last?.lost == 5)
        #expect(timeline.samples.map(\.lost).reduce(0, +) == QualityTimeline.limit + 5, "nothing lost is forgotten")
    }

    @Test func theStoreKeepsItBesideRecentsAndClearsItWithThem() async throws {
        let directory = "/tmp/callnode-quality-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try CallStore(path: directory + "/node.sqlite")
        var timeline = QualityTimeline()
        for at in 0..<5 { timeline.append(Self.second(at, lost: at, rtt: at == 0 ? nil : 20)) }
        let call = UUID()
        #expect(try await store.quality(of: call) == nil)
        store.saveQuality(timeline, of: call)
        try await store.flush()
        #expect(try await store.quality(of: call) == timeline)
        // Another process (the command line) reads what the node kept.
        let reader = try CallStore(path: directory + "/node.sqlite")
        #expect(try await reader.quality(of: call) == timeline)
        try await store.clearRecents()
        #expect(try await reader.quality(of: call) == nil)
    }
}
