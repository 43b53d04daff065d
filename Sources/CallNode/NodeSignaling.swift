import AudioSession
import Calls
import Foundation
import DTLS
import ICE
import Logging
import Media
import Metrics
import SDP
import ServiceLifecycle
import Signaling
import Locking

/// Signaling: dialing, incoming connections, web pages, the messages of a call, admission.
extension CallNode {
    // MARK: - Signaling

    /// Opens the signaling connection of an outgoing call in its own task; the invitation goes
    /// out once TLS is up.
    func dial(_ uuid: UUID) {
        guard let target = legs[uuid]?.target else { return }
        enum Route { case direct(SignalAddress, Fingerprint?), relayed(SignalAddress, Fingerprint) }
        let route: Route
        switch target {
        case let .contact(name):
            // Checked in call(_:): the contact exists and has an address or a relay is set.
            let contact = store.contacts.named(name)
            let fingerprint = contact.flatMap { Fingerprint($0.fingerprint) }
            if let address = contact?.address.flatMap(SignalAddress.init) {
                route = .direct(address, fingerprint)
            } else if let relay = configuration.relay, let fingerprint {
                route = .relayed(relay, fingerprint)
            } else {
                route = .direct(SignalAddress(host: "", port: 0), fingerprint)
            }
        case let .address(a): route = .direct(a, nil)
        case let .pinned(a, f): route = .direct(a, f)
        case let .relayed(f, relay): route = .relayed(relay, f)
        case .session: return
        case .webPage:
            // The page is already connected and read by its own task: invite it there.
            prepareICEEarly(uuid, role: .controlled)
            guard let page = freeWebPage() else {
                legs[uuid]?.failure = CallNodeError.noWebPage.description
                legs[uuid]?.connectionTask = Task { [weak self] in await self?.connectionClosed(uuid, error: nil) }
                return
            }
            legs[uuid]?.connectionTask = Task { [weak self] in
                guard let self else { return }
                if await !self.dialed(uuid, page) { await self.connectionClosed(uuid, error: nil) }
            }
            return
        }
        prepareICEEarly(uuid, role: .controlled)
        let identity = self.identity, limits = configuration.signalingLimits, network = configuration.signalNetwork
        let weak = WeakNode(self)
        let task = Task { [weak self] in
            do {
                let body: @Sendable (SignalingConnection, SignalMessages) async -> Void = { connection, messages in
                    guard let node = weak.node, await node.dialed(uuid, connection) else { return }
                    await node.read(messages, on: connection)
                }
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
                await self?.connectionClosed(uuid, error: nil)
            } catch {
                await self?.connectionClosed(uuid, error: error)
            }
        }
        legs[uuid]?.connectionTask = task
    }

    /// TLS is up for an outgoing call: send the invitation and fulfil the start action.
    func dialed(_ uuid: UUID, _ connection: SignalingConnection) async -> Bool {
        guard legs[uuid] != nil else { return false }
        legs[uuid]?.connection = connection
        legs[uuid]?.peer = connection.peer
        await legEvent(uuid, .signalingReady)
        // The call counts as connecting before the invitation leaves: a peer that answers at
        // once (a web page on the same machine) can have its offer here while the send is
        // still being awaited.
        if let action = legs[uuid]?.startAction {
            try? await manager.report(.fulfilled(action))
            try? await manager.report(.progress(uuid, .invitationSent))
        }
        do {
            try await connection.send(.invite(Invitation(displayName: configuration.displayName, title: legs[uuid]?.title,
                                                         session: legs[uuid]?.session)), call: uuid)
        } catch {
            return false
        }
        return true
    }

