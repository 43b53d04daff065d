@testable import CallCore
import Testing

/// The decisions a leg's state makes that the leg used to make around it: who offers, which of
/// two crossing offers stands, when media is built, how a lost signaling connection is retried,
/// and how a request that fails is rolled back. Events in, actions out, no concurrency.
@Suite struct LegDecisionTests {
    static let timings = LegTimings(keepAliveInterval: .seconds(15), connectionLostTimeout: .seconds(30),
                                    iceRestartInterval: .seconds(5), resumeWindow: .seconds(30))

    static func feed(_ state: inout LegState, _ events: [LegEvent], at now: Duration = .zero) -> [LegAction] {
        events.flatMap { state.handle($0, now: now) }
    }

    static func connected(outgoing: Bool, dtls: Bool = false, sendsHoldAudio: Bool = false) -> LegState {
        var state = LegState(outgoing: outgoing, timings: timings, sendsHoldAudio: sendsHoldAudio)
        let start: [LegEvent] = outgoing ? [.signalingReady, .peerRinging] : [.signalingReady, .answering]
        _ = feed(&state, start + [.negotiated(dtls: dtls), .iceConnected, .mediaReady, .audioActivated], at: .seconds(1))
        return state
    }

    // MARK: - Who offers

    @Test func theCalleeMakesTheFirstOfferWhenItAnswers() {
        var callee = LegState(outgoing: false, timings: Self.timings)
        _ = callee.handle(.signalingReady, now: .zero)
        #expect(callee.handle(.answering, now: .zero) == [.makeOffer])
        #expect(callee.phase == .offering)
        // A second answer (the manager's retry) offers nothing more.
        #expect(callee.handle(.answering, now: .zero) == [])
    }

    @Test func theCallerNeverMakesTheFirstOffer() {
        var caller = LegState(outgoing: true, timings: Self.timings)
        _ = Self.feed(&caller, [.signalingReady, .peerRinging])
        #expect(caller.handle(.answering, now: .zero) == [])
        #expect(caller.phase == .ringing)
    }

    @Test func onlyTheCallerAnswersAFirstOfferAndOnlyBeforeNegotiation() {
        var caller = LegState(outgoing: true, timings: Self.timings)
        _ = Self.feed(&caller, [.signalingReady, .peerRinging])
        #expect(caller.handle(.offerArrived(anOffer), now: .zero) == [.answerFirstOffer(anOffer)])
        var callee = LegState(outgoing: false, timings: Self.timings)
        _ = Self.feed(&callee, [.signalingReady])
        #expect(callee.handle(.offerArrived(anOffer), now: .zero) == [], "a callee that has not answered takes no offer")
        _ = callee.handle(.answering, now: .zero)
        #expect(callee.handle(.offerArrived(anOffer), now: .zero) == [], "nor once it made its own")
        // Once negotiated, an offer is a later one: crossing offers decide.
        var running = Self.connected(outgoing: true)
        #expect(running.handle(.offerArrived(anOffer), now: .zero) == [.answerPeerOffer(anOffer)])
        _ = running.handle(.setHeld(true), now: .zero)
        #expect(running.handle(.offerArrived(anOffer), now: .zero) == [.answerPeerOffer(anOffer)], "the callee's stands")
        var runningCallee = Self.connected(outgoing: false)
        _ = runningCallee.handle(.setHeld(true), now: .zero)
        #expect(runningCallee.handle(.offerArrived(anOffer), now: .zero) == [], "ours stands")
    }

    @Test func anAnswerIsTakenOnlyWhenAnOfferOfOursIsOut() {
        var callee = LegState(outgoing: false, timings: Self.timings)
        _ = callee.handle(.signalingReady, now: .zero)
        #expect(callee.handle(.answerArrived(anAnswer), now: .zero) == [], "nothing offered yet")
        _ = callee.handle(.answering, now: .zero)
        #expect(callee.handle(.answerArrived(anAnswer), now: .zero) == [.takeAnswer(anAnswer)])
        var caller = LegState(outgoing: true, timings: Self.timings)
        _ = Self.feed(&caller, [.signalingReady, .peerRinging])
        #expect(caller.handle(.answerArrived(anAnswer), now: .zero) == [], "the caller never offers first")
        var running = Self.connected(outgoing: true)
        #expect(running.handle(.answerArrived(anAnswer), now: .zero) == [], "no offer of ours is out")
        _ = running.handle(.restartRequested, now: .zero)
        #expect(running.handle(.answerArrived(anAnswer), now: .zero) == [.takeAnswer(anAnswer)])
        _ = running.handle(.end(.hangUp), now: .zero)
        #expect(running.handle(.answerArrived(anAnswer), now: .zero) == [])
    }

