import CallNodeTestSupport
import SDP
import Testing

@Suite struct SessionDescriptionTests {
    /// An offer as Chromium writes it (trimmed to the audio section), LF line ends.
    static let browserOffer = """
        v=0
        o=- 4611731400430051336 2 IN IP4 127.0.0.1
        s=-
        t=0 0
        a=group:BUNDLE 0
        a=extmap-allow-mixed
        a=msid-semantic: WMS
        m=audio 9 UDP/TLS/RTP/SAVPF 111 63 9 0 8 13 110 126
        c=IN IP4 0.0.0.0
        a=rtcp:9 IN IP4 0.0.0.0
        a=ice-ufrag:aBcD
        a=ice-pwd:0123456789abcdefghijklmn
        a=ice-options:trickle
        a=fingerprint:sha-256 AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33:44:55:66:77:88:99
        a=setup:actpass
        a=mid:0
        a=extmap:1 urn:ietf:params:rtp-hdrext:ssrc-audio-level
        a=sendrecv
        a=msid:- 1f0c2c7e-1c4b-4f0e-9d3f-0a1b2c3d4e5f
        a=rtcp-mux
        a=rtpmap:111 opus/48000/2
        a=rtcp-fb:111 transport-cc
        a=fmtp:111 minptime=10;useinbandfec=1
        a=rtpmap:63 red/48000/2
        a=rtpmap:9 G722/8000
        a=rtpmap:0 PCMU/8000
        a=ssrc:1234 cname:abcd
        a=candidate:1 1 udp 2122260223 10.99.0.1 51234 typ host generation 0 network-id 1
        a=end-of-candidates

        """

    @Test func parsesABrowserOffer() throws {
        let sdp = try SessionDescription(parsing: Self.browserOffer)
        #expect(sdp.origin.sessionID == "4611731400430051336" && sdp.origin.sessionVersion == 2)
        #expect(sdp.attribute("group")?.value == "BUNDLE 0")
        let audio = try #require(sdp.media.first)
        #expect(audio.media == "audio" && audio.port == 9 && audio.proto == "UDP/TLS/RTP/SAVPF")
        #expect(audio.formats == ["111", "63", "9", "0", "8", "13", "110", "126"])
        #expect(audio.connection == SDPConnection(address: "0.0.0.0"))
        #expect(audio.iceUfrag == "aBcD" && audio.icePwd == "0123456789abcdefghijklmn")
        #expect(audio.iceOptions == ["trickle"])
        #expect(audio.mid == "0" && audio.rtcpMux && audio.direction == .sendrecv && audio.endOfCandidates)
        #expect(audio.rtpMaps.first == RTPMap(payloadType: 111, encoding: "opus", clockRate: 48_000, channels: 2))
        #expect(audio.formatParameters(for: 111) == ["minptime": "10", "useinbandfec": "1"])
        #expect(audio.formatParameters(for: 0).isEmpty)
        #expect(audio.candidates == ["candidate:1 1 udp 2122260223 10.99.0.1 51234 typ host generation 0 network-id 1"])
        // Attributes this node does not use are kept, in order.
        #expect(audio.has("extmap") && audio.has("ssrc") && audio.has("rtcp-fb") && audio.has("fingerprint"))
    }

    @Test func writesAndReadsBackOurOwnOffer() throws {
        var audio = MediaDescription(port: 50_000, formats: ["111", "101"], connection: SDPConnection(address: "192.0.2.7"))
        audio.attributes = [
            RTPMap(payloadType: 111, encoding: "opus", clockRate: 48_000, channels: 2).attribute,
            SDPAttribute("fmtp", "111 useinbandfec=1;usedtx=1;maxaveragebitrate=40000"),
            RTPMap(payloadType: 101, encoding: "telephone-event", clockRate: 48_000).attribute,
            SDPAttribute("ptime", "20"),
            SDPAttribute("ice-ufrag", "u1"), SDPAttribute("ice-pwd", "p1p1p1p1p1p1p1p1p1p1p1"),
            SDPAttribute("ice-options", "trickle"),
            SDPCrypto(tag: 1, suite: "AES_CM_128_HMAC_SHA1_80", keyParameters: "inline:WVNfX19zZW1jdGwgKCkgewkyMjA7fQp9CnVubGVz").attribute,
            SDPCrypto(tag: 2, suite: "AEAD_AES_128_GCM", keyParameters: "inline:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBka").attribute,
            SDPAttribute("rtcp-mux"), SDPAttribute("mid", "audio"),
        ]
        audio.setDirection(.sendonly)
        let offer = SessionDescription(origin: SDPOrigin(sessionID: "42", address: "192.0.2.7"), media: [audio])
        let text = offer.serialized
        #expect(text.hasPrefix("v=0\r\no=- 42 1 IN IP4 192.0.2.7\r\ns=-\r\nt=0 0\r\nm=audio 50000 RTP/SAVP 111 101\r\n"))
        #expect(text.hasSuffix("a=sendonly\r\n"))
        let parsed = try SessionDescription(parsing: text)
        #expect(parsed == offer)
        let media = parsed.media[0]
        #expect(media.direction == .sendonly && media.direction.answer == .recvonly)
        #expect(media.packetTime == 20)
        #expect(media.cryptos.map(\.suite) == ["AES_CM_128_HMAC_SHA1_80", "AEAD_AES_128_GCM"])
        #expect(media.formatParameters(for: 111)["maxaveragebitrate"] == "40000")
        #expect(!media.endOfCandidates)
    }

