/// A session description (RFC 8866), as written by this node or by other stacks.
///
/// Parsing is strict where a mistake would change meaning (version, origin, media and
/// connection lines) and lenient elsewhere: unknown attributes and line types are kept or
/// ignored, never fatal. Errors name the line that broke and why.
public struct SessionDescription: Sendable, Equatable {
    public var version = 0
    public var origin: SDPOrigin
    public var sessionName: String
    public var connection: SDPConnection?
    /// `b=` lines, verbatim (`AS:64`).
    public var bandwidths: [String] = []
    /// `t=` start and stop (NTP seconds; 0 0 for an unbounded session).
    public var timing = (start: UInt64(0), stop: UInt64(0))
    public var attributes: [SDPAttribute] = []
    public var media: [MediaDescription] = []

    public init(origin: SDPOrigin, sessionName: String = "-", connection: SDPConnection? = nil,
                attributes: [SDPAttribute] = [], media: [MediaDescription] = []) {
        self.origin = origin
        self.sessionName = sessionName
        self.connection = connection
        self.attributes = attributes
        self.media = media
    }

    public static func == (lhs: SessionDescription, rhs: SessionDescription) -> Bool {
        lhs.version == rhs.version && lhs.origin == rhs.origin && lhs.sessionName == rhs.sessionName
            && lhs.connection == rhs.connection && lhs.bandwidths == rhs.bandwidths && lhs.timing == rhs.timing
            && lhs.attributes == rhs.attributes && lhs.media == rhs.media
    }

    /// Parses SDP text (CRLF or LF line ends).
    /// - Throws: ``SDPParseError`` with the 1-based line number and the line's text.
    public init(parsing text: String) throws(SDPParseError) {
        var origin: SDPOrigin?
        var sessionName: String?
        var sawVersion = false
        var session = SessionDescription(origin: SDPOrigin(sessionID: "0"))
        var current: MediaDescription?
        // Lines are split on the bytes, not on Characters: "\r\n" is one Character, and a
        // combining mark after "\n" would glue two lines into one.
        let lines = Array(text.utf8).split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false)
        for (index, rawLine) in lines.enumerated() {
            let number = index + 1
            var bytes = rawLine
            if bytes.last == UInt8(ascii: "\r") { bytes = bytes.dropLast() }
            let line = Substring(String(decoding: bytes, as: UTF8.self))
            if line.isEmpty { continue }  // a trailing line end, or stray blank lines
            func fail(_ reason: String) -> SDPParseError { SDPParseError(line: number, text: String(line), reason: reason) }
            // RFC 8866 §5: no CR or LF inside a line (a lone CR would not survive being written).
            guard !bytes.contains(UInt8(ascii: "\r")) else { throw fail("a carriage return inside a line") }
            guard line.count >= 2, line.dropFirst().first == "=", let type = line.first else {
                throw fail("expected <type>=<value>")
            }
            let value = String(line.dropFirst(2))
            if !sawVersion {
                guard type == "v" else { throw fail("an SDP body starts with v=0") }
                guard value == "0" else { throw fail("unsupported SDP version '\(value)'") }
                sawVersion = true
                continue
            }
            switch type {
            case "o":
                guard current == nil, origin == nil else { throw fail("o= appears once, in the session part") }
                origin = try SDPOrigin(parsing: value, fail: fail)
            case "s":
                if current == nil { sessionName = value }
            case "c":
                let connection = try SDPConnection(parsing: value, fail: fail)
                if current != nil { current?.connection = connection } else { session.connection = connection }
            case "b":
                if current != nil { current?.bandwidths.append(value) } else { session.bandwidths.append(value) }
            case "t":
                let parts = value.split(separator: " ")
                guard parts.count == 2, let start = UInt64(parts[0]), let stop = UInt64(parts[1]) else {
                    throw fail("t= needs a start and a stop time")
                }
                session.timing = (start, stop)
            case "a":
                let attribute = SDPAttribute(parsing: value)
                if current != nil { current?.attributes.append(attribute) } else { session.attributes.append(attribute) }
            case "m":
                if let done = current { session.media.append(done) }
                current = try MediaDescription(parsing: value, fail: fail)
            case "i", "u", "e", "p", "r", "z", "k":
                continue  // informational or obsolete; ignored
            default:
                continue  // unknown types are ignored (RFC 8866 §5)
            }
        }
        if let done = current { session.media.append(done) }
        guard sawVersion else { throw SDPParseError(line: 1, text: "", reason: "empty SDP body") }
        guard let origin else {
            let second = lines.count > 1 ? String(decoding: lines[1], as: UTF8.self).trimmingCharacters(in: "\r") : ""
            throw SDPParseError(line: 2, text: second, reason: "no o= line (it belongs right after v=0)")
        }
        session.origin = origin
        session.sessionName = sessionName ?? "-"
        self = session
    }

    /// The SDP text, CRLF line ends, in RFC 8866 order.
    public var serialized: String {
        var lines = ["v=\(version)", "o=\(origin.serialized)", "s=\(sessionName.isEmpty ? "-" : sessionName)"]
        if let connection { lines.append("c=\(connection.serialized)") }
        lines += bandwidths.map { "b=\($0)" }
        lines.append("t=\(timing.start) \(timing.stop)")
        lines += attributes.map { "a=\($0.serialized)" }
        for m in media { lines += m.serializedLines }
        return lines.joined(separator: "\r\n") + "\r\n"
    }

    /// The first session-level attribute named `name`.
    public func attribute(_ name: String) -> SDPAttribute? { attributes.first { $0.name == name } }
}

