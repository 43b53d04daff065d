import AudioSession
import Calls
import Foundation
import DTLS
import ICE
import Logging
import Media
import Metrics
import POSIX
import SDP
import ServiceLifecycle
import Signaling
import Locking

/// A call node: identity, contacts, the signaling listener, the call manager, the audio
/// session, and one ``CallLeg`` per call (its signaling, ICE, DTLS, media and timers).
///
/// The node is a router and the call manager's performer (CallKit's provider delegate): it
/// admits calls, hands each its leg, and routes the manager's actions, the call's messages and
/// audio activation to that leg, which does the work and reports progress back. In the default
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
    nonisolated let dtlsCertificate: DTLSCertificate
    public nonisolated let configuration: CallNodeConfiguration
    public nonisolated let store: CallStore
    public nonisolated let manager: CallManager
    /// The bound signaling address (with the real port when the configuration asked for 0).
    public nonisolated let listenAddress: SignalAddress?

    let listener: SignalingListener?
    let systemSession: AudioSessionOwner<SystemOwned>?
    let appSession: AudioSessionOwner<AppOwned>?
    let clock: MediaClock
    let logger: Logger
    let broadcaster = EventBroadcaster<NodeEvent>()
    /// The handle each call carried by another dialect has (`sip:alice@example.org`): events
    /// name such peers by its hash, a person by the handle (``handle(of:)``).
    let dialectHandles = Locked<[UUID: String]>([:])

    /// The handle of a live call another dialect carries (a SIP address, a line's name); nil
    /// for calls with nodes and pages, named by their fingerprints.
    public nonisolated func handle(of call: UUID) -> String? { dialectHandles.withLock { $0[call] } }
    /// Every event the node sends, as metrics for the process's metrics backend.
    let metrics = NodeMetrics()

    /// The router's one piece of per-call state: each call's leg, and its connection.
    var legs: [UUID: CallLeg] = [:]
    var legConnections: [UUID: ObjectIdentifier] = [:]
    /// The calls carried on this node's own signaling (with other nodes, with pages): their
    /// dialects, which the connections' envelopes go to. (SIP's go through its router.)
    var envelopes: [UUID: EnvelopeDialect] = [:]
    /// The task running each leg's children (``CallLeg/run()``), until they are all done.
    var legRuns: [UUID: Task<Void, Never>] = [:]
    var endDetails: [UUID: (detail: String?, duration: Duration?)] = [:]
    /// The last calls this node's user hung up (oldest first, at most 256): a peer that tries to
    /// resume one of them is told it was hung up rather than that it is gone.
    var hungUpHere: [UUID] = []
    var audioActive = false
    /// Calls waiting for the app-owned session's one activation while it runs (CallKit-free
    /// mode: this node is its one owner).
    var waitingForAudio: [UUID] = []
    /// Each call's port on the audio session's bridge, once its media is built.
    var ports: [UUID: BridgePortID] = [:]
    /// Why the audio session last failed to activate (system-owned mode), until it next works.
    var audioFailure: String?
    /// Tasks that run as long as the node does, cancelled and waited for by ``shutdown()``.
    var tasks: [Task<Void, Never>] = []
    /// Tasks that end on their own (a session join, closing agents, one relay registration):
    /// each forgets itself when done, so a node that runs for months does not keep them all.
    var transientTasks: [UUID: Task<Void, Never>] = [:]
    /// The task that keeps this node's conference in a room (``keepConference(in:pin:)``).
    var roomKeeper: Task<Void, Never>?
    /// The one-time work `start()` does off the pool (replaceable in tests, to make it slow).
    var warmUp: @Sendable () -> Void
    /// Whether that work has finished.
    var isWarmedUp = false
    /// The task keeping this node registered at its relay.
    var relayRegistration: Task<Void, Never>?
    var isStarted = false
    var isShutDown = false
    /// Draining (``drain(grace:)``): the calls in progress go on, new ones are refused.
    var isDraining = false
    /// Who waits for the last call to end (a drain).
    var noCallsWaiters: [AsyncStream<Void>.Continuation] = []
    /// Agents made and gathering ahead of calls (``CallNodeConfiguration/iceAgentPool``).
    let icePool: IcePool
    /// Connections that came from this node's own session joins: their invitations are
    /// answered without ringing or contact checks.
    var sessionConnections: [ObjectIdentifier: (session: String, startMuted: Bool)] = [:]
    /// The web port's servers (see ``serveWeb(host:port:secret:)``) and the pages connected to them.
    var webServers: [WebSignalingServer] = []
    /// SIP's agent and calls, once ``listenSIP(_:)`` was called.
    var sipRouter: SIPRouter?
    var webPages: [SignalingConnection] = []
    /// End-to-end encrypted groups this node is in, by their publishing call.
    var groups: [UUID: GroupState] = [:]

    /// What every call's leg shares with the node.
    struct Services: Sendable {
        let configuration: CallNodeConfiguration
        let identity: NodeIdentity
        let dtlsCertificate: DTLSCertificate
        let store: CallStore
        let manager: CallManager
        let broadcaster: EventBroadcaster<NodeEvent>
        let logger: Logger
        let clock: MediaClock
        let systemSession: AudioSessionOwner<SystemOwned>?
        let appSession: AudioSessionOwner<AppOwned>?
        let icePool: IcePool
        /// The handle of each call another dialect carries (`sip:alice@example.org`).
        let dialectHandles: Locked<[UUID: String]>
        /// How a leg tells the router what it keeps of the call.
        let report: @Sendable (UUID, LegReport) async -> Void
        /// Reads a connection's messages and routes them.
        let read: @Sendable (SignalMessages, SignalingConnection) async -> Void
    }

    var services: Services {
        let weak = WeakNode(self)
        return Services(configuration: configuration, identity: identity, dtlsCertificate: dtlsCertificate, store: store,
                        manager: manager, broadcaster: broadcaster, logger: logger, clock: clock, systemSession: systemSession,
                        appSession: appSession, icePool: icePool, dialectHandles: dialectHandles,
                        report: { uuid, report in await weak.node?.legReport(uuid, report) },
                        read: { messages, connection in await weak.node?.read(messages, on: connection) })
    }

    /// ``shutdown()`` is the way out (it hangs up and closes every socket in order); a started
    /// node released without it at least stops what it started (its tasks hold it weakly, so
    /// they would run on, serving nobody).
    deinit {
        for task in tasks { task.cancel() }
        for task in transientTasks.values { task.cancel() }
        for run in legRuns.values { run.cancel() }
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
        let identity = self.identity
        warmUp = {
            try? SRTPLibrary.initialize()
            SignalingConnection.prepareToDial(as: identity)
        }
        store = try CallStore(path: configuration.home + "/callnode.sqlite")
        icePool = IcePool(configuration: configuration)
        let clock = configuration.mediaClock ?? MediaClock(frameDuration: configuration.media.opus.frameDuration)
        self.clock = clock
        // The ringtone plays on the speaker route of the node's own backend while a call rings.
        let backend = configuration.audio
        let ringer = try configuration.provider.ringtoneSound.map { path in
            try Ringer(soundPath: path, output: { backend.makePlayback(device: backend.speakerOutput, format: AudioFormat()) },
                              clock: clock)
        }
        var sessionConfiguration = AudioSessionConfiguration()
        sessionConfiguration.category = configuration.playbackOnly ? .playback : .playAndRecord
        sessionConfiguration.mode = .voiceChat
        if configuration.appOwnedAudio {
            let session = AudioSessionOwner<AppOwned>(name: "callnode app audio", configuration: sessionConfiguration,
                                                      backend: configuration.audio, clock: configuration.clock)
            appSession = session
            systemSession = nil
            if configuration.playbackOnly { await session.setAutomaticConfiguration(false) }
            try await Self.applyAudioModes(configuration, to: session)
            manager = try await CallManager(configuration: Self.provider(configuration), audio: .appOwned, store: store, ringer: ringer,
                                            clock: configuration.clock, wallClock: configuration.wallClock)
        } else {
            let session = AudioSessionOwner<SystemOwned>(name: "callnode call audio", configuration: sessionConfiguration,
                                                         backend: configuration.audio, clock: configuration.clock)
            systemSession = session
            appSession = nil
            if configuration.playbackOnly { await session.setAutomaticConfiguration(false) }
            try await Self.applyAudioModes(configuration, to: session)
            manager = try await CallManager(configuration: Self.provider(configuration), audio: .systemOwned(session), store: store, ringer: ringer,
                                            clock: configuration.clock, wallClock: configuration.wallClock)
        }
        if let address = configuration.listenAddress, configuration.signalNetwork != nil {
            listener = nil
            listenAddress = address
        } else if let address = configuration.listenAddress {
            let listener = try await SignalingListener(host: address.host, port: address.port, identity: identity,
                                                       limits: configuration.signalingLimits)
            self.listener = listener
            listenAddress = SignalAddress(host: address.host, port: listener.port)
        } else {
            listener = nil
            listenAddress = nil
        }
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
        // Contacts and blocks another process (the command line) changes apply at once.
        store.watchForChanges()
        let recorded = broadcaster.subscribe(bufferingNewest: 4096), metrics = self.metrics
        keep(Task {
            for await event in recorded { metrics.record(event) }
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
        keep(Task { _ = await clock.run() })  // a manual clock's returns at once
        // One-time costs that would otherwise fall on the first call's setup: libsrtp's start
        // (its crypto kernel tests every cipher, ~15 ms, between the keys and the first packet)
        // and the TLS settings a dial uses.
        // They run on a thread of their own (they would hold a pool thread for their ~15 ms),
        // and the node keeps a task waiting for them: a node shut down at once (a CLI dial that
        // fails in a millisecond) must not let the process exit while libsrtp is still in
        // libcrypto, whose exit handlers free the locks that thread is taking.
        let warmUp = self.warmUp, weak = WeakNode(self)
        if configuration.warmsUpInline {
            warmUp()
            isWarmedUp = true
        } else {
            keepUntilDone {
                do {
                    try await SystemThread.run(name: "callnode-warmup") { warmUp() }
                } catch {
                    warmUp()  // no thread to be had: warm up here rather than not at all
                }
                await weak.node?.finishWarmUp()
            }
        }
        watchAudioSession()
        watchHostNetwork()
        icePool.open()
        if configuration.iceAgentPool > 0, icePool.ages {
            let refresh = configuration.iceAgentPoolRefresh, timerClock = configuration.clock, pool = icePool
            keep(Task {
                while !Task.isCancelled {
                    try? await timerClock.sleep(until: timerClock.now + refresh / 2)
                    await pool.refresh()
                }
            })
        }
        if let address = listenAddress, listener != nil || configuration.signalNetwork != nil {
            let weak = WeakNode(self)
            if let listener {
                keep(Task {
                    await listener.run { connection, messages in
                        await weak.node?.serve(connection, messages)
                    }
                })
            } else if let network = configuration.signalNetwork {
                let identity = self.identity
                let handler: @Sendable (SignalingConnection, SignalMessages) async -> Void = { connection, messages in
                    await weak.node?.serve(connection, messages)
                }
                // Reachable from here on, before the serving task runs: the node says below
                // that it listens, and a dial right after must not find nothing there.
                network.open(address, as: identity, handler)
                keep(Task { await network.serve(address, as: identity, handler) })
            }
            broadcaster.send(.listening(address))
            logger.info("listening for calls on \(address) as \(identity.fingerprint)")
        }
        startRelayRegistration()
    }

    /// Stays registered at the relay (if one is set): a new registration replaces the last one.
    func startRelayRegistration() {
        relayRegistration?.cancel()
        if let relay = configuration.relay, !isShutDown {
            let identity = self.identity, broadcaster = self.broadcaster, relays = configuration.relays
            let timerClock = configuration.clock
            let weak = WeakNode(self)
            relayRegistration = keepUntilDone {
                // Stay registered; after a drop, retry every few seconds until shutdown.
                while !Task.isCancelled {
                    do {
                        try await relays.register(at: relay, as: identity, clock: timerClock,
                                                  registered: { broadcaster.send(.registered(relay)) }) { connection, messages in
                            await weak.node?.serve(connection, messages)
                        }
                        // Cancelled (a new registration replaced this one, or shut-down): the
                        // node let go of the relay, the relay did not drop it.
                        guard !Task.isCancelled else { return }
                        broadcaster.send(.relayLost("the relay at \(relay) closed the connection"))
                    } catch {
                        guard !Task.isCancelled else { return }
                        broadcaster.send(.relayLost("\(error)"))
                    }
                    guard (try? await timerClock.sleep(until: timerClock.now + .seconds(3))) != nil else { return }
                }
            }
        }
    }

    /// `Service`: serves until graceful shutdown or cancellation, then shuts down.
    public func run() async throws {
        start()
        try? await gracefulShutdown()
        await shutdown()
    }

    /// Hangs up every call, stops media, releases the audio devices and closes every socket.
    /// The call manager's configuration: ``CallNodeConfiguration/maximumCalls``, when set, is the
    /// one limit a user meets (CallKit's default of two call groups would refuse a third
    /// independent caller of an answering service first).
    static func provider(_ configuration: CallNodeConfiguration) -> ProviderConfiguration {
        var provider = configuration.provider
        if let limit = configuration.maximumCalls {
            provider.maximumCallGroups = max(provider.maximumCallGroups, limit)
            provider.maximumCallsPerCallGroup = max(provider.maximumCallsPerCallGroup, limit)
        }
        return provider
    }

    public func shutdown() async {
        guard !isShutDown else { return }
        isShutDown = true
        for leg in legs.values { leg.post(.event(.end(.shutdown), done: nil)) }
        for run in Array(legRuns.values) { await run.value }
        await icePool.drain()
        await manager.shutdown()
        await systemSession?.shutdown()
        if let appSession {
            try? await appSession.deactivate()
            await appSession.shutdown()
        }
        await listener?.close()
        await sipRouter?.stop()
        for server in webServers { await server.close() }
        for page in webPages { page.close() }
        store.stopWatching()
        await endTasks()
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
        case let .handle(handle): throw .handleNeedsDialect(handle)
        case let .sip(uri): return try await callSIP(uri, title: title)
        case let .janus(address, pin): return try await joinRoom(address, pin: pin, title: title)
        case .webPage:
            guard freeWebPage() != nil else { throw .noWebPage }
            handleValue = WebSignalingServer.pagePeer.hex
        }
        let uuid = UUID()
        // A page is connected already: the call is carried on it from now on (a second call
        // does not pick the same page).
        let page = target == .webPage ? freeWebPage() : nil
        let dialect = EnvelopeDialect(call: uuid, outgoing: true, target: target, connection: page, session: nil, services: services)
        envelopes[uuid] = dialect
        _ = await makeLeg(uuid, outgoing: true, dialect: dialect, target: target, connection: page, title: title)
        do {
            _ = try await manager.controller.request(.start(call: uuid, handle: CallHandle(.generic, handleValue)))
        } catch {
            await discardLeg(uuid)
            throw .request(error)
        }
        // Node calls can be grouped into conferences on the bridge.
        try? await manager.report(.callUpdated(uuid, CallUpdate(remoteHandle: CallHandle(.generic, handleValue),
                                                                supportsGrouping: true, supportsUngrouping: true)))
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

    /// Holds or resumes a call; returns when it is held here (the peer is told by a re-offer
    /// that may still be on its way), so a resume right after cannot find it "not on hold".
    public func setHeld(_ call: UUID, _ held: Bool) async throws(CallRequestError) {
        try await manager.controller.perform(.setHeld(call: call, onHold: held))
    }

    /// Mutes or unmutes the microphone for a call; returns when the media has it.
    public func setMuted(_ call: UUID, _ muted: Bool) async throws(CallRequestError) {
        try await manager.controller.perform(.setMuted(call: call, muted: muted))
    }

    public func playDTMF(_ call: UUID, _ digits: String) async throws(CallRequestError) {
        _ = try await manager.controller.request(.playDTMF(call: call, digits: digits))
    }

    /// Sets voice processing and always-prepared recording on a new session.
    static func applyAudioModes<Policy>(_ configuration: CallNodeConfiguration, to session: AudioSessionOwner<Policy>) async throws {
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
        await legs[call]?.ask(fallback: nil) { .statistics($0) }
    }

    /// Agents in the ICE pool (made, or being made, for the next calls).
    public var pooledICEAgents: Int { icePool.count }

    /// Restarts ICE on a connected call (RFC 8445 §9): new credentials and a new gathering
    /// here, offered again over signaling; the peer restarts too and answers. The media, its
    /// keys and the call go on; audio resumes once the new checks select a pair. Either side
    /// may restart; when both offer at once, the callee's offer stands and the caller answers
    /// it. The node does this by itself while a connection stays lost
    /// (``CallNodeConfiguration/iceRestartInterval``) and when this host's addresses change.
    public func restartICE(_ call: UUID) async throws(CallNodeError) {
        guard let leg = legs[call] else { throw .noSuchCall(call) }
        if let error = await leg.ask(fallback: CallNodeError.noSuchCall(call), { .restartICE($0) }) { throw error }
    }

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
        let identity = self.identity, broadcaster = self.broadcaster, relays = configuration.relays
        let weak = WeakNode(self)
        keepUntilDone {
            do {
                try await relays.join(session, at: relay, as: identity,
                                      waiting: { broadcaster.send(.sessionWaiting(session)) }) { connection, messages, isClient in
                    guard let node = weak.node else { return }
                    await node.joined(connection, session: session, placesCall: isClient, title: title, startMuted: startMuted)
                    await node.read(messages, on: connection)
                    await node.sessionConnectionClosed(connection)
                }
            } catch {
                broadcaster.send(.sessionFailed("\(error)"))
            }
        }
    }

    func joined(_ connection: SignalingConnection, session: String, placesCall: Bool, title: String?, startMuted: Bool) async {
        sessionConnections[connection.id] = (session, startMuted)
        guard placesCall else { return }
        let uuid = UUID()
        let dialect = EnvelopeDialect(call: uuid, outgoing: true, target: .session(session), connection: connection, session: session,
                                      services: services)
        envelopes[uuid] = dialect
        _ = await makeLeg(uuid, outgoing: true, muted: startMuted, dialect: dialect, target: .session(session), connection: connection,
                          title: title, session: session, startMuted: startMuted)
        do {
            _ = try await manager.controller.request(.start(call: uuid, handle: CallHandle(.generic, connection.peer.hex)))
            broadcaster.send(.dialing(uuid, .session(session)))
        } catch {
            await discardLeg(uuid)
            broadcaster.send(.sessionFailed("\(error)"))
            connection.close()
        }
    }

    func sessionConnectionClosed(_ connection: SignalingConnection) async {
        sessionConnections[connection.id] = nil
        for (uuid, id) in legConnections where id == connection.id {
            await envelopes[uuid]?.closed(connection.id, error: nil)
        }
    }

    /// Follows the audio session: route changes, interruptions and failed devices reach the
    /// event stream; a device that failed with nothing to fall back to ends the calls that
    /// needed it, naming it. Route monitoring starts here.
    func watchAudioSession() {
        let sessionEvents: AsyncStream<AudioSessionEvent>
        if let systemSession {
            sessionEvents = systemSession.events()
            keep(Task { await systemSession.startMonitoringRoutes() })
        } else if let appSession {
            sessionEvents = appSession.events()
            keep(Task { await appSession.startMonitoringRoutes() })
        } else {
            return
        }
        keep(Task { [weak self] in
            for await event in sessionEvents {
                await self?.audioSessionEvent(event)
            }
        })
    }

    func audioSessionEvent(_ event: AudioSessionEvent) async {
        switch event {
        case let .routeChanged(reason):
            var route = await systemSession?.activeRoute
            if let appSession { route = await appSession.activeRoute }
            logger.info("audio route changed: \(reason); now \(route.map { "\($0.input ?? "-") → \($0.output ?? "-")" } ?? "inactive")")
            broadcaster.send(.audioRouteChanged(reason, route))
        case let .interruptionBegan(by):
            broadcaster.send(.audioInterrupted(by: by))
        case .interruptionEnded:
            broadcaster.send(.audioInterruptionEnded)
        case let .deviceFailed(message):
            logger.error("\(message)")
            broadcaster.send(.audioDeviceFailed(message))
            // Per-call audio (recordings, greetings) does not use the session's devices.
            guard configuration.callAudio == nil else { return }
            for leg in legs.values { leg.post(.event(.end(.failed(message)), done: nil)) }
        case .didActivate, .didDeactivate, .configurationChanged:
            break
        }
    }
}
