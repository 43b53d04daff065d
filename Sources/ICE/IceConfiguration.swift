import Clocks
/// A host and port, such as a STUN or TURN server's.
public struct IceServerAddress: Sendable, Hashable, CustomStringConvertible {
    /// An IP literal or a host name (resolved once, when the agent starts).
    public var host: String
    /// The UDP/TCP port.
    public var port: UInt16

    /// Creates an address.
    public init(host: String, port: UInt16) {
        self.host = host
        self.port = port
    }

    /// Parses `HOST:PORT` or `[IPV6]:PORT`.
    public init?(_ text: String) {
        let host: Substring
        let portText: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"),
                  text[text.index(after: close)...].hasPrefix(":") else { return nil }
            host = text[text.index(after: text.startIndex)..<close]
            portText = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":") else { return nil }
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
        }
        guard !host.isEmpty, let port = UInt16(portText), port > 0 else { return nil }
        self.init(host: String(host), port: port)
    }

    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// A TURN server (RFC 8656) with long-term credentials.
public struct TurnServer: Sendable, Hashable {
    /// How the agent reaches the TURN server.
    public enum Transport: String, Sendable, Hashable, CaseIterable {
        /// TURN over UDP (the usual case).
        case udp
        /// TURN over TCP, for networks that block UDP.
        case tcp
    }

    /// The server's address.
    public var address: IceServerAddress
    /// The long-term credential username.
    public var username: String
    /// The long-term credential password.
    public var password: String
    /// UDP or TCP to the server; relayed media is UDP either way.
    public var transport: Transport

    /// Creates a TURN server entry.
    public init(address: IceServerAddress, username: String, password: String, transport: Transport = .udp) {
        self.address = address
        self.username = username
        self.password = password
        self.transport = transport
    }
}

/// How an ``IceAgent`` gathers and checks. Defaults suit a call on an ordinary network.
public struct IceConfiguration: Sendable {
    /// Controlling or controlled. Default: controlling.
    public var role: IceRole = .controlling
    /// The clock ``connectTimeout`` runs on: continuous by default; a node gives its own (a
    /// manual one in tests).
    public var clock: TimerClock = .continuous
    /// A STUN server for server-reflexive candidates. Default: none.
    public var stunServer: IceServerAddress?
    /// TURN servers for relayed candidates. Default: none.
    public var turnServers: [TurnServer] = []
    /// Gather and use relayed candidates only (hides local addresses; needs a TURN server).
    public var relayOnly = false
    /// Bind host candidates only on these IP addresses. Empty: every interface libnice finds
    /// (it leaves loopback out unless it is the only one), so pin `127.0.0.1` for loopback calls.
    public var localAddresses: [String] = []
    /// Local ports to use for host candidates. Default: any.
    public var portRange: ClosedRange<UInt16>?
    /// The interval between connectivity checks and STUN/TURN requests (RFC 8445 Ta). Default
    /// 5 ms, the RFC's lower bound: a call has a handful of candidate pairs, so checks stay a
    /// few kilobytes per second, and each check round costs 5 ms instead of libnice's 20 ms
    /// (on loopback: connect in about 7 ms instead of 23 ms).
    public var checkPacing: Duration = .milliseconds(5)
    /// How long checks may run without a working pair before the agent reports ``IceConnectionState/failed``.
    public var connectTimeout: Duration = .seconds(30)
    /// How many times a check is sent again before its pair fails (nil: libnice's own, 3: a pair
    /// unanswered fails about 2.5 s in). More keeps an unanswered pair checking for longer.
    public var checkRetransmissions: Int?
    /// ICE-TCP candidates (RFC 6544). Default: off.
    public var iceTCP = false
    /// UPnP-IGD port mappings. Default: off.
    public var upnp = false
    /// RFC 7675 consent freshness through libnice: this agent sends consent checks on the
    /// selected pair (every agent answers the peer's, whatever this says: browsers send them).
    /// Default: off, because libnice 0.1.21 fails the
    /// whole component as soon as one consent transaction goes unanswered: a 5 s link cut, or a
    /// few seconds of 30 % loss, ended calls that were otherwise fine. A call node watches the
    /// authenticated media instead (``IceConnectionState/disconnected`` is then never reported;
    /// the node reports a stall from the media and gives up after its own timeout).
    public var consentFreshness = false
    /// Received datagrams kept while nobody reads ``IceAgent/datagrams``; past it the oldest are
    /// dropped (late audio is worthless), never queued without bound.
    public var receiveBufferLimit = 1024

    /// A configuration with the defaults.
    public init() {}

    /// A configuration with the given role and defaults otherwise.
    public init(role: IceRole) { self.role = role }

    func validate() throws(IceError) {
        if relayOnly && turnServers.isEmpty {
            throw .invalidConfiguration("relay-only needs at least one TURN server")
        }
        if let range = portRange, range.lowerBound == 0 {
            throw .invalidConfiguration("port range must not include 0")
        }
        if checkPacing < .milliseconds(1) || checkPacing > .seconds(1) {
            throw .invalidConfiguration("check pacing must be between 1 ms and 1 s")
        }
        if connectTimeout <= .zero {
            throw .invalidConfiguration("connect timeout must be positive")
        }
        if receiveBufferLimit < 1 {
            throw .invalidConfiguration("receive buffer limit must be at least 1")
        }
        for address in localAddresses where !(IPAddressSyntax.isIPv4(address) || IPAddressSyntax.isIPv6(address)) {
            throw .invalidConfiguration("local address '\(address)' is not an IP address")
        }
    }
}

extension TurnServer {
    /// Parses `USER:PASS@HOST:PORT` with an optional `?transport=udp|tcp` suffix (as the CLI's
    /// `--turn` flag takes it). Returns `nil` when any part is missing.
    public init?(spec: String) {
        var text = Substring(spec)
        var transport = Transport.udp
        if let question = text.firstIndex(of: "?") {
            let query = text[text.index(after: question)...]
            guard query.hasPrefix("transport="),
                  let t = Transport(rawValue: query.dropFirst("transport=".count).lowercased())
            else { return nil }
            transport = t
            text = text[..<question]
        }
        guard let at = text.lastIndex(of: "@") else { return nil }
        let credentials = text[..<at]
        guard let colon = credentials.firstIndex(of: ":") else { return nil }
        let username = credentials[..<colon]
        let password = credentials[credentials.index(after: colon)...]
        guard !username.isEmpty, !password.isEmpty,
              let address = IceServerAddress(String(text[text.index(after: at)...]))
        else { return nil }
        self.init(address: address, username: String(username), password: String(password), transport: transport)
    }
}
