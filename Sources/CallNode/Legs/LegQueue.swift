import Foundation
import Locking

/// A leg's one queue: its inputs, taken one at a time, each to completion, and the tasks the
/// leg starts, run in one task group. When the queue is finished, inputs still in it are
/// refused (what waits on them gets its fallback) and its running tasks are cancelled and
/// awaited, so nothing of the call outlives ``run(taking:runsChildren:)``.
final class LegQueue: Sendable {
    /// An item of the queue: an input to take, or a task to start in the group.
    enum Work: Sendable {
        case input(LegInput)
        case child(@Sendable () async -> Void)
    }

    private let work: AsyncStream<Work>
    private let continuation: AsyncStream<Work>.Continuation
    /// Called as the next input is queued, just before (once): a simulation that holds the
    /// leg's turn back there (``InputProbe``).
    private let beforeNextInput = Locked<(@Sendable () -> Void)?>(nil)

    init() {
        (work, continuation) = AsyncStream.makeStream(of: Work.self)
    }

    /// Takes the inputs in order with `take` (the next only once it returns), starts the tasks
    /// while `runsChildren` says so, until ``finish()``; then cancels the tasks still running
    /// and returns once all have ended.
    func run(isolation: isolated (any Actor)? = #isolation, taking take: (LegInput) async -> Void,
             runsChildren: () -> Bool) async {
        let work = self.work
        await withDiscardingTaskGroup { group in
            for await item in work {
                switch item {
                case let .input(input): await take(input)
                case let .child(child): if runsChildren() { group.addTask(operation: child) }
                }
            }
            group.cancelAll()
        }
    }

    /// Queues an input. Returns false (and refuses it) once the queue is finished.
    @discardableResult
    func post(_ input: LegInput) -> Bool {
        beforeNextInput.withLock { hook in
            defer { hook = nil }
            return hook
        }?()
        if case .terminated = continuation.yield(.input(input)) {
            input.refuse()
            return false
        }
        return true
    }

    /// Where a simulation steps in (``CallNode/inputProbe(of:)``).
    var probe: InputProbe {
        InputProbe(beforeNextInput: { [beforeNextInput] body in beforeNextInput.withLock { $0 = body } })
    }

    /// Queues an input carrying a reply and waits for the answer.
    func ask<Value: Sendable>(fallback: Value, _ make: (LegReply<Value>) -> LegInput) async -> Value {
        await withCheckedContinuation { continuation in
            post(make(LegReply(fallback: fallback) { continuation.resume(returning: $0) }))
        }
    }

    /// Starts `child` in the group (nothing once finished).
    func spawn(_ child: @escaping @Sendable () async -> Void) {
        continuation.yield(.child(child))
    }

    /// No more inputs or tasks: what is queued is still taken (and refused by an ended leg).
    func finish() {
        continuation.finish()
    }
}

/// A leg's queue as a simulation sees it: a call made as the next input is queued, just before,
/// on the thread that queues it (once; a new one replaces one not made yet).
@_spi(Simulation)
public struct InputProbe: Sendable {
    public let beforeNextInput: @Sendable (@escaping @Sendable () -> Void) -> Void
}

/// A leg's armed timers, each with the generation that armed it: a timer cancelled (or armed
/// again) lets its sleeping task find a stale generation when it wakes, and do nothing.
struct LegTimers {
    private var armed: [LegTimer: UInt64] = [:]
    private var generation: UInt64 = 0

    /// Arms `timer`; returns the generation its firing must carry.
    mutating func arm(_ timer: LegTimer) -> UInt64 {
        generation += 1
        armed[timer] = generation
        return generation
    }

    mutating func cancel(_ timer: LegTimer) {
        armed[timer] = nil
    }

    /// Whether a firing of `timer` from `generation` is the armed one (it is disarmed then).
    mutating func fire(_ timer: LegTimer, generation: UInt64) -> Bool {
        guard armed[timer] == generation else { return false }
        armed[timer] = nil
        return true
    }
}
