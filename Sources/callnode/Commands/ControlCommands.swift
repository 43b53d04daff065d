import ArgumentParser
import CallNode
import Foundation
import NodeControl

#if canImport(Glibc)
import Glibc
#endif

/// `HOME/control.sock`, where `listen` and `web` serve the API and `ctl` looks for it.
func defaultControlSocket(home: String) -> String {
    (home.hasSuffix("/") ? home : home + "/") + "control.sock"
}

/// Where `ctl` finds the node, and how it prints.
struct CtlOptions: ParsableArguments {
    @OptionGroup var home: HomeOption

    @Option(name: .long, help: ArgumentHelp("The node's control API: unix:PATH or tcp:HOST:PORT (default: unix:HOME/control.sock).", valueName: "ADDRESS"))
    var control: String?

    @Option(name: .long, help: ArgumentHelp("Read the token for a tcp: control API from this file (its first line that is not blank or a # comment); else CALLNODE_CONTROL_TOKEN.", valueName: "PATH"))
    var tokenFile: String?

    @Flag(name: .long, help: "Print the API's JSON answer (events: one object per line).")
    var json = false

    func client() throws -> ControlClient {
        let address: ControlAddress
        if let control {
            guard let parsed = ControlAddress(control) else {
                throw ValidationError("--control '\(control)' is not unix:PATH or tcp:HOST:PORT")
            }
            address = parsed
        } else {
            address = .unix(defaultControlSocket(home: home.home))
        }
        var token = ProcessInfo.processInfo.environment["CALLNODE_CONTROL_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
        if let tokenFile {
            guard let text = try? String(contentsOfFile: tokenFile, encoding: .utf8) else {
                throw ValidationError("cannot read the token file \(tokenFile)")
            }
            // As the node reads it: the first line that is not blank or a `#` comment.
            token = text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
                .first { !$0.isEmpty && !$0.hasPrefix("#") }
        }
        return ControlClient(address: address, token: token)
    }

    /// Sends a request; prints its answer (JSON, or `human`'s line) or its error and exits 1.
    func perform(_ method: String, _ path: String, body: [String: Any]? = nil,
                 human: ([String: Any]) -> String?) async throws {
        let reply: ControlReply
        do { reply = try await client().send(method, path, body: body) } catch let error as ControlClientError {
            printError("callnode: \(error)")
            throw ExitCode(1)
        }
        if json {
            if let data = JSONLine.data(reply.object) { FileHandle.standardOutput.write(data) }
        } else if reply.succeeded, let line = human(reply.object) {
            print(line)
        }
        guard reply.succeeded else {
            if !json { printError("callnode: \(reply.error ?? "HTTP \(reply.status)")") }
            throw ExitCode(1)
        }
    }
}

/// A JSON value as a person reads it: `-` for null, true and false for booleans (which
/// Foundation hands back as numbers).
func ctlText(_ value: Any?) -> String {
    guard let value, !(value is NSNull) else { return "-" }
    if let number = value as? NSNumber, String(cString: number.objCType) == "c" { return number.boolValue ? "true" : "false" }
    return "\(value)"
}

/// A call's ID as a request path takes it.
private func callPath(_ id: String, _ action: String? = nil) -> String {
    let escaped = id.addingPercentEncoding(withAllowedCharacters: .urlPathAllowed) ?? id
    return "/v1/calls/\(escaped)" + (action.map { "/\($0)" } ?? "")
}

/// One line for a call after an action: its short ID and where it is now.
private func callLine(_ object: [String: Any]) -> String {
    let id = (object["id"] as? String).map { String($0.prefix(8)).lowercased() } ?? "?"
    if object["ended"] as? Bool == true { return "\(id) ended" }
    var words = [object["status"] as? String ?? "?"]
    if object["muted"] as? Bool == true { words.append("muted") }
    return "\(id) " + words.joined(separator: ", ")
}

struct Ctl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ctl",
        abstract: "Drive a running node through its control API.",
        discussion: """
            A node run with `listen` or `web` serves its control API on HOME/control.sock (this \
            user only); --control on the node moves it, or serves it over TCP on loopback with a \
            token. ID is a call's ID or any start of it no other call shares (ctl calls lists \
            them). The same requests work with curl, e.g. \
            curl --unix-socket ~/.callnode/control.sock http://node/v1/calls \
            (docs/control-api.openapi.json describes every one).
            """,
        subcommands: [CtlCalls.self, CtlShow.self, CtlCall.self, CtlAnswer.self, CtlProgress.self, CtlDecline.self, CtlTransfer.self, CtlHangUp.self,
                      CtlHold.self, CtlResume.self, CtlMute.self, CtlUnmute.self, CtlSwap.self, CtlMerge.self,
                      CtlUnmerge.self, CtlDTMF.self, CtlVolume.self, CtlPlay.self, CtlRecord.self, CtlDoNotDisturb.self,
                      CtlDrain.self, CtlEvents.self, CtlNode.self])
}

