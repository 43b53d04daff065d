import CallNode
import NodeControl

/// How the terminal tells what happens in a Janus room: who is in it, joins, leaves, talks and
/// is muted, and how a conference kept in a room fares.
extension CallRunner {
    /// A call placed to hear one publisher of a VideoRoom group (the node places it by the
    /// feed's address, as a handle).
    static func isRoomFeed(_ target: CallTarget) -> Bool {
        let address: JanusRoomAddress? = switch target {
        case let .janus(address, _): address
        case let .handle(handle): JanusRoomAddress(handle)
        default: nil
        }
        if case .videoRoom(feed: _?) = address?.plugin { return true }
        return false
    }

    static func describe(_ event: RoomEvent) -> String {
        switch event {
        case let .joined(room, _, others):
            "in room \(room)" + (others.isEmpty ? ", alone so far" : " with \(others.map(\.description).joined(separator: ", "))")
        case let .participantJoined(who): "room: \(who) joined"
        case let .participantLeft(who): "room: \(who) left"
        case let .talking(who, on): "room: \(who) \(on ? "talks" : "stopped talking")"
        case let .participantMuted(who, on): "room: \(who) \(on ? "muted" : "unmuted")"
        case .groupSecured(_, 1): "room: alone in the encrypted group for now"
        case let .groupSecured(code, members): "room: encrypted end to end among \(members); security code \(code) (the same at every member)"
        case let .senderKey(who, missing?): "room: \(who) is silent here: \(missing)"
        case let .senderKey(who, nil): "room: \(who)'s key arrived; heard"
        }
    }

    /// Nil for what is not worth a line (the room call being placed).
    static func describe(_ room: JanusRoomAddress, _ status: ConferenceRoomStatus) -> String? {
        switch status {
        case .joining: nil
        case .joined: "conference room: in \(room)"
        case let .lost(reason, retryIn):
            "conference room: lost (\(hinted(reason))); joining again in \(Int(EventJSON.seconds(retryIn).rounded())) s"
        case .left: "conference room: left \(room)"
        }
    }
}
