import SDP

/// One call's state, as a plain value: every event returns what to do, nothing else happens.
///
/// The leg's owner feeds it events (progress of the call's setup, its media and ICE, the user's
/// mute and hold, timer firings, endings) with the time from the node's clock, and performs
/// the actions it returns, in order. It decides, so that nothing else has to guess from loose
/// fields: whether ending sends `reject(declined)` or `end(hangup)`, that a call ends exactly
/// once (one `end` to the peer, one report to the manager, one teardown), when timers run, and
/// what the microphone does, whether or not media exists yet.
public struct LegState: Sendable, Equatable {
    public let outgoing: Bool
    public let timings: LegTimings
    public internal(set) var phase: LegPhase
    /// The user's mute.
    public private(set) var muted: Bool
    /// This side's hold.
    public private(set) var held = false
    /// The timers armed now.
    public internal(set) var armed: Set<LegTimer> = []
    /// When media started (on the node's clock), once it has.
    public private(set) var connectedSince: Duration?
    /// ICE restarts this side started.
    public private(set) var restarts = 0
    /// Fresh rounds of checks started because a round failed before any pair worked
    /// (``LegTimings/setupIceRestarts``).
    public private(set) var setupRestarts = 0
    /// An ICE restart's offer is out and its answer not in yet (answers do not say which
    /// offer they answer, so only one restart runs at a time).
    public private(set) var restartPending = false
    /// A hold or resume offer is out and its answer not in yet; another waits for it.
    public private(set) var renegotiationPending = false
    /// The signaling connection: up, or being resumed.
    public private(set) var signaling: LegSignaling = .up
    /// This side's hold changed while an offer was out: offer again once it is answered.
    public private(set) var renegotiateAgain = false
    /// What the peer's side of the last offer and answer said: it takes this side's audio
    /// (false: it holds the call) and sends its own.
    public private(set) var peerReceives = true
    public private(set) var peerSends = true
    /// Whether this side sends hold audio while it holds (`sendonly` rather than `inactive`).
    public let sendsHoldAudio: Bool
    /// The offer and answer keyed the media with DTLS (known once negotiated).
    public private(set) var keyedByDTLS = false
    /// Whether ICE found the call's path (false: a plain RTP path, never restarted).
    public private(set) var pathUsesICE = true
    /// The media is built and keyed, waiting for ICE to connect (SDES: built while checking).
    public private(set) var mediaBuilt = false
    /// Tries at a new signaling connection since the signaling was lost.
    public private(set) var reconnectAttempts = 0
    /// The signaling connection being resumed was closed from the other end (not given up
    /// here): with the media stopped too, the peer may be gone.
    public private(set) var signalingClosedByPeer = false
    /// The manager's requests whose actions are being performed, each with the request that
    /// undoes it (the mute or hold as it was before) if they fail.
    public private(set) var requests: [Int: LegRequest] = [:]
    /// Which side makes the first offer (the dialect's wire says: the callee on node
    /// envelopes and the page, the caller in SIP's INVITE).
    public let firstOffer: FirstOffer
    /// Incoming, the caller offering: its first offer, here and waiting for the user to answer.
    public private(set) var waitingOffer: SessionDescription?
    /// Incoming, the caller offering: its first offer is here, waiting for the user to answer.
    public var offerWaiting: Bool { waitingOffer != nil }
    /// Outgoing, the caller offering: this side's first offer is out, its answer not in yet.
    public private(set) var firstOfferOut = false
    /// The first offer goes (again) in plain RTP: the peer refused an encrypted one.
    public private(set) var offersUnencrypted = false
    /// The first offer's answer came (outgoing) or went (incoming) before the call was
    /// answered: its media runs early, and the manager hears of the answer only when the call
    /// is taken.
    public private(set) var earlyMedia = false
    /// A restart of ICE was due while the call's media ran early: it goes once the call is
    /// answered (an early dialog carries no offer of this side's: SIP would need UPDATE).
    public private(set) var restartWhenAnswered = false
    /// What the path lost before the call connected, while its media already ran (early media)
    /// or waited for the audio session: the media stalled, ICE failed. The media reports a
    /// stall once, so the call starts reconnecting from these as soon as it connects.
    public internal(set) var lostBeforeConnected: Set<LegLossSignal> = []

