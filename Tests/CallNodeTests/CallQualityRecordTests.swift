@testable import CallNode
import CallNodeTestKit
import Foundation
import Media
import Testing

/// Each call keeps its quality over time in Recents, a sample a second: a loss shows in the
/// seconds it happened, and the call's figures add up.
@Suite struct CallQualityRecordTests {
    @Test func aLossShowsInTheSecondsItHappened() async throws {
        let f = try ManualTimeNodes()
        let (alice, bob, call) = try await ManualTimeNodeTests.connectedCall(f)
        let bobCall = try #require(await bob.liveCalls.first)
        for _ in 0..<200 { await f.step() }  // 4 s clean
        f.network.setConditions(.init(loss: 0.4))
        for _ in 0..<100 { await f.step() }  // 2 s at 40 %
        f.network.setConditions(.init())
        for _ in 0..<200 { await f.step() }  // 4 s clean
        let lost = try #require(await bob.statistics(bobCall)).packetsLost
        try await alice.hangUp(call)
        try await f.waitFor("bob", advancing: true) { if case .ended = $0 { true } else { false } }

        try await bob.store.flush()
        let timeline = try #require(try await bob.store.quality(of: bobCall), "the callee kept no quality for its call")
        let samples = timeline.samples
        #expect(timeline.step == 1 && samples.count >= 9, "\(samples.count) samples")
        #expect(lost > 10, "\(lost) lost")
        #expect(samples.map(\.lost).reduce(0, +) == lost, "the seconds' losses add up to the call's")
        // The seconds that lost anything are the two of the loss (give or take the second each
        // edge fell in), none of the clean ones around them.
        let lossy = samples.filter { $0.lost > 0 }.map(\.at)
        let first = try #require(lossy.first), last = try #require(lossy.last)
        #expect(last - first <= 3 && lossy.count >= 2, "lossy seconds \(lossy) of \(samples.map(\.lost))")
        #expect(first >= 2 && last <= samples.count - 3, "clean seconds before and after: \(samples.map(\.lost))")
        #expect(timeline.worst(1).first.map { lossy.contains($0.at) } == true)
        #expect(samples.allSatisfy { $0.receiveKbps > 0 && $0.receiveLevel > -40 }, "\(samples)")
        await f.shutdown()
    }
}

extension CallQualityRecordTests {
    /// The media's figures come a second apart give or take its thread's lateness: each is a
    /// second of its own, numbered to the nearest second, never merged into the one before.
    /// (Truncated, a figure 2.998 s in took the number 2 of the one before: two seconds of loss
    /// merged into one and the timeline had a sample fewer than the figures.)
    @Test func figuresALittleEarlyOrLateAreEachASecondOfTheirOwn() {
        var recording = QualityRecording()
        var statistics = MediaStatistics()
        let arrivals: [Duration] = [.zero, .milliseconds(1_003), .milliseconds(1_998), .milliseconds(3_001), .milliseconds(3_997), .milliseconds(5_002)]
        for (index, at) in arrivals.enumerated() {
            statistics.packetsLost = index * 5
            recording.take(statistics, at: .seconds(10) + at)
        }
        let samples = recording.timeline.samples
        #expect(samples.map(\.at) == [1, 2, 3, 4, 5])
        #expect(samples.map(\.lost) == [5, 5, 5, 5, 5])
    }
}