struct CtlCalls: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "calls", abstract: "List the node's calls.")
    @OptionGroup var options: CtlOptions

    func run() async throws {
        try await options.perform("GET", "/v1/calls") { object in
            let calls = object["calls"] as? [[String: Any]] ?? []
            guard !calls.isEmpty else { return "no calls" }
            var rows = [["ID", "STATUS", "DIR", "PEER", "HELD", "MUTED", "CODEC", "LOSS", "RTT"]]
            for call in calls {
                let stats = call["stats"] as? [String: Any]
                let peer = (call["name"] as? String) ?? String((call["peer"] as? String ?? "?").prefix(24))
                rows.append([String((call["id"] as? String ?? "?").prefix(8)).lowercased(), call["status"] as? String ?? "?",
                             call["direction"] as? String == "outgoing" ? "out" : "in", peer,
                             call["held"] as? Bool == true ? "yes" : "no", call["muted"] as? Bool == true ? "yes" : "no",
                             stats?["codec"] as? String ?? "-", (stats?["packets_lost"] as? Int).map(String.init) ?? "-",
                             (stats?["rtt_ms"] as? Double).map { "\($0) ms" } ?? "-"])
            }
            let widths = (0..<rows[0].count).map { column in rows.map { $0[column].count }.max() ?? 0 }
            return rows.map { row in
                zip(row, widths).map { $0.padding(toLength: $1, withPad: " ", startingAt: 0) }.joined(separator: "  ")
                    .trimmingCharacters(in: .whitespaces)
            }.joined(separator: "\n")
        }
    }
}

struct CtlShow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "show", abstract: "Show one call, with its statistics.")
    @Argument(help: "The call's ID (or its start).") var id: String
    @OptionGroup var options: CtlOptions

    func run() async throws {
        try await options.perform("GET", callPath(id)) { object in
            object.keys.sorted().map { key in
                let value = object[key]
                if let stats = value as? [String: Any] {
                    return "\(key):\n" + stats.keys.sorted().map { "  \($0): \(ctlText(stats[$0]))" }.joined(separator: "\n")
                }
                return "\(key): \(ctlText(value))"
            }.joined(separator: "\n")
        }
    }
}

struct CtlCall: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "call", abstract: "Place a call; prints its ID.")
    @Argument(help: ArgumentHelp("A contact, HOST:PORT, FINGERPRINT@HOST:PORT or sip:USER@HOST[:PORT].", valueName: "TARGET")) var target: String
    @Option(name: .long, help: "A title shown to the callee.") var title: String?
    @OptionGroup var options: CtlOptions

    func run() async throws {
        var body: [String: Any] = ["to": target]
        if let title { body["title"] = title }
        try await options.perform("POST", "/v1/calls", body: body) { $0["id"] as? String }
    }
}

struct CtlAnswer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "answer", abstract: "Answer a ringing call.")
    @Argument(help: "The call's ID (or its start).") var id: String
    @Option(name: .long, help: ArgumentHelp("What the other calls do: hold (the default), end or keep.", valueName: "WHAT")) var others: String?
    @OptionGroup var options: CtlOptions

    func run() async throws {
        try await options.perform("POST", callPath(id, "answer"), body: others.map { ["others": $0] }, human: callLine)
    }
}

/// The actions that take a call and nothing else.
protocol CtlCallAction: AsyncParsableCommand {
    static var action: String { get }
    var id: String { get }
    var options: CtlOptions { get }
}

extension CtlCallAction {
    func run() async throws {
        try await options.perform("POST", callPath(id, Self.action), human: callLine)
    }
}

