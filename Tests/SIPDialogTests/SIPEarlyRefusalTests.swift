import CallCore
import Testing
@testable import SIPDialog

/// A refusal after an early answer: the callee took the encrypted offer (its 183 answered it),
/// so a 488 that follows is not "this phone takes no SRTP".
@Suite struct SIPEarlyRefusalTests {
    /// Before, the caller's dialog offered again in plain RTP under a new call id while its leg
    /// (whose early media ran) ignored the refusal: the call "rang" on dead media until the ring
    /// timeout and ended unanswered. Now the call fails with the peer's status.
    @Test func a488AfterAnEarlyAnswerEndsTheCallRatherThanOfferPlainRTP() {
        var state = SIPDialogStateTests.inviting()
        #expect(state.handle(.response(status: 183, phrase: "Session Progress", sdp: SIPDialogStateTests.earlyAnswer), now: .seconds(1))
                == [.deliver(.ringing), .deliver(.earlyAnswer(sdp: SIPDialogStateTests.earlyAnswer))])
        let actions = state.handle(.response(status: 488, phrase: "Not Acceptable Here", sdp: nil), now: .seconds(2))
        #expect(!actions.contains(.newDialog))
        #expect(!state.offeredPlainAfterRefusal)
        #expect(state.callEnded)
        #expect(actions.contains { "\($0)".contains("the SIP peer answered 488 Not Acceptable Here") })
        #expect(!actions.contains { "\($0)".contains("takes no SRTP") })
    }

    /// Without an early answer the refusal still reads as SRTP refused (a phone's 488).
    @Test func a488BeforeAnyAnswerStillOffersPlainRTPOnce() {
        var state = SIPDialogStateTests.inviting()
        #expect(state.handle(.response(status: 488, phrase: "Not Acceptable Here", sdp: nil), now: .seconds(1))
                == [.newDialog, .offerAgainUnencrypted(reason: "488 Not Acceptable Here")])
    }
}
