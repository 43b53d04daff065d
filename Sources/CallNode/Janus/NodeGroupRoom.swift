import Calls
import Foundation
import JanusRoom

extension CallNode {
    /// A VideoRoom used as an audio SFU (`janus:…#videoroom:ROOM`, placed with
    /// ``CallTarget/janus(_:pin:)``): the node publishes its microphone to the room and hears
    /// every other publisher, each feed a call of its own that Janus forwards as it was sent,
    /// mixed here at the edge: the calls are active side by side, not in a conference, so the
    /// speaker plays every feed, the publishing call sends the microphone alone, and the feeds
    /// (which only receive) send nothing. A publisher who comes is subscribed to, one who leaves
    /// is hung up; hanging up the publishing call leaves the room and ends every feed. Each feed
    /// is a call: a room of N publishers needs ``CallNodeConfiguration/maximumCalls`` of at
    /// least N (the call manager's default allows two calls side by side).
    func followGroup(_ publishing: UUID, address: JanusRoomAddress, pin: String?, events: AsyncStream<NodeEvent>) {
        let weak = WeakNode(self)
        keepUntilDone { await Self.followGroup(publishing, address: address, pin: pin, events: events, node: weak) }
    }

    /// Subscribes to each publisher the publishing call hears of and hangs up each feed whose
    /// publisher leaves, until the publishing call ends; then ends every feed. A feed that fails
    /// while its publisher is still in the room (its path could not be set up) is asked for
    /// again, a second later, up to three times.
    private static func followGroup(_ publishing: UUID, address: JanusRoomAddress, pin: String?, events: AsyncStream<NodeEvent>,
                                    node weak: WeakNode) async {
        var feeds: [String: UUID] = [:]
        var present: [String: RoomParticipant] = [:]
        var tries: [String: Int] = [:]
        func subscribe(_ publisher: RoomParticipant) async {
            guard let node = weak.node, feeds[publisher.id] == nil else { return }
            tries[publisher.id, default: 0] += 1
            var feed = address
            feed.plugin = .videoRoom(feed: publisher.id)
            // An encrypted group's feed opens with its publisher's key (once it sent it).
            let keys = await node.groupArrived(publishing, publisher)
            do {
                let call = try await node.joinRoom(feed, pin: pin, title: publisher.name.map { "feed of \(GroupMember.name(in: $0))" }, frameKeys: keys)
                feeds[publisher.id] = call
                await node.groupFeedPlaced(publishing, participant: publisher.id, feed: call)
            } catch {
                let hint = if case .request(.maximumCallsReached) = error { " (each feed is a call: raise the maximum of calls, --max-calls)" } else { "" }
                node.logger.notice("room \(address.room): cannot hear \(publisher): \(error)\(hint)")
            }
        }
        for await event in events {
            switch event {
            case let .room(call, .joined(_, _, others)) where call == publishing:
                for publisher in others {
                    present[publisher.id] = publisher
                    await subscribe(publisher)
                }
            case let .room(call, .participantJoined(publisher)) where call == publishing:
                present[publisher.id] = publisher
                await subscribe(publisher)
            case let .room(call, .participantLeft(publisher)) where call == publishing:
                present[publisher.id] = nil
                await weak.node?.groupDeparted(publishing, participant: publisher.id)
                if let feed = feeds.removeValue(forKey: publisher.id) { try? await weak.node?.hangUp(feed) }
            case let .ended(call, _, _, _) where call == publishing:
                await weak.node?.groupEnded(publishing)
                for feed in feeds.values { try? await weak.node?.hangUp(feed) }
                return
            case let .ended(call, reason, detail, _):
                guard let id = feeds.first(where: { $0.value == call })?.key else { continue }
                feeds[id] = nil
                await weak.node?.groupFeedEnded(publishing, participant: id)
                guard reason == .failed, let publisher = present[id], tries[id, default: 0] < 3, let node = weak.node else { continue }
                node.logger.notice("room \(address.room): the feed of \(publisher) failed (\(detail ?? "no reason")); asking for it again")
                try? await node.configuration.clock.sleep(for: .seconds(1))
                await subscribe(publisher)
            default:
                continue
            }
        }
        // The node stopped: its calls end with it.
    }
}
