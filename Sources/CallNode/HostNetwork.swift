import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// This host's network as calls depend on it: its addresses and its default routes.
///
/// The node compares one snapshot with the next (``CallNodeConfiguration/hostNetwork``, every
/// ``CallNodeConfiguration/hostNetworkCheckInterval``): when an address a call uses goes, or the
/// default route changes, the call restarts ICE at once and, if its signaling connection left
/// from the address that went, resumes on a new connection.
public struct HostNetworkSnapshot: Sendable, Equatable {
    /// Every IP address of an interface that is up, loopback excepted.
    public var addresses: Set<String>
    /// The default routes, as `interface via gateway` (IPv4) or `interface` (IPv6).
    public var defaultRoutes: Set<String>

    public init(addresses: Set<String>, defaultRoutes: Set<String> = []) {
        self.addresses = addresses
        self.defaultRoutes = defaultRoutes
    }

    /// Read now from the kernel (`getifaddrs`, `/proc/net/route`, `/proc/net/ipv6_route`).
    public static func current() -> HostNetworkSnapshot {
        HostNetworkSnapshot(addresses: interfaceAddresses(), defaultRoutes: defaultRoutesNow())
    }

    static func interfaceAddresses() -> Set<String> {
        var result: Set<String> = []
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0, let first = list else { return result }
        defer { freeifaddrs(list) }
        var cursor: UnsafeMutablePointer<ifaddrs>? = first
        while let entry = cursor {
            defer { cursor = entry.pointee.ifa_next }
            let flags = Int32(entry.pointee.ifa_flags)
            guard flags & Int32(IFF_UP) != 0, flags & Int32(IFF_LOOPBACK) == 0,
                  let address = entry.pointee.ifa_addr else { continue }
            let family = Int32(address.pointee.sa_family)
            guard family == AF_INET || family == AF_INET6 else { continue }
            var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
            let length = socklen_t(family == AF_INET ? MemoryLayout<sockaddr_in>.size : MemoryLayout<sockaddr_in6>.size)
            guard getnameinfo(address, length, &host, socklen_t(host.count), nil, 0, NI_NUMERICHOST) == 0 else { continue }
            // A scoped IPv6 address names its interface after '%': keep the address.
            let text = String(decoding: host.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            result.insert(String(text.split(separator: "%").first ?? Substring(text)))
        }
        return result
    }

    static func defaultRoutesNow() -> Set<String> {
        var routes: Set<String> = []
        if let table = try? String(contentsOfFile: "/proc/net/route", encoding: .utf8) {
            // Iface Destination Gateway Flags …, hexadecimal, the destination 0 for a default route.
            for line in table.split(separator: "\n").dropFirst() {
                let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
                guard fields.count > 3, fields[1] == "00000000", let gateway = UInt32(fields[2], radix: 16) else { continue }
                let bytes = withUnsafeBytes(of: gateway.littleEndian) { Array($0) }
                routes.insert("\(fields[0]) via \(bytes.map(String.init).joined(separator: "."))")
            }
        }
        if let table = try? String(contentsOfFile: "/proc/net/ipv6_route", encoding: .utf8) {
            // destination, prefix length, … device last; ::/0 is the default route.
            for line in table.split(separator: "\n") {
                let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                guard fields.count >= 10, fields[0] == String(repeating: "0", count: 32), fields[1] == "00", fields[9] != "lo" else { continue }
                routes.insert(String(fields[9]))
            }
        }
        return routes
    }

    /// What changed from `previous` to this snapshot, for the log.
    public func changes(since previous: HostNetworkSnapshot) -> (added: [String], removed: [String], routesChanged: Bool) {
        (addresses.subtracting(previous.addresses).sorted(), previous.addresses.subtracting(addresses).sorted(),
         defaultRoutes != previous.defaultRoutes)
    }
}
