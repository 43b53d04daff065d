import CallCore
import Testing

/// What the call manager hears of a call's setup, and when: before what it tells of leaves or
/// starts. The manager's next input for the call is the peer's reply (its answer, its
/// candidates) or media connecting, and it ends a call whose phase cannot take that input. The
/// ownership study's race was this order: a callee's offer went out before the manager heard
/// of it, the caller answered at once, and the manager, still at `accepted`, ended the call.
@Suite struct LegProgressTests {
    /// The progress reports among `actions`, with where each send falls, in order.
    static func told(_ actions: [LegAction]) -> [String] {
        actions.compactMap { action in
            switch action {
            case let .reportProgress(progress): "progress \(progress.rawValue)"
            case let .send(signal): "send \(String(describing: signal).prefix { $0 != "(" })"
            default: nil
            }
        }
    }

    /// Node envelopes: the callee offers once it answers; the manager hears of the offer before
    /// it goes, and of the caller's answer before ICE starts on it.
    @Test func aCalleesOfferIsToldBeforeItGoesAndItsAnswerBeforeICE() {
        var callee = LegState(outgoing: false)
        #expect(LegDecisionTests.feed(&callee, [.signalingReady, .answering]).contains(.makeOffer))
        #expect(Self.told(callee.handle(.offerMade(sdp: "v=0"), now: .zero)) == ["progress offerSent", "send offer"])
        #expect(callee.handle(.answerArrived(anAnswer), now: .zero) == [.takeAnswer(anAnswer)])
        let negotiated = callee.handle(.negotiated(dtls: false), now: .zero)
        #expect(negotiated.first == .reportProgress(.answerReceived), "before the media is built and ICE runs: \(negotiated)")
    }

    /// The caller answers the callee's offer: the manager hears it received the offer and sent
    /// the answer before the answer goes (ICE and DTLS finish, and media connects, only after
    /// the callee has it).
    @Test func aCallersAnswerIsToldBeforeItGoes() {
        var caller = LegState(outgoing: true)
        _ = LegDecisionTests.feed(&caller, [.signalingReady, .peerRinging])
        #expect(caller.handle(.offerArrived(anOffer), now: .zero) == [.answerFirstOffer(anOffer)])
        #expect(!caller.handle(.negotiated(dtls: false), now: .zero).contains(.reportProgress(.answerReceived)), "this side answered")
        #expect(Self.told(caller.handle(.answerMade(sdp: "v=0"), now: .zero)) == ["progress offerReceived", "progress answerSent", "send answer"])
    }

    /// SIP: the caller's offer goes with its invitation (the manager knows of that); the
    /// callee's answer is the manager's `answerReceived`, before ICE.
    @Test func theCallersOwnOfferIsNotToldAgainAndItsAnswerIs() {
        var caller = LegState(outgoing: true, firstOffer: .byCaller)
        #expect(caller.handle(.signalingReady, now: .zero).contains(.makeOffer))
        #expect(Self.told(caller.handle(.offerMade(sdp: "v=0"), now: .zero)) == ["send offer"])
        #expect(caller.handle(.answerArrived(anAnswer), now: .zero) == [.takeAnswer(anAnswer)])
        #expect(caller.handle(.negotiated(dtls: false), now: .zero).first == .reportProgress(.answerReceived))
    }

    /// SIP: the caller's offer waits in the state until the user answers; the answer takes the
    /// call, and the manager hears so before it goes.
    @Test func theCallersWaitingOfferIsAnsweredWhenTheUserAnswers() {
        var callee = LegState(outgoing: false, firstOffer: .byCaller)
        _ = callee.handle(.signalingReady, now: .zero)
        #expect(callee.handle(.offerArrived(anOffer), now: .zero) == [])
        #expect(callee.waitingOffer == anOffer)
        #expect(callee.handle(.offerArrived(anAnswer), now: .zero) == [], "a second offer while ringing changes nothing")
        #expect(callee.handle(.answering, now: .zero) == [.answerFirstOffer(anOffer)])
        #expect(callee.waitingOffer == nil)
        #expect(Self.told(callee.handle(.answerMade(sdp: "v=0"), now: .zero)) == ["progress answerSent", "send answer"])
    }

    /// Early media: the answers go and come early, and the manager hears of neither until the
    /// call is taken (``LegAction/reportAnswered``).
    @Test func earlyAnswersAreNotToldUntilTheCallIsTaken() {
        var callee = LegState(outgoing: false, firstOffer: .byCaller)
        _ = LegDecisionTests.feed(&callee, [.signalingReady, .offerArrived(anOffer)])
        #expect(callee.handle(.progressing, now: .zero) == [.answerFirstOffer(anOffer)])
        #expect(callee.handle(.answerMade(sdp: "v=0"), now: .zero) == [.send(.earlyAnswer(sdp: "v=0"))])

        var caller = LegState(outgoing: true, firstOffer: .byCaller)
        _ = LegDecisionTests.feed(&caller, [.signalingReady, .offerMade(sdp: "v=0")])
        #expect(caller.handle(.earlyAnswerArrived(anAnswer), now: .zero) == [.takeAnswer(anAnswer)])
        #expect(!caller.handle(.negotiated(dtls: false), now: .zero).contains(.reportProgress(.answerReceived)))
        #expect(caller.handle(.peerAccepted, now: .zero).first == .reportAnswered)
    }
}

/// DTMF goes through the state like mute and hold: sent while the call's audio flows from this
/// side, refused with a reason otherwise (it used to be "sent" with no media at all).
@Suite struct LegDTMFTests {
    @Test func digitsGoOnlyWhileAudioFlowsFromThisSide() {
        var ringing = LegState(outgoing: false)
        #expect(ringing.handle(.request(.dtmf("12"), id: 1), now: .zero) == [.fail(1, reason: "the call has no media yet")])

        var call = LegDecisionTests.connected(outgoing: true)
        #expect(call.handle(.request(.dtmf("12#"), id: 2), now: .seconds(2)) == [.sendDTMF("12#"), .settle(2)])
        #expect(call.handle(.settled(id: 2, failure: nil), now: .seconds(2)) == [.fulfil(2)])
        #expect(call.handle(.request(.dtmf("3"), id: 3), now: .seconds(2)) == [.sendDTMF("3"), .settle(3)])
        #expect(call.handle(.settled(id: 3, failure: "the encoder is gone"), now: .seconds(2)) == [.fail(3, reason: "the encoder is gone")],
                "a failure undoes nothing: mute and hold stay as they were")
        #expect(!call.microphoneMuted && !call.held)

        _ = call.handle(.setHeld(true), now: .seconds(3))
        #expect(call.handle(.request(.dtmf("4"), id: 4), now: .seconds(3)) == [.fail(4, reason: "the call is on hold here: resume it to send digits")])
        _ = call.handle(.setHeld(false), now: .seconds(4))
        _ = call.handle(.peerDirection(receives: false, sends: true), now: .seconds(4))
        #expect(call.handle(.request(.dtmf("5"), id: 5), now: .seconds(4)) == [.fail(5, reason: "the other side holds the call: digits would not be heard")])
    }
}

/// Who controls ICE is the state's answer, from who offers first.
@Suite struct LegICERoleTests {
    @Test func theSideThatOffersFirstControlsICE() {
        #expect(!LegState(outgoing: true).controlsICE, "node envelopes: the callee offers")
        #expect(LegState(outgoing: false).controlsICE)
        #expect(LegState(outgoing: true, firstOffer: .byCaller).controlsICE, "SIP: the caller's INVITE offers")
        #expect(!LegState(outgoing: false, firstOffer: .byCaller).controlsICE)
    }
}
