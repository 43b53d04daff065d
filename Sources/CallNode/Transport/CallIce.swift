import Locking
import Clocks
import Foundation
import ICE
import Logging
import SDP
import Signaling

/// One call's ICE path: its agent (made ahead, or taken from the node's pool), this side's ICE
/// parameters for the SDP, the peer's candidates (mDNS names resolved in the background),
/// restarts, and the trickle of this side's candidates.
///
/// What the agent reports (its state, the selected pair) and each candidate to trickle reach
/// the call's leg as inputs through its queue; the leg awaits this actor while it performs,
/// and this actor never waits for the leg.
actor CallIce {
    private let uuid: UUID
    private let pool: IcePool
    private let queue: LegQueue
    private let fingerprint: String
    private let clock: TimerClock
    private let logger: Logger
    private let broadcaster: EventBroadcaster<NodeEvent>
    /// The agent being made and gathering, started before it is needed (the caller's at dial,
    /// the callee's when it rings) so that answering does not wait for it.
    private var preparation: Task<PreparedICE, any Error>?
    /// The call's agent, once an offer or answer took it.
    private(set) var agent: (any IcePath)?
    /// Whether the call goes without ICE, on a plain RTP path.
    var usesPlainRTP: Bool { agent is PlainRTPPath }
    /// Which round of local candidates is being trickled (a restart starts a new one).
    private(set) var trickleRound = 0
    /// This side's latest gathering has not ended yet: its offer or answer may still wait for
    /// the end of its candidates (SIP's does), so the peer may not have them all.
    private(set) var gatheringPending = false

    init(call uuid: UUID, pool: IcePool, queue: LegQueue, fingerprint: String, clock: TimerClock, logger: Logger,
         broadcaster: EventBroadcaster<NodeEvent>) {
        self.uuid = uuid
        self.pool = pool
        self.queue = queue
        self.fingerprint = fingerprint
        self.clock = clock
        self.logger = logger
        self.broadcaster = broadcaster
    }

    /// Starts making the call's agent in `role` now, in the background; ``prepared(role:)``
    /// picks it up. Host candidates are then ready to go in the SDP itself, and server-reflexive
    /// and relayed ones often are too.
    func prepareEarly(role: IceRole) {
        guard preparation == nil else { return }
        preparation = pool.prepare(role: role)
    }

    /// The call goes without ICE, on a plain RTP path from `address` (this host's address the
    /// route to `peer` leaves from, when nil): an agent made ahead is closed. Before
    /// ``prepared(role:)`` only.
    /// With `stun`, the path asks that server where its packets come from, and the SDP names
    /// that address (its NAT's) rather than the socket's, so a peer outside the NAT reaches it.
    func usePlainRTP(address: String?, toward peer: String?, stun: IceServerAddress? = nil) throws {
        guard agent == nil else { throw NegotiationError("the call has its ICE agent already") }
        if let early = preparation {
            preparation = nil
            queue.spawn { await (try? early.value)?.agent.close() }
        }
        let local = address ?? peer.flatMap(PlainRTPPath.localAddress(toward:)) ?? PlainRTPPath.localAddress(toward: "192.0.2.1") ?? "127.0.0.1"
        let logger = self.logger, uuid = self.uuid
        preparation = Task {
            let prepared = try await PreparedICE.make(IceConfiguration(role: .controlling), role: .controlling) { _ in
                try PlainRTPPath(bindingTo: local)
            }
            // A peer on this host needs no NAT's address.
            if let stun, let plain = prepared.agent as? PlainRTPPath, !local.hasPrefix("127."), local != "::1" {
                if let mapped = await plain.map(through: stun) {
                    logger.info("call \(uuid): RTP without ICE from \(plain.local.address):\(plain.local.port), seen by \(stun) as \(mapped.address):\(mapped.port)")
                } else {
                    logger.notice("call \(uuid): the STUN server \(stun) did not answer: the SDP names \(plain.local.address), which a peer outside this network may not reach")
                }
            }
            return prepared
        }
    }

    /// The call's agent (waiting for the early preparation, or making it now), with every
    /// candidate gathered so far in its local parameters; from now on its events reach the leg.
    func prepared(role: IceRole) async throws -> PreparedICE {
        prepareEarly(role: role)
        guard let preparation else { throw NegotiationError("the call has no ICE agent") }
        var prepared = try await preparation.value
        if agent == nil {
            agent = prepared.agent
            let queue = self.queue, events = prepared.agent.events
            queue.spawn {
                for await event in events where !queue.post(.ice(event)) { return }
            }
        }
        prepared.local.candidates = ((try? await prepared.agent.localCandidates()) ?? []).map(\.description)
        prepared.local.fingerprint = fingerprint
        Self.describePlainPath(prepared.agent, in: &prepared.local)
        return prepared
    }

    /// Without ICE, the SDP says where the path's socket is.
    private static func describePlainPath(_ agent: any IcePath, in local: inout LocalAudioParameters) {
        guard let plain = agent as? PlainRTPPath else { return }
        let advertised = plain.advertised
        local.plainRTP = RTPEndpoint(address: advertised.address, port: Int(advertised.port))
        local.address = advertised.address
    }

    /// This side's ICE parameters now, for a later offer or answer: the agent's credentials and
    /// candidates, the DTLS fingerprint, `direction`.
    func local(direction: MediaDirection) async throws -> LocalAudioParameters {
        guard let agent, var local = try await preparation?.value.local else { throw NegotiationError("the call has no ICE agent") }
        local.fingerprint = fingerprint
        let credentials = await agent.localCredentials
        local.iceUfrag = credentials.ufrag
        local.icePwd = credentials.pwd
        local.candidates = ((try? await agent.localCandidates()) ?? []).map(\.description)
        local.direction = direction
        Self.describePlainPath(agent, in: &local)
        return local
    }

    /// Restarts ICE here: new credentials, a new gathering (trickle it after the offer).
    func restart() async throws -> IceGathering {
        guard let agent else { throw NegotiationError("the call has no ICE agent") }
        return try await agent.restart()
    }

    /// Gives the agent the peer's credentials and the candidates its SDP carried, in one step.
    func setRemote(_ negotiated: NegotiatedAudio) async throws {
        guard let agent else { throw NegotiationError("the call has no ICE agent") }
        if let rtp = negotiated.remoteRTP {
            // The peer speaks no ICE: its RTP address, as the one candidate of a plain path.
            guard agent is PlainRTPPath, let port = UInt16(exactly: rtp.port) else {
                throw NegotiationError("the peer answered without ICE an offer made with it: call this peer without offering ICE (--sip-ice off)")
            }
            var targets = [IceCandidate(foundation: "sdp", priority: 1, address: rtp.address, port: port, type: .host)]
            // RTCP to its own port when the peer does not mux it.
            if let rtcp = negotiated.remoteRTCP, let rtcpPort = UInt16(exactly: rtcp.port) {
                targets.append(IceCandidate(foundation: "sdp", component: 2, priority: 1, address: rtcp.address, port: rtcpPort, type: .host))
            }
            for problem in try await agent.setRemote(IceCredentials(ufrag: "", pwd: ""), candidates: targets, endOfCandidates: true) {
                throw NegotiationError("cannot send RTP to \(rtp): \(problem)")
            }
            return
        }
        let skipped = try await agent.setRemote(IceCredentials(ufrag: negotiated.remoteIceUfrag, pwd: negotiated.remoteIcePwd),
                                                candidates: remoteCandidates(negotiated.remoteCandidates, agent: agent),
                                                endOfCandidates: negotiated.remoteEndOfCandidates)
        for problem in skipped { logger.debug("\(problem)") }
    }

    /// Trickled candidates from the peer (and its end of them).
    func add(_ lines: [String], end: Bool) async {
        guard let agent else { return }
        let candidates = remoteCandidates(lines, agent: agent)
        if !candidates.isEmpty, let skipped = try? await agent.addRemoteCandidates(candidates) {
            for problem in skipped { logger.debug("\(problem)") }
        }
        if end { try? await agent.endOfRemoteCandidates() }
    }

    /// The peer's candidate lines that parse (the others are reported); those named by mDNS
    /// are resolved in the background and added when they resolve.
    private func remoteCandidates(_ lines: [String], agent: any IcePath) -> [IceCandidate] {
        let uuid = self.uuid, broadcaster = self.broadcaster
        let (ready, named) = RemoteCandidates.parse(lines) { broadcaster.send(.peerError("call \(uuid): \($0)")) }
        if !named.isEmpty {
            let clock = self.clock, logger = self.logger
            queue.spawn { await RemoteCandidates.resolve(named, into: agent, clock: clock) { logger.info("call \(uuid): \($0)") } }
        }
        return ready
    }

    /// Sends this side's candidates as they are found (except those the SDP already carried),
    /// then end-of-candidates, as ``LegInput/trickled(round:candidate:)`` inputs of a new round.
    func trickle(_ gathering: IceGathering, skipping sent: Set<String>) {
        trickleRound += 1
        gatheringPending = true
        let round = trickleRound, queue = self.queue
        queue.spawn {
            for await candidate in gathering.candidates where !sent.contains(candidate.description) {
                guard queue.post(.trickled(round: round, candidate: candidate.description)) else { return }
            }
            queue.post(.trickled(round: round, candidate: nil))
        }
    }

    /// The end of round `round`'s candidates went to the peer.
    func gatheringEnded(round: Int) {
        if round == trickleRound { gatheringPending = false }
    }

    /// Closes the agent, or the one still being made (nothing else of the call would).
    func close() async {
        if let agent {
            await agent.close()
        } else if let prepared = try? await preparation?.value {
            await prepared.agent.close()
        }
    }
}

