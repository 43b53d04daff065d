@testable import CallCore
import Testing

/// Early media (SIP's 183 with SDP): the call's media runs before it is answered. The caller
/// plays what the callee sends with its microphone silent; a callee sends its greeting before
/// it answers or declines. The manager hears of the answer, and of connected media, only when
/// the call is taken; until then an end is a refusal or a cancel, never a hang-up.
@Suite struct LegEarlyMediaTests {
    static let timings = LegDecisionTests.timings

    /// A caller whose first offer is out and whose callee rings.
    static func ringingCaller() -> LegState {
        var caller = LegState(outgoing: true, timings: timings, firstOffer: .byCaller)
        _ = LegDecisionTests.feed(&caller, [.signalingReady, .peerRinging])
        return caller
    }

    /// A callee ringing with the caller's offer.
    static func ringingCallee(muted: Bool = false) -> LegState {
        var callee = LegState(outgoing: false, muted: muted, timings: timings, firstOffer: .byCaller)
        _ = LegDecisionTests.feed(&callee, [.signalingReady, .offerArrived(anOffer)])
        return callee
    }

    @Test func theCallerPlaysTheCalleesEarlyMediaWithItsMicrophoneSilentUntilTheCallIsTaken() {
        var caller = Self.ringingCaller()
        #expect(caller.handle(.earlyAnswerArrived(anAnswer), now: .zero) == [.takeAnswer(anAnswer)])
        #expect(caller.earlyMedia)
        _ = LegDecisionTests.feed(&caller, [.negotiated(dtls: false, ice: false), .mediaReady])
        // The path works and the media is keyed: the event stream hears of early media, the
        // manager nothing (the call is not answered).
        #expect(caller.handle(.iceConnected, now: .milliseconds(100)) == [.reportEarlyMedia])
        #expect(caller.phase == .awaitingAudio(iceConnectedAt: .milliseconds(100)))
        #expect(caller.handle(.audioActivated, now: .milliseconds(120)) == [.startEarlyMedia(microphoneMuted: true)])
        #expect(caller.phase == .earlyMedia(iceConnectedAt: .milliseconds(100)))
        #expect(!caller.phase.hasMedia && caller.connectedSince == nil, "not connected: nobody answered")
        // The user's mute while it plays changes nothing on the wire (nothing is sent yet).
        #expect(caller.handle(.setMuted(true), now: .milliseconds(200)) == [])
        #expect(caller.handle(.setMuted(false), now: .milliseconds(210)) == [])
        // The callee takes the call: the manager hears of the answer, then of media connected;
        // the media starts "connected" once the audio session says so (it already runs).
        #expect(caller.handle(.peerAccepted, now: .seconds(3)) == [.reportAnswered, .reportMediaConnected])
        #expect(!caller.earlyMedia)
        #expect(caller.handle(.audioActivated, now: .seconds(3)) == [.startMedia(microphoneMuted: false)])
        #expect(caller.phase == .connected(since: .seconds(3)))
        #expect(caller.handle(.peerAccepted, now: .seconds(4)) == [], "taken once")
    }

    @Test func aMuteSetDuringTheCallersEarlyMediaHoldsWhenTheCallIsTaken() {
        var caller = Self.ringingCaller()
        _ = LegDecisionTests.feed(&caller, [.earlyAnswerArrived(anAnswer), .negotiated(dtls: false, ice: false), .mediaReady, .iceConnected, .audioActivated])
        _ = caller.handle(.setMuted(true), now: .seconds(1))
        _ = caller.handle(.peerAccepted, now: .seconds(2))
        #expect(caller.handle(.audioActivated, now: .seconds(2)) == [.startMedia(microphoneMuted: true)])
    }