/// Why SDP could not be parsed: which line, and what was wrong with it.
public struct SDPParseError: Error, Sendable, Equatable, CustomStringConvertible {
    public var line: Int
    public var text: String
    public var reason: String
    public var description: String { "\(Self.prefix) \(line) '\(text)': \(reason)" }
    /// How every description begins.
    public static let prefix = "SDP line"
}

/// `o=<username> <sess-id> <sess-version> IN IP4 <address>`
public struct SDPOrigin: Sendable, Equatable {
    public var username: String
    public var sessionID: String
    public var sessionVersion: UInt64
    public var networkType: String
    public var addressType: String
    public var address: String

    public init(username: String = "-", sessionID: String, sessionVersion: UInt64 = 1, networkType: String = "IN",
                addressType: String = "IP4", address: String = "0.0.0.0") {
        self.username = username
        self.sessionID = sessionID
        self.sessionVersion = sessionVersion
        self.networkType = networkType
        self.addressType = addressType
        self.address = address
    }

    init(parsing value: String, fail: (String) -> SDPParseError) throws(SDPParseError) {
        let parts = value.split(separator: " ").map(String.init)
        guard parts.count == 6 else { throw fail("o= needs six fields: username, session id, version, IN, address type, address") }
        guard let version = UInt64(parts[2]) else { throw fail("the session version '\(parts[2])' is not a number") }
        self.init(username: parts[0], sessionID: parts[1], sessionVersion: version, networkType: parts[3],
                  addressType: parts[4], address: parts[5])
    }

    var serialized: String { "\(username) \(sessionID) \(sessionVersion) \(networkType) \(addressType) \(address)" }
}

/// `c=IN IP4 <address>`
public struct SDPConnection: Sendable, Equatable {
    public var networkType: String
    public var addressType: String
    public var address: String

    public init(networkType: String = "IN", addressType: String = "IP4", address: String) {
        self.networkType = networkType
        self.addressType = addressType
        self.address = address
    }

    init(parsing value: String, fail: (String) -> SDPParseError) throws(SDPParseError) {
        let parts = value.split(separator: " ").map(String.init)
        guard parts.count == 3 else { throw fail("c= needs three fields: IN, address type, address") }
        guard parts[1] == "IP4" || parts[1] == "IP6" else { throw fail("unknown address type '\(parts[1])'") }
        self.init(networkType: parts[0], addressType: parts[1], address: parts[2])
    }

    var serialized: String { "\(networkType) \(addressType) \(address)" }
}

/// `a=<name>` or `a=<name>:<value>`; unknown ones are kept verbatim.
public struct SDPAttribute: Sendable, Equatable {
    public var name: String
    public var value: String?

    public init(_ name: String, _ value: String? = nil) {
        self.name = name
        self.value = value
    }

    init(parsing text: String) {
        if let colon = text.firstIndex(of: ":") {
            name = String(text[..<colon])
            value = String(text[text.index(after: colon)...])
        } else {
            name = text
            value = nil
        }
    }

    var serialized: String { value.map { "\(name):\($0)" } ?? name }
}

/// Which way media flows (RFC 3264 §5.1; hold is `sendonly` / `inactive`).
public enum MediaDirection: String, Sendable, CaseIterable {
    case sendrecv, sendonly, recvonly, inactive

    /// The direction an answer takes for this offered direction when the answerer would send
    /// and receive.
    public var answer: MediaDirection {
        switch self {
        case .sendrecv: .sendrecv
        case .sendonly: .recvonly
        case .recvonly: .sendonly
        case .inactive: .inactive
        }
    }

    /// The direction that sends and receives as said.
    public init(sends: Bool, receives: Bool) {
        self = switch (sends, receives) {
        case (true, true): .sendrecv
        case (true, false): .sendonly
        case (false, true): .recvonly
        case (false, false): .inactive
        }
    }

    /// Whether the side this direction describes sends media.
    public var sends: Bool { self == .sendrecv || self == .sendonly }
    /// Whether the side this direction describes receives media.
    public var receives: Bool { self == .sendrecv || self == .recvonly }

    /// The answer to this offered direction from a side that wants `wanted` (RFC 3264 §6.1):
    /// it sends only if the offerer receives and it wants to send, and receives only if the
    /// offerer sends and it wants to receive. (Holding with music against a resume: a
    /// `sendrecv` offer answered by a side that wants `sendonly` is `sendonly`.)
    public func answer(wanting wanted: MediaDirection) -> MediaDirection {
        MediaDirection(sends: receives && wanted.sends, receives: sends && wanted.receives)
    }
}
