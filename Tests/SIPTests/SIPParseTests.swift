import SIP
import Testing

/// The wire's bytes as the agent reads them (sofia-sip's parser), without an agent: what the
/// SIP fuzz target runs.
@Suite struct SIPParseTests {
    static let sdp = "v=0\r\no=- 1 1 IN IP4 192.0.2.5\r\ns=-\r\nc=IN IP4 192.0.2.5\r\nt=0 0\r\nm=audio 40000 RTP/AVP 0\r\n"

    static func request(_ method: String, body: String = "", contentLength: String? = nil) -> [UInt8] {
        let lines = [
            "\(method) sip:alice@192.0.2.9:5070 SIP/2.0",
            "Via: SIP/2.0/UDP 192.0.2.5:5060;branch=z9hG4bK-1",
            "From: \"Carol\" <sip:carol@example.org>;tag=1",
            "To: <sip:alice@192.0.2.9:5070>",
            "Call-ID: parse-1@192.0.2.5",
            "CSeq: 1 \(method)",
            "Reason: SIP;cause=200;text=\"Call completed elsewhere\"",
            "Content-Type: application/sdp",
            "Content-Length: \(contentLength ?? String(body.utf8.count))",
        ]
        return Array((lines.joined(separator: "\r\n") + "\r\n\r\n" + body).utf8)
    }

    @Test func anInviteIsReadAsTheAgentReportsIt() throws {
        let (method, event) = try #require(SIPAgent.parse(Self.request("INVITE", body: Self.sdp)))
        #expect(method == "INVITE")
        #expect(event.fromURI == "sip:carol@example.org" && event.fromDisplay == "\"Carol\"")
        #expect(event.toURI == "sip:alice@192.0.2.9:5070" && event.callID == "parse-1@192.0.2.5")
        #expect(event.sdp == Self.sdp)
        #expect(event.reason == "SIP;cause=200;text=\"Call completed elsewhere\"")
    }

    @Test func responsesAndBytesThatAreNotSIPAreNotRequests() {
        #expect(SIPAgent.parse(Array("SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 192.0.2.5;branch=z9hG4bK-1\r\nContent-Length: 0\r\n\r\n".utf8)) == nil)
        #expect(SIPAgent.parse(Array("\u{0}\u{1} not SIP".utf8)) == nil)
        #expect(SIPAgent.parse([]) == nil)
        // A body shorter than its Content-Length is not a whole message.
        #expect(SIPAgent.parse(Self.request("INVITE", body: Self.sdp, contentLength: "5000"))?.event.sdp == nil)
    }
}
