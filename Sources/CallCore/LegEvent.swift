import SDP

/// What happens to a leg: progress of its setup, its media and ICE, the user's intent, its
/// timers, and its end. See ``LegState/handle(_:now:)``.
public enum LegEvent: Sendable, Equatable {
    /// The signaling connection is up (outgoing: and the invitation went out).
    case signalingReady
    /// Outgoing: the callee rings.
    case peerRinging
    /// Incoming: the call was answered; the offer is being made.
    case answering
    /// The offer and answer are done (the first time; later ones change ICE only), the media
    /// keyed by a DTLS handshake over the selected pair (`dtls`) or by keys the SDP carried; the
    /// path found by ICE, or (`ice` false: a SIP peer without it) a plain RTP path, which has
    /// nothing to restart.
    case negotiated(dtls: Bool, ice: Bool = true)
    case iceConnected
    /// The peer's checks found a pair (``CallSignal/pathFound(_:)``).
    case peerFoundPath(FoundPath)
    case iceDisconnected
    /// ICE gave up: no pair worked, or the selected one failed (consent expired).
    case iceFailed
    /// The media is built and keyed (with DTLS, after the handshake).
    case mediaReady
    /// The audio session is active (activated by its one owner): media may start.
    case audioActivated
    /// No authentic media arrived for the stall timeout, and media arrives again.
    case mediaStalled
    case mediaResumed
    case setMuted(Bool)
    /// The user here holds the call or resumes it.
    case setHeld(Bool)
    /// A request of the call manager's (`id` names it in ``LegAction/settle(_:)``,
    /// ``LegAction/fulfil(_:)`` and ``LegAction/fail(_:reason:)``).
    case request(LegRequest, id: Int)
    /// The actions a request returned have been performed; `failure` is why one of them
    /// failed (the microphone would not reopen), nil when all worked.
    case settled(id: Int, failure: String?)
    /// The peer's side of an offer or answer: whether it takes this side's audio and sends
    /// its own (nil where that exchange could not say: an answer to an offer that did not
    /// send, or did not receive).
    case peerDirection(receives: Bool?, sends: Bool?)
    /// The answer to this side's last offer (a restart's or a hold's) came.
    case offerAnswered
    /// A hold or resume offer could not be sent.
    case renegotiationSettled
    /// The peer offered again for the running call (a restart, a hold, a resume): whether to
    /// answer it, or to keep this side's own offer that crossed it, is the state's decision.
    case peerReoffered(SessionDescription)
    /// An offer came from the peer: the first (answered if this side expects it: the caller's
    /// in node envelopes; the callee's, waiting for the user, in SIP) or a later one
    /// (``peerReoffered(_:)``). The state keeps a first offer that waits, and hands back in its
    /// action the one to answer.
    case offerArrived(SessionDescription)
    /// An answer came from the peer: taken if this side has an offer out that it answers.
    case answerArrived(SessionDescription)
    /// Outgoing: the callee's answer to this side's first offer came before the callee took
    /// the call (early media: ``CallSignal/earlyAnswer(sdp:)``).
    case earlyAnswerArrived(SessionDescription)
    /// This side's offer is made (`sdp`, ready to send; its gathering under way): the state
    /// says whom to tell before it goes.
    case offerMade(sdp: String)
    /// This side's answer to the peer's first offer is made (`sdp`): the state says whom to
    /// tell before it goes, and whether it goes early (early media) or takes the call.
    case answerMade(sdp: String)
    /// Outgoing: the callee took the call whose answer came early (``CallSignal/accepted``).
    case peerAccepted
    /// Incoming: the embedder sends early media before it answers (or declines): the caller's
    /// first offer is answered now, early, and the call goes on ringing.
    case progressing
    /// The peer refused this side's first offer for its encryption (a SIP phone that takes no
    /// SRTP), and the dialect's media policy lets the call go unencrypted: offer again in plain RTP.
    case firstOfferRefusedEncrypted
    /// The call's signaling connection closed (`detail` says how); a call between nodes is
    /// `resumable` on a new connection.
    case signalingLost(String, resumable: Bool)
    /// The call moved to a new signaling connection.
    case signalingResumed
    /// A try at a new signaling connection (``LegAction/reconnectSignaling``) ended without
    /// resuming the call.
    case reconnectFailed
    /// This host's addresses or default route changed; the signaling connection's own local
    /// address is gone when `signalingAddressGone`, and the selected ICE pair's (or the route
    /// it took) when `pathAffected`.
    case hostAddressesChanged(signalingAddressGone: Bool, pathAffected: Bool)
    /// The embedder asks for an ICE restart now.
    case restartRequested
    /// This side sent an ICE restart's offer.
    case restartOffered
    /// A restart's answer came (or the restart failed): another may start.
    case restartSettled
    case timerFired(LegTimer)
    case end(LegEnding)
}

/// What the call manager asks of a leg, decided by its state and rolled back if it fails.
public enum LegRequest: Sendable, Equatable {
    case mute(Bool)
    case hold(Bool)
    /// Send these DTMF digits (RFC 4733 events) on the call's audio; nothing to roll back.
    case dtmf(String)
}
