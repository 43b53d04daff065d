@_spi(Simulation) import CallCore
import Foundation

/// What a node holds inside, read at one instant: what a simulation checks after every step
/// (the manager's view of each call against its leg's, that an ended call left nothing behind,
/// who has the audio session). Read-only; nothing here changes the node.
@_spi(Simulation)
public struct NodeInspection: Sendable {
    /// One call's leg as its state says.
    public struct Leg: Sendable {
        public let phase: LegPhase
        public let muted: Bool
        public let held: Bool
        /// The peer's last offer or answer holds the call.
        public let heldByPeer: Bool
        /// A mute or hold request of the manager is being performed (the views may differ until
        /// it settles).
        public let requestPending: Bool
        /// An offer of this side is out (a hold's, a resume's or a restart's).
        public let offerPending: Bool
        /// The call's media runs early: nobody has answered it yet.
        public let earlyMedia: Bool
    }

    public let legs: [UUID: Leg]
    /// Tasks running a call (a leg's inputs), by call.
    public let legRuns: Int
    /// Short tasks the node started for calls (sending a refusal, an end); not the relay
    /// registration, which lasts as long as the node.
    public let transientTasks: Int
    /// Ports on the conference bridge.
    public let bridgePorts: Int
    /// Whether the node thinks the call audio session is active.
    public let audioActive: Bool
    /// Whether the system-owned session's devices are open (nil in the app-owned mode).
    public let sessionActive: Bool?
    /// Media endpoints attached to the session's open devices.
    public let runningEndpoints: Int
}

extension CallNode {
    /// The node's inside as it is now (see ``NodeInspection``).
    @_spi(Simulation)
    public func inspect() async -> NodeInspection {
        var inspected: [UUID: NodeInspection.Leg] = [:]
        for (uuid, leg) in legs { inspected[uuid] = await leg.inspection() }
        let session: (Bool, Int)? = if let systemSession { (await systemSession.isActive, await systemSession.runningEndpoints) } else { nil }
        return NodeInspection(legs: inspected, legRuns: legRuns.count, transientTasks: transientTasks.values.filter { $0 != relayRegistration }.count, bridgePorts: ports.count,
                              audioActive: audioActive, sessionActive: session?.0, runningEndpoints: session?.1 ?? 0)
    }
}

extension CallNode {
    /// The queue of `call`'s leg as a simulation sees it (nil: no such call): it holds the leg's
    /// turn back as a user's action is queued, and lets the peer's end in meanwhile.
    @_spi(Simulation)
    public func inputProbe(of call: UUID) -> InputProbe? {
        legs[call]?.inputProbe
    }
}

extension CallLeg {
    func inspection() -> NodeInspection.Leg {
        NodeInspection.Leg(phase: state.phase, muted: state.muted, held: state.held, heldByPeer: state.heldByPeer,
                           requestPending: !state.requests.isEmpty, offerPending: state.offerPending, earlyMedia: state.earlyMedia)
    }
}

extension CallNode {
    /// Whether the start's one-time work on its own thread (libsrtp's self-test) is done: a
    /// simulation waits for it, so that thread's end does not land at a different point of
    /// every run.
    @_spi(Simulation)
    public var hasWarmedUp: Bool { isWarmedUp }
}
