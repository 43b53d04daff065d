import MediaTiming
import ICE
import Locking
import Media

/// A network of in-memory ICE paths on a media clock: pion's vnet idea for CallNode.
///
/// Each path gets one host candidate on the network (`10.77.0.N`). Once both ends of a call have
/// each other's current credentials and candidates, the next tick connects them (the pair is
/// selected on both, as libnice reports it). Datagrams travel with the network's loss, delay and
/// reordering, deciding everything from a seeded generator on the clock's ticks, so a run is
/// the same every time. A partition drops everything; while it lasts a restart's checks fail
/// too, and the paths reconnect on the first tick after it heals once both ends restarted.
///
/// Paths fail as libnice's do (FACTS: libnice 0.1.21 with consent freshness on): a round whose
/// checks have found no pair ``checkTimeout`` after they could start reports `failed`, and so
/// does a connected path whose peer has been out of reach (a partition, a break either way)
/// for ``consentTimeout``; a failed path stays failed until its next round (``restart()``).
///
/// Add the network to the same ``MediaClock`` as the calls, before them, so each tick delivers
/// what is due first and the calls then read it.
public final class InMemoryIceNetwork: MediaClockClient, Sendable {
    /// What the network does to datagrams.
    public struct Conditions: Sendable, Equatable {
        /// Share of datagrams lost, 0–1.
        public var loss: Double
        /// Ticks (frame periods) each datagram takes.
        public var delayTicks: Int
        /// Share of datagrams held one tick more than the others, 0–1 (so they arrive out of order).
        public var reordering: Double
        /// Nothing gets through, either way.
        public var partitioned: Bool
        /// Share of datagrams delivered twice (the copy a tick later), 0–1.
        public var duplication: Double
        /// How long a connected path's peer may be out of reach before the path fails
        /// (``InMemoryIceNetwork/consentTimeout``, libnice's; a simulation may shorten it as it
        /// does the nodes' own timers).
        public var consentTimeout: Duration = InMemoryIceNetwork.consentTimeout
        /// How long a connected path's peer may be out of reach before the path says it is
        /// disconnected, as libnice does with consent freshness on (nil: it goes from connected
        /// to failed); the path connects again if the peer comes back before its consent runs out.
        public var disconnectedAfter: Duration?

        public init(loss: Double = 0, delayTicks: Int = 1, reordering: Double = 0, partitioned: Bool = false, duplication: Double = 0) {
            self.loss = loss
            self.delayTicks = max(0, delayTicks)
            self.reordering = reordering
            self.partitioned = partitioned
            self.duplication = duplication
        }
    }

    struct Datagram {
        var due: Int
        var order: Int
        var to: String
        var bytes: [UInt8]
    }

    struct State {
        var conditions: Conditions
        var rng: UInt64
        var tick = 0
        var order = 0
        var nextHost = 1
        var nextCredential = 1
        var paths: [String: InMemoryIcePath] = [:]
        var inFlight: [Datagram] = []
        var delivered = 0
        var dropped = 0
        /// Paths (address and ufrag of the round) that nothing reaches: a break in one direction.
        var broken: Set<String> = []
        /// Paths whose host has no address (``setOffline(_:_:)``).
        var offline: Set<String> = []
    }

    let state: Locked<State>

    /// - Parameter seed: Seeds the generator that decides loss and reordering.
    public init(conditions: Conditions = Conditions(), seed: UInt64 = 1) {
        state = Locked(State(conditions: conditions, rng: seed | 1))
    }

    /// A new path on this network (for ``IcePath`` factories: one per call or pooled agent).
    public func makePath(role: IceRole) -> InMemoryIcePath {
        let (host, credentials) = state.withLock { s -> (String, IceCredentials) in
            defer { s.nextHost += 1 }
            return ("10.77.0.\(s.nextHost)", Self.credentials(&s))
        }
        let path = InMemoryIcePath(network: self, host: host, role: role, credentials: credentials)
        state.withLock { $0.paths[path.address] = path }
        return path
    }