    /// A new leg: an outgoing one dialing, an incoming one ringing here.
    public init(outgoing: Bool, muted: Bool = false, timings: LegTimings = LegTimings(), sendsHoldAudio: Bool = false,
                firstOffer: FirstOffer = .byCallee) {
        self.outgoing = outgoing
        self.timings = timings
        self.muted = muted
        self.sendsHoldAudio = sendsHoldAudio
        self.firstOffer = firstOffer
        phase = outgoing ? .dialing : .ringing
    }

    /// Whether this side controls ICE (RFC 8445 §6.1.1): the side that makes the first offer
    /// does — the caller where it offers with its invitation (SIP), the callee otherwise.
    public var controlsICE: Bool { outgoing == (firstOffer == .byCaller) }

    /// Whether the microphone is silenced (muted or held).
    public var microphoneMuted: Bool { muted || held }

    /// The direction this side asks for in its offers and answers (RFC 3264 §8.4): held,
    /// `sendonly` with hold audio or `inactive` without; otherwise `sendrecv`.
    public var wantedDirection: MediaDirection {
        MediaDirection(sends: !held || sendsHoldAudio, receives: !held)
    }

    /// The peer holds the call (its last offer or answer does not take this side's audio).
    public var heldByPeer: Bool { !peerReceives }

    /// Which way audio flows now.
    public var flow: MediaFlow {
        let wanted = wantedDirection
        return MediaFlow(sending: wanted.sends && peerReceives, receiving: wanted.receives && peerSends, heldHere: held)
    }

    /// Why DTMF digits cannot go now (nil: they can): they travel with the call's audio, so
    /// only once media runs and while it flows from this side.
    public var dtmfRefusal: String? {
        guard phase.hasMedia else { return "the call has no media yet" }
        if held { return "the call is on hold here: resume it to send digits" }
        if !peerReceives { return "the other side holds the call: digits would not be heard" }
        return nil
    }

    /// An offer of this side is out (a restart's or a hold's): answers do not say which offer
    /// they answer, so one at a time.
    public var offerPending: Bool { restartPending || renegotiationPending }