    // MARK: - When media is built

    @Test func sdesMediaIsBuiltWhileICEChecksAndConnectsWithICE() {
        var state = LegState(outgoing: true, timings: Self.timings)
        _ = Self.feed(&state, [.signalingReady, .peerRinging])
        #expect(state.handle(.negotiated(dtls: false), now: .zero) == [.prepareMedia, .arm(.setupRound, after: .milliseconds(2500))])
        // Built before ICE connected: nothing is reported until ICE is.
        #expect(state.handle(.mediaReady, now: .milliseconds(50)) == [])
        #expect(state.mediaBuilt)
        #expect(state.phase == .checking)
        #expect(state.handle(.iceConnected, now: .milliseconds(80)) == [.cancel(.setupRound), .tellPeerPath, .reportMediaConnected])
        #expect(state.phase == .awaitingAudio(iceConnectedAt: .milliseconds(80)))
    }

    @Test func dtlsMediaIsBuiltOnlyOnceICEConnected() {
        var state = LegState(outgoing: false, timings: Self.timings)
        _ = Self.feed(&state, [.signalingReady, .answering])
        #expect(state.handle(.negotiated(dtls: true), now: .zero) == [.reportProgress(.answerReceived), .arm(.setupRound, after: .milliseconds(2500))])
        #expect(state.keyedByDTLS)
        #expect(state.handle(.iceConnected, now: .milliseconds(40)) == [.cancel(.setupRound), .tellPeerPath, .prepareMedia])
        #expect(state.phase == .securing(iceConnectedAt: .milliseconds(40)))
        #expect(state.handle(.mediaReady, now: .milliseconds(90)) == [.reportMediaConnected])
        #expect(state.handle(.audioActivated, now: .milliseconds(95)) == [.startMedia(microphoneMuted: false)])
    }

    @Test func mediaConnectsOnceEvenWhenICEConnectsAgain() {
        var state = LegState(outgoing: true, timings: Self.timings)
        _ = Self.feed(&state, [.signalingReady, .peerRinging, .negotiated(dtls: false), .mediaReady])
        #expect(state.handle(.iceConnected, now: .zero) == [.cancel(.setupRound), .tellPeerPath, .reportMediaConnected])
        #expect(state.handle(.iceConnected, now: .zero) == [])
        #expect(state.handle(.mediaReady, now: .zero) == [])
    }

    @Test func aRenegotiationNeverPreparesMediaAgain() {
        var state = Self.connected(outgoing: true)
        #expect(state.handle(.negotiated(dtls: false), now: .seconds(5)) == [])
        #expect(state.handle(.negotiated(dtls: true), now: .seconds(5)) == [])
        #expect(!state.keyedByDTLS)
    }

    /// A round of checks that fails before any pair worked starts a fresh one (an ICE
    /// restart), up to the configured number; the last failure ends the call saying so.
    @Test(arguments: [true, false])
    func iceThatFailsBeforeAnyPairWorkedTriesFreshRoundsThenEndsTheCallSayingSo(outgoing: Bool) {
        var state = LegState(outgoing: outgoing, timings: Self.timings)
        _ = Self.feed(&state, outgoing ? [.signalingReady, .peerRinging, .negotiated(dtls: true)]
                                       : [.signalingReady, .answering, .negotiated(dtls: true)])
        for round in 1...Self.timings.setupIceRestarts {
            let actions = state.handle(.iceFailed, now: .seconds(7 * round))
            #expect(actions.first == .restartICE, "round \(round): \(actions)")
            #expect(state.phase == .checking && state.offerPending)
            // While the restart's offer waits for its answer, a late failure of the old round
            // changes nothing; the answer starts the next round.
            #expect(state.handle(.iceFailed, now: .seconds(7 * round)) == [])
            _ = Self.feed(&state, [.restartOffered, .offerAnswered])
        }
        let actions = state.handle(.iceFailed, now: .seconds(28))
        #expect(actions.contains(.send(.end(.failed))))
        #expect(actions.contains(.reportEnded(.failed)))
        guard case let .ended(end) = state.phase else {
            Issue.record("not ended: \(state.phase)")
            return
        }
        #expect(end.detail == "ICE failed: no candidate pair worked in 6 rounds of checks")
    }