    /// How long a round's checks run without finding a pair before the path reports `failed`:
    /// libnice's four tries of each check, the last 2 s in, time out at 2.5 s.
    public static let checkTimeout: Duration = .milliseconds(2_500)
    /// How long a connected path's peer may be out of reach before the path reports `failed`
    /// (consent freshness, RFC 7675: libnice gave a pair up 7.9 s after its answers stopped).
    public static let consentTimeout: Duration = .seconds(8)

    /// Changes what the network does from the next datagram on.
    public func setConditions(_ conditions: Conditions) {
        state.withLock { $0.conditions = conditions }
    }

    public var conditions: Conditions { state.withLock { $0.conditions } }

    /// Paths made and not closed yet.
    public var openPaths: Int { state.withLock { $0.paths.count } }

    /// Datagrams delivered and dropped so far.
    public var counts: (delivered: Int, dropped: Int) { state.withLock { ($0.delivered, $0.dropped) } }

    static func credentials(_ s: inout State) -> IceCredentials {
        defer { s.nextCredential += 1 }
        let n = s.nextCredential
        return IceCredentials(ufrag: "mem\(n)", pwd: "inmemorypassword\(String(repeating: "x", count: 6))\(n)")
    }

    func newCredentials() -> IceCredentials { state.withLock { Self.credentials(&$0) } }

    func remove(_ address: String) {
        state.withLock { s in
            s.paths[address] = nil
            s.inFlight.removeAll { $0.to == address }
        }
    }

    /// Breaks the network in one direction: nothing reaches the paths in `role` any more (the
    /// caller's are controlled, the callee's controlling) on their current round; a restart's
    /// new round gets through, as a new NAT mapping would.
    public func breakPaths(toward role: IceRole) {
        state.withLock { s in
            for path in s.paths.values where path.role == role {
                s.broken.insert(path.roundKey)
            }
        }
    }

    /// The paths at `addresses` lose their host's address (or, off, have one again): nothing
    /// they send leaves, nothing reaches them, their checks find nothing, and a new round's
    /// gathering fails, as libnice's does on a host with no address to gather on.
    public func setOffline(_ addresses: [String], _ on: Bool) {
        state.withLock { s in
            if on { s.offline.formUnion(addresses) } else { s.offline.subtract(addresses) }
        }
    }

    /// Holds back the end of the gatherings of every path open now (``InMemoryIcePath/holdGathering()``).
    public func holdGatherings() {
        for path in state.withLock({ Array($0.paths.values) }) { path.holdGathering() }
    }

    /// Lets every held gathering end (``InMemoryIcePath/releaseGathering()``).
    public func releaseGatherings() {
        for path in state.withLock({ Array($0.paths.values) }) { path.releaseGathering() }
    }

    func isOffline(_ address: String) -> Bool { state.withLock { $0.offline.contains(address) } }

    /// Queues a datagram from a connected path to its peer's address.
    func carry(_ bytes: [UInt8], from sender: String, to address: String) {
        state.withLock { s in
            if s.offline.contains(sender) || s.offline.contains(address) {
                s.dropped += 1
                return
            }
            if let path = s.paths[address], s.broken.contains(path.roundKey) {
                s.dropped += 1
                return
            }
            if s.conditions.partitioned || Self.random(&s) < s.conditions.loss {
                s.dropped += 1
                return
            }
            var due = s.tick + s.conditions.delayTicks
            if s.conditions.reordering > 0, Self.random(&s) < s.conditions.reordering { due += 1 }
            s.order += 1
            s.inFlight.append(Datagram(due: due, order: s.order, to: address, bytes: bytes))
            if s.conditions.duplication > 0, Self.random(&s) < s.conditions.duplication {
                s.order += 1
                s.inFlight.append(Datagram(due: due + 1, order: s.order, to: address, bytes: bytes))
            }
        }
    }

