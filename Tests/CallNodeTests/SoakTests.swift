import CallNode
import CallNodeTestSupport
import Foundation
import Testing

extension RealTimeTests {
/// Many complete calls between two real nodes in one process leave nothing behind: file
/// descriptors and threads are the same after the last call as after the warm-up. (Resident
/// memory is measured by `callnode-bench soak`, not asserted: it moves with the allocator and
/// SQLite's page cache.)
@Suite(.serialized, .exclusiveProcessResources) struct SoakTests {
    /// One complete call: dial, the callee's first decoded audio, hang up, both ends ended.
    static func completeCall(_ alice: CallNode, _ bob: CallNode) async throws {
        let aliceEvents = alice.events(), bobEvents = bob.events()
        let call = try await alice.call(.contact("bob"))
        _ = try await TwoNodeTests.next(bobEvents) { if case .firstAudio = $0 { true } else { false } }
        try await alice.hangUp(call)
        _ = try await TwoNodeTests.next(aliceEvents) { if case .ended(call, _, _, _) = $0 { true } else { false } }
        _ = try await TwoNodeTests.next(bobEvents) { if case .ended = $0 { true } else { false } }
    }

    /// Both nodes at rest: their ICE agent pools refilled (bounded wait).
    static func atRest(_ nodes: CallNode...) async throws -> ProcessResourceCounts {
        let deadline = ContinuousClock.now + .seconds(10)
        for node in nodes {
            while await node.pooledICEAgents < 1 {
                guard ContinuousClock.now < deadline else { throw TestFailure("an ICE agent pool did not refill") }
                try await Task.sleep(for: .milliseconds(5))
            }
        }
        return ProcessResourceCounts.current()
    }

    @Test func aHundredCallsLeaveNoFileDescriptorsOrThreadsBehind() async throws {
        let f = try TwoNodeTests.Fixture()
        let alice = try await f.node("alice", input: .tone(440))
        let bob = try await f.node("bob")
        try await f.trust(alice, as: "alice", bob, as: "bob")
        for _ in 0..<20 { try await Self.completeCall(alice, bob) }  // warm-up: lazy setup, pools
        let before = try await Self.atRest(alice, bob)
        for _ in 0..<100 { try await Self.completeCall(alice, bob) }
        var after = try await Self.atRest(alice, bob)
        // Closing sockets and ending threads finish a moment after the calls report their end
        // (seen under AddressSanitizer's slowdown: +3 fds at first). A leak never comes back
        // down, so wait (bounded) for the counts to settle before comparing.
        let settle = ContinuousClock.now + .seconds(10)
        while after.fileDescriptors > before.fileDescriptors + 2 || after.threads > before.threads + 2, ContinuousClock.now < settle {
            try await Task.sleep(for: .milliseconds(20))
            after = ProcessResourceCounts.current()
        }
        print("soak: after 20 calls \(before), after 120 \(after)")
        // A leak per call would show as +100; a thread or socket a library makes lazily, as +1.
        #expect(after.fileDescriptors <= before.fileDescriptors + 2, "file descriptors grew: \(before) → \(after)")
        #expect(after.threads <= before.threads + 2, "threads grew: \(before) → \(after)")
        await alice.shutdown()
        await bob.shutdown()
    }
}
}
