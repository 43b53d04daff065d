import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A thread of the process's own, for work that blocks (device I/O, `poll`, a C library's event
/// loop, a media lane) and so must never run on the cooperative pool: the one way this package
/// makes threads.
///
/// The thread is named (what `top -H`, `perf` and a debugger show; Linux keeps 15 bytes), runs
/// `body` once and ends. Join it with ``join()``, or start it `detached` when nothing waits for
/// its end.
public final class SystemThread: @unchecked Sendable {  // `handle` is written once in start, before the thread is shared
    private var handle = pthread_t()
    private let joined = Atomic(false)
    public let name: String

    private init(name: String) {
        self.name = name
    }

    /// Starts `body` on a new thread named `name`. A `detached` thread frees itself as it ends
    /// and is never joined (``join()`` returns at once).
    /// - Throws: ``SystemError`` (`pthread_create`) when the process may make no more threads.
    @discardableResult
    public static func start(name: String, detached: Bool = false, _ body: @escaping @Sendable () -> Void) throws(SystemError) -> SystemThread {
        let thread = SystemThread(name: name)
        let box = Unmanaged.passRetained(Start(name: name, body: body)).toOpaque()
        let status = pthread_create(&thread.handle, nil, { raw in
            let start = Unmanaged<Start>.fromOpaque(raw!).takeRetainedValue()  // retained just above, taken once here
            start.run()
            return nil
        }, box)
        guard status == 0 else {
            Unmanaged<Start>.fromOpaque(box).release()
            throw SystemError(function: "pthread_create", errno: status)
        }
        if detached {
            thread.joined.store(true, ordering: .releasing)
            pthread_detach(thread.handle)
        }
        return thread
    }

    /// Runs `body` on a thread of its own and returns what it returns: a blocking call (a C
    /// library's start or stop, a name lookup) awaited without holding a thread of the
    /// cooperative pool.
    /// - Throws: ``SystemError`` (`pthread_create`) when no thread could be made; `body` did not run.
    public static func run<T: Sendable>(name: String, _ body: @escaping @Sendable () -> T) async throws(SystemError) -> T {
        let result: Result<T, SystemError> = await withCheckedContinuation { done in
            do throws(SystemError) {
                try start(name: name, detached: true) { done.resume(returning: .success(body())) }
            } catch {
                done.resume(returning: .failure(error))
            }
        }
        return try result.get()
    }

    /// Waits until the thread has ended. Later calls (and calls on a detached thread) return at
    /// once. Never call it from the thread itself.
    public func join() {
        guard !joined.exchange(true, ordering: .acquiringAndReleasing) else { return }
        pthread_join(handle, nil)
    }

    /// The processor time the calling thread has run so far (its CPU clock), or `nil` where
    /// the system cannot say.
    public static var currentCPUTime: Duration? {
        var ts = timespec()
        guard clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0 else { return nil }
        return .seconds(ts.tv_sec) + .nanoseconds(ts.tv_nsec)
    }

    /// Whether the caller runs on this thread.
    public var isCurrent: Bool { pthread_equal(handle, pthread_self()) != 0 }

    private final class Start {
        let name: String
        let body: @Sendable () -> Void

        init(name: String, body: @escaping @Sendable () -> Void) {
            self.name = name
            self.body = body
        }

        func run() {
            #if os(Linux)
            // What pthread_setname_np does (Glibc's module does not show it): the thread's comm,
            // at most 15 bytes.
            let descriptor = open("/proc/thread-self/comm", O_WRONLY)
            if descriptor >= 0 {
                let bytes = Array(name.utf8.prefix(15))
                _ = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
                close(descriptor)
            }
            #elseif canImport(Darwin)
            _ = pthread_setname_np(name)
            #endif
            body()
        }
    }
}
