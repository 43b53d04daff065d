@testable import CallNode
import Testing

/// Calling a SIP address without `--sip`: the host read from the URI, and an address of this host
/// toward it with a port free for both UDP and TCP.
@Suite struct SIPEphemeralAddressTests {
    @Test func theHostAndPortAreReadFromEveryFormOfSIPURI() {
        #expect(SIPURIHost("sip:bob@127.0.0.1:5080") == SIPURIHost(host: "127.0.0.1", port: 5080))
        #expect(SIPURIHost("sip:bob@example.org") == SIPURIHost(host: "example.org", port: nil))
        #expect(SIPURIHost("sips:bob@example.org:5061;transport=tls") == SIPURIHost(host: "example.org", port: 5061))
        #expect(SIPURIHost("SIP:10.0.0.2") == SIPURIHost(host: "10.0.0.2", port: nil))
        #expect(SIPURIHost("sip:alice@[2001:db8::1]:5070") == SIPURIHost(host: "2001:db8::1", port: 5070))
        #expect(SIPURIHost("sip:a@b@192.0.2.9?subject=x") == SIPURIHost(host: "192.0.2.9", port: nil))
        #expect(SIPURIHost("sip:") == nil)
        #expect(SIPURIHost("sip:bob@") == nil)
        #expect(SIPURIHost("sip:bob@[::1") == nil)
        #expect(SIPURIHost("tel:+15551234") == nil)
    }

    @Test func aPeerOnLoopbackGetsALoopbackAddressAndAPortFreeForUDPAndTCP() async throws {
        let settings = try #require(await SIPListenSettings.ephemeral(toward: "sip:bob@127.0.0.1:5080", user: "carol"))
        #expect(settings.host == "127.0.0.1")
        #expect(settings.port > 0 && settings.port < 65_536)
        #expect(settings.uri == "sip:carol@127.0.0.1:\(settings.port)")
        #expect(await SIPListenSettings.ephemeral(toward: "sip:bob@nonexistent.invalid") == nil)
        #expect(await SIPListenSettings.ephemeral(toward: "sip:") == nil)
    }
}
