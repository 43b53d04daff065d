/// Why a callee refused a call; carried by ``CallSignal/reject(_:)``.
public enum RejectReason: String, Sendable, Codable, CaseIterable, CustomStringConvertible {
    /// The callee has no room for another call.
    case busy
    /// The callee declined the ringing call.
    case declined
    /// The caller is on the callee's block list.
    case blocked
    /// The caller's fingerprint is not among the callee's contacts.
    case unknownCaller = "unknown-caller"
    /// The callee has do-not-disturb on.
    case doNotDisturb = "do-not-disturb"
    /// The callee is draining: it finishes the calls it has and takes no new ones (a rolling
    /// restart behind a proxy; SIP's 503 with Retry-After, so a dispatcher tries another node).
    case draining

    public var description: String {
        switch self {
        case .busy: "busy"
        case .declined: "declined"
        case .blocked: "blocked"
        case .unknownCaller: "unknown caller (add the caller to the callee's contacts, or start the callee with --accept-unknown)"
        case .doNotDisturb: "do-not-disturb"
        case .draining: "draining (the callee is stopping and takes no new calls)"
        }
    }
}

/// Why a call ended, as told to the peer by ``CallSignal/end(_:)``.
public enum HangupReason: String, Sendable, Codable, CaseIterable {
    /// The user hung up.
    case hangup
    /// The call failed on the sender's side (ICE, media, devices).
    case failed
    /// Nobody answered in time.
    case timeout
    /// The node is shutting down.
    case shutdown
    /// The caller's call was answered on another of the callee's devices (SIP's CANCEL with
    /// `Reason: SIP;cause=200`): not a missed call here.
    case answeredElsewhere
    /// The callee declined it on another device (`Reason: SIP;cause=600` or `603`).
    case declinedElsewhere
}


/// Why a call ended. The first five are CallKit's `CXCallEndedReason`; the others are ends
/// this node performed itself.
public enum CallEndReason: String, Sendable, Codable, CaseIterable {
    /// The call could not be set up or its media failed (including an answer that could not
    /// connect in time).
    case failed
    case remoteEnded
    /// Nobody answered: before the ring timeout, or (incoming) before the caller gave up — a
    /// missed call.
    case unanswered
    case answeredElsewhere
    case declinedElsewhere
    /// The local user hung up.
    case localEnded
    /// The local user rejected a ringing call.
    case declined
}

