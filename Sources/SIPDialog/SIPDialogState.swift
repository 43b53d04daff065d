import CallCore
import SDP

/// One SIP dialog's decisions as a plain value: the call's signals and the wire's events in,
/// what to send and what to tell the call out, time as an input. No sofia, no concurrency.
///
/// sofia-sip's user agent does what it does well (transactions, retransmissions, the ACK, the
/// answers to CANCEL and BYE); this value decides what the node wants of it: which request
/// or response carries an offer or answer (INVITE, 18x, 200, re-INVITE, ACK), when an offer
/// waits for the end of its ICE candidates (SIP has no trickle), what a refusal means for the
/// call, that a re-INVITE crossing ours is refused with 491 and ours is sent again after RFC
/// 3261's random wait, and that an encrypted first offer a phone refuses (488, 415, 606) is
/// made again in plain RTP where the media policy is ``MediaEncryption/preferred``.
///
/// The call ends exactly once: after the end or a refusal is told to it (either way), nothing
/// more is delivered, and nothing more goes out but what finishes the dialog.
public struct SIPDialogState: Sendable, Equatable {
    /// Where the dialog stands (RFC 3261 §12).
    public enum Phase: Sendable, Equatable {
        /// Outgoing, before the INVITE: the call's offer is being written (or written again in
        /// plain RTP after a refusal).
        case idle
        /// An INVITE is out or in, with no 2xx yet.
        case early
        /// A 2xx was sent or received.
        case confirmed
        /// The call is over for this side (BYE or CANCEL sent or received, or the INVITE
        /// refused); the stack finishes the dialog.
        case terminating
        /// The dialog is over on the wire.
        case terminated
    }

    /// Which message carries an SDP this side is waiting to send.
    public enum Carrier: Sendable, Equatable {
        /// The first INVITE (the caller's offer).
        case invite
        /// The 200 to the first INVITE (the callee's answer, or its offer when the INVITE had none).
        case ok
        /// A 183 to the first INVITE: the callee's answer before it takes the call (early media).
        case progress
    }

    /// An offer or answer waiting for the call's ICE candidates to end.
    public struct Waiting: Sendable, Equatable {
        public var carrier: Carrier
        public var sdp: String
        public var candidates: [String] = []
    }

    public let outgoing: Bool
    /// Outgoing: whom the INVITE goes to.
    public let uri: String?
    /// Whether the call's media may go unencrypted (``MediaEncryption/preferred``: a phone that
    /// refuses SRTP is offered plain RTP).
    public let mediaEncryption: MediaEncryption
    public private(set) var phase: Phase
    /// The call has been told it is over (or over before it began), or told the peer so.
    public private(set) var callEnded = false
    /// The peer said it rings (outgoing): said to the call once.
    public private(set) var rang = false
    /// The caller's display name, from its invitation.
    public private(set) var displayName: String?
    public private(set) var waiting: Waiting?
    /// This side's offer in a re-INVITE, not answered yet; sent again after a 491's wait.
    public private(set) var reoffer: String?
    /// The glare wait is running for ``reoffer``.
    public private(set) var glareWaiting = false
    /// A re-INVITE of the peer's was delivered and the call's answer not sent yet.
    public private(set) var peerReofferOpen = false
    /// Why the call failed here, as it told its peer (what status an unanswered call's failure
    /// gets depends on it).
    private var failure: String?
    /// An UPDATE's offer (RFC 3311) was delivered and the call's answer not sent yet: the
    /// answer goes in the UPDATE's 200.
    public private(set) var updateOfferOpen = false
    /// The SDP this side last sent in the dialog (its offer or answer): the session as it stands
    /// here, offered again to a re-INVITE that carries no offer.
    public private(set) var lastLocalSDP: String?
    /// This side offered in its 200 to a re-INVITE without an offer: the answer comes in the ACK.
    public private(set) var answerInAck = false
    /// A callee's first offer went in its 200 (the INVITE carried none): its answer comes in the
    /// ACK, and until then the peer may not offer (RFC 3311 §5.2, RFC 6337 §3.1.3): a re-INVITE
    /// or UPDATE offer meanwhile gets 491.
    public private(set) var firstOfferAwaitsAck = false
    /// Incoming: this side's 200 to the first INVITE was decided and its ACK has not come.
    public private(set) var firstAckAwaited = false
    /// The call was given the ACK's answer as its peer's description: the answer it makes to
    /// it stays here (the exchange is complete on the wire).
    public private(set) var callAnswersAck = false
    /// Incoming: the first INVITE has been taken.
    public private(set) var invited = false
    /// The first INVITE's offer (outgoing) was encrypted (SRTP keyed by SDES or DTLS).
    public private(set) var offeredEncrypted = false
    /// The first offer was refused and made again in plain RTP (once per call).
    public private(set) var offeredPlainAfterRefusal = false
    /// The answer a 183 carried (early media), either way: the call's answer, which the 200
    /// repeats (incoming) or may leave out (outgoing).
    public private(set) var earlyAnswer: String?
    /// Outgoing: this side cancelled its INVITE (a 200 crossing the CANCEL gets a BYE).
    public private(set) var cancelled = false
    private var byeSent = false
    /// An OPTIONS asking whether the peer is still there is out, its answer not in.
    public private(set) var probeOut = false
    /// When the dialog was confirmed, on the caller's clock.
    public private(set) var confirmedAt: Duration?
    /// The peer's transfer (its REFER) is being followed: its new call not connected or over yet.
    public internal(set) var referIn = false
    /// The target of this side's transfer (its REFER), until the transfer succeeds or fails.
    public internal(set) var referOut: String?
    private var random: SplitMix64

