import SDP
import Testing

@Suite struct OfferAnswerTests {
    static let offererKeys = [
        "AES_CM_128_HMAC_SHA1_80": "inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz",
        "AEAD_AES_128_GCM": "inline:GCMGCMGCMGCMGCMGCMGCMGCMGCMGCMGCMGCMGC==",
    ]
    static let answererKeys = [
        "AES_CM_128_HMAC_SHA1_80": "inline:QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVpBQkNE",
        "AEAD_AES_128_GCM": "inline:R0NNYW5zd2VyR0NNYW5zd2VyR0NNYW5zd2VyR0M=",
    ]

    static func local(_ ufrag: String, keys: [String: String], candidates: [String] = []) -> LocalAudioParameters {
        LocalAudioParameters(iceUfrag: ufrag, icePwd: ufrag + "-password-0123456789", candidates: candidates, keys: keys)
    }

    @Test func offerAndAnswerAgreeOnCodecSuiteKeysAndCandidates() throws {
        var offererCaps = AudioCapabilities()
        offererCaps.maxAverageBitrate = 32_000
        let candidate = "candidate:1 1 UDP 2130706431 192.0.2.1 5000 typ host"
        let offer = OfferAnswer.offer(sessionID: "1", capabilities: offererCaps,
                                      local: Self.local("offr", keys: Self.offererKeys, candidates: [candidate]))
        // It goes over the wire as text and is parsed back.
        let wireOffer = try SessionDescription(parsing: offer.serialized)
        let audio = try #require(wireOffer.media.first)
        #expect(audio.rtpMaps.contains(RTPMap(payloadType: 111, encoding: "opus", clockRate: 48_000, channels: 2)))
        #expect(audio.formatParameters(for: 111) == ["useinbandfec": "1", "usedtx": "0", "maxaveragebitrate": "32000"])
        #expect(audio.cryptos.map(\.suite) == ["AES_CM_128_HMAC_SHA1_80", "AEAD_AES_128_GCM"])
        #expect(audio.iceOptions == ["trickle"] && audio.rtcpMux && audio.mid == "0" && audio.direction == .sendrecv)
        #expect(audio.packetTime == 20)

        var answererCaps = AudioCapabilities()
        answererCaps.cryptoSuites = ["AEAD_AES_128_GCM", "AES_CM_128_HMAC_SHA1_80"]
        answererCaps.useInbandFEC = false
        let (answer, answerer) = try OfferAnswer.answer(to: wireOffer, sessionID: "2", capabilities: answererCaps,
                                                        local: Self.local("answ", keys: Self.answererKeys))
        // RFC 4568: the answerer takes the first offered suite it supports, with the offer's tag.
        #expect(answerer.cryptoSuite == "AES_CM_128_HMAC_SHA1_80")
        #expect(answerer.remoteKey == Self.offererKeys["AES_CM_128_HMAC_SHA1_80"])
        #expect(answerer.localKey == Self.answererKeys["AES_CM_128_HMAC_SHA1_80"])
        #expect(answerer.sendInbandFEC && answerer.maxSendBitrate == 32_000)
        #expect(answerer.remoteCandidates == [candidate] && answerer.remoteIceUfrag == "offr")
        #expect(answerer.telephoneEventPayloadType == 101)

        let offerer = try OfferAnswer.accept(answer: try SessionDescription(parsing: answer.serialized), to: offer, capabilities: offererCaps)
        #expect(offerer.cryptoSuite == answerer.cryptoSuite)
        #expect(offerer.localKey == answerer.remoteKey && offerer.remoteKey == answerer.localKey)
        #expect(!offerer.sendInbandFEC)
        #expect(offerer.remoteIceUfrag == "answ" && offerer.payloadType == 111)
    }

    @Test func holdDirectionsAreAnswered() throws {
        var local = Self.local("offr", keys: Self.offererKeys)
        local.direction = .sendonly
        let offer = OfferAnswer.offer(sessionID: "1", capabilities: AudioCapabilities(), local: local)
        let (answer, negotiated) = try OfferAnswer.answer(to: offer, sessionID: "2", capabilities: AudioCapabilities(),
                                                          local: Self.local("answ", keys: Self.answererKeys))
        #expect(answer.media.first?.direction == .recvonly && negotiated.direction == .recvonly)
        #expect(try OfferAnswer.accept(answer: answer, to: offer, capabilities: AudioCapabilities()).direction == .sendonly)
    }

