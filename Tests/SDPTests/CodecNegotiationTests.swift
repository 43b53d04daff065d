import RTP
import SDP
import Testing

/// Which codec a call uses: Opus between nodes; with SIP peers, Opus or G.711 (PCMU, PCMA)
/// as this node prefers among what the peer offers, telephone events on the chosen codec's clock.
@Suite struct CodecNegotiationTests {
    /// What a desk phone offers: G.711 only, plain RTP, events on the 8 kHz clock.
    static let phoneOffer = """
        v=0\r
        o=phone 1 1 IN IP4 192.0.2.5\r
        s=-\r
        c=IN IP4 192.0.2.5\r
        t=0 0\r
        m=audio 40000 RTP/AVP 8 0 101\r
        a=rtpmap:101 telephone-event/8000\r
        a=fmtp:101 0-16\r
        a=ptime:20\r
        a=sendrecv\r

        """

    static func sipCapabilities(_ codecs: [AudioEncoding] = [.opus, .pcmu, .pcma]) -> AudioCapabilities {
        var capabilities = AudioCapabilities()
        capabilities.codecs = codecs
        capabilities.mediaEncryption = .preferred
        return capabilities
    }

    static func local() -> LocalAudioParameters {
        var local = OfferAnswerTests.local("a", keys: OfferAnswerTests.answererKeys)
        local.plainRTP = RTPEndpoint(address: "192.0.2.9", port: 41000)
        return local
    }

    @Test func aPhonesG711OfferIsAnsweredWithThisNodesFavouriteOfItsCodecs() throws {
        let offer = try SessionDescription(parsing: Self.phoneOffer)
        // Static payload types without a=rtpmap are known by their number (RFC 3551).
        let (answer, negotiated) = try OfferAnswer.answer(to: offer, sessionID: "2", capabilities: Self.sipCapabilities(), local: Self.local())
        #expect(negotiated.encoding == .pcmu && negotiated.payloadType == 0)
        #expect(negotiated.telephoneEventPayloadType == 101, "events on the 8 kHz clock")
        #expect(negotiated.redundancyPayloadType == nil && !negotiated.sendInbandFEC)
        let wire = try SessionDescription(parsing: answer.serialized)
        let audio = try #require(wire.media.first)
        #expect(audio.formats == ["0", "101"], "\(answer.serialized)")
        #expect(audio.rtpMaps.contains(RTPMap(payloadType: 0, encoding: "PCMU", clockRate: 8_000)))
        #expect(audio.rtpMaps.contains(RTPMap(payloadType: 101, encoding: "telephone-event", clockRate: 8_000)))
        #expect(!answer.serialized.lowercased().contains("opus") && !answer.serialized.contains("red/"))
        // A-law first in this node's order: the same offer gets A-law.
        let aLaw = try OfferAnswer.answer(to: offer, sessionID: "3", capabilities: Self.sipCapabilities([.pcma, .pcmu]), local: Self.local())
        #expect(aLaw.negotiated.encoding == .pcma && aLaw.negotiated.payloadType == 8)
    }

    @Test func opusIsTakenWhenThePeerOffersItToo() throws {
        let offer = try SessionDescription(parsing: Self.phoneOffer
            .replacingOccurrences(of: "RTP/AVP 8 0 101", with: "RTP/AVP 0 96 101")
            .replacingOccurrences(of: "a=rtpmap:101", with: "a=rtpmap:96 opus/48000/2\r\na=rtpmap:101"))
        let (_, negotiated) = try OfferAnswer.answer(to: offer, sessionID: "2", capabilities: Self.sipCapabilities(), local: Self.local())
        #expect(negotiated.encoding == .opus && negotiated.payloadType == 96)
        // The offer's events run on 8 kHz only: none on Opus's clock.
        #expect(negotiated.telephoneEventPayloadType == nil)
    }

    @Test func aNodeThatSpeaksOnlyOpusRefusesG711WithTheReason() throws {
        let offer = try SessionDescription(parsing: Self.phoneOffer)
        var opusOnly = Self.sipCapabilities([.opus])
        opusOnly.mediaEncryption = .preferred
        do {
            _ = try OfferAnswer.answer(to: offer, sessionID: "2", capabilities: opusOnly, local: Self.local())
            Issue.record("answered a G.711 offer without speaking it")
        } catch {
            #expect(error.reason == "no opus/48000/2 among the audio formats 8 0 101")
        }
        // Unknown codecs only: the same, naming what this node speaks.
        let unknown = try SessionDescription(parsing: Self.phoneOffer
            .replacingOccurrences(of: "RTP/AVP 8 0 101", with: "RTP/AVP 9 18")
            .replacingOccurrences(of: "a=rtpmap:101 telephone-event/8000\r\n", with: "a=rtpmap:9 G722/8000\r\na=rtpmap:18 G729/8000\r\n"))
        #expect(throws: NegotiationError("no opus/48000/2 or PCMU/8000 or PCMA/8000 among the audio formats 9 18")) {
            try OfferAnswer.answer(to: unknown, sessionID: "3", capabilities: Self.sipCapabilities(), local: Self.local())
        }
    }

    /// This node's offer lists its codecs in order, events on both clocks; the phone's answer
    /// picks G.711 and the 8 kHz events.
    @Test func anOfferWithG711IsAcceptedFromAG711Answer() throws {
        var capabilities = Self.sipCapabilities()
        capabilities.mediaEncryption = .off
        let offer = OfferAnswer.offer(sessionID: "1", capabilities: capabilities, local: Self.local())
        let audio = try #require(offer.media.first)
        #expect(audio.formats == ["111", "0", "8", "63", "101", "100"], "\(offer.serialized)")
        #expect(audio.rtpMaps.contains(RTPMap(payloadType: 100, encoding: "telephone-event", clockRate: 8_000)))
        #expect(audio.rtpMaps.contains(RTPMap(payloadType: 101, encoding: "telephone-event", clockRate: 48_000)))
        let phone = Self.sipCapabilities([.pcma, .pcmu])
        let (answer, answered) = try OfferAnswer.answer(to: offer, sessionID: "2", capabilities: phone, local: Self.local())
        #expect(answered.encoding == .pcma && answered.telephoneEventPayloadType == 100)
        let accepted = try OfferAnswer.accept(answer: answer, to: offer, capabilities: capabilities)
        #expect(accepted.encoding == .pcma && accepted.payloadType == 8 && accepted.telephoneEventPayloadType == 100)
        #expect(accepted.redundancyPayloadType == nil)
        // An answer with a codec that was not offered is refused.
        var opusOnly = Self.sipCapabilities([.opus])
        opusOnly.mediaEncryption = .off
        let narrowOffer = OfferAnswer.offer(sessionID: "3", capabilities: opusOnly, local: Self.local())
        #expect(throws: NegotiationError.self) {
            try OfferAnswer.accept(answer: answer, to: narrowOffer, capabilities: opusOnly)
        }
    }

    /// Between nodes (the default capabilities) the offer is Opus alone, as before.
    @Test func nodesStillOfferOpusAlone() throws {
        let offer = OfferAnswer.offer(sessionID: "1", capabilities: AudioCapabilities(),
                                      local: OfferAnswerTests.local("o", keys: OfferAnswerTests.offererKeys))
        #expect(offer.media[0].formats == ["111", "63", "101"])
    }
}
