import Locking

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
/// Two kinds: real time (``run()`` sleeps on a `Clock` to each frame boundary, without drift)
/// and manual (``advance(frames:)`` steps time in tests, deterministically). Clients are
/// ticked in the order they were added.
public final class MediaClock: Sendable {
    public let frameDuration: Duration
    private let manual: Bool
    private let origin = ContinuousClock.now
    private let manualNow = Locked(Duration.zero)
    private let clients = Locked<[(client: any MediaClockClient, phase: Int)]>([])
    private let nextPhase = Locked(0)
    /// When each phase last ticked (its due time), to tell clients how many ticks were skipped.
    private let lastDue = Locked<[Int: Duration]>([:])
    /// How many instants per frame period a real-time clock spreads its clients over.
    public let phases: Int

    /// A clock that runs in real time once ``run()`` is called.
    ///
    /// - Parameter phases: Instants per period to spread clients over (default 4: with 20 ms
    ///   frames, a group of calls every 5 ms).
    public init(frameDuration: Duration = .milliseconds(20), phases: Int = 4) {
        self.frameDuration = frameDuration
        self.phases = max(1, phases)
        manual = false
    }

    private init(manualFrameDuration: Duration) {
        frameDuration = manualFrameDuration
        phases = 1
        manual = true
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

    /// Adds a client; it is ticked from the next tick of its phase on.
    ///
    /// The phase is the least loaded one, and among those the one that ticks soonest, so that a
    /// new call's first frame goes out within one phase step (5 ms at 20 ms frames and four
    /// phases) rather than up to a whole period later.
    public func add(_ client: any MediaClockClient) {
        let upcoming = nextPhase.withLock { $0 }
        clients.withLock { all in
            var load = [Int](repeating: 0, count: phases)
            for entry in all { load[entry.phase] += 1 }
            all.append((client, Self.phase(forLoad: load, upcoming: upcoming)))
        }
    }

    /// After ticking `phase`: the phases to sleep through, in order, and the one to wake for —
    /// the next with a client, or the next period's first when there is no client at all.
    public static func wake(after phase: Int, occupied: Set<Int>, phases: Int) -> (skipped: [Int], next: Int) {
        var skipped: [Int] = []
        var next = (phase + 1) % phases
        while skipped.count < phases - 1, !(occupied.isEmpty ? next == 0 : occupied.contains(next)) {
            skipped.append(next)
            next = (next + 1) % phases
        }
        return (skipped, next)
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

    /// Ticks every client: in order on a manual clock (deterministic), concurrently on a
    /// real-time one (calls are independent, and every core should share the work).
    private func tickAll(phase: Int? = nil, due: Duration? = nil) async {
        let now = due ?? self.now
        let skipped = lastDue.withLock { last in
            defer { last[phase ?? 0] = now }
            guard let previous = last[phase ?? 0] else { return 0 }
            return max(0, Int(((now - previous) / frameDuration).rounded()) - 1)
        }
        let current = clients.withLock { all in all.filter { phase == nil || $0.phase == phase }.map(\.client) }
        if manual || current.count < 2 {
            for client in current { await client.tick(now: now, skipped: skipped) }
            return
        }
        await withTaskGroup(of: Void.self) { group in
            for client in current { group.addTask { await client.tick(now: now, skipped: skipped) } }
        }
    }

    /// Manual clocks: time passes by `duration` without a tick, as when the process is paused
    /// (SIGSTOP, a debugger, a starved VM); the next ``advance(frames:)`` tells every client how
    /// many ticks it skipped.
    public func stall(for duration: Duration) {
        precondition(manual, "stall(for:) is for manual clocks")
        manualNow.withLock { $0 += duration }
    }

    /// Manual clocks: moves time forward `frames` periods, ticking every client each time.
    public func advance(frames: Int = 1) async {
        precondition(manual, "advance(frames:) is for manual clocks")
        for _ in 0..<frames {
            manualNow.withLock { $0 += frameDuration }
            await tickAll()
        }
    }

    /// Real-time clocks: ticks every frame period until the task is cancelled. Deadlines are
    /// absolute, so a late tick does not shift the ones after it; if ticks fall more than a
    /// few frames behind (the process was paused, or the machine is overloaded), the schedule
    /// resets instead of bursting, and each client's next tick says how many it skipped.
    ///
    /// - Returns: How punctual the ticks were.
    @discardableResult
    public func run() async -> MediaClockReport {
        precondition(!manual, "run() is for real-time clocks")
        let clock = ContinuousClock()
        let step = frameDuration / phases
        var deadline = clock.now + step
        var phase = 0
        var report = MediaClockReport()
        while !Task.isCancelled {
            do { try await clock.sleep(until: deadline, tolerance: .milliseconds(1)) } catch { break }
            let lag = clock.now - deadline
            if phase == 0 { report.ticks += 1 }
            report.maximumLag = max(report.maximumLag, lag)
            if lag > frameDuration * 5 { deadline = clock.now }
            let started = clock.now
            // A client added while this phase ticks would wait a whole period in it.
            let following = (phase + 1) % phases
            nextPhase.withLock { $0 = following }
            // Clients are told when the tick was due, not when it ran: playout keeps to the
            // frame grid, so a tick that runs late (the machine is busy) is not mistaken for
            // packets arriving late, which would make the jitter buffer drop a frame and then
            // stretch one back on the next punctual tick.
            await tickAll(phase: phase, due: deadline - origin)
            let finished = clock.now
            report.maximumTickDuration = max(report.maximumTickDuration, finished - started)
            // A frame is late when it is ready only after its period has ended.
            if finished > deadline + frameDuration { report.lateTicks += 1 }
            report.phaseTicks += 1
            // Phases without a client are slept through (each wake costs the process a timer
            // and a thread switch or two): one call wakes the clock once a period, not once a
            // phase. A skipped phase still counts as ticked, so a client added to it later is
            // not told it missed every tick since.
            let occupied = clients.withLock { all in all.reduce(into: Set<Int>()) { $0.insert($1.phase) } }
            let (skipped, next) = Self.wake(after: phase, occupied: occupied, phases: phases)
            for skippedPhase in skipped {
                deadline += step
                let due = deadline - origin
                lastDue.withLock { $0[skippedPhase] = due }
                if skippedPhase == 0 { report.ticks += 1 }
            }
            deadline += step
            phase = next
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
