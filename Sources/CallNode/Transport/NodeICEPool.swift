import AudioSession
import Clocks
import Foundation
import ICE
import Locking
import Media
import SDP

extension CallNodeConfiguration {
    /// The ICE settings a call's agent is made with: ``ice`` on the node's clock.
    var iceSettings: IceConfiguration {
        var settings = ice
        settings.clock = clock
        return settings
    }
}

/// A call's ICE agent, gathering, and the local parameters for its SDP.
struct PreparedICE: Sendable {
    let agent: any IcePath
    let gathering: IceGathering
    var local: LocalAudioParameters

    /// Creates an ICE agent in `role` and starts gathering; the local parameters carry the
    /// credentials and a fresh SRTP key for every suite this node supports.
    static func make(_ configuration: IceConfiguration, role: IceRole,
                     make: @Sendable (IceConfiguration) async throws -> any IcePath) async throws -> PreparedICE {
        var ice = configuration
        ice.role = role
        let agent = try await make(ice)
        let gathering: IceGathering
        do {
            gathering = try await agent.gather()
        } catch {
            await agent.close()
            throw error
        }
        let keys = SRTPSuite.allCases.reduce(into: [String: String]()) { $0[$1.rawValue] = SRTPKey.random(suite: $1).inlineKeyParameter }
        return PreparedICE(agent: agent, gathering: gathering,
                           local: LocalAudioParameters(iceUfrag: gathering.credentials.ufrag, icePwd: gathering.credentials.pwd, keys: keys))
    }
}

/// ICE agents made and gathering ahead of calls (``CallNodeConfiguration/iceAgentPool``), so
/// that answering does not wait for one. The node opens, refreshes and drains it; its legs take
/// from it and have it topped up. A pooled agent's server-reflexive and relayed candidates
/// name NAT bindings and TURN allocations, which age: with STUN or TURN servers set, an agent
/// older than ``CallNodeConfiguration/iceAgentPoolRefresh`` is replaced.
final class IcePool: Sendable {
    /// An agent made ahead of a call, in the controlling role (see ``prepare(role:)``).
    struct Entry: Sendable {
        let task: Task<PreparedICE, any Error>
        /// When it was made, on the node's clock.
        let made: Duration
    }

    private let state = Locked<(entries: [Entry], open: Bool)>(([], false))
    private let size: Int
    private let refreshInterval: Duration
    private let settings: IceConfiguration
    private let make: @Sendable (IceConfiguration) async throws -> any IcePath
    private let clock: TimerClock

    init(configuration: CallNodeConfiguration) {
        size = configuration.iceAgentPool
        refreshInterval = configuration.iceAgentPoolRefresh
        settings = configuration.iceSettings
        make = configuration.makeIcePath
        clock = configuration.clock
    }

    /// Agents in the pool (made, or being made).
    var count: Int { state.withLock { $0.entries.count } }

    /// Whether agents age (they do only with STUN or TURN servers).
    var ages: Bool { settings.stunServer != nil || !settings.turnServers.isEmpty }

    /// Starts filling (at the node's start).
    func open() {
        state.withLock { $0.open = true }
        fill()
    }

    /// Tops the pool up to its size, in the background. Called at start and when a call that
    /// may have taken one has heard audio or ended, so that making the next agent does not
    /// compete with a call being set up.
    func fill() {
        let settings = self.settings, make = self.make, now = clock.now, size = self.size
        state.withLock { state in
            guard state.open else { return }
            while state.entries.count < size {
                state.entries.append(Entry(task: Task { try await PreparedICE.make(settings, role: .controlling, make: make) }, made: now))
            }
        }
    }

    /// The oldest pooled agent still fresh, if any, and the stale ones taken out before it
    /// (for the caller to close).
    private func take() -> (Task<PreparedICE, any Error>?, [Entry]) {
        let now = clock.now
        return state.withLock { state in
            var stale: [Entry] = []
            while let first = state.entries.first {
                state.entries.removeFirst()
                if isFresh(first, now: now) { return (first.task, stale) }
                stale.append(first)
            }
            return (nil, stale)
        }
    }

    /// A call's agent in `role`, being made now: the oldest pooled one still fresh, or a new
    /// one. Taken from the pool at once, not when the task runs, so two calls never share one;
    /// the pool refills when a call hears audio or ends. Pooled agents gathered as controlling
    /// (the side a node's callee and a SIP caller take), and libnice keeps the role an agent
    /// gathered in: a call on the controlled side makes its own and leaves the pool to the next.
    func prepare(role: IceRole) -> Task<PreparedICE, any Error> {
        let (pooled, stale) = role == .controlling ? take() : (nil, [])
        let settings = self.settings, make = self.make
        return Task {
            for entry in stale { await (try? await entry.task.value)?.agent.close() }
            guard let pooled, let prepared = try? await pooled.value else {
                return try await PreparedICE.make(settings, role: role, make: make)
            }
            return prepared
        }
    }

    private func isFresh(_ entry: Entry, now: Duration) -> Bool {
        !ages || now - entry.made < refreshInterval
    }

    /// Replaces pooled agents that aged out (run every refresh interval while servers are set).
    func refresh() async {
        let now = clock.now
        let stale = state.withLock { state in
            let stale = state.entries.filter { !isFresh($0, now: now) }
            state.entries.removeAll { !isFresh($0, now: now) }
            return stale
        }
        guard !stale.isEmpty else { return }
        fill()
        for entry in stale { await (try? await entry.task.value)?.agent.close() }
    }

    /// Takes every pooled agent out and fills the pool anew (this host's addresses changed:
    /// their candidates name the old ones). Returns those taken, for the caller to close.
    func renew() -> [Entry] {
        let taken = state.withLock { state in
            let taken = state.entries
            state.entries.removeAll()
            return taken
        }
        fill()
        return taken
    }

    /// Closes every pooled agent and takes no more (at shutdown).
    func drain() async {
        let pooled = state.withLock { state in
            state.open = false
            let taken = state.entries
            state.entries.removeAll()
            return taken
        }
        for entry in pooled { await (try? await entry.task.value)?.agent.close() }
    }
}

