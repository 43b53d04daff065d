@testable import CallCore
import Testing

/// Calls whose caller makes the first offer, with its invitation (SIP's INVITE with SDP): the
/// caller offers once its wire is up, takes the callee's answer as the callee taking the call;
/// the callee keeps the offer while it rings and answers it when the user answers. Without an
/// offer in the invitation (SIP's delayed offer) the callee offers, as on node envelopes.
@Suite struct LegCallerOfferTests {
    static let timings = LegDecisionTests.timings

    @Test func theCallerOffersRightAfterItsInvitationAndTakesTheAnswerWhileItRings() {
        var caller = LegState(outgoing: true, timings: Self.timings, firstOffer: .byCaller)
        let ready = caller.handle(.signalingReady, now: .zero)
        #expect(ready.contains(.makeOffer))
        #expect(caller.phase == .inviting && caller.firstOfferOut)
        // A second readiness (a resumed wire) offers nothing more.
        #expect(!caller.handle(.signalingReady, now: .zero).contains(.makeOffer))
        _ = caller.handle(.peerRinging, now: .zero)
        // The callee's answer is it taking the call.
        #expect(caller.handle(.answerArrived(anAnswer), now: .zero) == [.takeAnswer(anAnswer)])
        _ = caller.handle(.negotiated(dtls: false), now: .zero)
        #expect(caller.phase == .checking && !caller.firstOfferOut)
        // Once negotiated, a stray answer is not taken again.
        #expect(caller.handle(.answerArrived(anAnswer), now: .zero) == [])
    }

    /// A SIP phone that takes no SRTP refuses the encrypted first offer: the caller offers again
    /// in plain RTP, once, and only while that first offer stands unanswered.
    @Test func aFirstOfferRefusedForItsEncryptionIsMadeAgainUnencryptedOnce() {
        var caller = LegState(outgoing: true, timings: Self.timings, firstOffer: .byCaller)
        _ = LegDecisionTests.feed(&caller, [.signalingReady, .peerRinging])
        #expect(!caller.offersUnencrypted)
        #expect(caller.handle(.firstOfferRefusedEncrypted, now: .zero) == [.makeOffer])
        #expect(caller.offersUnencrypted && caller.firstOfferOut && caller.phase == .ringing)
        #expect(caller.handle(.firstOfferRefusedEncrypted, now: .zero) == [], "only once")
        #expect(caller.handle(.answerArrived(anAnswer), now: .zero) == [.takeAnswer(anAnswer)])
        _ = caller.handle(.negotiated(dtls: false), now: .zero)
        // Negotiated, or a callee, or on node envelopes: nothing to offer again.
        var late = LegState(outgoing: true, timings: Self.timings, firstOffer: .byCaller)
        _ = LegDecisionTests.feed(&late, [.signalingReady, .answerArrived(anAnswer), .negotiated(dtls: false)])
        #expect(late.handle(.firstOfferRefusedEncrypted, now: .zero) == [])
        var callee = LegState(outgoing: false, timings: Self.timings, firstOffer: .byCaller)
        _ = callee.handle(.signalingReady, now: .zero)
        #expect(callee.handle(.firstOfferRefusedEncrypted, now: .zero) == [])
        var envelope = LegState(outgoing: true, timings: Self.timings)
        _ = envelope.handle(.signalingReady, now: .zero)
        #expect(envelope.handle(.firstOfferRefusedEncrypted, now: .zero) == [])
        #expect(!envelope.offersUnencrypted)
    }

    @Test func aCallerOfferingTakesNoOfferBeforeNegotiationAndAnswersLaterOnes() {
        var caller = LegState(outgoing: true, timings: Self.timings, firstOffer: .byCaller)
        _ = LegDecisionTests.feed(&caller, [.signalingReady, .peerRinging])
        #expect(caller.handle(.offerArrived(anOffer), now: .zero) == [], "its own offer is out: no first offer from the callee")
        _ = LegDecisionTests.feed(&caller, [.answerArrived(anAnswer), .negotiated(dtls: false), .iceConnected, .mediaReady, .audioActivated])
        #expect(caller.phase.hasMedia)
        #expect(caller.handle(.offerArrived(anOffer), now: .zero) == [.answerPeerOffer(anOffer)], "a hold or restart offer later is answered")
    }

    @Test func theCalleeKeepsTheCallersOfferUntilTheUserAnswers() {
        var callee = LegState(outgoing: false, timings: Self.timings, firstOffer: .byCaller)
        _ = callee.handle(.signalingReady, now: .zero)
        #expect(callee.handle(.offerArrived(anOffer), now: .zero) == [])
        #expect(callee.offerWaiting && callee.phase == .ringing)
        #expect(callee.handle(.offerArrived(anOffer), now: .zero) == [], "a second offer while ringing changes nothing")
        #expect(callee.handle(.answering, now: .zero) == [.answerFirstOffer(anOffer)])
        #expect(!callee.offerWaiting)
        #expect(callee.phase == .ringing, "the answer's negotiation moves it on")
        _ = callee.handle(.negotiated(dtls: true), now: .zero)
        #expect(callee.phase == .checking && callee.keyedByDTLS)
        // It made no offer: no answer is taken.
        #expect(callee.handle(.answerArrived(anAnswer), now: .zero) == [])
    }

    @Test func aCalleeWithoutTheCallersOfferOffersItselfWhenItAnswers() {
        var callee = LegState(outgoing: false, timings: Self.timings, firstOffer: .byCaller)
        _ = callee.handle(.signalingReady, now: .zero)
        #expect(callee.handle(.answering, now: .zero) == [.makeOffer])
        #expect(callee.phase == .offering)
        #expect(callee.handle(.answerArrived(anAnswer), now: .zero) == [.takeAnswer(anAnswer)])
    }

    @Test func aCalleeThatDeclinesWithAnOfferWaitingRejectsOnce() {
        var callee = LegState(outgoing: false, timings: Self.timings, firstOffer: .byCaller)
        _ = LegDecisionTests.feed(&callee, [.signalingReady, .offerArrived(anOffer)])
        let actions = callee.handle(.end(.hangUp), now: .zero)
        #expect(actions.filter { if case .send = $0 { true } else { false } } == [.send(.reject(.declined))])
        #expect(callee.handle(.answering, now: .zero) == [], "over: answering does nothing")
    }

    @Test func onNodeEnvelopesTheCallerStillNeverOffersFirst() {
        var caller = LegState(outgoing: true, timings: Self.timings)
        #expect(!caller.handle(.signalingReady, now: .zero).contains(.makeOffer))
        var callee = LegState(outgoing: false, timings: Self.timings)
        _ = callee.handle(.signalingReady, now: .zero)
        _ = callee.handle(.offerArrived(anOffer), now: .zero)
        #expect(!callee.offerWaiting)
        #expect(callee.handle(.answering, now: .zero) == [.makeOffer])
    }
}