struct CtlTransfer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "transfer", abstract: "Transfer a SIP call: its peer calls TARGET instead, or the peer of another call (attended).",
        discussion: """
            The peer is sent a REFER; its progress comes as `transfer` events (`ctl events`). When \
            the peer's new call is answered this call ends; when it fails this call goes on. With \
            --replacing OTHER (this node's call with the one to transfer to, a consultation), the \
            peer's new call replaces OTHER at its other end, without ringing (RFC 3891).
            """)
    @Argument(help: "The call's ID (or its start).") var id: String
    @Argument(help: ArgumentHelp("Whom the peer is to call: sip:USER@HOST[:PORT].", valueName: "TARGET")) var target: String?
    @Option(name: .long, help: ArgumentHelp("Join the peer to the peer of this call instead (an attended transfer).", valueName: "OTHER"))
    var replacing: String?
    @OptionGroup var options: CtlOptions

    func validate() throws {
        guard (target == nil) != (replacing == nil) else {
            throw ValidationError("give either TARGET (a blind transfer) or --replacing OTHER (an attended one)")
        }
    }

    func run() async throws {
        let body: [String: Any] = replacing.map { ["replacing": $0] } ?? ["to": target ?? ""]
        try await options.perform("POST", callPath(id, "transfer"), body: body, human: callLine)
    }
}

struct CtlProgress: CtlCallAction {
    static let configuration = CommandConfiguration(
        commandName: "progress", abstract: "Send early media on a ringing call before answering or declining it.",
        discussion: """
            The caller hears this node's input (a greeting, an announcement) while the call still rings \
            (SIP: a 183 with the answer); `answer` then takes the call, `decline` refuses it. Needs a SIP \
            caller (its offer came with the INVITE) and a node started with --app-owned-audio.
            """)
    static let action = "progress"
    @Argument(help: "The call's ID (or its start).") var id: String
    @OptionGroup var options: CtlOptions
}

struct CtlDecline: CtlCallAction {
    static let configuration = CommandConfiguration(commandName: "decline", abstract: "Decline a ringing call.")
    static let action = "decline"
    @Argument(help: "The call's ID (or its start).") var id: String
    @OptionGroup var options: CtlOptions
}

struct CtlHangUp: CtlCallAction {
    static let configuration = CommandConfiguration(commandName: "hangup", abstract: "Hang up a call (or decline it, ringing).")
    static let action = "hangup"
    @Argument(help: "The call's ID (or its start).") var id: String
    @OptionGroup var options: CtlOptions
}

struct CtlHold: CtlCallAction {
    static let configuration = CommandConfiguration(commandName: "hold", abstract: "Hold a connected call.")
    static let action = "hold"
    @Argument(help: "The call's ID (or its start).") var id: String
    @OptionGroup var options: CtlOptions
}

struct CtlResume: CtlCallAction {
    static let configuration = CommandConfiguration(commandName: "resume", abstract: "Resume a held call.")
    static let action = "resume"
    @Argument(help: "The call's ID (or its start).") var id: String
    @OptionGroup var options: CtlOptions
}

struct CtlMute: CtlCallAction {
    static let configuration = CommandConfiguration(commandName: "mute", abstract: "Mute the microphone on a call.")
    static let action = "mute"
    @Argument(help: "The call's ID (or its start).") var id: String
    @OptionGroup var options: CtlOptions
}

struct CtlUnmute: CtlCallAction {
    static let configuration = CommandConfiguration(commandName: "unmute", abstract: "Unmute the microphone on a call.")
    static let action = "unmute"
    @Argument(help: "The call's ID (or its start).") var id: String
    @OptionGroup var options: CtlOptions
}

struct CtlSwap: CtlCallAction {
    static let configuration = CommandConfiguration(commandName: "swap", abstract: "Make a call the active one (the others are held).")
    static let action = "swap"
    @Argument(help: "The call's ID (or its start).") var id: String
    @OptionGroup var options: CtlOptions
}

struct CtlUnmerge: CtlCallAction {
    static let configuration = CommandConfiguration(commandName: "unmerge", abstract: "Take a call out of its conference.")
    static let action = "unmerge"
    @Argument(help: "The call's ID (or its start).") var id: String
    @OptionGroup var options: CtlOptions
}