    /// Handles one event at `now` (the node clock's time) and returns what to do.
    public mutating func handle(_ event: LegEvent, now: Duration) -> [LegAction] {
        LegCoverage.record(phase, event)
        if case .ended = phase { return [] }  // over: a second ending, a late timer, a stray event
        switch event {
        case .signalingReady:
            var actions: [LegAction] = []
            if phase == .dialing {
                phase = .inviting
                // The caller offering: its offer follows the invitation (SIP sends both in the
                // INVITE).
                if outgoing && firstOffer == .byCaller {
                    firstOfferOut = true
                    actions.append(.makeOffer)
                }
            }
            guard !armed.contains(.keepAlive) else { return actions }
            armed.insert(.keepAlive)
            return [.arm(.keepAlive, after: timings.keepAliveInterval)] + actions
        case .peerRinging:
            if phase == .inviting || phase == .dialing { phase = .ringing }
            return []
        case .answering:
            guard !outgoing else { return [] }
            // This side's answer went early (its greeting runs): taking the call says yes to it.
            if earlyMedia { return accepted() }
            guard phase == .ringing else { return [] }
            // The caller's offer came with its invitation: the answer says yes to both.
            if let offer = waitingOffer {
                waitingOffer = nil
                return [.answerFirstOffer(offer)]
            }
            // Otherwise the callee makes the first offer, once it answers (node envelopes and
            // the page always; SIP when the INVITE came without one).
            phase = .offering
            return [.makeOffer]
        case let .negotiated(dtls, ice):
            switch phase {
            case .dialing, .inviting, .ringing, .offering:
                // The peer's answer to this side's first offer took it: the manager hears of
                // it before ICE starts (ICE connecting, and media with it, is its next input).
                // An early answer it hears of when the call is taken; this side's own answer,
                // when it goes (``LegEvent/answerMade(sdp:)``).
                let answered = (firstOfferOut || phase == .offering) && !earlyMedia
                phase = .checking
                firstOfferOut = false
                keyedByDTLS = dtls
                pathUsesICE = ice
                // SDES keys are known now: build the media while the checks run.
                return (answered ? [.reportProgress(.answerReceived)] : []) + (dtls ? [] : [.prepareMedia]) + armSetupRound()
            default:
                return []  // a re-offer or a restart's answer: the media goes on
            }
        case .iceConnected:
            switch phase {
            case .checking:
                phase = .securing(iceConnectedAt: now)
                let cancel: [LegAction] = armed.remove(.setupRound) != nil ? [.cancel(.setupRound)] : []
                if mediaBuilt { return cancel + tellPeerPath + mediaConnected(at: now) }
                // DTLS runs its handshake over the selected pair, now there is one.
                return cancel + tellPeerPath + (keyedByDTLS ? [.prepareMedia] : [])
            case .securing:
                // Back on a pair after a fresh round (the peer's restart, or this side's).
                return (armed.remove(.setupRound) != nil ? [.cancel(.setupRound)] : []) + tellPeerPath
            case var .reconnecting(lost):
                return restore(&lost, clearing: .ice)
            default:
                lostBeforeConnected.remove(.ice)
                return []
            }
        case let .peerFoundPath(path):
            // While the path is set up, this side takes the pair the peer's checks proved: its
            // own checks through heavy loss can fail for seconds after the peer's succeeded,
            // and the peer's media (the DTLS handshake first) goes nowhere meanwhile. Once the
            // call has its path, ICE alone decides (a restart's round finds its own).
            guard pathUsesICE, settingUpPath else { return [] }
            return [.adoptPeerPath(path)]
        case .iceDisconnected:
            return lose(.ice, now: now)
        case .iceFailed:
            // A pair that worked is gone (consent expired, RFC 7675): recover as from a lost
            // connection, by restarting ICE. Before that, no pair ever worked — or one did but
            // the media never came up on it (a fresh round the peer started found none here):
            // the call is still setting up its path.
            if phase.iceHasConnected && !settingUpPath { return lose(.ice, now: now) }
            guard phase.isNegotiated else { return [] }
            // A restart under way (this side's or the peer's) is the next round already.
            guard !offerPending else { return [] }
            if earlyMedia && startsFreshRound {
                restartWhenAnswered = true
                return []
            }
            if startsFreshRound {
                setupRestarts += 1
                restartPending = true
                var actions: [LegAction] = [.restartICE]
                if armed.remove(.setupRound) != nil { actions.append(.cancel(.setupRound)) }
                return actions + armSetupRound()
            }
            if phase.iceHasConnected { return lose(.ice, now: now) }  // the keys' own timeout ends it
            let rounds = setupRestarts == 0 ? "" : " in \(setupRestarts + 1) rounds of checks"
            return end(.failed("ICE failed: no candidate pair worked\(rounds)"))
        case .mediaStalled:
            return lose(.media, now: now)
        case .mediaResumed:
            // Audio arriving again is the ground truth, whatever ICE last said.
            lostBeforeConnected.removeAll()
            guard case var .reconnecting(lost) = phase else { return [] }
            return restore(&lost, clearing: nil)
        case .mediaReady:
            switch phase {
            case .checking:
                mediaBuilt = true  // ready before ICE: media connects when ICE does
                return []
            case .securing:
                return mediaConnected(at: now)
            default:
                return []
            }
        case .audioActivated:
            guard case let .awaitingAudio(at) = phase else { return [] }
            if earlyMedia {
                phase = .earlyMedia(iceConnectedAt: at)
                // A caller's microphone stays silent until the callee takes the call; a
                // callee's greeting is heard.
                return [.startEarlyMedia(microphoneMuted: outgoing || microphoneMuted)]
            }
            phase = .connected(since: now)
            connectedSince = now
            var actions: [LegAction] = [.startMedia(microphoneMuted: microphoneMuted)] + (flow == .both ? [] : [.setFlow(flow)])
            // A path lost while the media ran early: reconnect (or give up) as any call would.
            for signal in LegLossSignal.allCases where lostBeforeConnected.contains(signal) { actions += lose(signal, now: now) }
            lostBeforeConnected.removeAll()
            return actions
        case let .setMuted(on):
            muted = on
            // A callee's early media sends its microphone (a caller's stays silent until answered).
            var sendsEarly = false
            if !outgoing, case .earlyMedia = phase { sendsEarly = true }
            return phase.hasMedia || sendsEarly ? [.setMicrophone(muted: microphoneMuted)] : []
        case let .setHeld(on):
            guard on != held else { return [] }
            held = on
            var actions: [LegAction] = phase.hasMedia ? [.setMicrophone(muted: microphoneMuted), .setFlow(flow)] : []
            guard phase.isNegotiated else { return actions }  // the first offer or answer carries it
            if offerPending {
                renegotiateAgain = true
            } else {
                renegotiationPending = true
                actions.append(.renegotiate)
            }
            return actions
        case let .request(request, id):
            if case let .dtmf(digits) = request {
                // Digits go with the call's audio: only while it flows from this side.
                if let refusal = dtmfRefusal { return [.fail(id, reason: refusal)] }
                requests[id] = request
                return [.sendDTMF(digits), .settle(id)]
            }
            requests[id] = switch request {
            case .mute: .mute(muted)
            case .hold: .hold(held)
            case .dtmf: request
            }
            let actions: [LegAction] = switch request {
            case let .mute(on): handle(.setMuted(on), now: now)
            case let .hold(on): handle(.setHeld(on), now: now)
            case .dtmf: []
            }
            return actions + [.settle(id)]
        case let .settled(id, failure):
            guard let before = requests.removeValue(forKey: id) else { return [] }
            guard let failure else { return [.fulfil(id)] }
            // Undo what the request changed, so the state says what the media does.
            let undo: [LegAction] = switch before {
            case let .mute(on): handle(.setMuted(on), now: now)
            case let .hold(on): handle(.setHeld(on), now: now)
            case .dtmf: []  // digits not sent stay unsent
            }
            return undo + [.fail(id, reason: failure)]
        case let .peerDirection(receives, sends):
            let before = (flow, heldByPeer)
            if let receives { peerReceives = receives }
            if let sends { peerSends = sends }
            var actions: [LegAction] = []
            if phase.hasMedia && flow != before.0 { actions.append(.setFlow(flow)) }
            if heldByPeer != before.1 { actions.append(.reportHeldByPeer(heldByPeer)) }
            return actions
        case .offerAnswered:
            restartPending = false
            renegotiationPending = false
            guard renegotiateAgain, phase.isNegotiated else { return [] }
            renegotiateAgain = false
            renegotiationPending = true
            return [.renegotiate]
        case .renegotiationSettled:
            renegotiationPending = false
            return []
        case let .peerReoffered(offer):
            // Before any pair worked the peer's offer restarts the checks: a fresh round here
            // too, with a full round's time.
            var fresh: [LegAction] = []
            if settingUpPath {
                if armed.remove(.setupRound) != nil { fresh = [.cancel(.setupRound)] }
                fresh += armSetupRound()
            }
            guard offerPending else { return [.answerPeerOffer(offer)] + fresh }
            // Offers crossed (both sides offered at once). The callee's stands: the callee
            // ignores the caller's, the caller answers the callee's (its answer says its own
            // hold) and gives its own up, which will never be answered.
            guard outgoing else { return fresh }
            renegotiationPending = false
            restartPending = false
            // The answer says this side's direction as it is now: nothing left to offer again.
            renegotiateAgain = false
            return [.answerPeerOffer(offer)] + fresh
        case let .offerArrived(offer):
            if phase.isNegotiated { return handle(.peerReoffered(offer), now: now) }
            switch (firstOffer, outgoing, phase) {
            case (.byCallee, true, .dialing), (.byCallee, true, .inviting), (.byCallee, true, .ringing):
                // The callee's first offer: the caller answers it at once.
                return [.answerFirstOffer(offer)]
            case (.byCaller, false, .ringing) where !offerWaiting:
                // The caller's, with its invitation: kept until the user answers.
                waitingOffer = offer
                return []
            default:
                return []  // out of turn (a stray offer changes nothing)
            }
        case .firstOfferRefusedEncrypted:
            // Only the caller's first offer, still unanswered, and only once.
            guard outgoing, firstOfferOut, !offersUnencrypted, phase == .inviting || phase == .ringing else { return [] }
            offersUnencrypted = true
            return [.makeOffer]
        case let .earlyAnswerArrived(answer):
            // The callee's answer before it takes the call: the media starts on it; the call
            // stays unanswered until ``LegEvent/peerAccepted``.
            guard outgoing, firstOfferOut, phase == .inviting || phase == .ringing else { return [] }
            earlyMedia = true
            return [.takeAnswer(answer)]
        case let .offerMade(sdp):
            // The callee's first offer: the manager hears of it before it goes, for the answer
            // (its next input) would end a call whose offer it does not know of. The caller's
            // goes with its invitation, which the manager knows of.
            return (outgoing ? [] : [.reportProgress(.offerSent)]) + [.send(.offer(sdp: sdp))]
        case let .answerMade(sdp):
            // The answer to the peer's first offer: the manager hears of both before it goes,
            // for ICE and DTLS finish (and media connects) only after the peer has it. Early
            // (early media), the call is not taken: the manager hears of it when it is.
            if earlyMedia { return [.send(.earlyAnswer(sdp: sdp))] }
            return (outgoing ? [.reportProgress(.offerReceived)] : []) + [.reportProgress(.answerSent), .send(.answer(sdp: sdp))]
        case .peerAccepted:
            guard outgoing else { return [] }
            return accepted()
        case .progressing:
            guard !outgoing, phase == .ringing, !earlyMedia else {
                return [.earlyMediaRefused(earlyMedia ? "the call's early media already runs" : "only a call ringing here can send early media")]
            }
            guard firstOffer == .byCaller, let offer = waitingOffer else {
                return [.earlyMediaRefused("early media answers the caller's offer, and this call's caller sent none with its invitation")]
            }
            waitingOffer = nil
            earlyMedia = true
            return [.answerFirstOffer(offer)]
        case let .answerArrived(answer):
            // The callee's first offer, the caller's (the answer says the callee took the
            // call), or either side's later one still out.
            if phase == .offering { return [.takeAnswer(answer)] }
            if firstOfferOut, phase == .inviting || phase == .ringing { return [.takeAnswer(answer)] }
            return phase.isNegotiated && offerPending ? [.takeAnswer(answer)] : []
        case .restartRequested:
            guard phase.isNegotiated else { return [.restartRefused("the call has no offer to restart")] }
            guard pathUsesICE else { return [.restartRefused("the call goes without ICE (plain RTP): there is nothing to restart")] }
            guard !offerPending else { return [.restartRefused("an offer is already waiting for the peer's answer")] }
            guard !earlyMedia else { return [.restartRefused("the call is not answered yet: its early media carries no new offer")] }
            restartPending = true
            return [.restartICE]
        case .restartOffered:
            guard phase.isNegotiated else { return [] }
            restartPending = true
            restarts += 1
            return []
        case .restartSettled:
            restartPending = false
            return []
        case let .timerFired(timer):
            guard armed.contains(timer) else { return [] }  // cancelled after it was already due
            armed.remove(timer)
            return fired(timer, now: now)
        case let .signalingLost(detail, resumable):
            guard signaling.isUp else { return [] }
            // A dial whose wire never came up fails its start action (before the end, which the
            // manager then finds already told); a wire that cannot be resumed ends the call.
            if phase == .dialing { return [.failStart(reason: detail)] + end(.signalingClosed(detail)) }
            guard resumable else { return end(.signalingClosed(detail)) }
            let actions = loseSignaling(now: now)
            signalingClosedByPeer = true
            return actions + peerMayBeGone()
        case .signalingResumed:
            guard !signaling.isUp else { return [] }
            signaling = .up
            reconnectAttempts = 0
            var actions: [LegAction] = []
            if armed.remove(.resumeWindow) != nil { actions.append(.cancel(.resumeWindow)) }
            if armed.remove(.reconnect) != nil { actions.append(.cancel(.reconnect)) }
            if armed.remove(.peerGone) != nil { actions.append(.cancel(.peerGone)) }
            actions.append(.reportSignaling(lost: false))
            return actions
        case .reconnectFailed:
            guard !signaling.isUp, !armed.contains(.reconnect) else { return [] }
            // Back off: 0.25 s after the first try, doubling to 2 s.
            let delay = min(Duration.milliseconds(250) * (1 << min(reconnectAttempts - 1, 3)), .seconds(2))
            armed.insert(.reconnect)
            return [.arm(.reconnect, after: delay)]
        case let .hostAddressesChanged(signalingAddressGone, pathAffected):
            var actions: [LegAction] = []
            if signalingAddressGone, signaling.isUp, phase != .dialing {
                // The connection left from an address this host no longer has: it is dead
                // even if TCP has not noticed. Give it up now and resume the call.
                actions.append(.closeSignaling)
                actions += loseSignaling(now: now)
            }
            // The selected pair left from an address that went (or the default route changed),
            // or the path is lost and new addresses may find a new one: restart at once
            // rather than after the loss timer. A change elsewhere leaves a working path alone.
            var lost = false
            if case .reconnecting = phase { lost = true }
            if phase.isNegotiated && !offerPending && pathUsesICE && (pathAffected || lost) {
                if earlyMedia {
                    restartWhenAnswered = true
                } else {
                    restartPending = true
                    actions.append(.restartICE)
                }
            }
            return actions
        case let .end(ending):
            return end(ending)
        }
    }