    public func tick(now: Duration) async {
        let (due, paths, partitioned, conditions) = state.withLock { s -> ([Datagram], [InMemoryIcePath], Bool, Conditions) in
            s.tick += 1
            let due = s.inFlight.filter { $0.due <= s.tick }.sorted { ($0.due, $0.order) < ($1.due, $1.order) }
            s.inFlight.removeAll { $0.due <= s.tick }
            s.delivered += due.count
            return (due, s.paths.keys.sorted().compactMap { s.paths[$0] }, s.conditions.partitioned, s.conditions)
        }
        let byAddress = Dictionary(uniqueKeysWithValues: paths.map { ($0.address, $0) })
        for datagram in due { byAddress[datagram.to]?.deliver(datagram.bytes) }
        if !partitioned {
            for path in paths { check(path) }
        }
        for path in paths {
            let reachable = !partitioned && state.withLock { s in
                !s.broken.contains(path.roundKey) && !(path.peerAddress.flatMap { s.paths[$0] }.map { s.broken.contains($0.roundKey) } ?? false)
                    && !s.offline.contains(path.address) && !(path.peerAddress.map { s.offline.contains($0) } ?? false)
            }
            path.watch(now: now, peerReachable: reachable, consentTimeout: conditions.consentTimeout, disconnectedAfter: conditions.disconnectedAfter)
        }
    }

    /// Connectivity checks: a path that knows its peer's current credentials and candidate,
    /// whose peer knows its own, connects, both ends at once. Run when a path learns its peer's
    /// parameters and on every tick (a partition that healed).
    func check(_ path: InMemoryIcePath) {
        let (peer, cut) = state.withLock { s in
            (path.checkTarget().flatMap { s.paths[$0] }, s.conditions.partitioned || s.offline.contains(path.address))
        }
        guard !cut, let peer, !isOffline(peer.address), peer.checkTarget() == path.address,
              path.remoteUfrag == peer.credentials.ufrag, peer.remoteUfrag == path.credentials.ufrag
        else { return }
        path.connect(to: peer)
        peer.connect(to: path)
    }

    /// A uniform number in 0..<1 from the network's generator (xorshift64*).
    static func random(_ s: inout State) -> Double {
        s.rng ^= s.rng >> 12
        s.rng ^= s.rng << 25
        s.rng ^= s.rng >> 27
        return Double((s.rng &* 2_685_821_657_736_338_717) >> 11) / Double(1 << 53)
    }
}

/// One call's ICE path on an ``InMemoryIceNetwork``.
public final class InMemoryIcePath: IcePath {
    public let events: AsyncStream<IceEvent>
    public let datagrams: AsyncStream<IceDatagram>
    private let eventsContinuation: AsyncStream<IceEvent>.Continuation
    private let datagramsContinuation: AsyncStream<IceDatagram>.Continuation
    private weak let network: InMemoryIceNetwork?
    /// `10.77.0.N:9`.
    public let address: String
    let candidate: IceCandidate

    struct State {
        var role: IceRole
        var credentials: IceCredentials
        var remote: IceCredentials?
        var remoteCandidates: [IceCandidate] = []
        var connection: IceConnectionState = .new
        var peer: String?
        var gathered = false
        var closed = false
        /// Since when this round's checks could run (both sides' parameters in) without a pair.
        var checkingSince: Duration?
        /// Since when the connected peer has been out of reach.
        var unreachableSince: Duration?
        /// The pair this round's checks selected.
        var selected: IceCandidatePair?
    }

    private let state: Locked<State>
    /// Whether the end of this path's gatherings waits (``holdGathering()``), and who waits for it.
    private let gate = Locked<(held: Bool, waiting: [CheckedContinuation<Void, Never>])>((false, []))

    init(network: InMemoryIceNetwork, host: String, role: IceRole, credentials: IceCredentials) {
        self.network = network
        candidate = IceCandidate(foundation: "1", priority: 2_130_706_431, address: host, port: 9, type: .host)
        address = "\(host):9"
        state = Locked(State(role: role, credentials: credentials))
        (events, eventsContinuation) = AsyncStream.makeStream(of: IceEvent.self)
        (datagrams, datagramsContinuation) = AsyncStream.makeStream(of: IceDatagram.self, bufferingPolicy: .bufferingNewest(512))
    }

    var credentials: IceCredentials { state.withLock { $0.credentials } }
    var role: IceRole { state.withLock { $0.role } }
    var remoteUfrag: String? { state.withLock { $0.remote?.ufrag } }

