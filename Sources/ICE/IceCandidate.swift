#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The kind of an ICE candidate (RFC 8445 §5.1.1), as written after `typ` in SDP.
public enum IceCandidateType: String, Sendable, Hashable, CaseIterable {
    /// An address on a local interface.
    case host
    /// The public address a STUN server saw (server reflexive).
    case serverReflexive = "srflx"
    /// An address learnt from a peer's connectivity check (peer reflexive).
    case peerReflexive = "prflx"
    /// An address allocated on a TURN server.
    case relay
}

/// The transport of an ICE candidate.
public enum IceTransport: String, Sendable, Hashable, CaseIterable {
    /// UDP, the transport of almost every media candidate.
    case udp = "UDP"
    /// TCP (RFC 6544), with its role in ``IceCandidate/tcpType``.
    case tcp = "TCP"
}

/// The role of a TCP candidate (RFC 6544 §4.5), carried in the `tcptype` extension.
public enum IceTcpType: String, Sendable, Hashable, CaseIterable {
    /// Opens connections; its port is usually 9 (discard) in SDP.
    case active
    /// Accepts connections.
    case passive
    /// Simultaneous open.
    case simultaneousOpen = "so"
}

/// One ICE candidate: a value that prints and parses as an RFC 8839 `candidate:` attribute.
///
/// ```swift
/// let c = try IceCandidate(parsing: "candidate:1 1 UDP 2130706431 192.0.2.1 5000 typ host")
/// print(c)   // candidate:1 1 UDP 2130706431 192.0.2.1 5000 typ host
/// ```
///
/// Parsing accepts the attribute with or without the `a=` prefix and keeps unknown extension
/// attributes (`generation`, `network-id`, …) so a candidate forwarded to another peer loses nothing.
/// Malformed text throws ``IceCandidateParseError``; it never traps.
public struct IceCandidate: Sendable, Hashable, CustomStringConvertible {
    /// Groups candidates of the same type, base and server; 1 to 32 `ice-char`s.
    public var foundation: String
    /// The component: 1 for RTP (with rtcp-mux, the only one CallNode uses), 2 for RTCP.
    public var component: Int
    /// UDP or TCP.
    public var transport: IceTransport
    /// The candidate's priority (RFC 8445 §5.1.2).
    public var priority: UInt32
    /// An IPv4 or IPv6 literal, or a fully qualified domain name (such as an mDNS `.local` name).
    public var address: String
    /// The port; 0 to 65535 (9 is customary for TCP active candidates).
    public var port: UInt16
    /// Host, server reflexive, peer reflexive or relay.
    public var type: IceCandidateType
    /// The related address (`raddr`): the base of a reflexive or relayed candidate.
    public var relatedAddress: String?
    /// The related port (`rport`).
    public var relatedPort: UInt16?
    /// The TCP role (`tcptype`); `nil` for UDP.
    public var tcpType: IceTcpType?
    /// Extension attributes other than `tcptype`, in the order they appeared.
    public var extensions: [Extension]

    /// One `name value` extension pair after the fixed fields.
    public struct Extension: Sendable, Hashable {
        /// The attribute name, such as `generation`.
        public var name: String
        /// Its value.
        public var value: String

        /// Creates an extension attribute.
        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    /// Creates a candidate from its fields.
    public init(
        foundation: String, component: Int = 1, transport: IceTransport = .udp, priority: UInt32,
        address: String, port: UInt16, type: IceCandidateType,
        relatedAddress: String? = nil, relatedPort: UInt16? = nil,
        tcpType: IceTcpType? = nil, extensions: [Extension] = []
    ) {
        self.foundation = foundation
        self.component = component
        self.transport = transport
        self.priority = priority
        self.address = address
        self.port = port
        self.type = type
        self.relatedAddress = relatedAddress
        self.relatedPort = relatedPort
        self.tcpType = tcpType
        self.extensions = extensions
    }

    /// The attribute text without the `a=` prefix: `candidate:<foundation> <component> …`.
    public var description: String {
        var text = "candidate:\(foundation) \(component) \(transport.rawValue) \(priority) \(address) \(port) typ \(type.rawValue)"
        if let relatedAddress { text += " raddr \(relatedAddress)" }
        if let relatedPort { text += " rport \(relatedPort)" }
        if let tcpType { text += " tcptype \(tcpType.rawValue)" }
        for ext in extensions { text += " \(ext.name) \(ext.value)" }
        return text
    }