    /// A round of checks that has found no pair after four seconds gives way to a fresh one
    /// (libnice's retries of a check come further apart each time; through heavy loss a fresh
    /// round gets through sooner), as many times as fresh rounds are allowed; a restart's offer
    /// still unanswered holds the next one back; a pair that works stops them.
    @Test func aRoundWithoutAPairGivesWayToAFreshOne() {
        var state = LegState(outgoing: true, timings: Self.timings)
        _ = Self.feed(&state, [.signalingReady, .peerRinging])
        #expect(state.handle(.negotiated(dtls: true), now: .zero) == [.arm(.setupRound, after: .milliseconds(2500))])
        #expect(state.handle(.timerFired(.setupRound), now: .seconds(4)) == [.restartICE, .arm(.setupRound, after: .milliseconds(2500))])
        // The restart's answer has not come: the signaling is slow, not the round.
        _ = state.handle(.restartOffered, now: .seconds(4))
        #expect(state.handle(.timerFired(.setupRound), now: .seconds(8)) == [.arm(.setupRound, after: .milliseconds(2500))])
        _ = state.handle(.offerAnswered, now: .seconds(9))
        for round in 2...Self.timings.setupIceRestarts {
            #expect(state.handle(.timerFired(.setupRound), now: .seconds(8 + 4 * round)).first == .restartICE, "round \(round)")
            _ = Self.feed(&state, [.restartOffered, .offerAnswered], at: .seconds(8 + 4 * round))
        }
        #expect(state.setupRestarts == Self.timings.setupIceRestarts)
        // No fresh round left: the last one runs on until it fails (or connects).
        #expect(!state.armed.contains(.setupRound))
        #expect(state.handle(.iceConnected, now: .seconds(30)) == [.tellPeerPath, .prepareMedia])
    }

    /// The peer's restart during the checks is a fresh round here too: its timer starts over.
    @Test func thePeersRestartDuringTheChecksStartsTheRoundsTimerOver() {
        var state = LegState(outgoing: false, timings: Self.timings)
        _ = Self.feed(&state, [.signalingReady, .answering])
        #expect(state.handle(.negotiated(dtls: true), now: .zero) == [.reportProgress(.answerReceived), .arm(.setupRound, after: .milliseconds(2500))])
        #expect(state.handle(.offerArrived(anOffer), now: .seconds(3)) == [.answerPeerOffer(anOffer), .cancel(.setupRound), .arm(.setupRound, after: .milliseconds(2500))])
        #expect(state.handle(.iceConnected, now: .seconds(5)) == [.cancel(.setupRound), .tellPeerPath, .prepareMedia])
    }

    /// ICE connected here and the keys are being agreed when the peer, whose own checks found
    /// nothing, restarts: this side's new round gets the same four seconds, then a fresh one
    /// of its own; a round that fails outright starts one too. (Before, a path lost between
    /// ICE and the keys waited for the keys' timeout.)
    @Test func aPathRedoneWhileTheKeysAreAgreedGetsFreshRoundsToo() {
        var state = LegState(outgoing: true, timings: Self.timings)
        _ = Self.feed(&state, [.signalingReady, .peerRinging, .negotiated(dtls: true)])
        #expect(state.handle(.iceConnected, now: .seconds(1)) == [.cancel(.setupRound), .tellPeerPath, .prepareMedia])
        // The peer's restart: answered, and this side's round timed.
        #expect(state.handle(.offerArrived(anOffer), now: .seconds(4)) == [.answerPeerOffer(anOffer), .arm(.setupRound, after: .milliseconds(2500))])
        #expect(state.handle(.timerFired(.setupRound), now: .seconds(8)) == [.restartICE, .arm(.setupRound, after: .milliseconds(2500))])
        _ = Self.feed(&state, [.restartOffered, .offerAnswered], at: .seconds(8))
        // That round fails outright: another.
        #expect(state.handle(.iceFailed, now: .seconds(10)).first == .restartICE)
        _ = Self.feed(&state, [.restartOffered, .offerAnswered], at: .seconds(10))
        // A pair again: the timer goes, the keys go on being agreed.
        #expect(state.handle(.iceConnected, now: .seconds(11)) == [.cancel(.setupRound), .tellPeerPath])
        #expect(state.handle(.mediaReady, now: .seconds(12)) == [.reportMediaConnected])
        #expect(state.setupRestarts == 2)
    }

