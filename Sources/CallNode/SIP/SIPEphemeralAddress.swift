import Foundation
import ICE

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
        guard let local = PlainRTPPath.localAddress(toward: address), let port = PlainRTPPath.portFreeForUDPAndTCP(on: local) else { return nil }
        return SIPListenSettings(host: local, port: port, user: user)
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
