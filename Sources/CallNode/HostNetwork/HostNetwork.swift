import Foundation
import POSIX

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

/// Tells when this host's addresses, links or routes may have changed: the kernel's routing
/// netlink messages (RTMGRP link, address and route groups, IPv4 and IPv6), read by a thread
/// of its own that sleeps in `poll` until one comes — nothing wakes while the network stays as
/// it is. A burst of messages (an address removed and another added, the routes after) is
/// reported once, `settle` after the first. Where no netlink socket can be had, it reports every
/// `fallback` instead, and it also reports after `fallback` without news, so a missed message
/// costs at most that.
public enum HostNetworkWatcher {
    /// A stream with one element per (possible) change; ending its iteration stops the thread.
    public static func changes(settle: Duration = .milliseconds(100), fallback: Duration = .seconds(10)) -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        var wake: [Int32] = [-1, -1]
        guard pipe(&wake) == 0 else {
            continuation.finish()
            return stream
        }
        let (wakeRead, wakeWrite) = (wake[0], wake[1])
        _ = fcntl(wakeWrite, F_SETFL, O_NONBLOCK)
        continuation.onTermination = { _ in
            var byte: UInt8 = 1
            _ = write(wakeWrite, &byte, 1)
        }
        let socket = openRouteSocket()
        do {
            try SystemThread.start(name: "callnode-netwatch", detached: true) {
                defer {
                    if socket >= 0 { close(socket) }
                    close(wakeRead)
                    close(wakeWrite)
                }
                var buffer = [UInt8](repeating: 0, count: 8_192)
                let fallbackMs = Int32(fallback.components.seconds * 1000 + fallback.components.attoseconds / 1_000_000_000_000_000)
                let settleMs = Int32(settle.components.seconds * 1000 + settle.components.attoseconds / 1_000_000_000_000_000)
                while true {
                    var fds = [pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0), pollfd(fd: socket, events: Int16(POLLIN), revents: 0)]
                    // A poll that fails for good (not an interruption) ends the watch rather than
                    // reporting a change at every turn.
                    guard let ready = try? syscall(where: "poll", { poll(&fds, socket >= 0 ? 2 : 1, fallbackMs) }) else { return }
                    if fds[0].revents != 0 { return }
                    if ready > 0 && fds[1].revents != 0 {
                        // Let the burst finish, draining what comes meanwhile, then report once.
                        var until = ContinuousClock.now + settle
                        while ContinuousClock.now < until {
                            while recv(socket, &buffer, buffer.count, Int32(MSG_DONTWAIT)) > 0 {}
                            var more = [pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0), pollfd(fd: socket, events: Int16(POLLIN), revents: 0)]
                            _ = poll(&more, 2, settleMs)
                            if more[0].revents != 0 { return }
                            if more[1].revents == 0 { until = .now }
                        }
                    }
                    if case .terminated = continuation.yield(()) { return }
                }
            }
        } catch {
            // No thread to watch on: no reports (the node keeps the addresses it has).
            continuation.onTermination = nil
            if socket >= 0 { close(socket) }
            close(wakeRead)
            close(wakeWrite)
            continuation.finish()
        }
        return stream
    }

    /// A routing netlink socket subscribed to link, address and route changes; -1 if none.
    private static func openRouteSocket() -> Int32 {
        #if os(Linux)
        let netlink: Int32 = 16, route: Int32 = 0
        let descriptor = socket(netlink, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue), route)
        guard descriptor >= 0 else { return -1 }
        // struct sockaddr_nl: family, pad, pid (0: the kernel picks), groups.
        struct NetlinkAddress { var family: UInt16; var pad: UInt16; var pid: UInt32; var groups: UInt32 }
        let link: UInt32 = 0x1, ipv4Address: UInt32 = 0x10, ipv4Route: UInt32 = 0x40, ipv6Address: UInt32 = 0x100, ipv6Route: UInt32 = 0x400
        var address = NetlinkAddress(family: UInt16(netlink), pad: 0, pid: 0, groups: link | ipv4Address | ipv4Route | ipv6Address | ipv6Route)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<NetlinkAddress>.size)) }
        }
        guard bound == 0 else {
            close(descriptor)
            return -1
        }
        return descriptor
        #else
        return -1
        #endif
    }
}
