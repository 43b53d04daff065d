@testable import ICE
import Locking
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The process's one reader of plain RTP sockets: a socket's owner may close it as soon as
/// `unwatch` returns, so `unwatch` must wait out a handler already running.
@Suite struct SocketWatcherTests {
    /// A connected pair of datagram sockets.
    static func pair() -> (Int32, Int32) {
        var ends: [Int32] = [0, 0]
        let made = socketpair(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0, &ends)
        precondition(made == 0, "socketpair failed")
        return (ends[0], ends[1])
    }

    static func drain(_ descriptor: Int32) {
        var byte: UInt8 = 0
        while recv(descriptor, &byte, 1, Int32(MSG_DONTWAIT)) > 0 {}
    }

    @Test func unwatchReturnsOnlyOnceTheRunningHandlerHasFinished() async throws {
        let watcher = SocketWatcher(threadName: "test-watcher")
        let (readEnd, writeEnd) = Self.pair()
        defer { close(readEnd); close(writeEnd) }
        let entered = Atomic(0), finished = Atomic(0)
        let token = try watcher.watch(readEnd) {
            entered.add(1, ordering: .sequentiallyConsistent)
            usleep(150_000)  // a handler still reading when its owner closes the path
            Self.drain(readEnd)
            finished.add(1, ordering: .sequentiallyConsistent)
        }
        #expect(send(writeEnd, [1], 1, 0) == 1)
        for _ in 0..<500 where entered.load(ordering: .sequentiallyConsistent) == 0 { try await Task.sleep(for: .milliseconds(2)) }
        #expect(entered.load(ordering: .sequentiallyConsistent) == 1)
        watcher.unwatch(readEnd, token: token)
        #expect(finished.load(ordering: .sequentiallyConsistent) == 1, "unwatch returned while the handler ran")
        // Nothing runs it again.
        #expect(send(writeEnd, [2], 1, 0) == 1)
        try await Task.sleep(for: .milliseconds(100))
        #expect(entered.load(ordering: .sequentiallyConsistent) == 1)
        #expect(watcher.count == 0)
    }

    @Test func aHandlerThatUnwatchesItselfDoesNotWaitForItself() async throws {
        let watcher = SocketWatcher(threadName: "test-watcher")
        let (readEnd, writeEnd) = Self.pair()
        defer { close(readEnd); close(writeEnd) }
        let token = Locked<UInt64?>(nil), runs = Atomic(0)
        token.withLock { mine in
            mine = try? watcher.watch(readEnd) {
                Self.drain(readEnd)
                if let own = token.withLock({ $0 }) { watcher.unwatch(readEnd, token: own) }
                runs.add(1, ordering: .sequentiallyConsistent)
            }
        }
        #expect(token.withLock { $0 } != nil)
        #expect(send(writeEnd, [1], 1, 0) == 1)
        for _ in 0..<500 where runs.load(ordering: .sequentiallyConsistent) == 0 { try await Task.sleep(for: .milliseconds(2)) }
        #expect(runs.load(ordering: .sequentiallyConsistent) == 1, "the handler hung waiting for itself")
        #expect(watcher.count == 0)
    }
}
