import Foundation
import ICE

#if canImport(Glibc)
import Glibc
#endif

extension SIPListenSettings {
    /// Settings for calling `uri` without a SIP address of this node's own, as softphones do:
    /// the address of this host that routes to the peer's host, and a port the kernel picks
    /// that is free for both UDP and TCP there. `nil` when the URI names no host, the host does
    /// not resolve (within two seconds), or no route leads there.
    ///
    /// The port is free when chosen; another program could take it before the node listens,
    /// and then listening fails with that said.
    public static func ephemeral(toward uri: String, user: String = "callnode") async -> SIPListenSettings? {
        guard let host = SIPURIHost(uri)?.host else { return nil }
        let address: String
        if PlainRTPPath.localAddress(toward: host) != nil || host.contains(":") {
            address = host
        } else if let resolved = await HostNameResolver.resolve(host, timeout: .seconds(2)) {
            address = resolved
        } else {
            return nil
        }
        guard let local = PlainRTPPath.localAddress(toward: address), let port = freePort(on: local) else { return nil }
        return SIPListenSettings(host: local, port: port, user: user)
    }

    /// A port on `host` the kernel picks for UDP that TCP can bind too (a SIP agent takes both).
    static func freePort(on host: String) -> Int? {
        for _ in 0..<50 {
            guard let port = bound(SOCK_DGRAM, host: host, port: 0), bound(SOCK_STREAM, host: host, port: port) != nil else { continue }
            return port
        }
        return nil
    }

    /// Binds a socket of `type` to `host`:`port` (0: any), closes it, and returns the port.
    private static func bound(_ type: __socket_type, host: String, port: Int) -> Int? {
        let v6 = host.contains(":")
        let descriptor = socket(v6 ? AF_INET6 : AF_INET, Int32(type.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var storage = sockaddr_storage()
        var length: socklen_t
        if v6 {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = UInt16(port).bigEndian
            guard inet_pton(AF_INET6, host, &address.sin6_addr) == 1 else { return nil }
            length = socklen_t(MemoryLayout<sockaddr_in6>.size)
            withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: withUnsafeBytes(of: address) { UnsafeRawBufferPointer($0) }) }
        } else {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = UInt16(port).bigEndian
            guard inet_pton(AF_INET, host, &address.sin_addr) == 1 else { return nil }
            length = socklen_t(MemoryLayout<sockaddr_in>.size)
            withUnsafeMutableBytes(of: &storage) { $0.copyMemory(from: withUnsafeBytes(of: address) { UnsafeRawBufferPointer($0) }) }
        }
        let ok = withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                bind(descriptor, raw, length) == 0 && getsockname(descriptor, raw, &length) == 0
            }
        }
        guard ok else { return nil }
        let bytes = withUnsafeBytes(of: storage) { Array($0) }
        // The port sits at the same offset in sockaddr_in and sockaddr_in6 (after the family).
        return Int(UInt16(bytes[2]) << 8 | UInt16(bytes[3]))
    }
}

/// The host and port of a `sip:` or `sips:` URI (`sip:bob@example.org:5080;transport=tcp`,
/// `sip:[2001:db8::1]`, `sip:10.0.0.2`).
struct SIPURIHost: Equatable {
    var host: String
    var port: Int?

    init(host: String, port: Int?) {
        self.host = host
        self.port = port
    }

    init?(_ uri: String) {
        let lowered = uri.lowercased()
        guard let scheme = ["sips:", "sip:"].first(where: lowered.hasPrefix) else { return nil }
        var rest = Substring(uri.dropFirst(scheme.count))
        rest = rest.prefix { $0 != ";" && $0 != "?" && $0 != ">" }
        if let at = rest.lastIndex(of: "@") { rest = rest[rest.index(after: at)...] }
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else { return nil }
            host = String(rest[rest.index(after: rest.startIndex)..<close])
            let after = rest[rest.index(after: close)...]
            port = after.hasPrefix(":") ? Int(after.dropFirst()) : nil
        } else {
            let parts = rest.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            host = String(parts[0])
            port = parts.count > 1 ? Int(parts[1]) : nil
        }
        guard !host.isEmpty else { return nil }
    }
}
