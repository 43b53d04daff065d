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

/// ICE agents (made early, pooled), the offer and answer, ICE restarts, candidates.
extension CallNode {
    func prepareICEEarly(_ uuid: UUID, role: IceRole) {
        guard legs[uuid] != nil, legs[uuid]?.ice == nil else { return }
        let (pooled, stale) = takePooledICE()
        let ice = configuration.ice, make = configuration.makeIcePath
        let task = Task { () async throws -> PreparedICE in
            for entry in stale { await (try? await entry.task.value)?.agent.close() }
            let prepared: PreparedICE
            if let pooled, let made = try? await pooled.value {
                prepared = made
                do {
                    try await prepared.agent.setRole(role)
                } catch {
                    await prepared.agent.close()
                    throw error
                }
            } else {
                prepared = try await Self.makeICE(ice, role: role, make: make)
            }
            return try await self.adopt(prepared, for: uuid)
        }
        legs[uuid]?.ice = task
    }

    /// The call's prepared ICE agent (waiting for the early preparation, or making it now), with
    /// every candidate gathered so far in its local parameters.
    func preparedICE(_ uuid: UUID, role: IceRole) async throws -> PreparedICE {
        prepareICEEarly(uuid, role: role)
        guard let task = legs[uuid]?.ice else { throw NegotiationError("the call ended while ICE was being prepared") }
        var prepared = try await task.value
        guard legs[uuid] != nil else { throw NegotiationError("the call ended while ICE was being prepared") }
        prepared.local.candidates = ((try? await prepared.agent.localCandidates()) ?? []).map(\.description)
        prepared.local.fingerprint = dtlsCertificate.fingerprint.sdpValue
        return prepared
    }