    /// A dialog for an outgoing call to `uri`, or for an incoming INVITE. `seed` drives the
    /// random waits (491's retry): any value; tests give a fixed one.
    public init(outgoing: Bool, uri: String? = nil, mediaEncryption: MediaEncryption = .preferred, seed: UInt64 = 0) {
        self.outgoing = outgoing
        self.uri = uri
        self.mediaEncryption = mediaEncryption
        phase = outgoing ? .idle : .early
        random = SplitMix64(seed: seed)
    }

    /// Whether the dialog is on the wire (its end must come from the stack), rather than never
    /// begun or already over there.
    public var onWire: Bool { phase != .idle && phase != .terminated }

    /// Handles one input at `now` and returns what to do, in order.
    public mutating func handle(_ input: SIPDialogInput, now: Duration) -> [SIPDialogAction] {
        SIPDialogCoverage.record(phase, input)
        let actions = decide(input, now: now)
        for action in actions {
            switch action {
            case let .invite(_, _, sdp), let .reinvite(sdp), let .respond(_, _, sdp?, _), let .respondToUpdate(_, _, sdp?):
                lastLocalSDP = sdp
            default: break
            }
        }
        return actions
    }

    private mutating func decide(_ input: SIPDialogInput, now: Duration) -> [SIPDialogAction] {
        switch input {
        case let .call(signal): return send(signal)
        case let .invite(sdp): return invite(sdp: sdp)
        case let .response(status, phrase, sdp): return response(status: status, phrase: phrase, sdp: sdp, now: now)
        case let .ack(sdp):
            firstAckAwaited = false
            guard !callEnded else { return [] }
            if answerInAck {
                // The answer to the offer this side made in its 200 to an offerless re-INVITE:
                // the call takes it as the peer's description, as it would a re-offer.
                answerInAck = false
                guard let sdp else { return [.note("the ACK carried no answer to the offer in the 200 (the session stays as it was)")] }
                callAnswersAck = true
                return [.deliver(.offer(sdp: sdp))]
            }
            firstOfferAwaitsAck = false
            guard let sdp else { return [] }
            return [.deliver(.answer(sdp: sdp))]  // a delayed offer's answer
        case let .cancel(reason):
            // A CANCEL after the final response has no effect (RFC 3261 §9.2): the stack answers
            // it itself and reports nothing. One it reports after this side decided its 200, and
            // before the ACK, is one it took first (sofia-sip does its part on its own thread and
            // reports through a queue): it answered the INVITE 487, and the 200 never left, so
            // the caller has hung up as surely as before the answer.
            guard !callEnded, phase == .early || phase == .confirmed && firstAckAwaited else { return [] }
            firstAckAwaited = false
            callEnded = true
            phase = .terminating
            return [.deliver(.end(SIPWire.cancelReason(reason)))]
        case .bye:
            guard !callEnded else { return [] }
            callEnded = true
            phase = .terminating
            return [.deliver(.end(.hangup))]
        case .terminated:
            // The old dialog of an offer made again in plain RTP: its successor carries the call.
            if phase == .idle { return [] }
            phase = .terminated
            guard !callEnded else { return [] }
            callEnded = true
            return [.signalingLost("the SIP dialog ended")]
        case let .info(contentType, body):
            guard !callEnded, let digit = SIPWire.dtmfDigit(contentType: contentType, body: body) else { return [] }
            return [.deliverDTMF(digit)]
        case let .update(sdp):
            return update(sdp: sdp)
        case let .sessionExpired(detail):
            // The stack ended a confirmed session itself (RFC 4028: nobody refreshed it in time).
            guard phase == .confirmed, !callEnded else { return [] }
            callEnded = true
            phase = .terminating
            return [.signalingLost(detail)]
        case let .probeAnswered(status, phrase, local):
            probeOut = false
            guard phase == .confirmed, !callEnded else { return [] }
            // Any answer from the peer says it is there (405 and 501 too), except that it no
            // longer knows the call; a request this side's stack could not deliver (the peer's
            // port refuses it: its process is gone) says it is not. No answer at all (a cut
            // link) is left to the call's own loss timeout.
            // Either way the dialog is ended here too, by a BYE: it gets the same answer (481,
            // or the refused port), and the stack lets the dialog go only once a BYE is answered.
            if status == 481 {
                callEnded = true
                phase = .terminating
                byeSent = true
                return [.signalingLost("the SIP peer no longer knows this call (481 to an OPTIONS in its dialog: it restarted or dropped the call)"), .bye]
            }
            if local, status == 503 {
                callEnded = true
                phase = .terminating
                byeSent = true
                return [.signalingLost("the SIP peer is gone: an OPTIONS in the call's dialog could not reach it (\(status) \(phrase))"), .bye]
            }
            return []
        case .callClosed:
            // The call is gone: nothing more for it (its end went out before, if it had one).
            callEnded = true
            waiting = nil
            if phase == .idle { phase = .terminated }
            return []
        case .refer, .transferDecided, .transferSettled, .transfer, .referAnswered, .notified:
            return transfer(input)
        case let .timerFired(timer):
            switch timer {
            case .glareRetry:
                guard glareWaiting, phase == .confirmed, !callEnded, let reoffer else { return [] }
                glareWaiting = false
                return [.reinvite(sdp: reoffer)]
            }
        }
    }