    /// Whether the call is still finding its path: checking, or on a pair whose media is not
    /// up yet (keys being agreed).
    private var settingUpPath: Bool {
        switch phase {
        case .checking, .securing: true
        default: false
        }
    }

    /// A pair found while the path is set up goes to the peer, whose checks on it may be
    /// failing (``LegEvent/peerFoundPath(_:)``); a plain RTP path found none.
    private var tellPeerPath: [LegAction] { pathUsesICE ? [.tellPeerPath] : [] }

    /// Whether a round of checks that found no pair may give way to a fresh one.
    private var startsFreshRound: Bool {
        guard pathUsesICE, signaling.isUp, setupRestarts < timings.setupIceRestarts,
              let interval = timings.iceRestartInterval, interval > .zero else { return false }
        return true
    }

    /// The timer for the round of checks starting now, while fresh rounds are left.
    private mutating func armSetupRound() -> [LegAction] {
        guard startsFreshRound, let round = timings.setupIceRound, round > .zero else { return [] }
        armed.insert(.setupRound)
        return [.arm(.setupRound, after: round)]
    }

    private mutating func loseSignaling(now: Duration) -> [LegAction] {
        signaling = .resuming(since: now)
        signalingClosedByPeer = false  // this side gave it up (its address went), unless told otherwise
        reconnectAttempts = 1
        armed.insert(.resumeWindow)
        // Whichever side can reach the other reconnects (the leg knows whether it can).
        return [.arm(.resumeWindow, after: timings.resumeWindow), .reportSignaling(lost: true), .reconnectSignaling]
    }

