import CallCore
@testable import SIPDialog
import Testing

/// A call's transfers in its dialog (RFC 3515), with no concurrency and no sofia: the peer's
/// REFER followed (the node decides, the response says so, one at a time), this side's REFER
/// and its NOTIFYs (a success ends the call, a failure leaves it running).
@Suite struct SIPDialogTransferTests {
    static let carol = "sip:carol@192.0.2.40:5060"

    /// A confirmed incoming call.
    static func confirmed() -> SIPDialogState {
        var state = SIPDialogState(outgoing: false)
        _ = state.handle(.invite(sdp: SIPDialogStateTests.peerOffer), now: .zero)
        _ = state.handle(.call(.answer(sdp: SIPDialogStateTests.callAnswer)), now: .zero)
        _ = state.handle(.call(.candidates([], end: true)), now: .zero)
        return state
    }

    @Test func thePeersTransferIsFollowedOnceTheNodeTakesIt() {
        var state = Self.confirmed()
        #expect(state.phase == .confirmed)
        #expect(state.handle(.refer(target: "<\(Self.carol)>"), now: .zero) == [.followTransfer(to: Self.carol, replaces: nil)])
        #expect(state.referIn)
        // A second REFER while the first is followed waits its turn.
        #expect(state.handle(.refer(target: Self.carol), now: .zero) == [.respondToRefer(status: 491, phrase: "Request Pending (a transfer is being followed)")])
        #expect(state.handle(.transferDecided(status: 202, phrase: "Accepted"), now: .zero) == [.respondToRefer(status: 202, phrase: "Accepted")])
        #expect(state.referIn, "followed until its call connects or ends")
        _ = state.handle(.transferSettled, now: .zero)
        #expect(!state.referIn)
        #expect(state.handle(.refer(target: Self.carol), now: .zero) == [.followTransfer(to: Self.carol, replaces: nil)])
    }

