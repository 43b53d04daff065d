import CallCore

/// What a SIP dialog hears: the call's signals and its wire's events.
public enum SIPDialogInput: Sendable, Equatable {
    /// A signal the call sends to its peer.
    case call(CallSignal)
    /// An INVITE in this dialog: the first (incoming calls) or a re-INVITE.
    case invite(sdp: String?)
    /// A response to this side's INVITE or re-INVITE.
    case response(status: Int, phrase: String, sdp: String?)
    /// The ACK to this side's 200 (with SDP: the answer to an offer made in the 200).
    case ack(sdp: String?)
    /// The caller cancelled (its RFC 3326 Reason header, if any).
    case cancel(reason: String?)
    /// The peer hung up.
    case bye
    /// The stack ended the dialog.
    case terminated
    /// An INFO (DTMF some phones send this way).
    case info(contentType: String?, body: String?)
    case timerFired(SIPDialogTimer)
    /// The call closed its side (after its end, or without one): nothing more is sent for it.
    case callClosed
    /// An UPDATE in this dialog (RFC 3311): a refresh without a body, or an offer.
    case update(sdp: String?)
    /// The stack ended the session itself (`detail` says why: its session timer ran out).
    case sessionExpired(String)
    /// The answer to this side's OPTIONS in the dialog (`local`: made by this side's stack,
    /// the request undelivered).
    case probeAnswered(status: Int, phrase: String, local: Bool)
    /// The peer asks this side to call its REFER's Refer-To (`target`): the call is transferred.
    case refer(target: String?)
    /// The node's decision on the peer's REFER: 202 (it calls the target), or a refusal (403
    /// for a blocked target).
    case transferDecided(status: Int, phrase: String?)
    /// The call placed for the peer's transfer connected or ended: another may be followed.
    case transferSettled
    /// This side transfers the call: the peer is asked to call `target` (a blind transfer), or
    /// to replace this side's call `replacing` with the target (an attended transfer: the id of
    /// that call's dialog at the stack).
    case transfer(to: String, replacing: Int? = nil)
    /// The final response to this side's REFER.
    case referAnswered(status: Int, phrase: String)
    /// A NOTIFY of this side's REFER: the transferee's new call's progress (its sipfrag body).
    case notified(body: String?)
}

/// A SIP dialog's timers.
public enum SIPDialogTimer: Sendable, Hashable {
    /// A re-INVITE refused with 491 goes again.
    case glareRetry
}

/// What a SIP dialog does: requests and responses for the stack, signals for the call.
public enum SIPDialogAction: Sendable, Equatable {
    /// The first INVITE, to `to`, with the call's offer.
    case invite(to: String, displayName: String?, sdp: String)
    /// A re-INVITE in the dialog.
    case reinvite(sdp: String)
    /// The response to the peer's REFER.
    case respondToRefer(status: Int, phrase: String?)
    /// Ask the node to call `to` for the peer's transfer (placed as any call it places; its
    /// decision comes back as ``SIPDialogInput/transferDecided(status:phrase:)``); `replaces`
    /// names the dialog the new call replaces at the target (an attended transfer).
    case followTransfer(to: String, replaces: String?)
    /// A REFER asking the peer to call `to` (replacing this side's call `replacing` there).
    case refer(to: String, replacing: Int? = nil)
    /// This side's transfer cannot start, for this reason.
    case transferRefused(String)
    /// Tell the call how its transfer goes (the transferee's new call's status, or the
    /// REFER's refusal).
    case reportTransfer(status: Int, detail: String)
    /// This side's transfer succeeded: the call ends (`detail` says to whom it went).
    case transferred(String)
    /// A response to the peer's INVITE or re-INVITE.
    case respond(status: Int, phrase: String?, sdp: String?, retryAfter: Int?)
    /// A response to the peer's UPDATE (with the answer to its offer).
    case respondToUpdate(status: Int, phrase: String?, sdp: String?)
    case bye
    case cancel
    /// An OPTIONS in the dialog: is the peer still there?
    case probe
    /// A signal for the call.
    case deliver(CallSignal)
    /// A DTMF digit the peer sent on the wire.
    case deliverDTMF(Character)
    /// The dialog ended under the call: it ends.
    case signalingLost(String)
    /// The next INVITE starts a dialog of its own (a new Call-ID): the old one is over.
    case newDialog
    /// The call is asked for its first offer again, in plain RTP (the peer refused SRTP).
    case offerAgainUnencrypted(reason: String)
    /// Fire `timer` after `after`.
    case arm(SIPDialogTimer, after: Duration)
    /// Something worth a line in the log.
    case note(String)
}
