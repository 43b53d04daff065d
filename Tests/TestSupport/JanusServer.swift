import Foundation
import Locking

#if canImport(Glibc)
import Glibc
#endif

/// A private Janus (Debian's 1.1.2) for tests: its own configuration folder, its HTTP API on
/// 127.0.0.1:`port` at `/janus`, its WebSocket API on 127.0.0.1:``webSocketPort`` and its
/// Unix-socket API at `directory/janus-api.sock`, only the AudioBridge and VideoRoom plugins and
/// those three transports loaded, and the AudioBridge rooms given (each `room-ID` with its settings).
///
/// Janus gathers its ICE candidates on this host's interfaces; it is ready within a second and
/// exits at SIGTERM. Its log is `directory/janus.log`.
public final class JanusServer: Sendable {
    public static let executable = "/usr/bin/janus"

    /// Whether Janus is installed (`apt-get install janus`).
    public static var isInstalled: Bool { access(executable, X_OK) == 0 }

    /// An AudioBridge room in the configuration.
    public struct Room: Sendable {
        public var id: Int
        public var pin: String?
        public var samplingRate: Int
        /// Whether the room tells who talks (`audiolevel_event`).
        public var talkingEvents: Bool

        public init(id: Int, pin: String? = nil, samplingRate: Int = 48_000, talkingEvents: Bool = false) {
            self.id = id
            self.pin = pin
            self.samplingRate = samplingRate
            self.talkingEvents = talkingEvents
        }
    }

    public let directory: String
    public let port: Int
    /// The WebSocket API's port (127.0.0.1, subprotocol `janus-protocol`).
    public let webSocketPort: Int
    public let rooms: [Room]
    /// VideoRoom rooms (audio only, Opus), by id.
    public let videoRooms: [Int]
    /// VideoRoom rooms that require end-to-end encrypted media (`require_e2ee`) and record what
    /// they forward (`record`) into ``recordingDirectory``, by id.
    public let encryptedRooms: [Int]
    /// Where the encrypted rooms' recordings go (`videoroom-ROOM-user-ID-…-audio-0.mjr`).
    public var recordingDirectory: String { directory + "/recordings" }
    /// The one address Janus gathers ICE candidates on (it never gathers on loopback): the
    /// nodes of a test use it too.
    public let mediaAddress: String
    public var logPath: String { directory + "/janus.log" }
    /// The API's base URL.
    public var url: String { "http://127.0.0.1:\(port)/janus" }

    /// A room's address as the node takes it (`janus:http://127.0.0.1:PORT/janus#ROOM`).
    public func address(room: Int) -> String { "janus:\(url)#\(room)" }

    /// A room's address over the WebSocket API (`janus:ws://127.0.0.1:PORT#ROOM`).
    public func webSocketAddress(room: Int) -> String { "janus:ws://127.0.0.1:\(webSocketPort)#\(room)" }

    /// A room's address over the Unix-socket API (`janus:unix:DIRECTORY/janus-api.sock#ROOM`).
    public func unixSocketAddress(room: Int) -> String { "janus:unix:\(directory)/janus-api.sock#\(room)" }

    private let process = Locked<ChildProcess?>(nil)

    /// Writes the configuration into `directory` (created if missing); ``start()`` runs it.
    /// - Parameter publishers: how many publishers a VideoRoom takes, by id (6 where not given).
    public init(directory: String, port: Int, rooms: [Room], videoRooms: [Int] = [], encryptedRooms: [Int] = [],
                publishers: [Int: Int] = [:]) throws {
        guard let mediaAddress = Self.hostAddress() else { throw TestFailure("this host has no IPv4 address but loopback's: Janus gathers no candidate on loopback") }
        self.directory = directory
        self.port = port
        webSocketPort = FreePort.udpAndTCP()
        self.rooms = rooms
        self.videoRooms = videoRooms
        self.encryptedRooms = encryptedRooms
        self.mediaAddress = mediaAddress
        try FileManager.default.createDirectory(atPath: directory + "/recordings", withIntermediateDirectories: true)
        let library = "/usr/lib/x86_64-linux-gnu/janus"
        let unwanted = ["duktape", "echotest", "lua", "nosip", "recordplay", "sip", "streaming", "textroom", "videocall", "voicemail"]
        let files: [String: String] = [
            "janus.jcfg": """
            general: {
                configs_folder = "\(directory)"
                plugins_folder = "\(library)/plugins"
                transports_folder = "\(library)/transports"
                events_folder = "\(library)/events"
                loggers_folder = "\(library)/loggers"
                debug_level = 4
                session_timeout = 60
            }
            certificates: {}
            media: {}
            nat: {
                nice_debug = false
                ice_enforce_list = "\(mediaAddress)"
            }
            plugins: {
                disable = "\(unwanted.map { "libjanus_\($0).so" }.joined(separator: ","))"
            }
            transports: {
                disable = "libjanus_mqtt.so,libjanus_nanomsg.so,libjanus_rabbitmq.so"
            }
            loggers: {
                disable = "libjanus_jsonlog.so"
            }
            events: {
                broadcast = false
            }

            """,
            "janus.transport.http.jcfg": """
            general: {
                json = "plain"
                base_path = "/janus"
                http = true
                port = \(port)
                ip = "127.0.0.1"
                https = false
            }
            admin: {
                admin_http = false
            }

            """,
            "janus.plugin.audiobridge.jcfg": "general: {\n}\n" + rooms.map { room in
                var lines = ["room-\(room.id): {", "    description = \"room \(room.id)\"", "    sampling_rate = \(room.samplingRate)"]
                if let pin = room.pin { lines.append("    pin = \"\(pin)\"") }
                if room.talkingEvents { lines.append("    audiolevel_event = true") }
                return (lines + ["}"]).joined(separator: "\n")
            }.joined(separator: "\n") + "\n",
            "janus.plugin.videoroom.jcfg": "general: {\n}\n" + (videoRooms.map { id in
                "room-\(id): {\n    description = \"room \(id)\"\n    publishers = \(publishers[id] ?? 6)\n    audiocodec = \"opus\"\n}"
            } + encryptedRooms.map { id in
                "room-\(id): {\n    description = \"room \(id)\"\n    publishers = 6\n    audiocodec = \"opus\"\n    require_e2ee = true\n"
                    + "    record = true\n    rec_dir = \"\(directory)/recordings\"\n}"
            }).joined(separator: "\n") + "\n",
            "janus.transport.pfunix.jcfg": """
            general: {
                enabled = true
                json = "plain"
                path = "\(directory)/janus-api.sock"
                type = "SOCK_SEQPACKET"
            }
            admin: {
                admin_enabled = false
            }

            """,
            "janus.transport.websockets.jcfg": """
            general: {
                json = "plain"
                ws = true
                ws_port = \(webSocketPort)
                ws_ip = "127.0.0.1"
                wss = false
            }
            admin: {
                admin_ws = false
                admin_wss = false
            }

            """,
        ]
        for (name, text) in files {
            try text.write(toFile: directory + "/" + name, atomically: true, encoding: .utf8)
        }
    }

