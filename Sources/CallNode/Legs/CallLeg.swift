@_spi(Simulation) import CallCore
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

/// One call: its signaling (through a ``CallDialect``), ICE path, DTLS association, media and
/// timers, and the ``LegState`` that decides what happens next.
///
/// The node is a router: it admits calls, makes one leg each, and hands the leg what concerns
/// it (the manager's actions, audio activation) as ``LegInput``s; the call's dialect hands it
/// what its peer says. The leg takes one input at a time, to completion: it feeds it to its
/// state and performs the actions that come back; what performing them leads to comes back
/// later as another input. When the state has ended, the leg tears down everything it owns and
/// tells the node, once (``LegReport``).
actor CallLeg {
    nonisolated let uuid: UUID
    nonisolated let outgoing: Bool
    /// How the call's signals travel to its peer and back.
    nonisolated let dialect: any CallDialect
    /// When the leg was made, on the node's clock (setup steps are measured from it).
    let began: Duration
    private(set) var state: LegState
    /// Tells the router what it keeps of the call (``LegReport``); the leg holds nothing else of it.
    private let reportToRouter: @Sendable (UUID, LegReport) async -> Void
    /// Agents made ahead of calls, shared with the node.
    let icePool: IcePool
    /// The handles of calls other dialects carry (this call's, if it is one of them).
    let dialectHandles: Locked<[UUID: String]>

    // The node's parts a call uses (all of them safe to share).
    let configuration: CallNodeConfiguration
    let dtlsCertificate: DTLSCertificate
    let store: CallStore
    let manager: CallManager
    let broadcaster: EventBroadcaster<NodeEvent>
    let logger: Logger
    let clock: MediaClock
    let systemSession: AudioSessionOwner<SystemOwned>?
    let appSession: AudioSessionOwner<AppOwned>?

    /// What the call was placed to (outgoing), for its name.
    let target: CallTarget?
    /// The peer's authenticated identity, once its dialect's wire has one.
    var peer: Fingerprint?
    /// The host address the selected ICE pair leaves from (a host candidate's address, the
    /// base of a server-reflexive or relayed one).
    var selectedLocalBase: String?
    var startAction: ActionID?
    /// The answer action (incoming), failed if the offer cannot be made.
    var answerAction: ActionID?
    /// The manager's actions whose requests the state is deciding, by the state's request id.
    var requests: [Int: ActionID] = [:]
    var nextRequest = 0
    /// The peer's offers this side answered (to log one it did not).
    var offersTaken = 0
    /// The call's ICE path: its agent, candidates both ways, restarts.
    let ice: CallIce
    var media: (any MediaPath)?
    /// The media started (its figures mean something).
    var mediaStarted = false
    /// The call's quality over time, kept with it in Recents as it ends.
    var quality = QualityRecording()
    /// The event stream has heard how the media is keyed (early media tells it before the call connects).
    var securityReported = false
    var mediaPreparation: Task<PreparedMedia, any Error>?
    /// The DTLS-SRTP association keying the call's media (nil with SDES), from ICE
    /// connected until the call ends.
    var dtls: DTLSAssociation?
    /// The leg's one queue: its inputs, and the tasks it starts (ICE and media event readers,
    /// timers, trickle, name lookups, its dialect's), which run in one task group owned by
    /// ``run()``. What those tasks learn comes back as inputs.
    private nonisolated let queue: LegQueue
    /// The state machine's timers that are armed.
    var timers = LegTimers()
    /// The call's offers and answers: this side's last offer, what was agreed.
    var negotiation: CallNegotiation
    /// The media the first offer and answer agreed.
    var negotiated: NegotiatedAudio? { negotiation.negotiated }
    /// End-to-end frame encryption: the shares in the SDP, the keys once agreed.
    var frames: FrameKeyExchange
    /// The last error the peer reported, for the detail of the end that follows it.
    var peerErrorText: String?
    /// The setup's steps so far (each once), sent with `connected`.
    var setupSteps: [SetupStep] = []

    /// Notes a setup step the first time it happens.
    func mark(_ step: String) {
        guard !setupSteps.contains(where: { $0.name == step }) else { return }
        setupSteps.append(SetupStep(step, at: configuration.clock.now - began))
    }
    /// The call's port on the audio session's bridge (nil with a stand-in session).
    var bridgePort: BridgePortID?
    /// The call this one was last grouped with (`.some(nil)`: taken out of its group), for a
    /// group set before the call had media.
    var group: UUID??
    /// The first failure recorded, which the end reports whatever else followed it.
    var failure: String?
    let title: String?
    /// The session this call belongs to (joined, not rung).
    let session: String?
    let startMuted: Bool
    /// The call has ended and everything of it is gone: the leg takes no more inputs.
    var ended = false

    init(uuid: UUID, outgoing: Bool, muted: Bool = false, dialect: any CallDialect, target: CallTarget? = nil, peer: Fingerprint? = nil,
         title: String? = nil, session: String? = nil, startMuted: Bool = false, services: CallNode.Services) {
        self.uuid = uuid
        self.peer = peer
        self.outgoing = outgoing
        self.dialect = dialect
        self.target = target
        self.title = title
        self.session = session
        self.startMuted = startMuted
        began = services.configuration.clock.now
        reportToRouter = services.report
        icePool = services.icePool
        dialectHandles = services.dialectHandles
        configuration = services.configuration
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
            resumeWindow: services.configuration.resumeWindow,
            peerGoneAfter: services.configuration.peerGoneAfter),
            sendsHoldAudio: services.configuration.holdAudio != .silence, firstOffer: dialect.traits.firstOffer)
        let queue = LegQueue()
        self.queue = queue
        ice = CallIce(call: uuid, pool: services.icePool, queue: queue, fingerprint: services.dtlsCertificate.fingerprint.sdpValue,
                      clock: services.configuration.clock, logger: services.logger, broadcaster: services.broadcaster)
        negotiation = CallNegotiation(configuration: services.configuration, peerKind: dialect.traits.peer,
                                      mediaEncryption: dialect.traits.mediaEncryption, codecs: dialect.traits.codecs)
        frames = FrameKeyExchange(policy: services.configuration.frameEncryption, adjustment: services.configuration.frameKeyAdjustment,
                                  peerKind: dialect.traits.peer, call: uuid, outgoing: outgoing, own: services.identity.fingerprint,
                                  given: dialect.traits.frameKeys)
    }

    /// The call's frame keys, once agreed.
    var frameKeys: FrameKeys? { frames.keys }

    /// The code both people see (from both identities; a page's from its DTLS certificate).
    var securityCode: String? {
        frames.securityCode(peer: peer, peerDTLSFingerprint: negotiated?.dtls?.remoteFingerprint)
    }

    /// What the peer is (a node, a page, another dialect's), for what media it takes.
    var peerKind: DialectTraits.Peer { dialect.traits.peer }
    /// Whether the call can outlive its signaling connection.
    var resumable: Bool { dialect.traits.resumable }

    /// Takes the call's inputs one at a time, each to completion, and runs the tasks it starts,
    /// until the call has ended and every one of them has finished: when this returns, nothing
    /// of the call is left running. The router runs it once per leg.
    func run() async {
        await queue.run { input in
            await takeOrRefuse(input)
        } runsChildren: {
            !ended
        }
    }

    /// An ended leg takes no input: what waits for an answer gets its fallback, an action of
    /// the manager fails. Not inlined into ``run()``: the frame of what `run` inlines is held
    /// for the whole call, this one's only while an input is taken.
    @inline(never)
    private func takeOrRefuse(_ input: LegInput) async {
        guard !ended else {
            if case let .perform(action) = input {
                try? await manager.report(.failed(action.id, reason: "the call has ended"))
            }
            input.refuse()
            return
        }
        await take(input)
    }

    /// Ends a leg that never started (the manager refused the call): its group finishes.
    func discard() {
        ended = true
        queue.finish()
    }

    /// Tells the router `report` and waits until it has taken it.
    func report(_ report: LegReport) async {
        await reportToRouter(uuid, report)
    }

    /// Starts `work` as a child of the call (in ``run()``'s group); nothing once it has ended.
    nonisolated func spawn(_ work: @escaping @Sendable () async -> Void) { queue.spawn(work) }
    /// The queue as a simulation sees it (``InputProbe``).
    nonisolated var inputProbe: InputProbe { queue.probe }

    /// Queues an input for the leg (from the router, the dialect, or a task of the call).
    /// Returns false when the leg has ended and takes no more.
    @discardableResult
    nonisolated func post(_ input: LegInput) -> Bool { queue.post(input) }

    /// Queues an input that carries a reply and waits for the answer (the fallback when the
    /// leg has ended first). Only the call's tasks and the router ask: never the leg itself.
    nonisolated func ask<Value: Sendable>(fallback: Value, _ make: (LegReply<Value>) -> LegInput) async -> Value {
        await queue.ask(fallback: fallback, make)
    }

    /// Queues an input and waits until the leg has taken it (the router, where what it does
    /// next depends on the input's effect: the end's details kept, for one).
    nonisolated func deliver(_ event: LegEvent) async {
        _ = await ask(fallback: ()) { .event(event, done: $0) }
    }

    /// One input, to completion.
    private func take(_ input: LegInput) async {
        switch input {
        case let .invited(ring):
            await invited(ring: ring)
        case let .perform(action):
            await perform(action)
        case let .event(event, done):
            await legEvent(event)
            done?(())
        case let .signal(signal):
            await received(signal)
        case let .signalingUp(peer):
            await signalingUp(peer: peer)
        case let .signalingLost(detail, resumable):
            // A resumable call waits to be resumed on a new wire, anything else ends (the
            // state decides, and fails the start action of a dial that never got through).
            await legEvent(.signalingLost(detail, resumable: resumable))
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
        case let .transferRequested(request):
            await report(.transferRequested(request))
        case let .transferProgress(status, detail):
            logger.info("call \(uuid): transfer: \(detail)")
            broadcaster.send(.transfer(uuid, status: status, detail: detail))
        case let .progress(reply):
            if let error = await legEvent(.progressing) {
                reply(.earlyMedia("\(error)"))
            } else {
                reply(nil)
            }
        case let .statistics(reply):
            reply(await media?.statistics)
        case let .frameKeys(outbound, inbound):
            frames.rekey(outbound: outbound, inbound: inbound)
            try? await media?.setFrameKeys(outbound: outbound, inbound: inbound)
        case let .appAudio(source, volume, reply):
            guard let media, mediaStarted else {
                source?.stop()
                return reply(.noMedia(uuid))
            }
            do throws(MediaError) { try await media.setAppAudio(source, volume: volume) } catch {
                reply(.media("\(error)"))
                return
            }
            reply(nil)
        case let .volumes(microphone, output, reply):
            guard let media, mediaStarted else { return reply(nil) }
            reply(await media.setVolumes(microphone: microphone, output: output))
        case let .recordingTap(sink, mixingSent, reply):
            guard let media, mediaStarted else { return reply(.noMedia(uuid)) }
            do throws(MediaError) { try await media.setTap(sink, mixingSent: mixingSent) } catch {
                reply(.media("\(error)"))
                return
            }
            reply(nil)
        case let .trickled(round, candidate):
            guard await round == ice.trickleRound else { return }  // a restart replaced this round
            await send(.candidates(candidate.map { [$0] } ?? [], end: candidate == nil))
            if candidate == nil { await ice.gatheringEnded(round: round) }
        }
    }

    // MARK: - Actions from the call manager

    func perform(_ provider: ProviderAction) async {
        switch provider.action {
        case .start:
            startAction = provider.id
            // The caller's ICE agent gets under way (from the pool if it has one) while the
            // invitation goes out and the callee rings.
            await ice.prepareEarly(role: state.controlsICE ? .controlling : .controlled)
            await dialect.dial()
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
            // Sent only while the call's audio flows from this side (the state says).
            await request(.dtmf(digits), for: provider)
        case let .setGroup(_, other):
            // The bridge joins the ports now if media runs, else when it starts.
            group = .some(other)
            await report(.group(other))
            try? await manager.report(.fulfilled(provider.id))
        }
    }

    // MARK: - The call's signals

    /// Sends a signal to the peer through the call's dialect.
    func send(_ signal: CallSignal) async {
        await dialect.send(signal)
    }

    /// The incoming call was admitted: the callee's ICE agent gets under way (from the pool if
    /// it has one) before the call rings.
    func invited(ring: Bool) async {
        // The side that offers first controls ICE (the callee here, unless the caller offered).
        await ice.prepareEarly(role: state.controlsICE ? .controlling : .controlled)
        await legEvent(.signalingReady)
        if ring { await send(.ringing) }
    }

    /// The outgoing call's wire is up: send the invitation and fulfil the start action.
    func signalingUp(peer: Fingerprint?) async {
        self.peer = peer ?? self.peer
        mark("signaling-connected")
        // The call counts as connecting before the invitation leaves: a peer that answers at
        // once (a web page on the same machine) can have its offer here while the send is
        // still being awaited.
        if let action = startAction {
            try? await manager.report(.fulfilled(action))
            try? await manager.report(.progress(uuid, .invitationSent))
        }
        // The call can be ended while those are awaited (its audio would not start): that end
        // is the leg's next input, so the peer gets this invitation first and the end after it.
        await send(.invite(CallInvitation(displayName: configuration.displayName, title: title, session: session)))
        mark("invite-sent")
        // After the invitation: where the caller offers, its offer follows it.
        await legEvent(.signalingReady)
    }

    /// This host's network changed: the leg's state decides (give up and resume the signaling
    /// if its address went, restart ICE if its path's did or the default route changed).
    func hostNetworkChanged(_ now: HostNetworkSnapshot, from before: HostNetworkSnapshot) async {
        let removed = before.addresses.subtracting(now.addresses)
        let gone = await dialect.localAddress.map { !now.addresses.contains($0) } ?? false
        let pathAffected = now.defaultRoutes != before.defaultRoutes || selectedLocalBase.map { removed.contains($0) } ?? false
        await legEvent(.hostAddressesChanged(signalingAddressGone: gone, pathAffected: pathAffected))
    }

    /// Feeds the call's state machine and performs what it returns, in order. What performing
    /// an action leads to (a failure, a result the state waits for) comes back as a later
    /// input, never in the middle of these actions. Returns the first failure among them.
    @discardableResult
    func legEvent(_ event: LegEvent) async -> (any Error)? {
        var failure: (any Error)?
        for action in transition(event) {
            if case let .settle(id) = action {
                settle(id, failure: failure)
                failure = nil
                continue
            }
            switch await carryOut(action) {
            case .done:
                break
            case let .failed(error):
                failure = failure ?? error
            case let .failedAndStopped(error):
                // What follows depends on the one that failed (the manager knowing of progress).
                return failure ?? error
            }
        }
        return failure
    }

    /// A request's actions are done: the state hears whether one of them failed.
    @inline(never)  // its input is built on the thread's stack, out of the async frame
    private func settle(_ id: Int, failure: (any Error)?) {
        post(.event(.settled(id: id, failure: failure.map { "\($0)" }), done: nil))
    }

    /// The state's step for `event`: its actions, as the tests' rewrite hook (if any) makes them.
    @inline(never)  // its copies of the state stay on the thread's stack, out of the async frame
    private func transition(_ event: LegEvent) -> [LegAction] {
        guard let rewrite = configuration.legActionRewrite else { return state.handle(event, now: configuration.clock.now) }
        let before = state
        let actions = state.handle(event, now: configuration.clock.now)
        let after = state
        return actions.map { rewrite(before, after, $0) }
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

    /// Arms a leg timer on the node's clock; its firing comes back as an input.
    func arm(_ timer: LegTimer, after delay: Duration) {
        let clock = configuration.clock
        let deadline = clock.now + delay
        let generation = timers.arm(timer)
        spawn { [weak self] in
            do { try await clock.sleep(until: deadline) } catch { return }
            self?.post(.timerFired(timer, generation: generation))
        }
    }

    func timerFired(_ timer: LegTimer, generation: UInt64) async {
        guard timers.fire(timer, generation: generation) else { return }
        await legEvent(.timerFired(timer))
    }

    /// Stops the call's media and ICE and closes its signaling (the leg's state has ended).
    func teardown() async {
        ended = true
        // The call's last figures, before its end is told: the periodic ones are up to a
        // statistics interval old (a 2 s call's summary said half the packets it sent).
        if mediaStarted, let media {
            let statistics = await media.statistics
            broadcaster.send(.statistics(uuid, statistics))
            quality.take(statistics, at: configuration.clock.now)
        }
        // Queued before the end is told, in order with the call's Recents row.
        if !quality.timeline.samples.isEmpty { store.saveQuality(quality.timeline, of: uuid) }
        let duration = state.connectedSince.map { configuration.clock.now - $0 }
        var detail: String?
        var reason: CallEndReason?
        if case let .ended(end) = state.phase { (detail, reason) = (end.detail, end.reason) }
        await report(.ended(detail: failure ?? detail, duration: duration, reason: reason))
        timers = LegTimers()
        mediaPreparation?.cancel()
        // close_notify goes out while the path is still there: a browser sees the end at once.
        await dtls?.close()
        await media?.stop()
        await ice.close()
        await dialect.close()
        // No more inputs or children; run() cancels those still running and returns once all
        // are done.
        queue.finish()
        await report(.released)
    }
}

/// A weak reference to a leg for the tasks it starts, so they do not keep it alive.
final class WeakLeg: Sendable {
    weak let leg: CallLeg?
    init(_ leg: CallLeg) { self.leg = leg }
}
