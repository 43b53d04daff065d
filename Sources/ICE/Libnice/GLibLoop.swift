internal import CNice
import Locking
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A GMainContext with its own loop on its own thread.
///
/// libnice does its socket I/O, timers and signal emission on the context it was created with;
/// running that context on a dedicated thread keeps GLib off Swift's cooperative pool. Work that
/// must touch libnice is sent here with ``run(_:)`` or ``post(_:dropped:)``.
///
/// The context can be lent (``lend()``) to a thread that runs it itself every so often
/// (``iterateLent()``, from the media tick): while lent, the loop thread sleeps instead of
/// waking for every datagram, and the borrower reads what arrived, runs due timers and queued
/// jobs in one pass. ``reclaim()``, ``stop()`` and ``abandon()`` give it back.
///
/// Lifetime: this object holds the context reference until it is deinitialized.
/// Any thread that can queue a job holds this object, so GLib never sees a job queued on a
/// context that another thread has already finalized (`g_source_unref` after `g_source_attach`
/// locks the context). Once the thread has ended, jobs are refused instead of queued.
final class GLibLoop: Sendable {
    // The context and loop pointers never change after init and stay valid until deinit;
    // GLib documents g_source_attach and g_main_loop_quit as callable from any thread.
    nonisolated(unsafe) let context: OpaquePointer
    /// Whether the loop thread runs the context, or a borrower does, and whether it is quitting.
    private let parking = Parking()
    // GLib's own thread type, so GLib tracks the thread (its GThread, thread-default context
    // stack) from start to exit instead of adopting a foreign thread.
    private let thread: Locked<UInt?> = Locked(nil)  // the GThread* as a bit pattern (pointers are not Sendable)
    private let exit: Locked<CheckedContinuation<Void, Never>?> = Locked(nil)
    private let stopped = Atomic<Bool>(false)
    /// Jobs waiting for the loop thread, in posting order, and whether queued jobs will still
    /// run. Jobs are queued and their sources attached under this lock, so nothing is attached
    /// after the thread's final drain. The loop thread takes each job out under the same lock,
    /// which is also what shows ThreadSanitizer the hand-over (GLib's own locks are invisible
    /// to it).
    private let queue = Locked((accepting: true, jobs: [Job]()))

    /// Creates the context and starts its thread.
    init(name: String) throws(IceError) {
        guard let context = g_main_context_new() else {
            throw .libnice(function: "g_main_context_new", detail: "returned NULL")
        }
        self.context = context

        let box = Unmanaged.passRetained(ThreadStart(loop: self, name: name))
        var error: UnsafeMutablePointer<GError>?
        let started = g_thread_try_new(name, { raw in
            let start = Unmanaged<ThreadStart>.fromOpaque(raw!).takeRetainedValue()  // passed just below
            start.loop.threadMain()
            return nil
        }, box.toOpaque(), &error)
        guard let started else {
            box.release()
            let message = error.map { String(cString: $0.pointee.message) } ?? "unknown error"
            if let error { g_error_free(error) }
            queue.withLock { $0.accepting = false }
            stopped.store(true, ordering: .releasing)
            throw .libnice(function: "g_thread_try_new", detail: message)
        }
        let handle = UInt(bitPattern: started)
        thread.withLock { $0 = handle }
    }

    deinit {
        // Runs once no thread can reach this object: the loop thread (which holds it while it
        // runs) has ended, and no caller can queue a job any more. Finalizing the context
        // destroys any source still attached, which drops its job.
        g_main_context_unref(context)
    }

    private final class ThreadStart {
        let loop: GLibLoop
        let name: String
        init(loop: GLibLoop, name: String) {
            self.loop = loop
            self.name = name
        }
    }

