import Locking

#if canImport(Glibc)
import Glibc
#endif

/// Ports for servers a test starts on loopback.
public enum FreePort {
    /// A port free for both UDP and TCP on 127.0.0.1 (a SIP agent takes both): one the kernel
    /// picks for UDP, tried again until TCP can have it too. Free when asked: another process
    /// may still take it before the server binds, but not one of the two protocols alone.
    ///
    /// Never the same port twice in one process: a port just closed is often the kernel's next
    /// pick, and two tests running side by side were handed one port — two SIP agents shared its
    /// UDP (each got the other's INVITEs) while the second could not listen on its TCP.
    public static func udpAndTCP() -> Int {
        for _ in 0..<200 {
            guard let port = bound(SOCK_DGRAM, port: 0), bound(SOCK_STREAM, port: port) != nil else { continue }
            if handedOut.withLock({ $0.insert(port).inserted }) { return port }
        }
        return bound(SOCK_DGRAM, port: 0) ?? 0
    }

    /// As ``udpAndTCP()``, with the next port free for TCP too: baresip listens for SIP over
    /// TLS there, and fails to start when something else has it.
    public static func udpAndTCPWithTLSNext() -> Int {
        for _ in 0..<200 {
            guard let port = bound(SOCK_DGRAM, port: 0), port < 65_535, bound(SOCK_STREAM, port: port) != nil,
                  bound(SOCK_STREAM, port: port + 1) != nil else { continue }
            let free = handedOut.withLock { ports in
                guard !ports.contains(port), !ports.contains(port + 1) else { return false }
                ports.formUnion([port, port + 1])
                return true
            }
            if free { return port }
        }
        return udpAndTCP()
    }

    private static let handedOut = Locked<Set<Int>>([])

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
