import Foundation
import TestingPrimitives

/// Runs every job of this process's Swift concurrency on one thread, choosing by seed which of
/// the jobs ready at the same moment runs next.
///
/// It takes the runtime's global executor hook (`swift_task_enqueueGlobal_hook`): every task's
/// next partial and every default actor's turn lands in one ready list instead of the
/// cooperative pool, and ``run(_:)`` runs them one at a time on the calling thread. So the
/// order of everything — two nodes' actors, a leg's input against the media's event, an action
/// against a message in flight — is the seed's, and the same seed gives the same order.
///
/// What it can reorder: any two jobs that are ready together — tasks, and actors with work
/// queued (an actor's turn is one job). What it cannot: the order of messages queued on one
/// actor (the runtime runs an actor's queue in its own order, by priority then arrival), code
/// on threads of its own (a library's thread, a DispatchQueue), and what a job does between
/// two suspension points (that runs to completion, as it does in production).
///
/// One scheduler at a time per process, and nothing else may use Swift concurrency in that
/// process meanwhile: the hook is the process's.
public final class SimScheduler: SerialExecutor, @unchecked Sendable {  // all state behind `lock`
    private typealias Original = @convention(thin) (UnownedJob) -> Void
    private typealias Hook = @convention(thin) (UnownedJob, Original) -> Void

    nonisolated(unsafe) private static var current: SimScheduler?
    nonisolated(unsafe) private static let hook: UnsafeMutablePointer<Hook?> = {
        guard let symbol = dlsym(dlopen(nil, RTLD_NOW), "swift_task_enqueueGlobal_hook") else {
            fatalError("this Swift runtime has no swift_task_enqueueGlobal_hook: the simulation cannot order its jobs")
        }
        return symbol.assumingMemoryBound(to: Hook?.self)
    }()

    private let lock = NSCondition()
    private var ready: [UnownedJob] = []
    /// Jobs enqueued while ``exclusive(_:)`` runs: they run first, in arrival order.
    private var arrivals: [UnownedJob] = []
    /// Jobs other threads enqueued while ``exclusive(_:)`` runs: each runs once the arrivals are
    /// done, so where it lands does not depend on when its thread got to it.
    private var foreignArrivals: [UnownedJob] = []
    private var exclusiveDepth = 0
    private var quiescenceWaiters: [CheckedContinuation<Void, Never>] = []
    private var random: SimRandom
    private var finished = false
    private let driver = Thread.current

    /// Jobs run so far.
    public private(set) var jobsRun = 0
    /// Jobs run since the last quiet moment, and how many a run may take without one (a step of
    /// three nodes takes a few thousand).
    private var jobsSinceQuiet = 0
    static let livelockLimit = 2_000_000
    /// How long the driver waits for a job from another thread before it calls the run stuck.
    public var stallLimit: TimeInterval = 20

    /// How often a job is picked at random among those ready (else the oldest runs).
    private let reordering: Double
    /// Microseconds each job waits before it runs, as on a loaded host: a run's trace must not
    /// change with it (nothing in a run may follow the wall clock).
    private let jobDelay: UInt32
    /// Jobs held back as a preempted thread's would be (nil: none): how often a job enqueued
    /// waits, and for up to how many runs of other jobs.
    private let stragglers: Stragglers?
    /// The jobs held back, and the count of jobs run at which each is ready again.
    private var held: [(job: UnownedJob, until: Int)] = []
    /// Whether the next job enqueued is pinned (``pinNextJob()``), and the jobs pinned.
    private var pinNext = false
    private var pinned: [UnownedJob] = []

    /// - Parameters:
    ///   - seed: chooses among ready jobs.
    ///   - reordering: how often it does (1: always; less, the oldest ready job runs the
    ///     other times, as a plain executor would run them).
    ///   - jobDelay: microseconds each job waits before it runs (a loaded host).
    ///   - stragglers: jobs held back (a thread preempted while the others run on).
    public init(seed: UInt64, reordering: Double = 1, jobDelay: UInt32 = 0, stragglers: Stragglers? = nil) {
        random = SimRandom(seed: seed ^ 0x5EED_5C4E_D01E)
        self.reordering = reordering
        self.jobDelay = jobDelay
        self.stragglers = stragglers
    }

