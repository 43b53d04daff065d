import Locking
import POSIX
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Something a ``MediaClock`` ticks once per frame period.
public protocol MediaClockClient: AnyObject, Sendable {
    /// One frame period has passed; `now` is the clock's time at which this tick was due
    /// (on a busy machine the call itself may come a little later).
    func tick(now: Duration) async
    /// As ``tick(now:)``, after the clock skipped `skipped` ticks of this client: the process
    /// was paused or starved for longer than the clock catches up by bursting, so those frame
    /// periods passed without a tick. Media uses it to move its timeline on by as much.
    func tick(now: Duration, skipped: Int) async
}

extension MediaClockClient {
    /// Clients without a timeline ignore skipped ticks.
    public func tick(now: Duration, skipped: Int) async { await tick(now: now) }
}

/// Paces media for sources that have no hardware clock (files, tones, unpaced ALSA devices)
/// and for the send/receive cycle of every call: one clock can drive many calls.
///
/// Two kinds: real time (``run()`` ticks on media threads of its own, without drift) and
/// manual (``advance(frames:)`` steps time in tests, deterministically). Clients are ticked in
/// the order they were added.
///
/// A real-time clock spreads its clients over ``phases`` instants per frame period and over
/// ``lanes`` media threads (``MediaThread``): each lane is one thread that sleeps until the next
/// phase one of its clients is in, ticks those clients one after another, and sleeps again.
/// The ticks, and the media actors they call, run on that thread (a task executor preference),
/// so a call costs its process one wakeup per frame, not a timer thread and a pool thread. A
/// lane without clients sleeps until one joins; an idle clock wakes nobody. A lane that has
/// ticked its own clients takes the ticks another lane has claimed but not started while that
/// lane is behind (its thread lost the processor for a while, or its calls cost more this
/// period), so a busy machine's spare time on one core is not wasted.
public final class MediaClock: Sendable {
    public let frameDuration: Duration
    private let manual: Bool
    private let origin = ContinuousClock.now
    private let manualNow = Locked(Duration.zero)

    private struct Entry {
        let client: any MediaClockClient
        let lane: Int
        let phase: Int
        /// When it was last ticked (the tick's due time), to tell it how many ticks it skipped.
        var lastDue: Duration?
        /// Set while a tick of it runs (on any lane): a lane that is behind and bursts does
        /// not claim the client's next tick before the last has finished elsewhere.
        let ticking = TickFlag()
    }

    private final class TickFlag: Sendable {
        let value = Atomic<Bool>(false)
    }

    /// One client's tick, claimed by a lane for one step.
    private struct Claimed {
        let client: any MediaClockClient
        let skipped: Int
        let due: Duration
        let ticking: TickFlag
    }

    private let clients = Locked<[Entry]>([])
    /// Work asked for with ``soon(_:)`` on a manual clock, run at its next step.
    private let pendingSoon = Locked<[@Sendable () async -> Void]>([])
    /// Per lane, the ticks it claimed for its current step and has not started yet; the other
    /// lanes take from the back when they run out of their own.
    private let claimed = Locked<[[Claimed]]>([])
    /// How much work a call may do per frame, from how punctual the lanes are.
    private let governor = Locked(LoadGovernor())
    /// The running lanes' threads (empty while ``run()`` is not running).
    private let threads = Locked<[MediaThread]>([])
    /// How many instants per frame period a real-time clock spreads its clients over.
    public let phases: Int
    /// How many media threads a real-time clock ticks its clients on.
    public let lanes: Int

