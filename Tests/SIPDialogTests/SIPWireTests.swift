import CallCore
import SIPDialog
import Testing

/// What a SIP dialog reads and writes from a request's headers and bodies.
@Suite struct SIPWireTests {
    /// RFC 3326: a CANCEL's Reason says whether another device answered or declined.
    @Test func aCancelsReasonSaysWhetherAnotherDeviceTookTheCall() {
        #expect(SIPWire.cancelReason("SIP;cause=200;text=Call completed elsewhere") == .answeredElsewhere)
        #expect(SIPWire.cancelReason("SIP;cause=600;text=Busy Everywhere") == .declinedElsewhere)
        #expect(SIPWire.cancelReason("sip;cause=603;text=") == .declinedElsewhere)
        #expect(SIPWire.cancelReason("SIP;cause=487;text=") == .hangup)
        #expect(SIPWire.cancelReason("Q.850;cause=16;text=normal") == .hangup)
        #expect(SIPWire.cancelReason("SIP;cause=two hundred") == .hangup)
        #expect(SIPWire.cancelReason(nil) == .hangup)
    }

    @Test func dtmfInfoBodiesGiveTheirDigit() {
        #expect(SIPWire.dtmfDigit(contentType: "application/dtmf-relay", body: "Signal=5\r\nDuration=160\r\n") == "5")
        #expect(SIPWire.dtmfDigit(contentType: "application/dtmf-relay", body: "Signal= #\nDuration=100") == "#")
        #expect(SIPWire.dtmfDigit(contentType: "application/dtmf-relay", body: "signal=b") == "B")
        #expect(SIPWire.dtmfDigit(contentType: "application/dtmf", body: "*\r\n") == "*")
        #expect(SIPWire.dtmfDigit(contentType: "application/dtmf-relay", body: "Signal=hello") == nil)
        #expect(SIPWire.dtmfDigit(contentType: "application/dtmf-relay", body: "Signal=E") == nil)
        #expect(SIPWire.dtmfDigit(contentType: "text/plain", body: "5") == nil)
        #expect(SIPWire.dtmfDigit(contentType: nil, body: "5") == nil)
    }

    /// SIP has no trickle: an offer with ICE names its default candidate on c= and m= (RFC 8839),
    /// the relayed one first, then the server-reflexive one, then a host address; a peer's ICE
    /// (baresip's) takes a `c=0.0.0.0` / port 9 offer as one without ICE.
    @Test func anOfferWithICENamesItsDefaultCandidateOnItsCAndMLines() {
        let sdp = "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=audio 9 UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 0.0.0.0\r\n"
            + "a=rtcp:9 IN IP4 0.0.0.0\r\na=rtpmap:96 opus/48000/2\r\na=ice-ufrag:u\r\na=ice-pwd:p\r\na=rtcp-mux\r\n"
        let host = "candidate:1 1 UDP 2015363327 10.10.1.2 40000 typ host"
        let mdns = "candidate:4 1 UDP 2015363583 5b1c.local 40004 typ host"
        let srflx = "candidate:2 1 UDP 1677721855 100.64.1.2 50000 typ srflx raddr 10.10.1.2 rport 40000"
        let relay = "candidate:3 1 UDP 16777215 100.64.0.1 60000 typ relay raddr 100.64.1.2 rport 50000"
        let tcp = "candidate:5 1 TCP 1015363327 10.10.1.2 9 typ host tcptype active"
        func lines(_ text: String) -> [String] { text.components(separatedBy: "\r\n") }
        let withSrflx = lines(SIPWire.adding([host, srflx, tcp], to: sdp))
        #expect(withSrflx.contains("c=IN IP4 100.64.1.2") && withSrflx.contains("m=audio 50000 UDP/TLS/RTP/SAVPF 96"), "\(withSrflx)")
        #expect(withSrflx.contains("a=rtcp:50000 IN IP4 100.64.1.2"), "muxed RTCP is where RTP is")
        #expect(withSrflx.contains("a=" + host) && withSrflx.contains("a=end-of-candidates"))
        let withRelay = lines(SIPWire.adding([mdns, host, srflx, relay], to: sdp))
        #expect(withRelay.contains("c=IN IP4 100.64.0.1") && withRelay.contains("m=audio 60000 UDP/TLS/RTP/SAVPF 96"), "\(withRelay)")
        let hostOnly = lines(SIPWire.adding([mdns, host], to: sdp))
        #expect(hostOnly.contains("c=IN IP4 10.10.1.2") && hostOnly.contains("m=audio 40000 UDP/TLS/RTP/SAVPF 96"), "an mDNS name is no default")
        // No candidates (a plain RTP offer): unchanged.
        #expect(SIPWire.adding([], to: sdp) == sdp)
    }
}