    // MARK: - The call's signals

    private mutating func send(_ signal: CallSignal) -> [SIPDialogAction] {
        switch signal {
        case let .invite(invitation):
            displayName = invitation.displayName
            return []
        case let .offer(sdp):
            guard !callEnded else { return [] }
            switch phase {
            case .idle:
                // The caller's offer goes in its INVITE, with every candidate.
                waiting = Waiting(carrier: .invite, sdp: sdp)
                return []
            case .confirmed where peerReofferOpen:
                // The call offered before it took the peer's re-INVITE, now waiting for its
                // answer: no INVITE may start while that one is in progress (RFC 3261 §14.1).
                // The call settles crossed offers as glare does: the caller answers the peer's
                // and gives its own up; the callee's stands, and the peer's is refused with 491
                // (which ends that transaction) before it goes.
                guard !outgoing else { return [.note("the call's offer crossed the peer's re-INVITE, which the call answers: not sent")] }
                peerReofferOpen = false
                reoffer = SIPWire.adding([], to: sdp)
                glareWaiting = false
                return [.respond(status: 491, phrase: "Request Pending", sdp: nil, retryAfter: nil), .reinvite(sdp: SIPWire.adding([], to: sdp))]
            case .confirmed:
                // A hold or resume, or an ICE restart: its SDP has what the call has now.
                reoffer = SIPWire.adding([], to: sdp)
                glareWaiting = false
                return [.reinvite(sdp: SIPWire.adding([], to: sdp))]
            case .early where !outgoing:
                // The INVITE came without an offer: the callee's goes in its 200.
                waiting = Waiting(carrier: .ok, sdp: sdp)
                firstOfferAwaitsAck = true
                return []
            default:
                return [.note("an offer while the dialog is \(phase) (dropped)")]
            }
        case let .answer(sdp):
            guard !callEnded else { return [] }
            if updateOfferOpen {
                updateOfferOpen = false
                return [.respondToUpdate(status: 200, phrase: nil, sdp: SIPWire.adding([], to: sdp))]
            }
            if phase == .confirmed {
                if callAnswersAck {
                    callAnswersAck = false
                    return [.note("the call took the answer in the peer's ACK")]
                }
                guard peerReofferOpen else { return [.note("an answer with no re-INVITE to answer (dropped)")] }
                peerReofferOpen = false
                return [.respond(status: 200, phrase: nil, sdp: SIPWire.adding([], to: sdp), retryAfter: nil)]
            }
            guard !outgoing, phase == .early, earlyAnswer == nil else { return [.note("an answer with no offer to answer (dropped)")] }
            waiting = Waiting(carrier: .ok, sdp: sdp)
            return []
        case let .earlyAnswer(sdp):
            // The callee's greeting before it answers: the answer goes in a 183.
            guard !callEnded, !outgoing, phase == .early, waiting == nil, earlyAnswer == nil else {
                return [.note("an early answer with no INVITE's offer to answer (dropped)")]
            }
            waiting = Waiting(carrier: .progress, sdp: sdp)
            return []
        case .accepted:
            guard !callEnded, !outgoing, phase == .early else { return [] }
            if var held = waiting, held.carrier == .progress {
                // Taken before the 183 left: the answer goes in the 200 instead.
                held.carrier = .ok
                waiting = held
                return []
            }
            guard let earlyAnswer else { return [.note("the call was taken with no early answer to stand (dropped)")] }
            phase = .confirmed
            firstAckAwaited = true
            // The 200 repeats the 183's answer: the offer's one answer (RFC 3261 §13.2.1).
            return [.respond(status: 200, phrase: nil, sdp: earlyAnswer, retryAfter: nil)]
        case let .candidates(lines, end):
            // SIP has no trickle after the SDP; and an ended call's offer or answer never goes
            // out (the caller gave up, hung up, or the dialog ended while it waited).
            guard !callEnded, var held = waiting else { return [] }
            held.candidates += lines
            waiting = held
            return end ? flush() : []
        case .pathFound:
            return []  // node to node only: a SIP peer's ICE finds its pairs itself
        case .ringing:
            guard !outgoing, phase == .early, !callEnded else { return [] }
            return [.respond(status: 180, phrase: "Ringing", sdp: nil, retryAfter: nil)]
        case let .reject(reason):
            guard !outgoing, phase == .early, !callEnded else { return [] }
            callEnded = true
            phase = .terminating
            let (status, phrase) = SIPWire.status(for: reason)
            return [.respond(status: status, phrase: phrase, sdp: nil, retryAfter: reason == .draining ? SIPWire.drainingRetryAfter : nil)]
        case let .end(reason):
            guard !callEnded else { return [] }
            callEnded = true
            waiting = nil
            switch phase {
            case .confirmed:
                phase = .terminating
                return [.bye]
            case .early where outgoing:
                phase = .terminating
                cancelled = true
                return [.cancel]
            case .early:
                phase = .terminating
                let (status, phrase) = reason == .failed ? SIPWire.status(forFailure: failure) : SIPWire.status(for: reason)
                return [.respond(status: status, phrase: phrase, sdp: nil, retryAfter: nil)]
            case .idle:
                // Nothing on the wire (yet, or any more after a refused offer).
                phase = .terminated
                return []
            case .terminating, .terminated:
                return []
            }
        case .keepAlive:
            // The call keeps its path alive (periodically, and at once when its media stops):
            // in SIP, an OPTIONS in the dialog asks whether the peer is still there.
            guard phase == .confirmed, !callEnded, !probeOut else { return [] }
            probeOut = true
            return [.probe]
        case let .error(detail):
            // A later offer the call could not take while it runs: refused, and the session
            // stays as it was (RFC 3261 §14.2, RFC 3311 §5.2). Whether the call then ends is
            // the call's to say (its end comes after, as a BYE).
            if !callEnded, phase == .confirmed, updateOfferOpen || peerReofferOpen {
                let phrase = "Not Acceptable Here"
                if updateOfferOpen {
                    updateOfferOpen = false
                    return [.respondToUpdate(status: 488, phrase: phrase, sdp: nil)]
                }
                peerReofferOpen = false
                return [.respond(status: 488, phrase: phrase, sdp: nil, retryAfter: nil)]
            }
            // Otherwise SIP carries none; a failure ends with its status, which says what it was.
            failure = detail
            return []
        }
    }

