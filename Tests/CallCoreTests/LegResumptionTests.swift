@testable import CallCore
import Testing

/// The leg state machine when the signaling connection drops, the host's network changes, or a
/// break is seen on one side only: events in, actions out, no concurrency.
@Suite struct LegResumptionTests {
    static let timings = LegTimings(keepAliveInterval: .seconds(15), connectionLostTimeout: .seconds(30),
                                    iceRestartInterval: .seconds(4), resumeWindow: .seconds(20))

    static func connected(outgoing: Bool) -> LegState {
        var state = LegState(outgoing: outgoing, timings: timings)
        let setup: [LegEvent] = outgoing
            ? [.signalingReady, .peerRinging, .negotiated(dtls: false), .iceConnected, .mediaReady, .audioActivated]
            : [.signalingReady, .answering, .negotiated(dtls: false), .iceConnected, .mediaReady, .audioActivated]
        for event in setup { _ = state.handle(event, now: .seconds(1)) }
        return state
    }

    @Test func bothSidesTryToReconnectWhenTheSignalingDrops() {
        var caller = Self.connected(outgoing: true)
        #expect(caller.handle(.signalingLost("reset", resumable: true), now: .seconds(5))
                == [.arm(.resumeWindow, after: .seconds(20)), .reportSignaling(lost: true), .reconnectSignaling])
        #expect(caller.signaling == .resuming(since: .seconds(5)))
        #expect(caller.phase == .connected(since: .seconds(1)), "media goes on")
        // A second report of the same loss changes nothing.
        #expect(caller.handle(.signalingLost("closed", resumable: true), now: .seconds(6)) == [])

