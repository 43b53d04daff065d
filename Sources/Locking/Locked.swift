#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A value behind a `pthread_mutex_t`: the lock every part of CallNode uses for state shared
/// across threads (GLib's loop, ALSA I/O threads, NIO event loops, the cooperative pool).
///
/// It has `Synchronization.Mutex`'s shape (`withLock` lends the value, `sending` keeps
/// non-Sendable values from escaping), but takes the lock through libc, where
/// ThreadSanitizer sees it. On Linux, `Mutex` locks with futex calls inside the standard
/// library, which is not instrumented, so every `Mutex`-guarded access would be reported as
/// a race.
///
/// Keep a closure in a class (or a struct field), not as the value itself: a function-typed
/// `Value` is re-wrapped in a reabstraction thunk by every `withLock` through the generic
/// `inout`, so a closure read once per packet grows a chain every later call runs through.
public final class Locked<Value: ~Copyable>: @unchecked Sendable {  // every access to `value` holds the mutex
    @usableFromInline let mutex: UnsafeMutablePointer<pthread_mutex_t>
    @usableFromInline var value: Value

    public init(_ initialValue: consuming sending Value) {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        let status = pthread_mutex_init(mutex, nil)
        precondition(status == 0, "pthread_mutex_init failed: \(status)")
        value = initialValue
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    /// Runs `body` with the value while holding the lock. Do not block or await inside.
    ///
    /// Inlinable, so each caller's module specializes it for its value: the media path takes
    /// these locks several times per packet, and the unspecialized generic looked its value
    /// type's metadata up at run time on every call.
    @inlinable
    public func withLock<Result: ~Copyable, E: Error>(_ body: (inout sending Value) throws(E) -> sending Result) throws(E) -> sending Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}