    /// The offer or answer goes out with its candidates, now the call's gathering has ended.
    private mutating func flush() -> [SIPDialogAction] {
        guard let held = waiting else { return [] }
        waiting = nil
        let sdp = SIPWire.adding(held.candidates, to: held.sdp)
        switch held.carrier {
        case .invite:
            guard let uri else { return [.note("an outgoing dialog with no address to call")] }
            phase = .early
            offeredEncrypted = !((try? SessionDescription(parsing: sdp))?.audioIsPlainRTP ?? false)
            return [.invite(to: uri, displayName: displayName, sdp: sdp)]
        case .ok:
            phase = .confirmed
            firstAckAwaited = true
            return [.respond(status: 200, phrase: nil, sdp: sdp, retryAfter: nil)]
        case .progress:
            earlyAnswer = sdp
            return [.respond(status: 183, phrase: "Session Progress", sdp: sdp, retryAfter: nil)]
        }
    }

    // MARK: - The wire's events

    private mutating func invite(sdp: String?) -> [SIPDialogAction] {
        guard !callEnded else { return [] }
        if !outgoing, !invited {
            invited = true
            return sdp.map { [.deliver(.offer(sdp: $0))] } ?? []
        }
        guard phase == .confirmed else {
            return [.note("a second INVITE before the dialog was confirmed (the stack answers it)")]
        }
        // A re-INVITE crossing ours in progress (RFC 3261 §14.2): 491, and each side tries
        // again later. One that comes while ours waits to go again is taken, and ours given up
        // (the uneven waits of §14.1 are there so that one side's retry gets through).
        if reoffer != nil && !glareWaiting || firstOfferAwaitsAck {
            return [.respond(status: 491, phrase: "Request Pending", sdp: nil, retryAfter: nil)]
        }
        reoffer = nil
        glareWaiting = false
        guard let sdp else {
            // No offer (RFC 3261 §14.2): the offer goes in the 200 — the session as it stands
            // here (RFC 6337 §5.3) — and the answer comes in the ACK.
            guard let local = lastLocalSDP else {
                return [.respond(status: 488, phrase: "Not Acceptable Here (no session to offer yet)", sdp: nil, retryAfter: nil)]
            }
            answerInAck = true
            return [.respond(status: 200, phrase: nil, sdp: local, retryAfter: nil)]
        }
        peerReofferOpen = true
        return [.deliver(.offer(sdp: sdp))]
    }

