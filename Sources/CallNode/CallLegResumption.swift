import Foundation
import ICE
import Locking
import Logging
import Signaling

/// A leg's way to the other node and back after its signaling connection dropped: the route
/// it dials, reconnecting, the resumption handshake on both sides, host network changes.
extension CallLeg {
    /// How an outgoing call reaches its callee's node.
    enum Route: Sendable { case direct(SignalAddress, Fingerprint?), relayed(SignalAddress, Fingerprint) }

    /// The route to the other node: the callee's as dialed; for a callee, the caller's address
    /// among the contacts, or the relay this node is registered at (which the caller, started
    /// with the same relay, is registered at too). Nil for web pages and sessions, and for a
    /// callee with no way to reach its caller (it waits for the caller).
    func route() -> Route? {
        if !outgoing {
            guard resumable, let peer else { return nil }
            if let address = store.contacts.withFingerprint(peer.hex)?.address.flatMap(SignalAddress.init) {
                return .direct(address, peer)
            }
            return configuration.relay.map { .relayed($0, peer) }
        }
        guard let target else { return nil }
        switch target {
        case let .contact(name):
            // Checked in call(_:): the contact exists and has an address or a relay is set.
            let contact = store.contacts.named(name)
            let fingerprint = contact.flatMap { Fingerprint($0.fingerprint) }
            if let address = contact?.address.flatMap(SignalAddress.init) {
                return .direct(address, fingerprint)
            } else if let relay = configuration.relay, let fingerprint {
                return .relayed(relay, fingerprint)
            } else {
                return .direct(SignalAddress(host: "", port: 0), fingerprint)
            }
        case let .address(a): return .direct(a, nil)
        case let .pinned(a, f): return .direct(a, f)
        case let .relayed(f, relay): return .relayed(relay, f)
        case .session, .webPage: return nil
        }
    }

    /// Opens a signaling connection along `route` and runs `body` on it until it closes.
    nonisolated func connect(_ route: Route, _ body: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void) async throws {
        let identity = self.identity, limits = configuration.signalingLimits, network = configuration.signalNetwork
        switch route {
        case let .direct(address, pin):
            if let network {
                try await network.connect(to: address, as: identity, pin: pin, body)
            } else {
                try await SignalingClient.connect(host: address.host, port: address.port, identity: identity, pin: pin,
                                                  limits: limits, body)
            }
        case let .relayed(relay, fingerprint):
            try await RelayClient.dial(relay: relay.host, port: relay.port, fingerprint: fingerprint, identity: identity,
                                       limits: limits, body)
        }
    }


    // MARK: - Resuming on a new signaling connection

    /// Tries one new connection to the other node to resume the call on (the state decides
    /// when, and backs off between tries: a try that does not resume the call comes back as
    /// ``LegEvent/reconnectFailed``). The caller always can; a callee can when it knows the
    /// caller's address or both use a relay, and otherwise waits for the caller.
    func reconnect() {
        guard let route = route(), resumeToken != nil else { return }
        let attempt = state.reconnectAttempts, logger = self.logger, uuid = self.uuid
        let weak = WeakLeg(self), read = self.read
        spawn {
            guard let leg = weak.leg else { return }
            let made = Locked<ObjectIdentifier?>(nil)
            do {
                try await leg.connect(route) { connection, messages in
                    made.withLock { $0 = connection.id }
                    guard let leg = weak.leg, await leg.ask(fallback: false, { .resuming(connection, $0) }) else { return }
                    await read(messages, connection)
                }
            } catch {
                logger.info("call \(uuid): resuming, try \(attempt): \(error)")
            }
            // The connection closed. If it had resumed the call, its loss is a new one (the
            // state starts over); if not, this try failed.
            if let id = made.withLock({ $0 }), await leg.ask(fallback: true, { .connectionClosed(id, error: nil, $0) }) {
                return
            }
            leg.post(.event(.reconnectFailed, done: nil))
        }
    }

    /// A new connection is up; asks the other node to carry on the call on it.
    func resuming(on connection: SignalingConnection) async -> Bool {
        guard !state.signaling.isUp, self.connection == nil, let resumeToken else { return false }
        pendingConnection = connection
        await report(.connection(connection))
        do {
            try await connection.send(SignalEnvelope(call: uuid, .resume(ResumeRequest(token: resumeToken, received: signals.received)),
                                                     ack: signals.received))
        } catch {
            pendingConnection = nil
            return false
        }
        return true
    }

    /// The other node took the call over to the new connection: send again what it missed,
    /// in order, then carry on there.
    func resumed(received: Int, on connection: SignalingConnection) async {
        guard pendingConnection?.id == connection.id else { return }
        pendingConnection = nil
        self.connection = connection
        for envelope in signals.resend(after: received) {
            try? await connection.send(envelope)
        }
        logger.info("call \(uuid): resumed on a new signaling connection")
        await legEvent(.signalingResumed)
    }

    /// The other node asks to carry on the call on `connection`. Only its own identity with the
    /// call's token may: anyone else is refused and the call goes on as it was. When both
    /// reconnected at once, the caller's connection wins.
    func resume(_ request: ResumeRequest, on connection: SignalingConnection) async {
        let refusal: String? = if !resumable {
            "this call cannot be resumed"
        } else if outgoing, pendingConnection != nil {
            // Both sides reconnected at once: the caller's own connection wins.
            "the caller is resuming the call on a connection of its own"
        } else if connection.origin != .node || connection.peer != peer {
            "this call is not yours to resume"
        } else if let token = resumeToken, CallLeg.sameSecret(token, request.token) {
            nil
        } else {
            "wrong resume token"
        }
        if let refusal {
            logger.notice("call \(uuid): refused to resume it for \(connection.peer.short) at \(connection.remoteAddress): \(refusal)")
            broadcaster.send(.peerError("refused to resume call \(uuid) for \(connection.peer.short): \(refusal)"))
            try? await connection.send(.resumeRefused(refusal), call: uuid)
            return
        }
        let old = self.connection, abandoned = pendingConnection
        self.connection = connection
        pendingConnection = nil
        await report(.connection(connection))
        if let old, old.id != connection.id { old.close() }
        if let abandoned, abandoned.id != connection.id { abandoned.close() }
        try? await connection.send(SignalEnvelope(call: uuid, .resumed(received: signals.received), ack: signals.received))
        for envelope in signals.resend(after: request.received) {
            try? await connection.send(envelope)
        }
        logger.info("call \(uuid): resumed by the caller on a new signaling connection from \(connection.remoteAddress)")
        await legEvent(.signalingResumed)
    }

    /// Compares two secrets in time that does not depend on where they differ.
    static func sameSecret(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8), y = Array(b.utf8)
        guard x.count == y.count else { return false }
        return zip(x, y).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }

    /// This host's network changed: the leg's state decides (close and resume the signaling
    /// if its address went, restart ICE if its path's did or the default route changed).
    func hostNetworkChanged(_ now: HostNetworkSnapshot, from before: HostNetworkSnapshot) async {
        let removed = before.addresses.subtracting(now.addresses)
        let gone = connection?.localHost.map { !now.addresses.contains($0) } ?? false
        let pathAffected = now.defaultRoutes != before.defaultRoutes || selectedLocalBase.map { removed.contains($0) } ?? false
        await legEvent(.hostAddressesChanged(signalingAddressGone: gone, pathAffected: pathAffected))
    }
}
