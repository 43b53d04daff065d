/// Whether an incoming call may ring here — one rule for every dialect (calls between nodes,
/// pages, SIP, an embedder's own): decided on what the node knows when the call arrives, in this
/// order. A call the rule lets through is then offered to the call manager, which may still
/// refuse it (do-not-disturb, its own limits; ``Admission/refusal(managerFiltered:)``).
public enum Admission {
    /// What the node knows of itself and of the caller when the call arrives.
    public struct Facts: Sendable, Equatable {
        /// The node takes calls at all (started, not shut down).
        public var accepting: Bool
        /// The node is draining: it finishes its calls and takes no new ones.
        public var draining: Bool
        /// The calls it has, and the most it takes (nil: no limit).
        public var calls: Int
        public var maximumCalls: Int?
        /// The caller is on the block list.
        public var blocked: Bool
        /// Whether the caller is a contact; nil where the wire names no identity to check (SIP,
        /// a page admitted by its secret, an embedder's dialect): it is not asked.
        public var knownCaller: Bool?
        /// Unknown callers ring all the same (`--accept-unknown`).
        public var acceptUnknownCallers: Bool

        public init(accepting: Bool = true, draining: Bool = false, calls: Int = 0, maximumCalls: Int? = nil, blocked: Bool = false,
                    knownCaller: Bool? = nil, acceptUnknownCallers: Bool = false) {
            self.accepting = accepting
            self.draining = draining
            self.calls = calls
            self.maximumCalls = maximumCalls
            self.blocked = blocked
            self.knownCaller = knownCaller
            self.acceptUnknownCallers = acceptUnknownCallers
        }
    }

    /// Nil: the call may ring (the manager is asked next); else why it is refused. In order: a
    /// node that takes no calls is busy; then draining; then full (busy); then a blocked caller;
    /// then an unknown one. The node's own state comes first: a full or draining node tells
    /// every caller so, whoever they are.
    public static func decide(_ facts: Facts) -> RejectReason? {
        if !facts.accepting { return .busy }
        if facts.draining { return .draining }
        if let limit = facts.maximumCalls, facts.calls >= limit { return .busy }
        if facts.blocked { return .blocked }
        if facts.knownCaller == false, !facts.acceptUnknownCallers { return .unknownCaller }
        return nil
    }

    /// What the caller is told when the call manager refused the call: its block list, its
    /// do-not-disturb, or anything else (its maximum of calls, a UUID in use, an unsupported
    /// handle, shutting down) as busy.
    public enum ManagerRefusal: Sendable {
        case blockList, doNotDisturb, other
    }

    public static func refusal(managerFiltered reason: ManagerRefusal) -> RejectReason {
        switch reason {
        case .blockList: .blocked
        case .doNotDisturb: .doNotDisturb
        case .other: .busy
        }
    }
}
