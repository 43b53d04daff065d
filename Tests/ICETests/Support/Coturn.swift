import CallNodeTestSupport
import Foundation
import ICE
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A real coturn STUN/TURN server on loopback for one test, stopped by ``stop()``.
///
/// Flags as measured on this machine kind: `--allow-loopback-peers` is what lets relayed candidates on
/// 127.0.0.1 get permissions.
final class Coturn: Sendable {
    let port: UInt16
    let username = "callnode"
    let password = "secret"
    private let process: ChildProcess
    private let log: String

    private static let relayBlock = Atomic<Int>(0)

    init() async throws {
        guard let binary = ["/usr/bin/turnserver", "/usr/local/bin/turnserver"].first(where: FileManager.default.isExecutableFile(atPath:)) else {
            throw TestFailure("coturn's turnserver is not installed: run scripts/bootstrap")
        }
        port = UInt16(FreePort.udpAndTCP())
        // Separate relay port ranges per server so parallel runs never collide.
        let block = Self.relayBlock.add(1, ordering: .relaxed).newValue
        let minPort = 50_000 + ((Int(getpid()) * 7 + block * 50) % 10_000)
        log = "/tmp/callnode-coturn-\(getpid())-\(port).log"
        process = try ChildProcess(binary, [
            "-n", "--listening-ip=127.0.0.1", "--relay-ip=127.0.0.1", "--listening-port=\(port)",
            "--min-port=\(minPort)", "--max-port=\(minPort + 49)", "--lt-cred-mech", "--fingerprint",
            "--user=\(username):\(password)", "--realm=callnode.test", "--no-tls", "--no-dtls", "--no-cli",
            "--allow-loopback-peers", "--simple-log", "--pidfile=\(log).pid",
        ], output: log)
        // Ready when it accepts TCP on its port (it opens UDP and TCP listeners together).
        let deadline = ContinuousClock.now + .seconds(10)
        while !Self.acceptsTCP(port: port) {
            guard process.isRunning, ContinuousClock.now < deadline else {
                process.stop()
                throw TestFailure("coturn did not start on 127.0.0.1:\(port); log: \(log)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }

    var address: IceServerAddress { IceServerAddress(host: "127.0.0.1", port: port) }

    func turnServer(_ transport: TurnServer.Transport) -> TurnServer {
        TurnServer(address: address, username: username, password: password, transport: transport)
    }

    func stop() {
        // coturn takes about 2 s to exit on SIGTERM; a test server has no state worth keeping.
        process.stop(grace: .zero)
        unlink(log)
        unlink(log + ".pid")
    }

    private static func acceptsTCP(port: UInt16) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = port.bigEndian
        return withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }
}

/// Source NAT on loopback for STUN requests to one port, so a STUN server on 127.0.0.1 sees the
/// agent as 127.0.0.5 and answers with a server-reflexive address that differs from the host
/// one. Lives in its own nftables table, deleted by ``remove()``.
struct LoopbackSourceNAT {
    let table: String

    init(stunPort: UInt16, mappedAddress: String = "127.0.0.5") throws {
        table = "callnode_test_\(getpid())_\(stunPort)"
        let rules = """
            table ip \(table) {
              chain post {
                type nat hook postrouting priority 100; policy accept;
                ip daddr 127.0.0.1 udp dport \(stunPort) snat to \(mappedAddress)
              }
            }
            """
        try Self.nft(["-f", "-"], input: rules)
    }

    func remove() {
        try? Self.nft(["delete", "table", "ip", table])
    }

    private static func nft(_ arguments: [String], input: String? = nil) throws {
        guard let binary = ["/usr/sbin/nft", "/sbin/nft"].first(where: FileManager.default.isExecutableFile(atPath:)) else {
            throw TestFailure("nft is not installed: run scripts/bootstrap")
        }
        let output = "/tmp/callnode-nft-\(getpid()).log"
        defer { unlink(output) }
        let status = try ChildProcess.run(binary, arguments, input: input ?? "", output: output)
        guard status == 0 else {
            let message = (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
            throw TestFailure("nft \(arguments.joined(separator: " ")) failed (it needs root): \(message)")
        }
    }
}