    /// The SDP line: `a=candidate:…`.
    public var sdpLine: String { "a=" + description }

    /// Whether the address is an IP literal (rather than a name that must be resolved first).
    public var hasIPAddress: Bool { IPAddressSyntax.isIPv4(address) || IPAddressSyntax.isIPv6(address) }
}

/// Why a candidate attribute could not be parsed. Each case carries the offending text.
public enum IceCandidateParseError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The text does not start with `candidate:` (optionally after `a=`).
    case missingPrefix(String)
    /// A required field is absent; the associated value names it.
    case missingField(String)
    /// The foundation is empty, longer than 32 characters, or has characters outside `ice-char`.
    case invalidFoundation(String)
    /// The component is not a number from 1 to 256.
    case invalidComponent(String)
    /// The transport is neither UDP nor TCP.
    case invalidTransport(String)
    /// The priority is not a 32-bit unsigned number.
    case invalidPriority(String)
    /// The connection address is neither an IP literal nor a host name.
    case invalidAddress(String)
    /// A port is not a number from 0 to 65535.
    case invalidPort(String)
    /// `typ` is missing or followed by an unknown candidate type.
    case invalidType(String)
    /// `raddr`/`rport`/`tcptype` or an extension attribute is malformed.
    case invalidExtension(String)

    public var description: String {
        switch self {
        case .missingPrefix(let s): "candidate attribute must start with 'candidate:' (got \(Self.clip(s)))"
        case .missingField(let s): "candidate attribute is missing its \(s)"
        case .invalidFoundation(let s): "invalid candidate foundation '\(Self.clip(s))' (1-32 of A-Z a-z 0-9 + /)"
        case .invalidComponent(let s): "invalid candidate component '\(Self.clip(s))' (1-256)"
        case .invalidTransport(let s): "invalid candidate transport '\(Self.clip(s))' (UDP or TCP)"
        case .invalidPriority(let s): "invalid candidate priority '\(Self.clip(s))' (0-4294967295)"
        case .invalidAddress(let s): "invalid candidate address '\(Self.clip(s))'"
        case .invalidPort(let s): "invalid candidate port '\(Self.clip(s))' (0-65535)"
        case .invalidType(let s): "invalid candidate type '\(Self.clip(s))' (typ host|srflx|prflx|relay)"
        case .invalidExtension(let s): "invalid candidate extension '\(Self.clip(s))'"
        }
    }

    private static func clip(_ s: String) -> String { s.count > 64 ? String(s.prefix(64)) + "…" : s }
}

