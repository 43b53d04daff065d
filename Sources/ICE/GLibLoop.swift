internal import CNice
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A GMainContext with its own loop on its own thread.
///
/// libnice does its socket I/O, timers and signal emission on the context it was created with;
/// running that context on a dedicated thread keeps GLib off Swift's cooperative pool. Work that
/// must touch libnice is sent here with ``run(_:)``.
final class GLibLoop: Sendable {
    // The context and loop pointers never change after init; GLib documents
    // g_main_context_invoke_full and g_main_loop_quit as callable from any thread.
    nonisolated(unsafe) let context: OpaquePointer
    nonisolated(unsafe) private let loop: OpaquePointer
    // GLib's own thread type, so GLib tracks the thread (its GThread, thread-default context
    // stack) from start to exit instead of adopting a foreign thread.
    private let thread: Mutex<UInt?> = Mutex(nil)  // the GThread* as a bit pattern (pointers are not Sendable)
    private let exit: Mutex<CheckedContinuation<Void, Never>?> = Mutex(nil)
    private let stopped = Atomic<Bool>(false)

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
            start.loop.threadMain(name: start.name)
            return nil
        }, box.toOpaque(), &error)
        guard let started else {
            box.release()
            let message = error.map { String(cString: $0.pointee.message) } ?? "unknown error"
            if let error { g_error_free(error) }
            g_main_loop_unref(loop)
            g_main_context_unref(context)
            throw .libnice(function: "g_thread_try_new", detail: message)
        }
        let handle = UInt(bitPattern: started)
        thread.withLock { $0 = handle }
    }

    private final class ThreadStart {
        let loop: GLibLoop
        let name: String
        init(loop: GLibLoop, name: String) {
            self.loop = loop
            self.name = name
        }
    }

    private func threadMain(name: String) {
        g_main_context_push_thread_default(context)
        g_main_loop_run(loop)
        // Dispatch whatever is still pending (idle callbacks queued before the quit) so that no
        // continuation waiting in run(_:) is left behind.
        while g_main_context_pending(context) != 0 {
            g_main_context_iteration(context, 0)
        }
        g_main_context_pop_thread_default(context)
        g_main_loop_unref(loop)
        g_main_context_unref(context)
        let continuation = exit.withLock { $0.take() }
        continuation?.resume()
    }

    /// Runs `body` on the loop thread and returns its result.
    ///
    /// - Throws: ``IceError/closed`` if the loop was stopped; whatever `body` throws.
    func run<T: Sendable>(_ body: @escaping @Sendable () throws(IceError) -> T) async throws(IceError) -> T {
        guard !stopped.load(ordering: .acquiring) else { throw .closed }
        let result: Result<T, IceError> = await withCheckedContinuation { continuation in
            let job = Job {
                do throws(IceError) { continuation.resume(returning: .success(try body())) }
                catch { continuation.resume(returning: .failure(error)) }
            }
            invoke(job)
        }
        return try result.get()
    }

    /// Queues `work` on the loop thread without waiting for it.
    func post(_ work: @escaping @Sendable () -> Void) {
        invoke(Job(work))
    }

    private func invoke(_ job: Job) {
        g_main_context_invoke_full(
            context, cnice_priority_default(),
            { raw in
                Unmanaged<Job>.fromOpaque(raw!).takeRetainedValue().work()  // retained by invoke
                return 0  // G_SOURCE_REMOVE
            },
            Unmanaged.passRetained(job).toOpaque(), nil)
    }

    private final class Job {
        let work: @Sendable () -> Void
        init(_ work: @escaping @Sendable () -> Void) { self.work = work }
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
            post { g_main_loop_quit(self.loop) }
        }
        // The thread resumed us as its last act; the join returns at once.
        if let bits = thread.withLock({ $0.take() }), let thread = UnsafeMutablePointer<GThread>(bitPattern: bits) {
            g_thread_join(thread)
        }
    }
}
