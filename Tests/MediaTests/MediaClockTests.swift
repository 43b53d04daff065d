import MediaTiming
import Foundation
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
}

/// Records which thread ticks it, and when.
private final class ThreadRecorder: MediaClockClient, @unchecked Sendable {  // guarded by `lock`
    let lock = NSLock()
    var threads: Set<String> = []
    var count = 0
    func tick(now: Duration) async { record() }
    func tick(now: Duration, skipped: Int) async { record() }
    private func record() {
        let name = (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "?"
        lock.lock()
        threads.insert(name)
        count += 1
        lock.unlock()
    }
    var ticks: Int { lock.lock(); defer { lock.unlock() }; return count }
}

/// A media actor stand-in: a default actor, as ``MediaActor`` is.
private actor ActorRecorder: MediaClockClient {
    var threads: Set<String> = []
    var count = 0
    func tick(now: Duration) async { record() }
    func tick(now: Duration, skipped: Int) async { record() }
    private func record() {
        threads.insert((try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "?")
        count += 1
    }
}

@Suite(.serialized) struct MediaClockThreadTests {
    /// Waits (polling, bounded) until `condition` holds; returns whether it did.
    private func eventually(_ condition: () async -> Bool) async -> Bool {
        for _ in 0..<500 {
            if await condition() { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return await condition()
    }

    @Test func ticksAndTheActorsTheyCallRunOnTheClocksMediaThreadNotThePool() async {
        let clock = MediaClock(lanes: 2)
        let plain = ThreadRecorder(), actor = ActorRecorder()
        clock.add(plain)
        clock.add(actor)
        let running = Task { await clock.run() }
        let ticked = await eventually { await actor.count >= 10 && plain.ticks >= 10 }
        running.cancel()
        let report = await running.value
        #expect(ticked)
        // Two clients fill two phases of the first lane: one media thread ticks both.
        #expect(plain.threads == ["callnode-media0"])
        #expect(await actor.threads == ["callnode-media0"])
        #expect(report.phaseTicks >= 20)
    }

    @Test func anIdleClockTicksNothingAndAClientThatJoinsLaterIsTickedAtOnce() async {
        let clock = MediaClock(lanes: 1)
        let running = Task { await clock.run() }
        // Nothing to tick: the lane sleeps until a client joins (it would otherwise wake every
        // period). The recorder joins a running clock and is ticked from its next phase on.
        try? await Task.sleep(for: .milliseconds(100))
        let recorder = ThreadRecorder()
        clock.add(recorder)
        let ticked = await eventually { recorder.ticks >= 5 }
        clock.remove(recorder)
        running.cancel()
        let report = await running.value
        #expect(ticked)
        #expect(recorder.threads == ["callnode-media"])
        // Only the recorder's phase ticked: no tick of an empty clock was counted.
        #expect(report.phaseTicks >= 5 && report.phaseTicks <= recorder.ticks + 1)
    }

    @Test func callsBeyondOneLanePerPhaseGoToTheNextLane() async {
        let clock = MediaClock(phases: 2, lanes: 2)
        let recorders = (0..<4).map { _ in ThreadRecorder() }
        for recorder in recorders { clock.add(recorder) }
        let running = Task { await clock.run() }
        let ticked = await eventually { recorders.allSatisfy { $0.ticks >= 3 } }
        running.cancel()
        _ = await running.value
        #expect(ticked)
        // Two phases: the first two calls share lane 0, the next two lane 1.
        #expect(recorders.map(\.threads) == [["callnode-media0"], ["callnode-media0"], ["callnode-media1"], ["callnode-media1"]])
    }

    @Test func aStoppedMediaThreadEndsAndWorkSentToItLaterStillRuns() async {
        let thread = MediaThread(name: "media-test")
        let name = await Task(executorPreference: thread) {
            (try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
        }.value
        #expect(name == "media-test")
        thread.stop()
        #expect(await eventually { thread.hasEnded })
        // A task that still prefers the ended thread runs on the global executor instead.
        let late = await Task(executorPreference: thread) { 42 }.value
        #expect(late == 42)
    }

    @Test func aPokeEndsAMediaThreadsSleepAndASleepUntilAPassedDeadlineReturns() async {
        let thread = MediaThread(name: "media-test")
        defer { thread.stop() }
        // Until poked: without the poke this would never return.
        let sleeper = Task(executorPreference: thread) { await thread.sleep(until: nil) }
        try? await Task.sleep(for: .milliseconds(20))
        thread.poke()
        await sleeper.value
        await Task(executorPreference: thread) { await thread.sleep(until: .now - .seconds(1)) }.value
        let before = ContinuousClock.now
        await Task(executorPreference: thread) { await thread.sleep(until: before + .milliseconds(30)) }.value
        #expect(ContinuousClock.now >= before + .milliseconds(30))
    }
}
