import Foundation
import JanusRoom

extension CallNode {
    /// Joins a Janus AudioBridge room as a call: the node offers, the room answers, this node
    /// hears the room's mix and the room hears this node. The call's events tell who is in the
    /// room (``NodeEvent/room(_:_:)``); hanging up leaves it. A missing Janus, room or PIN ends the
    /// call as failed with the reason.
    func joinRoom(_ address: JanusRoomAddress, pin: String?, title: String?) async throws(CallNodeError) -> UUID {
        let display = configuration.displayName ?? "callnode \(identity.fingerprint.short)"
        let dialect = JanusDialect(address: address, display: display, pin: pin, clock: configuration.clock,
                                   logger: logger)
        return try await call(over: dialect, handle: address.description, title: title)
    }
}
