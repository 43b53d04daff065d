import CallNode
import CallNodeTestKit
import Testing

/// A node that says it is listening can be called at once, whether or not the task that serves
/// its address has run yet (on a loaded host it may not have: the ownership study's second pair
/// of in-memory nodes failed so under the whole suite, "nothing serves that address").
@Suite struct ListeningTests {
    /// The in-memory network, with every serving task held until `release()`.
    final class HeldServing: SignalNetwork {
        let inner = InMemorySignalNetwork()
        private let gate = AsyncStream.makeStream(of: Void.self)

        func release() { gate.continuation.finish() }

        func connect(to address: SignalAddress, as identity: NodeIdentity, pin: Fingerprint?,
                     _ body: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void) async throws {
            try await inner.connect(to: address, as: identity, pin: pin, body)
        }

        func serve(_ address: SignalAddress, as identity: NodeIdentity,
                   _ handler: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void) async {
            for await _ in gate.stream {}
            await inner.serve(address, as: identity, handler)
        }

        func open(_ address: SignalAddress, as identity: NodeIdentity,
                  _ handler: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void) {
            inner.open(address, as: identity, handler)
        }
    }

    @Test func aNodeThatSaysItListensIsReachedBeforeItsServingTaskRuns() async throws {
        let nodes = try InMemoryNodes()
        let held = HeldServing()
        let alice = try await nodes.node("alice") { $0.signalNetwork = held }
        let bob = try await nodes.node("bob") { $0.signalNetwork = held }
        try await nodes.trust(alice, as: "alice", bob, as: "bob")
        try await nodes.waitFor("bob") { if case .listening = $0 { true } else { false } }
        let call = try await alice.call(.contact("bob"))
        try await nodes.waitFor("bob", advancing: true, frames: 500) { if case .incoming = $0 { true } else { false } }
        try await nodes.waitFor("alice", advancing: true, frames: 500) { if case .connected = $0 { true } else { false } }
        try await alice.hangUp(call)
        held.release()
        await nodes.shutdown()
    }
}
