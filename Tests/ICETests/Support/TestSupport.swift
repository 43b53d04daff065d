import Foundation
import ICE
import Locking
import Testing
@_exported import CallNodeTestSupport

/// A failure with a message, for test helpers that give up.

/// Records an agent's events as they arrive and lets a test wait for one that matches.
///
/// Waits are bounded so a broken agent fails the test instead of hanging it; the bound is a
/// guard, never what the test asserts.
final class EventRecorder: Sendable {
    private struct Waiter {
        let id: Int
        let after: Int
        let predicate: @Sendable (IceEvent) -> Bool
        let continuation: CheckedContinuation<Int?, Never>
    }
    private struct State {
        var events: [IceEvent] = []
        var finished = false
        var waiters: [Waiter] = []
        var nextID = 0
    }
    private let state = Locked(State())
    private let task: Locked<Task<Void, Never>?> = Locked(nil)

    init(_ agent: IceAgent) {
        let events = agent.events
        let t = Task { [self] in
            for await event in events { record(event) }
            finish()
        }
        task.withLock { $0 = t }
    }

    var events: [IceEvent] { state.withLock { $0.events } }
    var count: Int { state.withLock { $0.events.count } }
    var states: [IceConnectionState] {
        events.compactMap { if case .stateChanged(let s) = $0 { s } else { nil } }
    }

    private func record(_ event: IceEvent) {
        let ready = state.withLock { s -> [CheckedContinuation<Int?, Never>] in
            s.events.append(event)
            let index = s.events.count - 1
            var ready: [CheckedContinuation<Int?, Never>] = []
            s.waiters.removeAll { w in
                guard index >= w.after, w.predicate(event) else { return false }
                ready.append(w.continuation)
                return true
            }
            return ready.map { $0 }
        }
        let index = count - 1
        for continuation in ready { continuation.resume(returning: index) }
    }

    private func finish() {
        let waiters = state.withLock { s -> [Waiter] in
            s.finished = true
            defer { s.waiters = [] }
            return s.waiters
        }
        for w in waiters { w.continuation.resume(returning: nil) }
    }

    /// Waits for an event at index ≥ `after` matching `predicate`; returns its index, or `nil`
    /// if the stream ended or `limit` passed first.
    func wait(after: Int = 0, limit: Duration = .seconds(20), _ predicate: @escaping @Sendable (IceEvent) -> Bool) async -> Int? {
        let id = state.withLock { s -> Int in s.nextID += 1; return s.nextID }
        return await withTaskGroup(of: Int?.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    let immediate = self.state.withLock { s -> Int?? in
                        if let i = s.events.indices.first(where: { $0 >= after && predicate(s.events[$0]) }) { return .some(i) }
                        if s.finished { return .some(nil) }
                        s.waiters.append(Waiter(id: id, after: after, predicate: predicate, continuation: continuation))
                        return nil
                    }
                    if let immediate { continuation.resume(returning: immediate) }
                }
            }
            group.addTask {
                try? await Task.sleep(for: limit)
                return nil
            }
            let first = await group.next() ?? nil
            // Release the event waiter if the time guard won.
            let stale = self.state.withLock { s -> CheckedContinuation<Int?, Never>? in
                guard let i = s.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return s.waiters.remove(at: i).continuation
            }
            stale?.resume(returning: nil)
            group.cancelAll()
            return first
        }
    }

    /// Waits for the state `target` (at index ≥ `after`).
    func wait(for target: IceConnectionState, after: Int = 0, limit: Duration = .seconds(20)) async -> Int? {
        await wait(after: after, limit: limit) { $0 == .stateChanged(target) }
    }

    func cancel() { task.withLock { $0?.cancel() } }
}

/// Collects an agent's received datagrams and lets a test wait for a count.
final class DatagramCollector: Sendable {
    private let state = Locked<(received: [[UInt8]], waiters: [(Int, CheckedContinuation<Void, Never>)])>(([], []))
    private let task: Locked<Task<Void, Never>?> = Locked(nil)

    init(_ agent: IceAgent) {
        let datagrams = agent.datagrams
        let t = Task { [self] in
            for await d in datagrams { add(d.bytes) }
        }
        task.withLock { $0 = t }
    }

    var received: [[UInt8]] { state.withLock { $0.received } }
    var count: Int { state.withLock { $0.received.count } }

    private func add(_ bytes: [UInt8]) {
        let ready = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.received.append(bytes)
            let n = s.received.count
            var ready: [CheckedContinuation<Void, Never>] = []
            s.waiters.removeAll { (target, c) in
                if n >= target { ready.append(c); return true }
                return false
            }
            return ready
        }
        for c in ready { c.resume() }
    }

    /// Waits until at least `target` datagrams arrived; `false` if `limit` passed first.
    func wait(count target: Int, limit: Duration = .seconds(20)) async -> Bool {
        await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                await withCheckedContinuation { c in
                    let done = self.state.withLock { s -> Bool in
                        if s.received.count >= target { return true }
                        s.waiters.append((target, c))
                        return false
                    }
                    if done { c.resume() }
                }
                return true
            }
            group.addTask {
                try? await Task.sleep(for: limit)
                return false
            }
            let first = await group.next() ?? false
            if !first {
                // Release the count waiter so the group can finish.
                let stale = self.state.withLock { s -> [CheckedContinuation<Void, Never>] in
                    defer { s.waiters = [] }
                    return s.waiters.map(\.1)
                }
                for c in stale { c.resume() }
            }
            group.cancelAll()
            return first && count >= target
        }
    }

    func cancel() { task.withLock { $0?.cancel() } }
}

