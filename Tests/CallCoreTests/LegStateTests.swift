@testable import CallCore
import Testing

/// The leg state machine, with no concurrency at all: events in, actions out.
@Suite struct LegStateTests {
    static let timings = LegTimings(keepAliveInterval: .seconds(15), connectionLostTimeout: .seconds(30), iceRestartInterval: .seconds(5))

    /// Feeds `events` at `now`; returns every action, in order.
    @discardableResult
    static func feed(_ state: inout LegState, _ events: [LegEvent], at now: Duration = .zero) -> [LegAction] {
        events.flatMap { state.handle($0, now: now) }
    }

    /// The events that take a leg from its start to media running.
    static func setup(outgoing: Bool) -> [LegEvent] {
        outgoing
            ? [.signalingReady, .peerRinging, .negotiated(dtls: false), .iceConnected, .mediaReady, .audioActivated]
            : [.signalingReady, .answering, .negotiated(dtls: false), .iceConnected, .mediaReady, .audioActivated]
    }

    static func connected(outgoing: Bool, muted: Bool = false) -> LegState {
        var state = LegState(outgoing: outgoing, muted: muted, timings: timings)
        feed(&state, setup(outgoing: outgoing), at: .seconds(1))
        return state
    }

    @Test func anOutgoingCallGoesThroughEveryPhaseToConnected() {
        var state = LegState(outgoing: true, timings: Self.timings)
        #expect(state.phase == .dialing)
        #expect(state.handle(.signalingReady, now: .zero) == [.arm(.keepAlive, after: .seconds(15))])
        #expect(state.phase == .inviting)
        #expect(state.handle(.peerRinging, now: .zero) == [])
        #expect(state.phase == .ringing)
        // SDES keys are known with the answer: the media is built while ICE checks.
        #expect(state.handle(.negotiated(dtls: false), now: .zero) == [.prepareMedia, .arm(.setupRound, after: .milliseconds(2500))])
        #expect(state.phase == .checking)
        #expect(state.handle(.iceConnected, now: .milliseconds(300)) == [.cancel(.setupRound), .tellPeerPath])
        #expect(state.phase == .securing(iceConnectedAt: .milliseconds(300)))
        #expect(state.handle(.mediaReady, now: .milliseconds(400)) == [.reportMediaConnected])
        #expect(state.phase == .awaitingAudio(iceConnectedAt: .milliseconds(300)))
        #expect(state.handle(.audioActivated, now: .milliseconds(450)) == [.startMedia(microphoneMuted: false)])
        #expect(state.phase == .connected(since: .milliseconds(450)))
        #expect(state.unfinished == nil)
    }

    @Test func anIncomingCallRingsThenOffersWhenAnswered() {
        var state = LegState(outgoing: false, timings: Self.timings)
        #expect(state.phase == .ringing)
        Self.feed(&state, [.signalingReady, .answering])
        #expect(state.phase == .offering)
        Self.feed(&state, [.negotiated(dtls: false), .iceConnected, .mediaReady])
        #expect(state.handle(.audioActivated, now: .seconds(2)) == [.startMedia(microphoneMuted: false)])
    }

    @Test func mediaCannotStartBeforeItsPhase() {
        // Audio activated before ICE connected, media before negotiation: nothing happens,
        // and the activation is taken up once the media is ready.
        var state = LegState(outgoing: true, timings: Self.timings)
        #expect(Self.feed(&state, [.signalingReady, .audioActivated, .mediaReady, .iceConnected]) == [.arm(.keepAlive, after: .seconds(15))])
        #expect(state.phase == .inviting)
        Self.feed(&state, [.negotiated(dtls: false), .iceConnected])
        #expect(state.handle(.audioActivated, now: .zero) == [])
        #expect(state.handle(.mediaReady, now: .zero) == [.reportMediaConnected])
        #expect(state.handle(.audioActivated, now: .zero) == [.startMedia(microphoneMuted: false)])
    }

