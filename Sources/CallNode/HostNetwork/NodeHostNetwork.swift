import Foundation
import Logging

/// The node and this host's network: watching its addresses and default routes, and what a
/// change does to the calls, the relay registration and the pooled ICE agents.
extension CallNode {
    /// Reads the host's network on each of the kernel's change reports (or, without them, every
    /// ``CallNodeConfiguration/hostNetworkCheckInterval`` on the node's clock) and acts on changes.
    func watchHostNetwork() {
        if let read = configuration.hostNetwork, let changes = configuration.hostNetworkChanges {
            keep(Task { [weak self] in
                var last = read()
                for await _ in changes() {
                    let now = read()
                    if now != last {
                        await self?.hostNetworkChanged(now, from: last)
                        last = now
                    }
                }
            })
        } else if let read = configuration.hostNetwork {
            let interval = configuration.hostNetworkCheckInterval, timerClock = configuration.clock
            keep(Task { [weak self] in
                var last = read()
                while !Task.isCancelled {
                    guard (try? await timerClock.sleep(until: timerClock.now + interval)) != nil else { return }
                    let now = read()
                    if now != last {
                        await self?.hostNetworkChanged(now, from: last)
                        last = now
                    }
                }
            })
        }
    }

    /// This host's addresses or default routes changed: tell every call, drop pooled ICE
    /// agents (their candidates name the old addresses).
    func hostNetworkChanged(_ now: HostNetworkSnapshot, from before: HostNetworkSnapshot) async {
        let change = now.changes(since: before)
        logger.info("host network changed: added \(change.added), removed \(change.removed)\(change.routesChanged ? ", default route changed" : "")")
        broadcaster.send(.hostNetworkChanged(added: change.added, removed: change.removed, routeChanged: change.routesChanged))
        for leg in legs.values { leg.post(.hostNetworkChanged(now, from: before)) }
        if !change.removed.isEmpty || change.routesChanged {
            // The registration's connection may have left from an address that is gone: the
            // relay would route callers (and resuming calls) into it. Register anew.
            if configuration.relay != nil { startRelayRegistration() }
            let pooled = icePool.renew()
            // Closed off the calls' way: releasing a TURN allocation from an address that is
            // gone waits for answers that never come.
            keepUntilDone { for entry in pooled { await (try? await entry.task.value)?.agent.close() } }
        }
    }

}