    /// This path's current round, as a break of the network names it.
    var roundKey: String { address + " " + credentials.ufrag }
    /// The peer's address while connected.
    var peerAddress: String? { state.withLock { $0.connection == .connected || $0.connection == .disconnected ? $0.peer : nil } }

    /// The peer address to check, while not connected (nor failed) and both sides' parameters are in.
    func checkTarget() -> String? {
        state.withLock { s in
            guard !s.closed, s.remote != nil, s.connection != .connected, s.connection != .disconnected, s.connection != .failed,
                  let remote = s.remoteCandidates.first(where: { $0.transport == .udp }) else { return nil }
            return "\(remote.address):\(remote.port)"
        }
    }

    func connect(to peer: InMemoryIcePath) {
        let pair = IceCandidatePair(local: candidate, remote: peer.candidate)
        let changed = state.withLock { s -> Bool in
            guard !s.closed, s.connection != .connected, s.connection != .disconnected else { return false }
            s.connection = .connected
            s.peer = peer.address
            s.selected = pair
            return true
        }
        guard changed else { return }
        eventsContinuation.yield(.selectedPair(pair))
        eventsContinuation.yield(.stateChanged(.connected))
    }

    public var selectedPair: IceCandidatePair? { get async { state.withLock { $0.selected } } }

    /// On each tick: a round that found no pair in ``InMemoryIceNetwork/checkTimeout``, or a
    /// connected path whose peer was out of reach for ``InMemoryIceNetwork/consentTimeout``,
    /// fails.
    func watch(now: Duration, peerReachable: Bool, consentTimeout: Duration, disconnectedAfter: Duration? = nil) {
        let next = state.withLock { s -> IceConnectionState? in
            guard !s.closed else { return nil }
            switch s.connection {
            case .checking where s.remote != nil:
                let since = s.checkingSince ?? now
                s.checkingSince = since
                guard now - since >= InMemoryIceNetwork.checkTimeout else { return nil }
            case .connected, .disconnected:
                s.checkingSince = nil
                guard !peerReachable else {
                    s.unreachableSince = nil
                    // The peer answers again before its consent ran out: connected again.
                    guard s.connection == .disconnected else { return nil }
                    s.connection = .connected
                    return .connected
                }
                let since = s.unreachableSince ?? now
                s.unreachableSince = since
                if s.connection == .connected, let disconnectedAfter, now - since >= disconnectedAfter, now - since < consentTimeout {
                    s.connection = .disconnected
                    return .disconnected
                }
                guard now - since >= consentTimeout else { return nil }
            default:
                return nil
            }
            s.connection = .failed
            s.checkingSince = nil
            s.unreachableSince = nil
            return .failed
        }
        if let next { eventsContinuation.yield(.stateChanged(next)) }
    }

    func deliver(_ bytes: [UInt8]) {
        guard state.withLock({ !$0.closed && ($0.connection == .connected || $0.connection == .disconnected) }) else { return }
        datagramsContinuation.yield(IceDatagram(bytes: bytes))
    }

    private func set(_ connection: IceConnectionState) {
        let changed = state.withLock { s -> Bool in
            guard s.connection != connection else { return false }
            s.connection = connection
            return true
        }
        if changed { eventsContinuation.yield(.stateChanged(connection)) }
    }

    public var localCredentials: IceCredentials { get async { credentials } }

    /// A gathering on a host without an address fails, as libnice's does.
    private func gatherable() throws(IceError) {
        if network?.isOffline(address) == true {
            throw .libnice(function: "nice_agent_gather_candidates", detail: "the host has no address to gather on")
        }
    }

    public func gather() async throws(IceError) -> IceGathering {
        try gatherable()
        let credentials = try state.withLock { s throws(IceError) -> IceCredentials in
            guard !s.closed else { throw .closed }
            guard !s.gathered else { throw .invalidConfiguration("gather() was already called; use restart() for a new round") }
            s.gathered = true
            return s.credentials
        }
        set(.gathering)
        return IceGathering(credentials: credentials, candidates: oneCandidate(candidate))
    }

