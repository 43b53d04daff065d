/// Where a Janus room is: the server's API and the room's id, written
/// `janus:http://HOST[:PORT][/PATH]#ROOM` (its HTTP API: port 8088 and path `/janus` by default,
/// Janus's own), `janus:ws://HOST[:PORT][/PATH]#ROOM` (its WebSocket API, port 8188) or
/// `janus:unix:/PATH#ROOM` (its Unix-socket API on this host); `#videoroom:ROOM` names a
/// VideoRoom, `#e2ee:ROOM` one whose members encrypt their frames end to end.
/// A room's PIN never rides in the address (addresses reach argv, logs and Recents): it is
/// given beside it.
public struct JanusRoomAddress: Sendable, Hashable, CustomStringConvertible {
    /// Which of Janus's APIs the node speaks to it.
    public enum Transport: String, Sendable, Hashable {
        /// Its HTTP API (`http://`, port 8088): requests posted, events by long poll.
        case http
        /// Its WebSocket API (`ws://`, port 8188): requests and events on one connection.
        case webSocket = "ws"
        /// Its Unix-socket API (`unix:/PATH`, the pfunix transport): as the WebSocket, on this host.
        case unixSocket = "unix"
    }

    /// Which of Janus's room plugins the call speaks to.
    public enum Plugin: Sendable, Hashable {
        /// The AudioBridge (`#ROOM`): the call joins the room's mix.
        case audioBridge
        /// The VideoRoom as an audio SFU (`#videoroom:ROOM` publishes this node's audio to it;
        /// `#videoroom:ROOM/FEED` subscribes to one publisher's).
        case videoRoom(feed: String?)
    }

    public var transport: Transport
    public var plugin: Plugin = .audioBridge
    /// A VideoRoom group whose frames are encrypted end to end (`#e2ee:ROOM`, a room made
    /// with `require_e2ee`): Janus forwards what it cannot open, the members' keys go from
    /// node to node.
    public var endToEnd = false
    public var host: String
    public var port: Int
    /// The API's base path (`/janus`).
    public var path: String
    /// The room's id: a number (Janus's default) or a string (rooms with `string_ids`).
    public var room: String

    public init(host: String, port: Int = 8088, path: String = "/janus", room: String, transport: Transport = .http) {
        self.transport = transport
        self.host = host
        self.port = port
        self.path = path
        self.room = room
    }

    /// Reads `janus:http://HOST[:PORT][/PATH]#ROOM`; nil (with ``problem(_:)`` saying why) for
    /// anything else.
    public init?(_ text: String) {
        guard case let .success(address) = Self.parse(text) else { return nil }
        self = address
    }

    /// Why `text` is not a room's address, or nil when it is one.
    public static func problem(_ text: String) -> String? {
        if case let .failure(problem) = parse(text) { return problem.text }
        return nil
    }

    private struct Problem: Error { let text: String }

    private static func parse(_ text: String) -> Result<JanusRoomAddress, Problem> {
        guard let hash = text.lastIndex(of: "#") else { return parseRoom(text) }
        // `#videoroom:ROOM[/FEED]`: the VideoRoom, published to or one feed subscribed to;
        // `#e2ee:ROOM[/FEED]`: the same with frames encrypted end to end.
        let fragment = text[text.index(after: hash)...]
        guard let prefix = ["videoroom:", "e2ee:"].first(where: { fragment.lowercased().hasPrefix($0) }) else { return parseRoom(text) }
        let parts = fragment.dropFirst(prefix.count).split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count <= 2, let room = parts.first, isRoomID(String(room)) else {
            return .failure(Problem(text: "a VideoRoom is #\(prefix)ROOM (to publish) or #\(prefix)ROOM/FEED (to hear one publisher)"))
        }
        var parsed = parseRoom(String(text[..<hash]) + "#" + String(room))
        if case var .success(address) = parsed {
            address.endToEnd = prefix == "e2ee:"
            if parts.count == 2 {
                guard isRoomID(String(parts[1])) else { return .failure(Problem(text: "'\(parts[1])' is not a feed id")) }
                address.plugin = .videoRoom(feed: String(parts[1]))
            } else {
                address.plugin = .videoRoom(feed: nil)
            }
            parsed = .success(address)
        }
        return parsed
    }

