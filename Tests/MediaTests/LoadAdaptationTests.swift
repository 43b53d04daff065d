@_spi(Testing) import MediaTiming
import Foundation
@_spi(Testing) import Media
import Testing

@Suite struct LoadGovernorTests {
    @Test func overloadTakesComplexityDownTwoStepsAtATimeToTheMinimum() {
        var governor = LoadGovernor(minimum: 3)
        #expect(governor.cap == 10)
        #expect(governor.window(busy: 0.9, late: 0) == 8)
        #expect(governor.window(busy: 0.4, late: 0.05) == 6, "late starts alone are overload")
        #expect(governor.window(busy: 0.95, late: 0.3) == 4)
        #expect(governor.window(busy: 0.95, late: 0.3) == 3)
        #expect(governor.window(busy: 0.95, late: 0.3) == 3)
    }

    @Test func lateTicksOfALaneThatRanLittleAreTheHostsDoingAndLeaveComplexityAlone() {
        var governor = LoadGovernor()
        // One call on the lane, other processes holding both processors: its ticks start late
        // and take long on the wall clock, while its own thread ran 2 % of the window.
        for _ in 0..<10 { #expect(governor.window(busy: 0.9, behind: 0.2, lateFrames: 0.05, ownWork: 0.02) == 10) }
        // The same lateness with the lane's own work at a quarter of the window is overload…
        #expect(governor.window(busy: 0.5, behind: 0.2, lateFrames: 0, ownWork: LoadGovernor.ownWorkForLateness) == 8)
        // …and a window late for the host's sake is not calm either: the cap stays down.
        for _ in 0..<10 { #expect(governor.window(busy: 0.3, behind: 0.1, lateFrames: 0, ownWork: 0.01) == 8) }
        for _ in 0..<LoadGovernor.calmWindows { governor.window(busy: 0.3, behind: 0, lateFrames: 0, ownWork: 0.01) }
        #expect(governor.cap == 9)
    }

    @Test func complexityComesBackOneStepAfterFiveCalmWindowsInARow() {
        var governor = LoadGovernor()
        governor.window(busy: 0.9, late: 0)
        governor.window(busy: 0.9, late: 0)
        #expect(governor.cap == 6)
        for _ in 0..<4 { #expect(governor.window(busy: 0.3, late: 0) == 6) }
        #expect(governor.window(busy: 0.3, late: 0) == 7)
        // A middling window (neither calm nor overloaded) starts the count again.
        for _ in 0..<4 { governor.window(busy: 0.3, late: 0) }
        governor.window(busy: 0.7, late: 0)
        for _ in 0..<4 { #expect(governor.window(busy: 0.3, late: 0) == 7) }
        #expect(governor.window(busy: 0.3, late: 0) == 8)
        for _ in 0..<20 { governor.window(busy: 0.1, late: 0) }
        #expect(governor.cap == 10)
    }

    @Test func framesStillLateAtTheFloorTakeComplexityToTheEmergencyStepAndCalmBringsItStraightBackToTheFloor() {
        var governor = LoadGovernor()
        for _ in 0..<3 { governor.window(busy: 0.95, behind: 0.2, lateFrames: 0.1) }
        #expect(governor.cap == 4, "late frames above the floor only step down as overload does")
        // Busy and behind at the floor, frames on time: the floor holds, however long.
        for _ in 0..<10 { #expect(governor.window(busy: 0.95, behind: 0.2, lateFrames: 0) == 4) }
        // Late frames at the floor: the emergency step after four such windows in a row…
        for _ in 0..<(LoadGovernor.emergencyWindows - 1) { #expect(governor.window(busy: 0.95, behind: 0.2, lateFrames: 0.05) == 4) }
        // …and a window that is not overloaded starts that count again.
        governor.window(busy: 0.7, behind: 0, lateFrames: 0)
        for _ in 0..<(LoadGovernor.emergencyWindows - 1) { #expect(governor.window(busy: 0.95, behind: 0.2, lateFrames: 0.05) == 4) }
        // An overloaded window with frames on time neither counts nor restarts it.
        governor.window(busy: 0.95, behind: 0.2, lateFrames: 0)
        #expect(governor.window(busy: 0.95, behind: 0.2, lateFrames: 0.05) == 0)
        // Busy at the emergency step does not raise it back to the floor.
        #expect(governor.window(busy: 0.95, behind: 0.1, lateFrames: 0) == 0)
        // Calm: straight back to the floor (1–3 cost about what 4 does), then one step at a time;
        // from below the floor calm means under 40 % busy, not 50 %.
        for _ in 0..<10 { #expect(governor.window(busy: 0.45, late: 0) == 0) }
        for _ in 0..<(LoadGovernor.calmWindows - 1) { #expect(governor.window(busy: 0.3, late: 0) == 0) }
        #expect(governor.window(busy: 0.3, late: 0) == 4)
        for _ in 0..<LoadGovernor.calmWindows { governor.window(busy: 0.3, late: 0) }
        #expect(governor.cap == 5)
    }

    @Test func anEmergencyStepAtTheFloorMeansNoStepBelowIt() {
        var governor = LoadGovernor(minimum: 4, emergencyMinimum: 4)
        for _ in 0..<20 { governor.window(busy: 0.99, behind: 0.5, lateFrames: 0.5) }
        #expect(governor.cap == 4)
        #expect(LoadGovernor(minimum: 2, emergencyMinimum: 6).emergencyMinimum == 2, "never above the floor")
    }
}

@Suite struct LoadAdaptationTests {
    @Test func callsEncodeWithLessWorkWhileTheClockIsOverloadedAndNeverAboveTheirOwnComplexity() async throws {
        var configuration = MediaConfiguration()
        configuration.opus.complexity = 8
        let call = try MediaActorTests.makeCall(source: ToneSource(), sink: NullSink(), configuration: configuration)
        var fixed = configuration
        fixed.complexityFollowsLoad = false
        let steady = try MediaActorTests.makeCall(source: ToneSource(), sink: NullSink(), configuration: fixed)
        try await call.a.start(); try await call.b.start()
        try await steady.a.start(); try await steady.b.start()
        await call.clock.advance(frames: 5)
        #expect(await call.a.statistics.opusComplexity == 8, "a calm clock's cap (10) is above the call's own 8")
        call.clock.reportLoad(busy: 0.95, late: 0.1)
        call.clock.reportLoad(busy: 0.95, late: 0.1)
        steady.clock.reportLoad(busy: 0.95, late: 0.1)
        await call.clock.advance(frames: 1)
        await steady.clock.advance(frames: 1)
        #expect(call.clock.complexityCap == 6)
        #expect(await call.a.statistics.opusComplexity == 6)
        #expect(await steady.a.statistics.opusComplexity == 8, "a call that does not follow the load keeps its complexity")
        // Still heard: the tone goes on at the lower complexity.
        let before = await call.b.statistics.packetsReceived
        await call.clock.advance(frames: 50)
        #expect(await call.b.statistics.packetsReceived >= before + 49)
        for _ in 0..<(LoadGovernor.calmWindows * 4) { call.clock.reportLoad(busy: 0.2, late: 0) }
        await call.clock.advance(frames: 1)
        #expect(await call.a.statistics.opusComplexity == 8)
        for actor in [call.a, call.b, steady.a, steady.b] { await actor.stop() }
    }

    @Test func framesLateEvenAtTheFloorTakeCallsToComplexityZeroAndTheyAreStillHeard() async throws {
        var configuration = MediaConfiguration()
        configuration.opus.complexity = 8
        let call = try MediaActorTests.makeCall(source: ToneSource(), sink: NullSink(), configuration: configuration)
        try await call.a.start(); try await call.b.start()
        await call.clock.advance(frames: 5)
        for _ in 0..<3 { call.clock.reportLoad(busy: 0.95, behind: 0.3, lateFrames: 0.1) }
        await call.clock.advance(frames: 1)
        #expect(await call.a.statistics.opusComplexity == 4, "the floor first")
        for _ in 0..<LoadGovernor.emergencyWindows { call.clock.reportLoad(busy: 0.95, behind: 0.3, lateFrames: 0.1) }
        await call.clock.advance(frames: 1)
        #expect(await call.a.statistics.opusComplexity == 0)
        let before = await call.b.statistics.packetsReceived
        await call.clock.advance(frames: 50)
        let after = await call.b.statistics
        #expect(after.packetsReceived >= before + 49)
        #expect(after.receiveLevel > -30, "the tone is heard at complexity 0 (level \(after.receiveLevel) dBFS)")
        for _ in 0..<LoadGovernor.calmWindows { call.clock.reportLoad(busy: 0.2, late: 0) }
        await call.clock.advance(frames: 1)
        #expect(await call.a.statistics.opusComplexity == 4, "calm brings it back to the floor at once")
        await call.a.stop(); await call.b.stop()
    }
}

/// A clock client whose tick takes most of a frame period (busy-waiting), as a node with more
/// calls than its cores can encode.
private final class HeavyClient: MediaClockClient, @unchecked Sendable {  // `work` is read-only after init
    let work: Duration
    init(work: Duration) { self.work = work }
    func tick(now: Duration) async {
        let until = ContinuousClock.now + work
        while ContinuousClock.now < until {}
    }
}

@Suite(.serialized) struct LoadAdaptationRealTimeTests {
    @Test func anOverloadedRealTimeClockLowersItsComplexityCap() async {
        let clock = MediaClock(phases: 1, lanes: 1)
        clock.add(HeavyClient(work: .milliseconds(19)))
        let running = Task { await clock.run() }
        var lowered = false
        for _ in 0..<400 where !lowered {
            try? await Task.sleep(for: .milliseconds(10))
            lowered = clock.complexityCap < 10
        }
        running.cancel()
        _ = await running.value
        #expect(lowered, "a lane busy 95 % of each period is overloaded within its first window")
    }
}
