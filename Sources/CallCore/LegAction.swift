import SDP

/// Signaling progress a provider reports while a call is set up (the call manager's phase
/// follows it).
public enum CallProgress: String, Sendable, Equatable {
    case invitationSent, offerReceived, answerSent, offerSent, answerReceived
}

/// What the leg's owner does after a transition, in order.
public enum LegAction: Sendable, Equatable {
    /// Send this on the call's signaling connection (if it has one).
    case send(CallSignal)
    case arm(LegTimer, after: Duration)
    case cancel(LegTimer)
    /// Silence the microphone or let it be heard (the user's mute and this side's hold together).
    case setMicrophone(muted: Bool)
    /// Send DTMF digits on the call's audio (RFC 4733 events, one after another).
    case sendDTMF(String)
    /// Send a new offer for the running call with ``LegState/wantedDirection`` (RFC 3264 hold
    /// and resume), and follow its answer.
    case renegotiate
    /// Make the media and the call's bridge port do what the offer and answer (and this side's
    /// hold) say.
    case setFlow(MediaFlow)
    /// Tell the event stream the peer put the call on hold, or took it off.
    case reportHeldByPeer(Bool)
    /// Start the media with the microphone muted or not: a mute set before media existed
    /// holds from the first frame.
    case startMedia(microphoneMuted: Bool)
    /// Restart ICE: new credentials, a new gathering, a new offer (the state counts it as
    /// pending from now on: no other offer of this side crosses it).
    case restartICE
    /// Tell the peer the pair this side's checks found (``CallSignal/pathFound(_:)``), while
    /// the call sets up its path: the peer's own checks on it may be failing.
    case tellPeerPath
    /// Take the pair the peer's checks found, unless this round has one already.
    case adoptPeerPath(FoundPath)
    /// The embedder's restart cannot start, for `reason`.
    case restartRefused(String)
    /// Make this side's first offer (in this dialect's order: the callee's, once answered);
    /// once made, it comes back as ``LegEvent/offerMade(sdp:)``.
    case makeOffer
    /// Answer the peer's new offer for the running call (it did not cross one of this side's,
    /// or it crossed one and the peer's stands).
    case answerPeerOffer(SessionDescription)
    /// Answer the peer's first offer and start ICE; the answer, once made, comes back as
    /// ``LegEvent/answerMade(sdp:)``.
    case answerFirstOffer(SessionDescription)
    /// Take the peer's answer to this side's offer.
    case takeAnswer(SessionDescription)
    /// Tell the call manager how far the call's setup has come. It comes before what it
    /// tells of leaves or starts (the offer, the answer, ICE): the manager's next input, the
    /// peer's reply or media connecting, must find it past that step, or it would end the call.
    /// A progress the manager refuses stops the actions after it.
    case reportProgress(CallProgress)
    /// Start building and keying the call's media (SDES: as soon as the offer and answer are
    /// done, so ICE connecting only has to start it; DTLS: once ICE connected, because the
    /// handshake runs over the selected pair). It comes back as ``LegEvent/mediaReady``.
    case prepareMedia
    /// ICE connected and the media is keyed: tell the manager media connected (which fulfils
    /// the answer and, system-owned, activates audio) and ask for the audio session.
    case reportMediaConnected
    /// The media is built and keyed, and the answer that keyed it came (or went) early: tell
    /// the event stream the call has early media, and ask for the audio session (not the
    /// manager: the call is not answered).
    case reportEarlyMedia
    /// Start the media before the call is answered, the microphone muted or not (a caller's is,
    /// until the callee takes the call; a callee's greeting is heard).
    case startEarlyMedia(microphoneMuted: Bool)
    /// The early answer now stands: tell the manager the offer and answer are done (the callee's
    /// answer came, or this side's went), which it did not hear while the call was unanswered.
    /// (Unlike ``reportProgress(_:)``, the call runs on whatever the manager says.)
    case reportAnswered
    /// The embedder's early media cannot start, for `reason`.
    case earlyMediaRefused(String)
    /// Tell the state, as ``LegEvent/settled(id:failure:)``, how the actions before this one
    /// went (the first failure among them).
    case settle(Int)
    /// The manager's request `id` is done.
    case fulfil(Int)
    /// The manager's request `id` failed, for `reason` (what it changed is rolled back).
    case fail(Int, reason: String)
    /// The manager's start action (an outgoing call's dial) failed, for `reason`: the call's
    /// signaling was lost before it ever came up.
    case failStart(reason: String)
    /// Close the call's signaling connection (its local address left this host).
    case closeSignaling
    /// Try one new signaling connection to the peer and resume the call on it (the caller
    /// always can; a callee when it knows a way to the caller); a try that does not resume the
    /// call comes back as ``LegEvent/reconnectFailed``, and the state tries again after a
    /// while until the resume window ends.
    case reconnectSignaling
    /// Tell the event stream the signaling connection is lost (and being resumed), or back.
    case reportSignaling(lost: Bool)
    /// Tell the manager and the event stream that the connection is lost, or back.
    case reportConnectionLost
    case reportConnectionRestored
    /// Stop the call's media, DTLS and ICE, close its signaling, cancel its tasks.
    case tearDown
    /// Tell the manager the call ended (not when the manager ended it itself).
    case reportEnded(CallEndReason)
}