    /// Jobs that wait while others run, as on more than one thread, where the thread that
    /// would run a job can be preempted (or busy) while the others run many jobs: a leg's turn
    /// that waits while the peer's BYE ends its dialog, a message's delivery behind its
    /// answer. Without it a job ready beside a few others is picked within a few runs.
    public struct Stragglers: Sendable, Equatable, Codable {
        /// How often an enqueued job is held back.
        public var chance: Double
        /// At most how many runs of other jobs it waits for (at least one; fewer if nothing
        /// else is ready).
        public var upTo: Int

        public init(chance: Double, upTo: Int) {
            self.chance = chance
            self.upTo = upTo
        }
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        push(UnownedJob(job))
    }

    /// Jobs another thread enqueued while the seed was choosing (not inside ``exclusive(_:)``):
    /// each may land at a different point on another run.
    public private(set) var foreignEnqueues = 0
    private static let debugPicks = ProcessInfo.processInfo.environment["CALLNODE_SIM_DEBUG_PICKS"] != nil
    /// With CALLNODE_SIM_DEBUG_PICKS set: each job run, with the ready list's length then.
    public private(set) var picks: [String] = []
    private static let debugForeign = ProcessInfo.processInfo.environment["CALLNODE_SIM_DEBUG_FOREIGN"] != nil

    private func push(_ job: UnownedJob) {
        if Thread.current != driver {
            lock.lock()
            let counted = exclusiveDepth == 0
            if counted { foreignEnqueues += 1 }
            lock.unlock()
            if counted && Self.debugForeign {
                print("foreign enqueue from \(Thread.current):\n" + Thread.callStackSymbols.prefix(14).joined(separator: "\n"))
            }
        }
        lock.lock()
        if exclusiveDepth > 0 {
            if Thread.current == driver { arrivals.append(job) } else { foreignArrivals.append(job) }
        } else if pinNext, Thread.current == driver {
            pinNext = false
            pinned.append(job)
        } else if let stragglers, Thread.current == driver, random.chance(stragglers.chance) {
            held.append((job, jobsRun + 1 + random.below(stragglers.upTo)))
        } else {
            ready.append(job)
        }
        lock.signal()
        lock.unlock()
    }

    /// Why a run did not finish.
    public enum Stop: Error, CustomStringConvertible {
        /// Nothing was ready, nothing waited for quiet, and no thread enqueued anything.
        case stuck(jobsRun: Int)
        /// Jobs kept coming without a quiet moment: something loops without waiting for time.
        case livelock(jobsRun: Int)

        public var description: String {
            switch self {
            case let .stuck(jobs): "the run is stuck after \(jobs) jobs: no job is ready and no thread enqueues one (a task awaits something that never comes)"
            case let .livelock(jobs): "no quiet moment after \(jobs) jobs: something runs in a loop without waiting for time"
            }
        }
    }

    /// Runs `body` and everything it starts on this thread until `body` returns, then drains
    /// what is still ready. Installs the hook for the duration.
    public func run(_ body: @escaping @Sendable () async -> Void) throws(Stop) {
        precondition(Self.current == nil, "one simulation scheduler at a time")
        Self.current = self
        Self.hook.pointee = { job, _ in SimScheduler.current!.push(job) }
        defer {
            Self.hook.pointee = nil
            Self.current = nil
        }
        Task { [self] in
            await body()
            locked { finished = true }
        }
        while true {
            lock.lock()
            releaseHeld()
            if finished, ready.isEmpty, arrivals.isEmpty, foreignArrivals.isEmpty {
                lock.unlock()
                return
            }
            let job: UnownedJob
            if !arrivals.isEmpty {
                job = arrivals.removeFirst()
            } else if !foreignArrivals.isEmpty {
                job = foreignArrivals.removeFirst()
            } else if exclusiveDepth == 0, !ready.isEmpty {
                // (Always at random: no roll, so the choices follow the seed as they always did.)
                let outOfTurn = ready.count > 1 && (reordering >= 1 || random.chance(reordering))
                job = ready.remove(at: outOfTurn ? random.below(ready.count) : 0)
            } else if exclusiveDepth == 0, !quiescenceWaiters.isEmpty {
                let waiters = quiescenceWaiters
                quiescenceWaiters.removeAll()
                jobsSinceQuiet = 0
                lock.unlock()
                for waiter in waiters { waiter.resume() }
                continue
            } else if finished {
                lock.unlock()
                return
            } else {
                // Another thread owes a job (a database write's completion, a library's
                // thread finishing): wait for it.
                if !lock.wait(until: Date(timeIntervalSinceNow: stallLimit)) && arrivals.isEmpty && foreignArrivals.isEmpty && ready.isEmpty {
                    lock.unlock()
                    throw .stuck(jobsRun: jobsRun)
                }
                lock.unlock()
                continue
            }
            jobsRun += 1
            jobsSinceQuiet += 1
            if jobsSinceQuiet > Self.livelockLimit {
                lock.unlock()
                throw .livelock(jobsRun: jobsRun)
            }
            if Self.debugPicks { picks.append("\(jobsRun) \(ready.count) \(arrivals.count) \(exclusiveDepth)") }
            lock.unlock()
            if jobDelay > 0 { usleep(jobDelay) }
            job.runSynchronously(on: asUnownedSerialExecutor())
        }
    }