    private func threadMain() {
        // g_main_loop_run, but asleep while the context is lent. Pushing the context as the
        // thread's default also holds it (until the pop), so it is pushed only around each
        // iteration: a borrower can take it between them.
        while parking.waitUntilReturned() {
            g_main_context_push_thread_default(context)
            g_main_context_iteration(context, 1)
            g_main_context_pop_thread_default(context)
        }
        g_main_context_push_thread_default(context)
        // Dispatch whatever is still pending (jobs queued before the quit), then refuse new
        // jobs and dispatch once more what was queued while refusing began, so that every job
        // either runs or is refused (and no continuation waiting in run(_:) is left behind).
        drain()
        queue.withLock { $0.accepting = false }
        drain()
        // Every attached source was dispatched above; a job left over would have no source.
        let leftover = queue.withLock { queue in
            defer { queue.jobs.removeAll() }
            return queue.jobs
        }
        for job in leftover { job.drop() }
        g_main_context_pop_thread_default(context)
        let continuation = exit.withLock { $0.take() }
        continuation?.resume()
    }

    private func drain() {
        while g_main_context_pending(context) != 0 {
            g_main_context_iteration(context, 0)
        }
    }

    /// Runs `body` on the loop thread and returns its result.
    ///
    /// - Throws: ``IceError/closed`` if the loop was stopped; whatever `body` throws.
    func run<T: Sendable>(_ body: @escaping @Sendable () throws(IceError) -> T) async throws(IceError) -> T {
        guard !stopped.load(ordering: .acquiring) else { throw .closed }
        let result: Result<T, IceError> = await withCheckedContinuation { continuation in
            let job = Job(
                work: {
                    do throws(IceError) { continuation.resume(returning: .success(try body())) }
                    catch { continuation.resume(returning: .failure(error)) }
                },
                dropped: { continuation.resume(returning: .failure(.closed)) })
            invoke(job)
        }
        return try result.get()
    }

    /// Queues `work` on the loop thread without waiting for it. Jobs run in the order they are
    /// posted, never inline (even when posted from the loop thread). If the loop has ended,
    /// `dropped` runs instead, on the caller's thread.
    func post(_ work: @escaping @Sendable () -> Void, dropped: (@Sendable () -> Void)? = nil) {
        invoke(Job(work: work, dropped: dropped))
    }

    private func invoke(_ job: Job) {
        let queued = queue.withLock { queue -> Bool in
            guard queue.accepting else { return false }
            queue.jobs.append(job)
            // One idle source per job, each running the oldest queued job; an idle source
            // rather than g_main_context_invoke_full, which would run the job inline when
            // called on the loop thread.
            let source = g_idle_source_new()
            g_source_set_priority(source, cnice_priority_default())
            g_source_set_callback(
                source,
                { raw in
                    // Unretained: every source is dispatched before the loop thread, which
                    // holds this object, ends (see threadMain).
                    Unmanaged<GLibLoop>.fromOpaque(raw!).takeUnretainedValue().runNext()
                    return 0  // G_SOURCE_REMOVE
                },
                Unmanaged.passUnretained(self).toOpaque(),
                nil)
            g_source_attach(source, context)
            g_source_unref(source)
            return true
        }
        if !queued { job.drop() }
    }

    /// On the loop thread: runs the oldest queued job.
    private func runNext() {
        let job = queue.withLock { $0.jobs.isEmpty ? nil : $0.jobs.removeFirst() }
        job?.perform()
    }

    /// One queued closure. `perform()` or `drop()` runs its side, at most once.
    private final class Job: Sendable {
        private let work: @Sendable () -> Void
        private let dropped: (@Sendable () -> Void)?
        private let done = Locked(false)
        init(work: @escaping @Sendable () -> Void, dropped: (@Sendable () -> Void)?) {
            self.work = work
            self.dropped = dropped
        }
        /// True for the one caller that gets to run a side.
        private func claim() -> Bool {
            done.withLock { done in
                defer { done = true }
                return !done
            }
        }
        func perform() {
            if claim() { work() }
        }
        func drop() {
            if claim() { dropped?() }
        }
        deinit {
            // A source destroyed without being dispatched (its context finalized) drops the job.
            if claim() { dropped?() }
        }
    }

    /// Ends the loop thread's run: it returns from its current iteration, or from sleeping
    /// while lent, and drains what is left.
    private func quit() {
        parking.quit()
        g_main_context_wakeup(context)
    }

