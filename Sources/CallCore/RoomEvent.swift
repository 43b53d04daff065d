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

    public var description: String { name.map { "\($0) (\(id))" } ?? id }
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
}
