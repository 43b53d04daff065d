@_spi(Simulation) import CallNode
import Calls
import Foundation

/// The checks once a run's calls have all ended, and once every node has shut down: each call
/// ended once on each side, one Recents row per call, every SIP dialog closed, nothing of any
/// call left in the nodes, no audio session active.
extension Simulation {
    func checkTheEnd() async {
        // Every call ended once on each side it reached, with reasons that agree.
        for uuid in callOrder {
            let call = calls[uuid]!
            for (node, side) in call.sides.sorted(by: { $0.key < $1.key }) where side.endCount != 1 && !(side.crashed && side.endCount == 0) {
                return fail(.endsOnce, "call \(callName(uuid)) ended \(side.endCount) times on \(name(node))")
            }
        }
        // One Recents row per call on each side.
        for index in 0..<nodes.count {
            let store = nodes[index].store
            let rows: [RecentCall]
            do {
                rows = try await scheduler.exclusive {
                    try await store.flush()
                    return try await store.recents()
                }
            } catch {
                return fail(.recents, "\(name(index))'s Recents cannot be read: \(error)")
            }
            let expected = callOrder.compactMap { calls[$0]!.sides[index]?.uuid }
            var seen: [UUID: Int] = [:]
            for row in rows { seen[row.id, default: 0] += 1 }
            for uuid in expected where seen[uuid, default: 0] != 1 {
                return fail(.recents, "call \(callName(uuid)) has \(seen[uuid, default: 0]) Recents rows on \(name(index))")
            }
            let strangers = rows.count - expected.count
            if strangers != 0 {
                return fail(.recents, "\(name(index)) has \(rows.count) Recents rows for \(expected.count) calls")
            }
        }
        // Every SIP dialog ended on both sides, every INVITE transaction with its final response.
        let open = world.sip.openDialogs()
        if !open.isEmpty { return fail(.sipDialogs, "every call ended, yet " + open.joined(separator: "; ")) }
        // Nothing of any call is left: the only ICE paths open are the nodes' pooled agents.
        var pooled = 0
        for node in nodes { pooled += await node.pooledICEAgents }
        if world.network.openPaths != pooled {
            return fail(.nothingLeft, "every call ended, yet \(world.network.openPaths) ICE paths are open for \(pooled) pooled agents")
        }
        for (index, node) in nodes.enumerated() {
            let inside = await node.inspect()
            let manager = await node.manager.liveCallCount
            let left = [
                ("legs", inside.legs.count), ("leg tasks", inside.legRuns), ("call tasks", inside.transientTasks),
                ("bridge ports", inside.bridgePorts), ("manager calls", manager), ("media endpoints", inside.runningEndpoints),
            ].filter { $0.1 != 0 }
            if !left.isEmpty {
                return fail(.nothingLeft, "every call ended, yet \(name(index)) still has " + left.map { "\($0.1) \($0.0)" }.joined(separator: ", "))
            }
            if inside.audioActive || inside.sessionActive == true {
                return fail(.oneAudioOwner, "every call ended, yet \(name(index))'s audio session is active (node: \(inside.audioActive), session: \(inside.sessionActive == true))")
            }
        }
    }

    func checkAfterShutdown() {
        let paths = world.network.openPaths
        if paths != 0 { return fail(.nothingLeft, "every node shut down, yet \(paths) ICE paths are open") }
        let sleepers = world.timers.sleeperCount
        if sleepers != 0 { fail(.nothingLeft, "every node shut down, yet \(sleepers) tasks still wait on the clock") }
    }
}