    @Test func withoutICERestartsTheFirstFailedRoundEndsTheCall() {
        var timings = Self.timings
        timings.iceRestartInterval = nil
        var state = LegState(outgoing: true, timings: timings)
        _ = Self.feed(&state, [.signalingReady, .peerRinging, .negotiated(dtls: true)])
        let actions = state.handle(.iceFailed, now: .seconds(7))
        #expect(actions.contains(.reportEnded(.failed)))
        guard case let .ended(end) = state.phase else {
            Issue.record("not ended: \(state.phase)")
            return
        }
        #expect(end.detail == "ICE failed: no candidate pair worked")
    }

    /// A round that fails when the other side's check already got through (its ICE connected,
    /// the restart's offer reaches it) goes on from the restart: the call connects.
    @Test func aFreshRoundThatConnectsGoesOnToSecureTheMedia() {
        var state = LegState(outgoing: true, timings: Self.timings)
        _ = Self.feed(&state, [.signalingReady, .peerRinging, .negotiated(dtls: true)])
        #expect(state.handle(.iceFailed, now: .seconds(3)) == [.restartICE, .cancel(.setupRound), .arm(.setupRound, after: .milliseconds(2500))])
        _ = Self.feed(&state, [.restartOffered, .offerAnswered])
        #expect(state.handle(.iceConnected, now: .seconds(5)) == [.cancel(.setupRound), .tellPeerPath, .prepareMedia])
        #expect(state.handle(.mediaReady, now: .seconds(10)) == [.reportMediaConnected])
        #expect(state.setupRestarts == 1 && state.restarts == 1)
    }

    @Test func iceThatFailsAfterItWorkedIsALossToRecoverFrom() {
        var state = Self.connected(outgoing: false)
        let actions = state.handle(.iceFailed, now: .seconds(10))
        #expect(actions.contains(.reportConnectionLost))
        #expect(actions.contains(.arm(.iceRestart, after: .seconds(5))))
        #expect(state.phase.hasMedia)
    }

    @Test func iceFailingBeforeNegotiationIsNotTheStatesToEnd() {
        var state = LegState(outgoing: false, timings: Self.timings)
        _ = state.handle(.signalingReady, now: .zero)
        #expect(state.handle(.iceFailed, now: .zero) == [])
        #expect(state.phase == .ringing)
    }

    // MARK: - Crossing offers (glare)

    @Test func aPeerOfferWithNothingOfOursOutIsAnswered() {
        var caller = Self.connected(outgoing: true), callee = Self.connected(outgoing: false)
        #expect(caller.handle(.peerReoffered(anOffer), now: .zero) == [.answerPeerOffer(anOffer)])
        #expect(callee.handle(.peerReoffered(anOffer), now: .zero) == [.answerPeerOffer(anOffer)])
    }

    @Test func whenHoldOffersCrossTheCalleesStandsAndTheCallerAnswersIt() {
        var caller = Self.connected(outgoing: true), callee = Self.connected(outgoing: false)
        // Both hold at the same moment: both offer.
        #expect(caller.handle(.setHeld(true), now: .zero).contains(.renegotiate))
        #expect(callee.handle(.setHeld(true), now: .zero).contains(.renegotiate))
        // Each gets the other's offer while its own is out.
        #expect(callee.handle(.peerReoffered(anOffer), now: .zero) == [], "the callee keeps its own offer")
        #expect(callee.renegotiationPending)
        #expect(caller.handle(.peerReoffered(anOffer), now: .zero) == [.answerPeerOffer(anOffer)], "the caller answers the callee's")
        #expect(!caller.offerPending)
        // The caller's answer said its own hold: nothing more to offer.
        #expect(caller.handle(.offerAnswered, now: .zero) == [])
        #expect(callee.handle(.offerAnswered, now: .zero) == [])
        #expect(caller.held && callee.held)
    }