    @Test func aRefusedTransferLetsAnotherBeAskedForAndTheCallGoesOn() {
        var state = Self.confirmed()
        _ = state.handle(.refer(target: Self.carol), now: .zero)
        #expect(state.handle(.transferDecided(status: 403, phrase: "Forbidden (blocked)"), now: .zero)
                == [.respondToRefer(status: 403, phrase: "Forbidden (blocked)")])
        #expect(!state.referIn && state.phase == .confirmed && !state.callEnded)
    }

    @Test(arguments: ["", "<mailto:carol@example.org>", "tel:+15551234", "sip:", "<sip:carol@host", "sip:carol@", "sip:ca rol@host"])
    func aReferToWhatIsNotASIPAddressGets400(target: String) {
        var state = Self.confirmed()
        #expect(state.handle(.refer(target: target), now: .zero) == [.respondToRefer(status: 400, phrase: "Bad Request (the Refer-To is not a SIP address)")])
        #expect(!state.referIn)
    }

    @Test func aReferWithoutATargetOrOutsideAnAnsweredCallIsRefused() {
        var state = Self.confirmed()
        #expect(state.handle(.refer(target: nil), now: .zero).first == .respondToRefer(status: 400, phrase: "Bad Request (the Refer-To is not a SIP address)"))
        var ringing = SIPDialogState(outgoing: false)
        _ = ringing.handle(.invite(sdp: SIPDialogStateTests.peerOffer), now: .zero)
        guard case let .respondToRefer(status, _)? = ringing.handle(.refer(target: Self.carol), now: .zero).first else {
            Issue.record("no response")
            return
        }
        #expect(status == 481)
        var over = Self.confirmed()
        _ = over.handle(.bye, now: .zero)
        #expect(over.handle(.refer(target: Self.carol), now: .zero).count == 1)
        #expect(!over.referIn)
    }

    @Test func anAttendedTransfersReplacesIsTakenOutOfTheReferTo() {
        var state = Self.confirmed()
        let referTo = "<sip:carol@192.0.2.40:5060?Replaces=abc%40192.0.2.40%3Bto-tag%3D11%3Bfrom-tag%3D22>"
        #expect(state.handle(.refer(target: referTo), now: .zero)
                == [.followTransfer(to: "sip:carol@192.0.2.40:5060", replaces: "abc@192.0.2.40;to-tag=11;from-tag=22")])
    }

    @Test func thisSidesTransferEndsTheCallWhenTheTransfereesCallIsAnswered() {
        var state = Self.confirmed()
        #expect(state.handle(.transfer(to: Self.carol), now: .zero) == [.refer(to: Self.carol)])
        #expect(state.referOut == Self.carol)
        #expect(state.handle(.transfer(to: Self.carol), now: .zero) == [.transferRefused("a transfer of this call is under way already")])
        #expect(state.handle(.referAnswered(status: 202, phrase: "Accepted"), now: .zero)
                == [.reportTransfer(status: 202, detail: "the peer takes the transfer to \(Self.carol)")])
        #expect(state.handle(.notified(body: "SIP/2.0 100 Trying\r\n"), now: .zero)
                == [.reportTransfer(status: 100, detail: "calling \(Self.carol): 100 Trying")])
        #expect(state.handle(.notified(body: "SIP/2.0 180 Ringing\r\n"), now: .zero)
                == [.reportTransfer(status: 180, detail: "calling \(Self.carol): 180 Ringing")])
        #expect(state.handle(.notified(body: "SIP/2.0 200 OK\r\n"), now: .zero)
                == [.reportTransfer(status: 200, detail: "\(Self.carol) answered"), .transferred("transferred to \(Self.carol)")])
        #expect(state.referOut == nil)
        // The call's end that follows sends the BYE.
        #expect(state.handle(.call(.end(.hangup)), now: .zero) == [.bye])
        #expect(state.handle(.notified(body: "SIP/2.0 200 OK\r\n"), now: .zero) == [], "a repeated NOTIFY is no news")
    }

    @Test func aTransferThePeerRefusesOrCannotCompleteLeavesTheCallRunning() {
        var refused = Self.confirmed()
        _ = refused.handle(.transfer(to: Self.carol), now: .zero)
        #expect(refused.handle(.referAnswered(status: 405, phrase: "Method Not Allowed"), now: .zero)
                == [.reportTransfer(status: 405, detail: "the peer refused the transfer to \(Self.carol): 405 Method Not Allowed; the call goes on")])
        #expect(refused.referOut == nil && !refused.callEnded)
        var failed = Self.confirmed()
        _ = failed.handle(.transfer(to: Self.carol), now: .zero)
        _ = failed.handle(.referAnswered(status: 202, phrase: "Accepted"), now: .zero)
        #expect(failed.handle(.notified(body: "SIP/2.0 486 Busy Here"), now: .zero)
                == [.reportTransfer(status: 486, detail: "the transfer to \(Self.carol) failed: 486 Busy Here; the call goes on")])
        #expect(!failed.callEnded && failed.phase == .confirmed)
        // Another may be tried.
        #expect(failed.handle(.transfer(to: Self.carol), now: .zero) == [.refer(to: Self.carol)])
    }

    @Test func aNotifyForNoTransferOrWithoutAStatusLineChangesNothing() {
        var state = Self.confirmed()
        #expect(state.handle(.notified(body: "SIP/2.0 200 OK"), now: .zero) == [])
        _ = state.handle(.transfer(to: Self.carol), now: .zero)
        for body in [nil, "", "garbage", "SIP/2.0 abc", "HTTP/1.1 200 OK", "SIP/2.0 999 Nine"] {
            #expect(state.handle(.notified(body: body), now: .zero) == [], "\(body ?? "nil")")
        }
        #expect(state.referOut == Self.carol)
    }

    @Test func onlyAnAnsweredCallIsTransferred() {
        var ringing = SIPDialogState(outgoing: false)
        _ = ringing.handle(.invite(sdp: SIPDialogStateTests.peerOffer), now: .zero)
        #expect(ringing.handle(.transfer(to: Self.carol), now: .zero) == [.transferRefused("only an answered call can be transferred")])
        var over = Self.confirmed()
        _ = over.handle(.bye, now: .zero)
        #expect(over.handle(.transfer(to: Self.carol), now: .zero) == [.transferRefused("only an answered call can be transferred")])
    }
}