    deinit { stop() }

    /// This host's IPv4 address toward the outside (the one a route to a public address leaves
    /// from; no packet is sent), nil without one.
    public static func hostAddress() -> String? {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var remote = sockaddr_in()
        remote.sin_family = sa_family_t(AF_INET)
        remote.sin_port = UInt16(53).bigEndian
        inet_pton(AF_INET, "192.0.2.53", &remote.sin_addr)
        let connected = withUnsafePointer(to: &remote) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { return nil }
        var local = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let named = withUnsafeMutablePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard named == 0 else { return nil }
        var text = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
        guard inet_ntop(AF_INET, &local.sin_addr, &text, socklen_t(text.count)) != nil else { return nil }
        let address = String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return address.hasPrefix("127.") || address == "0.0.0.0" ? nil : address
    }

    /// Starts Janus and returns once its API answers.
    public func start() async throws {
        guard Self.isInstalled else { throw TestFailure("janus is not installed: apt-get install janus") }
        let null = open("/dev/null", O_RDONLY | O_CLOEXEC)
        defer { if null >= 0 { close(null) } }
        let child = try ChildProcess(Self.executable, ["-F", directory, "-C", directory + "/janus.jcfg", "-o"],
                                     output: logPath, stdin: null >= 0 ? null : nil)
        process.withLock { $0 = child }
        let deadline = ContinuousClock.now + .seconds(20)
        while ContinuousClock.now < deadline {
            guard child.isRunning else { throw TestFailure("janus exited at start: see \(logPath)") }
            if try await ChildProcess.running("/usr/bin/curl", ["-sf", "-m", "2", url + "/info"]) == 0 { return }
            try await Task.sleep(for: .milliseconds(100))
        }
        stop()
        throw TestFailure("janus did not answer on \(url) within 20 s: see \(logPath)")
    }

    /// Stops Janus (SIGTERM, then SIGKILL): every session and room participant is gone.
    public func stop() {
        let child = process.withLock { current -> ChildProcess? in
            let child = current
            current = nil
            return child
        }
        child?.stop(grace: .seconds(5))
    }

    /// Stops Janus and starts it again on the same port and rooms: every session is gone.
    public func restart() async throws {
        stop()
        try await start()
    }

    /// Posts `body` (JSON) to `path` under the API (`""` for `/janus`) and returns the reply's
    /// text: for what a test asks of Janus itself (listing a room's participants).
    public func post(_ path: String, _ body: String) async throws -> String {
        let output = directory + "/reply-\(UInt32.random(in: 0...UInt32.max)).json"
        defer { unlink(output) }
        let status = try await ChildProcess.running("/usr/bin/curl", ["-sf", "-m", "5", "-o", output, "-X", "POST", "-d", body, url + path])
        guard status == 0 else { throw TestFailure("curl to \(url + path) failed (\(status))") }
        return try String(contentsOfFile: output, encoding: .utf8)
    }

    /// The display names of the room's participants, as Janus lists them.
    public func participants(room: Int) async throws -> [String] {
        func value(_ text: String, _ key: String) -> String? {
            guard let data = text.data(using: .utf8), let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else { return nil }
            if key == "session" || key == "handle" { return ((object["data"] as? [String: Any])?["id"] as? NSNumber)?.stringValue }
            return nil
        }
        guard let session = value(try await post("", #"{"janus":"create","transaction":"l1"}"#), "session"),
              let handle = value(try await post("/\(session)", #"{"janus":"attach","plugin":"janus.plugin.audiobridge","transaction":"l2"}"#), "handle")
        else { throw TestFailure("Janus gave no session to list room \(room) with") }
        let reply = try await post("/\(session)/\(handle)", #"{"janus":"message","transaction":"l3","body":{"request":"listparticipants","room":\#(room)}}"#)
        _ = try? await post("/\(session)", #"{"janus":"destroy","transaction":"l4"}"#)
        guard let data = reply.data(using: .utf8), let object = try JSONSerialization.jsonObject(with: data) as? [String: Any],
              let listed = (((object["plugindata"] as? [String: Any])?["data"] as? [String: Any])?["participants"] as? [[String: Any]])
        else { throw TestFailure("Janus did not list room \(room): \(reply.prefix(200))") }
        return listed.map { $0["display"] as? String ?? "?" }
    }
}