    /// Creates an ICE agent in `role` and starts gathering; the local parameters carry the
    /// credentials and a fresh SRTP key for every suite this node supports.
    nonisolated static func makeICE(_ configuration: IceConfiguration, role: IceRole,
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

    /// Makes `prepared` the call's agent and follows its events; closes it if the call ended
    /// meanwhile (nobody else would).
    func adopt(_ prepared: PreparedICE, for uuid: UUID) async throws -> PreparedICE {
        guard legs[uuid] != nil, legs[uuid]?.agent == nil else {
            await prepared.agent.close()
            throw NegotiationError("the call ended while ICE was being prepared")
        }
        legs[uuid]?.agent = prepared.agent
        watch(uuid, prepared.agent)
        return prepared
    }

    // MARK: - The ICE agent pool

    /// Tops the pool of agents up to its size, in the background. Called at start and when a
    /// call that may have taken one has heard audio or ended, so that making the next agent
    /// does not compete with a call being set up.
    func fillICEPool() {
        guard isStarted, !isShutDown else { return }
        let ice = configuration.ice, make = configuration.makeIcePath
        while icePool.count < configuration.iceAgentPool {
            icePool.append(PooledICE(task: Task { try await Self.makeICE(ice, role: .controlling, make: make) }, made: configuration.clock.now))
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

    /// The callee answered: gather, send the SDP offer, trickle the rest.
    func sendOffer(_ uuid: UUID) async throws {
        guard let connection = legs[uuid]?.connection else { throw NegotiationError("the call has no signaling connection") }
        let prepared = try await preparedICE(uuid, role: .controlling)
        var local = prepared.local
        let offer = OfferAnswer.offer(sessionID: Self.sessionID(), capabilities: capabilities(for: connection, local: &local), local: local)
        legs[uuid]?.offer = offer
        try await connection.send(.offer(sdp: offer.serialized), call: uuid)
        try await manager.report(.progress(uuid, .offerSent))
        trickle(uuid, prepared.gathering, skipping: Set(local.candidates), on: connection)
    }

    /// The caller receives the offer: answer it and start ICE. The answer goes out first (the
    /// callee's checks wait for it), the call manager hears of both last.
    func offered(_ uuid: UUID, sdp: String) async throws {
        guard legs[uuid]?.outgoing == true, let connection = legs[uuid]?.connection else { return }
        let offer = try SessionDescription(parsing: sdp)
        if let current = legs[uuid]?.negotiated {
            try await reoffered(uuid, offer, current: current, on: connection)
            return
        }
        let prepared = try await preparedICE(uuid, role: .controlled)
        var local = prepared.local
        let (answer, negotiated) = try OfferAnswer.answer(to: offer, sessionID: Self.sessionID(),
                                                          capabilities: capabilities(for: connection, local: &local), local: local)
        legs[uuid]?.negotiated = negotiated
        await legEvent(uuid, .negotiated)
        try await connection.send(.answer(sdp: answer.serialized), call: uuid)
        try await setRemote(uuid, negotiated)
        trickle(uuid, prepared.gathering, skipping: Set(local.candidates), on: connection)
        prepareMedia(uuid)
        try await manager.report(.progress(uuid, .offerReceived))
        try await manager.report(.progress(uuid, .answerSent))
    }

    /// The callee receives the answer and starts ICE.
    func answered(_ uuid: UUID, sdp: String) async throws {
        guard legs[uuid]?.outgoing == false, let offer = legs[uuid]?.offer, legs[uuid]?.agent != nil else { return }
        let answer = try SessionDescription(parsing: sdp)
        let negotiated = try OfferAnswer.accept(answer: answer, to: offer, capabilities: capabilities)
        if let current = legs[uuid]?.negotiated {
            // The answer to an ICE restart: new credentials and candidates, the same media.
            await legEvent(uuid, .restartSettled)
            try Self.checkSameMedia(negotiated, as: current)
            legs[uuid]?.negotiated = negotiated
            try await setRemote(uuid, negotiated)
            return
        }
        legs[uuid]?.negotiated = negotiated
        await legEvent(uuid, .negotiated)
        try await setRemote(uuid, negotiated)
        prepareMedia(uuid)
        try await manager.report(.progress(uuid, .answerReceived))
    }

    // MARK: - ICE restart

    /// Restarts ICE on a connected call (RFC 8445 §9): new credentials and a new gathering
    /// here, offered again over signaling; the peer restarts too and answers. The media, its
    /// keys and the call go on; audio resumes once the new checks select a pair. The side that
    /// offered first (the callee) starts restarts, so two never cross; on the caller this
    /// throws. The node does this by itself while a connection stays lost
    /// (``CallNodeConfiguration/iceRestartInterval``).
    public func restartICE(_ call: UUID) async throws(CallNodeError) {
        guard let leg = legs[call], leg.negotiated != nil else { throw .noSuchCall(call) }
        guard !leg.outgoing else { throw .restartFromCaller }
        do {
            try await restart(call)
        } catch {
            throw .restartFailed("\(error)")
        }
    }

    func restart(_ uuid: UUID) async throws {
        guard let connection = legs[uuid]?.connection, let agent = legs[uuid]?.agent, let previous = legs[uuid]?.offer,
              var local = try await legs[uuid]?.ice?.value.local
        else { throw NegotiationError("the call has no offer to restart") }
        local.fingerprint = dtlsCertificate.fingerprint.sdpValue
        guard legs[uuid]?.state.restartPending == false else { throw NegotiationError("an ICE restart is already waiting for the peer's answer") }
        await legEvent(uuid, .restartOffered)
        let gathering: IceGathering
        do {
            gathering = try await agent.restart()
        } catch {
            await legEvent(uuid, .restartSettled)
            throw error
        }
        local.iceUfrag = gathering.credentials.ufrag
        local.icePwd = gathering.credentials.pwd
        local.candidates = ((try? await agent.localCandidates()) ?? []).map(\.description)
        // DTLS roles stay as the first exchange settled them (RFC 5763 §5).
        if let settled = legs[uuid]?.negotiated?.dtls?.setup { local.offerSetup = settled }
        var offer = OfferAnswer.offer(sessionID: previous.origin.sessionID, capabilities: capabilities, local: local)
        offer.origin.sessionVersion = previous.origin.sessionVersion + 1
        legs[uuid]?.offer = offer
        logger.info("call \(uuid): ICE restart \(legs[uuid]?.state.restarts ?? 0)")
        broadcaster.send(.iceRestarted(uuid, byPeer: false))
        do {
            try await connection.send(.offer(sdp: offer.serialized), call: uuid)
        } catch {
            await legEvent(uuid, .restartSettled)
            throw error
        }
        // After the offer: candidates that overtook it would join the peer's old round.
        trickle(uuid, gathering, skipping: Set(local.candidates), on: connection)
    }

    /// The caller receives an offer for a call that already has media: an ICE restart when the
    /// credentials changed (restart here too, answer with the new ones), otherwise the same
    /// answer again. The media and its keys must stay as they are.
    func reoffered(_ uuid: UUID, _ offer: SessionDescription, current: NegotiatedAudio, on connection: SignalingConnection) async throws {
        guard let agent = legs[uuid]?.agent, var local = try await legs[uuid]?.ice?.value.local else {
            throw NegotiationError("a new offer came before the call had ICE")
        }
        local.fingerprint = dtlsCertificate.fingerprint.sdpValue
        local.iceUfrag = await agent.localCredentials.ufrag
        local.icePwd = await agent.localCredentials.pwd
        let peek = try OfferAnswer.answer(to: offer, sessionID: Self.sessionID(), capabilities: capabilities, local: local).negotiated
        try Self.checkSameMedia(peek, as: current)
        let restarting = peek.remoteIceUfrag != current.remoteIceUfrag || peek.remoteIcePwd != current.remoteIcePwd
        var gathering: IceGathering?
        if restarting {
            let round = try await agent.restart()
            local.iceUfrag = round.credentials.ufrag
            local.icePwd = round.credentials.pwd
            gathering = round
        }
        local.candidates = ((try? await agent.localCandidates()) ?? []).map(\.description)
        let (answer, negotiated) = try OfferAnswer.answer(to: offer, sessionID: Self.sessionID(), capabilities: capabilities, local: local)
        legs[uuid]?.negotiated = negotiated
        try await connection.send(.answer(sdp: answer.serialized), call: uuid)
        guard let gathering else { return }
        logger.info("call \(uuid): ICE restart asked by the peer")
        broadcaster.send(.iceRestarted(uuid, byPeer: true))
        try await setRemote(uuid, negotiated)
        trickle(uuid, gathering, skipping: Set(local.candidates), on: connection)
    }

    /// A later offer or answer may change ICE, not the media: the same suite and keys, the
    /// same payload types.
    static func checkSameMedia(_ next: NegotiatedAudio, as current: NegotiatedAudio) throws {
        guard next.cryptoSuite == current.cryptoSuite, next.localKey == current.localKey, next.remoteKey == current.remoteKey else {
            throw NegotiationError("a new offer or answer may not change the SRTP keys of a running call")
        }
        guard next.dtls == current.dtls else {
            throw NegotiationError("a new offer or answer may not change the DTLS certificate or role of a running call")
        }
        guard next.payloadType == current.payloadType else {
            throw NegotiationError("a new offer or answer may not change the Opus payload type of a running call")
        }
    }

    func restartFailed(_ uuid: UUID, _ error: any Error) {
        logger.warning("call \(uuid): ICE restart failed: \(error)")
    }

    /// Gives the call's agent the peer's credentials and the candidates its SDP carried, in one
    /// step; candidate lines that do not parse are reported and skipped.
    func setRemote(_ uuid: UUID, _ negotiated: NegotiatedAudio) async throws {
        guard let agent = legs[uuid]?.agent else { throw NegotiationError("the call has no ICE agent") }
        let candidates = resolvingNames(uuid, parseCandidates(uuid, negotiated.remoteCandidates), agent: agent)
        let skipped = try await agent.setRemote(IceCredentials(ufrag: negotiated.remoteIceUfrag, pwd: negotiated.remoteIcePwd),
                                                candidates: candidates, endOfCandidates: negotiated.remoteEndOfCandidates)
        for problem in skipped { logger.debug("\(problem)") }
    }

    /// Trickled candidates.
    func addRemoteCandidates(_ uuid: UUID, _ lines: [String], end: Bool) async {
        guard let agent = legs[uuid]?.agent else { return }
        let candidates = resolvingNames(uuid, parseCandidates(uuid, lines), agent: agent)
        if !candidates.isEmpty, let skipped = try? await agent.addRemoteCandidates(candidates) {
            for problem in skipped { logger.debug("\(problem)") }
        }
        if end { try? await agent.endOfRemoteCandidates() }
    }

    /// The candidates with IP addresses, now; those a browser named by mDNS (`….local`) are
    /// resolved in the background and added when they resolve. Where they do not (no mDNS
    /// here), the browser's checks still reach this node and ICE learns its address as a
    /// peer-reflexive candidate.
    func resolvingNames(_ uuid: UUID, _ candidates: [IceCandidate], agent: any IcePath) -> [IceCandidate] {
        var usable: [IceCandidate] = []
        for candidate in candidates {
            guard !candidate.hasIPAddress, HostNameResolver.isMDNSName(candidate.address) else {
                usable.append(candidate)
                continue
            }
            let logger = self.logger
            own(uuid, Task {
                guard let address = await HostNameResolver.resolve(candidate.address) else {
                    logger.info("call \(uuid): the peer's candidate \(candidate.address) does not resolve here; its checks will reveal the address")
                    return
                }
                var resolved = candidate
                resolved.address = address
                _ = try? await agent.addRemoteCandidates([resolved])
            })
        }
        return usable
    }

    func parseCandidates(_ uuid: UUID, _ lines: [String]) -> [IceCandidate] {
        lines.compactMap { line in
            do {
                return try IceCandidate(parsing: line)
            } catch {
                broadcaster.send(.peerError("call \(uuid): \(error)"))
                return nil
            }
        }
    }

    /// Sends local candidates as they are found (except those the SDP already carried), then
    /// end-of-candidates.
    func trickle(_ uuid: UUID, _ gathering: IceGathering, skipping sent: Set<String>, on connection: SignalingConnection) {
        let task = Task {
            for await candidate in gathering.candidates where !sent.contains(candidate.description) {
                if Task.isCancelled { return }
                try? await connection.send(.candidates([candidate.description], end: false), call: uuid)
            }
            // A restart replaced this round: its end-of-candidates would end the new one.
            if Task.isCancelled { return }
            try? await connection.send(.candidates([], end: true), call: uuid)
        }
        legs[uuid]?.trickle?.cancel()
        legs[uuid]?.trickle = task
        own(uuid, task)
    }

    /// The capabilities for a call on `connection`: a web page gets DTLS whatever this node's
    /// own preference (browsers speak nothing else), and WebRTC's stream ids in `local`.
    func capabilities(for connection: SignalingConnection, local: inout LocalAudioParameters) -> AudioCapabilities {
        var capabilities = self.capabilities
        if connection.origin == .webPage {
            capabilities.keyExchange = .dtls
            local.stream = LocalStream(streamID: "callnode", trackID: "callnode-audio", cname: "callnode")
        }
        return capabilities
    }

    var capabilities: AudioCapabilities {
        var capabilities = AudioCapabilities()
        capabilities.opusPayloadType = Int(configuration.media.payloadType)
        capabilities.maxAverageBitrate = configuration.media.opus.bitrate
        capabilities.packetTime = Int(configuration.media.opus.frameDuration.components.seconds * 1000
            + configuration.media.opus.frameDuration.components.attoseconds / 1_000_000_000_000_000)
        capabilities.useDTX = configuration.media.opus.discontinuousTransmission
        capabilities.telephoneEventPayloadType = Int(configuration.media.telephoneEventPayloadType)
        capabilities.keyExchange = configuration.keyExchange
        return capabilities
    }

    static func sessionID() -> String { String(UInt64.random(in: 1...UInt64(Int64.max))) }
}
