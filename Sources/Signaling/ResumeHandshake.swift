/// Why a node refuses to carry a call on over a new connection (`resume-refused`). On the wire
/// the reason stays the text older nodes write and read; here it is typed, and read back from
/// that text in one place.
public enum ResumeRefusal: Sendable, Equatable, CustomStringConvertible {
    /// The call is not one that resumes (a page's, a session's).
    case notResumable
    /// Both sides reconnected at once: the caller's own connection wins, this try gives way.
    case callerResuming
    /// The asker is not the call's peer (another identity, or not a node).
    case notYours
    /// The asker's token is not the call's.
    case wrongToken
    /// The refusing node has no such call: it ended there (`hungUpThere`: because its user hung
    /// up while the signaling was down).
    case callGone(call: String, hungUpThere: Bool)
    /// A reason this node does not know (a newer node's): this try gives way, as for the
    /// refusals it knows that leave the call to another try.
    case other(String)

    private static let goneStart = "no call ", goneEnd = " here: it has ended", hungUp = " (its user hung up)"

    /// The text on the wire.
    public var reason: String {
        switch self {
        case .notResumable: "this call cannot be resumed"
        case .callerResuming: "the caller is resuming the call on a connection of its own"
        case .notYours: "this call is not yours to resume"
        case .wrongToken: "wrong resume token"
        case let .callGone(call, hungUpThere): Self.goneStart + call + Self.goneEnd + (hungUpThere ? Self.hungUp : "")
        case let .other(text): text
        }
    }

    public var description: String { reason }

    /// The refusal a reason on the wire says.
    public init(reason: String) {
        for known in [ResumeRefusal.notResumable, .callerResuming, .notYours, .wrongToken] where known.reason == reason {
            self = known
            return
        }
        if reason.hasPrefix(Self.goneStart) {
            let hungUpThere = reason.hasSuffix(Self.hungUp)
            var rest = reason.dropFirst(Self.goneStart.count)
            if hungUpThere { rest = rest.dropLast(Self.hungUp.count) }
            let call = rest.hasSuffix(Self.goneEnd) ? String(rest.dropLast(Self.goneEnd.count)) : String(rest)
            self = .callGone(call: call, hungUpThere: hungUpThere)
            return
        }
        self = .other(reason)
    }
}

/// The resumption handshake's decisions, as values: whether a node lets a call go on over the
/// connection a peer offers (`resume`), and what the asking side makes of a refusal.
public enum ResumeHandshake {
    /// What the asked node knows when a `resume` comes.
    public struct Request: Sendable, Equatable {
        /// The call is one that resumes.
        public var resumable: Bool
        /// This side placed the call, and its own attempt to resume it is under way.
        public var callerResumingItself: Bool
        /// The asker is a node, and the call's peer.
        public var fromThePeer: Bool
        /// The asker's token is the call's (compared in constant time by the caller of this).
        public var tokenMatches: Bool

        public init(resumable: Bool, callerResumingItself: Bool, fromThePeer: Bool, tokenMatches: Bool) {
            self.resumable = resumable
            self.callerResumingItself = callerResumingItself
            self.fromThePeer = fromThePeer
            self.tokenMatches = tokenMatches
        }
    }

    /// Nil: the call goes on over the new connection; else why not, in this order: a call that
    /// does not resume, a crossing attempt (the caller's own connection wins), an asker that is
    /// not the peer, a wrong token.
    public static func answer(_ request: Request) -> ResumeRefusal? {
        if !request.resumable { return .notResumable }
        if request.callerResumingItself { return .callerResuming }
        if !request.fromThePeer { return .notYours }
        if !request.tokenMatches { return .wrongToken }
        return nil
    }

    /// What a refusal means to the side that asked.
    public enum Outcome: Sendable, Equatable {
        /// This try gave way (crossing attempts, or a refusal that leaves the call to another
        /// try): close the connection, keep the call.
        case tryElsewhere
        /// The call ended there because its user hung up: it ends here as hung up.
        case hungUp
        /// The call cannot go on: it fails, saying why.
        case failed(String)
    }

    public static func outcome(of refusal: ResumeRefusal) -> Outcome {
        switch refusal {
        case let .callGone(_, hungUpThere): hungUpThere ? .hungUp : .failed("the other node refused to resume the call: \(refusal.reason)")
        case .notResumable, .callerResuming, .notYours, .wrongToken, .other: .tryElsewhere
        }
    }
}
