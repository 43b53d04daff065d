#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A `pthread_mutex_t` with a `pthread_cond_t` that waits on the monotonic clock: what a
/// thread of CallNode's own (a media thread, GLib's loop while it is lent) sleeps on until
/// another thread hands it work or a deadline passes.
///
/// The owner keeps the state the condition is about in its own fields, touched only between
/// ``lock()`` and ``unlock()`` (or inside ``withLock(_:)``); waits happen with the lock held,
/// as `pthread_cond_wait` requires.
public final class ConditionLock: @unchecked Sendable {  // the pthread objects are used only through their own API
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>

    public init() {
        mutex = .allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        let status = pthread_mutex_init(mutex, nil)
        precondition(status == 0, "pthread_mutex_init failed: \(status)")
        condition = .allocate(capacity: 1)
        condition.initialize(to: pthread_cond_t())
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        #if os(Linux)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        #endif
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        condition.deinitialize(count: 1)
        condition.deallocate()
        pthread_mutex_destroy(mutex)
        mutex.deinitialize(count: 1)
        mutex.deallocate()
    }

    public func lock() { pthread_mutex_lock(mutex) }
    public func unlock() { pthread_mutex_unlock(mutex) }

    /// Runs `body` holding the lock. Do not block or await inside (but ``wait()``).
    public func withLock<Result>(_ body: () throws -> Result) rethrows -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body()
    }

    /// With the lock held: releases it until signalled (or woken spuriously), then takes it again.
    public func wait() { pthread_cond_wait(condition, mutex) }

    /// As ``wait()``, or until `deadline` on `CLOCK_MONOTONIC` has passed.
    public func wait(until deadline: timespec) {
        var deadline = deadline
        _ = pthread_cond_timedwait(condition, mutex, &deadline)
    }

    /// Wakes one waiter (with or without the lock held).
    public func signal() { pthread_cond_signal(condition) }
    /// Wakes every waiter.
    public func broadcast() { pthread_cond_broadcast(condition) }
}
