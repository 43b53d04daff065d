import Locking
import POSIX
import Testing

/// A lock that tests across every test target of the process take around work that must not
/// overlap (Swift Testing runs suites of different targets in parallel, so `.serialized`
/// alone cannot keep them apart). Holders are exclusive (alone) or shared (beside other shared
/// holders, never beside an exclusive one); waiters are served in order, so a shared holder
/// arriving after an exclusive waiter waits behind it.
public final class TestLock: Sendable {
    private struct Waiter {
        var exclusive: Bool
        var continuation: CheckedContinuation<Void, Never>
    }

    private struct State {
        var exclusive = false
        var shared = 0
        var waiters: [Waiter] = []

        func grants(exclusive wanted: Bool) -> Bool {
            wanted ? !exclusive && shared == 0 : !exclusive
        }
    }

    private let state = Locked(State())

    /// ALSA's configuration is process-global: a device opened (or hints read) in one test
    /// while the PulseAudio test opens its streams was seen to leave that test's capture silent.
    public static let alsa = TestLock()
    /// Exclusive: tests that count the process's threads and file descriptors. Shared: tests
    /// that open real-time sockets, threads and child processes, which would disturb those
    /// counts (and the real-time call tests, whose media starves beside seventy seconds of ICE
    /// agents on two cores).
    public static let processResources = TestLock()
    /// A gate network test beds pass (shared, for a moment) before they start; a suite that
    /// judges what a load of its own does to calls in real time holds it exclusively while it
    /// runs (``Trait/apartFromNetworkBeds``): no bed starts beside it (a bed's start, its
    /// namespaces, coturn and debug nodes, is the heaviest part of it). Beds already running
    /// are not waited for: that kept the real-time lanes or the beds idle for minutes.
    public static let networkBedStarts = TestLock()

    public init() {}

    /// Runs `body` while no other holder of this lock runs.
    public func withLock<T>(_ body: () async throws -> T) async rethrows -> T {
        await acquire(exclusive: true)
        defer { release(exclusive: true) }
        return try await body()
    }

    /// Runs `body` beside other shared holders, while no exclusive holder runs.
    public func withSharedLock<T>(_ body: () async throws -> T) async rethrows -> T {
        await acquire(exclusive: false)
        defer { release(exclusive: false) }
        return try await body()
    }

    private func acquire(exclusive: Bool) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let granted = state.withLock { state -> Bool in
                guard state.waiters.isEmpty, state.grants(exclusive: exclusive) else {
                    state.waiters.append(Waiter(exclusive: exclusive, continuation: continuation))
                    return false
                }
                if exclusive { state.exclusive = true } else { state.shared += 1 }
                return true
            }
            if granted { continuation.resume() }
        }
    }

    private func release(exclusive: Bool) {
        let next = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            if exclusive { state.exclusive = false } else { state.shared -= 1 }
            // Ownership passes straight to the waiters at the front that can hold it now.
            var granted: [CheckedContinuation<Void, Never>] = []
            while let first = state.waiters.first, state.grants(exclusive: first.exclusive) {
                state.waiters.removeFirst()
                if first.exclusive { state.exclusive = true } else { state.shared += 1 }
                granted.append(first.continuation)
            }
            return granted
        }
        for continuation in next { continuation.resume() }
    }
}

