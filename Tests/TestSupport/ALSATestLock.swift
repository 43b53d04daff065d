import Locking
import Testing

/// A lock that tests across every test target of the process take around work that must not
/// overlap (Swift Testing runs suites of different targets in parallel, so `.serialized`
/// alone cannot keep them apart). Waiters are served in order.
public final class TestLock: Sendable {
    private let state = Locked<(held: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    /// ALSA's configuration is process-global: a device opened (or hints read) in one test
    /// while the PulseAudio test opens its streams was seen to leave that test's capture silent.
    public static let alsa = TestLock()
    /// Tests that count the process's threads and file descriptors, and the real-time call
    /// tests whose sockets and threads would disturb those counts (and whose media starves
    /// when several run at once on two cores).
    public static let processResources = TestLock()

    public init() {}

    /// Runs `body` while no other holder of this lock runs.
    public func withLock<T>(_ body: () async throws -> T) async rethrows -> T {
        await acquire()
        defer { release() }
        return try await body()
    }

    private func acquire() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let granted = state.withLock { state -> Bool in
                if state.held {
                    state.waiters.append(continuation)
                    return false
                }
                state.held = true
                return true
            }
            if granted { continuation.resume() }
        }
    }

    private func release() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if state.waiters.isEmpty {
                state.held = false
                return nil
            }
            return state.waiters.removeFirst()  // ownership passes straight to the next waiter
        }
        next?.resume()
    }
}

/// Serializes tests that touch ALSA (see ``TestLock/alsa``).
public enum ALSATestLock {
    public static func withLock<T>(_ body: () async throws -> T) async rethrows -> T {
        try await TestLock.alsa.withLock(body)
    }
}

/// Runs each test it is applied to (or each test of a suite) under
/// ``TestLock/processResources``.
public struct ProcessResourcesTrait: TestTrait, SuiteTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        // Suites themselves pass through; their tests take the lock one by one.
        guard !test.isSuite else { return try await function() }
        try await TestLock.processResources.withLock { try await function() }
    }
}

extension Trait where Self == ProcessResourcesTrait {
    /// The test does not overlap other tests that count or use process-wide threads and sockets.
    public static var exclusiveProcessResources: Self { ProcessResourcesTrait() }
}