    @Test func malformedInputNamesTheLineThatBroke() {
        let cases: [(String, Int, String)] = [
            ("", 1, "empty"),
            ("o=- 1 1 IN IP4 1.2.3.4\r\n", 1, "starts with v=0"),
            ("v=1\r\n", 1, "unsupported SDP version"),
            ("v=0\r\no=- 1 IN IP4 1.2.3.4\r\n", 2, "six fields"),
            ("v=0\r\no=- 1 x IN IP4 1.2.3.4\r\n", 2, "not a number"),
            ("v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\ns=-\r\nt=0 0\r\nm=audio 99999 RTP/AVP 0\r\n", 5, "not a port"),
            // Found by the fuzzer: a port field with nothing around its slash trapped.
            ("v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\ns=-\r\nt=0 0\r\nm=audio / RTP/AVP 0\r\n", 5, "not a port"),
            ("v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\ns=-\r\nt=0 0\r\nm=audio 9/ RTP/AVP 0\r\n", 5, "not a number"),
            ("v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\ns=-\r\nt=0 0\r\nm=audio 9/2/3 RTP/AVP 0\r\n", 5, "not a port"),
            // Also from the fuzzer: a lone CR inside a line could not be written back the same.
            ("v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\ns=-\rt=0 0\r\n", 3, "carriage return"),
            ("v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\ns=-\r\nc=IN IPX 1.2.3.4\r\n", 4, "address type"),
            ("v=0\r\no=- 1 1 IN IP4 1.2.3.4\r\ns=-\r\nthis is not sdp\r\n", 4, "<type>=<value>"),
            ("v=0\r\ns=-\r\nt=0 0\r\n", 2, "no o= line"),
        ]
        for (text, line, reason) in cases {
            #expect {
                _ = try SessionDescription(parsing: text)
            } throws: { error in
                guard let error = error as? SDPParseError else { return false }
                return error.line == line && error.reason.contains(reason)
            }
        }
    }

    @Test func unknownLinesAndAttributesAreNotFatal() throws {
        let text = "v=0\no=alice 1 1 IN IP6 ::1\ns=call\ni=info\nx=something new\nt=0 0\na=x-custom\nm=audio 5004 RTP/AVP 0\na=rtpmap:bad\na=weird:thing:with:colons\n"
        let sdp = try SessionDescription(parsing: text)
        #expect(sdp.origin.addressType == "IP6" && sdp.sessionName == "call")
        #expect(sdp.attribute("x-custom") != nil)
        #expect(sdp.media[0].rtpMaps.isEmpty)
        #expect(sdp.media[0].attribute("weird")?.value == "thing:with:colons")
        #expect(sdp.media[0].direction == .sendrecv)
    }

    /// Mutated SDP (bytes flipped, lines cut, dropped or repeated) either parses or throws
    /// ``SDPParseError``; it never traps.
    @Test func mutatedInputNeverCrashes() {
        var rng = SplitMix64(seed: 4)
        let base = Array(Self.browserOffer.utf8)
        var parsed = 0, refused = 0
        for _ in 0..<3_000 {
            var bytes = base
            for _ in 0..<Int.random(in: 1...6, using: &rng) {
                let at = Int.random(in: 0..<bytes.count, using: &rng)
                switch Int.random(in: 0..<4, using: &rng) {
                case 0: bytes[at] = UInt8.random(in: 0...255, using: &rng)
                case 1: bytes.removeSubrange(at..<min(bytes.count, at + Int.random(in: 1...40, using: &rng)))
                case 2: bytes.insert(contentsOf: bytes[at..<min(bytes.count, at + 30)], at: at)
                default: bytes[at] = [UInt8(ascii: "\n"), UInt8(ascii: "="), UInt8(ascii: " "), UInt8(ascii: ":")][Int.random(in: 0..<4, using: &rng)]
                }
                if bytes.isEmpty { bytes = [0] }
            }
            do {
                _ = try SessionDescription(parsing: String(decoding: bytes, as: UTF8.self))
                parsed += 1
            } catch {
                #expect(error.line >= 1 && !error.reason.isEmpty)
                refused += 1
            }
        }
        #expect(parsed > 0 && refused > 0)
    }
}
