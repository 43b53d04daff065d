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

/// A leg's offers and answers: the first exchange (who makes it is the state's decision), the
/// later ones (ICE restarts, holds and resumes), what each says of the peer's direction.
extension CallLeg {
    /// This side makes the first offer (the state said so): gather, send the SDP offer, trickle
    /// the rest.
    func sendOffer() async throws {
        // A dialect whose peers do not speak ICE (SIP's, by default) offers plain RTP.
        if !dialect.traits.offersICE, await ice.agent == nil {
            try await ice.usePlainRTP(address: dialect.traits.mediaAddress, toward: nil, stun: configuration.ice.stunServer)
        }
        let prepared = try await ice.prepared(role: .controlling)
        var offer = negotiation.firstOffer(local: prepared.local, unencrypted: state.offersUnencrypted)
        offer.frameKey = frames.ownKey()
        offer.pageFrameKeys = frames.pageKeysValue()
        negotiation.record(offer: offer)
        // The state says whom to tell before it goes (``LegEvent/offerMade(sdp:)``).
        if let refused = await legEvent(.offerMade(sdp: offer.serialized)) { throw refused }
        mark("offer-sent")
        await ice.trickle(prepared.gathering, skipping: Set(prepared.local.candidates))
    }

    /// An offer from the peer: the state decides whether this side answers it (the first, or a
    /// later one that did not cross one of this side's that stands), or keeps it (the caller's
    /// with its invitation, until the user answers).
    func offered(sdp: String) async throws {
        let offer = try SessionDescription(parsing: sdp)
        let answered = offersTaken
        await legEvent(.offerArrived(offer))
        if offersTaken == answered, state.waitingOffer != offer {
            logger.info("call \(uuid): an offer not answered (it crossed ours, which stands, or came out of turn)")
        }
    }

    /// The answer from the peer: the state decides whether it answers an offer of this side's
    /// (`early`: the callee's, before it takes the call).
    func answered(sdp: String, early: Bool = false) async throws {
        let answer = try SessionDescription(parsing: sdp)
        await legEvent(early ? .earlyAnswerArrived(answer) : .answerArrived(answer))
    }

    /// Answers the peer's first offer and starts ICE.
    func answer(first offer: SessionDescription) async throws {
        mark("offer-received")
        // An offer without ICE (a SIP phone's) is answered on a plain RTP path.
        if !offer.audioUsesICE, await ice.agent == nil {
            let peer = offer.media.first { $0.media == "audio" }.flatMap { ($0.connection ?? offer.connection)?.address }
            try await ice.usePlainRTP(address: dialect.traits.mediaAddress, toward: peer, stun: configuration.ice.stunServer)
        }
        let prepared = try await ice.prepared(role: .controlled)
        var (answer, negotiated) = try negotiation.answer(first: offer, local: prepared.local)
        answer.frameKey = try frames.answerKey(offered: offer.frameKey, peer: peer)
        if peerKind == .webPage, offer.pageFrameKeys == PageFrameKeysAttribute.accept {
            answer.pageFrameKeys = frames.pageKeysValue()
        }
        try frames.pageAccepted(offer.pageFrameKeys)
        negotiation.agree(negotiated, answer: answer)
        await legEvent(.negotiated(dtls: negotiated.dtls != nil, ice: negotiated.remoteRTP == nil))
        // The state says whom to tell before it goes, and whether it goes early
        // (``LegEvent/answerMade(sdp:)``).
        if let refused = await legEvent(.answerMade(sdp: answer.serialized)) { throw refused }
        mark("answer-sent")
        await peerOffered(offer)
        try await ice.setRemote(negotiated)
        await ice.trickle(prepared.gathering, skipping: Set(prepared.local.candidates))
    }

    /// Takes the answer to this side's offer: the callee's first (start ICE), or either side's
    /// later one (an ICE restart's, a hold's or a resume's).
    func take(_ answer: SessionDescription) async throws {
        guard let offer = negotiation.offer, await ice.agent != nil else { return }
        switch try negotiation.accept(answer: answer) {
        case let .later(negotiated, iceChanged):
            // The same media; new ICE credentials and candidates after a restart.
            await legEvent(.offerAnswered)
            await peerAnswered(answer, to: offer)
            if iceChanged { try await ice.setRemote(negotiated) }
        case let .first(negotiated):
            mark("answer-received")
            try frames.accept(answered: answer.frameKey, offered: offer.frameKey != nil, peer: peer)
            try frames.pageAccepted(answer.pageFrameKeys)
            negotiation.agree(negotiated)
            // The manager hears of the answer before ICE starts (the state's progress report).
            if let refused = await legEvent(.negotiated(dtls: negotiated.dtls != nil, ice: negotiated.remoteRTP == nil)) { throw refused }
            await peerAnswered(answer, to: offer)
            try await ice.setRemote(negotiated)
        }
    }

    /// Restarts ICE here (new credentials, a new gathering) and offers it.
    func restart() async throws {
        let gathering = try await ice.restart()
        let local = try await ice.local(direction: state.wantedDirection)
        let offer = try negotiation.laterOffer(local: local)
        logger.info("call \(uuid): ICE restart \(state.restarts + 1)")
        broadcaster.send(.iceRestarted(uuid, byPeer: false))
        await send(.offer(sdp: offer.serialized))
        // After the offer: candidates that overtook it would join the peer's old round.
        await ice.trickle(gathering, skipping: Set(local.candidates))
    }

    /// Answers the peer's new offer for the running call (the state decided this side answers
    /// it): an ICE restart when the credentials changed (restart here too, answer with the new
    /// ones), a hold or resume when its direction did (RFC 3264 §8.4), otherwise the same
    /// answer again. The media and its keys must stay as they are.
    func answer(_ offer: SessionDescription) async throws {
        var gathering: IceGathering?
        let current = try await ice.local(direction: state.wantedDirection)
        // Whether the call can take it at all is known before anything changes here.
        let restarts: Bool
        do { restarts = try negotiation.restarts(offer, local: current) } catch { throw LaterOfferRefused(detail: "\(error)") }
        if restarts {
            gathering = try await ice.restart()
        }
        let local = try await ice.local(direction: state.wantedDirection)
        let (answer, negotiated) = try negotiation.answer(later: offer, local: local, outgoing: outgoing)
        await send(.answer(sdp: answer.serialized))
        await peerOffered(offer)
        guard let gathering else { return }
        logger.info("call \(uuid): ICE restart asked by the peer")
        broadcaster.send(.iceRestarted(uuid, byPeer: true))
        try await ice.setRemote(negotiated)
        await ice.trickle(gathering, skipping: Set(local.candidates))
    }

    /// Sends an offer for the running call with the direction this side wants now (hold:
    /// `sendonly` with hold audio, `inactive` without; resume: `sendrecv`): the same ICE
    /// credentials, keys, DTLS role and payload types, so only the direction changes.
    func renegotiate() async throws {
        guard negotiated != nil else { throw NegotiationError("the call has no offer and answer to renegotiate") }
        let offer = try negotiation.laterOffer(local: try await ice.local(direction: state.wantedDirection))
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
}

/// The peer's later offer cannot be taken by the running call (another codec, other keys, no
/// audio): nothing of the call changed for it (``DialectTraits/refusesLaterOffers``).
struct LaterOfferRefused: Error, CustomStringConvertible {
    let detail: String
    var description: String { detail }
}
