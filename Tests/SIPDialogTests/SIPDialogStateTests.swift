import CallCore
import SDP
@testable import SIPDialog
import Testing

/// The SIP dialog's decisions, with no concurrency and no sofia: inputs in, actions out.
@Suite struct SIPDialogStateTests {
    static let uri = "sip:alice@192.0.2.20"

    /// This node's first offer: SRTP keyed by SDES.
    static let srtpOffer = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
        + "m=audio 40000 RTP/SAVP 111 0\r\na=rtpmap:111 opus/48000/2\r\na=rtpmap:0 PCMU/8000\r\n"
        + "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz\r\na=rtcp:40000\r\n"
    /// The same offer in plain RTP (what a phone that takes no SRTP is offered).
    static let plainOffer = "v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
        + "m=audio 40000 RTP/AVP 111 0\r\na=rtpmap:111 opus/48000/2\r\na=rtpmap:0 PCMU/8000\r\na=rtcp:40000\r\n"
    /// A phone's answer to the SRTP offer.
    static let peerAnswer = "v=0\r\no=phone 7001 7001 IN IP4 192.0.2.20\r\ns=phone\r\nc=IN IP4 192.0.2.20\r\nt=0 0\r\n"
        + "m=audio 30000 RTP/SAVP 0\r\na=rtpmap:0 PCMU/8000\r\n"
        + "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR\r\na=sendrecv\r\n"
    /// A phone's answer in plain RTP.
    static let plainAnswer = "v=0\r\no=phone 7001 7001 IN IP4 192.0.2.20\r\ns=phone\r\nc=IN IP4 192.0.2.20\r\nt=0 0\r\n"
        + "m=audio 30000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=sendrecv\r\n"
    /// The answer a 183 carries (early media: ringback from the phone's network).
    static let earlyAnswer = "v=0\r\no=gw 1 1 IN IP4 198.51.100.9\r\ns=-\r\nc=IN IP4 198.51.100.9\r\nt=0 0\r\n"
        + "m=audio 20000 RTP/SAVP 0\r\na=rtpmap:0 PCMU/8000\r\n"
        + "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:d0RmdmcmVCspeEc3QGZiNWpVLFJhQX1cfHAwJSoj\r\na=sendrecv\r\n"
    /// A phone's offer in its INVITE.
    static let peerOffer = "v=0\r\no=phone 42 42 IN IP4 192.0.2.30\r\ns=phone\r\nc=IN IP4 192.0.2.30\r\nt=0 0\r\n"
        + "m=audio 31000 RTP/SAVP 0 8 101\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:8 PCMA/8000\r\n"
        + "a=rtpmap:101 telephone-event/8000\r\na=fmtp:101 0-16\r\n"
        + "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:NzB4d1BINUAvLEw6UzF3WSJ+PSdFcGdUJShpX1Zj\r\na=sendrecv\r\n"
    /// This node's answer to the phone's offer.
    static let callAnswer = "v=0\r\no=- 5 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
        + "m=audio 40010 RTP/SAVP 0 101\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:101 telephone-event/8000\r\n"
        + "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz\r\na=sendrecv\r\n"
    /// A hold (this side's re-INVITE).
    static let holdOffer = "v=0\r\no=- 1 3 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
        + "m=audio 40000 RTP/SAVP 111 0\r\na=rtpmap:111 opus/48000/2\r\na=rtpmap:0 PCMU/8000\r\n"
        + "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz\r\na=rtcp:40000\r\na=sendonly\r\n"
    /// The phone's answer to the hold.
    static let holdAnswer = "v=0\r\no=phone 7001 7002 IN IP4 192.0.2.20\r\ns=phone\r\nc=IN IP4 192.0.2.20\r\nt=0 0\r\n"
        + "m=audio 30000 RTP/SAVP 0\r\na=rtpmap:0 PCMU/8000\r\n"
        + "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR\r\na=recvonly\r\n"
    /// The phone's hold (the peer's re-INVITE).
    static let peerHoldOffer = "v=0\r\no=phone 42 43 IN IP4 192.0.2.30\r\ns=phone\r\nc=IN IP4 192.0.2.30\r\nt=0 0\r\n"
        + "m=audio 31000 RTP/SAVP 0 101\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:101 telephone-event/8000\r\n"
        + "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:NzB4d1BINUAvLEw6UzF3WSJ+PSdFcGdUJShpX1Zj\r\na=sendonly\r\n"
    /// This node's answer to the phone's hold.
    static let callHoldAnswer = "v=0\r\no=- 5 2 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
        + "m=audio 40010 RTP/SAVP 0 101\r\na=rtpmap:0 PCMU/8000\r\na=rtpmap:101 telephone-event/8000\r\n"
        + "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz\r\na=recvonly\r\n"

    static let hostCandidate = "candidate:1 1 UDP 2015363327 192.0.2.10 50000 typ host"
    static let srflxCandidate = "candidate:2 1 UDP 1677721855 198.51.100.7 60000 typ srflx raddr 192.0.2.10 rport 50000"

    static let dtmfFive: SIPDialogInput = .info(contentType: "application/dtmf-relay", body: "Signal=5\r\nDuration=160\r\n")

    /// Feeds `inputs` at `now`; returns every action, in order.
    @discardableResult
    static func feed(_ state: inout SIPDialogState, _ inputs: [SIPDialogInput], at now: Duration = .zero) -> [SIPDialogAction] {
        inputs.flatMap { state.handle($0, now: now) }
    }

    /// An outgoing dialog whose INVITE (with `offer`, no candidates) is out, from "Bob".
    static func inviting(_ offer: String = SIPDialogStateTests.srtpOffer, encryption: MediaEncryption = .preferred,
                         seed: UInt64 = 0) -> SIPDialogState {
        var state = SIPDialogState(outgoing: true, uri: uri, mediaEncryption: encryption, seed: seed)
        feed(&state, [.call(.invite(CallInvitation(displayName: "Bob"))), .call(.offer(sdp: offer)), .call(.candidates([], end: true))])
        return state
    }

    /// An outgoing dialog the phone rang on and answered.
    static func confirmedOutgoing(seed: UInt64 = 0) -> SIPDialogState {
        var state = inviting(seed: seed)
        feed(&state, [.response(status: 180, phrase: "Ringing", sdp: nil), .response(status: 200, phrase: "OK", sdp: peerAnswer)],
             at: .seconds(2))
        return state
    }

    /// An incoming dialog whose INVITE (with the phone's offer) has been taken: it rings.
    static func ringingIncoming(seed: UInt64 = 0) -> SIPDialogState {
        var state = SIPDialogState(outgoing: false, seed: seed)
        feed(&state, [.invite(sdp: peerOffer), .call(.ringing)])
        return state
    }

    /// An incoming dialog the call answered (its 200 is out).
    static func confirmedIncoming(seed: UInt64 = 0) -> SIPDialogState {
        var state = ringingIncoming(seed: seed)
        feed(&state, [.call(.answer(sdp: callAnswer)), .call(.candidates([], end: true)), .ack(sdp: nil)], at: .seconds(2))
        return state
    }

    /// The error text when `actions` tell the call it failed: exactly an error, then `.end(.failed)`.
    static func failure(_ actions: [SIPDialogAction]) -> String? {
        guard actions.count == 2, case let .deliver(.error(text)) = actions[0], actions[1] == .deliver(.end(.failed)) else { return nil }
        return text
    }

    /// The glare wait a confirmed dialog arms when its hold's re-INVITE is refused with 491.
    static func glareWait(outgoing: Bool, seed: UInt64) -> Duration? {
        var state = outgoing ? confirmedOutgoing(seed: seed) : confirmedIncoming(seed: seed)
        feed(&state, [.call(.offer(sdp: holdOffer))], at: .seconds(10))
        let actions = state.handle(.response(status: 491, phrase: "Request Pending", sdp: nil), now: .seconds(10))
        guard actions.count == 1, case let .arm(.glareRetry, after: wait) = actions[0] else { return nil }
        return wait
    }

    static func milliseconds(_ duration: Duration) -> Int64 {
        duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
    }

    // MARK: - Outgoing: the INVITE and its answer

