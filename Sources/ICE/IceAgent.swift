internal import CNice
import Clocks
import Logging

/// One ICE agent (RFC 8445, via libnice) carrying one component of datagrams.
///
/// The agent runs libnice on its own GLib main context and thread; nothing here blocks the
/// caller. A typical exchange:
///
/// ```swift
/// let agent = try await IceAgent(configuration: IceConfiguration(role: .controlling))
/// let gathering = try await agent.gather()
/// // signal gathering.credentials, then each candidate as it arrives:
/// for await candidate in gathering.candidates { signal(candidate) }
/// // signal end-of-candidates; meanwhile, from the peer:
/// try await agent.setRemoteCredentials(peerCredentials)
/// try await agent.addRemoteCandidate(peerCandidate)
/// ```
///
/// State and pair changes arrive on ``events``, received datagrams on ``datagrams`` (kept apart
/// so a bounded media buffer never drops a control event). Always ``close()`` an agent: it is the
/// call that releases the thread, sockets and TURN allocations.
public actor IceAgent {
    /// State changes and pair selections, in order. Finishes after ``close()``. Iterate once.
    public nonisolated let events: AsyncStream<IceEvent>
    /// Datagrams received on the selected pair. Keeps at most
    /// ``IceConfiguration/receiveBufferLimit`` unread (the oldest are dropped). Iterate once.
    public nonisolated let datagrams: AsyncStream<IceDatagram>
    /// The configuration the agent was created with.
    public nonisolated let configuration: IceConfiguration
    /// Datagrams straight to and from libnice for the media path (``DatagramPort``).
    public nonisolated var datagramPort: (any DatagramPort)? { handle.port }

    private let loop: GLibLoop
    private let handle: NiceHandle
    private let sink: AgentSink
    private let clock: TimerClock
    private let logger: Logger
    /// Each TURN server's address (`nil`: its name did not resolve, and it is left out).
    private let turnAddresses: [String?]

    private var credentials: IceCredentials
    /// The agent's role: the configuration's, unless ``setRole(_:)`` changed it.
    public private(set) var role: IceRole
    private var gathered = false
    private var remoteCredentials: IceCredentials?
    private var pendingRemote: [IceCandidate] = []
    private var checksStarted = false
    private var remoteEnded = false
    private var checkTimer: Task<Void, Never>?
    private var isClosed = false

    /// Creates an agent with one stream and component, ready to ``gather()``.
    ///
    /// - Parameters:
    ///   - configuration: Role, servers, addresses and timing.
    ///   - logger: Where state changes are logged (debug level).
    /// - Throws: ``IceError/invalidConfiguration(_:)`` for settings that cannot work,
    ///   ``IceError/unresolvableAddress(_:)`` for a server name that does not resolve.
    public init(
        configuration: IceConfiguration = IceConfiguration(),
        logger: Logger = Logger(label: "callnode.ice")
    ) async throws(IceError) {
        try configuration.validate()
        let (events, eventsContinuation) = AsyncStream.makeStream(of: IceEvent.self)
        let (datagrams, datagramsContinuation) = AsyncStream.makeStream(
            of: IceDatagram.self, bufferingPolicy: .bufferingNewest(configuration.receiveBufferLimit))
        let sink = AgentSink(events: eventsContinuation, datagrams: datagramsContinuation)
        let loop = try GLibLoop(name: "callnode-ice")

        let (gatheringStream, gatheringContinuation) = AsyncStream.makeStream(of: IceCandidate.self)
        let created: (NiceHandle, IceCredentials, [String?])
        do throws(IceError) {
            created = try await loop.run { () throws(IceError) -> (NiceHandle, IceCredentials, [String?]) in
                // Name resolution blocks, so it happens here on the agent's own thread. A server
                // whose name does not resolve is left out with a warning, not the whole call: the
                // others (and the host's own candidates) may still connect it.
                var stun: String?
                if let server = configuration.stunServer {
                    stun = try? resolveToIPAddress(server.host)
                    if stun == nil { logger.warning("cannot resolve the STUN server '\(server.host)': gathering goes on without it") }
                }
                var turn: [String?] = []
                for server in configuration.turnServers {
                    let address = try? resolveToIPAddress(server.address.host)
                    if address == nil { logger.warning("cannot resolve the TURN server '\(server.address.host)': gathering goes on without it") }
                    turn.append(address)
                }
                let handle = try NiceHandle(loop: loop, sink: sink, configuration: configuration, stunAddress: stun)
                do throws(IceError) {
                    let credentials = try handle.newStream(configuration: configuration, turnAddresses: turn)
                    sink.beginStream(handle.streamID, gathering: gatheringContinuation)
                    return (handle, credentials, turn)
                } catch {
                    handle.closeNow()
                    throw error
                }
            }
        } catch {
            await loop.stop()
            throw error
        }
        self.events = events
        self.datagrams = datagrams
        self.configuration = configuration
        self.role = configuration.role
        self.loop = loop
        self.sink = sink
        clock = configuration.clock
        self.logger = logger
        (self.handle, self.credentials, self.turnAddresses) = created
        self.pendingGathering = (gatheringStream, gatheringContinuation)
    }

    private var pendingGathering: (AsyncStream<IceCandidate>, AsyncStream<IceCandidate>.Continuation)?

    deinit {
        // close() is the supported way out; this keeps a forgotten agent from leaking its
        // thread and sockets, without waiting for TURN deallocation.
        if !isClosed {
            checkTimer?.cancel()
            let handle = self.handle
            let sink = self.sink
            loop.post {
                handle.closeNow()
                sink.finish()
            }
            loop.abandon()
        }
    }

    /// Datagrams that libnice could not send after ``send(_:)`` accepted them.
    public var sendFailures: Int { sink.sendFailures }

    /// The current connection state.
    public var state: IceConnectionState { sink.connection }

    /// The pair in use, once ICE selected one.
    public var selectedPair: IceCandidatePair? { sink.selectedPair }

    /// The local credentials of the current round (they change on ``restart()``).
    public var localCredentials: IceCredentials { credentials }

    /// Starts gathering local candidates.
    ///
    /// Returns at once with the credentials and a sequence that delivers candidates as they are
    /// found (host first, then server-reflexive and relayed) and finishes at end-of-candidates.
    /// - Throws: ``IceError/libnice(function:detail:)`` if no local address can be used;
    ///   ``IceError/invalidConfiguration(_:)`` if called twice in one round.
    public func gather() async throws(IceError) -> IceGathering {
        guard !isClosed else { throw .closed }
        guard !gathered, let (stream, _) = pendingGathering else {
            throw .invalidConfiguration("gather() was already called; use restart() for a new round")
        }
        gathered = true
        pendingGathering = nil
        let handle = self.handle
        try await loop.run { () throws(IceError) in try handle.gather() }
        return IceGathering(credentials: credentials, candidates: stream)
    }

    /// All local candidates gathered so far (for signaling that does not trickle).
    public func localCandidates() async throws(IceError) -> [IceCandidate] {
        guard !isClosed else { throw .closed }
        let handle = self.handle
        return try await loop.run { handle.localCandidates() }
    }

    /// Changes the role before gathering, so that an agent made ahead of time can take either
    /// side of a call.
    ///
    /// - Throws: ``IceError/invalidConfiguration(_:)`` once the agent has gathered: libnice
    ///   keeps the role a stream started gathering in (its property reads back the new role,
    ///   but the checks claim the old one, and both sides of a call then claimed control).
    public func setRole(_ role: IceRole) async throws(IceError) {
        guard !isClosed else { throw .closed }
        guard role != self.role else { return }
        guard !gathered else {
            throw .invalidConfiguration("the ICE role can only change before gathering (this agent gathered as \(self.role.rawValue))")
        }
        self.role = role
        let handle = self.handle
        try await loop.run { handle.setControlling(role == .controlling) }
    }

    /// The role libnice's property reads back: the one last asked for, which its checks carry
    /// only if it was asked for before gathering (the checks themselves say which they claim).
    @_spi(Testing) public func libniceRole() async throws(IceError) -> IceRole {
        guard !isClosed else { throw .closed }
        let handle = self.handle
        return try await loop.run { handle.isControlling ? .controlling : .controlled }
    }

    /// Sets the peer's credentials. Remote candidates added before this are kept and applied now.
    public func setRemoteCredentials(_ remote: IceCredentials) async throws(IceError) {
        try await setRemote(remote, candidates: [], endOfCandidates: false)
    }

    /// Sets the peer's credentials and adds its candidates in one step on the agent's thread,
    /// the usual case when both come in one SDP: checks start without a second round trip to
    /// the agent. Unusable candidates are skipped and returned; the rest apply.
    @discardableResult
    public func setRemote(_ remote: IceCredentials, candidates: [IceCandidate], endOfCandidates: Bool) async throws(IceError) -> [IceError] {
        guard !isClosed else { throw .closed }
        try Self.validate(remote)
        remoteCredentials = remote
        let skipped = queue(candidates)
        if endOfCandidates { remoteEnded = true }
        try await flushRemote(settingCredentials: remote)
        return skipped
    }

    private static func validate(_ remote: IceCredentials) throws(IceError) {
        guard remote.ufrag.count >= 4, remote.pwd.count >= 22,
              remote.ufrag.allSatisfy(IceCandidate.isIceChar), remote.pwd.allSatisfy(IceCandidate.isIceChar)
        else {
            throw .invalidConfiguration("remote ICE credentials are malformed (ufrag ≥ 4, pwd ≥ 22 ice-chars)")
        }
    }

    /// Queues the usable candidates for the next flush; returns why the others were skipped.
    private func queue(_ candidates: [IceCandidate]) -> [IceError] {
        var skipped: [IceError] = []
        for candidate in candidates {
            if let reason = Self.unusableReason(candidate) {
                skipped.append(.unusableRemoteCandidate(candidate, reason: reason))
            } else {
                pendingRemote.append(candidate)
            }
        }
        return skipped
    }

    /// Adds one remote candidate (trickle). Checks start with the first one once the remote
    /// credentials are set.
    ///
    /// - Throws: ``IceError/unusableRemoteCandidate(_:reason:)`` for a candidate this agent cannot
    ///   use (component other than 1, or an address that is not an IP literal).
    public func addRemoteCandidate(_ candidate: IceCandidate) async throws(IceError) {
        guard !isClosed else { throw .closed }
        if let reason = Self.unusableReason(candidate) {
            throw .unusableRemoteCandidate(candidate, reason: reason)
        }
        pendingRemote.append(candidate)
        try await flushRemote()
    }

    /// Adds remote candidates in bulk. Unusable ones are skipped and returned; the rest apply.
    @discardableResult
    public func addRemoteCandidates(_ candidates: [IceCandidate]) async throws(IceError) -> [IceError] {
        guard !isClosed else { throw .closed }
        let skipped = queue(candidates)
        try await flushRemote()
        return skipped
    }

    /// The peer has sent all its candidates (`a=end-of-candidates`): once every check has failed
    /// the agent reports ``IceConnectionState/failed`` instead of waiting for more.
    public func endOfRemoteCandidates() async throws(IceError) {
        guard !isClosed else { throw .closed }
        remoteEnded = true
        try await flushRemote()
    }

    /// Sends one datagram on the selected pair.
    ///
    /// Returns once the datagram is queued for the agent's thread, without waiting for the
    /// socket. Like any UDP datagram it may still be lost; one that libnice cannot send because
    /// the pair went away meanwhile is dropped and counted in ``sendFailures``.
    ///
    /// - Throws: ``IceError/notConnected(_:)`` unless the state is ``IceConnectionState/connected``.
    public func send(_ bytes: [UInt8]) throws(IceError) {
        guard !isClosed else { throw .closed }
        let state = sink.connection
        guard state == .connected else { throw .notConnected(state) }
        guard !bytes.isEmpty else { return }
        guard bytes.count <= 65_507 else { throw .datagramTooLarge(bytes.count) }
        // Sent from the loop thread: calling nice_agent_send from another thread corrupted
        // the heap under churn (about one agent in 800 with libnice 0.1.21), so every libnice
        // call stays on the agent's own thread. Jobs run in the order they are posted.
        let handle = self.handle
        loop.post { handle.send(bytes) }
    }

    /// Takes the pair the peer's checks found, while this round's own checks have found none.
    ///
    /// A check of the peer's that succeeded went from its candidate (`remote` here) to this
    /// side's (`local`) and this side's response got back: the pair works both ways. This side's
    /// own checks on it may still be failing through heavy loss (its requests or the peer's
    /// responses lost, libnice's retries further and further apart) while the peer's media
    /// already goes to it. The pair is selected as if this side's checks had found it, and the
    /// round's checks stop.
    ///
    /// - Parameter peerUfrag: the peer's ICE username fragment for the round it found the pair
    ///   in; a pair of another round (before a restart) is not taken.
    /// - Returns: whether the pair was taken: not when a pair is selected already, the round
    ///   is another, or either candidate is not one this round knows.
    public func adoptPeerPair(local: IceEndpoint, remote: IceEndpoint, peerUfrag: String) async -> Bool {
        guard !isClosed, checksStarted, remoteCredentials?.ufrag == peerUfrag, sink.connection != .connected else { return false }
        let handle = self.handle
        let taken = (try? await loop.run { handle.select(local: local, remote: remote) }) ?? false
        logger.debug("peer's pair \(taken ? "taken" : "not taken")", metadata: ["local": "\(local)", "remote": "\(remote)"])
        return taken
    }

    /// ICE restart: new credentials, a fresh gathering and new checks.
    ///
    /// Both sides must restart and exchange the new credentials and candidates; datagrams flow
    /// again once the state returns to ``IceConnectionState/connected``.
    public func restart() async throws(IceError) -> IceGathering {
        guard !isClosed else { throw .closed }
        checkTimer?.cancel()
        checkTimer = nil
        remoteCredentials = nil
        pendingRemote = []
        checksStarted = false
        remoteEnded = false
        let (stream, continuation) = AsyncStream.makeStream(of: IceCandidate.self)
        let handle = self.handle, sink = self.sink, configuration = self.configuration
        let turn = turnAddresses
        credentials = try await loop.run { () throws(IceError) -> IceCredentials in
            let credentials = try handle.newStream(configuration: configuration, turnAddresses: turn)
            sink.beginStream(handle.streamID, gathering: continuation)
            try handle.gather()
            return credentials
        }
        gathered = true
        pendingGathering = nil
        logger.debug("ICE restart", metadata: ["ufrag": "\(credentials.ufrag)"])
        return IceGathering(credentials: credentials, candidates: stream)
    }

    /// Closes the agent: ends checks, releases TURN allocations, sockets and the loop thread,
    /// emits ``IceConnectionState/closed`` and finishes every sequence. Idempotent.
    public func close() async {
        guard !isClosed else { return }
        isClosed = true
        checkTimer?.cancel()
        checkTimer = nil
        pendingGathering?.1.finish()
        pendingGathering = nil
        let handle = self.handle
        handle.port.setPolled(false)  // the close runs on the loop's own thread
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            loop.post({ handle.close { continuation.resume() } }, dropped: { continuation.resume() })
        }
        sink.finish()
        await loop.stop()
        logger.debug("ICE agent closed")
    }

    private static func unusableReason(_ candidate: IceCandidate) -> String? {
        if candidate.component != 1 { return "component \(candidate.component); only component 1 is used (rtcp-mux)" }
        if !candidate.hasIPAddress { return "address '\(candidate.address)' is not an IP address" }
        return nil
    }

    /// Applies buffered remote candidates once the credentials are known, and starts the
    /// connect timer with the first of them.
    /// Hands libnice what is pending, in one job on the agent's thread: the credentials when
    /// they were just set, the queued candidates, and end-of-candidates once the peer sent it.
    /// Nothing is applied before the credentials are known.
    private func flushRemote(settingCredentials credentials: IceCredentials? = nil) async throws(IceError) {
        guard remoteCredentials != nil else { return }
        let candidates = pendingRemote
        pendingRemote = []
        let handle = self.handle
        let streamID = handle.streamID
        let endNow = remoteEnded
        guard credentials != nil || !candidates.isEmpty || endNow else { return }
        let added = try await loop.run { () throws(IceError) -> Int in
            if let credentials { try handle.setRemoteCredentials(credentials) }
            let added = candidates.isEmpty ? 0 : try handle.addRemote(candidates)
            if endNow { handle.endOfRemoteCandidates() }
            return added
        }
        if !candidates.isEmpty { logger.debug("remote candidates added", metadata: ["count": "\(added)"]) }
        if !checksStarted && (added > 0 || endNow) {
            // With no usable candidate at all there is nothing to check, so the timer fails the
            // agent when it runs out.
            checksStarted = true
            startCheckTimer(stream: streamID)
        }
    }

    private func startCheckTimer(stream: UInt32) {
        let clock = self.clock, timeout = configuration.connectTimeout, sink = self.sink
        checkTimer?.cancel()
        // Owned by the actor: cancelled on restart() and close(), replaced here.
        checkTimer = Task {
            do { try await clock.sleep(for: timeout) } catch { return }
            sink.checksTimedOut(stream: stream)
        }
    }
}
