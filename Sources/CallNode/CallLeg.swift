import AudioSession
import Calls
import Foundation
import DTLS
import ICE
import Logging
import Media
import Metrics
import SDP
import Signaling
import Locking

/// One call: its signaling connection, ICE path, DTLS association, media and timers, and the
/// ``LegState`` that decides what happens next.
///
/// The node is a router: it admits calls, makes one leg each, and hands the leg what concerns
/// it (the manager's actions, the call's signaling messages, audio activation). The leg feeds
/// every event to its state machine and performs the actions that come back; when the state
/// has ended, the leg tears down everything it owns and tells the node, once.
actor CallLeg {
    nonisolated let uuid: UUID
    nonisolated let outgoing: Bool
    let began: ContinuousClock.Instant
    private(set) var state: LegState
    /// Tells the router what it keeps of the call (``LegReport``); the leg holds nothing else of it.
    private let reportToRouter: @Sendable (UUID, LegReport) async -> Void
    /// Reads a signaling connection's messages and routes them (to this leg among others).
    let read: @Sendable (SignalMessages, SignalingConnection) async -> Void
    /// Agents made ahead of calls, shared with the node.
    let icePool: IcePool

    // The node's parts a call uses (all of them safe to share).
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

    var target: CallTarget?
    var peer: Fingerprint?
    /// The call's signaling connection while it is up (nil while it is being resumed).
    var connection: SignalingConnection?
    /// Outgoing, resuming: the new connection the resume request went out on, until the
    /// callee accepts it.
    var pendingConnection: SignalingConnection?
    /// A node or a web page at the other end (pages cannot resume a call).
    var origin: SignalingOrigin = .node
    /// The call's numbered messages (between nodes), so that they outlive a connection.
    var signals = SignalSequence()
    /// What the caller presents to resume the call on a new connection: made by the caller,
    /// told to the callee in the invitation.
    var resumeToken: String?
    /// The host address the selected ICE pair leaves from (a host candidate's address, the
    /// base of a server-reflexive or relayed one).
    var selectedLocalBase: String?
    var startAction: ActionID?
    /// The answer action (incoming), failed if the offer cannot be made.
    var answerAction: ActionID?
    /// The manager's actions whose requests the state is deciding, by the state's request id.
    var requests: [Int: ActionID] = [:]
    var nextRequest = 0
    /// The peer's new offer for the running call, while the state decides whether to answer it.
    var peerOffer: (SessionDescription, NegotiatedAudio)?
    var agent: (any IcePath)?
    /// The agent being made and gathering, started before it is needed (the caller's at
    /// dial, the callee's when it rings) so that answering does not wait for it.
    var ice: Task<PreparedICE, any Error>?
    var media: (any MediaPath)?
    /// The media started (its figures mean something).
    var mediaStarted = false
    var mediaPreparation: Task<PreparedMedia, any Error>?
    /// The DTLS-SRTP association keying the call's media (nil with SDES), from ICE
    /// connected until the call ends.
    var dtls: DTLSAssociation?
    /// The leg's one queue: its inputs, taken one at a time to completion, and the tasks it
    /// starts (its signaling connection, ICE and media event readers, timers, trickle, name
    /// lookups), which run in one task group owned by ``run()``. What those tasks learn comes
    /// back as inputs, so nothing runs on the leg's state between two steps of another input.
    private let work: AsyncStream<LegWork>
    private let workContinuation: AsyncStream<LegWork>.Continuation
    /// The state machine's timers that are armed, each with the generation that armed it: a
    /// timer cancelled (or re-armed) lets its sleeping child find a stale generation and do
    /// nothing; the group cancels the sleepers when the call ends.
    var timers: [LegTimer: UInt64] = [:]
    var timerGeneration: UInt64 = 0
    /// Which round of local candidates is being trickled (an ICE restart starts a new one).
    var trickleRound = 0
    var offer: SessionDescription?
    /// The caller's answer to the first offer (its SDP origin is what its own later offers
    /// continue).
    var localAnswer: SessionDescription?
    /// What this side's later offer (a hold's or a resume's) was written with, for its answer.
    var reofferCapabilities: AudioCapabilities?
    var negotiated: NegotiatedAudio?
    /// This side's frame key share, made for the first offer or answer (CallLegFrameEncryption).
    var frameAgreement: FrameKeyAgreement?
    /// The call's frame keys, once both shares are known (or, with a page, once it accepted).
    var frameKeys: FrameKeys?
    /// The keys offered to a page (node to page, page to node).
    var pageKeys: FrameKeys?
    /// The last error the peer reported, for the detail of the end that follows it.
    var peerErrorText: String?
    /// The setup's steps so far (each once), sent with `connected`.
    var setupSteps: [SetupStep] = []

    /// Notes a setup step the first time it happens.
    func mark(_ step: String) {
        guard !setupSteps.contains(where: { $0.name == step }) else { return }
        setupSteps.append(SetupStep(step, at: ContinuousClock.now - began))
    }
    /// The call's port on the audio session's bridge (nil with a stand-in session).
    var bridgePort: BridgePortID?
    /// The call this one was last grouped with (`.some(nil)`: taken out of its group), for a
    /// group set before the call had media.
    var group: UUID??
    /// The first failure recorded, which the end reports whatever else followed it.
    var failure: String?
    var title: String?
    /// The session this call belongs to (joined, not rung).
    var session: String?
    var startMuted = false
    /// Everything of the call is gone (after the state ended).
    var isTornDown = false

    init(uuid: UUID, outgoing: Bool, muted: Bool = false, services: CallNode.Services) {
        self.uuid = uuid
        self.outgoing = outgoing
        began = .now
        reportToRouter = services.report
        read = services.read
        icePool = services.icePool
        configuration = services.configuration
        identity = services.identity
        dtlsCertificate = services.dtlsCertificate
        store = services.store
        manager = services.manager
        broadcaster = services.broadcaster
        logger = services.logger
        clock = services.clock
        systemSession = services.systemSession
        appSession = services.appSession
        state = LegState(outgoing: outgoing, muted: muted, timings: LegTimings(
            keepAliveInterval: services.configuration.keepAliveInterval,
            connectionLostTimeout: services.configuration.connectionLostTimeout,
            iceRestartInterval: services.configuration.iceRestartInterval,
            resumeWindow: services.configuration.resumeWindow),
            sendsHoldAudio: services.configuration.holdAudio != .silence)
        (work, workContinuation) = AsyncStream.makeStream(of: LegWork.self)
        if outgoing { resumeToken = CallLeg.makeResumeToken() }
    }

    /// 32 random bytes, hex.
    static func makeResumeToken() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    }

    /// Takes the call's inputs one at a time, each to completion, and runs the tasks it starts,
    /// until the call has ended and every one of them has finished: when this returns, nothing
    /// of the call is left running. The router runs it once per leg.
    func run() async {
        let work = self.work
        await withDiscardingTaskGroup { group in
            for await item in work {
                switch item {
                case let .input(input): await take(input)
                case let .child(child): if !isTornDown { group.addTask(operation: child) }
                }
            }
            group.cancelAll()
        }
    }

    /// Ends a leg that never started (the manager refused the call): its group finishes.
    func discard() {
        isTornDown = true
        workContinuation.finish()
    }

    /// Tells the router `report` and waits until it has taken it.
    func report(_ report: LegReport) async {
        await reportToRouter(uuid, report)
    }

    /// Starts `work` as a child of the call (in ``run()``'s group); nothing once it has ended.
    func spawn(_ work: @escaping @Sendable () async -> Void) {
        guard !isTornDown else { return }
        workContinuation.yield(.child(work))
    }

    /// Queues an input for the leg (from the router, or a task of the call). Returns false when
    /// the leg has ended and takes no more.
    @discardableResult
    nonisolated func post(_ input: LegInput) -> Bool {
        if case .terminated = workContinuation.yield(.input(input)) {
            input.refuse()
            return false
        }
        return true
    }

    /// Queues an input that carries a reply and waits for the answer (the fallback when the
    /// leg has ended first). Only the call's tasks and the router ask: never the leg itself.
    nonisolated func ask<Value: Sendable>(fallback: Value, _ make: (LegReply<Value>) -> LegInput) async -> Value {
        await withCheckedContinuation { continuation in
            post(make(LegReply(fallback: fallback) { continuation.resume(returning: $0) }))
        }
    }

    /// Queues an input and waits until the leg has taken it (the router, where what it does
    /// next depends on the input's effect: the end's details kept, for one).
    nonisolated func deliver(_ event: LegEvent) async {
        _ = await ask(fallback: ()) { .event(event, done: $0) }
    }

    /// One input, to completion. An ended leg takes none: what waits for an answer gets its
    /// fallback, an action of the manager fails.
    private func take(_ input: LegInput) async {
        guard !isTornDown else {
            if case let .perform(action) = input {
                try? await manager.report(.failed(action.id, reason: "the call has ended"))
            }
            input.refuse()
            return
        }
        switch input {
        case let .invited(envelope, ring):
            await invited(envelope, ring: ring)
        case let .perform(action):
            await perform(action)
        case let .event(event, done):
            await legEvent(event)
            done?(())
        case let .envelope(envelope, connection):
            await receive(envelope, on: connection)
        case let .dialed(connection, reply):
            reply(await dialed(connection))
        case let .resuming(connection, reply):
            reply(await resuming(on: connection))
        case let .connectionClosed(id, error, reply):
            let current = id != nil && connection?.id == id
            await connectionClosed(id, error: error)
            reply?(current)
        case let .ice(event):
            await iceEvent(event)
        case let .media(event):
            await mediaEvent(event)
        case let .mediaPrepared(result):
            await mediaPrepared(result)
        case let .timerFired(timer, generation):
            await timerFired(timer, generation: generation)
        case .audioActive:
            await legEvent(.audioActivated)
        case let .hostNetworkChanged(now, before):
            await hostNetworkChanged(now, from: before)
        case let .restartICE(reply):
            if let error = await legEvent(.restartRequested) {
                reply(.restartFailed("\(error)"))
            } else {
                reply(nil)
            }
        case let .statistics(reply):
            reply(await media?.statistics)
        case let .trickled(round, candidate):
            guard round == trickleRound else { return }  // a restart replaced this round
            await send(.candidates(candidate.map { [$0] } ?? [], end: candidate == nil))
        }
    }

    /// Sets what an outgoing call dials, or what a call already has, before it starts.
    func setUp(target: CallTarget? = nil, connection: SignalingConnection? = nil, title: String?, session: String?, startMuted: Bool) {
        self.target = target
        self.connection = connection
        peer = connection?.peer
        if let connection { origin = connection.origin } else if case .webPage = target { origin = .webPage }
        self.title = title
        self.session = session
        self.startMuted = startMuted
    }


    /// The identity of the call's signaling connection, once it has one.
    var connectionID: ObjectIdentifier? { connection?.id }

    // MARK: - Actions from the call manager

    func perform(_ provider: ProviderAction) async {
        switch provider.action {
        case .start:
            startAction = provider.id
            if let connection {
                // A session call (the join made the connection) or a page's (connected already).
                if origin == .webPage { await prepareICEEarly(role: .controlled) }
                _ = await dialed(connection)
            } else {
                await dial()
            }
        case .answer:
            answerAction = provider.id
            await legEvent(.answering)
        case .end:
            // Ending a call that still rings here declines it (the leg's state knows).
            await legEvent(.end(.hangUp))
            try? await manager.report(.fulfilled(provider.id))
        case let .setHeld(_, onHold):
            // Held here at once (the bridge port and the media), then the re-offer (RFC 3264:
            // `sendonly` or `inactive`; `sendrecv` to resume) tells the peer.
            await request(.hold(onHold), for: provider)
        case let .setMuted(_, muted):
            await request(.mute(muted), for: provider)
        case let .playDTMF(_, digits):
            do {
                try await media?.sendDTMF(digits)
                try? await manager.report(.fulfilled(provider.id))
            } catch {
                try? await manager.report(.failed(provider.id, reason: "\(error)"))
            }
        case let .setGroup(_, other):
            // The bridge joins the ports now if media runs, else when it starts.
            group = .some(other)
            await report(.group(other))
            try? await manager.report(.fulfilled(provider.id))
        }
    }

    // MARK: - The call's signaling messages

    /// Whether the call can move to a new signaling connection: between nodes, not in a
    /// session (whose connection the relay's rendezvous made).
    var resumable: Bool { origin == .node && session == nil }

    /// Sends a message for the call: numbered and kept until acknowledged between nodes, so
    /// that it goes out again on a resumed connection; while the connection is being resumed,
    /// it waits for the new one.
    func send(_ message: SignalMessage) async {
        guard resumable else {
            try? await connection?.send(message, call: message == .keepAlive ? nil : uuid)
            return
        }
        let envelope: SignalEnvelope
        do {
            envelope = try signals.stamp(message, call: uuid)
        } catch {
            failure = failure ?? "\(error)"
            post(.event(.end(.failed("\(error)")), done: nil))
            return
        }
        guard let connection else { return }
        // A send that fails leaves the message kept: the resumed connection carries it.
        try? await connection.send(envelope)
    }

    /// The invitation that made this (incoming) leg, the first of the caller's messages: the
    /// callee's ICE agent gets under way (from the pool if it has one) before the call rings.
    func invited(_ envelope: SignalEnvelope, ring: Bool) async {
        _ = signals.accept(envelope)
        if case let .invite(invitation) = envelope.message { resumeToken = invitation.resumeToken }
        await prepareICEEarly(role: .controlling)
        await legEvent(.signalingReady)
        if ring { await send(.ringing) }
    }

    /// An envelope for this call on one of its connections (the router checked that it
    /// carries the call, or that it is the resumption handshake).
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
            guard reason.hasPrefix(SignalMessage.callGoneRefusal) else {
                // Crossing attempts (the caller's own connection wins): keep trying, or wait
                // for the other side's to resume the call.
                logger.info("call \(uuid): the other node declined this resumption: \(reason)")
                pendingConnection = nil
                connection.close()
                return
            }
            failure = failure ?? "the other node refused to resume the call: \(reason)"
            await legEvent(.end(.failed("the other node refused to resume the call: \(reason)")))
            return
        default:
            break
        }
        guard connection.id == self.connection?.id else { return }  // a connection the call left
        if resumable, !signals.accept(envelope) { return }  // sent again after a resumption: had it
        await receive(envelope.message, on: connection)
    }

    /// A message for this call on its own connection.
    func receive(_ message: SignalMessage, on connection: SignalingConnection) async {
        do {
            switch message {
            case .invite: break
            case .ringing:
                mark("ringing")
                await legEvent(.peerRinging)
                broadcaster.send(.ringing(uuid, callee: connection.peer))
            case let .offer(sdp):
                try await offered(sdp: sdp)
            case let .answer(sdp):
                try await answered(sdp: sdp)
            case let .candidates(candidates, end):
                await addRemoteCandidates(candidates, end: end)
            case .hold:
                // Older nodes said hold in a message of their own; the offer and answer say it now.
                logger.debug("call \(uuid): a hold message (the offer and answer say hold)")
            case let .end(reason):
                if reason == .failed, let text = peerErrorText {
                    await legEvent(.end(.failed("the other node ended the call: \(text)")))
                } else {
                    await legEvent(.end(.peerEnded(reason)))
                }
            case let .reject(reason):
                broadcaster.send(.rejected(uuid, reason))
                await legEvent(.end(.peerRejected(reason)))
            case let .error(text):
                peerErrorText = text
                broadcaster.send(.peerError("peer reports: \(text)"))
            case .keepAlive, .resume, .resumed, .resumeRefused:
                break
            }
        } catch {
            broadcaster.send(.peerError("call \(uuid): \(error)"))
            await send(.error("\(error)"))
            await legEvent(.end(.failed("\(error)")))
        }
    }

    /// Opens the signaling connection of an outgoing call in its own task; the invitation goes
    /// out once TLS is up.
    func dial() async {
        guard let target = target else { return }
        let route: Route
        switch target {
        case .contact, .address, .pinned, .relayed:
            guard let known = self.route() else { return }
            route = known
        case .session, .webPage:
            return  // connected already: the start uses that connection
        }
        await prepareICEEarly(role: .controlled)
        let weak = WeakLeg(self), read = self.read
        let dialedConnection = Locked<ObjectIdentifier?>(nil)
        spawn { [self] in
            do {
                try await connect(route) { connection, messages in
                    dialedConnection.withLock { $0 = connection.id }
                    guard let leg = weak.leg, await leg.ask(fallback: false, { .dialed(connection, $0) }) else { return }
                    await read(messages, connection)
                }
                post(.connectionClosed(dialedConnection.withLock { $0 }, error: nil, nil))
            } catch {
                post(.connectionClosed(dialedConnection.withLock { $0 }, error: error, nil))
            }
        }
    }

    /// TLS is up for an outgoing call: send the invitation and fulfil the start action.
    func dialed(_ connection: SignalingConnection) async -> Bool {
        self.connection = connection
        peer = connection.peer
        origin = connection.origin
        await report(.connection(connection))
        mark("signaling-connected")
        await legEvent(.signalingReady)
        // The call counts as connecting before the invitation leaves: a peer that answers at
        // once (a web page on the same machine) can have its offer here while the send is
        // still being awaited.
        if let action = startAction {
            try? await manager.report(.fulfilled(action))
            try? await manager.report(.progress(uuid, .invitationSent))
        }
        // The call can be ended while those are awaited (its audio would not start): that end
        // is the leg's next input, so the peer gets this invitation first and the end after it.
        let invitation = Invitation(displayName: configuration.displayName, title: title, session: session,
                                    resumeToken: resumable ? resumeToken : nil)
        await send(.invite(invitation))
        mark("invite-sent")
        return self.connection?.id == connection.id
    }

    /// A signaling connection of the call closed (`id` nil: none was ever made). A call
    /// between nodes is resumed on a new one; anything else ends.
    func connectionClosed(_ id: ObjectIdentifier?, error: (any Error)?) async {
        if let id {
            // A resumption that did not take: the reconnecting loop tries again.
            if pendingConnection?.id == id {
                pendingConnection = nil
                return
            }
            // A connection the call already left (resumed elsewhere, or given up) changes nothing.
            if let current = connection, current.id != id { return }
            if connection == nil && !state.signaling.isUp { return }
        }
        let detail = error.map { "\($0)" } ?? "the signaling connection closed"
        let canResume = resumable && connection != nil && state.phase != .dialing
        if !canResume {
            // Recorded first: failing the start action makes the manager end the call, and that
            // end may be handled before this one.
            let failure = failure ?? detail
            self.failure = failure
            if let action = startAction, connection == nil {
                try? await manager.report(.failed(action, reason: detail))
            }
        }
        connection = nil
        pendingConnection = nil
        logger.info("call \(uuid): signaling connection lost (\(detail))\(canResume ? "; resuming" : "")")
        await legEvent(.signalingLost(detail, resumable: canResume))
    }

    /// Feeds the call's state machine and performs what it returns, in order. What performing
    /// an action leads to (a failure, a result the state waits for) comes back as a later
    /// input, never in the middle of these actions. Returns the first failure among them.
    @discardableResult
    func legEvent(_ event: LegEvent) async -> (any Error)? {
        let actions = state.handle(event, now: configuration.clock.now)
        var failure: (any Error)?
        for action in actions {
            switch action {
            case let .send(signal):
                let message = SignalMessage(signal)
                if message == .keepAlive, resumable {
                    // Carries the call (so the peer's leg learns what was received), not numbered.
                    try? await connection?.send(SignalEnvelope(call: uuid, .keepAlive, ack: signals.received))
                } else {
                    await send(message)
                }
            case .closeSignaling:
                connection?.close()
                connection = nil
            case .reconnectSignaling:
                reconnect()
            case let .reportSignaling(lost):
                broadcaster.send(lost ? .signalingLost(uuid) : .signalingResumed(uuid))
            case let .arm(timer, delay):
                arm(timer, after: delay)
            case let .cancel(timer):
                timers[timer] = nil
            case let .setMicrophone(muted):
                do { try await media?.setMuted(muted) } catch { failure = failure ?? error }
            case let .startMedia(muted):
                await startMedia(microphoneMuted: muted)
            case .restartICE:
                do {
                    try await restart()
                    post(.event(.restartOffered, done: nil))
                } catch {
                    logger.warning("call \(uuid): ICE restart failed: \(error)")
                    failure = failure ?? error
                    post(.event(.restartSettled, done: nil))
                }
            case let .restartRefused(reason):
                failure = failure ?? NegotiationError(reason)
            case .renegotiate:
                do {
                    try await renegotiate()
                } catch {
                    logger.warning("call \(uuid): the hold or resume offer could not be sent: \(error)")
                    post(.event(.renegotiationSettled, done: nil))
                }
            case .makeOffer:
                do {
                    try await sendOffer()
                } catch {
                    self.failure = "answering failed: \(error)"
                    if let answerAction { try? await manager.report(.failed(answerAction, reason: "\(error)")) }
                }
            case .answerPeerOffer:
                guard let (offer, current) = peerOffer else { break }
                peerOffer = nil
                do { try await answer(offer, current: current) } catch { await negotiationFailed(error) }
            case .prepareMedia:
                prepareMedia()
            case .reportMediaConnected:
                await reportMediaConnected()
            case let .settle(id):
                let reason = failure.map { "\($0)" }
                post(.event(.settled(id: id, failure: reason), done: nil))
                failure = nil
            case let .fulfil(id):
                if let action = requests.removeValue(forKey: id) { try? await manager.report(.fulfilled(action)) }
            case let .fail(id, reason):
                if let action = requests.removeValue(forKey: id) { try? await manager.report(.failed(action, reason: reason)) }
            case let .setFlow(flow):
                if let error = await apply(flow) { failure = failure ?? error }
            case let .reportHeldByPeer(on):
                logger.info("call \(uuid): \(on ? "held" : "resumed") by the peer")
                broadcaster.send(.remoteHold(uuid, on))
            case .reportConnectionLost:
                logger.info("call \(uuid): connection lost")
                try? await manager.report(.connectionLost(uuid))
                broadcaster.send(.connectionLost(uuid))
            case .reportConnectionRestored:
                logger.info("call \(uuid): connection restored")
                try? await manager.report(.connectionRestored(uuid))
                broadcaster.send(.connectionRestored(uuid))
            case .tearDown:
                await teardown()
            case let .reportEnded(reason):
                try? await manager.report(.callEnded(uuid, reason))
            }
        }
        return failure
    }

    /// The manager's request `provider`, decided by the state: performed, then fulfilled or
    /// failed (and rolled back) once its actions have been.
    func request(_ request: LegRequest, for provider: ProviderAction) async {
        nextRequest += 1
        requests[nextRequest] = provider.id
        await legEvent(.request(request, id: nextRequest))
    }

    /// An offer or answer that could not be taken: the peer is told, and the call ends.
    func negotiationFailed(_ error: any Error) async {
        broadcaster.send(.peerError("call \(uuid): \(error)"))
        await send(.error("\(error)"))
        post(.event(.end(.failed("\(error)")), done: nil))
    }

    /// Arms a leg timer on the node's clock; its firing comes back as an event.
    func arm(_ timer: LegTimer, after delay: Duration) {
        let clock = configuration.clock
        let deadline = clock.now + delay
        timerGeneration += 1
        let generation = timerGeneration
        timers[timer] = generation
        spawn { [weak self] in
            do { try await clock.sleep(until: deadline) } catch { return }
            self?.post(.timerFired(timer, generation: generation))
        }
    }

    func timerFired(_ timer: LegTimer, generation: UInt64) async {
        guard timers[timer] == generation else { return }
        timers[timer] = nil
        await legEvent(.timerFired(timer))
    }

    /// Stops the call's media and ICE and closes its signaling (the leg's state has ended).
    func teardown() async {
        guard !isTornDown else { return }
        isTornDown = true
        // The call's last figures, before its end is told: the periodic ones are up to a
        // statistics interval old (a 2 s call's summary said half the packets it sent).
        if mediaStarted, let media { broadcaster.send(.statistics(uuid, await media.statistics)) }
        let duration = state.connectedSince.map { configuration.clock.now - $0 }
        var detail: String?
        if case let .ended(end) = state.phase { detail = end.detail }
        await report(.ended(detail: failure ?? detail, duration: duration))
        timers.removeAll()
        if agent == nil, let ice {
            // An agent still being made (or made and never adopted) is closed here: nothing
            // else of the call will take it.
            if let prepared = try? await ice.value { await prepared.agent.close() }
        }
        mediaPreparation?.cancel()
        // close_notify goes out while the path is still there: a browser sees the end at once.
        await dtls?.close()
        await media?.stop()
        await agent?.close()
        connection?.close()
        // No more inputs or children; run() cancels those still running and returns once all
        // are done.
        workContinuation.finish()
        await report(.released)
    }

}

/// A weak reference to a leg for the tasks it starts, so they do not keep it alive.
final class WeakLeg: Sendable {
    weak let leg: CallLeg?
    init(_ leg: CallLeg) { self.leg = leg }
}