    @Test func aCallTakenBeforeItsEarlyMediaRanConnectsAsAnyCall() {
        var caller = Self.ringingCaller()
        _ = LegDecisionTests.feed(&caller, [.earlyAnswerArrived(anAnswer), .negotiated(dtls: false, ice: false)])
        // The 200 came while the path was still being found.
        #expect(caller.handle(.peerAccepted, now: .zero) == [.reportAnswered])
        _ = caller.handle(.mediaReady, now: .zero)
        #expect(caller.handle(.iceConnected, now: .milliseconds(50)) == [.reportMediaConnected])
        #expect(caller.handle(.audioActivated, now: .milliseconds(60)) == [.startMedia(microphoneMuted: false)])
    }

    @Test func aCallTakenWhileItsEarlyMediaWaitsForTheAudioSessionConnectsWhenItIsActive() {
        var caller = Self.ringingCaller()
        _ = LegDecisionTests.feed(&caller, [.earlyAnswerArrived(anAnswer), .negotiated(dtls: false, ice: false), .mediaReady, .iceConnected])
        #expect(caller.handle(.peerAccepted, now: .zero) == [.reportAnswered, .reportMediaConnected])
        #expect(caller.handle(.audioActivated, now: .milliseconds(60)) == [.startMedia(microphoneMuted: false)])
        #expect(caller.handle(.audioActivated, now: .milliseconds(70)) == [], "the second activation (the router told twice) changes nothing")
    }

    @Test func anEarlyAnswerOutOfTurnIsNotTaken() {
        // After the call's answer, before the offer, and on a callee: nothing.
        var answered = Self.ringingCaller()
        _ = LegDecisionTests.feed(&answered, [.answerArrived(anAnswer), .negotiated(dtls: false)])
        #expect(answered.handle(.earlyAnswerArrived(anAnswer), now: .zero) == [])
        #expect(!answered.earlyMedia)
        var callee = Self.ringingCallee()
        #expect(callee.handle(.earlyAnswerArrived(anAnswer), now: .zero) == [])
        #expect(callee.handle(.peerAccepted, now: .zero) == [])
        var plain = Self.ringingCaller()
        #expect(plain.handle(.peerAccepted, now: .zero) == [], "no early answer: nothing to take")
    }

    @Test func hangingUpDuringTheCallersEarlyMediaEndsTheUnansweredCall() {
        var caller = Self.ringingCaller()
        _ = LegDecisionTests.feed(&caller, [.earlyAnswerArrived(anAnswer), .negotiated(dtls: false, ice: false), .mediaReady, .iceConnected, .audioActivated])
        let actions = caller.handle(.end(.hangUp), now: .seconds(5))
        #expect(actions.contains(.send(.end(.hangup))) && actions.contains(.tearDown))
        #expect(caller.phase == .ended(LegEnd(reason: .localEnded, detail: nil)))
        // The manager's ring timeout says what did not happen.
        var timedOut = Self.ringingCaller()
        _ = LegDecisionTests.feed(&timedOut, [.earlyAnswerArrived(anAnswer), .negotiated(dtls: false, ice: false), .mediaReady, .iceConnected, .audioActivated])
        #expect(timedOut.unfinished == "the call was not answered in time (its early media ran)")
    }

    @Test func theCalleesGreetingGoesBeforeItAnswersWithItsMicrophoneLive() {
        var callee = Self.ringingCallee()
        #expect(callee.handle(.progressing, now: .zero) == [.answerFirstOffer(anOffer)])
        #expect(callee.earlyMedia && !callee.offerWaiting)
        _ = LegDecisionTests.feed(&callee, [.negotiated(dtls: false, ice: false), .mediaReady])
        #expect(callee.handle(.iceConnected, now: .milliseconds(40)) == [.reportEarlyMedia])
        #expect(callee.handle(.audioActivated, now: .milliseconds(50)) == [.startEarlyMedia(microphoneMuted: false)])
        // Its mute holds while the greeting plays.
        #expect(callee.handle(.setMuted(true), now: .milliseconds(60)) == [.setMicrophone(muted: true)])
        #expect(callee.handle(.setMuted(false), now: .milliseconds(70)) == [.setMicrophone(muted: false)])
        #expect(callee.handle(.progressing, now: .milliseconds(80)) == [.earlyMediaRefused("the call's early media already runs")])
        // Answering takes the call: the manager hears of the answer, the caller is told, and
        // media connects.
        #expect(callee.handle(.answering, now: .seconds(4)) == [.reportAnswered, .send(.accepted), .reportMediaConnected])
        #expect(callee.handle(.audioActivated, now: .seconds(4)) == [.startMedia(microphoneMuted: false)])
        #expect(callee.phase == .connected(since: .seconds(4)))
    }

