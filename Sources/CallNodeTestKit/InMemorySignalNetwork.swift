import CallNode
import Locking

/// Signaling between nodes in memory: the same envelopes and frames as over mutual TLS, with no
/// socket, so whole nodes run on manual time in tests and simulations.
///
/// A node whose ``CallNodeConfiguration/signalNetwork`` is this network serves its
/// ``CallNodeConfiguration/listenAddress`` here; dialing that address reaches it. Identities are
/// those of the nodes (a pinned identity is checked as TLS would), and messages arrive in order.
public final class InMemorySignalNetwork: SignalNetwork {
    typealias Handler = @Sendable (SignalingConnection, SignalMessages) async -> Void
    private let listeners = Locked<[SignalAddress: (identity: NodeIdentity, handler: Handler)]>([:])
    private let dials = Locked(0)
    /// Both ends of every open connection, by connection.
    private let live = OpenConnections()
    private let unreachable = Locked<Set<SignalAddress>>([])
    private let silenced = Locked<Set<Fingerprint>>([])
    private let resetAfterNextFrame = Locked<Set<Fingerprint>>([])

    public init() {}

    public func open(_ address: SignalAddress, as identity: NodeIdentity,
                     _ handler: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void) {
        listeners.withLock { $0[address] = (identity, handler) }
    }

    public func serve(_ address: SignalAddress, as identity: NodeIdentity,
                      _ handler: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void) async {
        open(address, as: identity, handler)
        // Served until the serving task is cancelled (the node shuts down).
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self)
        await withTaskCancellationHandler {
            for await _ in stream {}
        } onCancel: {
            continuation.finish()
        }
        listeners.withLock { $0[address] = nil }
    }

    public func connect(to address: SignalAddress, as identity: NodeIdentity, pin: Fingerprint?,
                        _ body: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void) async throws {
        if silenced.withLock({ $0.contains(identity.fingerprint) }) {
            throw SignalingError.unreachable(address.description, reason: "this node's network is gone (set so by the test)")
        }
        if unreachable.withLock({ $0.contains(address) }) {
            throw SignalingError.unreachable(address.description, reason: "no route to it on this in-memory network (set so by the test)")
        }
        guard let listener = listeners.withLock({ $0[address] }) else {
            throw SignalingError.unreachable(address.description, reason: "nothing serves that address on this in-memory network")
        }
        if let pin, listener.identity.fingerprint != pin {
            throw SignalingError.wrongIdentity(expected: pin, presented: listener.identity.fingerprint)
        }
        let caller = dials.withLock { count -> String in
            count += 1
            return "memory-caller-\(count):1"
        }
        let (near, far) = InMemorySignalPipe.pair((identity.fingerprint, caller), (listener.identity.fingerprint, address.description))
        for (end, sender) in [(near, identity.fingerprint), (far, listener.identity.fingerprint)] {
            (end.transport as? InMemorySignalPipe.End)?.afterSend.withLock { $0 = { [weak self] in self?.sent(by: sender) } }
        }
        live.add(near.connection, far.connection)
        defer { live.remove(near.connection, far.connection) }
        // The served side runs as a server's connection would, until its messages end.
        await InMemorySignalPipe.carry(near, to: far, served: listener.handler, body)
    }

    /// Closes every open connection, as a reset of each would: both ends see them end.
    /// Every connection resets just after the next frame `identity` sends has gone (a node's
    /// invitation: the caller then waits for the callee's answer with its wire gone), once;
    /// `false` takes the wish back if nothing was sent.
    public func resetAfterNextFrame(of identity: Fingerprint, _ on: Bool = true) {
        resetAfterNextFrame.withLock { if on { $0.insert(identity) } else { $0.remove(identity) } }
    }

    private func sent(by identity: Fingerprint) {
        if resetAfterNextFrame.withLock({ $0.remove(identity) }) != nil { dropConnections() }
    }

    public func dropConnections() {
        for connection in live.all { connection.close() }
    }

    /// Connections open now.
    public var openConnections: Int { live.count / 2 }

    /// Closes every open connection to or from the node with `identity`, as its kernel would
    /// when its process dies.
    public func dropConnections(of identity: Fingerprint) {
        for connection in live.all where connection.peer == identity { connection.close() }
    }

    /// Stops the node with `identity` from dialing anyone (or lets it again): with its address
    /// unreachable and its connections dropped, a process that died.
    public func setSilenced(_ identity: Fingerprint, _ silent: Bool) {
        silenced.withLock { if silent { $0.insert(identity) } else { $0.remove(identity) } }
    }

    /// Makes `address` unreachable (dials fail as they would with no route) or reachable again.
    public func setReachable(_ address: SignalAddress, _ reachable: Bool) {
        unreachable.withLock { if reachable { $0.remove(address) } else { $0.insert(address) } }
    }
}