    private static func parseRoom(_ text: String) -> Result<JanusRoomAddress, Problem> {
        let form = "a Janus room is janus:http://HOST[:PORT][/PATH]#ROOM, janus:ws://HOST[:PORT][/PATH]#ROOM or janus:unix:/PATH#ROOM"
        guard text.lowercased().hasPrefix("janus:") else { return .failure(Problem(text: form)) }
        var rest = Substring(text.dropFirst("janus:".count))
        if rest.lowercased().hasPrefix("unix:") {
            // janus:unix:/PATH#ROOM: the socket's path (absolute), no host or port.
            rest = rest.dropFirst("unix:".count)
            guard let hash = rest.lastIndex(of: "#") else { return .failure(Problem(text: "\(form): the room is missing (#ROOM)")) }
            let path = String(rest[..<hash]), room = String(rest[rest.index(after: hash)...])
            guard path.hasPrefix("/"), path.count > 1 else { return .failure(Problem(text: "\(form): a Unix socket's path is absolute")) }
            guard Self.isRoomID(room) else { return .failure(Problem(text: "\(form): '\(room)' is not a room id (digits, or letters, digits, - _ .)")) }
            return .success(JanusRoomAddress(host: "", port: 0, path: path, room: room, transport: .unixSocket))
        }
        let transport: Transport
        if rest.lowercased().hasPrefix("http://") {
            transport = .http
            rest = rest.dropFirst("http://".count)
        } else if rest.lowercased().hasPrefix("ws://") {
            transport = .webSocket
            rest = rest.dropFirst("ws://".count)
        } else {
            return .failure(Problem(text: "\(form) (Janus's plain HTTP or WebSocket API: http:// or ws://)"))
        }
        guard let hash = rest.firstIndex(of: "#") else { return .failure(Problem(text: "\(form): the room is missing (#ROOM)")) }
        let room = String(rest[rest.index(after: hash)...])
        guard Self.isRoomID(room) else {
            return .failure(Problem(text: "\(form): '\(room)' is not a room id (digits, or letters, digits, - _ .)"))
        }
        rest = rest[..<hash]
        let slash = rest.firstIndex(of: "/") ?? rest.endIndex
        var path = String(rest[slash...])
        while path.count > 1, path.hasSuffix("/") { path.removeLast() }
        if path.isEmpty || path == "/" { path = transport == .http ? "/janus" : "/" }
        let authority = rest[..<slash]
        var host = Substring(authority), port = transport == .http ? 8088 : 8188
        if authority.hasPrefix("["), let close = authority.firstIndex(of: "]") {
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if after.hasPrefix(":") {
                guard let value = Self.port(after.dropFirst()) else { return .failure(Problem(text: "\(form): a bad port")) }
                port = value
            } else if !after.isEmpty {
                return .failure(Problem(text: "\(form): '\(after)' after the address"))
            }
        } else if let colon = authority.lastIndex(of: ":") {
            host = authority[..<colon]
            guard let value = Self.port(authority[authority.index(after: colon)...]) else {
                return .failure(Problem(text: "\(form): a bad port"))
            }
            port = value
            guard !host.contains(":") else { return .failure(Problem(text: "\(form): an IPv6 address goes in brackets, [::1]")) }
        }
        guard !host.isEmpty, !host.contains(where: { $0.isWhitespace || "@?".contains($0) }) else {
            return .failure(Problem(text: "\(form): the host is missing"))
        }
        return .success(JanusRoomAddress(host: String(host), port: port, path: path, room: room, transport: transport))
    }

    private static func isRoomID(_ room: String) -> Bool {
        !room.isEmpty && room.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || "-_.".contains($0)) }
    }

    private static func port(_ text: Substring) -> Int? {
        guard !text.isEmpty, text.count <= 5, text.allSatisfy(\.isASCII), text.allSatisfy(\.isNumber), let value = Int(text),
              (1...65535).contains(value) else { return nil }
        return value
    }

    /// The room id as Janus's requests carry it: a number where it is all digits.
    public var roomValue: JanusJSON {
        if let number = Int64(room), number >= 0, String(number) == room { return .integer(number) }
        return .string(room)
    }

    /// The fragment naming the room (and the plugin, the feed).
    private var fragment: String {
        switch plugin {
        case .audioBridge: room
        case let .videoRoom(feed): (endToEnd ? "e2ee:" : "videoroom:") + room + (feed.map { "/\($0)" } ?? "")
        }
    }

    public var description: String {
        if transport == .unixSocket { return "janus:unix:\(path)#\(fragment)" }
        let shownHost = host.contains(":") ? "[\(host)]" : host
        return "janus:\(transport.rawValue)://\(shownHost):\(port)\(path == "/" ? "" : path)#\(fragment)"
    }
}
