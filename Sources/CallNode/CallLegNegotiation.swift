import AudioSession
import Calls
import Foundation
import DTLS
import ICE
import Logging
import Media
import Metrics
import SDP
import Signaling

/// A leg's ICE path (made early or taken from the pool), the offer and answer, ICE restarts,
/// candidates.
extension CallLeg {
    /// Starts making the call's ICE agent in `role` now, in the background; the offer or answer
    /// picks it up with ``preparedICE(_:role:)``. Host candidates are then ready to go in the
    /// SDP itself, and server-reflexive and relayed ones often are too. A pooled agent is used
    /// when there is one (a pooled agent that failed is replaced by a new one).
    func prepareICEEarly(role: IceRole) async {
        guard ice == nil else { return }
        // Taken from the pool now, not when the task runs: the pool is the node's, and it
        // refills only once this call hears audio.
        let (pooled, stale) = icePool.take()
        let settings = configuration.ice, make = configuration.makeIcePath
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
                prepared = try await PreparedICE.make(settings, role: role, make: make)
            }
            return prepared
        }
        ice = task
    }

    /// The call's prepared ICE agent (waiting for the early preparation, or making it now), with
    /// every candidate gathered so far in its local parameters.
    func preparedICE(role: IceRole) async throws -> PreparedICE {
        await prepareICEEarly(role: role)
        guard let task = ice else { throw NegotiationError("the call ended while ICE was being prepared") }
        var prepared = try await task.value
        if agent == nil {
            agent = prepared.agent
            watch(prepared.agent)
        }
        prepared.local.candidates = ((try? await prepared.agent.localCandidates()) ?? []).map(\.description)
        prepared.local.fingerprint = dtlsCertificate.fingerprint.sdpValue
        return prepared
    }

    /// The callee answered: gather, send the SDP offer, trickle the rest.
    func sendOffer() async throws {
        let prepared = try await preparedICE(role: .controlling)
        var local = prepared.local
        var offer = OfferAnswer.offer(sessionID: CallLeg.sessionID(), capabilities: capabilities(local: &local), local: local)
        if negotiated == nil {
            offer.frameKey = ownFrameKey()
            offer.pageFrameKeys = pageFrameKeysValue()
        }
        self.offer = offer
        // The call manager hears of the offer before it goes out: the answer can come back
        // while the send is still completing (this actor runs the answer meanwhile), and an
        // answer to an offer the manager does not know of ends the call.
        try await manager.report(.progress(uuid, .offerSent))
        await send(.offer(sdp: offer.serialized))
        mark("offer-sent")
        trickle(prepared.gathering, skipping: Set(local.candidates))
    }

    /// The caller receives the offer: answer it and start ICE. The call manager hears of the
    /// offer and the answer as the answer goes out; ICE starts after it (the callee's checks
    /// wait for it).
    func offered(sdp: String) async throws {
        let offer = try SessionDescription(parsing: sdp)
        if let current = self.negotiated {
            await reoffered(offer, current: current)
            return
        }
        guard outgoing else { return }  // in this protocol the callee makes the first offer
        mark("offer-received")
        let prepared = try await preparedICE(role: .controlled)
        var local = prepared.local
        var (answer, negotiated) = try OfferAnswer.answer(to: offer, sessionID: CallLeg.sessionID(),
                                                          capabilities: capabilities(local: &local), local: local)
        answer.frameKey = try answerFrameKey(offered: offer.frameKey)
        if peerKind == .webPage, offer.pageFrameKeys == PageFrameKeysAttribute.accept {
            answer.pageFrameKeys = pageFrameKeysValue()
        }
        try pageAccepted(offer.pageFrameKeys)
        self.negotiated = negotiated
        localAnswer = answer
        await legEvent(.negotiated(dtls: negotiated.dtls != nil))
        // The call manager hears of both first: once the answer is out, ICE and DTLS can
        // finish (and media report connected, which needs the answer sent) while this actor
        // still waits on the send.
        try await manager.report(.progress(uuid, .offerReceived))
        try await manager.report(.progress(uuid, .answerSent))
        await send(.answer(sdp: answer.serialized))
        mark("answer-sent")
        await peerOffered(offer)
        try await setRemote(negotiated)
        trickle(prepared.gathering, skipping: Set(local.candidates))
    }

    /// The answer to this side's offer: the callee's first (start ICE), or either side's later
    /// one (an ICE restart's, a hold's or a resume's).
    func answered(sdp: String) async throws {
        guard let offer = offer, agent != nil else { return }
        guard negotiated == nil ? !outgoing : state.offerPending else { return }  // nothing of ours to answer
        let answer = try SessionDescription(parsing: sdp)
        let negotiated = try OfferAnswer.accept(answer: answer, to: offer, capabilities: reofferCapabilities ?? capabilities)
        if let current = self.negotiated {
            // A later answer: the same media; new ICE credentials and candidates after a restart.
            await legEvent(.offerAnswered)
            try CallLeg.checkSameMedia(negotiated, as: current)
            self.negotiated = negotiated
            await peerAnswered(answer, to: offer)
            if negotiated.remoteIceUfrag != current.remoteIceUfrag || negotiated.remoteIcePwd != current.remoteIcePwd {
                try await setRemote(negotiated)
            }
            return
        }
        mark("answer-received")
        try acceptFrameKey(answered: answer.frameKey, offered: offer.frameKey != nil)
        try pageAccepted(answer.pageFrameKeys)
        self.negotiated = negotiated
        await legEvent(.negotiated(dtls: negotiated.dtls != nil))
        await peerAnswered(answer, to: offer)
        // The manager hears of the answer before ICE starts: ICE connecting (and media with it)
        // is a later input, but the manager must know the call is past its offer by then.
        try await manager.report(.progress(uuid, .answerReceived))
        try await setRemote(negotiated)
    }

    func restart() async throws {
        guard let agent = agent, let previous = offer ?? localAnswer,
              var local = try await ice?.value.local
        else { throw NegotiationError("the call has no offer to restart") }
        local.fingerprint = dtlsCertificate.fingerprint.sdpValue
        local.direction = state.wantedDirection
        let gathering = try await agent.restart()
        local.iceUfrag = gathering.credentials.ufrag
        local.icePwd = gathering.credentials.pwd
        local.candidates = ((try? await agent.localCandidates()) ?? []).map(\.description)
        let capabilities = negotiated.map { runningCallCapabilities($0, local: &local) } ?? self.capabilities(local: &local)
        var offer = OfferAnswer.offer(sessionID: previous.origin.sessionID, capabilities: capabilities, local: local)
        offer.origin.sessionVersion = max(previous.origin.sessionVersion, self.offer?.origin.sessionVersion ?? 0) + 1
        self.offer = offer
        reofferCapabilities = capabilities
        logger.info("call \(uuid): ICE restart \(state.restarts + 1)")
        broadcaster.send(.iceRestarted(uuid, byPeer: false))
        await send(.offer(sdp: offer.serialized))
        // After the offer: candidates that overtook it would join the peer's old round.
        trickle(gathering, skipping: Set(local.candidates))
    }

    /// An offer for a call that is already negotiated: an ICE restart when the credentials
    /// changed (restart here too, answer with the new ones), a hold or resume when its
    /// direction did (RFC 3264 §8.4), otherwise the same answer again. The media and its keys
    /// must stay as they are. Offers that cross (both sides offered at once): the callee's
    /// wins; the caller answers it (its answer says its own hold) and drops its own offer.
    func reoffered(_ offer: SessionDescription, current: NegotiatedAudio) async {
        peerOffer = (offer, current)
        await legEvent(.peerReoffered)
        if peerOffer != nil {
            peerOffer = nil
            logger.info("call \(uuid): the peer's offer crossed ours; ours stands")
        }
    }

    /// Answers the peer's new offer for the running call (the state decided this side answers it).
    func answer(_ offer: SessionDescription, current: NegotiatedAudio) async throws {
        guard let agent = agent, var local = try await ice?.value.local else {
            throw NegotiationError("a new offer came before the call had ICE")
        }
        local.fingerprint = dtlsCertificate.fingerprint.sdpValue
        local.iceUfrag = await agent.localCredentials.ufrag
        local.icePwd = await agent.localCredentials.pwd
        local.direction = state.wantedDirection
        let capabilities = self.capabilities(local: &local)
        let peek = try OfferAnswer.answer(to: offer, sessionID: CallLeg.sessionID(), capabilities: capabilities, local: local).negotiated
        try CallLeg.checkSameMedia(peek, as: current)
        let restarting = peek.remoteIceUfrag != current.remoteIceUfrag || peek.remoteIcePwd != current.remoteIcePwd
        var gathering: IceGathering?
        if restarting {
            let round = try await agent.restart()
            local.iceUfrag = round.credentials.ufrag
            local.icePwd = round.credentials.pwd
            gathering = round
        }
        local.candidates = ((try? await agent.localCandidates()) ?? []).map(\.description)
        let (answer, negotiated) = try OfferAnswer.answer(to: offer, sessionID: CallLeg.sessionID(), capabilities: capabilities, local: local)
        self.negotiated = negotiated
        if outgoing { localAnswer = answer }
        await send(.answer(sdp: answer.serialized))
        await peerOffered(offer)
        guard let gathering else { return }
        logger.info("call \(uuid): ICE restart asked by the peer")
        broadcaster.send(.iceRestarted(uuid, byPeer: true))
        try await setRemote(negotiated)
        trickle(gathering, skipping: Set(local.candidates))
    }

    /// Sends an offer for the running call with the direction this side wants now (hold:
    /// `sendonly` with hold audio, `inactive` without; resume: `sendrecv`): the same ICE
    /// credentials, keys, DTLS role and payload types, so only the direction changes.
    func renegotiate() async throws {
        guard let agent = agent, let current = negotiated,
              var local = try await ice?.value.local
        else { throw NegotiationError("the call has no offer and answer to renegotiate") }
        local.fingerprint = dtlsCertificate.fingerprint.sdpValue
        local.iceUfrag = await agent.localCredentials.ufrag
        local.icePwd = await agent.localCredentials.pwd
        local.candidates = ((try? await agent.localCandidates()) ?? []).map(\.description)
        local.direction = state.wantedDirection
        let capabilities = runningCallCapabilities(current, local: &local)
        let previousVersion = offer?.origin.sessionVersion ?? 0
        var offer = OfferAnswer.offer(sessionID: self.offer?.origin.sessionID ?? CallLeg.sessionID(), capabilities: capabilities, local: local)
        offer.origin.sessionVersion = previousVersion + 1
        self.offer = offer
        reofferCapabilities = capabilities
        logger.info("call \(uuid): offering \(local.direction.rawValue)")
        await send(.offer(sdp: offer.serialized))
    }

    /// The capabilities of a later offer for a running call (a restart's, a hold's): its media
    /// as it was agreed, whichever side offered first — payload types, key exchange, the SDES
    /// suite and key — and the DTLS role the first exchange settled (RFC 5763 §5).
    func runningCallCapabilities(_ current: NegotiatedAudio, local: inout LocalAudioParameters) -> AudioCapabilities {
        if let settled = current.dtls?.setup { local.offerSetup = settled }
        var capabilities = self.capabilities(local: &local)
        capabilities.opusPayloadType = current.payloadType
        capabilities.telephoneEventPayloadType = current.telephoneEventPayloadType
        capabilities.redundancyPayloadType = current.redundancyPayloadType
        capabilities.keyExchange = current.dtls == nil ? .sdes : .dtls
        if current.dtls == nil {
            capabilities.cryptoSuites = [current.cryptoSuite]
            local.keys = [current.cryptoSuite: current.localKey]
        }
        return capabilities
    }

    /// What the peer's offer says of its side: whether it takes this side's audio and sends.
    func peerOffered(_ offer: SessionDescription) async {
        guard let direction = offer.media.first(where: { $0.media == "audio" })?.direction else { return }
        await legEvent(.peerDirection(receives: direction.receives, sends: direction.sends))
    }

    /// What the peer's answer says of its side, where this side's offer let it say: it can
    /// refuse audio only if the offer sent some, and send only if the offer received.
    func peerAnswered(_ answer: SessionDescription, to offer: SessionDescription) async {
        guard let offered = offer.media.first(where: { $0.media == "audio" })?.direction,
              let answered = answer.media.first(where: { $0.media == "audio" })?.direction else { return }
        await legEvent(.peerDirection(receives: offered.sends ? answered.receives : nil,
                                      sends: offered.receives ? answered.sends : nil))
    }

    /// Gives the call's agent the peer's credentials and the candidates its SDP carried, in one
    /// step; candidate lines that do not parse are reported and skipped.
    func setRemote(_ negotiated: NegotiatedAudio) async throws {
        guard let agent = agent else { throw NegotiationError("the call has no ICE agent") }
        let candidates = resolvingNames(parseCandidates(negotiated.remoteCandidates), agent: agent)
        let skipped = try await agent.setRemote(IceCredentials(ufrag: negotiated.remoteIceUfrag, pwd: negotiated.remoteIcePwd),
                                                candidates: candidates, endOfCandidates: negotiated.remoteEndOfCandidates)
        for problem in skipped { logger.debug("\(problem)") }
    }

    /// Trickled candidates.
    func addRemoteCandidates(_ lines: [String], end: Bool) async {
        guard let agent = agent else { return }
        let candidates = resolvingNames(parseCandidates(lines), agent: agent)
        if !candidates.isEmpty, let skipped = try? await agent.addRemoteCandidates(candidates) {
            for problem in skipped { logger.debug("\(problem)") }
        }
        if end { try? await agent.endOfRemoteCandidates() }
    }

    /// The candidates with IP addresses, now; those a browser named by mDNS (`….local`) are
    /// resolved in the background and added when they resolve. Where they do not (no mDNS
    /// here), the browser's checks still reach this node and ICE learns its address as a
    /// peer-reflexive candidate.
    func resolvingNames(_ candidates: [IceCandidate], agent: any IcePath) -> [IceCandidate] {
        var usable: [IceCandidate] = []
        for candidate in candidates {
            guard !candidate.hasIPAddress, HostNameResolver.isMDNSName(candidate.address) else {
                usable.append(candidate)
                continue
            }
            let logger = self.logger, uuid = self.uuid
            spawn {
                guard let address = await HostNameResolver.resolve(candidate.address) else {
                    logger.info("call \(uuid): the peer's candidate \(candidate.address) does not resolve here; its checks will reveal the address")
                    return
                }
                var resolved = candidate
                resolved.address = address
                _ = try? await agent.addRemoteCandidates([resolved])
            }
        }
        return usable
    }

    func parseCandidates(_ lines: [String]) -> [IceCandidate] {
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
    func trickle(_ gathering: IceGathering, skipping sent: Set<String>) {
        trickleRound += 1
        let round = trickleRound
        spawn { [weak self] in
            for await candidate in gathering.candidates where !sent.contains(candidate.description) {
                guard let self, self.post(.trickled(round: round, candidate: candidate.description)) else { return }
            }
            self?.post(.trickled(round: round, candidate: nil))
        }
    }

    /// The capabilities for the call's peer: a web page gets DTLS whatever this node's
    /// own preference (browsers speak nothing else), and WebRTC's stream ids in `local`.
    func capabilities(local: inout LocalAudioParameters) -> AudioCapabilities {
        var capabilities = self.capabilities
        if peerKind == .webPage {
            capabilities.keyExchange = .dtls
            // A browser's encoded transform sees its RED payload whole, not frame by frame:
            // with frames encrypted end to end, calls with pages go without redundancy.
            if configuration.frameEncryption != .off { capabilities.redundancyPayloadType = nil }
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

    static func sessionID() -> String { String(UInt64.random(in: 1...UInt64(Int64.max))) }
}
