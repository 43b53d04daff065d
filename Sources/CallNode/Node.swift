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

/// A call node: identity, contacts, the signaling listener, the call manager, the audio
/// session, and one ICE agent and media actor per call, wired together.
///
/// The node is the call manager's performer (CallKit's provider delegate): it does the work of
/// each action over signaling, ICE and media, and reports progress back. In the default
/// system-owned mode the manager activates the audio session and media starts on its
/// `didActivate`; with ``CallNodeConfiguration/appOwnedAudio`` the node activates its own
/// app-owned session when a call connects. Either way exactly one party activates audio.
///
/// Lifecycle: `init` loads the identity and database and binds the listener; ``start()`` (or
/// ``run()`` as a swift-service-lifecycle `Service`) begins serving; ``shutdown()`` hangs up,
/// stops media, releases devices and closes sockets, in that order.
public actor CallNode: Service {
    public nonisolated let identity: NodeIdentity
    /// The identity as OpenSSL's DTLS presents it.
    private nonisolated let dtlsCertificate: DTLSCertificate
    public nonisolated let configuration: CallNodeConfiguration
    public nonisolated let store: CallStore
    public nonisolated let manager: CallManager
    /// The bound signaling address (with the real port when the configuration asked for 0).
    public nonisolated let listenAddress: SignalAddress?

    private let listener: SignalingListener?
    private let systemSession: AudioSessionOwner<SystemOwned>?
    private let appSession: AudioSessionOwner<AppOwned>?
    private let clock: MediaClock
    private let logger: Logger
    private let broadcaster = EventBroadcaster<NodeEvent>()
    private let callsCounter: Counter
    private let setupTimer: Metrics.Timer

    private var legs: [UUID: Leg] = [:]
    private var timerGeneration: UInt64 = 0
    private var endDetails: [UUID: (detail: String?, duration: Duration?)] = [:]
    private var audioActive = false
    /// Why the audio session last failed to activate (system-owned mode), until it next works.
    private var audioFailure: String?
    private var tasks: [Task<Void, Never>] = []
    private var isStarted = false
    private var isShutDown = false
    /// Agents made and gathering ahead of calls (``CallNodeConfiguration/iceAgentPool``).
    private var icePool: [PooledICE] = []
    /// Connections that came from this node's own session joins: their invitations are
    /// answered without ringing or contact checks.
    private var sessionConnections: [ObjectIdentifier: (session: String, startMuted: Bool)] = [:]
    /// The web port's servers (see ``serveWeb(host:port:secret:)``) and the pages connected to them.
    private var webServers: [WebSignalingServer] = []
    private var webPages: [SignalingConnection] = []

    /// A call's ICE agent, gathering, and the local parameters for its SDP.
    private struct PreparedICE: Sendable {
        let agent: IceAgent
        let gathering: IceGathering
        var local: LocalAudioParameters
    }

    /// An agent made ahead of a call (in the controlling role; an outgoing call switches it).
    private struct PooledICE {
        let task: Task<PreparedICE, any Error>
        let made: ContinuousClock.Instant
    }

    /// One call's resources and its state machine (``LegState``), which decides its phase,
    /// its timers, its microphone and its one ending.
    private struct Leg {
        let uuid: UUID
        let outgoing: Bool
        let began: ContinuousClock.Instant
        var state: LegState
        var target: CallTarget?
        var peer: Fingerprint?
        var connection: SignalingConnection?
        var connectionTask: Task<Void, Never>?
        var startAction: ActionID?
        var agent: IceAgent?
        /// The agent being made and gathering, started before it is needed (the caller's at
        /// dial, the callee's when it rings) so that answering does not wait for it.
        var ice: Task<PreparedICE, any Error>?
        var media: MediaActor?
        var mediaPreparation: Task<MediaActor, any Error>?
        /// The DTLS-SRTP association keying the call's media (nil with SDES), from ICE
        /// connected until the call ends.
        var dtls: DTLSAssociation?
        var tasks: [Task<Void, Never>] = []
        /// The state machine's timers that are armed, each with the generation that armed it
        /// (a timer cancelled after it was already due must not fire its successor).
        var timers: [LegTimer: (generation: UInt64, task: Task<Void, Never>)] = [:]
        var offer: SessionDescription?
        var negotiated: NegotiatedAudio?
        /// The first failure recorded, which the end reports whatever else followed it.
        var failure: String?
        var title: String?
        /// The session this call belongs to (joined, not rung).
        var session: String?
        var startMuted = false
        /// Sends this round's local candidates as they are found; replaced by an ICE restart.
        var trickle: Task<Void, Never>?

        init(uuid: UUID, outgoing: Bool, muted: Bool = false, timings: LegTimings) {
            self.uuid = uuid
            self.outgoing = outgoing
            began = .now
            state = LegState(outgoing: outgoing, muted: muted, timings: timings)
        }
    }

    /// The leg timers' settings.
    private var legTimings: LegTimings {
        LegTimings(keepAliveInterval: configuration.keepAliveInterval, connectionLostTimeout: configuration.connectionLostTimeout,
                   iceRestartInterval: configuration.iceRestartInterval)
    }

    /// Loads (or creates) the identity and database in the home directory, prepares the audio
    /// session and binds the signaling listener.
    ///
    /// - Throws: ``IdentityError``, ``CallStoreError``, ``SignalingError/cannotListen(_:reason:)``,
    ///   or ``MediaError`` for a media configuration that cannot work.
    public init(configuration: CallNodeConfiguration, logger: Logger = Logger(label: "callnode.node")) async throws {
        self.configuration = configuration
        self.logger = logger
        identity = try NodeIdentity.loadOrCreate(home: configuration.home, commonName: configuration.displayName ?? "callnode").identity
        // DTLS presents the node's own certificate: its DTLS fingerprint is its identity.
        dtlsCertificate = try DTLSCertificate(certificateDER: identity.certificateDER, privateKeyPEM: identity.privateKeyPEM)
        store = try CallStore(path: configuration.home + "/callnode.sqlite")
        let clock = MediaClock(frameDuration: configuration.media.opus.frameDuration)
        self.clock = clock
        // The ringtone plays on the speaker route of the node's own backend while a call rings.
        let backend = configuration.audio
        let ringer = try configuration.provider.ringtoneSound.map { path in
            try Ringer(soundPath: path, output: { backend.makePlayback(device: backend.speakerOutput, format: AudioFormat()) },
                              clock: clock)
        }
        var sessionConfiguration = AudioSessionConfiguration()
        sessionConfiguration.category = .playAndRecord
        sessionConfiguration.mode = .voiceChat
        if configuration.appOwnedAudio {
            let session = AudioSessionOwner<AppOwned>(name: "callnode app audio", configuration: sessionConfiguration,
                                                      backend: configuration.audio)
            appSession = session
            systemSession = nil
            try await Self.applyAudioModes(configuration, to: session)
            manager = try await CallManager(configuration: configuration.provider, audio: .appOwned, store: store, ringer: ringer)
        } else {
            let session = AudioSessionOwner<SystemOwned>(name: "callnode call audio", configuration: sessionConfiguration,
                                                         backend: configuration.audio)
            systemSession = session
            appSession = nil
            try await Self.applyAudioModes(configuration, to: session)
            manager = try await CallManager(configuration: configuration.provider, audio: .systemOwned(session), store: store, ringer: ringer)
        }
        if let address = configuration.listenAddress {
            let listener = try await SignalingListener(host: address.host, port: address.port, identity: identity,
                                                       limits: configuration.signalingLimits)
            self.listener = listener
            listenAddress = SignalAddress(host: address.host, port: listener.port)
        } else {
            listener = nil
            listenAddress = nil
        }
        callsCounter = Counter(label: "callnode_calls_total")
        setupTimer = Metrics.Timer(label: "callnode_call_setup")
    }

    /// Events from now on, in order.
    public nonisolated func events() -> AsyncStream<NodeEvent> { broadcaster.subscribe(bufferingNewest: 4096) }

    /// Starts serving: the listener, the performer loop and the media clock. Idempotent.
    public func start() {
        guard !isStarted, !isShutDown else { return }
        isStarted = true
        let requests = manager.requests
        keep(Task { [weak self] in
            for await request in requests {
                await self?.handle(request)
            }
        })
        let managerEvents = manager.events()
        keep(Task { [weak self] in
            for await event in managerEvents {
                await self?.managerEvent(event)
            }
        })
        let changes = manager.observer.changes(), broadcaster = self.broadcaster
        keep(Task {
            var last: [UUID: (String, Bool, Bool)] = [:]
            for await call in changes {
                let state = (call.phase.description, call.isOnHold, call.isMuted)
                if let previous = last[call.id], previous == state { continue }
                last[call.id] = call.hasEnded ? nil : state
                broadcaster.send(.state(call.id, phase: state.0, held: state.1, muted: state.2))
            }
        })
        let clock = self.clock
        keep(Task { _ = await clock.run() })
        fillICEPool()
        if configuration.iceAgentPool > 0, configuration.ice.stunServer != nil || !configuration.ice.turnServers.isEmpty {
            let refresh = configuration.iceAgentPoolRefresh
            keep(Task { [weak self] in
                while !Task.isCancelled {
                    try? await Task.sleep(for: refresh / 2)
                    await self?.refreshICEPool()
                }
            })
        }
        if let listener, let address = listenAddress {
            let weak = WeakNode(self)
            keep(Task {
                await listener.run { connection, messages in
                    await weak.node?.serve(connection, messages)
                }
            })
            broadcaster.send(.listening(address))
            logger.info("listening for calls on \(address) as \(identity.fingerprint)")
        }
        if let relay = configuration.relay {
            let identity = self.identity, limits = configuration.signalingLimits, broadcaster = self.broadcaster
            let weak = WeakNode(self)
            keep(Task {
                // Stay registered; after a drop, retry every few seconds until shutdown.
                while !Task.isCancelled {
                    do {
                        try await RelayClient.register(relay: relay.host, port: relay.port, identity: identity, limits: limits,
                                                       registered: { broadcaster.send(.registered(relay)) }) { connection, messages in
                            await weak.node?.serve(connection, messages)
                        }
                        broadcaster.send(.relayLost("the relay at \(relay) closed the connection"))
                    } catch {
                        broadcaster.send(.relayLost("\(error)"))
                    }
                    try? await Task.sleep(for: .seconds(3))
                }
            })
        }
    }

    /// `Service`: serves until graceful shutdown or cancellation, then shuts down.
    public func run() async throws {
        start()
        try? await gracefulShutdown()
        await shutdown()
    }

    /// Hangs up every call, stops media, releases the audio devices and closes every socket.
    public func shutdown() async {
        guard !isShutDown else { return }
        isShutDown = true
        for uuid in Array(legs.keys) { await legEvent(uuid, .end(.shutdown)) }
        await drainICEPool()
        await manager.shutdown()
        await systemSession?.shutdown()
        if let appSession {
            try? await appSession.deactivate()
            await appSession.shutdown()
        }
        await listener?.close()
        for server in webServers { await server.close() }
        for page in webPages { page.close() }
        for task in tasks { task.cancel() }
        for task in tasks { await task.value }
        tasks.removeAll()
        broadcaster.finish()
    }

    // MARK: - Placing and controlling calls

    /// Places a call. Returns its UUID at once; follow ``events()`` for ringing, connected,
    /// rejected or ended.
    ///
    /// - Throws: ``CallNodeError`` for a contact that does not exist or has no address, or a
    ///   start the call manager refuses (maximum calls).
    public func call(_ target: CallTarget, title: String? = nil) async throws(CallNodeError) -> UUID {
        guard isStarted, !isShutDown else { throw .notRunning }
        let handleValue: String
        switch target {
        case let .contact(name):
            guard let contact = store.contacts.named(name) else { throw .unknownContact(name) }
            guard contact.address != nil || configuration.relay != nil else { throw .contactWithoutAddress(name) }
            handleValue = contact.fingerprint
        case let .address(address): handleValue = address.description
        case let .pinned(_, fingerprint), let .relayed(fingerprint, _): handleValue = fingerprint.hex
        case .session: throw .sessionNeedsJoin
        case .webPage:
            guard freeWebPage() != nil else { throw .noWebPage }
            handleValue = WebSignalingServer.pagePeer.hex
        }
        let uuid = UUID()
        var leg = Leg(uuid: uuid, outgoing: true, timings: legTimings)
        leg.target = target
        leg.title = title
        legs[uuid] = leg
        do {
            _ = try await manager.controller.request(.start(call: uuid, handle: CallHandle(.generic, handleValue)))
        } catch {
            legs[uuid] = nil
            throw .request(error)
        }
        callsCounter.increment()
        broadcaster.send(.dialing(uuid, target))
        return uuid
    }

    /// Answers a ringing call (the answer is fulfilled when media connects).
    public func answer(_ call: UUID) async throws(CallRequestError) {
        _ = try await manager.controller.request(.answer(call: call))
    }

    /// Hangs up (or declines, if ringing).
    public func hangUp(_ call: UUID) async throws(CallRequestError) {
        _ = try await manager.controller.request(.end(call: call))
    }

    public func setHeld(_ call: UUID, _ held: Bool) async throws(CallRequestError) {
        _ = try await manager.controller.request(.setHeld(call: call, onHold: held))
    }

    public func setMuted(_ call: UUID, _ muted: Bool) async throws(CallRequestError) {
        _ = try await manager.controller.request(.setMuted(call: call, muted: muted))
    }

    public func playDTMF(_ call: UUID, _ digits: String) async throws(CallRequestError) {
        _ = try await manager.controller.request(.playDTMF(call: call, digits: digits))
    }

    /// Sets voice processing and always-prepared recording on a new session.
    private static func applyAudioModes<Policy>(_ configuration: CallNodeConfiguration, to session: AudioSessionOwner<Policy>) async throws {
        if let enabled = configuration.voiceProcessing {
            try await session.setVoiceProcessingEnabled(enabled, options: configuration.voiceProcessingOptions)
        } else if configuration.voiceProcessingOptions != VoiceProcessingOptions() {
            try await session.setVoiceProcessingEnabled(await session.isVoiceProcessingEnabled, options: configuration.voiceProcessingOptions)
        }
        if configuration.recordingAlwaysPrepared { try await session.setRecordingAlwaysPrepared(true) }
    }

    /// Bypasses voice processing (the microphone passes untouched) or ends the bypass, at once,
    /// mid-call too; cross-faded over 10 ms. It persists across calls.
    public func setVoiceProcessingBypassed(_ bypassed: Bool) async {
        if let systemSession { await systemSession.setVoiceProcessingBypassed(bypassed) }
        if let appSession { await appSession.setVoiceProcessingBypassed(bypassed) }
    }

    /// Whether voice processing runs on the microphone (see ``CallNodeConfiguration/voiceProcessing``).
    public var isVoiceProcessingEnabled: Bool {
        get async {
            if let systemSession { return await systemSession.isVoiceProcessingEnabled }
            if let appSession { return await appSession.isVoiceProcessingEnabled }
            return false
        }
    }

    /// Switches the audio between the backend's output and its speaker output (the session's
    /// speaker override; with a ``NodeAudioBackend`` the speaker is `--speaker`). Open devices
    /// are reopened on the new route at once.
    public func setSpeaker(_ on: Bool) async throws(AudioSessionError) {
        if let systemSession {
            var configuration = await systemSession.configuration
            configuration.outputOverride = on ? .speaker : .none
            try await systemSession.configure(configuration)
        } else if let appSession {
            var configuration = await appSession.configuration
            configuration.outputOverride = on ? .speaker : .none
            try await appSession.configure(configuration)
        }
    }

    /// The call's media statistics, once media is running.
    public func statistics(_ call: UUID) async -> MediaStatistics? {
        await legs[call]?.media?.statistics
    }

    /// Agents in the ICE pool (made, or being made, for the next calls).
    public var pooledICEAgents: Int { icePool.count }

    /// The UUIDs of live calls.
    public var liveCalls: [UUID] { Array(legs.keys) }

    /// Joins a session by ID at `relay`: no ringing and no contacts needed. Returns once the
    /// join is under way; follow ``events()`` (`sessionWaiting`, then `connected`, or
    /// `sessionFailed`). The participant the relay makes the TLS client places the call.
    ///
    /// - Parameters:
    ///   - startMuted: Join with the microphone muted.
    ///   - title: Shown to the other participant.
    public func join(session: String, relay: SignalAddress, title: String? = nil, startMuted: Bool = false) throws(CallNodeError) {
        guard isStarted, !isShutDown else { throw .notRunning }
        let identity = self.identity, limits = configuration.signalingLimits, broadcaster = self.broadcaster
        let weak = WeakNode(self)
        keep(Task {
            do {
                try await RelayClient.join(relay: relay.host, port: relay.port, session: session, identity: identity, limits: limits,
                                           waiting: { broadcaster.send(.sessionWaiting(session)) }) { connection, messages, isClient in
                    guard let node = weak.node else { return }
                    await node.joined(connection, session: session, placesCall: isClient, title: title, startMuted: startMuted)
                    await node.read(messages, on: connection)
                    await node.sessionConnectionClosed(connection)
                }
            } catch {
                broadcaster.send(.sessionFailed("\(error)"))
            }
        })
    }

    private func joined(_ connection: SignalingConnection, session: String, placesCall: Bool, title: String?, startMuted: Bool) async {
        sessionConnections[connection.id] = (session, startMuted)
        guard placesCall else { return }
        let uuid = UUID()
        var leg = Leg(uuid: uuid, outgoing: true, muted: startMuted, timings: legTimings)
        leg.target = .session(session)
        leg.connection = connection
        leg.peer = connection.peer
        leg.title = title
        leg.session = session
        leg.startMuted = startMuted
        legs[uuid] = leg
        do {
            _ = try await manager.controller.request(.start(call: uuid, handle: CallHandle(.generic, connection.peer.hex)))
            broadcaster.send(.dialing(uuid, .session(session)))
        } catch {
            legs[uuid] = nil
            broadcaster.send(.sessionFailed("\(error)"))
            connection.close()
        }
    }

    private func sessionConnectionClosed(_ connection: SignalingConnection) async {
        sessionConnections[connection.id] = nil
        for (uuid, leg) in legs where leg.connection?.id == connection.id {
            await connectionClosed(uuid, error: nil)
        }
    }

    // Tasks are created before they are stored: a task created inside a modify access of
    // actor state would start inside that access.
    private func keep(_ task: Task<Void, Never>) { tasks.append(task) }
    private func own(_ uuid: UUID, _ task: Task<Void, Never>) { legs[uuid]?.tasks.append(task) }

    // MARK: - The performer

    private func handle(_ request: ProviderRequest) async {
        switch request {
        case let .perform(action):
            await perform(action)
        case let .timedOut(action):
            await legEvent(action.action.callUUID, .end(.actionTimedOut("\(action.action.kind) timed out")))
        case let .callEnded(uuid, reason):
            await legEvent(uuid, .end(.endedByManager(reason)))
        case .didActivate:
            audioActive = true
            for uuid in Array(legs.keys) { await startMediaIfReady(uuid) }
        case .didDeactivate:
            audioActive = false
        }
    }

    private func perform(_ provider: ProviderAction) async {
        let uuid = provider.action.callUUID
        switch provider.action {
        case .start:
            guard legs[uuid] != nil else {
                try? await manager.fail(provider.id, reason: "no such call")
                return
            }
            legs[uuid]?.startAction = provider.id
            if let connection = legs[uuid]?.connection {
                // A session call: the join already made the connection.
                _ = await dialed(uuid, connection)
            } else {
                dial(uuid)
            }
        case .answer:
            await legEvent(uuid, .answering)
            do {
                try await sendOffer(uuid)
            } catch {
                legs[uuid]?.failure = "answering failed: \(error)"
                try? await manager.fail(provider.id, reason: "\(error)")
            }
        case .end:
            // Ending a call that still rings here declines it (the leg's state knows).
            await legEvent(uuid, .end(.hangUp))
            try? await manager.fulfill(provider.id)
        case let .setHeld(_, onHold):
            await legEvent(uuid, .setHeld(onHold))
            // The call is held here before the peer hears of it, so whoever sees the remote hold
            // (and answers it, say, by resuming) finds this side's state already changed.
            try? await manager.fulfill(provider.id)
            if let connection = legs[uuid]?.connection { try? await connection.send(.hold(onHold), call: uuid) }
        case let .setMuted(_, muted):
            let before = legs[uuid]?.state.muted ?? false
            if let error = await legEvent(uuid, .setMuted(muted)) {
                await legEvent(uuid, .setMuted(before))
                try? await manager.fail(provider.id, reason: "\(error)")
            } else {
                try? await manager.fulfill(provider.id)
            }
        case let .playDTMF(_, digits):
            do {
                try await legs[uuid]?.media?.sendDTMF(digits)
                try? await manager.fulfill(provider.id)
            } catch {
                try? await manager.fail(provider.id, reason: "\(error)")
            }
        case .setGroup:
            try? await manager.fulfill(provider.id)
        }
    }

    // MARK: - Signaling

    /// Opens the signaling connection of an outgoing call in its own task; the invitation goes
    /// out once TLS is up.
    private func dial(_ uuid: UUID) {
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
        let identity = self.identity, limits = configuration.signalingLimits
        let task = Task { [weak self] in
            do {
                let body: (SignalingConnection, SignalMessages) async -> Void = { connection, messages in
                    guard let self, await self.dialed(uuid, connection) else { return }
                    await self.read(messages, on: connection)
                }
                switch route {
                case let .direct(address, pin):
                    try await SignalingClient.connect(host: address.host, port: address.port, identity: identity, pin: pin,
                                                      limits: limits, body)
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
    private func dialed(_ uuid: UUID, _ connection: SignalingConnection) async -> Bool {
        guard legs[uuid] != nil else { return false }
        legs[uuid]?.connection = connection
        legs[uuid]?.peer = connection.peer
        await legEvent(uuid, .signalingReady)
        // The call counts as connecting before the invitation leaves: a peer that answers at
        // once (a web page on the same machine) can have its offer here while the send is
        // still being awaited.
        if let action = legs[uuid]?.startAction {
            try? await manager.fulfill(action)
            try? await manager.reportOutgoingCallStartedConnecting(uuid)
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
    private nonisolated func serve(_ connection: SignalingConnection, _ messages: SignalMessages) async {
        let heard = LastHeard()
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.closeWhenIdle(connection, heard: heard) }
            await read(messages, on: connection, heard: heard)
            group.cancelAll()
        }
        await connectionEnded(connection)
    }

    /// When a connection last delivered anything.
    private final class LastHeard: Sendable {
        private let instant = Locked(ContinuousClock.now)
        var value: ContinuousClock.Instant { instant.withLock { $0 } }
        func now() { instant.withLock { $0 = .now } }
    }

    private nonisolated func closeWhenIdle(_ connection: SignalingConnection, heard: LastHeard) async {
        let idle = configuration.signalingLimits.idleTimeout
        while !Task.isCancelled {
            guard (try? await Task.sleep(until: heard.value + idle, clock: .continuous)) != nil else { return }
            guard heard.value + idle <= .now else { continue }
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

    private nonisolated func servePage(_ connection: SignalingConnection, _ messages: SignalMessages) async {
        await pageConnected(connection)
        await serve(connection, messages)
        await pageDisconnected(connection)
    }

    private func pageConnected(_ connection: SignalingConnection) {
        webPages.append(connection)
        broadcaster.send(.webPage(connected: true, from: connection.remoteAddress))
    }

    private func pageDisconnected(_ connection: SignalingConnection) {
        webPages.removeAll { $0.id == connection.id }
        broadcaster.send(.webPage(connected: false, from: connection.remoteAddress))
    }

    /// The newest page not carrying a call.
    private func freeWebPage() -> SignalingConnection? {
        webPages.last { !carriesCall($0) }
    }

    private func carriesCall(_ connection: SignalingConnection) -> Bool {
        legs.values.contains { $0.connection?.id == connection.id } || sessionConnections[connection.id] != nil
    }

    private func connectionEnded(_ connection: SignalingConnection) async {
        for (uuid, leg) in legs where leg.connection?.id == connection.id {
            await connectionClosed(uuid, error: nil)
        }
    }

    /// Reads a connection's messages in order (off the actor: the sequence stays with the
    /// task that owns the connection).
    private nonisolated func read(_ messages: SignalMessages, on connection: SignalingConnection, heard: LastHeard? = nil) async {
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

    private func receive(_ envelope: SignalEnvelope, on connection: SignalingConnection) async {
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
    private func invited(_ uuid: UUID, _ invitation: Invitation, on connection: SignalingConnection) async {
        let fingerprint = connection.peer
        let handle = CallHandle(.generic, fingerprint.hex)
        let contact = store.contacts.withFingerprint(fingerprint.hex)
        var refusal: RejectReason?
        let joined = sessionConnections[connection.id]
        if let joined, invitation.session == joined.session {
            // Both sides entered this session ID: no ringing, no contact check (identities are
            // shown, not pinned).
            do {
                try await manager.reportNewIncomingCall(uuid, update: CallUpdate(remoteHandle: handle, localizedCallerName: invitation.displayName))
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
                try await manager.reportNewIncomingCall(uuid, update: CallUpdate(remoteHandle: handle, localizedCallerName: name))
            } catch {
                refusal = switch error {
                case .filteredByBlockList: .blocked
                case .filteredByDoNotDisturb: .doNotDisturb
                case .maximumCallsReached, .callUUIDAlreadyExists, .unsupportedHandle, .shutDown: .busy
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
    private func prepareICEEarly(_ uuid: UUID, role: IceRole) {
        guard legs[uuid] != nil, legs[uuid]?.ice == nil else { return }
        let (pooled, stale) = takePooledICE()
        let ice = configuration.ice
        let task = Task { () async throws -> PreparedICE in
            for entry in stale { await (try? await entry.task.value)?.agent.close() }
            let prepared: PreparedICE
            if let pooled, let made = try? await pooled.value {
                prepared = made
                do {
                    try await prepared.agent.setRole(role)
                } catch {
                    await prepared.agent.close()
                    throw error
                }
            } else {
                prepared = try await Self.makeICE(ice, role: role)
            }
            return try await self.adopt(prepared, for: uuid)
        }
        legs[uuid]?.ice = task
    }

    /// The call's prepared ICE agent (waiting for the early preparation, or making it now), with
    /// every candidate gathered so far in its local parameters.
    private func preparedICE(_ uuid: UUID, role: IceRole) async throws -> PreparedICE {
        prepareICEEarly(uuid, role: role)
        guard let task = legs[uuid]?.ice else { throw NegotiationError("the call ended while ICE was being prepared") }
        var prepared = try await task.value
        guard legs[uuid] != nil else { throw NegotiationError("the call ended while ICE was being prepared") }
        prepared.local.candidates = ((try? await prepared.agent.localCandidates()) ?? []).map(\.description)
        prepared.local.fingerprint = dtlsCertificate.fingerprint.sdpValue
        return prepared
    }

    /// Creates an ICE agent in `role` and starts gathering; the local parameters carry the
    /// credentials and a fresh SRTP key for every suite this node supports.
    private nonisolated static func makeICE(_ configuration: IceConfiguration, role: IceRole) async throws -> PreparedICE {
        var ice = configuration
        ice.role = role
        let agent = try await IceAgent(configuration: ice)
        let gathering: IceGathering
        do {
            gathering = try await agent.gather()
        } catch {
            await agent.close()
            throw error
        }
        let keys = SRTPSuite.allCases.reduce(into: [String: String]()) { $0[$1.rawValue] = SRTPKey.random(suite: $1).inlineKeyParameter }
        return PreparedICE(agent: agent, gathering: gathering,
                           local: LocalAudioParameters(iceUfrag: gathering.credentials.ufrag, icePwd: gathering.credentials.pwd, keys: keys))
    }

    /// Makes `prepared` the call's agent and follows its events; closes it if the call ended
    /// meanwhile (nobody else would).
    private func adopt(_ prepared: PreparedICE, for uuid: UUID) async throws -> PreparedICE {
        guard legs[uuid] != nil, legs[uuid]?.agent == nil else {
            await prepared.agent.close()
            throw NegotiationError("the call ended while ICE was being prepared")
        }
        legs[uuid]?.agent = prepared.agent
        watch(uuid, prepared.agent)
        return prepared
    }

    // MARK: - The ICE agent pool

    /// Tops the pool of agents up to its size, in the background. Called at start and when a
    /// call that may have taken one has heard audio or ended, so that making the next agent
    /// does not compete with a call being set up.
    private func fillICEPool() {
        guard isStarted, !isShutDown else { return }
        let ice = configuration.ice
        while icePool.count < configuration.iceAgentPool {
            icePool.append(PooledICE(task: Task { try await Self.makeICE(ice, role: .controlling) }, made: .now))
        }
    }

    /// The oldest pooled agent still fresh, if any, and the stale ones taken out before it
    /// (for the caller to close).
    private func takePooledICE() -> (Task<PreparedICE, any Error>?, [PooledICE]) {
        var stale: [PooledICE] = []
        while let first = icePool.first {
            icePool.removeFirst()
            if isFresh(first) { return (first.task, stale) }
            stale.append(first)
        }
        return (nil, stale)
    }

    /// A pooled agent's server-reflexive and relayed candidates name NAT bindings and TURN
    /// allocations, which age; host candidates do not.
    private func isFresh(_ pooled: PooledICE) -> Bool {
        let ice = configuration.ice
        guard ice.stunServer != nil || !ice.turnServers.isEmpty else { return true }
        return ContinuousClock.now - pooled.made < configuration.iceAgentPoolRefresh
    }

    /// Replaces pooled agents that aged out (run every refresh interval while servers are set).
    private func refreshICEPool() async {
        let stale = icePool.filter { !isFresh($0) }
        guard !stale.isEmpty else { return }
        icePool.removeAll { !isFresh($0) }
        fillICEPool()
        for entry in stale { await (try? await entry.task.value)?.agent.close() }
    }

    /// Closes every pooled agent (at shutdown).
    private func drainICEPool() async {
        let pooled = icePool
        icePool.removeAll()
        for entry in pooled { await (try? await entry.task.value)?.agent.close() }
    }

    /// The callee answered: gather, send the SDP offer, trickle the rest.
    private func sendOffer(_ uuid: UUID) async throws {
        guard let connection = legs[uuid]?.connection else { throw NegotiationError("the call has no signaling connection") }
        let prepared = try await preparedICE(uuid, role: .controlling)
        var local = prepared.local
        let offer = OfferAnswer.offer(sessionID: Self.sessionID(), capabilities: capabilities(for: connection, local: &local), local: local)
        legs[uuid]?.offer = offer
        try await connection.send(.offer(sdp: offer.serialized), call: uuid)
        try await manager.reportProgress(uuid, .offerSent)
        trickle(uuid, prepared.gathering, skipping: Set(local.candidates), on: connection)
    }

    /// The caller receives the offer: answer it and start ICE. The answer goes out first (the
    /// callee's checks wait for it), the call manager hears of both last.
    private func offered(_ uuid: UUID, sdp: String) async throws {
        guard legs[uuid]?.outgoing == true, let connection = legs[uuid]?.connection else { return }
        let offer = try SessionDescription(parsing: sdp)
        if let current = legs[uuid]?.negotiated {
            try await reoffered(uuid, offer, current: current, on: connection)
            return
        }
        let prepared = try await preparedICE(uuid, role: .controlled)
        var local = prepared.local
        let (answer, negotiated) = try OfferAnswer.answer(to: offer, sessionID: Self.sessionID(),
                                                          capabilities: capabilities(for: connection, local: &local), local: local)
        legs[uuid]?.negotiated = negotiated
        await legEvent(uuid, .negotiated)
        try await connection.send(.answer(sdp: answer.serialized), call: uuid)
        try await setRemote(uuid, negotiated)
        trickle(uuid, prepared.gathering, skipping: Set(local.candidates), on: connection)
        prepareMedia(uuid)
        try await manager.reportProgress(uuid, .offerReceived)
        try await manager.reportProgress(uuid, .answerSent)
    }

    /// The callee receives the answer and starts ICE.
    private func answered(_ uuid: UUID, sdp: String) async throws {
        guard legs[uuid]?.outgoing == false, let offer = legs[uuid]?.offer, legs[uuid]?.agent != nil else { return }
        let answer = try SessionDescription(parsing: sdp)
        let negotiated = try OfferAnswer.accept(answer: answer, to: offer, capabilities: capabilities)
        if let current = legs[uuid]?.negotiated {
            // The answer to an ICE restart: new credentials and candidates, the same media.
            await legEvent(uuid, .restartSettled)
            try Self.checkSameMedia(negotiated, as: current)
            legs[uuid]?.negotiated = negotiated
            try await setRemote(uuid, negotiated)
            return
        }
        legs[uuid]?.negotiated = negotiated
        await legEvent(uuid, .negotiated)
        try await setRemote(uuid, negotiated)
        prepareMedia(uuid)
        try await manager.reportProgress(uuid, .answerReceived)
    }

    // MARK: - ICE restart

    /// Restarts ICE on a connected call (RFC 8445 §9): new credentials and a new gathering
    /// here, offered again over signaling; the peer restarts too and answers. The media, its
    /// keys and the call go on; audio resumes once the new checks select a pair. The side that
    /// offered first (the callee) starts restarts, so two never cross; on the caller this
    /// throws. The node does this by itself while a connection stays lost
    /// (``CallNodeConfiguration/iceRestartInterval``).
    public func restartICE(_ call: UUID) async throws(CallNodeError) {
        guard let leg = legs[call], leg.negotiated != nil else { throw .noSuchCall(call) }
        guard !leg.outgoing else { throw .restartFromCaller }
        do {
            try await restart(call)
        } catch {
            throw .restartFailed("\(error)")
        }
    }

    private func restart(_ uuid: UUID) async throws {
        guard let connection = legs[uuid]?.connection, let agent = legs[uuid]?.agent, let previous = legs[uuid]?.offer,
              var local = try await legs[uuid]?.ice?.value.local
        else { throw NegotiationError("the call has no offer to restart") }
        local.fingerprint = dtlsCertificate.fingerprint.sdpValue
        guard legs[uuid]?.state.restartPending == false else { throw NegotiationError("an ICE restart is already waiting for the peer's answer") }
        await legEvent(uuid, .restartOffered)
        let gathering: IceGathering
        do {
            gathering = try await agent.restart()
        } catch {
            await legEvent(uuid, .restartSettled)
            throw error
        }
        local.iceUfrag = gathering.credentials.ufrag
        local.icePwd = gathering.credentials.pwd
        local.candidates = ((try? await agent.localCandidates()) ?? []).map(\.description)
        // DTLS roles stay as the first exchange settled them (RFC 5763 §5).
        if let settled = legs[uuid]?.negotiated?.dtls?.setup { local.offerSetup = settled }
        var offer = OfferAnswer.offer(sessionID: previous.origin.sessionID, capabilities: capabilities, local: local)
        offer.origin.sessionVersion = previous.origin.sessionVersion + 1
        legs[uuid]?.offer = offer
        logger.info("call \(uuid): ICE restart \(legs[uuid]?.state.restarts ?? 0)")
        broadcaster.send(.iceRestarted(uuid, byPeer: false))
        do {
            try await connection.send(.offer(sdp: offer.serialized), call: uuid)
        } catch {
            await legEvent(uuid, .restartSettled)
            throw error
        }
        // After the offer: candidates that overtook it would join the peer's old round.
        trickle(uuid, gathering, skipping: Set(local.candidates), on: connection)
    }

    /// The caller receives an offer for a call that already has media: an ICE restart when the
    /// credentials changed (restart here too, answer with the new ones), otherwise the same
    /// answer again. The media and its keys must stay as they are.
    private func reoffered(_ uuid: UUID, _ offer: SessionDescription, current: NegotiatedAudio, on connection: SignalingConnection) async throws {
        guard let agent = legs[uuid]?.agent, var local = try await legs[uuid]?.ice?.value.local else {
            throw NegotiationError("a new offer came before the call had ICE")
        }
        local.fingerprint = dtlsCertificate.fingerprint.sdpValue
        local.iceUfrag = await agent.localCredentials.ufrag
        local.icePwd = await agent.localCredentials.pwd
        let peek = try OfferAnswer.answer(to: offer, sessionID: Self.sessionID(), capabilities: capabilities, local: local).negotiated
        try Self.checkSameMedia(peek, as: current)
        let restarting = peek.remoteIceUfrag != current.remoteIceUfrag || peek.remoteIcePwd != current.remoteIcePwd
        var gathering: IceGathering?
        if restarting {
            let round = try await agent.restart()
            local.iceUfrag = round.credentials.ufrag
            local.icePwd = round.credentials.pwd
            gathering = round
        }
        local.candidates = ((try? await agent.localCandidates()) ?? []).map(\.description)
        let (answer, negotiated) = try OfferAnswer.answer(to: offer, sessionID: Self.sessionID(), capabilities: capabilities, local: local)
        legs[uuid]?.negotiated = negotiated
        try await connection.send(.answer(sdp: answer.serialized), call: uuid)
        guard let gathering else { return }
        logger.info("call \(uuid): ICE restart asked by the peer")
        broadcaster.send(.iceRestarted(uuid, byPeer: true))
        try await setRemote(uuid, negotiated)
        trickle(uuid, gathering, skipping: Set(local.candidates), on: connection)
    }

    /// A later offer or answer may change ICE, not the media: the same suite and keys, the
    /// same payload types.
    private static func checkSameMedia(_ next: NegotiatedAudio, as current: NegotiatedAudio) throws {
        guard next.cryptoSuite == current.cryptoSuite, next.localKey == current.localKey, next.remoteKey == current.remoteKey else {
            throw NegotiationError("a new offer or answer may not change the SRTP keys of a running call")
        }
        guard next.dtls == current.dtls else {
            throw NegotiationError("a new offer or answer may not change the DTLS certificate or role of a running call")
        }
        guard next.payloadType == current.payloadType else {
            throw NegotiationError("a new offer or answer may not change the Opus payload type of a running call")
        }
    }

    private func restartFailed(_ uuid: UUID, _ error: any Error) {
        logger.warning("call \(uuid): ICE restart failed: \(error)")
    }

    /// Gives the call's agent the peer's credentials and the candidates its SDP carried, in one
    /// step; candidate lines that do not parse are reported and skipped.
    private func setRemote(_ uuid: UUID, _ negotiated: NegotiatedAudio) async throws {
        guard let agent = legs[uuid]?.agent else { throw NegotiationError("the call has no ICE agent") }
        let candidates = resolvingNames(uuid, parseCandidates(uuid, negotiated.remoteCandidates), agent: agent)
        let skipped = try await agent.setRemote(IceCredentials(ufrag: negotiated.remoteIceUfrag, pwd: negotiated.remoteIcePwd),
                                                candidates: candidates, endOfCandidates: negotiated.remoteEndOfCandidates)
        for problem in skipped { logger.debug("\(problem)") }
    }

    /// Trickled candidates.
    private func addRemoteCandidates(_ uuid: UUID, _ lines: [String], end: Bool) async {
        guard let agent = legs[uuid]?.agent else { return }
        let candidates = resolvingNames(uuid, parseCandidates(uuid, lines), agent: agent)
        if !candidates.isEmpty, let skipped = try? await agent.addRemoteCandidates(candidates) {
            for problem in skipped { logger.debug("\(problem)") }
        }
        if end { try? await agent.endOfRemoteCandidates() }
    }

    /// The candidates with IP addresses, now; those a browser named by mDNS (`….local`) are
    /// resolved in the background and added when they resolve. Where they do not (no mDNS
    /// here), the browser's checks still reach this node and ICE learns its address as a
    /// peer-reflexive candidate.
    private func resolvingNames(_ uuid: UUID, _ candidates: [IceCandidate], agent: IceAgent) -> [IceCandidate] {
        var usable: [IceCandidate] = []
        for candidate in candidates {
            guard !candidate.hasIPAddress, HostNameResolver.isMDNSName(candidate.address) else {
                usable.append(candidate)
                continue
            }
            let logger = self.logger
            own(uuid, Task {
                guard let address = await HostNameResolver.resolve(candidate.address) else {
                    logger.info("call \(uuid): the peer's candidate \(candidate.address) does not resolve here; its checks will reveal the address")
                    return
                }
                var resolved = candidate
                resolved.address = address
                _ = try? await agent.addRemoteCandidates([resolved])
            })
        }
        return usable
    }

    private func parseCandidates(_ uuid: UUID, _ lines: [String]) -> [IceCandidate] {
        lines.compactMap { line in
            do {
                return try IceCandidate(parsing: line)
            } catch {
                broadcaster.send(.peerError("call \(uuid): \(error)"))
                return nil
            }
        }
    }

    /// Sends local candidates as they are found (except those the SDP already carried), then
    /// end-of-candidates.
    private func trickle(_ uuid: UUID, _ gathering: IceGathering, skipping sent: Set<String>, on connection: SignalingConnection) {
        let task = Task {
            for await candidate in gathering.candidates where !sent.contains(candidate.description) {
                if Task.isCancelled { return }
                try? await connection.send(.candidates([candidate.description], end: false), call: uuid)
            }
            // A restart replaced this round: its end-of-candidates would end the new one.
            if Task.isCancelled { return }
            try? await connection.send(.candidates([], end: true), call: uuid)
        }
        legs[uuid]?.trickle?.cancel()
        legs[uuid]?.trickle = task
        own(uuid, task)
    }

    /// The capabilities for a call on `connection`: a web page gets DTLS whatever this node's
    /// own preference (browsers speak nothing else), and WebRTC's stream ids in `local`.
    private func capabilities(for connection: SignalingConnection, local: inout LocalAudioParameters) -> AudioCapabilities {
        var capabilities = self.capabilities
        if connection.origin == .webPage {
            capabilities.keyExchange = .dtls
            local.stream = LocalStream(streamID: "callnode", trackID: "callnode-audio", cname: "callnode")
        }
        return capabilities
    }

    private var capabilities: AudioCapabilities {
        var capabilities = AudioCapabilities()
        capabilities.opusPayloadType = Int(configuration.media.payloadType)
        capabilities.maxAverageBitrate = configuration.media.opus.bitrate
        capabilities.packetTime = Int(configuration.media.opus.frameDuration.components.seconds * 1000
            + configuration.media.opus.frameDuration.components.attoseconds / 1_000_000_000_000_000)
        capabilities.useDTX = configuration.media.opus.discontinuousTransmission
        capabilities.telephoneEventPayloadType = Int(configuration.media.telephoneEventPayloadType)
        capabilities.keyExchange = configuration.keyExchange
        return capabilities
    }

    private static func sessionID() -> String { String(UInt64.random(in: 1...UInt64(Int64.max))) }

    // MARK: - ICE and media

    private func watch(_ uuid: UUID, _ agent: IceAgent) {
        own(uuid, Task { [weak self] in
            for await event in agent.events {
                await self?.iceEvent(uuid, event)
            }
        })
    }

    private func iceEvent(_ uuid: UUID, _ event: IceEvent) async {
        guard legs[uuid] != nil else { return }
        switch event {
        case let .selectedPair(pair):
            broadcaster.send(.selectedPair(uuid, SelectedPairInfo(localType: pair.local.type, remoteType: pair.remote.type,
                                                                   transport: pair.local.transport,
                                                                   local: "\(pair.local.address):\(pair.local.port)",
                                                                   remote: "\(pair.remote.address):\(pair.remote.port)")))
        case .stateChanged(.connected):
            if legs[uuid]?.state.phase.iceHasConnected == false {
                await mediaConnected(uuid)
            } else {
                await legEvent(uuid, .iceConnected)
            }
        case .stateChanged(.disconnected):
            await legEvent(uuid, .iceDisconnected)
        case .stateChanged(.failed):
            await legEvent(uuid, .end(.failed("ICE failed: no candidate pair worked (try --stun or --turn)")))
        default:
            break
        }
    }

    /// Starts building the call's media actor as soon as the offer and answer are done, off this
    /// actor and while the connectivity checks run, so that ICE connecting only has to start it.
    /// Nothing is opened until it starts. With DTLS-SRTP it waits for ICE to connect: the
    /// handshake runs over the selected pair, and a ClientHello sent before would only be lost
    /// and retransmitted a second later.
    private func prepareMedia(_ uuid: UUID) {
        guard let leg = legs[uuid], leg.mediaPreparation == nil, let agent = leg.agent, let negotiated = leg.negotiated else { return }
        if negotiated.dtls != nil && !leg.state.phase.iceHasConnected { return }
        let base = configuration.media, clock = self.clock
        let systemSession = self.systemSession, appSession = self.appSession
        let transport = IceMediaTransport(agent: agent)
        var association: DTLSAssociation?
        if let dtls = negotiated.dtls {
            do {
                association = try makeDTLS(dtls, over: transport)
            } catch {
                legs[uuid]?.mediaPreparation = Task { throw error }
                return
            }
            legs[uuid]?.dtls = association
        }
        legs[uuid]?.mediaPreparation = Task.detached { [association] in
            try await Self.makeMedia(negotiated: negotiated, base: base, transport: transport, dtls: association, clock: clock,
                                     systemSession: systemSession, appSession: appSession)
        }
    }

    /// A DTLS association over `transport` in the role the SDP settled, checking the
    /// peer's certificate against the fingerprint its SDP carried.
    private func makeDTLS(_ dtls: NegotiatedDTLS, over transport: IceMediaTransport) throws -> DTLSAssociation {
        guard let fingerprint = DTLSFingerprint(sdp: dtls.remoteFingerprint) else {
            throw NegotiationError("the peer's a=fingerprint '\(dtls.remoteFingerprint)' is not a hash and hex digits")
        }
        let endpoint = try DTLSEndpoint(certificate: dtlsCertificate, role: dtls.setup == .active ? .client : .server,
                                        remoteFingerprint: fingerprint)
        let association = DTLSAssociation(endpoint: endpoint, handshakeTimeout: configuration.dtlsHandshakeTimeout) { [weak transport] datagram in
            await transport?.send(datagram)
        }
        transport.setDTLSHandler { datagram in association.receive(datagram) }
        return association
    }

    private nonisolated static func makeMedia(negotiated: NegotiatedAudio, base: MediaConfiguration, transport: IceMediaTransport,
                                              dtls: DTLSAssociation?, clock: MediaClock,
                                              systemSession: AudioSessionOwner<SystemOwned>?,
                                              appSession: AudioSessionOwner<AppOwned>?) async throws -> MediaActor {
        let keys: MediaKeys
        if let dtls {
            let exported = try await dtls.keys()
            keys = MediaKeys(outbound: exported.outbound, inbound: exported.inbound)
        } else {
            guard let suite = SRTPSuite(rawValue: negotiated.cryptoSuite) else {
                throw NegotiationError("unsupported SRTP suite \(negotiated.cryptoSuite)")
            }
            keys = MediaKeys(outbound: try SRTPKey(suite: suite, inlineKeyParameter: negotiated.localKey),
                             inbound: try SRTPKey(suite: suite, inlineKeyParameter: negotiated.remoteKey))
        }
        var media = base
        media.payloadType = UInt8(negotiated.payloadType)
        if let pt = negotiated.telephoneEventPayloadType { media.telephoneEventPayloadType = UInt8(pt) }
        // A peer's odd choice (a static type, one already in use) means no redundancy, not a failed call.
        media.redundancyPayloadType = negotiated.redundancyPayloadType.flatMap { media.isUsableRedundancyPayloadType($0) ? UInt8($0) : nil }
        if let limit = negotiated.maxSendBitrate { media.opus.bitrate = max(6_000, min(media.opus.bitrate, limit)) }
        media.opus.inbandFEC = negotiated.sendInbandFEC
        media.opus.discontinuousTransmission = negotiated.sendDTX
        let source: any AudioSource, sink: any AudioSink
        if let systemSession {
            source = try await systemSession.microphone()
            sink = try await systemSession.output()
        } else if let appSession {
            source = try await appSession.microphone()
            sink = try await appSession.output()
        } else {
            throw NegotiationError("no audio session")
        }
        return try MediaActor(configuration: media, transport: transport, keys: keys,
                              source: source, sink: sink, clock: clock)
    }

    /// ICE is ready: build the media actor on the session's devices, report media connected
    /// (which fulfils the answer and, in system-owned mode, activates audio).
    private func mediaConnected(_ uuid: UUID) async {
        guard let leg = legs[uuid], leg.agent != nil, leg.negotiated != nil else {
            legs[uuid]?.failure = "ICE connected before the offer and answer completed"
            return
        }
        await legEvent(uuid, .iceConnected)
        prepareMedia(uuid)
        do {
            guard let preparation = legs[uuid]?.mediaPreparation else { throw NegotiationError("media was not prepared") }
            let actor = try await preparation.value
            guard legs[uuid] != nil else { return }  // ended meanwhile; the actor never started
            legs[uuid]?.media = actor
            if let negotiated = legs[uuid]?.negotiated {
                let dtls = legs[uuid]?.dtls
                let suite = dtls?.established?.suite.rawValue ?? negotiated.cryptoSuite
                broadcaster.send(.secured(uuid, MediaSecurity(
                    keyExchange: dtls == nil ? .sdes : .dtls, suite: suite, handshake: dtls?.handshakeTime,
                    peerFingerprint: negotiated.dtls?.remoteFingerprint)))
            }
            own(uuid, Task { [weak self] in
                for await event in actor.events {
                    await self?.mediaEvent(uuid, event)
                }
            })
        } catch {
            await legEvent(uuid, .end(.failed("media could not start: \(error)")))
            return
        }
        await legEvent(uuid, .mediaReady)
        do {
            try await manager.reportMediaConnected(uuid)
        } catch {
            logger.warning("media connected for call \(uuid), but: \(error)")
        }
        if let appSession, await !appSession.isActive {
            // CallKit-free mode: this node is the one owner of activation.
            do {
                _ = try await appSession.activate()
                audioActive = true
            } catch {
                await legEvent(uuid, .end(.failed("audio could not start: \(error)")))
                return
            }
        } else if appSession != nil {
            audioActive = true
        }
        await startMediaIfReady(uuid)
    }

    /// Media starts once it is ready and the audio session is active, whichever comes last.
    private func startMediaIfReady(_ uuid: UUID) async {
        guard audioActive else { return }
        await legEvent(uuid, .audioActivated)
    }

    /// Starts the call's media with the microphone as the leg's state says: a mute or hold set
    /// before media existed (while the call rang) holds from the first frame.
    private func startMedia(_ uuid: UUID, microphoneMuted: Bool) async {
        guard let leg = legs[uuid], let media = leg.media else { return }
        do {
            try await media.setMuted(microphoneMuted)
            try await media.start()
            let setup = ContinuousClock.now - leg.began
            setupTimer.recordNanoseconds(Int64(setup.components.seconds) * 1_000_000_000 + setup.components.attoseconds / 1_000_000_000)
            broadcaster.send(.connected(uuid, setup: setup))
            if leg.startMuted { _ = try? await manager.controller.request(.setMuted(call: uuid, muted: true)) }
        } catch {
            await legEvent(uuid, .end(.failed("audio could not start: \(error)")))
        }
    }

    private func mediaEvent(_ uuid: UUID, _ event: MediaEvent) async {
        switch event {
        case let .statistics(statistics): broadcaster.send(.statistics(uuid, statistics))
        case let .dtmf(digit): broadcaster.send(.dtmf(uuid, digit))
        case .firstAudio:
            // The pooled agent this call may have taken is replaced now, not while it was
            // being set up.
            fillICEPool()
            if let began = legs[uuid]?.began { broadcaster.send(.firstAudio(uuid, after: ContinuousClock.now - began)) }
        case .inboundStalled: await legEvent(uuid, .mediaStalled)
        case .inboundResumed: await legEvent(uuid, .mediaResumed)
        case let .playoutReset(reset): broadcaster.send(.playoutReset(uuid, reset))
        case .sourceEnded, .remoteEnded: break
        }
    }

    // MARK: - Ending

    private func connectionClosed(_ uuid: UUID, error: (any Error)?) async {
        guard legs[uuid] != nil else { return }
        let detail = error.map { "\($0)" } ?? "the signaling connection closed"
        // Recorded first: failing the start action makes the manager end the call, and that
        // end may be handled before this one.
        let failure = legs[uuid]?.failure ?? detail
        legs[uuid]?.failure = failure
        if let action = legs[uuid]?.startAction, legs[uuid]?.connection == nil {
            try? await manager.fail(action, reason: detail)
        }
        await legEvent(uuid, .end(.signalingClosed(detail)))
    }

    // MARK: - The leg's state machine

    /// Feeds the call's state machine and performs what it returns, in order. Returns the
    /// error of a microphone change that failed (a device that would not reopen).
    @discardableResult
    private func legEvent(_ uuid: UUID, _ event: LegEvent) async -> (any Error)? {
        guard var state = legs[uuid]?.state else { return nil }
        let actions = state.handle(event, now: configuration.clock.now)
        legs[uuid]?.state = state
        var failure: (any Error)?
        for action in actions {
            switch action {
            case let .send(message):
                guard let connection = legs[uuid]?.connection else { continue }
                try? await connection.send(message, call: message == .keepAlive ? nil : uuid)
            case let .arm(timer, delay):
                arm(uuid, timer, after: delay)
            case let .cancel(timer):
                legs[uuid]?.timers.removeValue(forKey: timer)?.task.cancel()
            case let .setMicrophone(muted):
                do { try await legs[uuid]?.media?.setMuted(muted) } catch { failure = failure ?? error }
            case let .startMedia(muted):
                await startMedia(uuid, microphoneMuted: muted)
            case .restartICE:
                do { try await restart(uuid) } catch { restartFailed(uuid, error) }
            case .reportConnectionLost:
                logger.info("call \(uuid): connection lost")
                try? await manager.reportConnectionLost(uuid)
                broadcaster.send(.connectionLost(uuid))
            case .reportConnectionRestored:
                logger.info("call \(uuid): connection restored")
                try? await manager.reportConnectionRestored(uuid)
                broadcaster.send(.connectionRestored(uuid))
            case .tearDown:
                await teardown(uuid)
            case let .reportEnded(reason):
                try? await manager.reportCallEnded(uuid, reason: reason)
            }
        }
        return failure
    }

    /// Arms a leg timer on the node's clock; its firing comes back as an event.
    private func arm(_ uuid: UUID, _ timer: LegTimer, after delay: Duration) {
        let clock = configuration.clock
        let deadline = clock.now + delay
        timerGeneration += 1
        let generation = timerGeneration
        let task = Task { [weak self] in
            do { try await clock.sleep(until: deadline) } catch { return }
            await self?.timerFired(uuid, timer, generation: generation)
        }
        legs[uuid]?.timers[timer]?.task.cancel()
        legs[uuid]?.timers[timer] = (generation, task)
    }

    private func timerFired(_ uuid: UUID, _ timer: LegTimer, generation: UInt64) async {
        guard legs[uuid]?.timers[timer]?.generation == generation else { return }
        legs[uuid]?.timers[timer] = nil
        await legEvent(uuid, .timerFired(timer))
    }

    /// Stops the call's media and ICE and closes its signaling (the leg's state has ended).
    private func teardown(_ uuid: UUID) async {
        guard let leg = legs.removeValue(forKey: uuid) else { return }
        let duration = leg.state.connectedSince.map { configuration.clock.now - $0 }
        var detail: String?
        if case let .ended(end) = leg.state.phase { detail = end.detail }
        endDetails[uuid] = (leg.failure ?? detail, duration)
        for (_, timer) in leg.timers { timer.task.cancel() }
        for task in leg.tasks { task.cancel() }
        leg.ice?.cancel()
        leg.mediaPreparation?.cancel()
        // close_notify goes out while the path is still there: a browser sees the end at once.
        await leg.dtls?.close()
        await leg.media?.stop()
        await leg.agent?.close()
        leg.connection?.close()
        leg.connectionTask?.cancel()
        fillICEPool()
        if legs.isEmpty, let appSession, await appSession.isActive {
            try? await appSession.deactivate()
            audioActive = false
        }
    }

    private func managerEvent(_ event: CallEvent) async {
        switch event {
        case let .callEnded(uuid, reason):
            // Ends the manager performed itself (ring timeout, failed answer) reach us here too;
            // the leg's state ends the call once, whichever of the two comes first.
            await legEvent(uuid, .end(.endedByManager(reason)))
            let details = endDetails.removeValue(forKey: uuid)
            var detail = details?.detail
            if reason == .failed, let audioFailure {
                // The device is what the user can fix, so it comes first, whatever else failed in
                // the race that followed it (media that could not start, the peer hanging up).
                let audio = "the audio devices could not open: \(audioFailure)"
                if let other = detail, !other.contains(audioFailure) { detail = "\(audio); \(other)" } else if detail == nil { detail = audio }
            }
            broadcaster.send(.ended(uuid, reason: reason, detail: detail, duration: details?.duration))
            // A later call's failure must not be blamed on this one's devices.
            if legs.isEmpty { audioFailure = nil }
        case let .session(uuid, status):
            broadcaster.send(.session(uuid, status))
        case .audioActivated:
            audioFailure = nil
        case .incomingCall, .actionCompleted, .audioDeactivated, .doNotDisturbChanged, .ringtoneFailed:
            break
        case let .audioActivationFailed(reason):
            // The manager ends the calls that needed audio next; their end says why.
            audioFailure = reason
        }
    }
}


/// A weak reference to a node for the tasks it owns, so they do not keep it alive.
private final class WeakNode: Sendable {
    weak let node: CallNode?
    init(_ node: CallNode) { self.node = node }
}
