import Foundation
import Locking

/// Runs plans: one (its trace), a sweep of seeds, or a failing plan shrunk to a shorter one that
/// still fails.
///
/// A run takes over the process's Swift concurrency while it lasts (see ``SimScheduler``): call
/// these from a plain thread (a command's synchronous `run()`), never from a task, and run
/// nothing else meanwhile.
public struct SimulationRunner: Sendable {
    public var options: SimOptions
    /// Called with a run's seed before it starts: the host's randomness (UUIDs, keys, SSRCs)
    /// re-seeded from it, so that a run is the same byte for byte. `callnode-sim` passes its
    /// seeded host; without one, only the order of jobs and the plan follow the seed.
    public var reseedHost: @Sendable (UInt64) -> Void
    /// Called with the run's manual time as a run starts and whenever it moves: the wall clock
    /// that libraries' own timers read (OpenSSL's DTLS resends) set to it, so that what they do
    /// follows the run's time, not how fast the host ran it. `callnode-sim` passes its host's.
    public var setHostTime: @Sendable (Duration) -> Void

    public init(options: SimOptions, reseedHost: @escaping @Sendable (UInt64) -> Void = { _ in },
                setHostTime: @escaping @Sendable (Duration) -> Void = { _ in }) {
        self.options = options
        self.reseedHost = reseedHost
        self.setHostTime = setHostTime
    }

    /// The plan `seed` makes.
    public func plan(seed: UInt64) -> SimPlan { SimPlan.generate(seed: seed, options: options) }

    /// Runs `plan` to its end or its first broken rule.
    public func run(_ plan: SimPlan) -> SimOutcome {
        reseedHost(plan.seed)
        let scheduler = SimScheduler(seed: plan.seed, reordering: plan.swarm?.reordering ?? 1, jobDelay: options.slowHost,
                                     stragglers: plan.swarm?.stragglers)
        let simulation = Locked<Simulation?>(nil)
        let result = Locked<(trace: [String], failure: SimFailure?, frames: Int, calls: Int)?>(nil)
        let options = self.options, setHostTime = self.setHostTime
        setHostTime(.zero)
        do {
            try scheduler.run {
                let made = Simulation(plan: plan, options: options, scheduler: scheduler, setHostTime: setHostTime)
                simulation.withLock { $0 = made }
                await made.run()
                result.withLock { $0 = (made.trace, made.failure, made.frame, made.calls.count) }
                // The run's world goes away within the run: what its teardown wakes runs here,
                // not in the next run's schedule.
                simulation.withLock { $0 = nil }
            }
        } catch {
            let made = simulation.withLock { $0 }
            var trace = made?.trace ?? []
            let kind = if case .livelock = error { "livelock" } else { "stuck" }
            let failure = SimFailure(invariant: kind, message: "\(error)", frame: made?.frame ?? 0)
            trace.append(failure.description)
            return SimOutcome(plan: plan, trace: trace, failure: failure, frames: made?.frame ?? 0, calls: made?.calls.count ?? 0,
                              jobs: scheduler.jobsRun, foreignJobs: scheduler.foreignEnqueues)
        }
        if let path = ProcessInfo.processInfo.environment["CALLNODE_SIM_DEBUG_PICKS"] {
            try? scheduler.picks.joined(separator: "\n").write(toFile: path + ".\(plan.seed)", atomically: true, encoding: .utf8)
        }
        let made = result.withLock { $0 }!
        return SimOutcome(plan: plan, trace: made.trace, failure: made.failure, frames: made.frames, calls: made.calls,
                          jobs: scheduler.jobsRun, foreignJobs: scheduler.foreignEnqueues)
    }

    /// A shorter plan with the same seed that still breaks `failure`'s rule: steps removed in
    /// halves, then quarters, down to one at a time (delta debugging), then the run cut short
    /// after the last step. At most `budget` runs.
    public func shrink(_ plan: SimPlan, failure: SimFailure, budget: Int = 200,
                       progress: (Int, SimPlan) -> Void = { _, _ in }) -> (plan: SimPlan, outcome: SimOutcome?) {
        var best = plan
        var bestOutcome: SimOutcome?
        var runs = 0
        func stillFails(_ candidate: SimPlan) -> Bool {
            guard runs < budget else { return false }
            runs += 1
            let outcome = run(candidate)
            progress(runs, candidate)
            guard outcome.failure?.invariant == failure.invariant else { return false }
            bestOutcome = outcome
            return true
        }
        var chunk = max(1, best.steps.count / 2)
        while chunk >= 1, runs < budget {
            var removedAny = false
            var start = 0
            while start < best.steps.count, runs < budget {
                var steps = best.steps
                steps.removeSubrange(start..<min(start + chunk, steps.count))
                let candidate = best.with(steps: steps)
                if stillFails(candidate) {
                    best = candidate
                    removedAny = true
                } else {
                    start += chunk
                }
            }
            if !removedAny { chunk /= 2 }
        }
        // The activity ends soon after the last step (or at the failure, whichever is later).
        let lastStep = best.steps.map(\.frame).max() ?? 0
        let shorter = max(lastStep + 1, min(best.frames, (bestOutcome?.failure?.frame ?? failure.frame) + 1))
        if shorter < best.frames {
            let candidate = best.with(frames: shorter)
            if stillFails(candidate) { best = candidate }
        }
        return (best, bestOutcome)
    }
}

extension SimOutcome {
    /// A short digest of the trace (FNV-1a, 64 bits): two runs with the same digest printed the
    /// same trace.
    public var digest: String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for line in trace {
            for byte in line.utf8 {
                hash ^= UInt64(byte)
                hash = hash &* 0x100_0000_01b3
            }
            hash ^= 0x0a
            hash = hash &* 0x100_0000_01b3
        }
        return String(hash, radix: 16).leftPadded(to: 16)
    }
}

extension String {
    fileprivate func leftPadded(to width: Int) -> String { count >= width ? self : String(repeating: "0", count: width - count) + self }
}