    @Test func aBrowserOfferIsAnsweredWithItsOpusPayloadType() throws {
        var browser = SessionDescriptionTests.browserOffer
        browser = browser.replacingOccurrences(of: "a=rtcp-mux\n", with: "a=rtcp-mux\na=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz\n")
        let offer = try SessionDescription(parsing: browser)
        let (answer, negotiated) = try OfferAnswer.answer(to: offer, sessionID: "9", capabilities: AudioCapabilities(),
                                                          local: Self.local("answ", keys: Self.answererKeys))
        #expect(negotiated.payloadType == 111 && negotiated.sendInbandFEC)
        #expect(negotiated.telephoneEventPayloadType == nil)  // the browser offered none
        #expect(negotiated.remoteCandidates.count == 1 && negotiated.remoteEndOfCandidates)
        #expect(answer.media.first?.formats == ["111"])
        #expect(negotiated.redundancyPayloadType == nil, "red without an a=fmtp naming its blocks is not taken")
    }

    @Test func redundantOpusIsNegotiatedOnlyWhenBothSidesNameIt() throws {
        let offer = OfferAnswer.offer(sessionID: "1", capabilities: AudioCapabilities(), local: Self.local("offr", keys: Self.offererKeys))
        let wire = try SessionDescription(parsing: offer.serialized)
        let audio = try #require(wire.media.first)
        // Opus first (the primary encoding), then red, then telephone events.
        #expect(audio.formats == ["111", "63", "101"])
        #expect(audio.rtpMaps.contains(RTPMap(payloadType: 63, encoding: "red", clockRate: 48_000, channels: 2)))
        #expect(audio.values("fmtp").contains("63 111/111"))

        let (answer, answerer) = try OfferAnswer.answer(to: wire, sessionID: "2", capabilities: AudioCapabilities(),
                                                        local: Self.local("answ", keys: Self.answererKeys))
        #expect(answerer.redundancyPayloadType == 63)
        #expect(answer.media.first?.formats == ["111", "63", "101"])
        let offerer = try OfferAnswer.accept(answer: try SessionDescription(parsing: answer.serialized), to: offer,
                                             capabilities: AudioCapabilities())
        #expect(offerer.redundancyPayloadType == 63)

        // An answerer without red leaves it out, and the offerer then does not send it.
        var plain = AudioCapabilities()
        plain.redundancyPayloadType = nil
        let (plainAnswer, plainAnswerer) = try OfferAnswer.answer(to: wire, sessionID: "3", capabilities: plain,
                                                                  local: Self.local("answ", keys: Self.answererKeys))
        #expect(plainAnswerer.redundancyPayloadType == nil)
        #expect(plainAnswer.media.first?.formats == ["111", "101"])
        #expect(try OfferAnswer.accept(answer: plainAnswer, to: offer, capabilities: AudioCapabilities()).redundancyPayloadType == nil)

        // red that carries another codec's blocks is not redundant Opus.
        let other = offer.serialized.replacingOccurrences(of: "a=fmtp:63 111/111", with: "a=fmtp:63 0/0")
        let (_, otherAnswerer) = try OfferAnswer.answer(to: try SessionDescription(parsing: other), sessionID: "4",
                                                        capabilities: AudioCapabilities(), local: Self.local("answ", keys: Self.answererKeys))
        #expect(otherAnswerer.redundancyPayloadType == nil)
    }

    @Test func unusableOffersAreRefusedWithTheReason() throws {
        let good = OfferAnswer.offer(sessionID: "1", capabilities: AudioCapabilities(), local: Self.local("offr", keys: Self.offererKeys))
        var noSuite = AudioCapabilities()
        noSuite.cryptoSuites = ["F8_128_HMAC_SHA1_80"]
        #expect(throws: NegotiationError.self) {
            try OfferAnswer.answer(to: good, sessionID: "2", capabilities: noSuite, local: Self.local("a", keys: Self.answererKeys))
        }
        var noOpus = good
        noOpus.media[0].attributes.removeAll { $0.name == "rtpmap" && $0.value?.contains("opus") == true }
        do {
            _ = try OfferAnswer.answer(to: noOpus, sessionID: "2", capabilities: AudioCapabilities(), local: Self.local("a", keys: Self.answererKeys))
            Issue.record("answered an offer without Opus")
        } catch {
            #expect(error.reason.contains("no opus/48000/2"))
        }
        var refused = good
        refused.media[0].port = 0
        #expect(throws: NegotiationError("the audio stream is refused (port 0)")) {
            try OfferAnswer.answer(to: refused, sessionID: "2", capabilities: AudioCapabilities(), local: Self.local("a", keys: Self.answererKeys))
        }
        var noICE = good
        noICE.media[0].attributes.removeAll { $0.name == "ice-ufrag" }
        #expect(throws: NegotiationError("no a=ice-ufrag / a=ice-pwd in the audio stream")) {
            try OfferAnswer.answer(to: noICE, sessionID: "2", capabilities: AudioCapabilities(), local: Self.local("a", keys: Self.answererKeys))
        }
    }
}