    /// An UPDATE (RFC 3311): a session refresh without a body, or a new offer in the dialog.
    private mutating func update(sdp: String?) -> [SIPDialogAction] {
        guard !callEnded, phase == .early || phase == .confirmed else {
            return [.respondToUpdate(status: 481, phrase: "Call/Transaction Does Not Exist", sdp: nil)]
        }
        guard let sdp else {
            // A refresh (the stack has restarted the session timer): nothing changes.
            return [.respondToUpdate(status: 200, phrase: nil, sdp: nil)]
        }
        // One offer at a time (RFC 3311 §5.2): ours out, or the peer's waiting for its answer.
        if reoffer != nil && !glareWaiting || peerReofferOpen || updateOfferOpen || firstOfferAwaitsAck {
            return [.respondToUpdate(status: 491, phrase: "Request Pending", sdp: nil)]
        }
        guard phase == .confirmed else {
            // The call's first exchange completes with the 200: an early offer is not taken.
            return [.respondToUpdate(status: 488, phrase: "Not Acceptable Here (an offer before the call is answered)", sdp: nil)]
        }
        reoffer = nil
        glareWaiting = false
        updateOfferOpen = true
        return [.deliver(.offer(sdp: sdp))]
    }

    private mutating func response(status: Int, phrase: String, sdp: String?, now: Duration) -> [SIPDialogAction] {
        // A 200 that crossed our CANCEL made a dialog nobody wants: it ends at once (RFC 3261
        // §15; the stack has ACKed it).
        if cancelled, !byeSent, (200..<300).contains(status) {
            byeSent = true
            return [.bye]
        }
        guard !callEnded else { return [] }
        switch (phase, status) {
        case (.early, 100..<200) where outgoing:
            var actions: [SIPDialogAction] = []
            if (status == 180 || status == 183), !rang {
                rang = true
                actions.append(.deliver(.ringing))
            }
            // An answer in a 18x (early media: the callee's announcements, its network's
            // ringback): the media starts on it, and it stands for the 200, which may carry none.
            if let sdp, status > 100, earlyAnswer == nil {
                earlyAnswer = sdp
                actions.append(.deliver(.earlyAnswer(sdp: sdp)))
            }
            return actions
        case (.early, 200..<300) where outgoing:
            phase = .confirmed
            confirmedAt = now
            if let earlyAnswer {
                // The offer has one answer (RFC 3261 §13.2.1): the 183's, now taken.
                let differs = sdp.map { $0 != earlyAnswer } ?? false
                return (differs ? [.note("the 200 carries other SDP than the 183's answer, which stands")] : []) + [.deliver(.accepted)]
            }
            guard let answer = sdp else { return fail("the SIP peer answered without SDP") }
            return [.deliver(.answer(sdp: answer))]
        case (.early, 300...) where outgoing:
            return refused(status: status, phrase: phrase)
        case (.confirmed, 200..<300):
            // Our re-INVITE's answer (a repeated 200 to the first INVITE has no offer waiting).
            guard reoffer != nil else { return [] }
            reoffer = nil
            guard let sdp else { return [.note("the peer answered a re-INVITE without SDP")] }
            return [.deliver(.answer(sdp: sdp))]
        case (.confirmed, 491):
            // Glare: ours goes again after a random wait — 2.1–4 s for the side that made the
            // dialog (its Call-ID), up to 2 s for the other (RFC 3261 §14.1), in 10 ms steps.
            guard reoffer != nil else { return [] }
            glareWaiting = true
            let steps = outgoing ? 210 + random.next(below: 190) : random.next(below: 200)
            return [.arm(.glareRetry, after: .milliseconds(Int64(steps) * 10))]
        case (.confirmed, 300...):
            // Any other refusal of a re-INVITE: the call goes on as it was.
            reoffer = nil
            return [.note("the peer refused a re-INVITE: \(status) \(phrase)")]
        default:
            return []
        }
    }

