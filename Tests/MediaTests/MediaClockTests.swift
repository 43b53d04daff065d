import Media
import Testing

@Suite struct MediaClockTests {
    @Test func aNewCallJoinsTheSoonestOfTheLeastLoadedPhases() {
        // Empty clock: the phase that ticks next, wherever the clock is in its period.
        #expect(MediaClock.phase(forLoad: [0, 0, 0, 0], upcoming: 0) == 0)
        #expect(MediaClock.phase(forLoad: [0, 0, 0, 0], upcoming: 3) == 3)
        // Balanced load: still the soonest.
        #expect(MediaClock.phase(forLoad: [2, 2, 2, 2], upcoming: 2) == 2)
        // The soonest phase is busier: the next least loaded one after it, wrapping around.
        #expect(MediaClock.phase(forLoad: [1, 1, 0, 1], upcoming: 3) == 2)
        #expect(MediaClock.phase(forLoad: [0, 1, 1, 1], upcoming: 1) == 0)
        #expect(MediaClock.phase(forLoad: [5], upcoming: 0) == 0)
    }

    @Test func aBurstOfCallsIsSpreadOverAllPhases() {
        // Calls added within one phase step (the clock has not moved) still fill every phase
        // evenly, as round-robin did.
        var load = [0, 0, 0, 0]
        for _ in 0..<100 { load[MediaClock.phase(forLoad: load, upcoming: 1)] += 1 }
        #expect(load == [25, 25, 25, 25])
    }
}

/// Records what a media clock tells it.
private final class SkipRecorder: MediaClockClient, @unchecked Sendable {  // mutated only from the manual clock's ticks, read after
    var ticks: [(now: Duration, skipped: Int)] = []
    func tick(now: Duration) async { ticks.append((now, 0)) }
    func tick(now: Duration, skipped: Int) async { ticks.append((now, skipped)) }
}

@Suite struct MediaClockStallTests {
    @Test func aStalledClockTellsItsClientsHowManyTicksTheyMissed() async {
        let clock = MediaClock.manual()
        let recorder = SkipRecorder()
        clock.add(recorder)
        await clock.advance(frames: 3)
        clock.stall(for: .milliseconds(1_000))
        await clock.advance(frames: 2)
        #expect(recorder.ticks.map(\.skipped) == [0, 0, 0, 50, 0])
        #expect(recorder.ticks.map(\.now) == [20, 40, 60, 1_080, 1_100].map { Duration.milliseconds($0) })
    }

    @Test func aRealTimeClockSleepsThroughPhasesWithoutCalls() {
        // One call in phase 2 of 4: the clock wakes for phase 2 only, once a period.
        #expect(MediaClock.wake(after: 2, occupied: [2], phases: 4) == ([3, 0, 1], 2))
        // Calls in phases 0 and 2: it wakes for each, skipping the two empty ones.
        #expect(MediaClock.wake(after: 0, occupied: [0, 2], phases: 4) == ([1], 2))
        #expect(MediaClock.wake(after: 2, occupied: [0, 2], phases: 4) == ([3], 0))
        // Every phase busy: no phase is skipped.
        #expect(MediaClock.wake(after: 1, occupied: [0, 1, 2, 3], phases: 4) == ([], 2))
        // No call at all: it wakes at the start of each period.
        #expect(MediaClock.wake(after: 0, occupied: [], phases: 4) == ([1, 2, 3], 0))
        #expect(MediaClock.wake(after: 2, occupied: [], phases: 4) == ([3], 0))
        // One phase only: always the same.
        #expect(MediaClock.wake(after: 0, occupied: [0], phases: 1) == ([], 0))
    }
}