    /// A clock that runs in real time once ``run()`` is called.
    ///
    /// - Parameters:
    ///   - phases: Instants per period to spread clients over (default 4: with 20 ms frames, a
    ///     group of calls every 5 ms).
    ///   - lanes: Media threads (default: one per processor). A new client goes to the least
    ///     loaded phase and, within it, the least loaded lane, so a few calls share one thread
    ///     and the others join in as calls are added.
    public init(frameDuration: Duration = .milliseconds(20), phases: Int = 4, lanes: Int? = nil) {
        self.frameDuration = frameDuration
        self.phases = min(64, max(1, phases))
        self.lanes = max(1, lanes ?? Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))
        manual = false
        (step, stepNanoseconds, pausedAfter) = Self.steps(frameDuration, phases: self.phases)
    }

    private init(manualFrameDuration: Duration) {
        frameDuration = manualFrameDuration
        phases = 1
        lanes = 1
        manual = true
        (step, stepNanoseconds, pausedAfter) = Self.steps(manualFrameDuration, phases: 1)
    }

    private static func steps(_ frame: Duration, phases: Int) -> (Duration, Int64, Duration) {
        let (seconds, attoseconds) = frame.components
        let nanoseconds = (seconds * 1_000_000_000 + attoseconds / 1_000_000_000) / Int64(phases)
        return (.nanoseconds(nanoseconds), nanoseconds, frame * 5)
    }

    /// The highest Opus complexity calls on this clock should use now: 10 while the media
    /// threads keep up, lower while they run out of time (``LoadGovernor``). Always 10 on a
    /// manual clock.
    public var complexityCap: Int { governor.withLock { $0.cap } }

    /// Starts the figures ``run()`` returns afresh from now (a benchmark that lets a load
    /// settle first). Each lane drops what it counted at its next tick.
    public func restartReport() {
        reportEpoch.withLock { $0 += 1 }
    }
    private let reportEpoch = Locked(0)

    /// Feeds the governor one lane window as a real-time lane does (tests on a manual clock).
    @_spi(Testing) public func reportLoad(busy: Double, late: Double) {
        _ = governor.withLock { $0.window(busy: busy, late: late) }
    }

    /// As ``reportLoad(busy:late:)``, with the share of frames that finished after their period.
    @_spi(Testing) public func reportLoad(busy: Double, behind: Double, lateFrames: Double) {
        _ = governor.withLock { $0.window(busy: busy, behind: behind, lateFrames: lateFrames) }
    }

    /// The lowest complexity load may take calls down to (default 4: ``LoadGovernor/minimum``),
    /// and where frames still late there take them (default 0, at most `minimum`:
    /// ``LoadGovernor/emergencyMinimum``).
    public func setMinimumComplexity(_ minimum: Int, emergency: Int = 0) {
        governor.withLock {
            $0.minimum = max(0, min(10, minimum))
            $0.emergencyMinimum = max(0, min($0.minimum, emergency))
        }
    }

    /// A clock that only moves when ``advance(frames:)`` is called.
    public static func manual(frameDuration: Duration = .milliseconds(20)) -> MediaClock {
        MediaClock(manualFrameDuration: frameDuration)
    }

    /// Whether this clock only moves when ``advance(frames:)`` is called.
    public var isManual: Bool { manual }

    /// Time since the clock was made (manual: the sum of all advances).
    public var now: Duration {
        manual ? manualNow.withLock { $0 } : ContinuousClock.now - origin
    }

    /// One phase step (the frame period over the phases), and the step in nanoseconds: the
    /// lanes' loops add and compare these at every tick, and a `Duration` multiplied or divided
    /// by an integer goes through 128-bit generic arithmetic each time (a single call's media
    /// thread spent some 4 % of its time there).
    private let step: Duration
    private let stepNanoseconds: Int64
    /// How late a lane may start a step before it counts the process as paused (five periods).
    private let pausedAfter: Duration

    /// The time of phase step `index`, from the clock's origin.
    private func offset(ofStep index: Int) -> Duration {
        .nanoseconds(Int64(index) &* stepNanoseconds)
    }

    /// The phase step `instant` falls in (steps count from the clock's origin).
    private func stepIndex(_ instant: ContinuousClock.Instant) -> Int {
        Int(((instant - origin) / step).rounded(.down))
    }

    /// Adds a client; it is ticked from the next tick of its phase on.
    ///
    /// The phase is the least loaded one, and among those the one that ticks soonest, so that a
    /// new call's first frame goes out within one phase step (5 ms at 20 ms frames and four
    /// phases) rather than up to a whole period later; the lane is the least loaded in that phase.
    public func add(_ client: any MediaClockClient) {
        let upcoming = manual ? 0 : (stepIndex(.now) + 1) % phases
        let lane = clients.withLock { all -> Int in
            var load = [Int](repeating: 0, count: phases)
            for entry in all { load[entry.phase] += 1 }
            let phase = Self.phase(forLoad: load, upcoming: upcoming)
            var laneLoad = [Int](repeating: 0, count: lanes)
            for entry in all where entry.phase == phase { laneLoad[entry.lane] += 1 }
            let lane = Self.phase(forLoad: laneLoad, upcoming: 0)
            all.append(Entry(client: client, lane: lane, phase: phase))
            return lane
        }
        // The lane may be asleep until a later phase, or until any client joins.
        threads.withLock { $0.indices.contains(lane) ? $0[lane] : nil }?.poke()
    }

    /// The phase for a new client: the least loaded, and among those the first to tick from
    /// `upcoming` (the phase that ticks next) on.
    public static func phase(forLoad load: [Int], upcoming: Int) -> Int {
        guard let least = load.min() else { return 0 }
        return (0..<load.count).map { (upcoming + $0) % load.count }.first { load[$0] == least } ?? upcoming
    }

    public func remove(_ client: any MediaClockClient) {
        clients.withLock { $0.removeAll { $0.client === client } }
    }

    public var clientCount: Int { clients.withLock { $0.count } }

    /// Every client's tick due at `due` (a manual clock's step), each with the ticks it skipped
    /// since its last one, appended to `ticks`; marks them ticked.
    private func due(at due: Duration, into ticks: inout [Claimed]) {
        clients.withLock { all in
            for index in all.indices {
                if let claimed = take(&all[index], at: due) { ticks.append(claimed) }
            }
        }
    }

    /// The entry's tick due at `due`, with the ticks it skipped since its last; nil while its
    /// last tick still runs on another lane (this one then counts as skipped).
    private func take(_ entry: inout Entry, at due: Duration) -> Claimed? {
        guard !entry.ticking.value.exchange(true, ordering: .acquiring) else { return nil }
        let skipped = entry.lastDue.map { max(0, Int(((due - $0) / frameDuration).rounded()) - 1) } ?? 0
        entry.lastDue = due
        return Claimed(client: entry.client, skipped: skipped, due: due, ticking: entry.ticking)
    }

    /// Claims the ticks of one lane and phase for `due` into the lane's list (as ``due(at:into:)``
    /// does a manual clock's).
    private func claim(lane: Int, phase: Int, at due: Duration) {
        clients.withLock { all in
            claimed.withLock { lists in
                guard lists.indices.contains(lane) else { return }
                // Last first: the lane takes its own from the end (no shifting of the list per
                // tick), so they run in the clients' order; other lanes take from the front.
                for index in all.indices.reversed() where all[index].lane == lane && all[index].phase == phase {
                    if let claimed = take(&all[index], at: due) { lists[lane].append(claimed) }
                }
            }
        }
    }

    /// The next tick for `lane`: its own claimed ones first, then, from a lane that has fallen
    /// behind (its waiting ticks were due more than a phase step ago), the one it would run last.
    /// Only then: a call that moves to another core leaves its codec state in the first core's
    /// cache, which costs more than the wait while the lanes keep up.
    private func nextClaimed(for lane: Int) -> Claimed? {
        let behind = now - step
        return claimed.withLock { all -> Claimed? in
            guard all.indices.contains(lane) else { return nil }
            if let own = all[lane].popLast() { return own }
            guard let other = all.indices.max(by: { all[$0].count < all[$1].count }),
                  let last = all[other].first, last.due < behind else { return nil }
            return all[other].removeFirst()
        }
    }

    private func tick(_ claimed: Claimed) async {
        await claimed.client.tick(now: claimed.due, skipped: claimed.skipped)
        claimed.ticking.value.store(false, ordering: .releasing)
    }

    /// Manual clocks: time passes by `duration` without a tick, as when the process is paused
    /// (SIGSTOP, a debugger, a starved VM); the next ``advance(frames:)`` tells every client how
    /// many ticks it skipped.
    public func stall(for duration: Duration) {
        precondition(manual, "stall(for:) is for manual clocks")
        manualNow.withLock { $0 += duration }
    }

    /// Runs `work` as soon as this clock can, outside any client's tick: at once on a task of
    /// its own for a real-time clock, at the start of the next step for a manual one (before
    /// that step's ticks, at that step's time). Media uses it to play a call's first packet as
    /// it arrives rather than at the next tick.
    public func soon(_ work: @escaping @Sendable () async -> Void) {
        if manual {
            pendingSoon.withLock { $0.append(work) }
        } else {
            Task { await work() }
        }
    }

    /// Manual clocks: moves time forward `frames` periods, ticking every client in order each time.
    public func advance(frames: Int = 1) async {
        precondition(manual, "advance(frames:) is for manual clocks")
        var ticks: [Claimed] = []  // one list for every step
        for _ in 0..<frames {
            let now = manualNow.withLock { $0 += frameDuration; return $0 }
            for work in pendingSoon.withLock({ list in defer { list = [] }; return list }) { await work() }
            due(at: now, into: &ticks)
            for claimed in ticks { await tick(claimed) }
            ticks.removeAll(keepingCapacity: true)
        }
    }

    /// Real-time clocks: ticks every frame period until the task is cancelled, on ``lanes``
    /// media threads made for the run and ended after it. Deadlines are on a fixed grid, so a
    /// late tick does not shift the ones after it; if a lane falls more than five frames behind
    /// (the process was paused, or the machine is overloaded), it moves on to the present instead
    /// of bursting, and each client's next tick says how many it skipped.
    ///
    /// A manual clock returns at once with an empty report: it moves only by ``advance(frames:)``,
    /// so whoever runs the clock (a node) need not know which kind it was given.
    ///
    /// - Returns: How punctual the ticks were (all lanes together).
    @discardableResult
    public func run() async -> MediaClockReport {
        guard !manual else { return MediaClockReport() }
        let made = (0..<lanes).map { MediaThread(name: lanes == 1 ? "callnode-media" : "callnode-media\($0)", joinable: true) }
        threads.withLock { $0 = made }
        claimed.withLock { $0 = Array(repeating: [], count: lanes) }
        let report = await withTaskGroup(of: MediaClockReport.self) { group in
            for (lane, thread) in made.enumerated() {
                group.addTask(executorPreference: thread) { await self.runLane(lane, on: thread) }
            }
            var total = MediaClockReport()
            for await lane in group {
                total.ticks = max(total.ticks, lane.ticks)
                total.lateTicks += lane.lateTicks
                total.phaseTicks += lane.phaseTicks
                total.maximumLag = max(total.maximumLag, lane.maximumLag)
                total.maximumTickDuration = max(total.maximumTickDuration, lane.maximumTickDuration)
            }
            return total
        }
        threads.withLock { $0 = [] }
        // Claimed ticks that no lane started (the run was cancelled): their clients are free.
        for left in claimed.withLock({ all in defer { all = [] }; return all.flatMap { $0 } }) {
            left.ticking.value.store(false, ordering: .releasing)
        }
        for thread in made { thread.stop() }
        // Ended, not only told to end: a node shut down before its process exits has no media
        // thread left running.
        for thread in made { await thread.ended() }
        return report
    }

    /// One lane's loop, on its own thread.
    private func runLane(_ lane: Int, on thread: MediaThread) async -> MediaClockReport {
        var report = MediaClockReport()
        var next = stepIndex(.now) + 1
        var lastPeriod = Int.min
        var epoch = reportEpoch.withLock { $0 }
        // This lane's load over the current one-second window, for the governor.
        var windowStart = ContinuousClock.now, busy = Duration.zero, ticks = 0, lateStarts = 0, lateFrames = 0
        // This loop runs on the lane's thread (the task prefers it): its CPU clock is the lane's.
        var ranBefore = SystemThread.currentCPUTime
        while !Task.isCancelled {
            // The phases this lane has clients in, one bit each (at most 64 phases).
            let occupied = clients.withLock { all in all.reduce(into: UInt64(0)) { if $1.lane == lane { $0 |= 1 << UInt64($1.phase) } } }
            guard occupied != 0 else {
                // Nothing to tick: sleep until a client joins (add pokes), then start from the
                // next step, as a clock that just started would.
                await thread.sleep(until: nil)
                next = stepIndex(.now) + 1
                continue
            }
            var step = next
            while occupied & (1 << UInt64(step % phases)) == 0 { step += 1 }
            let due = origin + offset(ofStep: step)
            if ContinuousClock.now < due {
                await thread.sleep(until: due)
                if ContinuousClock.now < due {
                    // Poked early (a client joined): look again from the step after now.
                    next = max(next, stepIndex(.now) + 1)
                    continue
                }
            }
            let started = ContinuousClock.now
            let lag = started - due
            if lag > pausedAfter {
                // Paused or starved: go on from the last period's steps rather than burst
                // through every one that passed.
                next = stepIndex(started) - phases + 1
                continue
            }
            let currentEpoch = reportEpoch.withLock { $0 }
            if currentEpoch != epoch {
                report = MediaClockReport()
                epoch = currentEpoch
                lastPeriod = Int.min
            }
            report.maximumLag = max(report.maximumLag, lag)
            let period = step >= 0 ? step / phases : (step - phases + 1) / phases
            if period != lastPeriod {
                report.ticks += 1
                lastPeriod = period
            }
            // Clients are told when the tick was due, not when it ran: playout keeps to the
            // frame grid, so a tick that runs late (the machine is busy) is not mistaken for
            // packets arriving late, which would make the jitter buffer drop a frame and then
            // stretch one back on the next punctual tick.
            let dueOffset = due - origin
            claim(lane: lane, phase: step % phases, at: dueOffset)
            // Own ticks, then what the other lanes have not started; a frame is late when it is
            // ready only after its period has ended.
            var late = false
            while let next = nextClaimed(for: lane) {
                await tick(next)
                if ContinuousClock.now > origin + next.due + frameDuration { late = true }
            }
            let finished = ContinuousClock.now
            report.maximumTickDuration = max(report.maximumTickDuration, finished - started)
            if late { report.lateTicks += 1 }
            report.phaseTicks += 1
            next = step + 1
            busy += finished - started
            ticks += 1
            // Behind: the tick started after the next phase's time, or its frame was late.
            if lag > self.step || late { lateStarts += 1 }
            if late { lateFrames += 1 }
            if finished - windowStart >= .seconds(1) {
                let fraction = (finished - windowStart) / .seconds(1)
                let busyShare = (busy / .seconds(1)) / fraction, behindShare = Double(lateStarts) / Double(max(1, ticks))
                let lateShare = Double(lateFrames) / Double(max(1, ticks))
                let ran = SystemThread.currentCPUTime
                let ownShare = ran.flatMap { now in ranBefore.map { ((now - $0) / .seconds(1)) / fraction } }
                ranBefore = ran
                _ = governor.withLock { $0.window(busy: busyShare, behind: behindShare, lateFrames: lateShare, ownWork: ownShare) }
                windowStart = finished
                busy = .zero
                ticks = 0
                lateStarts = 0
                lateFrames = 0
            }
        }
        return report
    }
}

/// How punctual a real-time ``MediaClock`` was.
public struct MediaClockReport: Sendable, Equatable {
    /// Frame periods run.
    public var ticks = 0
    /// Phase ticks (of ``MediaClock/phases`` per period) that finished after the end of their
    /// frame period: their frames were late.
    public var lateTicks = 0
    /// Phase ticks run (phases without clients are slept through, not ticked).
    public var phaseTicks = 0
    /// The share of phase ticks that were late.
    public func lateFraction(phases: Int) -> Double {
        Double(lateTicks) / Double(max(1, phaseTicks > 0 ? phaseTicks : ticks * phases))
    }
    public var maximumLag = Duration.zero
    /// The longest time one tick of all clients took.
    public var maximumTickDuration = Duration.zero
    public init() {}
}