    /// The events that reach each phase before media, from a new leg.
    static let phasesBeforeMedia: [(name: String, outgoing: Bool, events: [LegEvent])] = [
        ("dialing", true, []),
        ("inviting", true, [.signalingReady]),
        ("ringing there", true, [.signalingReady, .peerRinging]),
        ("ringing here", false, [.signalingReady]),
        ("offering", false, [.signalingReady, .answering]),
        ("checking", true, [.signalingReady, .peerRinging, .negotiated(dtls: false)]),
        ("securing", false, [.signalingReady, .answering, .negotiated(dtls: false), .iceConnected]),
        ("awaiting audio", true, [.signalingReady, .peerRinging, .negotiated(dtls: false), .iceConnected, .mediaReady]),
    ]

    @Test(arguments: phasesBeforeMedia.indices)
    func aMuteSetBeforeMediaHoldsFromItsFirstFrame(index: Int) {
        let (name, outgoing, events) = Self.phasesBeforeMedia[index]
        var state = LegState(outgoing: outgoing, timings: Self.timings)
        Self.feed(&state, events)
        // Nothing to silence yet: the intent is kept, not dropped.
        #expect(state.handle(.setMuted(true), now: .zero) == [], "\(name)")
        #expect(state.muted)
        let rest = Self.setup(outgoing: outgoing).filter { !events.contains($0) }
        let actions = Self.feed(&state, rest)
        #expect(actions.contains(.startMedia(microphoneMuted: true)), "\(name): \(actions)")
        #expect(!actions.contains(.startMedia(microphoneMuted: false)), "\(name)")
    }

    @Test(arguments: phasesBeforeMedia.indices)
    func aHoldSetBeforeMediaAlsoStartsItSilent(index: Int) {
        let (name, outgoing, events) = Self.phasesBeforeMedia[index]
        var state = LegState(outgoing: outgoing, timings: Self.timings)
        Self.feed(&state, events)
        // Before the offer and answer, the first exchange carries the hold; after, a new offer does.
        #expect(state.handle(.setHeld(true), now: .zero) == (state.phase.isNegotiated ? [.renegotiate] : []), "\(name)")
        let actions = Self.feed(&state, Self.setup(outgoing: outgoing).filter { !events.contains($0) })
        #expect(actions.contains(.startMedia(microphoneMuted: true)), "\(name): \(actions)")
        #expect(actions.contains(.setFlow(Self.held)), "\(name): \(actions)")
    }

    static let held = MediaFlow(sending: false, receiving: false, heldHere: true)

    @Test func aLegStartedMutedStartsItsMediaMuted() {
        var state = LegState(outgoing: true, muted: true, timings: Self.timings)
        #expect(Self.feed(&state, Self.setup(outgoing: true)).contains(.startMedia(microphoneMuted: true)))
    }

    @Test(arguments: [true, false])
    func resumingFromHoldLeavesAUserMuteInPlace(outgoing: Bool) {
        var state = Self.connected(outgoing: outgoing)
        #expect(state.handle(.setMuted(true), now: .zero) == [.setMicrophone(muted: true)])
        #expect(state.handle(.setHeld(true), now: .zero) == [.setMicrophone(muted: true), .setFlow(Self.held), .renegotiate])
        #expect(state.wantedDirection == .inactive)
        #expect(state.handle(.offerAnswered, now: .zero) == [])
        #expect(state.handle(.setHeld(false), now: .zero) == [.setMicrophone(muted: true), .setFlow(.both), .renegotiate])
        #expect(state.handle(.offerAnswered, now: .zero) == [])
        // Unmuting while held keeps the microphone silent until the resume.
        #expect(state.handle(.setHeld(true), now: .zero) == [.setMicrophone(muted: true), .setFlow(Self.held), .renegotiate])
        #expect(state.handle(.setMuted(false), now: .zero) == [.setMicrophone(muted: true)])
        // The resume comes while the hold's offer is out: it is offered once that is answered.
        #expect(state.handle(.setHeld(false), now: .zero) == [.setMicrophone(muted: false), .setFlow(.both)])
        #expect(state.handle(.offerAnswered, now: .zero) == [.renegotiate])
        #expect(state.wantedDirection == .sendrecv)
    }

