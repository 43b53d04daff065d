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
/// Lifetime: this object holds the context and loop references until it is deinitialized.
/// Any thread that can queue a job holds this object, so GLib never sees a job queued on a
/// context that another thread has already finalized (`g_source_unref` after `g_source_attach`
/// locks the context). Once the thread has ended, jobs are refused instead of queued.
final class GLibLoop: Sendable {
    // The context and loop pointers never change after init and stay valid until deinit;
    // GLib documents g_source_attach and g_main_loop_quit as callable from any thread.
    nonisolated(unsafe) let context: OpaquePointer
    nonisolated(unsafe) private let loop: OpaquePointer
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
        self.loop = g_main_loop_new(context, 0)

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
        g_main_loop_unref(loop)
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
        g_main_context_push_thread_default(context)
        g_main_loop_run(loop)
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

    /// Quits the loop without waiting and lets the thread end on its own (for deinit paths that
    /// cannot await). Idempotent, and a no-op after ``stop()``.
    func abandon() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        post { g_main_loop_quit(self.loop) }
        if let bits = thread.withLock({ $0.take() }), let thread = UnsafeMutablePointer<GThread>(bitPattern: bits) {
            g_thread_unref(thread)
        }
    }

    /// Quits the loop, waits for the thread to finish and joins it. Idempotent.
    func stop() async {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            exit.withLock { $0 = continuation }
            // Quit from inside the loop so every job queued before stop() runs first.
            post({ g_main_loop_quit(self.loop) }, dropped: {
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