    @Test func aRestartCrossingAHoldIsSettledTheSameWay() {
        var caller = Self.connected(outgoing: true), callee = Self.connected(outgoing: false)
        _ = caller.handle(.mediaStalled, now: .seconds(2))
        #expect(caller.handle(.timerFired(.iceRestart), now: .seconds(9.5)).first == .restartICE)
        #expect(caller.restartPending)
        _ = callee.handle(.setHeld(true), now: .seconds(9.5))
        #expect(callee.handle(.peerReoffered(anOffer), now: .seconds(9.6)) == [])
        #expect(caller.handle(.peerReoffered(anOffer), now: .seconds(9.6)) == [.answerPeerOffer(anOffer)])
        #expect(!caller.restartPending)
        // The caller's next interval restarts again (its own restart was never answered).
        #expect(caller.handle(.timerFired(.iceRestart), now: .seconds(14.5)).first == .restartICE)
    }

    @Test func aHoldChangedBeforeTheCallersOfferWasOvertakenIsSaidInItsAnswer() {
        var caller = Self.connected(outgoing: true)
        _ = caller.handle(.setHeld(true), now: .zero)  // the hold's offer is out
        _ = caller.handle(.setHeld(false), now: .zero)  // changed again: offered after the answer
        #expect(caller.renegotiateAgain)
        #expect(caller.handle(.peerReoffered(anOffer), now: .zero) == [.answerPeerOffer(anOffer)])
        // Its answer to the callee's offer says `sendrecv`, what it wants now: nothing is left
        // to offer, and no answer to its own abandoned offer is waited for.
        #expect(!caller.renegotiateAgain && !caller.offerPending)
        #expect(caller.wantedDirection == .sendrecv)
        #expect(caller.handle(.offerAnswered, now: .zero) == [])
    }

    // MARK: - Restarts asked for by the embedder

    @Test func anEmbeddersRestartIsRefusedBeforeNegotiationAndWhileAnOfferIsOut() {
        var ringing = LegState(outgoing: false, timings: Self.timings)
        _ = ringing.handle(.signalingReady, now: .zero)
        #expect(ringing.handle(.restartRequested, now: .zero) == [.restartRefused("the call has no offer to restart")])
        var state = Self.connected(outgoing: true)
        #expect(state.handle(.restartRequested, now: .zero) == [.restartICE])
        #expect(state.restartPending)
        #expect(state.handle(.restartRequested, now: .zero) == [.restartRefused("an offer is already waiting for the peer's answer")])
        _ = state.handle(.restartSettled, now: .zero)
        #expect(state.handle(.restartRequested, now: .zero) == [.restartICE])
    }

