import ICE
import Testing

@Suite struct HostNameResolverTests {
    @Test func mDNSNamesAreRecognised() {
        #expect(HostNameResolver.isMDNSName("1f0c2c7e-1c4b-4f0e-9d3f-0a1b2c3d4e5f.local"))
        #expect(HostNameResolver.isMDNSName("Printer.LOCAL"))
        #expect(!HostNameResolver.isMDNSName("10.99.0.1") && !HostNameResolver.isMDNSName("turn.example.org"))
    }

    @Test func aNameThatResolvesGivesANumericAddress() async {
        let address = await HostNameResolver.resolve("localhost", timeout: .seconds(5))
        #expect(address == "127.0.0.1" || address == "::1", "localhost resolved to \(address ?? "nothing")")
    }

    @Test func aNameThatDoesNotResolveGivesNothing() async throws {
        // Either the lookup fails, or the timeout answers first: nil both ways, never a hang.
        let name = "callnode-\(UInt64.random(in: 1...UInt64.max)).local"
        #expect(await HostNameResolver.resolve(name, timeout: .milliseconds(300)) == nil)
        let candidate = try IceCandidate(parsing: "candidate:1 1 udp 2122260223 \(name) 51234 typ host")
        #expect(!candidate.hasIPAddress && HostNameResolver.isMDNSName(candidate.address))
    }
}
