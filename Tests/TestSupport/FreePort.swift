import Foundation
import Locking

#if canImport(Glibc)
import Glibc
#endif

/// Ports for servers a test starts on loopback.
///
/// Handed out from below the kernel's ephemeral range (`ip_local_port_range`), never from it:
/// a port the kernel picked for a probe socket is free when asked, but the kernel hands the
/// same range to every `bind(0)` and outgoing connection on the host (libnice's candidates, a
/// client's socket, another test's server), and one of them could take it before the server
/// binds it ("cannot listen for SIP at …: a port in use"). Below that range only a socket
/// bound to a port by number takes one, and nothing in the suite binds these by number but
/// the servers they are handed to.
public enum FreePort {
    /// A port free for both UDP and TCP on 127.0.0.1 (a SIP agent takes both).
    ///
    /// Never the same port twice in one process (until the range wraps): two tests running
    /// side by side must not be handed one port.
    public static func udpAndTCP() -> Int {
        for _ in 0..<range.count {
            let port = candidates(1)
            if bound(SOCK_DGRAM, port: port) != nil, bound(SOCK_STREAM, port: port) != nil { return port }
        }
        return bound(SOCK_DGRAM, port: 0) ?? 0
    }

    /// As ``udpAndTCP()``, with the next port free for TCP too: baresip listens for SIP over
    /// TLS there, and fails to start when something else has it.
    public static func udpAndTCPWithTLSNext() -> Int {
        for _ in 0..<range.count / 2 {
            let port = candidates(2)
            if bound(SOCK_DGRAM, port: port) != nil, bound(SOCK_STREAM, port: port) != nil,
               bound(SOCK_STREAM, port: port + 1) != nil { return port }
        }
        return udpAndTCP()
    }

    /// 20 000 up to the kernel's ephemeral range (32 768 by default).
    static let range: Range<Int> = {
        var lowestEphemeral = 32_768
        if let text = try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8),
           let first = text.split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).first,
           let value = Int(first) {
            lowestEphemeral = value
        }
        return 20_000..<max(20_100, lowestEphemeral)
    }()

    /// The next `count` ports in the range, from a place picked at random once per process
    /// (a run right after another does not meet the last one's sockets in TIME_WAIT first).
    private static func candidates(_ count: Int) -> Int {
        next.withLock { offset in
            if offset + count > range.count { offset = 0 }
            defer { offset += count }
            return range.lowerBound + offset
        }
    }

    private static let next = Locked<Int>(Int.random(in: 0..<10_000))

    /// Said by a server's start when the server could not bind a port it was handed: another
    /// process bound it by number in the meantime (a peer's media socket picked from its own
    /// range), which no check made before the server starts can rule out.
    public struct Taken: Error, CustomStringConvertible {
        public let description: String
        public init(_ description: String) { self.description = description }
    }

    /// Starts a server on ports handed out here, and starts it again on fresh ones (`start`
    /// picks them each time) while it says ``Taken``, `attempts` times in all; any other
    /// failure, or the last ``Taken``, is thrown as it came.
    public static func startRetrying<Server>(attempts: Int = 3, _ start: (_ attempt: Int) async throws -> Server) async throws -> Server {
        var attempt = 1
        while true {
            do {
                return try await start(attempt)
            } catch is Taken where attempt < attempts {
                attempt += 1
            }
        }
    }

    /// Binds a socket of `type` to 127.0.0.1:`port` (0: any), closes it, and returns the port.
    private static func bound(_ type: __socket_type, port: Int) -> Int? {
        let descriptor = socket(AF_INET, Int32(type.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let ok = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                bind(descriptor, raw, length) == 0 && getsockname(descriptor, raw, &length) == 0
            }
        }
        return ok ? Int(UInt16(bigEndian: address.sin_port)) : nil
    }
}