    /// A plain RTP path (a SIP peer without ICE) has nothing to restart: a loss waits for the
    /// media to come back or the loss timer, a host change restarts nothing, and the embedder's
    /// restart is refused with the reason.
    @Test func aCallWithoutICENeverRestartsIt() {
        var state = LegState(outgoing: true, timings: Self.timings)
        _ = Self.feed(&state, [.signalingReady, .peerRinging, .negotiated(dtls: false, ice: false), .iceConnected, .mediaReady,
                               .audioActivated], at: .seconds(1))
        #expect(!state.pathUsesICE)
        let lost = state.handle(.mediaStalled, now: .seconds(2))
        #expect(lost.contains(.arm(.connectionLost, after: .seconds(30))))
        #expect(!lost.contains { if case .arm(.iceRestart, _) = $0 { true } else { false } }, "\(lost)")
        _ = state.handle(.hostAddressesChanged(signalingAddressGone: false, pathAffected: true), now: .seconds(3))
        #expect(!state.handle(.restartSettled, now: .seconds(3)).contains(.restartICE))
        #expect(state.handle(.restartRequested, now: .seconds(4))
                == [.restartRefused("the call goes without ICE (plain RTP): there is nothing to restart")])
    }

    @Test func aRestartDecidedIsPendingAtOnceSoNoHoldOfferCrossesIt() {
        var state = Self.connected(outgoing: false)
        _ = state.handle(.mediaStalled, now: .seconds(2))
        #expect(state.handle(.timerFired(.iceRestart), now: .seconds(7)).first == .restartICE)
        // Before the leg has even sent the restart's offer, a hold waits for its answer.
        #expect(!state.handle(.setHeld(true), now: .seconds(7)).contains(.renegotiate))
        #expect(state.handle(.offerAnswered, now: .seconds(8)) == [.renegotiate])
    }

    @Test func aRestartOfferCountsOnceSent() {
        var state = Self.connected(outgoing: true)
        _ = state.handle(.restartRequested, now: .zero)
        #expect(state.restarts == 0)
        _ = state.handle(.restartOffered, now: .zero)
        #expect(state.restarts == 1)
    }

    // MARK: - Requests and their rollback

    @Test func aMuteRequestIsFulfilledOnceItsActionsWorked() {
        var state = Self.connected(outgoing: true)
        #expect(state.handle(.request(.mute(true), id: 7), now: .zero) == [.setMicrophone(muted: true), .settle(7)])
        #expect(state.muted)
        #expect(state.handle(.settled(id: 7, failure: nil), now: .zero) == [.fulfil(7)])
        #expect(state.requests.isEmpty)
    }

    @Test func aMuteWhoseMicrophoneWouldNotChangeIsRolledBackAndFailed() {
        var state = Self.connected(outgoing: true)
        _ = state.handle(.request(.mute(true), id: 1), now: .zero)
        #expect(state.handle(.settled(id: 1, failure: "the device would not reopen"), now: .zero)
                == [.setMicrophone(muted: false), .fail(1, reason: "the device would not reopen")])
        #expect(!state.muted)
    }

    @Test func anUnmuteThatFailsLeavesTheCallMuted() {
        var state = Self.connected(outgoing: true)
        _ = state.handle(.setMuted(true), now: .zero)
        _ = state.handle(.request(.mute(false), id: 2), now: .zero)
        #expect(!state.muted)
        #expect(state.handle(.settled(id: 2, failure: "no"), now: .zero) == [.setMicrophone(muted: true), .fail(2, reason: "no")])
        #expect(state.muted && state.microphoneMuted)
    }

    @Test func aRepeatedMuteThatFailsRollsBackToWhatItWas() {
        var state = Self.connected(outgoing: true)
        _ = state.handle(.setMuted(true), now: .zero)
        _ = state.handle(.request(.mute(true), id: 3), now: .zero)
        _ = state.handle(.settled(id: 3, failure: "no"), now: .zero)
        #expect(state.muted, "a mute that was already on stays on")
    }

    @Test func aHoldThatFailsIsUndoneHereAndOfferedBackToThePeer() {
        var state = Self.connected(outgoing: false)
        #expect(state.handle(.request(.hold(true), id: 4), now: .zero)
                == [.setMicrophone(muted: true), .setFlow(MediaFlow(sending: false, receiving: false, heldHere: true)), .renegotiate, .settle(4)])
        // The hold's offer is out; undoing it here offers `sendrecv` once it is answered.
        let undo = state.handle(.settled(id: 4, failure: "hold audio missing"), now: .zero)
        #expect(undo == [.setMicrophone(muted: false), .setFlow(.both), .fail(4, reason: "hold audio missing")])
        #expect(!state.held)
        #expect(state.handle(.offerAnswered, now: .zero) == [.renegotiate])
        #expect(state.wantedDirection == .sendrecv)
    }

    @Test func aRequestBeforeMediaIsFulfilledAtOnceAndHoldsFromTheFirstFrame() {
        var state = LegState(outgoing: false, timings: Self.timings)
        _ = state.handle(.signalingReady, now: .zero)
        #expect(state.handle(.request(.mute(true), id: 5), now: .zero) == [.settle(5)])
        #expect(state.handle(.settled(id: 5, failure: nil), now: .zero) == [.fulfil(5)])
        _ = Self.feed(&state, [.answering, .negotiated(dtls: false), .iceConnected, .mediaReady])
        #expect(state.handle(.audioActivated, now: .zero) == [.startMedia(microphoneMuted: true)])
    }

    @Test func aSettleForAnUnknownRequestDoesNothing() {
        var state = Self.connected(outgoing: true)
        #expect(state.handle(.settled(id: 99, failure: "x"), now: .zero) == [])
        #expect(state.handle(.settled(id: 99, failure: nil), now: .zero) == [])
    }

    @Test func requestsAfterTheEndDoNothing() {
        var state = Self.connected(outgoing: true)
        _ = state.handle(.end(.hangUp), now: .zero)
        #expect(state.handle(.request(.mute(true), id: 1), now: .zero) == [])
        #expect(state.handle(.request(.hold(true), id: 2), now: .zero) == [])
    }

    // MARK: - Reconnecting the signaling

    @Test func reconnectTriesBackOffFromAQuarterSecondToTwoSeconds() {
        var caller = Self.connected(outgoing: true)
        #expect(caller.handle(.signalingLost("reset", resumable: true), now: .seconds(5)).last == .reconnectSignaling)
        var delays: [Duration] = []
        var now = Duration.seconds(5)
        for _ in 0..<6 {
            let actions = caller.handle(.reconnectFailed, now: now)
            guard case let .arm(.reconnect, delay) = actions.first else {
                Issue.record("no retry armed: \(actions)")
                return
            }
            delays.append(delay)
            now += delay
            #expect(caller.handle(.timerFired(.reconnect), now: now) == [.reconnectSignaling])
        }
        #expect(delays == [.milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2), .seconds(2), .seconds(2)])
        #expect(caller.reconnectAttempts == 7)
    }

    @Test func aResumedCallStopsTryingAndALaterLossStartsAgainFromTheFirstDelay() {
        var callee = Self.connected(outgoing: false)
        _ = callee.handle(.signalingLost("reset", resumable: true), now: .seconds(5))
        _ = callee.handle(.reconnectFailed, now: .seconds(5))
        #expect(callee.armed.contains(.reconnect))
        #expect(callee.handle(.signalingResumed, now: .seconds(5.1))
                == [.cancel(.resumeWindow), .cancel(.reconnect), .reportSignaling(lost: false)])
        // A failed try reported after the resumption (it raced it) arms nothing.
        #expect(callee.handle(.reconnectFailed, now: .seconds(5.2)) == [])
        #expect(callee.handle(.timerFired(.reconnect), now: .seconds(5.4)) == [])
        _ = callee.handle(.signalingLost("reset again", resumable: true), now: .seconds(9))
        #expect(callee.handle(.reconnectFailed, now: .seconds(9)) == [.arm(.reconnect, after: .milliseconds(250))])
    }

    @Test func aSecondFailedTryWhileARetryIsArmedArmsNoOther() {
        var caller = Self.connected(outgoing: true)
        _ = caller.handle(.signalingLost("reset", resumable: true), now: .seconds(5))
        #expect(caller.handle(.reconnectFailed, now: .seconds(5)).count == 1)
        #expect(caller.handle(.reconnectFailed, now: .seconds(5)) == [])
    }

    @Test func theEndCancelsAPendingReconnect() {
        var caller = Self.connected(outgoing: true)
        _ = caller.handle(.signalingLost("reset", resumable: true), now: .seconds(5))
        _ = caller.handle(.reconnectFailed, now: .seconds(5))
        let actions = caller.handle(.end(.hangUp), now: .seconds(6))
        #expect(actions.contains(.cancel(.reconnect)))
        #expect(caller.handle(.timerFired(.reconnect), now: .seconds(7)) == [])
    }

    @Test func theResumeWindowEndsACallWhoseTriesNeverWorked() {
        var caller = Self.connected(outgoing: true)
        _ = caller.handle(.signalingLost("reset", resumable: true), now: .seconds(5))
        var now = Duration.seconds(5)
        while now < .seconds(35) {
            let actions = caller.handle(.reconnectFailed, now: now)
            guard case let .arm(.reconnect, delay) = actions.first else { break }
            now += delay
            if now >= .seconds(35) { break }
            _ = caller.handle(.timerFired(.reconnect), now: now)
        }
        let end = caller.handle(.timerFired(.resumeWindow), now: .seconds(35))
        #expect(end.contains(.reportEnded(.failed)))
        #expect(end.contains(.cancel(.reconnect)))
    }

    @Test func aLostSignalingWhileDialingEndsAtOnceWithTheDetail() {
        var caller = LegState(outgoing: true, timings: Self.timings)
        let actions = caller.handle(.signalingLost("connection refused", resumable: true), now: .zero)
        #expect(!actions.contains(.reconnectSignaling))
        #expect(caller.phase == .ended(LegEnd(reason: .failed, detail: "connection refused")))
        // The dial's start action fails first, with the same detail, then the call ends.
        #expect(actions.first == .failStart(reason: "connection refused"))
        #expect(actions.suffix(2) == [.tearDown, .reportEnded(.failed)])
    }

    @Test func onlyADialFailsItsStartActionWhenItsSignalingIsLost() {
        // Past dialing the start action was fulfilled when the wire came up: a lost wire that
        // cannot be resumed ends the call, and one that can waits to be resumed.
        var caller = LegState(outgoing: true, timings: Self.timings)
        _ = caller.handle(.signalingReady, now: .zero)
        var other = caller
        let ended = caller.handle(.signalingLost("the SIP dialog ended", resumable: false), now: .seconds(1))
        #expect(!ended.contains { if case .failStart = $0 { true } else { false } })
        #expect(caller.phase == .ended(LegEnd(reason: .failed, detail: "the SIP dialog ended")))
        let resuming = other.handle(.signalingLost("reset", resumable: true), now: .seconds(1))
        #expect(!resuming.contains { if case .failStart = $0 { true } else { false } })
        #expect(!resuming.contains(.tearDown))
    }

    // MARK: - Every phase, every ending

    static let everyPhase: [(name: String, outgoing: Bool, events: [LegEvent])] = LegStateTests.phasesBeforeMedia + [
        ("connected", false, [.signalingReady, .answering, .negotiated(dtls: false), .iceConnected, .mediaReady, .audioActivated]),
        ("reconnecting", true, [.signalingReady, .peerRinging, .negotiated(dtls: false), .iceConnected, .mediaReady, .audioActivated,
                                .iceDisconnected]),
    ]

    @Test(arguments: everyPhase.indices)
    func everyPhaseEndsExactlyOnceWithOneTeardownAndNoTimerLeft(index: Int) {
        let (name, outgoing, events) = Self.everyPhase[index]
        for ending in [LegEnding.hangUp, .peerEnded(.hangup), .failed("x"), .shutdown, .endedByManager(.failed),
                       .signalingClosed("closed"), .actionTimedOut("answer timed out")] {
            var state = LegState(outgoing: outgoing, timings: Self.timings)
            _ = Self.feed(&state, events, at: .seconds(1))
            let first = state.handle(.end(ending), now: .seconds(2))
            #expect(first.filter { $0 == .tearDown }.count == 1, "\(name), \(ending)")
            #expect(state.armed.isEmpty, "\(name), \(ending)")
            #expect(state.phase.hasEnded, "\(name), \(ending)")
            // Sends at most one message to the peer.
            #expect(first.filter { if case .send = $0 { true } else { false } }.count <= 1, "\(name), \(ending)")
            // Whatever comes after changes nothing.
            for later in [LegEvent.end(.hangUp), .end(.peerEnded(.hangup)), .iceConnected, .mediaReady, .audioActivated,
                          .timerFired(.keepAlive), .reconnectFailed, .peerReoffered(anOffer), .restartRequested] {
                #expect(state.handle(later, now: .seconds(3)) == [], "\(name), \(ending), then \(later)")
            }
        }
    }

    @Test(arguments: everyPhase.indices)
    func aHostNetworkChangeInEveryPhaseRestartsOnlyANegotiatedCall(index: Int) {
        let (name, outgoing, events) = Self.everyPhase[index]
        var state = LegState(outgoing: outgoing, timings: Self.timings)
        _ = Self.feed(&state, events, at: .seconds(1))
        let actions = state.handle(.hostAddressesChanged(signalingAddressGone: false, pathAffected: true), now: .seconds(2))
        #expect(actions.contains(.restartICE) == state.phase.isNegotiated, "\(name): \(actions)")
    }

    @Test(arguments: everyPhase.indices)
    func onlyACallWithMediaLosesItsConnection(index: Int) {
        let (name, outgoing, events) = Self.everyPhase[index]
        var state = LegState(outgoing: outgoing, timings: Self.timings)
        _ = Self.feed(&state, events, at: .seconds(1))
        let hadMedia = state.phase.hasMedia
        let wasReconnecting = { if case .reconnecting = state.phase { true } else { false } }()
        let actions = state.handle(.mediaStalled, now: .seconds(2))
        #expect(actions.contains(.reportConnectionLost) == (hadMedia && !wasReconnecting), "\(name): \(actions)")
    }
}