    /// ICE connected and the media is keyed: the call's media is connected; it starts once the
    /// audio session is active.
    private mutating func mediaConnected(at now: Duration) -> [LegAction] {
        guard case let .securing(at) = phase else { return [] }
        phase = .awaitingAudio(iceConnectedAt: at)
        return [earlyMedia ? .reportEarlyMedia : .reportMediaConnected]
    }

    /// The call whose answer came or went early is taken: the manager hears of the answer now
    /// (a callee says so to the caller once it has), and of connected media if it runs.
    private mutating func accepted() -> [LegAction] {
        guard earlyMedia else { return [] }
        earlyMedia = false
        var told: [LegAction] = outgoing ? [.reportAnswered] : [.reportAnswered, .send(.accepted)]
        if restartWhenAnswered {
            // The restart that was due while the media ran early goes now.
            restartWhenAnswered = false
            if pathUsesICE && !offerPending && signaling.isUp {
                restartPending = true
                told.append(.restartICE)
            }
        }
        switch phase {
        case let .earlyMedia(at), let .awaitingAudio(at):
            // The media runs (or waits for the audio session): it connects now, as any call's
            // does, and starts as the user's mute says.
            phase = .awaitingAudio(iceConnectedAt: at)
            return told + [.reportMediaConnected]
        default:
            return told  // the path is still being found: media connects as any call's does
        }
    }