    @Test func anOutgoingOfferWaitsForTheEndOfItsCandidatesBeforeTheInvite() {
        var state = SIPDialogState(outgoing: true, uri: Self.uri)
        #expect(state.phase == .idle)
        #expect(state.handle(.call(.invite(CallInvitation(displayName: "Bob"))), now: .zero) == [])
        // SIP has no trickle: the INVITE waits for every candidate.
        #expect(state.handle(.call(.offer(sdp: Self.srtpOffer)), now: .zero) == [])
        #expect(state.handle(.call(.candidates([Self.hostCandidate], end: false)), now: .zero) == [])
        #expect(state.phase == .idle)
        #expect(state.waiting?.candidates == [Self.hostCandidate])
        let sdp = SIPWire.adding([Self.hostCandidate, Self.srflxCandidate], to: Self.srtpOffer)
        #expect(state.handle(.call(.candidates([Self.srflxCandidate], end: true)), now: .milliseconds(300))
                == [.invite(to: Self.uri, displayName: "Bob", sdp: sdp)])
        #expect(sdp.contains("a=\(Self.hostCandidate)\r\n") && sdp.contains("a=\(Self.srflxCandidate)\r\n"))
        #expect(sdp.contains("a=end-of-candidates\r\n"))
        #expect(state.phase == .early)
        #expect(state.waiting == nil)
        #expect(state.offeredEncrypted)
        // Candidates after the INVITE have nowhere to go.
        #expect(state.handle(.call(.candidates([Self.hostCandidate], end: true)), now: .seconds(1)) == [])
    }

    @Test func anOfferWithoutCandidatesGoesOutVerbatimAndWithoutAName() {
        var state = SIPDialogState(outgoing: true, uri: Self.uri, mediaEncryption: .off)
        #expect(Self.feed(&state, [.call(.offer(sdp: Self.plainOffer)), .call(.candidates([], end: true))])
                == [.invite(to: Self.uri, displayName: nil, sdp: Self.plainOffer)])
        #expect(state.phase == .early)
        #expect(!state.offeredEncrypted)
    }

    @Test func ringingIsToldOnceFor180Or183AndNotFor100() {
        var state = Self.inviting()
        #expect(state.handle(.response(status: 100, phrase: "Trying", sdp: nil), now: .zero) == [])
        #expect(state.handle(.response(status: 180, phrase: "Ringing", sdp: nil), now: .zero) == [.deliver(.ringing)])
        #expect(state.handle(.response(status: 183, phrase: "Session Progress", sdp: nil), now: .zero) == [])
        #expect(state.handle(.response(status: 180, phrase: "Ringing", sdp: nil), now: .zero) == [])
        #expect(state.phase == .early)
        #expect(state.rang)

        var progressFirst = Self.inviting()
        #expect(progressFirst.handle(.response(status: 183, phrase: "Session Progress", sdp: nil), now: .zero) == [.deliver(.ringing)])
        #expect(progressFirst.handle(.response(status: 180, phrase: "Ringing", sdp: nil), now: .zero) == [])
    }

    /// Early media: a 183's answer starts the call's media before the callee takes the call,
    /// and stands for the 200 that may carry none.
    @Test func a183sAnswerIsEarlyMediaAndStandsForA200WithoutOne() {
        var state = Self.inviting()
        #expect(state.handle(.response(status: 183, phrase: "Session Progress", sdp: Self.earlyAnswer), now: .seconds(1))
                == [.deliver(.ringing), .deliver(.earlyAnswer(sdp: Self.earlyAnswer))])
        #expect(state.earlyAnswer == Self.earlyAnswer)
        #expect(state.phase == .early)
        // A second 18x with SDP (a repeated 183, a 180 with the same answer) starts nothing new.
        #expect(state.handle(.response(status: 180, phrase: "Ringing", sdp: Self.earlyAnswer), now: .seconds(2)) == [])
        #expect(state.handle(.response(status: 200, phrase: "OK", sdp: nil), now: .seconds(4)) == [.deliver(.accepted)])
        #expect(state.phase == .confirmed)
        #expect(state.confirmedAt == .seconds(4))
        // A 100 carries no answer, even with a body.
        var trying = Self.inviting()
        #expect(trying.handle(.response(status: 100, phrase: "Trying", sdp: Self.earlyAnswer), now: .zero) == [])
        #expect(trying.earlyAnswer == nil)
    }

    /// The offer has one answer, the first SDP in a response to the INVITE (RFC 3261 §13.2.1):
    /// a 200 with other SDP after a 183's is noted and takes the call on the 183's.
    @Test func theFirstAnswerStandsOverA200sOther() {
        var state = Self.inviting()
        Self.feed(&state, [.response(status: 183, phrase: "Session Progress", sdp: Self.earlyAnswer)])
        let actions = state.handle(.response(status: 200, phrase: "OK", sdp: Self.peerAnswer), now: .seconds(3))
        #expect(actions.last == .deliver(.accepted))
        #expect(actions.count == 2, "noted: \(actions)")
        #expect(state.phase == .confirmed)
        // A 200 repeated (a retransmission the stack let through) answers nothing.
        #expect(state.handle(.response(status: 200, phrase: "OK", sdp: Self.peerAnswer), now: .seconds(3)) == [])
        // The same SDP again in the 200 (what phones do) is no news.
        var same = Self.inviting()
        Self.feed(&same, [.response(status: 183, phrase: "Session Progress", sdp: Self.earlyAnswer)])
        #expect(same.handle(.response(status: 200, phrase: "OK", sdp: Self.earlyAnswer), now: .seconds(3)) == [.deliver(.accepted)])
    }

    /// A callee's greeting before it answers (``CallSignal/earlyAnswer(sdp:)``): its answer goes
    /// in a 183 once its candidates are in, and the 200 repeats it when the call is taken.
    @Test func aCalleesEarlyAnswerGoesInA183AndTheSameAnswerInThe200() {
        var state = SIPDialogState(outgoing: false)
        #expect(state.handle(.invite(sdp: Self.peerOffer), now: .zero) == [.deliver(.offer(sdp: Self.peerOffer))])
        _ = state.handle(.call(.ringing), now: .zero)
        #expect(state.handle(.call(.earlyAnswer(sdp: Self.callAnswer)), now: .zero) == [])
        let sent = state.handle(.call(.candidates([], end: true)), now: .zero)
        guard case let .respond(status, _, sdp?, _) = sent.first, sent.count == 1 else {
            Issue.record("expected one 183 with SDP: \(sent)")
            return
        }
        #expect(status == 183)
        #expect(state.phase == .early && state.earlyAnswer == sdp)
        // A second early answer, or a plain answer now, is out of turn.
        #expect(state.handle(.call(.earlyAnswer(sdp: Self.callAnswer)), now: .zero).allSatisfy { if case .note = $0 { true } else { false } })
        #expect(state.handle(.call(.answer(sdp: Self.callAnswer)), now: .zero).allSatisfy { if case .note = $0 { true } else { false } })
        #expect(state.handle(.call(.accepted), now: .seconds(5)) == [.respond(status: 200, phrase: nil, sdp: sdp, retryAfter: nil)])
        #expect(state.phase == .confirmed)
        #expect(state.handle(.call(.accepted), now: .seconds(6)) == [], "taken once")
    }

    @Test func aCalleeTakingTheCallBeforeIts183LeftAnswersIn200Only() {
        var state = SIPDialogState(outgoing: false)
        _ = state.handle(.invite(sdp: Self.peerOffer), now: .zero)
        _ = state.handle(.call(.earlyAnswer(sdp: Self.callAnswer)), now: .zero)
        #expect(state.handle(.call(.accepted), now: .zero) == [])
        let sent = state.handle(.call(.candidates([Self.hostCandidate], end: true)), now: .zero)
        guard case let .respond(status, _, sdp?, _) = sent.first else {
            Issue.record("expected the 200: \(sent)")
            return
        }
        #expect(status == 200 && sdp.contains("192.0.2.10 50000"))
        #expect(state.phase == .confirmed)
    }

    @Test func aCalleeDecliningAfterItsGreetingRefusesTheInvite() {
        var state = SIPDialogState(outgoing: false)
        _ = state.handle(.invite(sdp: Self.peerOffer), now: .zero)
        _ = state.handle(.call(.earlyAnswer(sdp: Self.callAnswer)), now: .zero)
        _ = state.handle(.call(.candidates([], end: true)), now: .zero)
        let declined = state.handle(.call(.reject(.declined)), now: .seconds(2))
        guard case let .respond(status, _, nil, _) = declined.first else {
            Issue.record("expected a refusal: \(declined)")
            return
        }
        #expect(status == 603)
        #expect(state.handle(.call(.accepted), now: .seconds(3)) == [], "over")
    }

    @Test func a200WithoutAnyAnswerIsByedAndFailsTheCall() throws {
        var state = Self.inviting()
        Self.feed(&state, [.response(status: 180, phrase: "Ringing", sdp: nil)])
        let actions = state.handle(.response(status: 200, phrase: "OK", sdp: nil), now: .seconds(3))
        #expect(actions.count == 3)
        #expect(actions.first == .bye)
        let text = try #require(Self.failure(Array(actions.dropFirst())), "\(actions)")
        #expect(text.contains("without SDP"))
        #expect(state.phase == .terminating)
        #expect(state.callEnded)
        // The call ended once: nothing more is told to it.
        #expect(Self.feed(&state, [.bye, .response(status: 200, phrase: "OK", sdp: Self.peerAnswer), Self.dtmfFive]) == [])
    }

    // MARK: - Outgoing: refusals of the first INVITE

    @Test(arguments: [(486, "Busy Here"), (600, "Busy Everywhere")])
    func aBusyPhoneRejectsTheCallAsBusy(status: Int, phrase: String) {
        var state = Self.inviting()
        #expect(state.handle(.response(status: status, phrase: phrase, sdp: nil), now: .seconds(1)) == [.deliver(.reject(.busy))])
        #expect(state.phase == .terminating)
        #expect(state.callEnded)
        #expect(Self.feed(&state, [.bye, .response(status: 200, phrase: "OK", sdp: Self.peerAnswer), Self.dtmfFive]) == [])
    }

    @Test func a603DeclinesTheCall() {
        var state = Self.inviting()
        Self.feed(&state, [.response(status: 180, phrase: "Ringing", sdp: nil)])
        #expect(state.handle(.response(status: 603, phrase: "Decline", sdp: nil), now: .seconds(5)) == [.deliver(.reject(.declined))])
        #expect(state.phase == .terminating)
        #expect(Self.feed(&state, [.bye, .response(status: 603, phrase: "Decline", sdp: nil), Self.dtmfFive]) == [])
    }

    /// The refusals a node gives end the call as refused, with their reason, not as failed; a
    /// 480 or 403 that names none is a registrar's or a proxy's, and says its status.
    @Test(arguments: [(480, "Temporarily Unavailable (do not disturb)", RejectReason?.some(.doNotDisturb)),
                      (480, "Temporarily Unavailable", nil),
                      (403, "Forbidden (blocked)", .blocked),
                      (403, "Forbidden (unknown caller)", .unknownCaller),
                      (403, "Forbidden", nil)])
    func aRefusalEndsTheCallAsRefusedWithItsReason(status: Int, phrase: String, reason: RejectReason?) throws {
        var state = Self.inviting()
        let actions = state.handle(.response(status: status, phrase: phrase, sdp: nil), now: .seconds(1))
        if let reason {
            #expect(actions == [.deliver(.reject(reason))])
        } else {
            #expect(try #require(Self.failure(actions), "\(actions)").contains("\(status) \(phrase)"))
        }
        #expect(state.phase == .terminating && state.callEnded)
    }

    /// A 487 this side's CANCEL did not ask for: the callee ended the call before its answer
    /// went out (a node whose user hung up as it answered). The call ends as the peer's hang-up,
    /// not as failed; after a CANCEL of this side's, the 487 tells the call nothing more.
    @Test func aCalleeThatEndsTheCallBeforeItsAnswerEndsItAsItsHangUp() {
        var state = Self.inviting()
        #expect(state.handle(.response(status: 487, phrase: "Request Terminated", sdp: nil), now: .seconds(1)) == [.deliver(.end(.hangup))])
        #expect(state.phase == .terminating && state.callEnded)
        var cancelling = Self.inviting()
        #expect(cancelling.handle(.call(.end(.hangup)), now: .seconds(1)) == [.cancel])
        #expect(cancelling.handle(.response(status: 487, phrase: "Request Terminated", sdp: nil), now: .seconds(1)) == [])
    }

    @Test(arguments: [(408, "Request Timeout"), (503, "Service Unavailable")])
    func nothingAnsweringAtTheAddressFailsTheCall(status: Int, phrase: String) throws {
        var state = Self.inviting()
        let actions = state.handle(.response(status: status, phrase: phrase, sdp: nil), now: .seconds(32))
        let text = try #require(Self.failure(actions), "\(actions)")
        #expect(text.contains("\(status) \(phrase)"))
        #expect(text.contains("did not take the call"))
        #expect(state.phase == .terminating)
        #expect(Self.feed(&state, [.bye, .response(status: 200, phrase: "OK", sdp: Self.peerAnswer), Self.dtmfFive]) == [])
    }

    @Test func anyOtherRefusalFailsTheCallWithItsStatus() throws {
        var state = Self.inviting()
        let actions = state.handle(.response(status: 404, phrase: "Not Found", sdp: nil), now: .seconds(1))
        let text = try #require(Self.failure(actions), "\(actions)")
        #expect(text.contains("404 Not Found"))
        #expect(state.phase == .terminating)
        #expect(state.callEnded)
        #expect(Self.feed(&state, [.bye, .response(status: 404, phrase: "Not Found", sdp: nil), Self.dtmfFive]) == [])
        // Nothing was on the wire to end: the stack's end of the dialog is not a lost call.
        #expect(state.handle(.terminated, now: .seconds(1)) == [])
        #expect(state.phase == .terminated)
    }

    // MARK: - Outgoing: an encrypted offer refused

    @Test func aRefusedEncryptedOfferIsMadeAgainInPlainRTPOnce() throws {
        var state = Self.inviting()
        #expect(state.offeredEncrypted)
        #expect(state.handle(.response(status: 488, phrase: "Not Acceptable Here", sdp: nil), now: .seconds(1))
                == [.newDialog, .offerAgainUnencrypted(reason: "488 Not Acceptable Here")])
        #expect(state.phase == .idle)
        #expect(!state.onWire)
        #expect(!state.callEnded)
        #expect(state.offeredPlainAfterRefusal)
        // The old dialog's end is not the call's: its successor carries it.
        #expect(state.handle(.terminated, now: .seconds(1)) == [])
        #expect(state.phase == .idle)
        #expect(!state.callEnded)
        // The plain offer goes out in a new INVITE, once its candidates are in.
        #expect(state.handle(.call(.offer(sdp: Self.plainOffer)), now: .seconds(1)) == [])
        #expect(state.handle(.call(.candidates([], end: true)), now: .seconds(1))
                == [.invite(to: Self.uri, displayName: "Bob", sdp: Self.plainOffer)])
        #expect(state.phase == .early)
        #expect(!state.offeredEncrypted)
        // Refused again, in plain RTP: the call ends.
        let actions = state.handle(.response(status: 488, phrase: "Not Acceptable Here", sdp: nil), now: .seconds(2))
        let text = try #require(Self.failure(actions), "\(actions)")
        #expect(text.contains("488"))
        #expect(state.phase == .terminating)
        #expect(state.callEnded)
        #expect(Self.feed(&state, [.bye, .call(.offer(sdp: Self.plainOffer)), .call(.candidates([], end: true))]) == [])
    }

    @Test(arguments: [(415, "Unsupported Media Type"), (606, "Not Acceptable")])
    func otherRefusalsOfSRTPAreAlsoMadeAgainInPlainRTP(status: Int, phrase: String) {
        var state = Self.inviting()
        #expect(state.handle(.response(status: status, phrase: phrase, sdp: nil), now: .seconds(1))
                == [.newDialog, .offerAgainUnencrypted(reason: "\(status) \(phrase)")])
        #expect(state.phase == .idle)
    }

    @Test func theOfferMadeAgainInPlainRTPIsAnsweredAsAnyOther() {
        var state = Self.inviting()
        Self.feed(&state, [.response(status: 488, phrase: "Not Acceptable Here", sdp: nil), .terminated,
                           .call(.offer(sdp: Self.plainOffer)), .call(.candidates([], end: true))])
        #expect(state.handle(.response(status: 180, phrase: "Ringing", sdp: nil), now: .seconds(2)) == [.deliver(.ringing)])
        #expect(state.handle(.response(status: 200, phrase: "OK", sdp: Self.plainAnswer), now: .seconds(3))
                == [.deliver(.answer(sdp: Self.plainAnswer))])
        #expect(state.phase == .confirmed)
        #expect(state.handle(.terminated, now: .seconds(9)) == [.signalingLost("the SIP dialog ended")])
    }

    @Test func aRefusalOfSRTPEndsTheCallWhereSRTPIsRequired() throws {
        var state = Self.inviting(encryption: .required)
        let actions = state.handle(.response(status: 488, phrase: "Not Acceptable Here", sdp: nil), now: .seconds(1))
        let text = try #require(Self.failure(actions), "\(actions)")
        #expect(text.contains("SRTP"))
        #expect(state.phase == .terminating)
        #expect(!state.offeredPlainAfterRefusal)
    }

    @Test(arguments: [MediaEncryption.off, .preferred])
    func aRefusedPlainOfferEndsTheCall(encryption: MediaEncryption) throws {
        var state = Self.inviting(Self.plainOffer, encryption: encryption)
        #expect(!state.offeredEncrypted)
        let actions = state.handle(.response(status: 488, phrase: "Not Acceptable Here", sdp: nil), now: .seconds(1))
        let text = try #require(Self.failure(actions), "\(actions)")
        #expect(text.contains("488 Not Acceptable Here"))
        #expect(state.phase == .terminating)
        #expect(!state.offeredPlainAfterRefusal)
    }

    /// A 488 or 415 to a plain offer (under `.off`, or the plain offer made again under `.preferred`)
    /// is not told as "it takes no SRTP": that would send whoever reads the failure the wrong way.
    @Test(arguments: [MediaEncryption.off, .preferred])
    func aRefusedPlainOfferIsNotBlamedOnRequiredSRTP(encryption: MediaEncryption) throws {
        var state = Self.inviting(Self.plainOffer, encryption: encryption)
        let actions = state.handle(.response(status: 488, phrase: "Not Acceptable Here", sdp: nil), now: .seconds(1))
        let text = try #require(Self.failure(actions), "\(actions)")
        #expect(!text.contains("requires"), "\(text)")
    }

    // MARK: - Outgoing: the caller's end

    @Test func anOutgoingCallEndedWhileEarlyIsCancelled() {
        var state = Self.inviting()
        Self.feed(&state, [.response(status: 180, phrase: "Ringing", sdp: nil)])
        #expect(state.handle(.call(.end(.hangup)), now: .seconds(4)) == [.cancel])
        #expect(state.phase == .terminating)
        #expect(state.onWire)
        #expect(state.handle(.call(.end(.hangup)), now: .seconds(4)) == [])
        // The INVITE's 487 and the dialog's end tell the call nothing more.
        #expect(state.handle(.response(status: 487, phrase: "Request Terminated", sdp: nil), now: .seconds(4)) == [])
        #expect(state.handle(.terminated, now: .seconds(4)) == [])
        #expect(state.phase == .terminated)
        #expect(!state.onWire)
    }

    /// A 200 that crosses this side's CANCEL establishes the dialog anyway (RFC 3261 §9.1, §15): the
    /// stack ACKs it, and the value ends it with a BYE, once.
    @Test func a200CrossingOurCancelIsByed() {
        var state = Self.inviting()
        Self.feed(&state, [.response(status: 180, phrase: "Ringing", sdp: nil), .call(.end(.hangup))])
        #expect(state.handle(.response(status: 200, phrase: "OK", sdp: Self.peerAnswer), now: .seconds(4)) == [.bye])
        #expect(state.phase == .terminating)
    }

    @Test func anOutgoingCallEndedBeforeItsInviteSendsNothing() {
        var state = SIPDialogState(outgoing: true, uri: Self.uri)
        Self.feed(&state, [.call(.offer(sdp: Self.srtpOffer)), .call(.candidates([Self.hostCandidate], end: false))])
        #expect(state.handle(.call(.end(.hangup)), now: .zero) == [])
        #expect(state.phase == .terminated)
        #expect(state.callEnded)
        #expect(!state.onWire)
        // The offer that was waiting is gone with it.
        #expect(state.handle(.call(.candidates([], end: true)), now: .zero) == [])
        #expect(state.handle(.terminated, now: .zero) == [])
    }

    // MARK: - Incoming

    @Test func anIncomingInvitesOfferIsDeliveredAndTheAnswerGoesInA200() {
        var state = SIPDialogState(outgoing: false)
        #expect(state.phase == .early)
        #expect(state.onWire)
        #expect(state.handle(.invite(sdp: Self.peerOffer), now: .zero) == [.deliver(.offer(sdp: Self.peerOffer))])
        #expect(state.invited)
        #expect(state.handle(.call(.ringing), now: .zero) == [.respond(status: 180, phrase: "Ringing", sdp: nil, retryAfter: nil)])
        #expect(state.handle(.call(.answer(sdp: Self.callAnswer)), now: .seconds(3)) == [])
        #expect(state.handle(.call(.candidates([Self.hostCandidate], end: false)), now: .seconds(3)) == [])
        #expect(state.phase == .early)
        #expect(state.handle(.call(.candidates([], end: true)), now: .seconds(3))
                == [.respond(status: 200, phrase: nil, sdp: SIPWire.adding([Self.hostCandidate], to: Self.callAnswer), retryAfter: nil)])
        #expect(state.phase == .confirmed)
        // The ACK of an answered offer carries nothing for the call.
        #expect(state.handle(.ack(sdp: nil), now: .seconds(3)) == [])
    }

    @Test func anInviteWithoutAnOfferIsAnsweredWithTheCallsOfferAndItsAckCarriesTheAnswer() {
        var state = SIPDialogState(outgoing: false)
        #expect(state.handle(.invite(sdp: nil), now: .zero) == [])
        #expect(state.phase == .early)
        // The call's offer goes in the 200, with its candidates.
        #expect(state.handle(.call(.offer(sdp: Self.plainOffer)), now: .zero) == [])
        #expect(state.waiting?.carrier == .ok)
        #expect(state.handle(.call(.candidates([], end: true)), now: .zero)
                == [.respond(status: 200, phrase: nil, sdp: Self.plainOffer, retryAfter: nil)])
        #expect(state.phase == .confirmed)
        #expect(state.handle(.ack(sdp: Self.plainAnswer), now: .seconds(1)) == [.deliver(.answer(sdp: Self.plainAnswer))])
        #expect(state.phase == .confirmed)
    }

    @Test(arguments: [(RejectReason.busy, 486, "Busy Here", Int?.none),
                      (.declined, 603, "Decline", nil),
                      (.doNotDisturb, 480, "Temporarily Unavailable (do not disturb)", nil),
                      (.blocked, 403, "Forbidden (blocked)", nil),
                      (.unknownCaller, 403, "Forbidden (unknown caller)", nil),
                      (.draining, 503, "Service Unavailable (draining)", 60)])
    func aRefusedIncomingCallIsAnsweredWithItsStatus(reason: RejectReason, status: Int, phrase: String, retryAfter: Int?) {
        var state = Self.ringingIncoming()
        #expect(state.handle(.call(.reject(reason)), now: .seconds(1))
                == [.respond(status: status, phrase: phrase, sdp: nil, retryAfter: retryAfter)])
        #expect(state.phase == .terminating)
        #expect(state.callEnded)
        #expect(Self.feed(&state, [.call(.reject(reason)), .call(.end(.hangup)), .cancel(reason: nil), .bye]) == [])
    }

    @Test(arguments: [(HangupReason.hangup, 487, "Request Terminated"),
                      (.timeout, 480, "Temporarily Unavailable"),
                      (.shutdown, 503, "Service Unavailable")])
    func anIncomingCallEndedBeforeItsAnswerIsAnsweredWithItsStatus(reason: HangupReason, status: Int, phrase: String) {
        var state = Self.ringingIncoming()
        #expect(state.handle(.call(.end(reason)), now: .seconds(30))
                == [.respond(status: status, phrase: phrase, sdp: nil, retryAfter: nil)])
        #expect(state.phase == .terminating)
        #expect(state.handle(.call(.end(reason)), now: .seconds(30)) == [])
    }

    /// An unanswered incoming call that fails here says why in its status: 488 when the
    /// caller's offer could not be taken (its SDP), 500 for this node's own failure (here its
    /// ICE could not gather). A caller that offered SRTP reads a 488 as "no SRTP here" and
    /// offers plain RTP; a 500 fails its call, encrypted or not (a node's failure to gather
    /// made a caller call it again unencrypted).
    @Test func anIncomingCallThatFailsHereIsRefusedWith488OnlyForItsOffer() throws {
        var refused = Self.ringingIncoming()
        Self.feed(&refused, [.call(.error(NegotiationError("no codec in common").description))])
        #expect(refused.handle(.call(.end(.failed)), now: .seconds(1)) == [.respond(status: 488, phrase: "Not Acceptable Here", sdp: nil, retryAfter: nil)])
        var failed = Self.ringingIncoming()
        Self.feed(&failed, [.call(.error("libnice nice_agent_gather_candidates failed: the host has no address to gather on"))])
        let actions = failed.handle(.call(.end(.failed)), now: .seconds(1))
        #expect(actions == [.respond(status: 500, phrase: "Server Internal Error (the call failed here)", sdp: nil, retryAfter: nil)])
        var unexplained = Self.ringingIncoming()
        #expect(unexplained.handle(.call(.end(.failed)), now: .seconds(1)).first == actions.first)

        var caller = Self.inviting()
        let read = caller.handle(.response(status: 500, phrase: "Server Internal Error (the call failed here)", sdp: nil), now: .seconds(1))
        #expect(try #require(Self.failure(read), "\(read)").contains("500"))
    }

    @Test func anIncomingCallEndedWhileItsAnswerWaitsForCandidatesSendsNoAnswer() {
        var state = Self.ringingIncoming()
        Self.feed(&state, [.call(.answer(sdp: Self.callAnswer))])
        #expect(state.handle(.call(.end(.hangup)), now: .seconds(2))
                == [.respond(status: 487, phrase: "Request Terminated", sdp: nil, retryAfter: nil)])
        #expect(state.handle(.call(.candidates([], end: true)), now: .seconds(2)) == [])
        #expect(state.phase == .terminating)
    }

    /// The caller gives up (or hangs up, or the stack ends the dialog) between the callee's answer
    /// and the end of its candidates: the 200 held for them never goes out, and the dialog stays
    /// ended.
    @Test(arguments: [SIPDialogInput.cancel(reason: nil), .bye, .terminated])
    func anAnswerWaitingForCandidatesIsDroppedWhenThePeerEndsTheCall(_ end: SIPDialogInput) {
        var state = Self.ringingIncoming()
        Self.feed(&state, [.call(.answer(sdp: Self.callAnswer)), .call(.candidates([Self.hostCandidate], end: false))])
        let phase = { (state: SIPDialogState) in state.phase == .terminating || state.phase == .terminated }
        #expect(!state.handle(end, now: .seconds(2)).isEmpty)
        #expect(phase(state))
        #expect(state.handle(.call(.candidates([Self.srflxCandidate], end: true)), now: .seconds(2)) == [])
        #expect(phase(state), "the dialog went back to \(state.phase) after the call ended")
    }

    @Test func aCancelSaysWhetherAnotherDeviceAnsweredAndEndsTheCallOnce() {
        var state = Self.ringingIncoming()
        #expect(state.handle(.cancel(reason: "SIP;cause=200;text=x"), now: .seconds(2)) == [.deliver(.end(.answeredElsewhere))])
        #expect(state.phase == .terminating)
        #expect(Self.feed(&state, [.cancel(reason: nil), .call(.answer(sdp: Self.callAnswer)), .call(.candidates([], end: true)),
                                   .call(.end(.hangup)), .bye]) == [])
        #expect(state.handle(.terminated, now: .seconds(2)) == [])
        #expect(state.phase == .terminated)

        var gaveUp = Self.ringingIncoming()
        #expect(gaveUp.handle(.cancel(reason: nil), now: .seconds(2)) == [.deliver(.end(.hangup))])
    }

    /// RFC 3261 §9.2: a CANCEL for a request already answered with a final response has no effect (the
    /// caller ends the session with BYE), whether or not the stack reports it.
    @Test func aCancelAfterThe200HasNoEffect() {
        var state = Self.confirmedIncoming()
        #expect(state.handle(.cancel(reason: nil), now: .seconds(3)) == [])
        #expect(state.phase == .confirmed)
        #expect(state.handle(.bye, now: .seconds(9)) == [.deliver(.end(.hangup))])
    }

    /// A CANCEL the stack reports after this side decided its 200 and before the ACK is one the
    /// stack took first (it reports on its own thread): it answered the INVITE 487, the 200 never
    /// left, and the call ends as the caller's hang-up, not as a dialog lost. After the ACK, or
    /// for a caller, a CANCEL still changes nothing.
    @Test func aCancelTheStackTookBeforeThe200LeftEndsTheCall() {
        var answered = Self.ringingIncoming()
        _ = Self.feed(&answered, [.call(.answer(sdp: Self.callAnswer)), .call(.candidates([], end: true))], at: .seconds(2))
        #expect(answered.phase == .confirmed && answered.firstAckAwaited)
        #expect(answered.handle(.cancel(reason: "SIP;cause=200;text=Call completed elsewhere"), now: .seconds(2))
                    == [.deliver(.end(.answeredElsewhere))])
        #expect(answered.phase == .terminating)
        // Its end then comes from the stack and tells the call nothing more.
        #expect(Self.feed(&answered, [.cancel(reason: nil), .call(.end(.hangup)), .terminated], at: .seconds(2)) == [])
        #expect(answered.phase == .terminated)

        // The early-media callee's 200 (the 183's answer again) likewise.
        var greeting = SIPDialogState(outgoing: false)
        _ = Self.feed(&greeting, [.invite(sdp: Self.peerOffer), .call(.earlyAnswer(sdp: Self.callAnswer)), .call(.candidates([], end: true))])
        #expect(greeting.handle(.call(.accepted), now: .seconds(1)).count == 1)
        #expect(greeting.handle(.cancel(reason: nil), now: .seconds(1)) == [.deliver(.end(.hangup))])

        // Once acknowledged, the 200 left: a CANCEL is the stack's alone.
        var acknowledged = Self.confirmedIncoming()
        #expect(!acknowledged.firstAckAwaited)
        #expect(acknowledged.handle(.cancel(reason: nil), now: .seconds(3)) == [])
        #expect(acknowledged.phase == .confirmed)
    }

    @Test func aSecondInviteBeforeTheDialogIsConfirmedIsLeftToTheStack() {
        var state = Self.ringingIncoming()
        #expect(state.handle(.invite(sdp: Self.peerOffer), now: .seconds(1))
                == [.note("a second INVITE before the dialog was confirmed (the stack answers it)")])
        #expect(state.phase == .early)
    }

    @Test func callSignalsThatDoNotFitThePhaseAreDroppedOrNoted() {
        var outgoing = Self.inviting()
        #expect(outgoing.handle(.call(.offer(sdp: Self.holdOffer)), now: .zero) == [.note("an offer while the dialog is early (dropped)")])
        #expect(outgoing.handle(.call(.answer(sdp: Self.callAnswer)), now: .zero) == [.note("an answer with no offer to answer (dropped)")])
        // Only a callee rings or refuses.
        #expect(Self.feed(&outgoing, [.call(.ringing), .call(.reject(.busy))]) == [])
        #expect(outgoing.phase == .early)
        #expect(!outgoing.callEnded)

        var confirmed = Self.confirmedIncoming()
        #expect(Self.feed(&confirmed, [.call(.ringing), .call(.reject(.busy))]) == [])
        #expect(confirmed.phase == .confirmed)
    }

    // MARK: - Confirmed: re-INVITEs

    @Test func aConfirmedCallsOfferGoesInAReinviteAndItsAnswerIsDelivered() {
        var state = Self.confirmedOutgoing()
        #expect(state.handle(.call(.offer(sdp: Self.holdOffer)), now: .seconds(10)) == [.reinvite(sdp: Self.holdOffer)])
        #expect(state.reoffer == Self.holdOffer)
        #expect(state.handle(.response(status: 100, phrase: "Trying", sdp: nil), now: .seconds(10)) == [])
        #expect(state.handle(.response(status: 200, phrase: "OK", sdp: Self.holdAnswer), now: .seconds(10))
                == [.deliver(.answer(sdp: Self.holdAnswer))])
        #expect(state.reoffer == nil)
        #expect(state.phase == .confirmed)
        // A repeated 200 has no offer waiting for it.
        #expect(state.handle(.response(status: 200, phrase: "OK", sdp: Self.holdAnswer), now: .seconds(10)) == [])
    }

    @Test func aReinviteAnsweredWithoutSDPIsNoted() {
        var state = Self.confirmedIncoming()
        Self.feed(&state, [.call(.offer(sdp: Self.holdOffer))])
        #expect(state.handle(.response(status: 200, phrase: "OK", sdp: nil), now: .seconds(10))
                == [.note("the peer answered a re-INVITE without SDP")])
        #expect(state.phase == .confirmed)
    }

    @Test func aPeersReinviteIsDeliveredAndTheCallsAnswerGoesInIts200() {
        var state = Self.confirmedIncoming()
        #expect(state.handle(.invite(sdp: Self.peerHoldOffer), now: .seconds(10)) == [.deliver(.offer(sdp: Self.peerHoldOffer))])
        #expect(state.peerReofferOpen)
        #expect(state.handle(.call(.answer(sdp: Self.callHoldAnswer)), now: .seconds(10))
                == [.respond(status: 200, phrase: nil, sdp: Self.callHoldAnswer, retryAfter: nil)])
        #expect(!state.peerReofferOpen)
        #expect(state.handle(.call(.answer(sdp: Self.callHoldAnswer)), now: .seconds(10))
                == [.note("an answer with no re-INVITE to answer (dropped)")])
        #expect(state.phase == .confirmed)
    }

    @Test func anAnswerWithNoReinviteOpenIsNoted() {
        var state = Self.confirmedOutgoing()
        #expect(state.handle(.call(.answer(sdp: Self.callAnswer)), now: .seconds(10))
                == [.note("an answer with no re-INVITE to answer (dropped)")])
    }

    /// RFC 3261 §14.2 lets a re-INVITE come without an offer (some PBXes refresh sessions or
    /// move media that way): the 200 offers the session as it stands here — the SDP this side
    /// last sent (RFC 6337 §5.3) — and the ACK's answer goes to the call as its peer's
    /// description, as a re-offer would; the call's answer to it stays here (the exchange is
    /// complete on the wire).
    @Test func aReinviteWithoutAnOfferGetsTheSessionAsItStandsAndTheAckAnswers() throws {
        var state = Self.confirmedOutgoing()
        let offered = try #require(state.lastLocalSDP)
        #expect(offered.contains("m=audio"), "\(offered)")
        #expect(state.handle(.invite(sdp: nil), now: .seconds(10)) == [.respond(status: 200, phrase: nil, sdp: offered, retryAfter: nil)])
        #expect(state.answerInAck && !state.peerReofferOpen)
        #expect(state.handle(.ack(sdp: Self.peerHoldOffer), now: .seconds(10)) == [.deliver(.offer(sdp: Self.peerHoldOffer))])
        #expect(state.handle(.call(.answer(sdp: Self.callHoldAnswer)), now: .seconds(10)) == [.note("the call took the answer in the peer's ACK")])
        #expect(state.phase == .confirmed && !state.answerInAck && !state.callAnswersAck)
        // The next re-INVITE, with an offer, is answered on the wire as always.
        #expect(state.handle(.invite(sdp: Self.peerOffer), now: .seconds(20)) == [.deliver(.offer(sdp: Self.peerOffer))])
        let answered = state.handle(.call(.answer(sdp: Self.callAnswer)), now: .seconds(20))
        guard case let .respond(200, _, sdp?, _) = answered.first else { Issue.record("\(answered)"); return }
        #expect(sdp.contains("m=audio 40010"))
        // And an offerless one now offers what this side answered last.
        #expect(state.handle(.invite(sdp: nil), now: .seconds(30)) == [.respond(status: 200, phrase: nil, sdp: sdp, retryAfter: nil)])
    }

    /// Called, the session that stands is this side's answer in its 200; after this side's own
    /// hold, its re-INVITE's offer.
    @Test func theSessionOfferedAgainIsTheLastThisSideSent() throws {
        let state = Self.confirmedIncoming()
        let answer = try #require(state.lastLocalSDP)
        #expect(answer.contains("m=audio 40010"), "\(answer)")
        var outgoing = Self.confirmedOutgoing()
        let hold = Self.feed(&outgoing, [.call(.offer(sdp: Self.holdOffer))], at: .seconds(5))
        guard case let .reinvite(sdp) = hold.first else { Issue.record("\(hold)"); return }
        #expect(outgoing.lastLocalSDP == sdp)
        Self.feed(&outgoing, [.response(status: 200, phrase: "OK", sdp: Self.holdAnswer)], at: .seconds(5))
        #expect(outgoing.handle(.invite(sdp: nil), now: .seconds(9)) == [.respond(status: 200, phrase: nil, sdp: sdp, retryAfter: nil)])
    }

    /// An ACK that brings no answer to the offer in the 200 breaks RFC 3264; the session stays
    /// as it was, and the log says why.
    @Test func anAckWithoutTheAnswerLeavesTheSessionAsItWas() {
        var state = Self.confirmedIncoming()
        Self.feed(&state, [.invite(sdp: nil)], at: .seconds(10))
        #expect(state.handle(.ack(sdp: nil), now: .seconds(10))
                == [.note("the ACK carried no answer to the offer in the 200 (the session stays as it was)")])
        #expect(state.phase == .confirmed && !state.answerInAck && !state.callAnswersAck)
    }

    @Test func aReinviteCrossingOursIsRefusedWith491() {
        var state = Self.confirmedOutgoing()
        Self.feed(&state, [.call(.offer(sdp: Self.holdOffer))])
        #expect(state.handle(.invite(sdp: Self.peerHoldOffer), now: .seconds(10))
                == [.respond(status: 491, phrase: "Request Pending", sdp: nil, retryAfter: nil)])
        #expect(!state.peerReofferOpen)
        // Ours is still answered as usual.
        #expect(state.handle(.response(status: 200, phrase: "OK", sdp: Self.holdAnswer), now: .seconds(10))
                == [.deliver(.answer(sdp: Self.holdAnswer))])
    }

    /// The call offers (a restart, a hold) after the peer's re-INVITE reached it and before it
    /// answered: no INVITE may start while that one is in progress (RFC 3261 §14.1). The call
    /// settles crossed offers as glare does: a caller answers the peer's and gives its own up
    /// (nothing goes); a callee's stands (the peer's gets 491, which ends its transaction, then
    /// ours goes). Before, both went, and a second re-INVITE followed while the first waited.
    @Test func anOfferOfTheCallsThatCrossesThePeersReinviteWaitingForItsAnswer() {
        var caller = Self.confirmedOutgoing()
        #expect(caller.handle(.invite(sdp: Self.peerHoldOffer), now: .seconds(10)) == [.deliver(.offer(sdp: Self.peerHoldOffer))])
        let crossing = caller.handle(.call(.offer(sdp: Self.holdOffer)), now: .seconds(10))
        #expect(!crossing.contains { if case .reinvite = $0 { true } else { false } }, "\(crossing)")
        #expect(caller.handle(.call(.answer(sdp: Self.holdAnswer)), now: .seconds(10))
                == [.respond(status: 200, phrase: nil, sdp: Self.holdAnswer, retryAfter: nil)])
        #expect(caller.handle(.call(.offer(sdp: Self.holdOffer)), now: .seconds(11)) == [.reinvite(sdp: Self.holdOffer)], "the next offer goes")

        var callee = Self.confirmedIncoming()
        #expect(callee.handle(.invite(sdp: Self.peerHoldOffer), now: .seconds(10)) == [.deliver(.offer(sdp: Self.peerHoldOffer))])
        #expect(callee.handle(.call(.offer(sdp: Self.holdOffer)), now: .seconds(10))
                == [.respond(status: 491, phrase: "Request Pending", sdp: nil, retryAfter: nil), .reinvite(sdp: Self.holdOffer)])
        #expect(!callee.peerReofferOpen)
        #expect(callee.handle(.response(status: 200, phrase: "OK", sdp: Self.holdAnswer), now: .seconds(10)) == [.deliver(.answer(sdp: Self.holdAnswer))])
    }

    // MARK: - Confirmed: glare

    /// RFC 3261 §14.1: the side that made the dialog (its Call-ID: the caller) waits 2.1 to 4 s.
    @Test func theCallerRetriesAGlaredReinviteAfter2_1To4Seconds() throws {
        var waits: [Duration] = []
        for seed in UInt64(0)..<50 {
            let wait = try #require(Self.glareWait(outgoing: true, seed: seed))
            let ms = Self.milliseconds(wait)
            #expect((Duration.milliseconds(2100)...Duration.milliseconds(3990)).contains(wait), "seed \(seed): \(wait)")
            #expect(wait == .milliseconds(ms) && ms % 10 == 0, "seed \(seed): \(wait)")
            waits.append(wait)
        }
        #expect(Set(waits).count > 1)
    }

    /// The other side waits under 2 s.
    @Test func theCalleeRetriesAGlaredReinviteWithin2Seconds() throws {
        var waits: [Duration] = []
        for seed in UInt64(0)..<50 {
            let wait = try #require(Self.glareWait(outgoing: false, seed: seed))
            let ms = Self.milliseconds(wait)
            #expect((Duration.zero..<Duration.seconds(2)).contains(wait), "seed \(seed): \(wait)")
            #expect(wait == .milliseconds(ms) && ms % 10 == 0, "seed \(seed): \(wait)")
            waits.append(wait)
        }
        #expect(Set(waits).count > 1)
    }

    @Test func theSameSeedGivesTheSameGlareWait() {
        var first = Self.confirmedOutgoing(seed: 42)
        var second = Self.confirmedOutgoing(seed: 42)
        #expect(first == second)
        let inputs: [SIPDialogInput] = [.call(.offer(sdp: Self.holdOffer)), .response(status: 491, phrase: "Request Pending", sdp: nil),
                                        .timerFired(.glareRetry), .response(status: 491, phrase: "Request Pending", sdp: nil)]
        let actions = Self.feed(&first, inputs, at: .seconds(10))
        #expect(actions.count == 4)
        #expect(Self.feed(&second, inputs, at: .seconds(10)) == actions)
        #expect(first == second)
    }

    @Test func aGlaredReinviteGoesAgainWithTheSameOffer() throws {
        var state = Self.confirmedOutgoing(seed: 7)
        Self.feed(&state, [.call(.offer(sdp: Self.holdOffer))], at: .seconds(10))
        let wait = try #require(Self.glareWait(outgoing: true, seed: 7))
        #expect(state.handle(.response(status: 491, phrase: "Request Pending", sdp: nil), now: .seconds(10))
                == [.arm(.glareRetry, after: wait)])
        #expect(state.glareWaiting)
        #expect(state.handle(.timerFired(.glareRetry), now: .seconds(10) + wait) == [.reinvite(sdp: Self.holdOffer)])
        #expect(!state.glareWaiting)
        // A timer that fires again has nothing to send.
        #expect(state.handle(.timerFired(.glareRetry), now: .seconds(20)) == [])
        #expect(state.handle(.response(status: 200, phrase: "OK", sdp: Self.holdAnswer), now: .seconds(20))
                == [.deliver(.answer(sdp: Self.holdAnswer))])
        #expect(state.reoffer == nil)
    }

    @Test func aGlareTimerAfterTheCallEndedSendsNothing() {
        var byPeer = Self.confirmedOutgoing()
        Self.feed(&byPeer, [.call(.offer(sdp: Self.holdOffer)), .response(status: 491, phrase: "Request Pending", sdp: nil)])
        #expect(byPeer.handle(.bye, now: .seconds(11)) == [.deliver(.end(.hangup))])
        #expect(byPeer.handle(.timerFired(.glareRetry), now: .seconds(13)) == [])

        var byCall = Self.confirmedIncoming()
        Self.feed(&byCall, [.call(.offer(sdp: Self.holdOffer)), .response(status: 491, phrase: "Request Pending", sdp: nil)])
        #expect(byCall.handle(.call(.end(.hangup)), now: .seconds(11)) == [.bye])
        #expect(byCall.handle(.timerFired(.glareRetry), now: .seconds(13)) == [])
    }

    /// RFC 3261 §14.2 answers 491 only while this side's INVITE is in progress. Once ours got its
    /// 491 that transaction is over, and §14.1's uneven waits exist so that the other side's retry
    /// (the callee's, under 2 s) is taken while the caller still waits (2.1–4 s): ours is given up.
    @Test func aPeersReinviteDuringOurGlareWaitIsTaken() {
        var state = Self.confirmedOutgoing()
        Self.feed(&state, [.call(.offer(sdp: Self.holdOffer)), .response(status: 491, phrase: "Request Pending", sdp: nil)],
                  at: .seconds(10))
        #expect(state.glareWaiting)
        #expect(state.handle(.invite(sdp: Self.peerHoldOffer), now: .seconds(11)) == [.deliver(.offer(sdp: Self.peerHoldOffer))])
    }

    @Test func aRefusedReinviteLeavesTheCallAsItWas() {
        var state = Self.confirmedOutgoing()
        Self.feed(&state, [.call(.offer(sdp: Self.holdOffer))], at: .seconds(10))
        #expect(state.handle(.response(status: 488, phrase: "Not Acceptable Here", sdp: nil), now: .seconds(10))
                == [.note("the peer refused a re-INVITE: 488 Not Acceptable Here")])
        #expect(state.phase == .confirmed)
        #expect(state.reoffer == nil)
        #expect(!state.callEnded)
        // Nothing waits to go again.
        #expect(state.handle(.response(status: 491, phrase: "Request Pending", sdp: nil), now: .seconds(10)) == [])
        #expect(state.handle(.timerFired(.glareRetry), now: .seconds(14)) == [])
        #expect(state.handle(.bye, now: .seconds(20)) == [.deliver(.end(.hangup))])
    }

    // MARK: - Ends

    @Test func endingAConfirmedCallSendsOneBye() {
        var state = Self.confirmedOutgoing()
        #expect(state.handle(.call(.end(.hangup)), now: .seconds(30)) == [.bye])
        #expect(state.phase == .terminating)
        #expect(state.onWire)
        #expect(state.handle(.call(.end(.hangup)), now: .seconds(30)) == [])
        #expect(Self.feed(&state, [.bye, .invite(sdp: Self.peerHoldOffer), Self.dtmfFive]) == [])
        #expect(state.handle(.terminated, now: .seconds(30)) == [])
        #expect(state.phase == .terminated)
    }

    @Test func thePeersByeEndsTheCallOnce() {
        var state = Self.confirmedIncoming()
        #expect(state.handle(.bye, now: .seconds(30)) == [.deliver(.end(.hangup))])
        #expect(state.phase == .terminating)
        #expect(state.handle(.bye, now: .seconds(30)) == [])
        // The call's own end after the peer's sends no BYE of its own.
        #expect(Self.feed(&state, [.call(.end(.hangup)), .call(.offer(sdp: Self.holdOffer)), .ack(sdp: Self.plainAnswer)]) == [])
        #expect(state.handle(.terminated, now: .seconds(30)) == [])
        #expect(state.phase == .terminated)
    }

    @Test func aDialogEndedUnderTheCallIsSignalingLost() {
        var confirmed = Self.confirmedOutgoing()
        #expect(confirmed.handle(.terminated, now: .seconds(40)) == [.signalingLost("the SIP dialog ended")])
        #expect(confirmed.phase == .terminated)
        #expect(confirmed.callEnded)
        #expect(confirmed.handle(.terminated, now: .seconds(40)) == [])
        #expect(confirmed.handle(.call(.end(.hangup)), now: .seconds(40)) == [])

        var early = Self.ringingIncoming()
        #expect(early.handle(.terminated, now: .seconds(1)) == [.signalingLost("the SIP dialog ended")])
    }

    @Test func onWireFollowsThePhase() {
        var state = SIPDialogState(outgoing: true, uri: Self.uri)
        #expect(state.phase == .idle && !state.onWire)
        Self.feed(&state, [.call(.offer(sdp: Self.srtpOffer)), .call(.candidates([], end: true))])
        #expect(state.phase == .early && state.onWire)
        Self.feed(&state, [.response(status: 200, phrase: "OK", sdp: Self.peerAnswer)])
        #expect(state.phase == .confirmed && state.onWire)
        Self.feed(&state, [.call(.end(.hangup))])
        #expect(state.phase == .terminating && state.onWire)
        Self.feed(&state, [.terminated])
        #expect(state.phase == .terminated && !state.onWire)
    }

    @Test func aClosedCallEndsQuietly() {
        var confirmed = Self.confirmedOutgoing()
        #expect(confirmed.handle(.callClosed, now: .seconds(5)) == [])
        #expect(confirmed.callEnded)
        // Still on the wire: the stack ends the dialog.
        #expect(confirmed.phase == .confirmed)
        #expect(Self.feed(&confirmed, [.bye, .call(.end(.hangup)), .invite(sdp: Self.peerHoldOffer), Self.dtmfFive, .terminated]) == [])
        #expect(confirmed.phase == .terminated)

        var idle = SIPDialogState(outgoing: true, uri: Self.uri)
        Self.feed(&idle, [.call(.offer(sdp: Self.srtpOffer))])
        #expect(idle.handle(.callClosed, now: .zero) == [])
        #expect(idle.phase == .terminated)
        #expect(idle.waiting == nil)
        #expect(idle.handle(.call(.candidates([], end: true)), now: .zero) == [])
    }

    // MARK: - INFO and signals SIP does not carry

    @Test func dtmfInAnInfoIsDeliveredAndOtherInfosAreNot() {
        var state = Self.confirmedIncoming()
        #expect(state.handle(Self.dtmfFive, now: .seconds(5)) == [.deliverDTMF("5")])
        #expect(state.handle(.info(contentType: "application/dtmf", body: "#"), now: .seconds(5)) == [.deliverDTMF("#")])
        #expect(state.handle(.info(contentType: "application/media_control+xml", body: "<media_control/>"), now: .seconds(5)) == [])
        #expect(state.handle(.info(contentType: nil, body: nil), now: .seconds(5)) == [])
        #expect(state.phase == .confirmed)
    }

    /// Errors travel in statuses, not signals; a keep-alive asks a confirmed dialog's peer
    /// whether it is there (one OPTIONS at a time), and nothing before.
    @Test func errorsCarryNothingAndKeepAlivesProbeOnlyAConfirmedDialog() {
        var early = Self.inviting()
        #expect(Self.feed(&early, [.call(.error("the answer has no a=crypto line")), .call(.keepAlive)]) == [])
        #expect(early.phase == .early)
        #expect(!early.callEnded)

        var confirmed = Self.confirmedIncoming()
        #expect(Self.feed(&confirmed, [.call(.error("x"))]) == [])
        #expect(confirmed.handle(.call(.keepAlive), now: .seconds(15)) == [.probe])
        #expect(confirmed.handle(.call(.keepAlive), now: .seconds(16)) == [], "one OPTIONS at a time")
        #expect(confirmed.phase == .confirmed && confirmed.probeOut)
    }

    /// Any answer to the OPTIONS says the peer is there (405 and 501 too); a 481 says it no
    /// longer knows the call, and a request this side's stack could not deliver (503 made
    /// locally: the peer's port refuses it) that it is gone: the call ends saying which, once,
    /// and the dialog ends on this side with a BYE (else the stack would keep it for ever). No answer at all (408 after the stack's timeout) is left to the call's loss timeout.
    @Test func theProbesAnswerSaysWhetherThePeerIsStillThere() {
        for (status, local) in [(200, false), (405, false), (501, false), (503, false), (408, true)] {
            var state = Self.confirmedOutgoing()
            Self.feed(&state, [.call(.keepAlive)], at: .seconds(15))
            #expect(state.handle(.probeAnswered(status: status, phrase: "x", local: local), now: .seconds(15)) == [], "\(status)")
            #expect(!state.callEnded && !state.probeOut)
            #expect(state.handle(.call(.keepAlive), now: .seconds(30)) == [.probe], "the next keep-alive probes again")
        }
        var restarted = Self.confirmedOutgoing()
        Self.feed(&restarted, [.call(.keepAlive)], at: .seconds(15))
        let forgot = restarted.handle(.probeAnswered(status: 481, phrase: "Call/Transaction Does Not Exist", local: false), now: .seconds(15))
        guard case let .signalingLost(text)? = forgot.first, forgot.count == 2, forgot.last == .bye else {
            Issue.record("\(forgot)")
            return
        }
        #expect(text.contains("481") && restarted.callEnded)
        var gone = Self.confirmedIncoming()
        Self.feed(&gone, [.call(.keepAlive)], at: .seconds(15))
        let unreachable = gone.handle(.probeAnswered(status: 503, phrase: "Service Unavailable", local: true), now: .seconds(15))
        guard case let .signalingLost(reason)? = unreachable.first, unreachable.count == 2, unreachable.last == .bye else {
            Issue.record("\(unreachable)")
            return
        }
        #expect(reason.contains("gone") && gone.callEnded)
        #expect(gone.handle(.bye, now: .seconds(16)) == [], "ended once")
        #expect(gone.handle(.call(.end(.hangup)), now: .seconds(16)) == [], "one BYE")
    }

    // MARK: - UPDATE (RFC 3311) and session timers (RFC 4028)

    @Test func anUpdateWithoutABodyIsARefreshAnsweredAtOnce() {
        var state = Self.confirmedOutgoing()
        #expect(state.handle(.update(sdp: nil), now: .seconds(30)) == [.respondToUpdate(status: 200, phrase: nil, sdp: nil)])
        #expect(state.phase == .confirmed && !state.updateOfferOpen)
    }

    @Test func anUpdatesOfferIsDeliveredAndTheCallsAnswerGoesInItsResponse() {
        var state = Self.confirmedIncoming()
        #expect(state.handle(.update(sdp: Self.peerHoldOffer), now: .seconds(5)) == [.deliver(.offer(sdp: Self.peerHoldOffer))])
        #expect(state.updateOfferOpen)
        // A second one while the first waits: one offer at a time.
        #expect(state.handle(.update(sdp: Self.peerOffer), now: .seconds(5))
                == [.respondToUpdate(status: 491, phrase: "Request Pending", sdp: nil)])
        #expect(state.handle(.call(.answer(sdp: Self.callHoldAnswer)), now: .seconds(5))
                == [.respondToUpdate(status: 200, phrase: nil, sdp: Self.callHoldAnswer)])
        #expect(!state.updateOfferOpen)
        // The next answer would answer nothing.
        #expect(state.handle(.call(.answer(sdp: Self.callHoldAnswer)), now: .seconds(6))
                == [.note("an answer with no re-INVITE to answer (dropped)")])
    }

    /// An offer in the running call that the call cannot take (its error comes back instead
    /// of an answer) is refused with 488, and the dialog goes on as it was (RFC 3261 §14.2): the
    /// next offer is taken, and a later end is a BYE, not a failure's status.
    @Test func anOfferTheCallCannotTakeIsRefusedWith488AndTheDialogGoesOn() {
        var state = Self.confirmedIncoming()
        #expect(state.handle(.update(sdp: Self.peerOffer), now: .seconds(5)) == [.deliver(.offer(sdp: Self.peerOffer))])
        #expect(state.handle(.call(.error("no audio in the offer")), now: .seconds(5))
                == [.respondToUpdate(status: 488, phrase: "Not Acceptable Here", sdp: nil)])
        #expect(state.phase == .confirmed && !state.updateOfferOpen && !state.callEnded)
        #expect(state.handle(.invite(sdp: Self.peerHoldOffer), now: .seconds(6)) == [.deliver(.offer(sdp: Self.peerHoldOffer))])
        #expect(state.handle(.call(.error("other keys")), now: .seconds(6))
                == [.respond(status: 488, phrase: "Not Acceptable Here", sdp: nil, retryAfter: nil)])
        // Nothing open now: a stray error refuses nothing.
        #expect(state.handle(.call(.error("late")), now: .seconds(7)) == [])
        #expect(state.handle(.invite(sdp: Self.peerHoldOffer), now: .seconds(8)) == [.deliver(.offer(sdp: Self.peerHoldOffer))])
        #expect(state.handle(.call(.answer(sdp: Self.callHoldAnswer)), now: .seconds(8))
                == [.respond(status: 200, phrase: nil, sdp: Self.callHoldAnswer, retryAfter: nil)])
        #expect(state.handle(.call(.end(.hangup)), now: .seconds(9)) == [.bye])
    }

    @Test func anUpdateOfferCrossingOurReinviteIsRefusedWith491() {
        var state = Self.confirmedOutgoing()
        Self.feed(&state, [.call(.offer(sdp: Self.holdOffer))], at: .seconds(10))
        #expect(state.handle(.update(sdp: Self.peerHoldOffer), now: .seconds(10))
                == [.respondToUpdate(status: 491, phrase: "Request Pending", sdp: nil)])
        #expect(!state.updateOfferOpen)
    }

    @Test func anUpdateOfferBeforeTheAnswerOrAfterTheEndIsRefused() {
        var ringing = Self.ringingIncoming()
        let early = ringing.handle(.update(sdp: Self.peerOffer), now: .seconds(1))
        guard case let .respondToUpdate(status, _, nil)? = early.first, early.count == 1 else {
            Issue.record("\(early)")
            return
        }
        #expect(status == 488)
        var ended = Self.confirmedIncoming()
        Self.feed(&ended, [.bye])
        #expect(ended.handle(.update(sdp: Self.peerOffer), now: .seconds(9))
                == [.respondToUpdate(status: 481, phrase: "Call/Transaction Does Not Exist", sdp: nil)])
    }

    /// The stack ends a session nobody refreshed (RFC 4028): the call ends, saying why, once.
    @Test func anExpiredSessionEndsTheCallOnceWithItsReason() {
        var state = Self.confirmedOutgoing()
        let reason = "the peer stopped refreshing the SIP session"
        #expect(state.handle(.sessionExpired(reason), now: .seconds(81)) == [.signalingLost(reason)])
        #expect(state.phase == .terminating && state.callEnded)
        #expect(state.handle(.sessionExpired(reason), now: .seconds(81)) == [])
        #expect(state.handle(.terminated, now: .seconds(82)) == [])
        // Before the dialog is confirmed (a refused or cancelled INVITE) it means nothing.
        var early = Self.ringingIncoming()
        #expect(early.handle(.sessionExpired(reason), now: .seconds(1)) == [])
        #expect(!early.callEnded)
    }
}
