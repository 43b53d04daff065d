import CallNode
import CallNodeTestKit
import Foundation
import Locking
import Testing

/// Draining on manual time: a node that stops without losing an answered call takes no new
/// calls (refused as draining), lets those in progress run to their end, and after its grace
/// hangs up what is left.
@Suite struct DrainTests {
    /// Starts `node.drain(grace:)`; the returned box holds its result once it returns.
    static func startDrain(_ node: CallNode, grace: Duration?) -> Locked<Int?> {
        let result = Locked<Int?>(nil)
        Task {
            let hungUp = await node.drain(grace: grace)
            result.withLock { $0 = hungUp }
        }
        return result
    }

    /// Steps manual time until the drain has returned (at most `frames` frames).
    static func waitForDrain(_ f: InMemoryNodes, _ result: Locked<Int?>, frames: Int = 2_000) async -> Int? {
        for _ in 0..<frames {
            if let value = result.withLock({ $0 }) { return value }
            await f.step()
        }
        return result.withLock { $0 }
    }

    @Test func aDrainingNodeKeepsItsCallRefusesNewOnesAndReturnsWhenTheLastEnds() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", input: .tone(440))
        let carol = try await f.node("carol")
        let bob = try await f.node("bob", output: .wav(f.path("bob-out.wav")))
        try await f.trust(alice, as: "alice", bob, as: "bob")
        try await f.trust(carol, as: "carol", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        try await f.waitFor("alice", advancing: true) { if case .connected(call, _) = $0 { true } else { false } }
        #expect(await bob.isTakingCalls)

        func heard() -> Int {
            f.events("bob").compactMap { event -> Int? in if case let .statistics(_, stats) = event { stats.packetsReceived } else { nil } }.last ?? 0
        }
        let drained = Self.startDrain(bob, grace: nil)
        for _ in 0..<50 where await !bob.draining { await f.step() }
        let heardAtDrain = heard()
        let (isDraining, taking) = (await bob.draining, await bob.isTakingCalls)
        #expect(isDraining && !taking)
        // A new caller is refused, and told why.
        #expect(try await CallControlTests.rejection(f, "carol", calling: .contact("bob")).0 == .draining)
        // The call in progress goes on: three seconds later it is still up and Bob hears Alice.
        for _ in 0..<150 { await f.step() }
        #expect(drained.withLock { $0 } == nil, "the drain returned with a call still up")
        #expect(!f.events("bob").contains { if case .ended = $0 { true } else { false } })
        #expect(heard() - heardAtDrain > 75, "Bob's call stopped carrying audio while draining (\(heardAtDrain) → \(heard()) packets)")
        // Alice hangs up: the drain is over, nothing was hung up by it.
        try await alice.hangUp(call)
        #expect(await Self.waitForDrain(f, drained) == 0)
        #expect(await bob.liveCalls.isEmpty)
        await f.shutdown()
    }

    @Test func whenTheGraceRunsOutTheCallsLeftAreHungUp() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice")
        let bob = try await f.node("bob")
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        let connected = try await f.waitFor("alice", advancing: true) { if case .connected(call, _) = $0 { true } else { false } }
        let drained = Self.startDrain(bob, grace: .seconds(3))
        let ended = try await f.waitFor("alice", advancing: true, frames: 400) { if case .ended(call, _, _, _) = $0 { true } else { false } }
        guard case let .ended(_, reason, _, _) = ended.event else { return }
        #expect(reason == .remoteEnded)
        // Not before the grace: three seconds of manual time after the drain began (it began
        // at the connection's instant), and soon after.
        #expect(ended.at - connected.at >= .seconds(3) && ended.at - connected.at < .seconds(4), "\(ended.at - connected.at)")
        #expect(await Self.waitForDrain(f, drained) == 1)
        // At Bob, the node hung up its own call.
        try await f.waitFor("bob", advancing: true) { if case .ended(_, .localEnded, _, _) = $0 { true } else { false } }
        await f.shutdown()
    }

    /// A drain whose task is cancelled (the control API's, as it closes) stops waiting and hangs
    /// up nothing: its grace passing later ends no call, and the node goes on draining.
    @Test(arguments: [Duration.seconds(3), nil])
    func aCancelledDrainReturnsAndHangsUpNothing(grace: Duration?) async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice")
        let bob = try await f.node("bob")
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        try await f.waitFor("alice", advancing: true) { if case .connected(call, _) = $0 { true } else { false } }
        let result = Locked<Int?>(nil)
        let draining = Task {
            let hungUp = await bob.drain(grace: grace)
            result.withLock { $0 = hungUp }
        }
        for _ in 0..<50 where await !bob.draining { await f.step() }
        draining.cancel()
        #expect(await Self.waitForDrain(f, result, frames: 100) == 0, "the cancelled drain did not return")
        for _ in 0..<250 { await f.step() }  // five seconds: past the grace
        #expect(await bob.liveCalls.count == 1, "a call was hung up after its drain was cancelled")
        #expect(!f.events("alice").contains { if case .ended = $0 { true } else { false } })
        let (stillDraining, taking) = (await bob.draining, await bob.isTakingCalls)
        #expect(stillDraining && !taking)
        await f.shutdown()
    }

    @Test func aNodeWithoutCallsDrainsAtOnceAndAFullNodeIsNotTakingCalls() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice")
        let bob = try await f.node("bob") { $0.maximumCalls = 1 }
        try await f.trust(alice, as: "alice", bob, as: "bob")
        #expect(await bob.isTakingCalls)
        let call = try await alice.call(.contact("bob"))
        try await f.waitFor("alice", advancing: true) { if case .connected(call, _) = $0 { true } else { false } }
        let takingWhenFull = await bob.isTakingCalls
        #expect(!takingWhenFull, "at its maximum of calls")
        try await alice.hangUp(call)
        try await f.waitFor("bob", advancing: true) { if case .ended = $0 { true } else { false } }
        for _ in 0..<20 { await f.step() }
        #expect(await bob.isTakingCalls)
        #expect(await alice.drain(grace: .seconds(10)) == 0)
        #expect(await alice.draining)
        await f.shutdown()
    }
}
