import CallNode
import CallNodeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

extension RealTimeTests {
/// Media runs on media threads, never on Swift's cooperative pool: a node whose pool is busy
/// (a burst of signaling, an embedder's task that blocks where it should not) still plays its
/// calls' audio on time. It takes every lane: blocking the whole pool of the test process for
/// half a second would stall the other suites' calls too, and their work would be counted here.
@Suite(.serialized, .realTimeAlone) struct BusyPoolTests {
    @Test func aCallPlaysOnWhileEveryThreadOfTheCooperativePoolIsBlocked() async throws {
        let f = try TwoNodeTests.Fixture()
        let (alice, bob, bobEvents, call) = try await f.toneCall()
        _ = try await TwoNodeTests.next(bobEvents) { if case let .statistics(_, s) = $0 { s.packetsReceived >= 100 } else { false } }

        // One blocking task per pool thread (the pool is as wide as the machine has cores),
        // then a task that can only start once one of them is done: it shows the whole pool
        // was taken for the half second.
        let width = ProcessInfo.processInfo.activeProcessorCount
        let blocked = ContinuousClock.now
        let blockers = (0..<width).map { _ in Task.detached { _ = usleep(500_000) } }
        let canary = Task.detached { ContinuousClock.now }
        for blocker in blockers { await blocker.value }
        let canaryStarted = await canary.value - blocked
        try await Task.sleep(for: .seconds(1))
        try await alice.hangUp(call)
        _ = try await TwoNodeTests.next(bobEvents, where: { if case .ended = $0 { true } else { false } })
        await alice.shutdown()
        await bob.shutdown()

        // Bob's recording from its second second on, in 10 ms blocks: the longest run of
        // silence. Media waiting for the pool would leave ~500 ms of it.
        let heard = try WAV.read(path: f.path("bob-out.wav")).samples
        var longest = 0, run = 0
        for block in stride(from: 48_000, to: heard.count - 480, by: 480) {
            let peak = heard[block..<(block + 480)].map { abs(Int($0)) }.max() ?? 0
            run = peak < 1_000 ? run + 1 : 0
            longest = max(longest, run)
        }
        print("busy pool: \(width) pool threads blocked, the next task started after \(canaryStarted); "
              + "the longest silence Bob heard: \(longest * 10) ms of \(heard.count / 48) ms")
        try #require(canaryStarted >= .milliseconds(450), "the pool was not blocked whole (a task started after \(canaryStarted))")
        #expect(heard.count >= 48_000 * 2, "Bob recorded only \(heard.count / 48) ms")
        #expect(longest * 10 < 200, "Bob heard \(longest * 10) ms of silence while the pool was blocked")
    }
}
}
