import CallNode
import CallNodeTestKit
import Foundation
import Testing

/// Relayed calls on manual time: two whole nodes registered at the test kit's in-memory relay,
/// calling each other by fingerprint through it, as `callnode relay` splices them over TCP.
@Suite struct InMemoryRelayTests {
    static let relayAddress = SignalAddress(host: "relay", port: 7700)

    static func nodes(_ relay: InMemoryRelay) async throws -> (InMemoryNodes, CallNode, CallNode) {
        let nodes = try InMemoryNodes()
        let viaRelay: (inout CallNodeConfiguration) -> Void = {
            $0.relay = relayAddress
            $0.relayNetwork = relay
        }
        let alice = try await nodes.node("alice", input: .tone(440), configure: viaRelay)
        let bob = try await nodes.node("bob", input: .tone(660), configure: viaRelay)
        // Contacts without addresses: each reaches the other only through the relay.
        try await alice.store.contacts.add(Contact(name: "bob", fingerprint: bob.identity.fingerprint.hex))
        try await bob.store.contacts.add(Contact(name: "alice", fingerprint: alice.identity.fingerprint.hex))
        for name in ["alice", "bob"] {
            try await nodes.waitFor(name) { if case .registered = $0 { true } else { false } }
        }
        return (nodes, alice, bob)
    }

    static func isConnected(_ event: NodeEvent) -> Bool { if case .connected = event { true } else { false } }
    static func isEnded(_ event: NodeEvent) -> Bool { if case .ended = event { true } else { false } }

    @Test func aCallThroughTheRelayCarriesAudioBothWays() async throws {
        let relay = InMemoryRelay()
        let (nodes, alice, bob) = try await Self.nodes(relay)
        #expect(relay.registered == [alice.identity.fingerprint, bob.identity.fingerprint])
        let call = try await alice.call(.contact("bob"))
        try await nodes.waitFor("alice", advancing: true, Self.isConnected)
        try await nodes.waitFor("bob", advancing: true, Self.isConnected)
        #expect(relay.openConnections == 1)
        for _ in 0..<100 { await nodes.step() }
        let heard = try #require(await alice.statistics(call))
        #expect(heard.packetsReceived > 50 && heard.receiveLevel > -40, "\(heard)")
        try await alice.hangUp(call)
        try await nodes.waitFor("bob", advancing: true, Self.isEnded)
        await nodes.shutdown()
    }

    /// A relay that restarts mid-call drops the call's signaling and every registration: the
    /// nodes register again, the call is resumed through the relay, and its media (which never
    /// went through the relay) carries on; nothing ends.
    @Test func aRelayRestartedMidCallDoesNotEndTheCall() async throws {
        let relay = InMemoryRelay()
        let (nodes, alice, _) = try await Self.nodes(relay)
        let call = try await alice.call(.contact("bob"))
        try await nodes.waitFor("alice", advancing: true, Self.isConnected)
        try await nodes.waitFor("bob", advancing: true, Self.isConnected)
        for _ in 0..<50 { await nodes.step() }
        let before = try #require(await alice.statistics(call)).packetsReceived

        relay.restart()
        try await nodes.waitFor("alice", advancing: true) { if case .signalingLost = $0 { true } else { false } }
        try await nodes.waitFor("alice", advancing: true) { if case .signalingResumed = $0 { true } else { false } }
        try await nodes.waitFor("bob", advancing: true) { if case .signalingResumed = $0 { true } else { false } }
        #expect(relay.restartCount == 1)
        #expect(relay.registered.count == 2, "both registered again")
        for _ in 0..<100 { await nodes.step() }
        let after = try #require(await alice.statistics(call))
        #expect(after.packetsReceived > before + 90, "media went on: \(before) → \(after.packetsReceived)")
        #expect(after.receiveLevel > -40)
        #expect(!nodes.events("alice").contains(where: Self.isEnded) && !nodes.events("bob").contains(where: Self.isEnded))

        // The resumed signaling carries the end.
        try await alice.hangUp(call)
        let (ended, _) = try await nodes.waitFor("bob", advancing: true, Self.isEnded)
        guard case let .ended(_, reason, _, _) = ended else { return }
        #expect(reason == .remoteEnded)
        await nodes.shutdown()
    }
}