/// At most `capacity` slots held at a time: a bound on how much real-time work runs at once
/// (each holder's media paced by the wall clock on two cores). A holder may take several slots
/// (all of them, to run alone). Waiters are served in order among those that fit: one that
/// wants every slot does not keep a free slot idle while the others finish (it runs once they
/// have, or when nothing smaller waits).
public final class TestSlots: Sendable {
    public let capacity: Int
    private let state: Locked<(free: Int, waiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)])>

    public init(capacity: Int) {
        self.capacity = capacity
        state = Locked((capacity, []))
    }

    /// Runs `body` holding `count` of the slots (at most ``capacity``).
    public func withSlots<T>(_ count: Int = 1, _ body: () async throws -> T) async rethrows -> T {
        let count = min(max(count, 1), capacity)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let granted = state.withLock { state -> Bool in
                guard state.free >= count, state.waiters.allSatisfy({ $0.count > state.free }) else {
                    state.waiters.append((count, continuation))
                    return false
                }
                state.free -= count
                return true
            }
            if granted { continuation.resume() }
        }
        defer {
            let next = state.withLock { state -> [CheckedContinuation<Void, Never>] in
                state.free += count
                // Slots pass straight to the waiters that fit now, earliest first.
                var granted: [CheckedContinuation<Void, Never>] = []
                while let index = state.waiters.firstIndex(where: { $0.count <= state.free }) {
                    let next = state.waiters.remove(at: index)
                    state.free -= next.count
                    granted.append(next.continuation)
                }
                return granted
            }
            for continuation in next { continuation.resume() }
        }
        return try await body()
    }
}

/// Serializes tests that touch ALSA (see ``TestLock/alsa``).
public enum ALSATestLock {
    public static func withLock<T>(_ body: () async throws -> T) async rethrows -> T {
        try await TestLock.alsa.withLock(body)
    }
}

/// Runs each test it is applied to (or each test of a suite) under
/// ``TestLock/processResources``: exclusively, or shared with the other shared holders. A test
/// marked exclusive inside a suite marked shared holds the lock exclusively (and only so).
public struct ProcessResourcesTrait: TestTrait, SuiteTrait, TestScoping {
    public var exclusive: Bool

    public var isRecursive: Bool { true }

    public func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        // Suites themselves pass through; their tests take the lock one by one.
        guard !test.isSuite else { return try await function() }
        if exclusive {
            try await TestLock.processResources.withLock { try await function() }
        } else if test.traits.contains(where: { ($0 as? ProcessResourcesTrait)?.exclusive == true }) {
            try await function()  // the exclusive trait takes it
        } else {
            try await TestLock.processResources.withSharedLock { try await function() }
        }
    }
}

extension Trait where Self == ProcessResourcesTrait {
    /// The test runs alone among the tests that use or count process-wide threads, sockets and
    /// child processes: it counts them.
    public static var exclusiveProcessResources: Self { ProcessResourcesTrait(exclusive: true) }
    /// The test opens real-time sockets, threads or child processes: it may run beside others
    /// that do, never beside a test that counts them.
    public static var sharedProcessResources: Self { ProcessResourcesTrait(exclusive: false) }
}

/// The network test beds (`scripts/netbed`): each test builds its own namespaces under a prefix
/// of its own, so beds may run side by side; at most ``capacity`` at a time, each holding
/// ``TestLock/processResources`` shared while it runs.
public struct NetworkBedSlotTrait: TestTrait, SuiteTrait, TestScoping {
    /// Beds at once. Each runs two or three debug `callnode` processes paced by the wall clock.
    public static let capacity = 2
    static let slots = TestSlots(capacity: capacity)

    public var isRecursive: Bool { true }

    public func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        guard !test.isSuite else {
            // Beds torn down in the background are gone before their suite ends.
            do {
                try await function()
            } catch {
                await BackgroundTeardown.finish()
                throw error
            }
            return await BackgroundTeardown.finish()
        }
        try await Self.slots.withSlots(1) {
            await TestLock.networkBedStarts.withSharedLock {}
            try await TestLock.processResources.withSharedLock { try await function() }
        }
    }
}

extension Trait where Self == NetworkBedSlotTrait {
    /// The test builds a network test bed of its own (one of ``NetworkBedSlotTrait/capacity``).
    public static var networkBedSlot: Self { NetworkBedSlotTrait() }
}

/// A real-time suite during which no network test bed starts: it judges what its own load
/// does to calls in real time. Its lane holds ``TestLock/networkBedStarts`` exclusively.
public struct ApartFromNetworkBedsTrait: SuiteTrait {
    public var isRecursive: Bool { false }
}

