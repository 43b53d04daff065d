import Signaling
import Testing

/// The resumption handshake's decisions and its refusals' wire text, as values.
@Suite struct ResumeHandshakeTests {
    static let allowed = ResumeHandshake.Request(resumable: true, callerResumingItself: false, fromThePeer: true, tokenMatches: true)

    @Test func thePeerWithTheTokenMayResume() {
        #expect(ResumeHandshake.answer(Self.allowed) == nil)
    }

    /// In order: a call that does not resume, a crossing attempt, an asker that is not the peer,
    /// a wrong token.
    @Test func refusalsComeInOrder() {
        var request = ResumeHandshake.Request(resumable: false, callerResumingItself: true, fromThePeer: false, tokenMatches: false)
        #expect(ResumeHandshake.answer(request) == .notResumable)
        request.resumable = true
        #expect(ResumeHandshake.answer(request) == .callerResuming)
        request.callerResumingItself = false
        #expect(ResumeHandshake.answer(request) == .notYours)
        request.fromThePeer = true
        #expect(ResumeHandshake.answer(request) == .wrongToken)
        request.tokenMatches = true
        #expect(ResumeHandshake.answer(request) == nil)
    }

    /// Each refusal's text is what nodes have always written, and reads back as itself.
    @Test(arguments: [
        ResumeRefusal.notResumable, .callerResuming, .notYours, .wrongToken,
        .callGone(call: "4C1B2A7E-0000-4000-8000-000000000001", hungUpThere: false),
        .callGone(call: "4C1B2A7E-0000-4000-8000-000000000001", hungUpThere: true),
        .other("a newer node's reason"),
    ])
    func aRefusalReadsBackFromItsWireText(refusal: ResumeRefusal) {
        #expect(ResumeRefusal(reason: refusal.reason) == refusal)
    }

    @Test func theWireTextIsWhatOlderNodesWrite() {
        #expect(ResumeRefusal.wrongToken.reason == "wrong resume token")
        #expect(ResumeRefusal.notYours.reason == "this call is not yours to resume")
        #expect(ResumeRefusal.callGone(call: "X", hungUpThere: true).reason == "no call X here: it has ended (its user hung up)")
        #expect(ResumeRefusal(reason: "no call X here: it has ended") == .callGone(call: "X", hungUpThere: false))
    }

    /// The asking side: a call gone there fails (or ends as hung up, when its user hung up);
    /// every other refusal leaves the call to another try.
    @Test func whatTheAskerMakesOfARefusal() {
        #expect(ResumeHandshake.outcome(of: .callGone(call: "X", hungUpThere: true)) == .hungUp)
        #expect(ResumeHandshake.outcome(of: .callGone(call: "X", hungUpThere: false))
                == .failed("the other node refused to resume the call: no call X here: it has ended"))
        for refusal in [ResumeRefusal.notResumable, .callerResuming, .notYours, .wrongToken, .other("?")] {
            #expect(ResumeHandshake.outcome(of: refusal) == .tryElsewhere, "\(refusal)")
        }
    }
}