        // The callee too: it reconnects if it knows a way to the caller (its leg decides).
        var callee = Self.connected(outgoing: false)
        #expect(callee.handle(.signalingLost("reset", resumable: true), now: .seconds(5))
                == [.arm(.resumeWindow, after: .seconds(20)), .reportSignaling(lost: true), .reconnectSignaling])
        #expect(callee.handle(.signalingResumed, now: .seconds(7)) == [.cancel(.resumeWindow), .reportSignaling(lost: false)])
        #expect(callee.signaling == .up)
        #expect(!callee.armed.contains(.resumeWindow))
        // A resumption the leg did not lose (the caller moved first) reports nothing.
        #expect(callee.handle(.signalingResumed, now: .seconds(8)) == [])
    }

    @Test func aCallNotResumedWithinTheWindowEndsAsFailedWithTheReason() {
        var caller = Self.connected(outgoing: true)
        _ = caller.handle(.signalingLost("reset", resumable: true), now: .seconds(5))
        let actions = caller.handle(.timerFired(.resumeWindow), now: .seconds(25))
        #expect(actions.contains(.tearDown) && actions.contains(.reportEnded(.failed)))
        guard case let .ended(end) = caller.phase else {
            Issue.record("not ended: \(caller.phase)")
            return
        }
        #expect(end.detail == "the signaling connection was lost and the call could not be resumed within 20 s")
    }

    @Test func aConnectionThatCannotResumeEndsTheCallAsBefore() {
        // A web page, a session, or an outgoing call still dialing.
        var page = Self.connected(outgoing: false)
        let actions = page.handle(.signalingLost("the page closed", resumable: false), now: .seconds(5))
        #expect(actions.last == .reportEnded(.failed))
        #expect(page.phase == .ended(LegEnd(reason: .failed, detail: "the page closed")))

        var dialing = LegState(outgoing: true, timings: Self.timings)
        _ = dialing.handle(.signalingLost("refused", resumable: true), now: .zero)
        #expect(dialing.phase.hasEnded)
    }

    @Test func eitherSideRestartsICEWhileLostTheCallerHalfAnIntervalLater() {
        var callee = Self.connected(outgoing: false), caller = Self.connected(outgoing: true)
        #expect(callee.handle(.mediaStalled, now: .seconds(10)).contains(.arm(.iceRestart, after: .seconds(4))))
        #expect(caller.handle(.mediaStalled, now: .seconds(10)).contains(.arm(.iceRestart, after: .seconds(6))))
        #expect(caller.handle(.timerFired(.iceRestart), now: .seconds(16)) == [.restartICE, .arm(.iceRestart, after: .seconds(4))])
    }

    @Test func anOfferOvertakenByThePeersFreesTheNextRestart() {
        var caller = Self.connected(outgoing: true)
        _ = caller.handle(.mediaStalled, now: .seconds(10))
        _ = caller.handle(.restartOffered, now: .seconds(16))
        #expect(caller.offerPending)
        // Still waiting for its answer: the next restart waits.
        #expect(caller.handle(.timerFired(.iceRestart), now: .seconds(20)) == [.arm(.iceRestart, after: .seconds(4))])
        // The callee's offer crosses the caller's: the callee's stands, the caller answers it.
        #expect(caller.handle(.peerReoffered(anOffer), now: .seconds(21)) == [.answerPeerOffer(anOffer)])
        #expect(!caller.offerPending)
        #expect(caller.handle(.timerFired(.iceRestart), now: .seconds(24)) == [.restartICE, .arm(.iceRestart, after: .seconds(4))])
    }

    @Test func aHostNetworkChangeRestartsICEOnlyWhereItMatters() {
        var state = Self.connected(outgoing: false)
        // An address this call does not use came or went: a working path is left alone.
        #expect(state.handle(.hostAddressesChanged(signalingAddressGone: false, pathAffected: false), now: .seconds(3)) == [])
        // Its pair's address went (or the default route changed): restart at once.
        #expect(state.handle(.hostAddressesChanged(signalingAddressGone: false, pathAffected: true), now: .seconds(4)) == [.restartICE])
        _ = state.handle(.restartOffered, now: .seconds(4))
        // One restart at a time.
        #expect(state.handle(.hostAddressesChanged(signalingAddressGone: false, pathAffected: true), now: .seconds(5)) == [])
        _ = state.handle(.offerAnswered, now: .seconds(5))
        // A lost path restarts on any change: new addresses may make a new one.
        _ = state.handle(.mediaStalled, now: .seconds(6))
        #expect(state.handle(.hostAddressesChanged(signalingAddressGone: false, pathAffected: false), now: .seconds(7)) == [.restartICE])
        // Before the offer and answer there is nothing to restart.
        var ringing = LegState(outgoing: false, timings: Self.timings)
        _ = ringing.handle(.signalingReady, now: .zero)
        #expect(ringing.handle(.hostAddressesChanged(signalingAddressGone: false, pathAffected: true), now: .seconds(1)) == [])
    }

    @Test func aSignalingConnectionWhoseAddressWentIsGivenUpAndResumed() {
        var caller = Self.connected(outgoing: true)
        #expect(caller.handle(.hostAddressesChanged(signalingAddressGone: true, pathAffected: true), now: .seconds(3))
                == [.closeSignaling, .arm(.resumeWindow, after: .seconds(20)), .reportSignaling(lost: true), .reconnectSignaling, .restartICE])
        var callee = Self.connected(outgoing: false)
        #expect(callee.handle(.hostAddressesChanged(signalingAddressGone: true, pathAffected: false), now: .seconds(3))
                == [.closeSignaling, .arm(.resumeWindow, after: .seconds(20)), .reportSignaling(lost: true), .reconnectSignaling])
        #expect(callee.signaling == .resuming(since: .seconds(3)))
    }

    @Test func hangingUpWhileResumingSendsTheEndWhenItCanAndEndsOnce() {
        var caller = Self.connected(outgoing: true)
        _ = caller.handle(.signalingLost("reset", resumable: true), now: .seconds(5))
        let actions = caller.handle(.end(.hangUp), now: .seconds(6))
        #expect(actions.contains(.cancel(.resumeWindow)))
        #expect(actions.contains(.send(.end(.hangup))))
        #expect(caller.handle(.timerFired(.resumeWindow), now: .seconds(25)) == [])
    }
}
