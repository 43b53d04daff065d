@testable import CallNode
import Testing

/// What the SIP dialect reads from a request's headers and bodies.
@Suite struct SIPDialectTests {
    /// RFC 3326: a CANCEL's Reason says whether another device answered or declined.
    @Test func aCancelsReasonSaysWhetherAnotherDeviceTookTheCall() {
        #expect(SIPDialect.cancelReason("SIP;cause=200;text=Call completed elsewhere") == .answeredElsewhere)
        #expect(SIPDialect.cancelReason("SIP;cause=600;text=Busy Everywhere") == .declinedElsewhere)
        #expect(SIPDialect.cancelReason("sip;cause=603;text=") == .declinedElsewhere)
        #expect(SIPDialect.cancelReason("SIP;cause=487;text=") == .hangup)
        #expect(SIPDialect.cancelReason("Q.850;cause=16;text=normal") == .hangup)
        #expect(SIPDialect.cancelReason("SIP;cause=two hundred") == .hangup)
        #expect(SIPDialect.cancelReason(nil) == .hangup)
    }

    @Test func dtmfInfoBodiesGiveTheirDigit() {
        #expect(SIPDialect.dtmfDigit(contentType: "application/dtmf-relay", body: "Signal=5\r\nDuration=160\r\n") == "5")
        #expect(SIPDialect.dtmfDigit(contentType: "application/dtmf-relay", body: "Signal= #\nDuration=100") == "#")
        #expect(SIPDialect.dtmfDigit(contentType: "application/dtmf-relay", body: "signal=b") == "B")
        #expect(SIPDialect.dtmfDigit(contentType: "application/dtmf", body: "*\r\n") == "*")
        #expect(SIPDialect.dtmfDigit(contentType: "application/dtmf-relay", body: "Signal=hello") == nil)
        #expect(SIPDialect.dtmfDigit(contentType: "application/dtmf-relay", body: "Signal=E") == nil)
        #expect(SIPDialect.dtmfDigit(contentType: "text/plain", body: "5") == nil)
        #expect(SIPDialect.dtmfDigit(contentType: nil, body: "5") == nil)
    }
}
