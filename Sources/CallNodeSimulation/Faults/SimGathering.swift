/// A node's ICE gatherings whose end waits (``SimMove/holdGathering(node:pick:)``): what a
/// STUN or TURN server slow to answer does. The candidates a call's SDP carries are out; a SIP
/// offer or answer waits for their end, so the peer's CANCEL or BYE can come while it waits.
extension Simulation {
    func holdGathering(_ node: Int) {
        guard !down.contains(node) else { return log("  (\(name(node)) is down)") }
        for path in paths[node].withLock({ $0 }) { path.holdGathering() }
        gatheringHeld.insert(node)
    }

    /// Lets the node's held gatherings end; performed as the peer's end comes, the leg's turn
    /// for their end is then held `turnsLate` frames more (``pinnedFrames``).
    func endGathering(_ node: Int, turnsLate: Int) {
        guard gatheringHeld.remove(node) != nil else { return log("  (no gathering held at \(name(node)))") }
        for path in paths[node].withLock({ $0 }) { path.releaseGathering() }
        pinnedFrames = turnsLate
    }
}