    /// The first INVITE was refused.
    private mutating func refused(status: Int, phrase: String) -> [SIPDialogAction] {
        // A phone that takes no SRTP (488 Not Acceptable Here, 415, 606) is offered plain RTP
        // once, in a new INVITE, when the media may go unencrypted. Not after an early answer:
        // one that took the encrypted offer says the refusal is about something else (a node
        // whose call failed while its early media ran), and the call ends with it.
        let refusedSRTP = [488, 415, 606].contains(status) && offeredEncrypted && earlyAnswer == nil
        if refusedSRTP, mediaEncryption == .preferred, !offeredPlainAfterRefusal {
            offeredPlainAfterRefusal = true
            phase = .idle
            return [.newDialog, .offerAgainUnencrypted(reason: "\(status) \(phrase)")]
        }
        callEnded = true
        phase = .terminating
        switch status {
        case 486, 600: return [.deliver(.reject(.busy))]
        case 603: return [.deliver(.reject(.declined))]
        // A node's refusals: do-not-disturb, a caller it blocks or does not know. Any other 480
        // (a registrar with no binding for the callee) or 403 (a proxy's "not allowed") says
        // its status as a failure.
        case 480 where phrase.localizedCaseInsensitiveContains("(do not disturb)"): return [.deliver(.reject(.doNotDisturb))]
        case 403 where phrase.localizedCaseInsensitiveContains("(blocked)"): return [.deliver(.reject(.blocked))]
        case 403 where phrase.localizedCaseInsensitiveContains("(unknown caller)"): return [.deliver(.reject(.unknownCaller))]
        case 487:
            // The callee ended the call before its answer went out (its user hung up: a node
            // answers 487 then, as its stack does to a CANCEL): the peer's hang-up, not a failure.
            return [.deliver(.end(.hangup))]
        case 408, 503:
            // Also what the stack answers itself when nothing answered at that address or its
            // transport failed (a refused port, no route).
            return failing("the SIP peer did not take the call: \(status) \(phrase) (it refused, or nothing answers at that address)")
        case _ where refusedSRTP && mediaEncryption == .required:
            return failing("the SIP peer answered \(status) \(phrase): it takes no SRTP, and this node requires it")
        default:
            return failing("the SIP peer answered \(status) \(phrase)")
        }
    }

    private mutating func fail(_ detail: String) -> [SIPDialogAction] {
        callEnded = true
        phase = .terminating
        return [.bye] + failing(detail)
    }

    private func failing(_ detail: String) -> [SIPDialogAction] {
        [.deliver(.error(detail)), .deliver(.end(.failed))]
    }
}

/// SplitMix64: a small seeded generator, so a dialog's random waits replay from a seed.
struct SplitMix64: Sendable, Equatable {
    private var state: UInt64
    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A value in `0..<bound`.
    mutating func next(below bound: UInt64) -> UInt64 { next() % bound }
}