    /// Lends the context: from now the loop thread sleeps after its current iteration, and
    /// only ``iterateLent()`` runs the context's sources (sockets, timers, queued jobs), on the
    /// borrower's thread. Call ``iterateLent()`` often (every frame period): nothing of the
    /// agent runs otherwise. No-op once the loop is stopping.
    func lend() {
        guard parking.lend() else { return }
        g_main_context_wakeup(context)  // out of its poll, so it lets go of the context
    }

    /// Gives the context back to the loop thread (idempotent).
    func reclaim() {
        parking.reclaim()
    }

    /// While lent: reads what has arrived, and runs due timers and queued jobs, on the calling
    /// thread, without blocking. Returns false when not lent, or when the loop thread has not
    /// let go of the context yet (the next call will find it free).
    @discardableResult
    func iterateLent() -> Bool {
        guard parking.beginBorrowing() else { return false }
        defer { parking.endBorrowing() }
        guard g_main_context_acquire(context) != 0 else { return false }
        // Thread-default while it runs here, as on the loop thread, for what jobs start in GIO.
        g_main_context_push_thread_default(context)
        // Each pass dispatches every source that is ready at the highest priority pending;
        // bounded, so a flood cannot keep the borrower here.
        var passes = 0
        while passes < 16, g_main_context_iteration(context, 0) != 0 { passes += 1 }
        g_main_context_pop_thread_default(context)
        g_main_context_release(context)
        return true
    }

    /// Quits the loop without waiting and lets the thread end on its own (for deinit paths that
    /// cannot await). Idempotent, and a no-op after ``stop()``.
    func abandon() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        reclaim()
        post { self.quit() }
        if let bits = thread.withLock({ $0.take() }), let thread = UnsafeMutablePointer<GThread>(bitPattern: bits) {
            g_thread_unref(thread)
        }
    }

    /// Quits the loop, waits for the thread to finish and joins it. Idempotent.
    func stop() async {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        reclaim()
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            exit.withLock { $0 = continuation }
            // Quit from inside the loop so every job queued before stop() runs first.
            post({ self.quit() }, dropped: {
                // Only if the thread already ended; it resumed nobody then.
                self.exit.withLock { $0.take() }?.resume()
            })
        }
        // The thread resumed us as its last act; the join returns at once.
        if let bits = thread.withLock({ $0.take() }), let thread = UnsafeMutablePointer<GThread>(bitPattern: bits) {
            g_thread_join(thread)
        }
    }
}

/// Who runs a ``GLibLoop``'s context: its own thread, or a borrower (``GLibLoop/lend()``).
/// The loop thread sleeps on the condition while the context is lent or a borrower is inside
/// it, and wakes when it is given back or the loop quits.
private final class Parking: @unchecked Sendable {  // every field is guarded by `lock`
    private let lock = ConditionLock()
    private var lent = false
    private var borrowing = false
    private var quitting = false

    /// On the loop thread: sleeps while the context is lent or borrowed; false once quitting
    /// (and no borrower is inside the context any more).
    func waitUntilReturned() -> Bool {
        lock.withLock {
            while borrowing || (lent && !quitting) { lock.wait() }
            return !quitting
        }
    }

    /// Lends the context unless the loop is quitting; whether that changed anything (false
    /// when it was lent already, or the loop is quitting).
    func lend() -> Bool {
        lock.withLock {
            guard !quitting, !lent else { return false }
            lent = true
            return true
        }
    }

    /// Takes the context back; wakes the loop thread only if it was lent.
    func reclaim() {
        let changed = lock.withLock {
            defer { lent = false }
            return lent
        }
        if changed { lock.broadcast() }
    }

    func quit() {
        lock.withLock {
            quitting = true
            lent = false
        }
        lock.broadcast()
    }

    /// One borrower at a time, and only while lent.
    func beginBorrowing() -> Bool {
        lock.withLock {
            guard lent, !quitting, !borrowing else { return false }
            borrowing = true
            return true
        }
    }

    func endBorrowing() {
        // The loop thread waits for the borrower only once the context is given back or the
        // loop quits; while lent it sleeps on, and is not woken every tick.
        let wake = lock.withLock { () -> Bool in
            borrowing = false
            return !lent || quitting
        }
        if wake { lock.broadcast() }
    }
}
