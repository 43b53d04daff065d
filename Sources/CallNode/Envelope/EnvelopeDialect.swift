import Calls
import Foundation
import Locking
import Logging
import Signaling

/// The node's own dialect: a call's signals as typed envelopes on a mutual-TLS connection
/// (direct, or spliced through the relay), or on a call page's WebSocket.
///
/// Between nodes a call outlives its connection: every message is numbered and kept until the
/// peer acknowledges it, and after a drop either side that can reach the other opens a new
/// connection and asks, with the call's secret (the resume token the caller made and told in
/// its invitation), to carry on there; what the peer missed is sent again in order. Only the
/// peer's own identity with the token may resume, and when both reconnect at once the caller's
/// connection wins. A page's connection and a session's (made by the relay's rendezvous) cannot
/// be resumed: their calls end with them.
actor EnvelopeDialect: CallDialect {
    /// How an outgoing call reaches its callee's node.
    enum Route: Sendable { case direct(SignalAddress, Fingerprint?), relayed(SignalAddress, Fingerprint) }

    nonisolated let uuid: UUID
    nonisolated let outgoing: Bool
    nonisolated let traits: DialectTraits
    private let target: CallTarget?
    private let identity: NodeIdentity
    private let configuration: CallNodeConfiguration
    private let store: CallStore
    private let logger: Logger
    private let broadcaster: EventBroadcaster<NodeEvent>
    private let report: @Sendable (UUID, LegReport) async -> Void
    private let read: @Sendable (SignalMessages, SignalingConnection) async -> Void

    private var call: DialectCall?
    /// The call's connection while it is up (nil while it is being resumed).
    private(set) var connection: SignalingConnection?
    /// Resuming: the new connection the resume request went out on, until the peer takes it.
    private var pendingConnection: SignalingConnection?
    /// The connection is lost and the call waits to be resumed.
    private var resuming = false
    /// The peer's identity, once a connection authenticated it.
    private var peer: Fingerprint?
    /// The call's numbered messages (between nodes), so that they outlive a connection.
    private var signals = SignalSequence()
    /// What the caller presents to resume the call: made by the caller, told in the invitation.
    private var resumeToken: String?

    /// A dialect for an outgoing call to `target`, or for a call on a connection that is up
    /// already (`connection`: an incoming call's, a session's, a page's); `session` for a
    /// session both sides joined.
    init(call uuid: UUID, outgoing: Bool, target: CallTarget?, connection: SignalingConnection?, session: String?,
         services: CallNode.Services) {
        self.uuid = uuid
        self.outgoing = outgoing
        self.target = target
        self.connection = connection
        peer = connection?.peer
        let page = connection?.origin == .webPage || target == .webPage
        traits = DialectTraits(peer: page ? .webPage : .node, resumable: !page && session == nil)
        identity = services.identity
        configuration = services.configuration
        store = services.store
        logger = services.logger
        broadcaster = services.broadcaster
        report = services.report
        read = services.read
        resumeToken = outgoing && !page && session == nil ? Self.makeResumeToken() : nil
    }

    /// 32 random bytes, hex.
    static func makeResumeToken() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    }

    /// The token a resumption must present (for tests).
    var token: String? { resumeToken }

    func start(_ call: DialectCall) {
        self.call = call
    }

    var localAddress: String? { connection?.localHost }

    // MARK: - Sending

    func send(_ signal: CallSignal) async {
        // A found pair is for a node's ICE: the page's browser finds its own.
        if case .pathFound = signal, traits.peer != .node { return }
        guard var message = SignalMessage(signal) else { return }
        if case let .invite(invitation) = signal {
            message = .invite(Invitation(displayName: invitation.displayName, title: invitation.title, session: invitation.session,
                                         resumeToken: traits.resumable ? resumeToken : nil))
        }
        guard traits.resumable else {
            try? await connection?.send(message, call: message == .keepAlive ? nil : uuid)
            return
        }
        if message == .keepAlive {
            // Carries the call (so the peer learns what was received), not numbered.
            try? await connection?.send(SignalEnvelope(call: uuid, .keepAlive, ack: signals.received))
            return
        }
        let envelope: SignalEnvelope
        do {
            envelope = try signals.stamp(message, call: uuid)
        } catch {
            call?.failed("\(error)")
            return
        }
        // Without a connection (being resumed), or a send that fails, the message is kept:
        // the resumed connection carries it.
        try? await connection?.send(envelope)
    }

    // MARK: - Receiving

    /// The invitation that made this (incoming) call: the first of the caller's messages.
    func invited(by envelope: SignalEnvelope) {
        _ = signals.accept(envelope)
        if case let .invite(invitation) = envelope.message { resumeToken = invitation.resumeToken }
    }

    /// An envelope for this call on one of its connections (the router checked that it carries
    /// the call, or that it is the resumption handshake).
    func receive(_ envelope: SignalEnvelope, on connection: SignalingConnection) async {
        switch envelope.message {
        case let .resume(request):
            await resume(request, on: connection)
            return
        case let .resumed(received):
            await resumed(received: received, on: connection)
            return
        case let .resumeRefused(reason):
            guard pendingConnection?.id == connection.id else { return }
            switch ResumeHandshake.outcome(of: ResumeRefusal(reason: reason)) {
            case .tryElsewhere:
                // Crossing attempts (the caller's own connection wins): this try failed; the
                // other side's may resume the call.
                logger.info("call \(uuid): the other node declined this resumption: \(reason)")
                pendingConnection = nil
                connection.close()
            case .hungUp:
                // Its user hung up while the signaling was down: the end that could not reach
                // this side is the answer.
                pendingConnection = nil
                connection.close()
                call?.received(.end(.hangup))
            case let .failed(why):
                call?.failed(why)
            }
            return
        default:
            break
        }
        guard connection.id == self.connection?.id else { return }  // a connection the call left
        if traits.resumable, !signals.accept(envelope) { return }  // sent again after a resumption: had it
        switch envelope.message {
        case .invite, .keepAlive:
            break
        case .hold:
            // Older nodes said hold in a message of their own; the offer and answer say it now.
            logger.debug("call \(uuid): a hold message (the offer and answer say hold)")
        default:
            if let signal = CallSignal(envelope.message) { call?.received(signal) }
        }
    }

    // MARK: - Dialing

    func dial() async {
        if let connection {
            // A session's connection (the join made it) or a page's (connected already).
            await report(uuid, .connection(connection))
            call?.signalingUp(peer: connection.peer)
            return
        }
        guard let route = route(), let call else {
            self.call?.signalingLost("the call has nowhere to go", resumable: false)
            return
        }
        let dialed = Locked<ObjectIdentifier?>(nil), read = self.read
        call.run { [self] in
            do {
                try await connect(route) { connection, messages in
                    dialed.withLock { $0 = connection.id }
                    await self.connected(connection)
                    await read(messages, connection)
                }
                await closed(dialed.withLock { $0 }, error: nil)
            } catch {
                await closed(dialed.withLock { $0 }, error: error)
            }
        }
    }

    /// The outgoing call's connection is up: the call carries on there.
    private func connected(_ connection: SignalingConnection) async {
        self.connection = connection
        peer = connection.peer
        await report(uuid, .connection(connection))
        call?.signalingUp(peer: connection.peer)
    }

    /// A connection of the call closed (`id` nil: none was ever made). A call between nodes
    /// waits to be resumed on a new one; anything else ends. Returns whether it was the call's
    /// current connection.
    @discardableResult
    func closed(_ id: ObjectIdentifier?, error: (any Error)?) async -> Bool {
        if let id {
            // A resumption that did not take: the state tries again.
            if pendingConnection?.id == id {
                pendingConnection = nil
                return false
            }
            // A connection the call already left (resumed elsewhere, or given up) changes nothing.
            if let current = connection, current.id != id { return false }
            if connection == nil && resuming { return false }
        }
        let detail = error.map { "\($0)" } ?? "the signaling connection closed"
        let canResume = traits.resumable && connection != nil
        connection = nil
        pendingConnection = nil
        resuming = canResume
        logger.info("call \(uuid): signaling connection lost (\(detail))\(canResume ? "; resuming" : "")")
        call?.signalingLost(detail, resumable: canResume)
        return id != nil
    }

    func dropConnection() {
        connection?.close()
        connection = nil
        resuming = traits.resumable
    }

    func close() {
        // A page's connection is the page's, not the call's: it stays open for its next call
        // (closing it left the page unreachable until it reconnected, a second later).
        if traits.peer != .webPage { connection?.close() }
        pendingConnection?.close()
    }

    /// The route to the other node: the callee's as dialed; for a callee, the caller's address
    /// among the contacts, or the relay this node is registered at (which the caller, started
    /// with the same relay, is registered at too). Nil for web pages and sessions, and for a
    /// callee with no way to reach its caller (it waits for the caller).
    func route() -> Route? {
        if !outgoing {
            guard traits.resumable, let peer else { return nil }
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
        case .session, .webPage, .handle, .sip, .janus: return nil
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
            try await configuration.relays.dial(fingerprint, at: relay, as: identity, body)
        }
    }

    // MARK: - Resuming on a new connection

    /// Tries one new connection to the other node to resume the call on (the call's state
    /// decides when, and backs off between tries). The caller always can; a callee can when it
    /// knows the caller's address or both use a relay, and otherwise waits for the caller.
    func reconnect() {
        guard let route = route(), resumeToken != nil, let call else { return }
        let logger = self.logger, uuid = self.uuid, read = self.read
        call.run { [self] in
            let made = Locked<ObjectIdentifier?>(nil)
            do {
                try await connect(route) { connection, messages in
                    made.withLock { $0 = connection.id }
                    guard await self.resuming(on: connection) else { return }
                    await read(messages, connection)
                }
            } catch {
                logger.info("call \(uuid): resuming: \(error)")
            }
            // The connection closed. If it had resumed the call, its loss is a new one (the
            // call's state starts over); if not, this try failed.
            if let id = made.withLock({ $0 }), await closed(id, error: nil) { return }
            call.reconnectFailed()
        }
    }

    /// A new connection is up; asks the other node to carry on the call on it.
    private func resuming(on connection: SignalingConnection) async -> Bool {
        guard resuming, self.connection == nil, let resumeToken else { return false }
        pendingConnection = connection
        await report(uuid, .connection(connection))
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
    private func resumed(received: Int, on connection: SignalingConnection) async {
        guard pendingConnection?.id == connection.id else { return }
        pendingConnection = nil
        self.connection = connection
        resuming = false
        for envelope in signals.resend(after: received) {
            try? await connection.send(envelope)
        }
        logger.info("call \(uuid): resumed on a new signaling connection")
        call?.signalingResumed()
    }

    /// The other node asks to carry on the call on `connection`. Only its own identity with the
    /// call's token may: anyone else is refused and the call goes on as it was. When both
    /// reconnected at once, the caller's connection wins.
    private func resume(_ request: ResumeRequest, on connection: SignalingConnection) async {
        let refusal = ResumeHandshake.answer(ResumeHandshake.Request(
            resumable: traits.resumable,
            // Both sides reconnected at once: the caller's own connection wins.
            callerResumingItself: outgoing && pendingConnection != nil,
            fromThePeer: connection.origin == .node && connection.peer == peer,
            tokenMatches: resumeToken.map { Self.sameSecret($0, request.token) } ?? false))
        if let refusal {
            logger.notice("call \(uuid): refused to resume it for \(connection.peer.short) at \(connection.remoteAddress): \(refusal)")
            broadcaster.send(.peerError("refused to resume call \(uuid) for \(connection.peer.short): \(refusal)"))
            try? await connection.send(.resumeRefused(refusal.reason), call: uuid)
            return
        }
        let old = self.connection, abandoned = pendingConnection
        self.connection = connection
        pendingConnection = nil
        resuming = false
        await report(uuid, .connection(connection))
        if let old, old.id != connection.id { old.close() }
        if let abandoned, abandoned.id != connection.id { abandoned.close() }
        try? await connection.send(SignalEnvelope(call: uuid, .resumed(received: signals.received), ack: signals.received))
        for envelope in signals.resend(after: request.received) {
            try? await connection.send(envelope)
        }
        logger.info("call \(uuid): resumed by the caller on a new signaling connection from \(connection.remoteAddress)")
        call?.signalingResumed()
    }

    /// Compares two secrets in time that does not depend on where they differ.
    static func sameSecret(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8), y = Array(b.utf8)
        guard x.count == y.count else { return false }
        return zip(x, y).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }
}