    @Test func aCalleeStartsItsGreetingMutedWhenMuted() {
        var callee = Self.ringingCallee(muted: true)
        _ = LegDecisionTests.feed(&callee, [.progressing, .negotiated(dtls: false, ice: false), .mediaReady, .iceConnected])
        #expect(callee.handle(.audioActivated, now: .zero) == [.startEarlyMedia(microphoneMuted: true)])
    }

    @Test func aCalleeDecliningAfterItsGreetingRefusesTheCall() {
        var callee = Self.ringingCallee()
        _ = LegDecisionTests.feed(&callee, [.progressing, .negotiated(dtls: false, ice: false), .mediaReady, .iceConnected, .audioActivated])
        let actions = callee.handle(.end(.hangUp), now: .seconds(3))
        #expect(actions.contains(.send(.reject(.declined))), "\(actions)")
        #expect(callee.phase == .ended(LegEnd(reason: .declined, detail: nil)))
        // The caller giving up during the greeting leaves a missed call.
        var missed = Self.ringingCallee()
        _ = LegDecisionTests.feed(&missed, [.progressing, .negotiated(dtls: false, ice: false), .mediaReady, .iceConnected, .audioActivated])
        _ = missed.handle(.end(.peerEnded(.hangup)), now: .seconds(3))
        #expect(missed.phase == .ended(LegEnd(reason: .unanswered, detail: "missed: the caller hung up before it was answered")))
    }

