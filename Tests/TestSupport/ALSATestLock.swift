import Synchronization

/// Serializes tests that touch ALSA across every test target of the process.
///
/// ALSA's configuration is process-global: a device opened (or hints read) in one test while
/// the PulseAudio test opens its streams was seen to leave that test's capture silent. Suites
/// run in parallel across targets, so `.serialized` alone cannot keep them apart.
public enum ALSATestLock {
    private static let state = Mutex<(held: Bool, waiters: [CheckedContinuation<Void, Never>])>((false, []))

    /// Runs `body` while no other ALSA test runs.
    public static func withLock<T>(_ body: () async throws -> T) async rethrows -> T {
        await acquire()
        defer { release() }
        return try await body()
    }

    private static func acquire() async {
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

    private static func release() {
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
