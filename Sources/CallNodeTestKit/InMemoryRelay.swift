import CallNode
import Clocks
import Locking

/// A rendezvous relay in memory: nodes register under their identity, calls to a registered
/// node are spliced to it, and two joiners of a session are paired — the same roles as
/// `callnode relay`, with no socket, so relayed calls run on manual time in tests and
/// simulations. ``restart()`` drops every registration and every spliced connection, as a
/// relay process that restarted would.
///
/// Give it to nodes as ``CallNodeConfiguration/relayNetwork`` with any
/// ``CallNodeConfiguration/relay`` address (the address only names it).
public final class InMemoryRelay: RelayNetwork {
    private struct Registration {
        let token: Int
        let identity: NodeIdentity
        let incoming: @Sendable (SignalingConnection, SignalMessages) async -> Void
        let dropped: AsyncStream<Void>.Continuation
    }

    private struct Waiting {
        let token: Int
        let identity: NodeIdentity
        let paired: CheckedContinuation<(InMemorySignalEnd, Bool)?, Never>
    }

    private let registrations = Locked<[Fingerprint: Registration]>([:])
    private let sessions = Locked<[String: Waiting]>([:])
    /// Both ends of every spliced connection.
    private let live = OpenConnections()
    private let tokens = Locked(0)
    private let restarts = Locked(0)
    private let silenced = Locked<Set<Fingerprint>>([])

    public init() {}

    /// Nodes registered now.
    public var registered: Set<Fingerprint> { registrations.withLock { Set($0.keys) } }

    /// Spliced connections open now.
    public var openConnections: Int { live.count / 2 }

    /// How often the relay restarted.
    public var restartCount: Int { restarts.withLock { $0 } }

    /// Drops every registration (their nodes register again) and closes every spliced
    /// connection (their calls are resumed through the relay, or end).
    public func restart() {
        let dropped = registrations.withLock { registrations in
            defer { registrations.removeAll() }
            return registrations.values.map(\.dropped)
        }
        restarts.withLock { $0 += 1 }
        for continuation in dropped { continuation.finish() }
        for connection in live.all { connection.close() }
    }

    /// Cuts the node with `identity` off, as if its process died (or lets it back): its
    /// registration and spliced connections drop, and it can neither register nor dial.
    public func setSilenced(_ identity: Fingerprint, _ silent: Bool) {
        silenced.withLock { if silent { $0.insert(identity) } else { $0.remove(identity) } }
        guard silent else { return }
        let dropped = registrations.withLock { $0.removeValue(forKey: identity)?.dropped }
        dropped?.finish()
        for connection in live.all where connection.peer == identity { connection.close() }
    }

    private func token() -> Int { tokens.withLock { $0 += 1; return $0 } }

    public func register(at relay: SignalAddress, as identity: NodeIdentity, clock: TimerClock, registered: @escaping @Sendable () -> Void,
                         incoming: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void) async throws {
        if silenced.withLock({ $0.contains(identity.fingerprint) }) { throw RelayError("this node's network is gone (set so by the test)") }
        let (dropped, continuation) = AsyncStream.makeStream(of: Void.self)
        let token = self.token()
        // A registration anew replaces the node's old one, as the relay does.
        let replaced = registrations.withLock { registrations in
            defer { registrations[identity.fingerprint] = Registration(token: token, identity: identity, incoming: incoming, dropped: continuation) }
            return registrations[identity.fingerprint]?.dropped
        }
        replaced?.finish()
        registered()
        await withTaskCancellationHandler {
            for await _ in dropped {}
        } onCancel: {
            continuation.finish()
        }
        registrations.withLock { if $0[identity.fingerprint]?.token == token { $0[identity.fingerprint] = nil } }
    }

    public func dial(_ fingerprint: Fingerprint, at relay: SignalAddress, as identity: NodeIdentity,
                     _ body: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void) async throws {
        if silenced.withLock({ $0.contains(identity.fingerprint) }) { throw RelayError("this node's network is gone (set so by the test)") }
        guard let callee = registrations.withLock({ $0[fingerprint] }) else {
            throw RelayError("no node \(fingerprint.short) is registered at the relay")
        }
        let (near, far) = splice(identity.fingerprint, callee.identity.fingerprint, relay)
        await InMemorySignalPipe.carry(near, to: far, served: callee.incoming, body)
        unsplice(near, far)
    }

    public func join(_ session: String, at relay: SignalAddress, as identity: NodeIdentity, waiting: @escaping @Sendable () -> Void,
                     _ body: @escaping @Sendable (SignalingConnection, SignalMessages, Bool) async -> Void) async throws {
        let token = self.token()
        // The first to arrive waits; the second pairs with it and places the call.
        let paired = await withTaskCancellationHandler {
            await withCheckedContinuation { (paired: CheckedContinuation<(InMemorySignalEnd, Bool)?, Never>) in
                let other = sessions.withLock { sessions -> Waiting? in
                    if let other = sessions.removeValue(forKey: session) { return other }
                    sessions[session] = Waiting(token: token, identity: identity, paired: paired)
                    return nil
                }
                guard let other else {
                    waiting()
                    return
                }
                let (near, far) = splice(identity.fingerprint, other.identity.fingerprint, relay)
                other.paired.resume(returning: (far, false))
                paired.resume(returning: (near, true))
            }
        } onCancel: {
            let mine = sessions.withLock { sessions -> Waiting? in
                guard sessions[session]?.token == token else { return nil }
                return sessions.removeValue(forKey: session)
            }
            mine?.paired.resume(returning: nil)
        }
        guard let (end, isClient) = paired else { throw RelayError("left the session \(session) before anyone else joined") }
        await body(end.connection, end.messages, isClient)
        end.connection.close()
        live.remove(end.connection)
    }

    private func splice(_ a: Fingerprint, _ b: Fingerprint, _ relay: SignalAddress) -> (InMemorySignalEnd, InMemorySignalEnd) {
        let (near, far) = InMemorySignalPipe.pair((identity: a, address: "relay \(relay)"), (identity: b, address: "relay \(relay)"))
        live.add(near.connection, far.connection)
        return (near, far)
    }

    private func unsplice(_ near: InMemorySignalEnd, _ far: InMemorySignalEnd) {
        live.remove(near.connection, far.connection)
    }
}
