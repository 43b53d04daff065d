import SDP

/// What a call says to its peer, in the call's own terms. A signaling dialect (node envelopes,
/// the call page's WebSocket, and others) puts these on its wire and reads them back; the
/// leg's state never sees how.
public enum CallSignal: Sendable, Equatable {
    /// The caller's invitation.
    case invite(CallInvitation)
    /// The callee rings.
    case ringing
    /// An SDP offer: the first one (the dialect says which side makes it), or a later one for
    /// the running call (an ICE restart, a hold, a resume).
    case offer(sdp: String)
    /// The SDP answer to the last offer.
    case answer(sdp: String)
    /// The callee's answer to the caller's first offer before it takes the call (SIP's 183
    /// with SDP): media runs — the callee's announcements or ringback, a greeting before it
    /// answers — while the call is not answered. ``accepted`` (or an end) follows.
    case earlyAnswer(sdp: String)
    /// The callee took the call whose answer came early (SIP's 200 after the 183).
    case accepted
    /// ICE candidates found after the offer or answer went out (`end`: no more this round).
    case candidates([String], end: Bool)
    /// This side's checks found a working pair while the call sets up its path: the peer, whose
    /// own checks may still be failing (its answers to them lost), can take the same pair.
    case pathFound(FoundPath)
    /// The call is over, for `reason`.
    case end(HangupReason)
    /// The callee refuses the call.
    case reject(RejectReason)
    /// Something the peer sent could not be taken (it is told why; the call may end next).
    case error(String)
    /// Nothing: keeps the signaling path open through NATs and relays.
    case keepAlive
}

/// The candidate pair one side's connectivity checks proved, as the peer is told of it
/// (``CallSignal/pathFound(_:)``). A check that succeeded went from `local` to `remote` and its
/// response came back: the path works both ways for the peer too, from `remote` to `local`.
public struct FoundPath: Sendable, Equatable, Codable {
    /// The round of checks it was found in: the finder's ICE username fragment.
    public var ufrag: String
    /// The finder's candidate (the peer's remote one).
    public var local: TransportAddress
    /// The peer's candidate the finder reached (the peer's local one).
    public var remote: TransportAddress

    public init(ufrag: String, local: TransportAddress, remote: TransportAddress) {
        self.ufrag = ufrag
        self.local = local
        self.remote = remote
    }
}

/// What a caller's invitation says of the call.
public struct CallInvitation: Sendable, Equatable {
    /// The caller's chosen display name (informational: the identity is what authenticates).
    public var displayName: String?
    /// A title for the call or session.
    public var title: String?
    /// Set when the call is a session both sides joined (no ringing).
    public var session: String?

    public init(displayName: String? = nil, title: String? = nil, session: String? = nil) {
        self.displayName = displayName
        self.title = title
        self.session = session
    }
}