    private mutating func fired(_ timer: LegTimer, now: Duration) -> [LegAction] {
        switch timer {
        case .keepAlive:
            armed.insert(.keepAlive)
            return [.send(.keepAlive), .arm(.keepAlive, after: timings.keepAliveInterval)]
        case .connectionLost:
            guard case .reconnecting = phase else { return [] }
            let seconds = timings.connectionLostTimeout.components.seconds
            return end(.failed("the connection was lost: nothing heard from the peer for \(seconds) s"))
        case .resumeWindow:
            guard case let .resuming(since) = signaling else { return [] }
            let seconds = (now - since).components.seconds
            return end(.failed("the signaling connection was lost and the call could not be resumed within \(seconds) s"))
        case .iceRestart:
            guard case let .reconnecting(lost) = phase, let interval = timings.iceRestartInterval else { return [] }
            // A restart due when the call gives up (the timeout a multiple of the interval)
            // would only cross the end on the wire.
            guard now - lost.lostAt < timings.connectionLostTimeout else { return [] }
            armed.insert(.iceRestart)
            // Still waiting for the last offer's answer: the signaling is as cut off as the
            // media; the offer goes through when it is back.
            guard !offerPending else { return [.arm(.iceRestart, after: interval)] }
            restartPending = true
            return [.restartICE, .arm(.iceRestart, after: interval)]
        case .reconnect:
            guard !signaling.isUp else { return [] }
            reconnectAttempts += 1
            return [.reconnectSignaling]
        case .setupRound:
            guard settingUpPath else { return [] }
            // Still waiting for the answer to a restart: the signaling is slow, not the round.
            // Early media: no offer can go before the answer, so the round runs on.
            if offerPending || earlyMedia { return armSetupRound() }
            guard startsFreshRound else { return [] }  // the round runs on until it fails
            setupRestarts += 1
            restartPending = true
            return [.restartICE] + armSetupRound()
        case .peerGone:
            guard !signaling.isUp, case let .reconnecting(lost) = phase, lost.signals.contains(.media) else { return [] }
            let seconds = (now - lost.lostAt).components.seconds
            return end(.failed("the other node went away: its signaling connection closed without ending the call and its media stopped \(seconds) s ago"))
        }
    }
}
