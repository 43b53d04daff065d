import Foundation
import JanusRoom

extension CallNode {
    /// Joins a Janus room as a call: an AudioBridge's (the node offers, the room answers, this
    /// node hears the room's mix and the room hears this node), a VideoRoom's group (this node
    /// publishes and hears each other publisher's feed: ``followGroup(_:address:pin:events:)``),
    /// or one VideoRoom feed. The call's events tell who is in the room
    /// (``NodeEvent/room(_:_:)``); hanging up leaves it. A missing Janus, room or PIN ends the
    /// call as failed with the reason.
    func joinRoom(_ address: JanusRoomAddress, pin: String?, title: String?) async throws(CallNodeError) -> UUID {
        let display = configuration.displayName ?? "callnode \(identity.fingerprint.short)"
        let dialect = JanusDialect(address: address, display: display, pin: pin, clock: configuration.clock,
                                   logger: logger)
        // Publishing to a VideoRoom is joining its group: the other publishers' feeds follow.
        let group = address.plugin == .videoRoom(feed: nil) ? events() : nil
        let call = try await call(over: dialect, handle: address.description, title: title)
        if let group { followGroup(call, address: address, pin: pin, events: group) }
        return call
    }
}
