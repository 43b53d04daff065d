import Foundation
import ICE
import JanusRoom
import Media

extension CallNode {
    /// Joins a Janus room as a call: an AudioBridge's (the node offers, the room answers, this
    /// node hears the room's mix and the room hears this node), a VideoRoom's group (this node
    /// publishes and hears each other publisher's feed: ``followGroup(_:address:pin:events:)``),
    /// or one VideoRoom feed. The call's events tell who is in the room
    /// (``NodeEvent/room(_:_:)``); hanging up leaves it. A missing Janus, room or PIN ends the
    /// call as failed with the reason.
    func joinRoom(_ address: JanusRoomAddress, pin: String?, title: String?, frameKeys: FrameKeys? = nil) async throws(CallNodeError) -> UUID {
        var display = configuration.displayName ?? "callnode \(identity.fingerprint.short)"
        var frameKeys = frameKeys
        var ring: GroupKeyRing?
        if address.endToEnd, address.plugin == .videoRoom(feed: nil) {
            // The members send their keys to this node's signaling: the room shows where it is.
            guard let reachable = groupAddress(toward: address.host) else {
                throw .room("an end-to-end encrypted room needs this node to listen for calls (its members send their keys there)")
            }
            let made = GroupKeyRing(room: address.room, me: identity.fingerprint)
            display = GroupMember(fingerprint: identity.fingerprint, address: reachable).display(name: display)
            frameKeys = FrameKeys(outbound: made.ownKey, inbound: .random())
            ring = made
        }
        let dialect = JanusDialect(address: address, display: display, pin: pin, frameKeys: frameKeys, clock: configuration.clock,
                                   logger: logger)
        // Publishing to a VideoRoom is joining its group: the other publishers' feeds follow.
        let group = address.plugin == .videoRoom(feed: nil) ? events() : nil
        let call = try await call(over: dialect, handle: address.description, title: title)
        if let ring { groups[call] = GroupState(ring: ring) }
        if let group { followGroup(call, address: address, pin: pin, events: group) }
        return call
    }

    /// Where the members of a group reach this node's signaling: its listening address, or,
    /// listening on every address, the one its route toward the room's server leaves from.
    private func groupAddress(toward host: String) -> SignalAddress? {
        guard let listening = listenAddress, listener != nil || configuration.signalNetwork != nil else { return nil }
        guard ["0.0.0.0", "::", ""].contains(listening.host) else { return listening }
        let server = host.isEmpty ? "127.0.0.1" : host  // a Unix socket: the server is on this host
        return PlainRTPPath.localAddress(toward: server).map { SignalAddress(host: $0, port: listening.port) }
    }
}
