@testable import CallNode
import CallNodeTestKit
import CallNodeTestSupport
import Foundation
import Testing

/// Early media between two whole nodes on manual time, over a line whose caller offers with its
/// invitation (SIP's shape): the callee sends its greeting before it answers (``CallNode/progress(_:)``);
/// the caller hears it while the call is unanswered, its own microphone not sent; the call
/// connects when the callee answers, or ends as declined when it does not.
@Suite struct EarlyMediaTests {
    static func isConnected(_ event: NodeEvent) -> Bool { if case .connected = event { true } else { false } }
    static func isEnded(_ event: NodeEvent) -> Bool { if case .ended = event { true } else { false } }

    /// Alice calls Bob (who owns his audio session) over a line; returns both calls once Bob's rings.
    static func ringing(_ nodes: InMemoryNodes, bobOwnsAudio: Bool = true) async throws -> (CallNode, CallNode, UUID, UUID) {
        let alice = try await nodes.node("alice", input: .tone(440))
        let bob = try await nodes.node("bob", input: .tone(660), autoAnswer: false) { $0.appOwnedAudio = bobOwnsAudio }
        let (a, b) = LinePipe.make()
        let accepted = Task { await LineListener.accept(b, from: "line:alice", on: bob, firstOffer: .byCaller) }
        let call = try await alice.call(over: LineDialect(a, firstOffer: .byCaller), handle: "line:bob", title: nil)
        let (incoming, _) = try await nodes.waitFor("bob", advancing: true) { if case .incoming = $0 { true } else { false } }
        guard case let .incoming(bobCall, _, _, _) = incoming else { throw TestFailure("no incoming call") }
        _ = await accepted.value
        return (alice, bob, call, bobCall)
    }

    @Test func aCalleesGreetingIsHeardBeforeItAnswersAndTheCallConnectsWhenItDoes() async throws {
        let nodes = try InMemoryNodes()
        let (alice, bob, call, bobCall) = try await Self.ringing(nodes)
        try await bob.progress(bobCall)
        try await nodes.waitFor("alice", advancing: true) { $0 == .earlyMedia(call) }
        try await nodes.waitFor("bob", advancing: true) { $0 == .earlyMedia(bobCall) }
        for _ in 0..<100 { await nodes.step() }  // two seconds of greeting

        // Alice hears Bob's greeting; Bob hears nothing of Alice: her microphone is not sent
        // until he answers. Neither call is connected.
        let aliceEarly = try #require(await alice.statistics(call))
        let bobEarly = try #require(await bob.statistics(bobCall))
        #expect(aliceEarly.packetsReceived > 50 && aliceEarly.receiveLevel > -40, "alice hears the greeting: \(aliceEarly)")
        #expect(bobEarly.receiveLevel < -60, "bob hears alice at \(bobEarly.receiveLevel) dB before he answered")
        #expect(!nodes.events("alice").contains(where: Self.isConnected) && !nodes.events("bob").contains(where: Self.isConnected))
        #expect(await alice.manager.state(of: call)?.phase == .invitationSent)
        #expect(await bob.manager.state(of: bobCall)?.phase == .invitationReceived)
        // A second greeting is refused, saying why.
        await #expect(throws: CallNodeError.earlyMedia("the call's early media already runs")) { try await bob.progress(bobCall) }

        try await bob.answer(bobCall)
        try await nodes.waitFor("alice", advancing: true, Self.isConnected)
        try await nodes.waitFor("bob", advancing: true, Self.isConnected)
        #expect(await alice.manager.state(of: call)?.phase == .connected)
        #expect(await bob.manager.state(of: bobCall)?.phase == .connected)
        for _ in 0..<100 { await nodes.step() }
        let aliceHeard = try #require(await alice.statistics(call))
        let bobHeard = try #require(await bob.statistics(bobCall))
        #expect(aliceHeard.receiveLevel > -40 && bobHeard.receiveLevel > -40, "alice \(aliceHeard.receiveLevel) dB, bob \(bobHeard.receiveLevel) dB")
        // Early media and the call are one media session: the packets went on, not restarted.
        #expect(aliceHeard.packetsReceived > aliceEarly.packetsReceived + 90)

        try await alice.hangUp(call)
        try await nodes.waitFor("bob", advancing: true, Self.isEnded)
        for _ in 0..<10 { await nodes.step() }
        #expect(nodes.events("alice").filter(Self.isEnded).count == 1 && nodes.events("bob").filter(Self.isEnded).count == 1)
        await nodes.shutdown()
    }

    @Test func aCalleeThatDeclinesAfterItsGreetingRefusesTheCall() async throws {
        let nodes = try InMemoryNodes()
        let (_, bob, call, bobCall) = try await Self.ringing(nodes)
        try await bob.progress(bobCall)
        try await nodes.waitFor("alice", advancing: true) { $0 == .earlyMedia(call) }
        try await bob.hangUp(bobCall)
        let (ended, _) = try await nodes.waitFor("alice", advancing: true, Self.isEnded)
        #expect(ended == .ended(call, reason: .remoteEnded, detail: "rejected: declined", duration: nil), "\(ended)")
        let (bobEnded, _) = try await nodes.waitFor("bob", advancing: true, Self.isEnded)
        guard case let .ended(_, reason, _, _) = bobEnded else { return }
        #expect(reason == .declined)
        #expect(!nodes.events("alice").contains(where: Self.isConnected))
        await nodes.shutdown()
    }

    @Test func earlyMediaIsRefusedWhereItCannotBeGiven() async throws {
        // The system owns Bob's audio session: CallKit activates it only for an answered call.
        let nodes = try InMemoryNodes()
        let (_, bob, _, bobCall) = try await Self.ringing(nodes, bobOwnsAudio: false)
        await #expect(throws: CallNodeError.self) { try await bob.progress(bobCall) }
        #expect(!nodes.events("bob").contains { if case .earlyMedia = $0 { true } else { false } })
        await nodes.shutdown()

        // Between nodes the callee offers once it answers: there is no offer to answer early.
        let f = try InMemoryNodes()
        let carol = try await f.node("carol", input: .tone(440))
        let dave = try await f.node("dave", input: .tone(660), autoAnswer: false) { $0.appOwnedAudio = true }
        try await f.trust(carol, as: "carol", dave, as: "dave")
        _ = try await carol.call(.contact("dave"))
        let (incoming, _) = try await f.waitFor("dave", advancing: true) { if case .incoming = $0 { true } else { false } }
        guard case let .incoming(daveCall, _, _, _) = incoming else { return }
        await #expect(throws: CallNodeError.earlyMedia("early media answers the caller's offer, and this call's caller sent none with its invitation")) {
            try await dave.progress(daveCall)
        }
        // The call still rings, and answering it works as ever.
        try await dave.answer(daveCall)
        try await f.waitFor("carol", advancing: true, Self.isConnected)
        await f.shutdown()
    }
}
