import Calls
import Foundation
import JanusRoom

/// Where a node's conference stands with the room it is kept in.
public enum ConferenceRoomStatus: Sendable, Hashable {
    /// The room call is being placed.
    case joining
    /// The room call connected (this call): the node's conference is in the room.
    case joined(UUID)
    /// The room call ended, or could not be placed, for this reason: the node joins again
    /// after `retryIn`. The callers here go on hearing each other meanwhile.
    case lost(String, retryIn: Duration)
    /// The node left the room (``CallNode/leaveConferenceRoom()``, or it shut down).
    case left
}

extension CallNode {
    /// Keeps this node's conference in a Janus room: the node joins the room now as one
    /// participant, and with ``CallNodeConfiguration/autoAnswerOthers`` `.merge` every call it
    /// answers joins the conference the room call is in, so the room hears this node's mix and
    /// each caller here hears the room less their own part. When the room call ends for any
    /// reason but ``leaveConferenceRoom()`` (Janus restarted, the room went, the network), the
    /// node joins again after a pause (1 s, growing to 5 s) and puts the new room call into the
    /// conference of the calls still on. Follow it with ``NodeEvent/conferenceRoom(_:_:)``.
    public func keepConference(in address: JanusRoomAddress, pin: String? = nil) {
        roomKeeper?.cancel()
        let weak = WeakNode(self)
        let keeper = Task { await Self.keepRoom(address, pin: pin, node: weak) }
        roomKeeper = keeper
        keep(keeper)
    }

    /// Leaves the room ``keepConference(in:pin:)`` keeps: the room call is hung up and not
    /// placed again; the callers here stay in their conference.
    public func leaveConferenceRoom() async {
        guard let keeper = roomKeeper else { return }
        roomKeeper = nil
        keeper.cancel()
        await keeper.value
    }

    private static func keepRoom(_ address: JanusRoomAddress, pin: String?, node weak: WeakNode) async {
        var pause: Duration = .seconds(1)
        while !Task.isCancelled, let node = weak.node {
            let events = node.events()
            node.broadcaster.send(.conferenceRoom(address, .joining))
            var reason = "the room call could not be placed"
            do {
                let call = try await node.call(.janus(address, pin: pin), title: "conference room")
                reason = await node.followRoomCall(call, address: address, events: events)
                pause = .seconds(1)
            } catch {
                reason = error.description
            }
            guard !Task.isCancelled else { break }
            node.broadcaster.send(.conferenceRoom(address, .lost(reason, retryIn: pause)))
            try? await node.configuration.clock.sleep(for: pause)
            pause = min(pause * 2, .seconds(5))
        }
        weak.node?.broadcaster.send(.conferenceRoom(address, .left))
    }

    /// Follows the room call until it ends: once connected it joins the conference of the
    /// calls on here (the first connected call's). Hangs it up when the keeper is cancelled.
    /// Returns why it ended.
    private func followRoomCall(_ call: UUID, address: JanusRoomAddress, events: AsyncStream<NodeEvent>) async -> String {
        // The stream ends when the keeper is cancelled.
        for await event in events {
            switch event {
            case .connected(call, _):
                broadcaster.send(.conferenceRoom(address, .joined(call)))
                await manager.settleHoldsAndGroups()
                let others = connectedCalls.filter { $0.id != call }
                if let anchor = others.first(where: { !$0.isOnHold }) ?? others.first {
                    do { try await merge(call, with: anchor.id) } catch {
                        logger.notice("room \(address.room): could not merge the room call into the conference: \(error)")
                    }
                }
            case let .ended(ending, reason, detail, _) where ending == call:
                return detail ?? reason.rawValue
            default:
                continue
            }
        }
        try? await hangUp(call)
        return "the node left the room"
    }
}