    /// The round's one candidate, then its end, read as the call reads them: an agent made
    /// ahead of its call (pooled) ends its gathering when the call comes to it, so a hold set
    /// meanwhile still applies.
    private func oneCandidate(_ candidate: IceCandidate) -> AsyncStream<IceCandidate> {
        let given = Locked(false)
        return AsyncStream(unfolding: { [weak self] in
            if !given.withLock({ given in defer { given = true }; return given }) { return candidate }
            await self?.gatheringEnds()
            return nil
        })
    }

    /// Holds the end of this path's gatherings back until ``releaseGathering()``, as a STUN or
    /// TURN server slow to answer does (the candidates the SDP carries are out already; the
    /// end of them is what a SIP offer or answer waits for).
    public func holdGathering() {
        gate.withLock { $0.held = true }
    }

    /// Lets the gatherings held back end; later ones end at once again.
    public func releaseGathering() {
        let waiting = gate.withLock { gate in
            defer { gate = (false, []) }
            return gate.waiting
        }
        for continuation in waiting { continuation.resume() }
    }

    /// Waits while the gathering is held (a reader that is cancelled, or a path closed, lets
    /// it go: nothing of a call waits on it for ever).
    private func gatheringEnds() async {
        guard gate.withLock({ $0.held }) else { return }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let now = gate.withLock { gate -> Bool in
                    guard gate.held, !Task.isCancelled else { return true }
                    gate.waiting.append(continuation)
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            releaseGathering()
        }
    }

    public func localCandidates() async throws(IceError) -> [IceCandidate] {
        guard !state.withLock({ $0.closed }) else { throw .closed }
        return [candidate]
    }

    public func setRole(_ role: IceRole) async throws(IceError) {
        try state.withLock { s throws(IceError) in
            guard s.remote == nil else { throw .invalidConfiguration("the role cannot change once the peer's credentials are set") }
            s.role = role
        }
    }

    public func setRemote(_ remote: IceCredentials, candidates: [IceCandidate], endOfCandidates: Bool) async throws(IceError) -> [IceError] {
        try state.withLock { s throws(IceError) in
            guard !s.closed else { throw .closed }
            s.remote = remote
            s.remoteCandidates += candidates
        }
        set(.checking)
        network?.check(self)
        return []
    }

    public func addRemoteCandidates(_ candidates: [IceCandidate]) async throws(IceError) -> [IceError] {
        try state.withLock { s throws(IceError) in
            guard !s.closed else { throw .closed }
            s.remoteCandidates += candidates
        }
        network?.check(self)
        return []
    }

    public func endOfRemoteCandidates() async throws(IceError) {}

    public func send(_ bytes: [UInt8]) async throws(IceError) {
        let peer = try state.withLock { s throws(IceError) -> String? in
            guard !s.closed else { throw .closed }
            // libnice sends only on a pair it holds connected (READY), not while disconnected.
            guard s.connection == .connected else { throw .notConnected(s.connection) }
            return s.peer
        }
        if let peer { network?.carry(bytes, from: address, to: peer) }
    }

    public func restart() async throws(IceError) -> IceGathering {
        try gatherable()
        guard let fresh = network?.newCredentials() else { throw .closed }
        try state.withLock { s throws(IceError) in
            guard !s.closed else { throw .closed }
            s.credentials = fresh
            s.remote = nil
            s.remoteCandidates = []
            s.peer = nil
            s.selected = nil
            s.connection = .gathering
            s.checkingSince = nil
            s.unreachableSince = nil
        }
        eventsContinuation.yield(.stateChanged(.gathering))
        return IceGathering(credentials: fresh, candidates: oneCandidate(candidate))
    }

    public func close() async {
        let wasOpen = state.withLock { s -> Bool in
            defer { s.closed = true }
            return !s.closed
        }
        guard wasOpen else { return }
        releaseGathering()
        network?.remove(address)
        eventsContinuation.yield(.stateChanged(.closed))
        eventsContinuation.finish()
        datagramsContinuation.finish()
    }
}
