@testable import CallCore
import Testing

/// A peer whose process is gone closes its signaling connection (its kernel does) and stops its
/// media at once: the call ends within seconds. A network that breaks closes nothing, and a
/// relay that restarts leaves the media going: those calls wait, as before.
@Suite struct LegPeerGoneTests {
    static let timings = LegTimings(keepAliveInterval: .seconds(15), connectionLostTimeout: .seconds(30),
                                    iceRestartInterval: .seconds(4), resumeWindow: .seconds(20), peerGoneAfter: .seconds(5))

    static func connected() -> LegState {
        var state = LegState(outgoing: true, timings: timings)
        for event: LegEvent in [.signalingReady, .peerRinging, .negotiated(dtls: false), .iceConnected, .mediaReady, .audioActivated] {
            _ = state.handle(event, now: .seconds(1))
        }
        return state
    }

    @Test func aClosedConnectionAndStoppedMediaEndTheCallAfterTheGrace() {
        var state = Self.connected()
        _ = state.handle(.signalingLost("the signaling connection closed", resumable: true), now: .seconds(10))
        #expect(!state.armed.contains(.peerGone), "signaling alone (a relay restarting) waits")
        let lost = state.handle(.mediaStalled, now: .seconds(11))
        #expect(lost.contains(.arm(.peerGone, after: .seconds(5))))
        let fired = state.handle(.timerFired(.peerGone), now: .seconds(16))
        #expect(fired.contains(.tearDown))
        guard case let .ended(end) = state.phase else { Issue.record("not ended: \(state.phase)"); return }
        #expect(end.reason == .failed)
        #expect(end.detail?.contains("went away") == true, "\(end.detail ?? "-")")
        #expect(fired.contains(.reportEnded(.failed)))
    }

    @Test func theOtherOrderArmsItTooAndEitherComingBackCancelsIt() {
        // Media first, then the connection closes.
        var state = Self.connected()
        _ = state.handle(.mediaStalled, now: .seconds(10))
        #expect(!state.armed.contains(.peerGone), "a network break alone waits for the loss timeout")
        #expect(state.handle(.signalingLost("closed", resumable: true), now: .seconds(11)).contains(.arm(.peerGone, after: .seconds(5))))
        // The peer resumes the signaling (it was a restart of its network, not its death).
        #expect(state.handle(.signalingResumed, now: .seconds(13)).contains(.cancel(.peerGone)))
        #expect(state.handle(.timerFired(.peerGone), now: .seconds(16)) == [])
        #expect(!state.phase.hasEnded)

        // Media coming back cancels it too.
        var other = Self.connected()
        _ = other.handle(.signalingLost("closed", resumable: true), now: .seconds(10))
        _ = other.handle(.mediaStalled, now: .seconds(10))
        #expect(other.handle(.mediaResumed, now: .seconds(12)).contains(.cancel(.peerGone)))
        #expect(other.handle(.timerFired(.peerGone), now: .seconds(15)) == [])
        #expect(!other.phase.hasEnded)
    }

    @Test func aConnectionThisSideGaveUpIsNotAPeerGone() {
        // This host's address went: it closed its own connection and resumes; its media stalls
        // while ICE restarts. The peer is not gone.
        var state = Self.connected()
        _ = state.handle(.hostAddressesChanged(signalingAddressGone: true, pathAffected: true), now: .seconds(10))
        #expect(!state.signaling.isUp)
        _ = state.handle(.mediaStalled, now: .seconds(11))
        #expect(!state.armed.contains(.peerGone))
    }

    @Test func aPathLostOnlyByICEIsNotAPeerGone() {
        var state = Self.connected()
        _ = state.handle(.signalingLost("closed", resumable: true), now: .seconds(10))
        _ = state.handle(.iceDisconnected, now: .seconds(10))
        #expect(!state.armed.contains(.peerGone), "ICE alone (media may still come) does not say the peer is gone")
    }
}

/// A caller that gives up while the call rings here leaves a missed call: unanswered, said so.
@Suite struct LegMissedCallTests {
    @Test func aCallerThatHangsUpWhileItRingsHereLeavesAMissedCall() {
        var callee = LegState(outgoing: false, timings: LegPeerGoneTests.timings)
        _ = callee.handle(.signalingReady, now: .zero)
        let actions = callee.handle(.end(.peerEnded(.hangup)), now: .seconds(3))
        #expect(actions.last == .reportEnded(.unanswered))
        #expect(callee.phase == .ended(LegEnd(reason: .unanswered, detail: "missed: the caller hung up before it was answered")))
        #expect(!actions.contains { if case .send = $0 { true } else { false } }, "nothing goes back to a caller that left")
        // Once answered, the caller hanging up is a plain remote end.
        var answered = LegState(outgoing: false, timings: LegPeerGoneTests.timings)
        _ = answered.handle(.signalingReady, now: .zero)
        _ = answered.handle(.answering, now: .zero)
        #expect(answered.handle(.end(.peerEnded(.hangup)), now: .seconds(3)).last == .reportEnded(.remoteEnded))
    }

    /// A SIP caller's CANCEL because another device of the account answered (or declined): the
    /// call here ends as answered or declined elsewhere, not as missed.
    @Test(arguments: [(HangupReason.answeredElsewhere, CallEndReason.answeredElsewhere, "answered on another device"),
                      (.declinedElsewhere, .declinedElsewhere, "declined on another device")])
    func aCallTakenOnAnotherDeviceIsNotMissed(reason: HangupReason, expected: CallEndReason, detail: String) {
        var callee = LegState(outgoing: false, timings: LegPeerGoneTests.timings)
        _ = callee.handle(.signalingReady, now: .zero)
        let actions = callee.handle(.end(.peerEnded(reason)), now: .seconds(2))
        #expect(actions.last == .reportEnded(expected))
        #expect(callee.phase == .ended(LegEnd(reason: expected, detail: detail)))
        #expect(!actions.contains { if case .send = $0 { true } else { false } })
    }
}
