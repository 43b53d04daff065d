import Foundation
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

    /// RFC 6464's audio level: offered on the id asked for, taken when the answer keeps that id
    /// (as Janus's AudioBridge does), left off when the answer drops or moves it.
    @Test func theAudioLevelExtensionIsOfferedAndTakenOnlyOnTheOfferedID() throws {
        var capabilities = AudioCapabilities()
        capabilities.audioLevelExtension = 1
        let offer = try SessionDescription(parsing: OfferAnswer.offer(sessionID: "1", capabilities: capabilities,
                                                                      local: Self.local("offr", keys: Self.offererKeys)).serialized)
        let offered = try #require(offer.media.first)
        #expect(offered.attributes.contains(SDPAttribute("extmap", "1 \(AudioLevelExtension.uri)")))
        let (plainAnswer, _) = try OfferAnswer.answer(to: offer, sessionID: "2", capabilities: AudioCapabilities(),
                                                      local: Self.local("answ", keys: Self.answererKeys))
        #expect(try OfferAnswer.accept(answer: plainAnswer, to: offer, capabilities: capabilities).audioLevelExtension == nil)
        for (line, expected) in [("1 \(AudioLevelExtension.uri)", 1 as Int?), ("1/recvonly \(AudioLevelExtension.uri)", 1),
                                 ("3 \(AudioLevelExtension.uri)", nil), ("1 urn:ietf:params:rtp-hdrext:sdes:mid", nil)] {
            var answer = plainAnswer
            answer.media[0].attributes.append(SDPAttribute("extmap", line))
            let wire = try SessionDescription(parsing: answer.serialized)
            #expect(try OfferAnswer.accept(answer: wire, to: offer, capabilities: capabilities).audioLevelExtension == expected, "\(line)")
        }
        // Without asking, nothing is offered.
        let bare = OfferAnswer.offer(sessionID: "1", capabilities: AudioCapabilities(), local: Self.local("offr", keys: Self.offererKeys))
        #expect(!(bare.media.first?.attributes.contains { $0.name == "extmap" } ?? true))
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

    @Test func anAnswerIsTheOffersDirectionNarrowedByWhatTheAnswererWants() throws {
        // Every pair: the answerer sends only when the offerer receives and it wants to send.
        for offered in MediaDirection.allCases {
            for wanted in MediaDirection.allCases {
                let answered = offered.answer(wanting: wanted)
                #expect(answered.sends == (offered.receives && wanted.sends))
                #expect(answered.receives == (offered.sends && wanted.receives))
            }
        }
        // A resume (sendrecv) answered by a side still holding with music: sendonly, not inactive.
        var local = Self.local("offr", keys: Self.offererKeys)
        local.direction = .sendrecv
        let offer = OfferAnswer.offer(sessionID: "1", capabilities: AudioCapabilities(), local: local)
        var holding = Self.local("answ", keys: Self.answererKeys)
        holding.direction = .sendonly
        let (answer, negotiated) = try OfferAnswer.answer(to: offer, sessionID: "2", capabilities: AudioCapabilities(), local: holding)
        #expect(answer.media.first?.direction == .sendonly && negotiated.direction == .sendonly)
        #expect(try OfferAnswer.accept(answer: answer, to: offer, capabilities: AudioCapabilities()).direction == .recvonly)
    }

    static let fingerprintA = "sha-256 " + (0..<32).map { String(format: "%02X", $0) }.joined(separator: ":")
    static let fingerprintB = "sha-256 " + (0..<32).map { String(format: "%02X", 255 - $0) }.joined(separator: ":")

    static func dtlsLocal(_ ufrag: String, fingerprint: String) -> LocalAudioParameters {
        var local = Self.local(ufrag, keys: [:])
        local.fingerprint = fingerprint
        return local
    }

    @Test func aBrowserOfferIsAnsweredInTheWebRTCDialect() throws {
        let offer = try SessionDescription(parsing: SessionDescriptionTests.browserOffer)
        var local = Self.dtlsLocal("answ", fingerprint: Self.fingerprintA)
        local.stream = LocalStream(streamID: "callnode", trackID: "mic", ssrc: 42, cname: "node")
        let (answer, negotiated) = try OfferAnswer.answer(to: offer, sessionID: "9", capabilities: AudioCapabilities(), local: local)
        #expect(negotiated.payloadType == 111 && negotiated.sendInbandFEC)
        #expect(negotiated.telephoneEventPayloadType == nil)  // the browser offered none
        #expect(negotiated.remoteCandidates.count == 1 && negotiated.remoteEndOfCandidates)
        #expect(negotiated.redundancyPayloadType == nil, "red without an a=fmtp naming its blocks is not taken")
        // The browser said actpass: this node opens the handshake, and checks the browser's certificate.
        #expect(negotiated.dtls == NegotiatedDTLS(setup: .active, remoteFingerprint: "sha-256 AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99"))
        #expect(negotiated.mid == "0")

        let wire = try SessionDescription(parsing: answer.serialized)
        let audio = try #require(wire.media.first)
        #expect(audio.proto == "UDP/TLS/RTP/SAVPF" && audio.formats == ["111"])
        #expect(audio.attribute("setup")?.value == "active" && audio.attribute("fingerprint")?.value == Self.fingerprintA)
        #expect(audio.mid == "0" && wire.attribute("group")?.value == "BUNDLE 0" && audio.rtcpMux)
        #expect(audio.cryptos.isEmpty)
        // What this node does not support is not answered: no header extensions, no transport-cc.
        #expect(!audio.has("extmap") && !audio.has("rtcp-fb"))
        #expect(audio.values("msid") == ["callnode mic"] && audio.values("ssrc") == ["42 cname:node"])
    }

    @Test func aDTLSOfferNeedsACertificateToAnswer() throws {
        let offer = try SessionDescription(parsing: SessionDescriptionTests.browserOffer)
        #expect(throws: NegotiationError.self) {
            try OfferAnswer.answer(to: offer, sessionID: "9", capabilities: AudioCapabilities(), local: Self.local("answ", keys: Self.answererKeys))
        }
    }

    @Test func nodesNegotiateDTLSRolesBothWays() throws {
        // Offer actpass: the answerer is the client, the offerer the server.
        let offer = OfferAnswer.offer(sessionID: "1", capabilities: AudioCapabilities(), local: Self.dtlsLocal("offr", fingerprint: Self.fingerprintA))
        let wireOffer = try SessionDescription(parsing: offer.serialized)
        let audio = try #require(wireOffer.media.first)
        #expect(audio.proto == "UDP/TLS/RTP/SAVPF" && audio.attribute("setup")?.value == "actpass" && audio.cryptos.isEmpty)
        #expect(wireOffer.attribute("group")?.value == "BUNDLE 0")
        let (answer, answerer) = try OfferAnswer.answer(to: wireOffer, sessionID: "2", capabilities: AudioCapabilities(),
                                                        local: Self.dtlsLocal("answ", fingerprint: Self.fingerprintB))
        #expect(answerer.dtls == NegotiatedDTLS(setup: .active, remoteFingerprint: Self.fingerprintA))
        let offerer = try OfferAnswer.accept(answer: try SessionDescription(parsing: answer.serialized), to: offer, capabilities: AudioCapabilities())
        #expect(offerer.dtls == NegotiatedDTLS(setup: .passive, remoteFingerprint: Self.fingerprintB))

        // A later offer keeps the settled role: the offerer stays the server.
        var again = Self.dtlsLocal("offr", fingerprint: Self.fingerprintA)
        again.offerSetup = .passive
        let reoffer = OfferAnswer.offer(sessionID: "1", capabilities: AudioCapabilities(), local: again)
        let (_, reanswer) = try OfferAnswer.answer(to: reoffer, sessionID: "2", capabilities: AudioCapabilities(),
                                                   local: Self.dtlsLocal("answ", fingerprint: Self.fingerprintB))
        #expect(reanswer.dtls?.setup == .active)
        // An offer that says active makes the answerer the server.
        again.offerSetup = .active
        let active = OfferAnswer.offer(sessionID: "1", capabilities: AudioCapabilities(), local: again)
        let (_, passive) = try OfferAnswer.answer(to: active, sessionID: "2", capabilities: AudioCapabilities(),
                                                  local: Self.dtlsLocal("answ", fingerprint: Self.fingerprintB))
        #expect(passive.dtls?.setup == .passive)
        // An offer without a=setup is active (RFC 4145): the answerer waits.
        let bare = try SessionDescription(parsing: active.serialized.replacingOccurrences(of: "a=setup:active\r\n", with: ""))
        #expect(bare.media.first?.has("setup") == false)
        let (_, waiting) = try OfferAnswer.answer(to: bare, sessionID: "2", capabilities: AudioCapabilities(),
                                                  local: Self.dtlsLocal("answ", fingerprint: Self.fingerprintB))
        #expect(waiting.dtls?.setup == .passive)
    }

    @Test func aDTLSAnswerMustPickARoleAndCarryAFingerprint() throws {
        let offer = OfferAnswer.offer(sessionID: "1", capabilities: AudioCapabilities(), local: Self.dtlsLocal("offr", fingerprint: Self.fingerprintA))
        let (answer, _) = try OfferAnswer.answer(to: offer, sessionID: "2", capabilities: AudioCapabilities(),
                                                 local: Self.dtlsLocal("answ", fingerprint: Self.fingerprintB))
        let text = answer.serialized
        for (broken, why) in [(text.replacingOccurrences(of: "a=setup:active", with: "a=setup:actpass"), "actpass"),
                              (text.replacingOccurrences(of: "a=fingerprint:\(Self.fingerprintB)\r\n", with: ""), "a=fingerprint")] {
            #expect(broken != text)
            do {
                _ = try OfferAnswer.accept(answer: try SessionDescription(parsing: broken), to: offer, capabilities: AudioCapabilities())
                Issue.record("accepted an answer without \(why)")
            } catch let error as NegotiationError {
                #expect(error.reason.contains(why), "\(error)")
            }
        }
    }

    @Test func sdesStaysAvailableAndTelephoneEventsUseTheOpusClock() throws {
        var capabilities = AudioCapabilities()
        capabilities.keyExchange = .sdes
        var local = Self.local("offr", keys: Self.offererKeys)
        local.fingerprint = Self.fingerprintA
        let offer = OfferAnswer.offer(sessionID: "1", capabilities: capabilities, local: local)
        let audio = try #require(offer.media.first)
        #expect(audio.proto == "RTP/SAVP" && !audio.has("fingerprint") && audio.cryptos.count == 2)

        // A browser offers telephone-event at 48 kHz and at 8 kHz; the Opus clock's is taken.
        var browser = SessionDescriptionTests.browserOffer
        browser = browser.replacingOccurrences(of: "a=rtpmap:0 PCMU/8000\n",
                                               with: "a=rtpmap:0 PCMU/8000\na=rtpmap:126 telephone-event/8000\na=rtpmap:110 telephone-event/48000\n")
        let (_, negotiated) = try OfferAnswer.answer(to: try SessionDescription(parsing: browser), sessionID: "9",
                                                     capabilities: AudioCapabilities(), local: Self.dtlsLocal("answ", fingerprint: Self.fingerprintA))
        #expect(negotiated.telephoneEventPayloadType == 110)
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
        // Without ICE, the c= line must say where RTP goes (0.0.0.0 says nowhere).
        var noICE = good
        noICE.media[0].attributes.removeAll { $0.name == "ice-ufrag" }
        #expect(throws: NegotiationError("no a=ice-ufrag / a=ice-pwd in the audio stream, and no c= address to send RTP to")) {
            try OfferAnswer.answer(to: noICE, sessionID: "2", capabilities: AudioCapabilities(), local: Self.local("a", keys: Self.answererKeys))
        }
    }

    /// A SIP softphone's offer without ICE: RTP/SAVP with a=crypto, its RTP where c= and m= say.
    static let plainOffer = """
        v=0\r
        o=softphone 1 1 IN IP4 192.0.2.5\r
        s=-\r
        c=IN IP4 192.0.2.5\r
        t=0 0\r
        m=audio 40000 RTP/SAVP 111 0 101\r
        a=rtpmap:111 opus/48000/2\r
        a=fmtp:111 useinbandfec=1\r
        a=rtpmap:0 PCMU/8000\r
        a=rtpmap:101 telephone-event/48000\r
        a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:\(String(repeating: "A", count: 40))\r
        a=sendrecv\r

        """

    @Test func anOfferWithoutICEIsAnsweredWithoutICEAndItsRTPAddressIsKept() throws {
        let offer = try SessionDescription(parsing: Self.plainOffer)
        #expect(!offer.audioUsesICE)
        var local = Self.local("a", keys: Self.answererKeys)
        local.plainRTP = RTPEndpoint(address: "192.0.2.9", port: 41000)
        let (answer, negotiated) = try OfferAnswer.answer(to: offer, sessionID: "2", capabilities: AudioCapabilities(), local: local)
        #expect(negotiated.remoteRTP == RTPEndpoint(address: "192.0.2.5", port: 40000))
        #expect(negotiated.remoteCandidates.isEmpty)
        #expect(negotiated.cryptoSuite == "AES_CM_128_HMAC_SHA1_80")
        // The answer says where this side's RTP is, in the offer's profile, and nothing of ICE.
        let wire = try SessionDescription(parsing: answer.serialized)
        let audio = try #require(wire.media.first)
        #expect(audio.port == 41000 && audio.proto == "RTP/SAVP")
        #expect((audio.connection ?? wire.connection)?.address == "192.0.2.9")
        #expect(audio.iceUfrag == nil && audio.icePwd == nil && audio.candidates.isEmpty)
        #expect(!answer.serialized.contains("ice-"), "\(answer.serialized)")
        // Session-level c= serves too.
        let sessionLevel = try SessionDescription(parsing: Self.plainOffer.replacingOccurrences(of: "c=IN IP4 192.0.2.5\r\nt=", with: "c=IN IP4 192.0.2.6\r\nt="))
        #expect(try OfferAnswer.answer(to: sessionLevel, sessionID: "3", capabilities: AudioCapabilities(), local: local).negotiated.remoteRTP?.address == "192.0.2.6")
    }

    /// baresip's ICE offer: its credentials at the session level (RFC 8839 allows either), the
    /// candidates in the audio section. It is an ICE offer, answered with ICE, not plain RTP to c=.
    @Test func iceCredentialsAtTheSessionLevelServeTheAudioStream() throws {
        let offer = try SessionDescription(parsing: """
            v=0\r\no=- 1 1 IN IP4 10.10.2.2\r\ns=-\r\nc=IN IP4 10.10.2.2\r\nt=0 0\r\n\
            a=ice-ufrag:c9bD2f6\r\na=ice-pwd:L9uGoJMggvSK276El3ln8sa8N21FLt2\r\n\
            m=audio 35292 RTP/SAVP 96\r\nc=IN IP4 100.64.2.2\r\na=rtpmap:96 opus/48000/2\r\n\
            a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz\r\na=rtcp-mux\r\n\
            a=candidate:0a0a0202 1 UDP 2113929471 10.10.2.2 35292 typ host\r\n\
            a=candidate:64400203 1 UDP 1677721855 100.64.2.2 35292 typ srflx raddr 10.10.2.2 rport 35292\r\n
            """)
        #expect(offer.audioUsesICE)
        let (answer, negotiated) = try OfferAnswer.answer(to: offer, sessionID: "2", capabilities: AudioCapabilities(),
                                                          local: Self.local("b", keys: Self.answererKeys))
        #expect(negotiated.remoteRTP == nil)
        #expect(negotiated.remoteIceUfrag == "c9bD2f6" && negotiated.remoteIcePwd == "L9uGoJMggvSK276El3ln8sa8N21FLt2")
        #expect(negotiated.remoteCandidates.count == 2)
        #expect(answer.serialized.contains("a=ice-ufrag:b"))
        // A stream's own credentials win over the session's.
        let both = try SessionDescription(parsing: offer.serialized.replacingOccurrences(of: "a=rtcp-mux", with: "a=rtcp-mux\r\na=ice-ufrag:own\r\na=ice-pwd:own-password-0123456789"))
        #expect(try OfferAnswer.answer(to: both, sessionID: "3", capabilities: AudioCapabilities(),
                                       local: Self.local("b", keys: Self.answererKeys)).negotiated.remoteIceUfrag == "own")
    }

    /// Plain RTP (RTP/AVP, no keys): refused where SRTP is required (the default), answered in
    /// kind where it is preferred, offered where encryption is off.
    @Test func plainRTPIsTakenOnlyWhereAllowed() throws {
        let plain = try SessionDescription(parsing: Self.plainOffer
            .replacingOccurrences(of: "RTP/SAVP", with: "RTP/AVP")
            .replacingOccurrences(of: "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:\(String(repeating: "A", count: 40))\r\n", with: ""))
        var local = Self.local("a", keys: Self.answererKeys)
        local.plainRTP = RTPEndpoint(address: "192.0.2.9", port: 41000)
        do {
            _ = try OfferAnswer.answer(to: plain, sessionID: "2", capabilities: AudioCapabilities(), local: local)
            Issue.record("plain RTP was answered where SRTP is required")
        } catch {
            #expect(error.reason.contains("requires SRTP"), "\(error)")
        }
        var preferred = AudioCapabilities()
        preferred.mediaEncryption = .preferred
        let (answer, negotiated) = try OfferAnswer.answer(to: plain, sessionID: "2", capabilities: preferred, local: local)
        #expect(negotiated.unencrypted && negotiated.cryptoSuite.isEmpty && negotiated.dtls == nil)
        #expect(answer.media[0].proto == "RTP/AVP" && answer.media[0].cryptos.isEmpty)
        #expect(answer.media[0].attribute("fingerprint") == nil)
        // An SRTP offer is still answered with SRTP where it is only preferred.
        let sdes = try OfferAnswer.answer(to: try SessionDescription(parsing: Self.plainOffer), sessionID: "3", capabilities: preferred, local: local)
        #expect(!sdes.negotiated.unencrypted && sdes.negotiated.cryptoSuite == "AES_CM_128_HMAC_SHA1_80")
        // Off: the offer is plain; an answer that keys SRTP to it is refused.
        var off = AudioCapabilities()
        off.mediaEncryption = .off
        let offer = OfferAnswer.offer(sessionID: "4", capabilities: off, local: local)
        #expect(offer.media[0].proto == "RTP/AVP" && offer.media[0].cryptos.isEmpty && offer.media[0].attribute("fingerprint") == nil)
        let (plainAnswer, _) = try OfferAnswer.answer(to: offer, sessionID: "5", capabilities: preferred, local: local)
        #expect(try OfferAnswer.accept(answer: plainAnswer, to: offer, capabilities: off).unencrypted)
        #expect(throws: NegotiationError.self) {
            try OfferAnswer.accept(answer: answer.replacingProfile("RTP/SAVP"), to: offer, capabilities: off)
        }
    }

    /// Some phones that take no SRTP answer an encrypted offer in plain RTP/AVP (a profile
    /// change RFC 3264 does not allow): where media may go unencrypted the call takes it as plain
    /// RTP; where SRTP is required it is refused.
    @Test func aPlainAnswerToAnEncryptedOfferIsTakenOnlyWhereSRTPIsNotRequired() throws {
        var local = Self.local("offr", keys: Self.offererKeys)
        local.plainRTP = RTPEndpoint(address: "192.0.2.1", port: 42000)
        var preferred = AudioCapabilities()
        preferred.keyExchange = .sdes
        preferred.mediaEncryption = .preferred
        preferred.codecs = [.opus, .pcmu]
        let offer = OfferAnswer.offer(sessionID: "1", capabilities: preferred, local: local)
        #expect(offer.media[0].proto == "RTP/SAVP" && !offer.media[0].cryptos.isEmpty)
        let plainAnswer = try SessionDescription(parsing: "v=0\r\no=phone 1 1 IN IP4 192.0.2.5\r\ns=-\r\nc=IN IP4 192.0.2.5\r\nt=0 0\r\n"
            + "m=audio 40000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\na=sendrecv\r\n")
        let taken = try OfferAnswer.accept(answer: plainAnswer, to: offer, capabilities: preferred)
        #expect(taken.unencrypted && taken.cryptoSuite.isEmpty && taken.dtls == nil && taken.encoding == .pcmu)
        #expect(taken.remoteRTP == RTPEndpoint(address: "192.0.2.5", port: 40000))
        var required = preferred
        required.mediaEncryption = .required
        #expect(throws: NegotiationError.self) { try OfferAnswer.accept(answer: plainAnswer, to: offer, capabilities: required) }
        // A DTLS offer answered in plain RTP: the same.
        var dtls = preferred
        dtls.keyExchange = .dtls
        var dtlsLocal = local
        dtlsLocal.fingerprint = Self.fingerprintA
        let dtlsOffer = OfferAnswer.offer(sessionID: "2", capabilities: dtls, local: dtlsLocal)
        #expect(try OfferAnswer.accept(answer: plainAnswer, to: dtlsOffer, capabilities: dtls).unencrypted)
        dtls.mediaEncryption = .required
        #expect(throws: NegotiationError.self) { try OfferAnswer.accept(answer: plainAnswer, to: dtlsOffer, capabilities: dtls) }
    }

    @Test func anOfferWrittenWithoutICEIsAcceptedFromAnAnswerWithoutICE() throws {
        var offererLocal = Self.local("offr", keys: Self.offererKeys)
        offererLocal.plainRTP = RTPEndpoint(address: "192.0.2.1", port: 42000)
        var sdes = AudioCapabilities()
        sdes.keyExchange = .sdes
        let offer = OfferAnswer.offer(sessionID: "1", capabilities: sdes, local: offererLocal)
        #expect(!offer.audioUsesICE)
        #expect(offer.media[0].port == 42000)
        var answererLocal = Self.local("answ", keys: Self.answererKeys)
        answererLocal.plainRTP = RTPEndpoint(address: "192.0.2.2", port: 43000)
        let (answer, atAnswerer) = try OfferAnswer.answer(to: try SessionDescription(parsing: offer.serialized), sessionID: "2",
                                                          capabilities: AudioCapabilities(), local: answererLocal)
        #expect(atAnswerer.remoteRTP == RTPEndpoint(address: "192.0.2.1", port: 42000))
        let atOfferer = try OfferAnswer.accept(answer: try SessionDescription(parsing: answer.serialized), to: offer, capabilities: sdes)
        #expect(atOfferer.remoteRTP == RTPEndpoint(address: "192.0.2.2", port: 43000))
        #expect(atOfferer.localKey == atAnswerer.remoteKey && atOfferer.remoteKey == atAnswerer.localKey)
    }
}

extension SessionDescription {
    /// The same description with its audio in `profile` and an SDES key (an answer that keys
    /// SRTP).
    fileprivate func replacingProfile(_ profile: String) -> SessionDescription {
        var copy = self
        copy.media[0].proto = profile
        copy.media[0].attributes.append(SDPAttribute("crypto", "1 AES_CM_128_HMAC_SHA1_80 inline:\(String(repeating: "B", count: 40))"))
        return copy
    }
}