extension Trait where Self == ApartFromNetworkBedsTrait {
    /// No network test bed starts while the suite runs.
    public static var apartFromNetworkBeds: Self { ApartFromNetworkBedsTrait() }
}

/// The real-time suites (`RealTimeTests` and the suites nested in it): each nested suite runs its
/// tests one at a time in one of ``lanes`` lanes, for its whole run, so two suites may run side
/// by side; a suite marked ``Trait/realTimeAlone`` takes every lane. Every test holds
/// ``TestLock/processResources`` shared (or exclusively, if marked so) while it runs.
public struct RealTimeLaneTrait: TestTrait, SuiteTrait, TestScoping {
    /// Suites at once. Each runs whole nodes (media on the wall clock, in a debug build) beside
    /// the network beds and the suites that need no lane, on two cores.
    public static let lanes = 2
    static let slots = TestSlots(capacity: lanes)
    /// Whether the current task runs inside a suite that holds a lane (a suite nested in it
    /// takes none of its own).
    @TaskLocal static var inLane = false

    public var isRecursive: Bool { true }

    public func scopeProvider(for test: Test, testCase: Test.Case?) -> Self? {
        test.isSuite || testCase != nil ? self : nil
    }

    public func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        guard test.isSuite else {
            if test.traits.contains(where: { ($0 as? ProcessResourcesTrait)?.exclusive == true }) {
                return try await function()  // the exclusive trait takes the lock
            }
            return try await TestLock.processResources.withSharedLock { try await function() }
        }
        // The outermost suite and suites inside a lane pass through.
        guard test.id.nameComponents.count >= 2, !Self.inLane else { return try await function() }
        let alone = test.traits.contains { $0 is RealTimeAloneTrait }
        let apart = test.traits.contains { $0 is ApartFromNetworkBedsTrait }
        try await Self.slots.withSlots(alone ? Self.lanes : 1) {
            try await Self.$inLane.withValue(true) {
                if apart {
                    try await TestLock.networkBedStarts.withLock { try await function() }
                } else {
                    try await function()
                }
            }
        }
    }
}

/// A real-time suite that takes every lane: it loads the machine on its own (a browser, a
/// flood) or judges timing that a neighbour's load would disturb.
public struct RealTimeAloneTrait: SuiteTrait {
    public var isRecursive: Bool { false }
}

extension Trait where Self == RealTimeLaneTrait {
    /// Runs the suite's nested suites in ``RealTimeLaneTrait/lanes`` lanes.
    public static var realTimeLanes: Self { RealTimeLaneTrait() }
}

extension Trait where Self == RealTimeAloneTrait {
    /// The suite runs with no other real-time suite beside it.
    public static var realTimeAlone: Self { RealTimeAloneTrait() }
}

/// Teardowns a test hands to a thread of its own from a `defer` (which cannot await): a network
/// bed's processes stopped and namespaces removed while the next test starts. Each is waited
/// for before the suite holding ``NetworkBedSlotTrait`` ends.
public enum BackgroundTeardown {
    static let pending = Locked<[SystemThread]>([])

    /// Runs `body` on a thread of its own (here, if no thread can be had).
    public static func start(name: String, _ body: @escaping @Sendable () -> Void) {
        guard let thread = try? SystemThread.start(name: name, body) else { return body() }
        pending.withLock { $0.append(thread) }
    }

    /// Waits (off the cooperative pool) until every teardown started so far has finished.
    public static func finish() async {
        let threads = pending.withLock { pending in
            defer { pending.removeAll() }
            return pending
        }
        guard !threads.isEmpty else { return }
        do {
            try await SystemThread.run(name: "test-teardowns") { () -> Void in
                for thread in threads { thread.join() }
            }
        } catch {
            for thread in threads { thread.join() }
        }
    }
}