/// The peer's ICE candidates as its SDP or its trickle carries them: lines to parse, and names
/// a browser hides its addresses behind (mDNS, `….local`) to resolve.
enum RemoteCandidates {
    /// The lines that parse and have an IP address, and those named by mDNS (to resolve);
    /// `problem` hears each line that does not parse.
    static func parse(_ lines: [String], problem: (String) -> Void) -> (ready: [IceCandidate], named: [IceCandidate]) {
        var ready: [IceCandidate] = [], named: [IceCandidate] = []
        for line in lines {
            do {
                let candidate = try IceCandidate(parsing: line)
                if !candidate.hasIPAddress, HostNameResolver.isMDNSName(candidate.address) {
                    named.append(candidate)
                } else {
                    ready.append(candidate)
                }
            } catch {
                problem("\(error)")
            }
        }
        return (ready, named)
    }

    /// Resolves each named candidate and adds it to `agent` when it resolves. Where one does
    /// not (no mDNS here), the browser's checks still reach this node and ICE learns its
    /// address as a peer-reflexive candidate.
    static func resolve(_ named: [IceCandidate], into agent: any IcePath, clock: TimerClock, log: @escaping @Sendable (String) -> Void) async {
        await withDiscardingTaskGroup { group in
            for candidate in named {
                group.addTask {
                    guard let address = await HostNameResolver.resolve(candidate.address, clock: clock) else {
                        log("the peer's candidate \(candidate.address) does not resolve here; its checks will reveal the address")
                        return
                    }
                    var resolved = candidate
                    resolved.address = address
                    _ = try? await agent.addRemoteCandidates([resolved])
                }
            }
        }
    }
}
