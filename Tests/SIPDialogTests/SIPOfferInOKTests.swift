import CallCore
import Testing
@testable import SIPDialog

/// A callee whose first offer went in its 200 (the INVITE carried none) waits for the ACK's
/// answer; one offer at a time (RFC 3311 §5.2, RFC 6337 §3.1.3): the peer's offers meanwhile
/// get 491.
@Suite struct SIPOfferInOKTests {
    static func offerInOK() -> SIPDialogState {
        var state = SIPDialogState(outgoing: false)
        _ = state.handle(.invite(sdp: nil), now: .zero)
        _ = state.handle(.call(.offer(sdp: SIPDialogStateTests.plainOffer)), now: .zero)
        _ = state.handle(.call(.candidates([], end: true)), now: .zero)
        return state
    }

    /// Before, the UPDATE's offer went to a leg still waiting for its own offer's answer, which
    /// ignored it as out of turn: the UPDATE never had a final response, and every later UPDATE
    /// offer got 491 for good.
    @Test func anUpdateOfferBeforeTheAckIsRefusedWith491AndTakenAfterIt() {
        var state = Self.offerInOK()
        #expect(state.firstOfferAwaitsAck)
        #expect(state.handle(.update(sdp: SIPDialogStateTests.peerOffer), now: .milliseconds(100))
                == [.respondToUpdate(status: 491, phrase: "Request Pending", sdp: nil)])
        #expect(!state.updateOfferOpen)
        #expect(state.handle(.ack(sdp: SIPDialogStateTests.plainAnswer), now: .milliseconds(200))
                == [.deliver(.answer(sdp: SIPDialogStateTests.plainAnswer))])
        #expect(!state.firstOfferAwaitsAck)
        // The exchange is complete: the peer's next offer is the call's to answer.
        #expect(state.handle(.update(sdp: SIPDialogStateTests.peerOffer), now: .seconds(1))
                == [.deliver(.offer(sdp: SIPDialogStateTests.peerOffer))])
    }

    @Test func aReInviteOfferBeforeTheAckIsRefusedWith491() {
        var state = Self.offerInOK()
        #expect(state.handle(.invite(sdp: SIPDialogStateTests.peerOffer), now: .milliseconds(100))
                == [.respond(status: 491, phrase: "Request Pending", sdp: nil, retryAfter: nil)])
        #expect(!state.peerReofferOpen)
    }
}
