/// Someone in a room a call joined (a Janus AudioBridge room): the room's own number for them
/// and the name they gave, if any.
public struct RoomParticipant: Sendable, Hashable, CustomStringConvertible {
    /// The room's id for the participant (a number or a string, as the room names them).
    public var id: String
    /// The display name the participant joined with.
    public var name: String?
    /// Whether the room has them muted.
    public var muted: Bool

    public init(id: String, name: String? = nil, muted: Bool = false) {
        self.id = id
        self.name = name
        self.muted = muted
    }

    /// The name and the id; a member of an encrypted group by its name alone (its display also
    /// names its identity and node, which the group's security code stands for).
    public var description: String {
        guard let name else { return id }
        let shown = name.firstRange(of: " · callnode ").map { String(name[..<$0.lowerBound]) } ?? name
        return "\(shown) (\(id))"
    }
}

/// What happens in the room a call joined, told as the call's events: who is there, who
/// joins, leaves and talks.
public enum RoomEvent: Sendable, Hashable {
    /// This side is in the room (`me`: its id there) with `others`.
    case joined(room: String, me: String, others: [RoomParticipant])
    /// Someone else came in.
    case participantJoined(RoomParticipant)
    /// Someone left.
    case participantLeft(RoomParticipant)
    /// Someone started (true) or stopped (false) talking, as the room's audio levels say.
    case talking(RoomParticipant, Bool)
    /// Someone was muted or unmuted in the room.
    case participantMuted(RoomParticipant, Bool)
    /// An end-to-end encrypted group's members changed: the code every member sees (from all
    /// their identities, this side's too), and how many they are with this side.
    case groupSecured(securityCode: String, members: Int)
    /// A member's frames cannot be opened (`missing`: why, heard as silence), or can again (nil).
    case senderKey(RoomParticipant, missing: String?)
}