struct CtlMerge: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "merge", abstract: "Merge a call into another's conference.")
    @Argument(help: "The call's ID (or its start).") var id: String
    @Argument(help: "The call to merge it with.") var other: String
    @OptionGroup var options: CtlOptions

    func run() async throws {
        try await options.perform("POST", callPath(id, "merge"), body: ["with": other], human: callLine)
    }
}

struct CtlDTMF: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "dtmf", abstract: "Send DTMF digits (RFC 4733) on a call.")
    @Argument(help: "The call's ID (or its start).") var id: String
    @Argument(help: "Digits: 0-9, *, #, A-D.") var digits: String
    @OptionGroup var options: CtlOptions

    func run() async throws {
        try await options.perform("POST", callPath(id, "dtmf"), body: ["digits": digits]) { _ in "sent \(digits)" }
    }
}

struct CtlVolume: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "volume", abstract: "Set a call's microphone and output gains (0–4; 1 is as it is).")
    @Argument(help: "The call's ID (or its start).") var id: String
    @Option(name: .long, help: ArgumentHelp("What the peer hears of this node's microphone.", valueName: "GAIN")) var microphone: Double?
    @Option(name: .long, help: ArgumentHelp("How loud the peer plays here.", valueName: "GAIN")) var output: Double?
    @OptionGroup var options: CtlOptions

    func validate() throws {
        if microphone == nil && output == nil { throw ValidationError("give --microphone GAIN, --output GAIN or both") }
    }

    func run() async throws {
        var body: [String: Any] = [:]
        if let microphone { body["microphone"] = microphone }
        if let output { body["output"] = output }
        try await options.perform("PUT", callPath(id, "volume"), body: body) { object in
            "microphone \(ctlText(object["microphone"])), output \(ctlText(object["output"]))"
        }
    }
}

struct CtlPlay: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "play", abstract: "Play a WAV file or a tone into a call (the peer hears it over the microphone).",
        discussion: "An event (playback-finished) says when it has played; ctl events shows it.")
    @Argument(help: "The call's ID (or its start).") var id: String
    @Argument(help: ArgumentHelp("A 16-bit PCM WAV file (any rate; resampled).", valueName: "FILE")) var file: String?
    @Option(name: .long, help: ArgumentHelp("Play a tone of this frequency instead.", valueName: "HZ")) var tone: Double?
    @Option(name: .long, help: ArgumentHelp("How long the tone lasts (default 1).", valueName: "SECONDS")) var seconds: Double?
    @Option(name: .long, help: ArgumentHelp("Loudness, 0–4 (default 1).", valueName: "GAIN")) var volume: Double?
    @Flag(name: .long, help: "Play it again and again until stopped.") var loop = false
    @Flag(name: .long, help: "Stop what is playing.") var stop = false
    @OptionGroup var options: CtlOptions

    func validate() throws {
        if stop, file != nil || tone != nil { throw ValidationError("--stop takes no FILE or --tone") }
        if !stop, (file == nil) == (tone == nil) { throw ValidationError("give a FILE or --tone HZ (or --stop)") }
    }

    func run() async throws {
        if stop {
            try await options.perform("DELETE", callPath(id, "play")) { _ in "stopped" }
            return
        }
        var body: [String: Any] = ["loop": loop]
        if let file { body["file"] = URL(fileURLWithPath: file).standardizedFileURL.path }
        if let tone { body["tone"] = tone }
        if let seconds { body["seconds"] = seconds }
        if let volume { body["volume"] = volume }
        try await options.perform("POST", callPath(id, "play"), body: body) { object in
            let seconds = (object["seconds"] as? Double).map { String(format: "%.1f s", $0) } ?? "?"
            return "playing \(String((object["playback"] as? String ?? "?").prefix(8)).lowercased()) (\(seconds)\(loop ? ", looping" : ""))"
        }
    }
}

