import CallNodeTestSupport
import Foundation
import Locking
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A node registered behind a NAT stays reachable: it sends its registrar an OPTIONS every
/// keep-alive interval (RFC 5626 §4.4) and, when the registrar saw its REGISTER come from
/// another address (Via `received`, `rport`: a NAT), registers that address as its Contact.
/// The registrar here is a few lines over a UDP socket that answers every request with 200 and
/// notes what came, so the test sees exactly what the node sent.
extension RealTimeTests {
@Suite(.serialized)
struct SIPKeepAliveTests {
    typealias Fixture = TwoNodeTests.Fixture

    @Test func aRegisteredNodeSendsKeepAlivesAndRegistersTheAddressTheRegistrarSaw() async throws {
        let f = try Fixture()
        let registrar = try TinyRegistrar(sawFrom: "127.0.0.2")
        defer { registrar.stop() }
        let node = try Self.registeringNode(f, registrar: registrar.port, keepAlive: "1")
        defer { node.stop() }
        // The Contact registered again with the address the registrar saw, then keep-alives.
        let seen = try await registrar.waitFor(node: node, log: f.path("node.log")) { requests in
            requests.contains { $0.method == "REGISTER" && $0.contact?.contains("127.0.0.2") == true }
                && requests.filter { $0.method == "OPTIONS" }.count >= 2
        }
        let keepAlive = try #require(seen.first { $0.method == "OPTIONS" })
        #expect(keepAlive.text.contains("KEEPALIVE"), "\(keepAlive.text)")
    }

    @Test func noKeepAlivesWhenTheyAreTurnedOff() async throws {
        let f = try Fixture()
        let registrar = try TinyRegistrar(sawFrom: nil)
        defer { registrar.stop() }
        let node = try Self.registeringNode(f, registrar: registrar.port, keepAlive: "0")
        defer { node.stop() }
        _ = try await registrar.waitFor(node: node, log: f.path("node.log")) { $0.contains { $0.method == "REGISTER" } }
        try await Task.sleep(for: .seconds(3))
        #expect(!registrar.requests.contains { $0.method == "OPTIONS" }, "\(registrar.requests.map(\.method))")
    }

    static func registeringNode(_ f: Fixture, registrar: Int, keepAlive: String) throws -> ChildProcess {
        try ChildProcess(try BuildProducts.executable("callnode"),
                         ["listen", "--home", f.path("node"), "--listen", "127.0.0.1:0", "--sip", "127.0.0.1:\(SIPCallTests.freePort())",
                          "--sip-register", "sip:alice@example.org", "--sip-registrar", "sip:127.0.0.1:\(registrar)",
                          "--sip-keepalive", keepAlive],
                         output: f.path("node.log"), environment: ["CALLNODE_SIP_PASSWORD": "unused"])
    }
}
}

/// A registrar in a few lines: a UDP socket on loopback answering every request with 200
/// (a REGISTER's with its Contact and an hour's expiry). `sawFrom`: the address it says the
/// requests came from (Via `received`), as a registrar beyond a NAT would.
final class TinyRegistrar: Sendable {
    struct Request: Sendable {
        let method: String
        let contact: String?
        let text: String
    }

    let port: Int
    private let fd: Int32
    private let seen = Locked<[Request]>([])
    private let running = Locked(true)

    init(sawFrom received: String?) throws {
        let descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0 }
        }
        guard bound else {
            close(descriptor)
            throw TestFailure("the registrar could not bind")
        }
        var timeout = timeval(tv_sec: 0, tv_usec: 100_000)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        fd = descriptor
        port = Int(UInt16(bigEndian: address.sin_port))
        let fd = descriptor, seen = self.seen, running = self.running
        Thread.detachNewThread {
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while running.withLock({ $0 }) {
                var from = sockaddr_in()
                var fromLength = socklen_t(MemoryLayout<sockaddr_in>.size)
                let count = withUnsafeMutablePointer(to: &from) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { recvfrom(fd, &buffer, buffer.count, 0, $0, &fromLength) }
                }
                guard count > 0 else { continue }
                let text = String(decoding: buffer.prefix(count), as: UTF8.self)
                guard let reply = Self.answer(text, received: received) else { continue }
                seen.withLock { $0.append(reply.request) }
                _ = reply.text.withCString { pointer in
                    withUnsafePointer(to: &from) {
                        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(fd, pointer, strlen(pointer), 0, $0, fromLength) }
                    }
                }
            }
        }
    }

    var requests: [Request] { seen.withLock { $0 } }

    /// Waits (up to 30 s: a debug node on a loaded host takes seconds to start) until the
    /// requests seen satisfy `done`; returns them. When they do not, the failure says whether
    /// the node (`node`, writing `log`) still runs and what it logged last.
    func waitFor(node: ChildProcess? = nil, log: String? = nil, _ done: ([Request]) -> Bool) async throws -> [Request] {
        for _ in 0..<300 {
            let now = requests
            if done(now) { return now }
            try await Task.sleep(for: .milliseconds(100))
        }
        var running = ""
        if let node {
            if node.isRunning {
                running = "; the node runs"
            } else {
                let status = await node.wait()
                running = "; the node has exited with status \(status) (-1: a signal)"
            }
        }
        let lines = log.flatMap { try? String(contentsOfFile: $0, encoding: .utf8) }?.split(separator: "\n").suffix(12) ?? []
        throw TestFailure("the registrar saw only \(requests.map { "\($0.method) \($0.contact ?? "")" })\(running)"
                          + (lines.isEmpty ? "" : "; its log ends:\n" + lines.joined(separator: "\n")))
    }

    func stop() {
        running.withLock { $0 = false }
        usleep(150_000)
        close(fd)
    }

    /// The 200 to a request (nil for a response or what does not parse).
    static func answer(_ text: String, received: String?) -> (request: Request, text: String)? {
        let lines = text.components(separatedBy: "\r\n")
        guard let first = lines.first, first.hasSuffix("SIP/2.0"), let method = first.split(separator: " ").first else { return nil }
        func header(_ long: String, _ short: String) -> String? {
            lines.first { line in
                let name = line.prefix { $0 != ":" }.trimmingCharacters(in: .whitespaces).lowercased()
                return name == long.lowercased() || name == short
            }
        }
        var via = header("Via", "v") ?? ""
        if let received { via += ";received=\(received)" }
        let contact = header("Contact", "m")
        var reply = ["SIP/2.0 200 OK", via]
        for (long, short) in [("From", "f"), ("To", "t"), ("Call-ID", "i"), ("CSeq", "")] {
            if let value = header(long, short) { reply.append(value + (long == "To" && !value.contains("tag=") ? ";tag=registrar" : "")) }
        }
        if method == "REGISTER", let contact {
            reply.append(contact)
            reply.append("Expires: 3600")
        }
        reply += ["Content-Length: 0", "", ""]
        return (Request(method: String(method), contact: contact, text: text), reply.joined(separator: "\r\n"))
    }
}