    @Test func thePeersHoldStopsSendingHereAndIsReportedOnce() {
        var state = Self.connected(outgoing: true)
        // The peer offers `sendonly` (holding with music): nothing is sent, its music is played.
        #expect(state.handle(.peerDirection(receives: false, sends: true), now: .zero)
                == [.setFlow(MediaFlow(sending: false, receiving: true, heldHere: false)), .reportHeldByPeer(true)])
        #expect(state.heldByPeer)
        #expect(state.handle(.peerDirection(receives: false, sends: false), now: .zero)
                == [.setFlow(MediaFlow(sending: false, receiving: false, heldHere: false))])
        // An answer that cannot say (nil) changes nothing.
        #expect(state.handle(.peerDirection(receives: nil, sends: nil), now: .zero) == [])
        #expect(state.handle(.peerDirection(receives: true, sends: true), now: .zero) == [.setFlow(.both), .reportHeldByPeer(false)])
    }

    @Test func holdingWithHoldAudioSendsItAndAHoldWaitsForARestartsAnswer() {
        var state = LegState(outgoing: false, timings: Self.timings, sendsHoldAudio: true)
        Self.feed(&state, Self.setup(outgoing: false))
        Self.feed(&state, [.restartOffered])
        // One offer at a time: the hold is applied here at once and offered after the restart's answer.
        #expect(state.handle(.setHeld(true), now: .zero)
                == [.setMicrophone(muted: true), .setFlow(MediaFlow(sending: true, receiving: false, heldHere: true))])
        #expect(state.wantedDirection == .sendonly)
        #expect(state.handle(.offerAnswered, now: .zero) == [.renegotiate])
        #expect(state.renegotiationPending && !state.restartPending)
        // A restart due meanwhile waits for the hold's answer.
        #expect(state.handle(.iceDisconnected, now: .zero).contains(.reportConnectionLost))
        #expect(state.handle(.timerFired(.iceRestart), now: Self.timings.iceRestartInterval!) == [.arm(.iceRestart, after: Self.timings.iceRestartInterval!)])
    }

    @Test func muteAndHoldApplyWhileTheConnectionIsLostToo() {
        var state = Self.connected(outgoing: false)
        Self.feed(&state, [.iceDisconnected])
        #expect(state.handle(.setMuted(true), now: .zero) == [.setMicrophone(muted: true)])
    }

    // MARK: - Ending

    @Test func hangingUpACallRingingHereDeclinesIt() {
        var state = LegState(outgoing: false, timings: Self.timings)
        Self.feed(&state, [.signalingReady])
        let actions = state.handle(.end(.hangUp), now: .zero)
        #expect(actions == [.cancel(.keepAlive), .send(.reject(.declined)), .tearDown])
        #expect(state.phase == .ended(LegEnd(reason: .declined, detail: nil)))
    }

    @Test(arguments: [true, false])
    func hangingUpAfterTheAnswerSendsEnd(outgoing: Bool) {
        var state = Self.connected(outgoing: outgoing)
        #expect(state.handle(.end(.hangUp), now: .zero) == [.cancel(.keepAlive), .send(.end(.hangup)), .tearDown])
        #expect(state.phase == .ended(LegEnd(reason: .localEnded, detail: nil)))
    }

    @Test func crossingHangUpsEndTheCallOnceWhicheverComesFirst() {
        var local = Self.connected(outgoing: true)
        #expect(local.handle(.end(.hangUp), now: .zero).filter { if case .send = $0 { true } else { false } } == [.send(.end(.hangup))])
        #expect(local.handle(.end(.peerEnded(.hangup)), now: .zero) == [])
        var remote = Self.connected(outgoing: true)
        #expect(remote.handle(.end(.peerEnded(.hangup)), now: .zero) == [.cancel(.keepAlive), .tearDown, .reportEnded(.remoteEnded)])
        #expect(remote.handle(.end(.hangUp), now: .zero) == [])
        #expect(remote.phase == .ended(LegEnd(reason: .remoteEnded, detail: nil)))
    }

    @Test func anEndTheManagerMadeSendsOneEndToThePeerAndIsNotReportedBack() {
        // The manager's request and its event both arrive for the same end.
        var state = LegState(outgoing: false, timings: Self.timings)
        Self.feed(&state, [.signalingReady])
        let first = state.handle(.end(.endedByManager(.unanswered)), now: .zero)
        let second = state.handle(.end(.endedByManager(.unanswered)), now: .zero)
        #expect(first == [.cancel(.keepAlive), .send(.end(.timeout)), .tearDown])
        #expect(second == [])
    }

    @Test func aFailedCallSaysWhichStepDidNotFinish() {
        for (events, expected) in [
            ([LegEvent](), "could not be reached"),
            ([.signalingReady, .peerRinging], "offer and answer"),
            ([.signalingReady, .peerRinging, .negotiated(dtls: false)], "ICE did not connect"),
            ([.signalingReady, .peerRinging, .negotiated(dtls: false), .iceConnected], "DTLS handshake"),
        ] {
            var state = LegState(outgoing: true, timings: Self.timings)
            Self.feed(&state, events)
            Self.feed(&state, [.end(.endedByManager(.failed))])
            guard case let .ended(end) = state.phase else {
                Issue.record("not ended")
                continue
            }
            #expect(end.reason == .failed)
            #expect(end.detail?.contains(expected) == true, "\(String(describing: end.detail))")
        }
    }

    @Test func peerReasonsAndRejectionsAreReportedWithTheirDetail() {
        var a = Self.connected(outgoing: true)
        #expect(a.handle(.end(.peerEnded(.shutdown)), now: .zero).last == .reportEnded(.remoteEnded))
        #expect(a.phase == .ended(LegEnd(reason: .remoteEnded, detail: "the other node shut down")))
        // Every refusal ends the same way (the other side's decision), its reason in the detail.
        for reason in [RejectReason.unknownCaller, .busy, .blocked, .declined, .doNotDisturb] {
            var b = LegState(outgoing: true, timings: Self.timings)
            Self.feed(&b, [.signalingReady])
            #expect(b.handle(.end(.peerRejected(reason)), now: .zero).last == .reportEnded(.remoteEnded), "\(reason)")
            #expect(b.phase == .ended(LegEnd(reason: .remoteEnded, detail: "rejected: \(reason.rawValue)")))
        }
    }

    @Test func nothingHappensAfterTheEnd() {
        var state = Self.connected(outgoing: false)
        Self.feed(&state, [.iceDisconnected], at: .seconds(10))
        Self.feed(&state, [.end(.shutdown)])
        for event in [LegEvent.timerFired(.connectionLost), .timerFired(.iceRestart), .timerFired(.keepAlive), .setMuted(true),
                      .iceConnected, .mediaResumed, .end(.hangUp), .end(.failed("late"))] {
            #expect(state.handle(event, now: .seconds(100)) == [], "\(event)")
        }
    }

    // MARK: - Timers

    @Test func keepAlivesGoOutEveryIntervalUntilTheEnd() {
        var state = Self.connected(outgoing: true)
        #expect(state.armed == [.keepAlive])
        #expect(state.handle(.timerFired(.keepAlive), now: .seconds(15)) == [.send(.keepAlive), .arm(.keepAlive, after: .seconds(15))])
        #expect(state.handle(.end(.hangUp), now: .seconds(20)).first == .cancel(.keepAlive))
        #expect(state.armed.isEmpty)
    }

    @Test func lossThenRecoveryCancelsItsTimers() {
        var state = Self.connected(outgoing: false)
        let lost = state.handle(.iceDisconnected, now: .seconds(10))
        #expect(lost == [.arm(.connectionLost, after: .seconds(30)), .arm(.iceRestart, after: .seconds(5)), .reportConnectionLost, .send(.keepAlive)])
        #expect(state.phase == .reconnecting(.init(connectedSince: .seconds(1), lostAt: .seconds(10), signals: [.ice])))
        // Media stops too; ICE coming back alone is not enough.
        #expect(state.handle(.mediaStalled, now: .seconds(11)) == [])
        #expect(state.handle(.iceConnected, now: .seconds(12)) == [])
        #expect(state.handle(.mediaResumed, now: .seconds(13)) == [.cancel(.connectionLost), .cancel(.iceRestart), .reportConnectionRestored])
        #expect(state.phase == .connected(since: .seconds(1)))
        #expect(state.armed == [.keepAlive])
    }

    @Test func aConnectionLostForTheWholeTimeoutEndsTheCallAsFailed() {
        var state = Self.connected(outgoing: true)
        Self.feed(&state, [.mediaStalled], at: .seconds(10))
        let actions = state.handle(.timerFired(.connectionLost), now: .seconds(40))
        #expect(actions == [.cancel(.iceRestart), .cancel(.keepAlive), .send(.end(.failed)), .tearDown, .reportEnded(.failed)])
        guard case let .ended(end) = state.phase else {
            Issue.record("not ended")
            return
        }
        #expect(end.detail == "the connection was lost: nothing heard from the peer for 30 s")
    }

    @Test func restartsRepeatWhileLostAndWaitForAnAnswerThatComesLate() {
        var state = Self.connected(outgoing: false)
        Self.feed(&state, [.iceDisconnected], at: .seconds(10))
        #expect(state.handle(.timerFired(.iceRestart), now: .seconds(15)) == [.restartICE, .arm(.iceRestart, after: .seconds(5))])
        Self.feed(&state, [.restartOffered])
        #expect(state.restartPending)
        // The answer has not come: no second restart crosses the first.
        #expect(state.handle(.timerFired(.iceRestart), now: .seconds(20)) == [.arm(.iceRestart, after: .seconds(5))])
        // It comes late; the next interval restarts again.
        Self.feed(&state, [.restartSettled])
        #expect(state.handle(.timerFired(.iceRestart), now: .seconds(25)) == [.restartICE, .arm(.iceRestart, after: .seconds(5))])
        #expect(state.restarts == 1)
    }

    @Test func noRestartStartsAtTheMomentTheCallGivesUp() {
        // 30 s is six restart intervals: at 40 s both timers are due, in either order.
        for restartFirst in [true, false] {
            var state = Self.connected(outgoing: false)
            Self.feed(&state, [.iceDisconnected], at: .seconds(10))
            for k in 1...5 {
                #expect(state.handle(.timerFired(.iceRestart), now: .seconds(10 + 5 * k)).first == .restartICE)
                Self.feed(&state, [.restartOffered, .restartSettled])
            }
            var actions: [LegAction] = []
            if restartFirst {
                actions += state.handle(.timerFired(.iceRestart), now: .seconds(40))
                actions += state.handle(.timerFired(.connectionLost), now: .seconds(40))
            } else {
                actions += state.handle(.timerFired(.connectionLost), now: .seconds(40))
                actions += state.handle(.timerFired(.iceRestart), now: .seconds(40))
            }
            #expect(!actions.contains(.restartICE), "\(actions)")
            #expect(actions.contains(.send(.end(.failed))))
        }
    }

    @Test func aTimerCancelledAfterItWasDueDoesNothing() {
        var state = Self.connected(outgoing: false)
        Self.feed(&state, [.iceDisconnected], at: .seconds(10))
        Self.feed(&state, [.iceConnected], at: .seconds(11))
        #expect(state.handle(.timerFired(.connectionLost), now: .seconds(40)) == [])
        #expect(state.handle(.timerFired(.iceRestart), now: .seconds(15)) == [])
        #expect(state.phase == .connected(since: .seconds(1)))
    }

    @Test func aRestartCannotStartBeforeNegotiation() {
        var state = LegState(outgoing: false, timings: Self.timings)
        Self.feed(&state, [.signalingReady, .restartOffered])
        #expect(!state.restartPending)
        #expect(state.restarts == 0)
        // A loss before media is not a connection loss: setup timeouts handle it.
        #expect(state.handle(.iceDisconnected, now: .zero) == [])
    }

    @Test func noRestartsWhenTheyAreTurnedOff() {
        var state = LegState(outgoing: false, timings: LegTimings(iceRestartInterval: nil))
        Self.feed(&state, Self.setup(outgoing: false))
        #expect(state.handle(.iceDisconnected, now: .zero) == [.arm(.connectionLost, after: .seconds(30)), .reportConnectionLost, .send(.keepAlive)])
    }
}