struct CtlRecord: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "record", abstract: "Record a call to a WAV file, or stop recording it.")
    @Argument(help: "The call's ID (or its start).") var id: String
    @Argument(help: ArgumentHelp("Where to write the recording (48 kHz mono WAV; default: a file of its own in the node's HOME/recordings/, which Recents names).", valueName: "PATH")) var path: String?
    @Flag(name: .long, help: "Record only what the node hears (default: both sides, mixed).") var receivedOnly = false
    @Flag(name: .long, help: "Stop the recording.") var stop = false
    @OptionGroup var options: CtlOptions

    func validate() throws {
        if stop, path != nil { throw ValidationError("--stop takes no PATH") }
    }

    func run() async throws {
        if stop {
            try await options.perform("DELETE", callPath(id, "record")) { object in
                "recorded \((object["seconds"] as? Double).map { String(format: "%.1f", $0) } ?? "?") s to \(object["path"] as? String ?? "?")"
            }
            return
        }
        var body: [String: Any] = ["sides": receivedOnly ? "received" : "both"]
        if let path { body["path"] = URL(fileURLWithPath: path).standardizedFileURL.path }
        try await options.perform("POST", callPath(id, "record"), body: body) { object in
            "recording to \(object["path"] as? String ?? "?")"
        }
    }
}

struct CtlDoNotDisturb: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "dnd", abstract: "Turn do-not-disturb on (callers are refused) or off.")
    @Argument(help: ArgumentHelp("on or off", valueName: "on|off")) var state: String
    @OptionGroup var options: CtlOptions

    func validate() throws {
        guard ["on", "off"].contains(state) else { throw ValidationError("say on or off") }
    }

    func run() async throws {
        try await options.perform("PUT", "/v1/do-not-disturb", body: ["on": state == "on"]) { _ in "do not disturb: \(state)" }
    }
}

struct CtlDrain: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "drain", abstract: "Take no new calls; the node exits once its calls have ended.")
    @Option(name: .long, help: ArgumentHelp("Hang up what is left after this long (default: the node's --drain-grace, else wait).", valueName: "SECONDS"))
    var grace: Double?
    @OptionGroup var options: CtlOptions

    func run() async throws {
        try await options.perform("POST", "/v1/drain", body: grace.map { ["grace_s": $0] }) { object in
            "draining: \(object["calls"] as? Int ?? 0) calls in progress"
        }
    }
}

struct CtlNode: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "node", abstract: "Show the node: name, fingerprint, calls, do-not-disturb, drain.")
    @OptionGroup var options: CtlOptions

    func run() async throws {
        try await options.perform("GET", "/v1/node") { object in
            object.keys.sorted().map { "\($0): \(ctlText(object[$0]))" }.joined(separator: "\n")
        }
    }
}

struct CtlEvents: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "events", abstract: "Print the node's events as they happen (Ctrl-C stops).",
        discussion: "The objects are those `listen --json` prints, plus the API's own (playback-finished, playback-stopped, recording-started, recording-stopped).")
    @Option(name: .long, help: ArgumentHelp("Only this call's events.", valueName: "ID")) var call: String?
    @Option(name: .long, help: ArgumentHelp("Stop after this many events.", valueName: "N")) var count: Int?
    @OptionGroup var options: CtlOptions

    func run() async throws {
        let json = options.json
        var seen = 0
        let limit = count
        let dropped: String?
        do {
            dropped = try await options.client().events(call: call) { object in
                if json {
                    if let data = JSONLine.data(object) { FileHandle.standardOutput.write(data) }
                } else {
                    print(Self.line(object))
                    fflush(nil)
                }
                seen += 1
                return limit.map { seen < $0 } ?? true
            }
        } catch let error as ControlClientError {
            printError("callnode: \(error)")
            throw ExitCode(1)
        }
        if let dropped {
            printError("callnode: the node stopped sending events: \(dropped)")
            throw ExitCode(1)
        }
    }

    /// `12:00:01 connected 1a2b3c4d setup_ms=120`: the time, the event, the call, the rest.
    static func line(_ object: [String: Any]) -> String {
        let time = (object["time"] as? Double).map { Date(timeIntervalSince1970: $0) } ?? Date()
        let formatter = DateFormatter()
        formatter.dateFormat = "HH:mm:ss"
        var words = [formatter.string(from: time), object["event"] as? String ?? "?"]
        if let call = object["call"] as? String { words.append(String(call.prefix(8)).lowercased()) }
        for key in object.keys.sorted() where !["time", "event", "call"].contains(key) {
            guard let value = object[key], !(value is NSNull), !(value is [Any]), !(value is [String: Any]) else { continue }
            words.append("\(key)=\(ctlText(value))")
        }
        return words.joined(separator: " ")
    }
}
