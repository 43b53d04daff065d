import AudioSession
import Calls
import Foundation
import DTLS
import ICE
import Logging
import Media
import Metrics
import SDP
import ServiceLifecycle
import Signaling
import Locking

/// The ICE agent pool (agents made ahead of calls) and ICE restarts asked for by the embedder.
extension CallNode {

    // MARK: - The ICE agent pool

    /// Tops the pool of agents up to its size, in the background. Called at start and when a
    /// call that may have taken one has heard audio or ended, so that making the next agent
    /// does not compete with a call being set up.
    func fillICEPool() {
        guard isStarted, !isShutDown else { return }
        let ice = configuration.ice, make = configuration.makeIcePath
        while icePool.count < configuration.iceAgentPool {
            icePool.append(PooledICE(task: Task { try await CallLeg.makeICE(ice, role: .controlling, make: make) }, made: configuration.clock.now))
        }
    }

    /// The oldest pooled agent still fresh, if any, and the stale ones taken out before it
    /// (for the caller to close).
    func takePooledICE() -> (Task<PreparedICE, any Error>?, [PooledICE]) {
        var stale: [PooledICE] = []
        while let first = icePool.first {
            icePool.removeFirst()
            if isFresh(first) { return (first.task, stale) }
            stale.append(first)
        }
        return (nil, stale)
    }

    /// A pooled agent's server-reflexive and relayed candidates name NAT bindings and TURN
    /// allocations, which age; host candidates do not.
    func isFresh(_ pooled: PooledICE) -> Bool {
        let ice = configuration.ice
        guard ice.stunServer != nil || !ice.turnServers.isEmpty else { return true }
        return configuration.clock.now - pooled.made < configuration.iceAgentPoolRefresh
    }

    /// Replaces pooled agents that aged out (run every refresh interval while servers are set).
    func refreshICEPool() async {
        let stale = icePool.filter { !isFresh($0) }
        guard !stale.isEmpty else { return }
        icePool.removeAll { !isFresh($0) }
        fillICEPool()
        for entry in stale { await (try? await entry.task.value)?.agent.close() }
    }

    /// Closes every pooled agent (at shutdown).
    func drainICEPool() async {
        let pooled = icePool
        icePool.removeAll()
        for entry in pooled { await (try? await entry.task.value)?.agent.close() }
    }

    // MARK: - ICE restart

    /// Restarts ICE on a connected call (RFC 8445 §9): new credentials and a new gathering
    /// here, offered again over signaling; the peer restarts too and answers. The media, its
    /// keys and the call go on; audio resumes once the new checks select a pair. Either side
    /// may restart; when both offer at once, the callee's offer stands and the caller answers
    /// it. The node does this by itself while a connection stays lost
    /// (``CallNodeConfiguration/iceRestartInterval``) and when this host's addresses change.
    public func restartICE(_ call: UUID) async throws(CallNodeError) {
        guard let leg = legs[call] else { throw .noSuchCall(call) }
        try await leg.restartICE()
    }


}
