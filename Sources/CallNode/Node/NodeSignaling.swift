import AudioSession
import Calls
import Clocks
import DTLS
import Foundation
import ICE
import Locking
import Logging
import Media
import Metrics
import SDP
import ServiceLifecycle
import Signaling

/// Signaling: dialing, incoming connections, web pages, the messages of a call, admission.
extension CallNode {
    // MARK: - Signaling

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
    public func serveWeb(host: String, port: Int, secret: String, https: WebPageCertificate? = nil) async throws(SignalingError) -> SignalAddress {
        let server = try await WebSignalingServer(host: host, port: port, secret: secret, page: WebPage.html,
                                                  https: https, limits: configuration.signalingLimits)
        guard !isShutDown else {
            // Shut down before or while the server was being made: nothing would close it.
            await server.close()
            throw .cannotListen("\(host):\(port)", reason: "the node has shut down")
        }
        webServers.append(server)
        let weak = WeakNode(self)
        keep(Task {
            await server.run { connection, messages in
                await weak.node?.servePage(connection, messages)
            }
        })
        let address = SignalAddress(host: host, port: server.port)
        logger.info("serving the call page on \(https == nil ? "http" : "https")://\(address)/")
        return address
    }

    /// Web pages connected now, oldest first.
    public var connectedWebPages: Int { webPages.count }

    /// Serves one call page whose WebSocket the embedder carries (a web server of its own, or
    /// the test kit's in-memory page): `transport` sends this node's frames to the page,
    /// `frames` are the page's, each a node envelope as the page's JavaScript sends it. The page
    /// is admitted already (the embedder checked its secret). Returns when `frames` end; the
    /// page can call this node meanwhile, and ``call(_:title:)`` with ``CallTarget/webPage``
    /// rings it, as a page on ``serveWeb(host:port:secret:https:)``'s port.
    public nonisolated func servePage(over transport: any SignalFrameTransport, frames: AsyncStream<[UInt8]>,
                                      remoteAddress: String) async {
        await servePage(.webPage(remoteAddress: remoteAddress, transport: transport), SignalMessages(frames: frames))
    }

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
        legConnections.values.contains(connection.id) || sessionConnections[connection.id] != nil
    }

    func connectionEnded(_ connection: SignalingConnection) async {
        for (uuid, id) in legConnections where id == connection.id {
            await envelopes[uuid]?.closed(connection.id, error: nil)
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
            if case let .groupKey(grant) = envelope.message, connection.origin != .webPage {
                await groupKeyReceived(grant, on: connection)
                return
            }
            if case let .error(text) = envelope.message { broadcaster.send(.peerError("peer reports: \(text)")) }
            return
        }
        if case let .invite(invitation) = envelope.message {
            await invited(uuid, invitation, envelope, on: connection)
            return
        }
        if case .resume = envelope.message {
            // A caller carrying on its call on a new connection: the leg checks who asks.
            guard legs[uuid] != nil, let dialect = envelopes[uuid] else {
                let gone = ResumeRefusal.callGone(call: uuid.uuidString, hungUpThere: hungUpHere.contains(uuid))
                try? await connection.send(.resumeRefused(gone.reason), call: uuid)
                return
            }
            await dialect.receive(envelope, on: connection)
            return
        }
        guard let dialect = envelopes[uuid], legConnections[uuid] == connection.id else {
            // A message for a call this connection does not carry.
            if case .end = envelope.message { return }
            try? await connection.send(.error("no call \(uuid) on this connection"), call: uuid)
            return
        }
        await dialect.receive(envelope, on: connection)
    }

    /// An invitation: check who calls, then ring (or refuse with a reason).
    func invited(_ uuid: UUID, _ invitation: Invitation, _ envelope: SignalEnvelope, on connection: SignalingConnection) async {
        let fingerprint = connection.peer
        let handle = CallHandle(.generic, fingerprint.hex)
        let contact = store.contacts.withFingerprint(fingerprint.hex)
        var refusal: RejectReason?
        let joined = sessionConnections[connection.id]
        if let joined, invitation.session == joined.session {
            // Both sides entered this session ID: no ringing, no contact check (identities are
            // shown, not pinned).
            do {
                try await reportNewIncoming(uuid, handle: handle, name: invitation.displayName)
            } catch {
                refusal = .busy
            }
        } else {
            let name = contact?.name ?? invitation.displayName.map { "\($0) (unverified)" }
                ?? (connection.origin == .webPage ? "web page at \(connection.remoteAddress)" : nil)
            // A web page has no certificate to be a contact with; the web secret admitted it.
            refusal = await admitIncoming(uuid, handle: handle, name: name, knownCaller: connection.origin == .webPage ? nil : contact != nil)
        }
        if let refusal {
            logger.info("refused call from \(fingerprint.short): \(refusal.rawValue)")
            try? await connection.send(.reject(refusal), call: uuid)
            broadcaster.send(.refused(uuid, from: fingerprint, refusal))
            return
        }
        let dialect = EnvelopeDialect(call: uuid, outgoing: false, target: nil, connection: connection, session: joined?.session,
                                      services: services)
        await dialect.invited(by: envelope)
        envelopes[uuid] = dialect
        let leg = await makeLeg(uuid, outgoing: false, muted: joined?.startMuted ?? false, dialect: dialect, connection: connection,
                                title: invitation.title, session: joined?.session, startMuted: joined?.startMuted ?? false)
        broadcaster.send(.incoming(uuid, from: fingerprint, name: contact?.name ?? invitation.displayName, known: contact != nil))
        leg.post(.invited(ring: joined == nil))
        if configuration.autoAnswer || joined != nil {
            do {
                try await answer(uuid, others: configuration.autoAnswerOthers)
            } catch {
                // Holding or merging the others was refused (a call that cannot be held, a
                // full conference): answer it anyway, as calls that do not hear each other.
                logger.notice("answering call \(uuid) with the others \(configuration.autoAnswerOthers.rawValue): \(error); answering it alone")
                _ = try? await manager.controller.request(.answer(call: uuid))
            }
        }
    }
}