extension IceCandidate {
    /// Parses an RFC 8839 candidate attribute (`candidate:…` or `a=candidate:…`).
    ///
    /// - Throws: ``IceCandidateParseError`` naming the field that is wrong.
    public init(parsing text: String) throws(IceCandidateParseError) {
        var body = Substring(text)
        while let last = body.last, last.isNewline || last == " " { body.removeLast() }
        if body.hasPrefix("a=") { body = body.dropFirst(2) }
        guard body.hasPrefix("candidate:") else { throw .missingPrefix(String(body)) }
        body = body.dropFirst("candidate:".count)

        // Fields are separated by single spaces in the grammar; tolerate runs of spaces and tabs.
        var fields = body.split(whereSeparator: { $0 == " " || $0 == "\t" })[...]
        func next(_ name: String) throws(IceCandidateParseError) -> Substring {
            guard let field = fields.popFirst() else { throw .missingField(name) }
            return field
        }

        let foundation = try next("foundation")
        guard (1...32).contains(foundation.count), foundation.allSatisfy(Self.isIceChar) else {
            throw .invalidFoundation(String(foundation))
        }

        let componentText = try next("component")
        guard componentText.count <= 3, let component = Int(componentText), (1...256).contains(component) else {
            throw .invalidComponent(String(componentText))
        }

        let transportText = try next("transport")
        guard let transport = IceTransport(rawValue: transportText.uppercased()) else {
            throw .invalidTransport(String(transportText))
        }

        let priorityText = try next("priority")
        guard priorityText.count <= 10, priorityText.allSatisfy(\.isASCIIDigit),
              let priority = UInt32(priorityText)
        else { throw .invalidPriority(String(priorityText)) }

        let addressText = try next("connection address")
        guard IPAddressSyntax.isValidConnectionAddress(addressText) else {
            throw .invalidAddress(String(addressText))
        }

        let port = try Self.port(try next("port"))

        let typKeyword = try next("'typ'")
        guard typKeyword == "typ" else { throw .invalidType(String(typKeyword)) }
        let typeText = try next("candidate type")
        guard let type = IceCandidateType(rawValue: String(typeText)) else {
            throw .invalidType(String(typeText))
        }

        var candidate = IceCandidate(
            foundation: String(foundation), component: component, transport: transport,
            priority: priority, address: String(addressText), port: port, type: type)

        while let name = fields.popFirst() {
            guard let value = fields.popFirst() else { throw .invalidExtension(String(name)) }
            switch name {
            case "raddr":
                guard candidate.relatedAddress == nil, IPAddressSyntax.isValidConnectionAddress(value) else {
                    throw .invalidExtension("raddr \(value)")
                }
                candidate.relatedAddress = String(value)
            case "rport":
                guard candidate.relatedPort == nil else { throw .invalidExtension("rport \(value)") }
                candidate.relatedPort = try Self.port(value)
            case "tcptype":
                guard candidate.tcpType == nil, let tcpType = IceTcpType(rawValue: String(value)) else {
                    throw .invalidExtension("tcptype \(value)")
                }
                candidate.tcpType = tcpType
            default:
                guard name.allSatisfy(Self.isTokenChar), value.allSatisfy(Self.isValueChar) else {
                    throw .invalidExtension("\(name) \(value)")
                }
                candidate.extensions.append(.init(name: String(name), value: String(value)))
            }
        }
        self = candidate
    }

    private static func port(_ text: Substring) throws(IceCandidateParseError) -> UInt16 {
        guard text.count <= 5, text.allSatisfy(\.isASCIIDigit), let port = UInt16(text) else {
            throw .invalidPort(String(text))
        }
        return port
    }

    /// RFC 8839 `ice-char`: ALPHA / DIGIT / "+" / "/".
    static func isIceChar(_ c: Character) -> Bool {
        c.isASCII && (c.isLetter || c.isNumber || c == "+" || c == "/")
    }

    /// RFC 8866 `token` characters, used for extension names.
    static func isTokenChar(_ c: Character) -> Bool {
        guard c.isASCII, let v = c.asciiValue else { return false }
        return v > 0x20 && v < 0x7F && !"\"(),/:;<=>?@[\\]{}".contains(c)
    }

    /// Extension values: any visible ASCII byte (`byte-string` without spaces).
    static func isValueChar(_ c: Character) -> Bool {
        guard let v = c.asciiValue else { return false }
        return v > 0x20 && v < 0x7F
    }
}

extension Character {
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}

/// Address syntax checks shared by the candidate parser and the configuration.
enum IPAddressSyntax {
    static func isIPv4(_ text: some StringProtocol) -> Bool {
        var addr = in_addr()
        return String(text).withCString { inet_pton(AF_INET, $0, &addr) } == 1
    }

    static func isIPv6(_ text: some StringProtocol) -> Bool {
        var addr = in6_addr()
        return String(text).withCString { inet_pton(AF_INET6, $0, &addr) } == 1
    }

    /// An IP literal or an RFC 1123 host name (labels of letters, digits and hyphens).
    static func isValidConnectionAddress(_ text: some StringProtocol) -> Bool {
        if isIPv4(text) || isIPv6(text) { return true }
        guard (1...253).contains(text.count) else { return false }
        let labels = text.split(separator: ".", omittingEmptySubsequences: false)
        // A dotted all-numeric name would be a malformed IPv4 literal, not a host name.
        if labels.allSatisfy({ $0.allSatisfy(\.isASCIIDigit) }) { return false }
        return labels.allSatisfy { label in
            (1...63).contains(label.count) && label.first != "-" && label.last != "-"
                && label.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }
        }
    }
}
