internal import CNice
import Locking
import POSIX

#if canImport(Glibc)
import Glibc
#endif

/// One thread for the whole process that waits (`epoll`) on every socket whose datagrams are not
/// read on the media clock's ticks, and runs each socket's handler when something arrived: the
/// plain RTP paths of SIP calls share it instead of each keeping a thread blocked on its socket.
///
/// A handler is named by a token, never by its descriptor, so that a readiness reported for a
/// socket just unwatched (and whose number the kernel may already have given to another file)
/// runs nothing. ``unwatch(_:token:)`` returns only once the handler is not running and never
/// will again: after it the owner may close the descriptor.
final class SocketWatcher: @unchecked Sendable {  // every field below is touched only under `lock`
    /// The process's watcher; its thread starts with the first socket watched.
    static let shared = SocketWatcher()

    private let lock = ConditionLock()
    private var epoll: Int32 = -1
    private var handlers: [UInt64: @Sendable () -> Void] = [:]
    private var nextToken: UInt64 = 1
    /// The token whose handler runs now on the watcher's thread (0: none).
    private var running: UInt64 = 0
    /// The watcher thread's kernel id (0 until it runs): a handler that unwatches itself does
    /// not wait for itself.
    private var threadID: Int32 = 0
    private var failure: String?
    private let threadName: String

    /// A watcher whose thread is named `threadName` (what `top -H` shows).
    init(threadName: String = "callnode-rtp") {
        self.threadName = threadName
    }

    /// Calls `handler` on the watcher's thread whenever `descriptor` has something to read (level
    /// triggered: read until it would block). Returns the token that unwatches it.
    /// - Throws: ``IceError/invalidConfiguration(_:)`` when the kernel refuses (no `epoll`, no thread).
    func watch(_ descriptor: Int32, _ handler: @escaping @Sendable () -> Void) throws(IceError) -> UInt64 {
        lock.lock()
        defer { lock.unlock() }
        if epoll < 0 { try start() }
        let token = nextToken
        nextToken += 1
        guard cnice_epoll_add(epoll, descriptor, token) == 0 else {
            throw .invalidConfiguration("cannot watch a UDP socket: \(SystemError(function: "epoll_ctl", errno: errno))")
        }
        handlers[token] = handler
        return token
    }

    /// Stops watching: when it returns, the handler of `token` is not running (unless this is
    /// that handler's own thread) and will not run again.
    func unwatch(_ descriptor: Int32, token: UInt64) {
        lock.lock()
        defer { lock.unlock() }
        guard handlers.removeValue(forKey: token) != nil else { return }
        _ = cnice_epoll_remove(epoll, descriptor)
        guard cnice_thread_id() != threadID else { return }
        while running == token { lock.wait() }
    }

    /// Sockets watched now.
    var count: Int { lock.withLock { handlers.count } }

    /// With the lock held.
    private func start() throws(IceError) {
        if let failure { throw .invalidConfiguration(failure) }
        let made = cnice_epoll_create()
        guard made >= 0 else {
            failure = "cannot wait on UDP sockets: \(SystemError(function: "epoll_create1", errno: errno))"
            throw .invalidConfiguration(failure!)
        }
        do {
            try SystemThread.start(name: threadName, detached: true) { [self] in loop() }
        } catch {
            Glibc.close(made)
            failure = "no thread to read RTP on: \(error)"
            throw .invalidConfiguration(failure!)
        }
        epoll = made
    }

    private func loop() {
        let epoll = lock.withLock {
            threadID = cnice_thread_id()
            return self.epoll
        }
        var tokens = [UInt64](repeating: 0, count: 64)
        while true {
            let ready = tokens.withUnsafeMutableBufferPointer { cnice_epoll_wait(epoll, $0.baseAddress, Int32($0.count)) }
            guard ready > 0 else { continue }  // EINTR
            for index in 0..<Int(ready) {
                let token = tokens[index]
                lock.lock()
                guard let handler = handlers[token] else {
                    lock.unlock()
                    continue  // unwatched since the kernel reported it
                }
                running = token
                lock.unlock()
                handler()
                lock.lock()
                running = 0
                lock.broadcast()
                lock.unlock()
            }
        }
    }
}
