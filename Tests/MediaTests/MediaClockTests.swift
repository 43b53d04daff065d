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
