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
        ice = icePool.prepare(role: role)
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

    /// This side makes the first offer (the state said so): gather, send the SDP offer, trickle
    /// the rest.
    func sendOffer() async throws {
        let prepared = try await preparedICE(role: .controlling)
        var offer = negotiation.firstOffer(local: prepared.local)
        offer.frameKey = frames.ownKey()
        offer.pageFrameKeys = frames.pageKeysValue()
        negotiation.record(offer: offer)
        // The call manager hears of the offer before it goes out: the answer is a later input,
        // but an answer to an offer the manager does not know of would end the call.
        try await manager.report(.progress(uuid, .offerSent))
        await send(.offer(sdp: offer.serialized))
        mark("offer-sent")
        trickle(prepared.gathering, skipping: Set(prepared.local.candidates))
    }

    /// An offer from the peer: the first (answer it and start ICE), or a later one for the
    /// running call (the state decides whether to answer it).
    func offered(sdp: String) async throws {
        let offer = try SessionDescription(parsing: sdp)
        if negotiated != nil {
            peerOffer = offer
            await legEvent(.peerReoffered)
            if peerOffer != nil {
                peerOffer = nil
                logger.info("call \(uuid): the peer's offer crossed ours; ours stands")
            }
            return
        }
        guard outgoing else { return }  // in this protocol the callee makes the first offer
        mark("offer-received")
        let prepared = try await preparedICE(role: .controlled)
        var (answer, negotiated) = try negotiation.answer(first: offer, local: prepared.local)
        answer.frameKey = try frames.answerKey(offered: offer.frameKey, peer: peer)
        if peerKind == .webPage, offer.pageFrameKeys == PageFrameKeysAttribute.accept {
            answer.pageFrameKeys = frames.pageKeysValue()
        }
        try frames.pageAccepted(offer.pageFrameKeys)
        negotiation.agree(negotiated, answer: answer)
        await legEvent(.negotiated(dtls: negotiated.dtls != nil))
        // The call manager hears of both before the answer leaves: ICE and DTLS finish (and
        // media connects) only after the peer has it.
        try await manager.report(.progress(uuid, .offerReceived))
        try await manager.report(.progress(uuid, .answerSent))
        await send(.answer(sdp: answer.serialized))
        mark("answer-sent")
        await peerOffered(offer)
        try await setRemote(negotiated)
        trickle(prepared.gathering, skipping: Set(prepared.local.candidates))
    }

    /// The answer to this side's offer: the callee's first (start ICE), or either side's later
    /// one (an ICE restart's, a hold's or a resume's).
    func answered(sdp: String) async throws {
        guard let offer = negotiation.offer, agent != nil else { return }
        guard negotiated == nil ? !outgoing : state.offerPending else { return }  // nothing of ours to answer
        let answer = try SessionDescription(parsing: sdp)
        switch try negotiation.accept(answer: answer) {
        case let .later(negotiated, iceChanged):
            // The same media; new ICE credentials and candidates after a restart.
            await legEvent(.offerAnswered)
            await peerAnswered(answer, to: offer)
            if iceChanged { try await setRemote(negotiated) }
        case let .first(negotiated):
            mark("answer-received")
            try frames.accept(answered: answer.frameKey, offered: offer.frameKey != nil, peer: peer)
            try frames.pageAccepted(answer.pageFrameKeys)
            negotiation.agree(negotiated)
            await legEvent(.negotiated(dtls: negotiated.dtls != nil))
            await peerAnswered(answer, to: offer)
            // The manager hears of the answer before ICE starts: ICE connecting (and media
            // with it) is a later input, but the manager must know the call is past its offer.
            try await manager.report(.progress(uuid, .answerReceived))
            try await setRemote(negotiated)
        }
    }

    /// This side's ICE parameters now: the agent's credentials and candidates, the DTLS
    /// fingerprint, the direction the state wants.
    func localParameters(agent: any IcePath) async throws -> LocalAudioParameters {
        guard var local = try await ice?.value.local else { throw NegotiationError("the call has no ICE") }
        local.fingerprint = dtlsCertificate.fingerprint.sdpValue
        let credentials = await agent.localCredentials
        local.iceUfrag = credentials.ufrag
        local.icePwd = credentials.pwd
        local.candidates = ((try? await agent.localCandidates()) ?? []).map(\.description)
        local.direction = state.wantedDirection
        return local
    }

    /// Restarts ICE here (new credentials, a new gathering) and offers it.
    func restart() async throws {
        guard let agent else { throw NegotiationError("the call has no offer to restart") }
        let gathering = try await agent.restart()
        let local = try await localParameters(agent: agent)
        let offer = try negotiation.laterOffer(local: local)
        logger.info("call \(uuid): ICE restart \(state.restarts + 1)")
        broadcaster.send(.iceRestarted(uuid, byPeer: false))
        await send(.offer(sdp: offer.serialized))
        // After the offer: candidates that overtook it would join the peer's old round.
        trickle(gathering, skipping: Set(local.candidates))
    }

    /// Answers the peer's new offer for the running call (the state decided this side answers
    /// it): an ICE restart when the credentials changed (restart here too, answer with the new
    /// ones), a hold or resume when its direction did (RFC 3264 §8.4), otherwise the same
    /// answer again. The media and its keys must stay as they are.
    func answer(_ offer: SessionDescription) async throws {
        guard let agent else { throw NegotiationError("a new offer came before the call had ICE") }
        var gathering: IceGathering?
        if try negotiation.restarts(offer, local: try await localParameters(agent: agent)) {
            gathering = try await agent.restart()
        }
        let local = try await localParameters(agent: agent)
        let (answer, negotiated) = try negotiation.answer(later: offer, local: local, outgoing: outgoing)
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
        guard let agent, negotiated != nil else { throw NegotiationError("the call has no offer and answer to renegotiate") }
        let offer = try negotiation.laterOffer(local: try await localParameters(agent: agent))
        logger.info("call \(uuid): offering \(state.wantedDirection.rawValue)")
        await send(.offer(sdp: offer.serialized))
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
        let skipped = try await agent.setRemote(IceCredentials(ufrag: negotiated.remoteIceUfrag, pwd: negotiated.remoteIcePwd),
                                                candidates: remoteCandidates(negotiated.remoteCandidates, agent: agent),
                                                endOfCandidates: negotiated.remoteEndOfCandidates)
        for problem in skipped { logger.debug("\(problem)") }
    }

    /// Trickled candidates.
    func addRemoteCandidates(_ lines: [String], end: Bool) async {
        guard let agent = agent else { return }
        let candidates = remoteCandidates(lines, agent: agent)
        if !candidates.isEmpty, let skipped = try? await agent.addRemoteCandidates(candidates) {
            for problem in skipped { logger.debug("\(problem)") }
        }
        if end { try? await agent.endOfRemoteCandidates() }
    }

    /// The peer's candidate lines that parse (the others are reported); those named by mDNS
    /// are resolved in the background and added to `agent` when they resolve.
    func remoteCandidates(_ lines: [String], agent: any IcePath) -> [IceCandidate] {
        let (ready, named) = RemoteCandidates.parse(lines) { broadcaster.send(.peerError("call \(uuid): \($0)")) }
        if !named.isEmpty {
            let clock = configuration.clock, logger = self.logger, uuid = self.uuid
            spawn { await RemoteCandidates.resolve(named, into: agent, clock: clock) { logger.info("call \(uuid): \($0)") } }
        }
        return ready
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
}
