import Clocks
import Dispatch
import Foundation
import Locking
import POSIX

#if canImport(Glibc)
import Glibc
#endif

/// Resolves the host names some ICE candidates carry instead of an address: browsers hide
/// their local addresses behind random mDNS names (`<uuid>.local`). The system resolver
/// answers them where mDNS is set up (nss-mdns); elsewhere the lookup fails or takes too
/// long, and the peer's checks still arrive, so its address is learnt as peer-reflexive.
public enum HostNameResolver {
    /// Whether a candidate's address is an mDNS name (RFC 6762 `.local`).
    public static func isMDNSName(_ address: String) -> Bool {
        address.lowercased().hasSuffix(".local")
    }

    /// The first address `name` resolves to, or `nil` when it does not resolve within
    /// `timeout` on `clock`. The lookup blocks, so it runs on a thread of its own, never on the
    /// cooperative pool; a lookup that outlives the timeout finishes there unheard.
    public static func resolve(_ name: String, timeout: Duration = .seconds(1), clock: TimerClock = .continuous) async -> String? {
        let deadline = clock.now + timeout
        return await withTaskGroup(of: String?.self) { group in
            let (lookedUp, done) = AsyncStream.makeStream(of: String?.self)
            do {
                try SystemThread.start(name: "callnode-resolve", detached: true) {
                    done.yield(lookup(name))
                    done.finish()
                }
            } catch {
                done.finish()  // no thread to look it up on: it does not resolve
            }
            group.addTask {
                for await address in lookedUp { return address }
                return nil
            }
            group.addTask {
                try? await clock.sleep(until: deadline)
                return nil
            }
            let first = await group.next() ?? nil
            group.cancelAll()
            return first
        }
    }

    /// getaddrinfo for UDP, IPv4 or IPv6, as numeric text.
    static func lookup(_ name: String) -> String? {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_DGRAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(name, nil, &hints, &result) == 0, let first = result else { return nil }
        defer { freeaddrinfo(result) }
        var host = [CChar](repeating: 0, count: Int(NI_MAXHOST))
        guard getnameinfo(first.pointee.ai_addr, first.pointee.ai_addrlen, &host, socklen_t(host.count), nil, 0, NI_NUMERICHOST) == 0 else {
            return nil
        }
        return String(decoding: host.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