    @Test func earlyMediaIsRefusedWhereThereIsNoOfferToAnswerEarly() {
        // The callee offers on node envelopes: no caller's offer to answer early.
        var envelope = LegState(outgoing: false, timings: Self.timings)
        _ = envelope.handle(.signalingReady, now: .zero)
        #expect(envelope.handle(.progressing, now: .zero)
                == [.earlyMediaRefused("early media answers the caller's offer, and this call's caller sent none with its invitation")])
        // A SIP INVITE without SDP (a delayed offer): the same.
        var delayed = LegState(outgoing: false, timings: Self.timings, firstOffer: .byCaller)
        _ = delayed.handle(.signalingReady, now: .zero)
        #expect(delayed.handle(.progressing, now: .zero).count == 1)
        #expect(!delayed.earlyMedia)
        // Answered already, or a caller: not ringing here.
        var answered = Self.ringingCallee()
        _ = LegDecisionTests.feed(&answered, [.answering, .negotiated(dtls: false, ice: false)])
        #expect(answered.handle(.progressing, now: .zero) == [.earlyMediaRefused("only a call ringing here can send early media")])
        var caller = Self.ringingCaller()
        #expect(caller.handle(.progressing, now: .zero) == [.earlyMediaRefused("only a call ringing here can send early media")])
    }

    @Test func aCalleeAnsweringBeforeItsGreetingRanConnectsAsAnyCall() {
        var callee = Self.ringingCallee()
        _ = LegDecisionTests.feed(&callee, [.progressing, .negotiated(dtls: false, ice: false)])
        #expect(callee.handle(.answering, now: .zero) == [.reportAnswered, .send(.accepted)])
        _ = callee.handle(.mediaReady, now: .zero)
        #expect(callee.handle(.iceConnected, now: .zero) == [.reportMediaConnected])
    }

    /// An early dialog carries no offer of this side's (SIP would need UPDATE; a callee's offer
    /// would go in its 200 and answer the call for the user). A restart of ICE that falls due
    /// while the media runs early — a round of checks that failed, an address gone — waits for
    /// the answer, and goes then.
    @Test func aRestartDueDuringEarlyMediaWaitsForTheAnswer() {
        // The callee greeting its caller: its round of checks fails before anyone answered.
        var callee = Self.ringingCallee()
        _ = callee.handle(.progressing, now: .zero)
        _ = LegDecisionTests.feed(&callee, [.answerMade(sdp: "v=0"), .negotiated(dtls: false, ice: true)])
        #expect(callee.phase == .checking)
        #expect(!callee.handle(.timerFired(.setupRound), now: .seconds(3)).contains(.restartICE), "the round runs on")
        #expect(!callee.handle(.iceFailed, now: .seconds(4)).contains(.restartICE), "no offer in the early dialog")
        #expect(!callee.restartPending && callee.restartWhenAnswered)
        #expect(callee.handle(.restartRequested, now: .seconds(5))
            == [.restartRefused("the call is not answered yet: its early media carries no new offer")])
        // The user answers: the 200 goes, then the restart.
        #expect(callee.handle(.answering, now: .seconds(6)) == [.reportAnswered, .send(.accepted), .restartICE])
        #expect(callee.restartPending && !callee.restartWhenAnswered)

        // The caller hearing early media: an address its path used goes.
        var caller = Self.ringingCaller()
        _ = LegDecisionTests.feed(&caller, [.earlyAnswerArrived(anAnswer), .negotiated(dtls: false, ice: true), .mediaReady, .iceConnected,
                                            .audioActivated])
        #expect(caller.phase == .earlyMedia(iceConnectedAt: .zero))
        #expect(!caller.handle(.hostAddressesChanged(signalingAddressGone: false, pathAffected: true), now: .seconds(1)).contains(.restartICE))
        #expect(caller.handle(.peerAccepted, now: .seconds(2)) == [.reportAnswered, .restartICE, .reportMediaConnected])
        #expect(caller.restartPending)
    }

    /// The media reports a stall once. One that came while the media ran early used to be
    /// dropped, and the call, once answered, was "connected" on a dead path for good: no
    /// reconnecting, no restart, no end. Now it reconnects as soon as it connects; media that
    /// came back before the answer leaves nothing to recover.
    @Test func aPathLostDuringEarlyMediaIsRecoveredOnceTheCallConnects() {
        var caller = Self.ringingCaller()
        _ = LegDecisionTests.feed(&caller, [.earlyAnswerArrived(anAnswer), .negotiated(dtls: false, ice: true), .mediaReady, .iceConnected,
                                            .audioActivated])
        #expect(caller.handle(.mediaStalled, now: .seconds(1)) == [])
        #expect(caller.lostBeforeConnected == [.media])
        _ = caller.handle(.peerAccepted, now: .seconds(2))
        let connecting = caller.handle(.audioActivated, now: .seconds(2))
        #expect(connecting.first == .startMedia(microphoneMuted: false))
        #expect(connecting.contains(.arm(.connectionLost, after: Self.timings.connectionLostTimeout)))
        #expect(connecting.contains(.reportConnectionLost))
        guard case let .reconnecting(lost) = caller.phase else {
            Issue.record("not reconnecting: \(caller.phase)")
            return
        }
        #expect(lost.signals == [.media] && lost.connectedSince == .seconds(2))
        #expect(caller.lostBeforeConnected.isEmpty)
        // The media comes back: restored as any call's.
        #expect(caller.handle(.mediaResumed, now: .seconds(3)).contains(.reportConnectionRestored))

        var resumed = Self.ringingCaller()
        _ = LegDecisionTests.feed(&resumed, [.earlyAnswerArrived(anAnswer), .negotiated(dtls: false, ice: true), .mediaReady, .iceConnected,
                                             .audioActivated, .mediaStalled, .mediaResumed, .peerAccepted])
        #expect(resumed.handle(.audioActivated, now: .seconds(2)) == [.startMedia(microphoneMuted: false)])
        #expect(resumed.phase == .connected(since: .seconds(2)))
    }
}
