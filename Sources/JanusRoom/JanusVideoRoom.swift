import CallCore

/// The VideoRoom as an audio SFU, in a room session's terms: a publisher (`#videoroom:ROOM`)
/// joins with its offer and learns of the other publishers, the feeds to subscribe to; a
/// subscription (`#videoroom:ROOM/FEED`) is offered the feed by Janus and answers with `start`.
extension JanusRoomSession {
    /// The VideoRoom's own event (`plugindata.data`).
    mutating func videoRoomEvent(_ data: JanusJSON) -> [JanusRoomAction] {
        let publishers = (data["publishers"]?.array ?? []).compactMap(Self.participant)
        switch data["videoroom"]?.string {
        case "joined":
            guard me == nil, phase == .joining, let id = data["id"]?.idText else { return arrived(publishers) }
            me = id
            for publisher in publishers { participants[publisher.id] = publisher }
            return [.room(.joined(room: address.room, me: id, others: publishers))]
        case "event":
            // `leaving` and `unpublished` say "ok" to the one who left, a publisher's id to the others.
            if let gone = data["leaving"]?.idText ?? data["unpublished"]?.idText, gone != "ok" { return departed(gone) }
            if let kicked = data["kicked"]?.idText {
                if kicked == me { return fail("this call was kicked out of room \(address.room)") }
                return departed(kicked)
            }
            if data["started"] != nil { return [.note("Janus sends the feed")] }
            return arrived(publishers)
        case "talking", "stopped-talking":
            return talked(data["id"]?.idText, data["videoroom"]?.string == "talking")
        case "destroyed":
            return fail("room \(address.room) was destroyed at Janus")
        case "attached", "updated", "slow_link", "success", nil:
            return []
        case let other?:
            return [.note("a VideoRoom event the node does not know: \(other)")]
        }
    }

    /// The VideoRoom's refusal of a join, in the user's terms.
    mutating func videoRoomError(_ code: Int64, _ text: String) -> [JanusRoomAction] {
        switch code {
        case 426: fail("no VideoRoom \(address.room) at Janus (\(address)): \(text)")
        case 428: fail("no feed \(subscribedFeed ?? "?") in room \(address.room): \(text)")
        case 432: fail("room \(address.room) is full: \(text)")
        case 433: fail("room \(address.room) at Janus refused this PIN: \(text)")
        case 437, 431: fail("Janus could not take this call's offer or answer: \(text)")
        default: fail("Janus refused to join room \(address.room): \(text) (\(code))")
        }
    }
}