    /// An incoming connection: read it until it closes, then end what it carried. A connection
    /// that carries no call and stays silent for ``SignalingLimits/idleTimeout`` is closed.
    nonisolated func serve(_ connection: SignalingConnection, _ messages: SignalMessages) async {
        let heard = LastHeard(clock: configuration.clock)
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.closeWhenIdle(connection, heard: heard) }
            await read(messages, on: connection, heard: heard)
            group.cancelAll()
        }
        await connectionEnded(connection)
    }

    /// When a connection last delivered anything.
    final class LastHeard: Sendable {
        let clock: TimerClock
        let instant: Locked<Duration>
        init(clock: TimerClock) {
            self.clock = clock
            instant = Locked(clock.now)
        }
        var value: Duration { instant.withLock { $0 } }
        func now() { instant.withLock { $0 = clock.now } }
    }

    nonisolated func closeWhenIdle(_ connection: SignalingConnection, heard: LastHeard) async {
        let idle = configuration.signalingLimits.idleTimeout
        while !Task.isCancelled {
            let clock = configuration.clock
            guard (try? await clock.sleep(until: heard.value + idle)) != nil else { return }
            guard heard.value + idle <= clock.now else { continue }
            if await carriesCall(connection) {
                heard.now()
                continue
            }
            logger.notice("closing an idle signaling connection from \(connection.remoteAddress): no call and nothing heard for \(idle)")
            connection.close()
            return
        }
    }

    // MARK: - Web pages

    /// Serves the call page and its WebSocket signaling on `host:port`: a browser that opens
    /// the page (with `secret`) can call this node, and ``call(_:title:)`` with
    /// ``CallTarget/webPage`` rings it. Calls with pages use DTLS-SRTP, as browsers require.
    ///
    /// - Returns: the bound address (useful with port 0).
    /// - Throws: ``SignalingError/cannotListen(_:reason:)``.
    public func serveWeb(host: String, port: Int, secret: String) async throws(SignalingError) -> SignalAddress {
        let server = try await WebSignalingServer(host: host, port: port, secret: secret, page: WebPage.html,
                                                  limits: configuration.signalingLimits)
        webServers.append(server)
        let weak = WeakNode(self)
        keep(Task {
            await server.run { connection, messages in
                await weak.node?.servePage(connection, messages)
            }
        })
        let address = SignalAddress(host: host, port: server.port)
        logger.info("serving the call page on http://\(address)/")
        return address
    }

    /// Web pages connected now, oldest first.
    public var connectedWebPages: Int { webPages.count }

    nonisolated func servePage(_ connection: SignalingConnection, _ messages: SignalMessages) async {
        await pageConnected(connection)
        await serve(connection, messages)
        await pageDisconnected(connection)
    }

    func pageConnected(_ connection: SignalingConnection) {
        webPages.append(connection)
        broadcaster.send(.webPage(connected: true, from: connection.remoteAddress))
    }

    func pageDisconnected(_ connection: SignalingConnection) {
        webPages.removeAll { $0.id == connection.id }
        broadcaster.send(.webPage(connected: false, from: connection.remoteAddress))
    }

    /// The newest page not carrying a call.
    func freeWebPage() -> SignalingConnection? {
        webPages.last { !carriesCall($0) }
    }

    func carriesCall(_ connection: SignalingConnection) -> Bool {
        legs.values.contains { $0.connection?.id == connection.id } || sessionConnections[connection.id] != nil
    }

    func connectionEnded(_ connection: SignalingConnection) async {
        for (uuid, leg) in legs where leg.connection?.id == connection.id {
            await connectionClosed(uuid, error: nil)
        }
    }

    /// Reads a connection's messages in order (off the actor: the sequence stays with the
    /// task that owns the connection).
    nonisolated func read(_ messages: SignalMessages, on connection: SignalingConnection, heard: LastHeard? = nil) async {
        var malformed = 0
        for await item in messages {
            heard?.now()
            switch item {
            case let .success(envelope):
                await receive(envelope, on: connection)
            case let .failure(error):
                malformed += 1
                broadcaster.send(.peerError("from \(connection.remoteAddress): \(error)"))
                logger.notice("signaling error from \(connection.remoteAddress): \(error)")
                try? await connection.send(.error(error.description), call: nil)
                if malformed >= configuration.signalingLimits.maximumMalformedFrames {
                    connection.close()
                }
            }
        }
    }

    func receive(_ envelope: SignalEnvelope, on connection: SignalingConnection) async {
        guard let uuid = envelope.call else {
            if case .keepAlive = envelope.message { return }
            if case let .error(text) = envelope.message { broadcaster.send(.peerError("peer reports: \(text)")) }
            return
        }
        if case let .invite(invitation) = envelope.message {
            await invited(uuid, invitation, on: connection)
            return
        }
        guard legs[uuid]?.connection?.id == connection.id else {
            // A message for a call this connection does not carry.
            if case .end = envelope.message { return }
            try? await connection.send(.error("no call \(uuid) on this connection"), call: uuid)
            return
        }
        do {
            switch envelope.message {
            case .invite: break
            case .ringing:
                await legEvent(uuid, .peerRinging)
                broadcaster.send(.ringing(uuid, callee: connection.peer))
            case let .offer(sdp):
                try await offered(uuid, sdp: sdp)
            case let .answer(sdp):
                try await answered(uuid, sdp: sdp)
            case let .candidates(candidates, end):
                await addRemoteCandidates(uuid, candidates, end: end)
            case let .hold(on):
                broadcaster.send(.remoteHold(uuid, on))
            case let .end(reason):
                await legEvent(uuid, .end(.peerEnded(reason)))
            case let .reject(reason):
                broadcaster.send(.rejected(uuid, reason))
                await legEvent(uuid, .end(.peerRejected(reason)))
            case let .error(text):
                broadcaster.send(.peerError("peer reports: \(text)"))
            case .keepAlive:
                break
            }
        } catch {
            broadcaster.send(.peerError("call \(uuid): \(error)"))
            try? await connection.send(.error("\(error)"), call: uuid)
            await legEvent(uuid, .end(.failed("\(error)")))
        }
    }

    /// An invitation: check who calls, then ring (or refuse with a reason).
    func invited(_ uuid: UUID, _ invitation: Invitation, on connection: SignalingConnection) async {
        let fingerprint = connection.peer
        let handle = CallHandle(.generic, fingerprint.hex)
        let contact = store.contacts.withFingerprint(fingerprint.hex)
        var refusal: RejectReason?
        let joined = sessionConnections[connection.id]
        if let joined, invitation.session == joined.session {
            // Both sides entered this session ID: no ringing, no contact check (identities are
            // shown, not pinned).
            do {
                try await manager.report(.newIncomingCall(uuid, CallUpdate(remoteHandle: handle, localizedCallerName: invitation.displayName)))
            } catch {
                refusal = .busy
            }
        } else if store.directory.isBlocked(handle) {
            refusal = .blocked
        } else if contact == nil && !configuration.acceptUnknownCallers && connection.origin != .webPage {
            // A web page has no certificate to be a contact with; the web secret admitted it.
            refusal = .unknownCaller
        } else {
            let name = contact?.name ?? invitation.displayName.map { "\($0) (unverified)" }
                ?? (connection.origin == .webPage ? "web page at \(connection.remoteAddress)" : nil)
            do {
                try await manager.report(.newIncomingCall(uuid, CallUpdate(remoteHandle: handle, localizedCallerName: name)))
            } catch {
                refusal = switch error {
                case .incoming(.filteredByBlockList): .blocked
                case .incoming(.filteredByDoNotDisturb): .doNotDisturb
                default: .busy  // the maximum of calls, a UUID in use, an unsupported handle, shutting down
                }
            }
        }
        if let refusal {
            logger.info("refused call from \(fingerprint.short): \(refusal.rawValue)")
            try? await connection.send(.reject(refusal), call: uuid)
            return
        }
        var leg = Leg(uuid: uuid, outgoing: false, muted: joined?.startMuted ?? false, timings: legTimings)
        leg.connection = connection
        leg.peer = fingerprint
        leg.title = invitation.title
        leg.session = joined?.session
        leg.startMuted = joined?.startMuted ?? false
        legs[uuid] = leg
        callsCounter.increment()
        broadcaster.send(.incoming(uuid, from: fingerprint, name: contact?.name ?? invitation.displayName, known: contact != nil))
        await legEvent(uuid, .signalingReady)
        prepareICEEarly(uuid, role: .controlling)
        if joined == nil { try? await connection.send(.ringing, call: uuid) }
        if configuration.autoAnswer || joined != nil {
            _ = try? await manager.controller.request(.answer(call: uuid))
        }
    }

    /// Starts making the call's ICE agent in `role` now, in the background; the offer or answer
    /// picks it up with ``preparedICE(_:role:)``. Host candidates are then ready to go in the
    /// SDP itself, and server-reflexive and relayed ones often are too. A pooled agent is used
    /// when there is one (a pooled agent that failed is replaced by a new one).
}
