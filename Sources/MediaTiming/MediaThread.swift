import Locking
import POSIX
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// One thread that media runs on: a task executor whose queue and alarm share one lock and one
/// condition variable, so a frame period costs the thread one wakeup.
///
/// A real-time ``MediaClock`` runs each of its lanes in a task that prefers one of these
/// (SE-0417), so the clock's wait, every client's tick and the default actors those ticks call
/// (``MediaActor``) all run here, not on the cooperative pool: no timer thread, no pool thread
/// woken per frame. Jobs other tasks send to a media actor while a tick holds it run here too,
/// in order.
///
/// Only the lane's own loop sleeps on the alarm (``sleep(until:)``); ``poke()`` ends that sleep
/// early (a client joined, the clock was cancelled). After ``stop()``, jobs that still arrive
/// go to the global concurrent executor, so nothing enqueued late is lost.
public final class MediaThread: TaskExecutor, @unchecked Sendable {  // every mutable field is guarded by `lock`
    private let lock = ConditionLock()
    private var jobs: [UnownedJob] = []
    private var spare: [UnownedJob] = []
    /// The loop's sleep: the continuation to resume, and when (nil: when poked). Two fields,
    /// not an optional tuple: a tuple holding a generic continuation is copied through the
    /// runtime's value witnesses at each look, several times a frame period. The continuation
    /// is unchecked: only the loop resumes it, once, as it clears the field.
    private var alarm: UnsafeContinuation<Void, Never>?
    private var alarmDeadline: timespec?
    private var poked = false
    private var sleeping = false
    private var stopping = false
    private var stopped = false
    private var thread: SystemThread?
    public let name: String

    /// Starts the thread. A process that may make no more threads stops here: media cannot
    /// run without one.
    /// - Parameter joinable: whether ``ended()`` can wait for the thread's end (its owner must
    ///   then call it); else the thread frees itself as it ends.
    public init(name: String = "callnode-media", joinable: Bool = false) {
        self.name = name
        do {
            // The loop holds the executor until it ends.
            let made = try SystemThread.start(name: name, detached: !joinable) { [self] in loop() }
            lock.lock()
            thread = made
            lock.unlock()
        } catch {
            preconditionFailure("no media thread: \(error)")
        }
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let unowned = UnownedJob(job)
        lock.lock()
        if stopped {
            lock.unlock()
            globalConcurrentExecutor.enqueue(unowned)
            return
        }
        jobs.append(unowned)
        let wake = sleeping
        lock.unlock()
        if wake { lock.signal() }
    }

    /// Whether the thread has ended (after ``stop()``, once its queue was empty).
    public var hasEnded: Bool {
        lock.lock()
        defer { lock.unlock() }
        return stopped
    }

    /// Whether the caller runs on this thread.
    public var isCurrent: Bool {
        lock.lock()
        defer { lock.unlock() }
        return thread?.isCurrent ?? false
    }

    /// Suspends the calling task until `deadline` (on `ContinuousClock`) or a ``poke()``,
    /// whichever comes first; nil sleeps until poked. One sleeper at a time: the lane's loop.
    /// A poke that came while nobody slept ends the next sleep at once.
    public func sleep(until deadline: ContinuousClock.Instant?) async {
        let wake = deadline.map(Self.monotonic(at:))
        await withTaskCancellationHandler {
            await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
                lock.lock()
                if poked || stopping {
                    poked = false
                    lock.unlock()
                    continuation.resume()
                    return
                }
                precondition(alarm == nil, "one sleeper at a time")
                alarm = continuation
                alarmDeadline = wake
                let signal = sleeping
                lock.unlock()
                if signal { lock.signal() }
            }
        } onCancel: {
            poke()
        }
    }

    /// Ends the current sleep now, or the next one as soon as it starts.
    public func poke() {
        lock.lock()
        poked = true
        let signal = sleeping
        lock.unlock()
        if signal { lock.signal() }
    }

    /// Returns once the thread has ended (after ``stop()``), its thread-local state torn down
    /// too: a process that exits right after cannot meet it still running (GLib, which its jobs
    /// call, aborts in a thread that outlives the process's exit). The wait is on a thread of
    /// its own, not the cooperative pool. Returns at once for a thread that is not joinable.
    public func ended() async {
        lock.lock()
        let made = thread
        lock.unlock()
        guard let made else { return }
        _ = try? await SystemThread.run(name: "\(name)-end") { made.join() }
    }

    /// Ends the thread once its queue is empty; later jobs go to the global executor.
    public func stop() {
        lock.lock()
        stopping = true
        poked = true
        let signal = sleeping
        lock.unlock()
        if signal { lock.signal() }
    }

    private func loop() {
        let executor = asUnownedTaskExecutor()
        lock.lock()
        while true {
            var resume: UnsafeContinuation<Void, Never>?
            if let current = alarm {
                if poked || stopping {
                    poked = false
                    resume = current
                } else if let deadline = alarmDeadline, Self.reached(deadline) {
                    resume = current
                }
                if resume != nil { alarm = nil }
            }
            if resume == nil && jobs.isEmpty {
                if stopping && alarm == nil {
                    stopped = true
                    break
                }
                sleeping = true
                if alarm != nil, let deadline = alarmDeadline {
                    lock.wait(until: deadline)
                } else {
                    lock.wait()
                }
                sleeping = false
                continue
            }
            swap(&jobs, &spare)
            lock.unlock()
            resume?.resume()
            for job in spare { job.runSynchronously(on: executor) }
            spare.removeAll(keepingCapacity: true)
            lock.lock()
        }
        lock.unlock()
    }

    /// The `CLOCK_MONOTONIC` time at a `ContinuousClock` instant (the condition variable waits on
    /// the monotonic clock; the continuous one may differ from it by a constant while this runs).
    static func monotonic(at instant: ContinuousClock.Instant) -> timespec {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let remaining = instant - ContinuousClock.now
        let (seconds, attoseconds) = remaining.components
        var total = Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec) + seconds * 1_000_000_000 + attoseconds / 1_000_000_000
        total = max(total, 0)
        return timespec(tv_sec: Int(total / 1_000_000_000), tv_nsec: Int(total % 1_000_000_000))
    }

    private static func reached(_ deadline: timespec) -> Bool {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return now.tv_sec > deadline.tv_sec || (now.tv_sec == deadline.tv_sec && now.tv_nsec >= deadline.tv_nsec)
    }
}
