import CallNodeTestSupport
import Foundation
import Testing

/// The ports test servers are handed: from below the kernel's ephemeral range, where no
/// `bind(0)` or outgoing socket can take one before its server binds it, and never twice.
@Suite struct FreePortTests {
    @Test func portsComeFromBelowTheKernelsEphemeralRangeAndNeverTwice() throws {
        let text = try String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)
        let lowestEphemeral = try #require(text.split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) })
        var seen: Set<Int> = []
        for _ in 0..<50 {
            let port = FreePort.udpAndTCP()
            #expect(port >= 20_000 && port < lowestEphemeral, "\(port)")
            #expect(seen.insert(port).inserted, "\(port) handed out twice")
        }
        let tls = FreePort.udpAndTCPWithTLSNext()
        #expect(tls >= 20_000 && tls + 1 < lowestEphemeral, "\(tls)")
        #expect(!seen.contains(tls) && !seen.contains(tls + 1), "\(tls) or the port after it handed out before")
    }

    @Test func aServerWhosePortWasTakenStartsAgainOnFreshPortsAndOtherFailuresAreThrownAsTheyCame() async throws {
        struct Broken: Error {}
        var ports: [Int] = []
        let started = try await FreePort.startRetrying { attempt -> Int in
            let port = FreePort.udpAndTCP()
            ports.append(port)
            if attempt < 3 { throw FreePort.Taken("port \(port) in use") }
            return port
        }
        #expect(ports.count == 3 && Set(ports).count == 3 && started == ports.last, "\(ports)")

        var tries = 0
        await #expect(throws: FreePort.Taken.self) {
            try await FreePort.startRetrying(attempts: 2) { _ -> Int in tries += 1; throw FreePort.Taken("in use") }
        }
        #expect(tries == 2)
        tries = 0
        await #expect(throws: Broken.self) {
            try await FreePort.startRetrying { _ -> Int in tries += 1; throw Broken() }
        }
        #expect(tries == 1)
    }
}
