import CallNode
import CallNodeTestKit

/// A node's process dying and starting again from its home.
extension Simulation {
    /// The node's process dies: its connections reset, its media stops, nothing it would still
    /// say gets out; what it had written to its database stays.
    func crash(_ index: Int) async {
        guard !down.contains(index) else { return log("  (\(name(index)) is down already)") }
        down.insert(index)
        everCrashed.insert(index)
        let node = nodes[index], fingerprint = node.identity.fingerprint
        world.signaling.setSilenced(fingerprint, true)
        world.signaling.setReachable(node.listenAddress!, false)
        world.signaling.dropConnections(of: fingerprint)
        relay.setSilenced(fingerprint, true)
        if speaksSIP, index != pageIndex { world.sip.crash(sipURI(index)) }
        gatheringHeld.remove(index)
        for path in paths[index].withLock({ list in defer { list = [] }; return list }) { await path.close() }
        for uuid in calls(of: index) { calls[uuid]!.sides[index]!.crashed = true }
        // The page's connection to a is one of its connections.
        if index == 0 || index == pageIndex { await closePage() }
        // What is left of it in this process goes away; none of it reaches anyone. Alone: its
        // manager's last database write answers from the database's thread.
        await scheduler.exclusive { await node.shutdown() }
    }

    /// The node starts again from its home: its database, its identity, its contacts.
    func restart(_ index: Int) async {
        guard down.contains(index) else { return log("  (\(name(index)) is running)") }
        let old = nodes[index]
        // A host still without a network, or cut off, stays so (and registers with the relay
        // once it is back).
        let cutOff = faults.offline.contains(index) || faults.signalingCut.contains(index)
        if !cutOff {
            world.signaling.setSilenced(old.identity.fingerprint, false)
            relay.setSilenced(old.identity.fingerprint, false)
            if signalingReachable(index) { world.signaling.setReachable(old.listenAddress!, true) }
        }
        do {
            try await scheduler.exclusive {
                nodes[index] = try await makeNode(index)
                cursors[index] = 0
                if index != pageIndex, !cutOff { try await waitForRegistration(of: [index]) }
            }
            down.remove(index)
            if (index == 0 || index == pageIndex), !down.contains(0), !down.contains(pageIndex) {
                try await scheduler.exclusive { try await openPage() }
            }
        } catch {
            fail(.setUp, "\(name(index)) could not start again: \(error)")
        }
    }
}