    /// Pins the next job enqueued (on this thread): it waits, as on a thread preempted just
    /// then, through quiet moments, until ``releasePinned()`` (or until nothing else is ready
    /// and nobody waits for quiet). A step that knows which job comes next (a leg's turn, as an
    /// input is queued) holds that one back while something else comes in.
    public func pinNextJob(_ on: Bool = true) {
        locked { pinNext = on }
    }

    /// The pinned jobs join the ready ones; whether there were any.
    @discardableResult
    public func releasePinned() -> Bool {
        locked {
            pinNext = false
            defer { pinned.removeAll() }
            ready.append(contentsOf: pinned)
            return !pinned.isEmpty
        }
    }

    /// Held-back jobs whose wait is over join the ready ones, in the order they were held; with
    /// nothing else ready (and nothing arriving), the one due first does at once. Under `lock`.
    private func releaseHeld() {
        if !pinned.isEmpty, ready.isEmpty, arrivals.isEmpty, foreignArrivals.isEmpty, exclusiveDepth == 0, quiescenceWaiters.isEmpty, held.isEmpty {
            ready.append(contentsOf: pinned)
            pinned.removeAll()
        }
        guard !held.isEmpty else { return }
        if ready.isEmpty, arrivals.isEmpty, foreignArrivals.isEmpty, exclusiveDepth == 0,
           let first = held.indices.min(by: { held[$0].until < held[$1].until }) {
            ready.append(held.remove(at: first).job)
        }
        let due = held.filter { $0.until <= jobsRun }
        guard !due.isEmpty else { return }
        held.removeAll { $0.until <= jobsRun }
        ready.append(contentsOf: due.map(\.job))
    }

    /// Returns once nothing is ready: every message, delivery and reaction that the last
    /// instant started has run its course (only what waits for time or another thread is left).
    public func quiescence() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            locked { quiescenceWaiters.append(continuation) }
        }
    }

    /// Runs `body` from a quiet moment, with everything it starts run in arrival order rather
    /// than by seed. For work that waits on another thread (a database write, a library's
    /// thread): that thread's answer then arrives at the same point of the run every time,
    /// since nothing else is running when it comes.
    public func exclusive<T: Sendable>(_ body: () async throws -> T) async rethrows -> T {
        await quiescence()
        locked { exclusiveDepth += 1 }
        defer {
            locked {
                exclusiveDepth -= 1
                if exclusiveDepth == 0 {
                    // What arrived meanwhile and has not run joins the others.
                    ready.append(contentsOf: arrivals + foreignArrivals)
                    arrivals.removeAll()
                    foreignArrivals.removeAll()
                }
            }
        }
        return try await body()
    }

    private func locked<T>(_ body: () -> T) -> T {
        lock.lock()
        defer { lock.unlock() }
        return body()
    }
}

/// The simulator's generator: SplitMix64, small, fast and the same everywhere, so a seed means
/// the same run on any machine.
public typealias SimRandom = SplitMix64

extension SplitMix64 {
    /// A number in `0..<bound`.
    public mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(max(1, bound))) }

    /// True with probability `p`.
    public mutating func chance(_ p: Double) -> Bool { Double(next() >> 11) / Double(1 << 53) < p }
}
