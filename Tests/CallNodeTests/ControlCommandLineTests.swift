import CallNode
import CallNodeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Running nodes driven from outside, as the README shows: `callnode ctl` and curl against
/// `callnode listen` processes, and a program in another language (the IVR example) serving
/// callers through the API alone. Outcomes are what a person would hear: tones found in
/// recordings, in order.
extension RealTimeTests {
@Suite(.serialized) struct ControlCommandLineTests {
    /// A short directory of its own (the homes' sockets must fit a socket's 107 bytes).
    final class Directory: Sendable {
        let path = "/tmp/cn-ctl-\(getpid())-\(UUID().uuidString.prefix(6))"
        init() throws { try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true) }
        deinit {
            if ProcessInfo.processInfo.environment["CALLNODE_KEEP_TEST_FILES"] == nil { try? FileManager.default.removeItem(atPath: path) }
        }
    }

    /// `callnode ARGUMENTS`: its exit status and what it printed.
    static func callnode(_ arguments: [String], in directory: Directory) async throws -> (status: Int32, output: String) {
        let log = directory.path + "/run-\(UUID().uuidString.prefix(6)).log"
        return try await CommandLineTests.run(arguments, log: log)
    }

    /// A `callnode listen` with its own home, on loopback; returns once its control API is up.
    static func listener(_ name: String, in directory: Directory, _ extra: [String]) async throws -> (ChildProcess, home: String, address: String, log: String) {
        let home = directory.path + "/" + name, log = directory.path + "/\(name).log"
        let process = try ChildProcess(try BuildProducts.executable("callnode"), [
            "listen", "--home", home, "--listen", "127.0.0.1:0", "--bind", "127.0.0.1", "--accept-unknown", "--json",
        ] + extra, output: log)
        let listening = try await CommandLineTests.waitForLine(in: log, process: process) { $0.contains("\"listening\"") }
        _ = try await CommandLineTests.waitForLine(in: log, process: process) { $0.contains("\"control\"") }
        let object = CommandLineTests.jsonLines(listening).first
        return (process, home, object?["address"] as? String ?? "", log)
    }

    /// Which of `frequencies` leads each 100 ms of a recording (nil: quiet or none clearly),
    /// with runs of the same collapsed: the order of the tones a person would have heard.
    static func toneSequence(_ path: String, of frequencies: [Double]) throws -> [Double] {
        let samples = try WAV.read(path: path).samples
        var sequence: [Double] = []
        for start in stride(from: 0, to: samples.count - 4_800, by: 4_800) {
            let window = samples[start..<(start + 4_800)]
            let energy = window.reduce(0.0) { $0 + Double($1) * Double($1) } / 4_800
            guard energy > 1e5 else { continue }
            let powers = frequencies.map { (frequency: $0, power: Goertzel.share(of: $0, in: window)) }
            guard let best = powers.max(by: { $0.power < $1.power }), best.power > 0.5 else { continue }
            if sequence.last != best.frequency { sequence.append(best.frequency) }
        }
        return sequence
    }

    @Test func ctlAndCurlDriveARunningNodeThroughACall() async throws {
        let directory = try Directory()
        let bob = try await Self.listener("bob", in: directory, ["--input", "silence"])
        defer { bob.0.stop() }
        let alice = try await Self.listener("alice", in: directory, ["--input", "tone:440"])
        defer { alice.0.stop() }

        // Alice calls Bob through her API; it rings at Bob, who answers through his.
        let placed = try await Self.callnode(["ctl", "call", "--home", alice.home, bob.address], in: directory)
        #expect(placed.status == 0, "\(placed.output)")
        let call = try #require(placed.output.split(separator: "\n").compactMap { UUID(uuidString: String($0)) }.first, "\(placed.output)")
        let short = String(call.uuidString.prefix(8)).lowercased()
        var ringing = ""
        for _ in 0..<100 {
            ringing = try await Self.callnode(["ctl", "calls", "--home", bob.home], in: directory).output
            if ringing.contains("ringing") { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(ringing.contains(short) && ringing.contains("ringing") && ringing.contains("in"), "\(ringing)")
        let held = try await Self.callnode(["ctl", "hold", short, "--home", bob.home], in: directory)
        #expect(held.status == 1 && held.output.contains("only a connected call is held"), "\(held.output)")
        #expect(try await Self.callnode(["ctl", "answer", short, "--home", bob.home], in: directory).status == 0)

        // curl sees the same call, connected.
        let socket = bob.home + "/control.sock"
        var connected = false
        for _ in 0..<100 where !connected {
            let listed = try await ControlRequests.curl(["--unix-socket", socket, "http://node/v1/calls/\(short)"])
            connected = listed.output.contains("\"status\":\"connected\"")
            if !connected { try await Task.sleep(for: .milliseconds(100)) }
        }
        #expect(connected)

        // Alice records what she hears; Bob plays a prompt into the call and sends digits.
        let recording = directory.path + "/alice-heard.wav"
        let recordingStarted = try await Self.callnode(["ctl", "record", short, recording, "--received-only", "--home", alice.home], in: directory)
        #expect(recordingStarted.status == 0, "\(recordingStarted.output)")
        let eventsLog = directory.path + "/events.log"
        let events = try ChildProcess(try BuildProducts.executable("callnode"),
                                      ["ctl", "events", "--home", bob.home, "--call", short, "--json"], output: eventsLog)
        defer { events.stop() }
        try await Task.sleep(for: .milliseconds(500))
        let played = try await ControlRequests.curl(["--unix-socket", socket, "-X", "POST", "-d", #"{"tone": 1000, "seconds": 1}"#,
                                                  "http://node/v1/calls/\(short)/play"])
        #expect(played.output.contains("\"playback\""), "\(played.output)")
        _ = try await CommandLineTests.waitForLine(in: eventsLog, process: events) { $0.contains("playback-finished") }
        events.stop()
        #expect(try await Self.callnode(["ctl", "dtmf", short, "5", "--home", bob.home], in: directory).status == 0)
        _ = try await CommandLineTests.waitForLine(in: alice.log, process: alice.0) { $0.contains("\"dtmf\"") && $0.contains("\"5\"") }
        try await Task.sleep(for: .milliseconds(500))
        let stopped = try await Self.callnode(["ctl", "record", short, "--stop", "--home", alice.home], in: directory)
        #expect(stopped.status == 0 && stopped.output.contains("recorded"), "\(stopped.output)")
        // What Alice heard: Bob's silence, then the prompt (Bob's microphone is silent).
        #expect(try Self.toneSequence(recording, of: [440, 1_000]).contains(1_000))

        // Do-not-disturb and the node's state, as JSON.
        #expect(try await Self.callnode(["ctl", "dnd", "on", "--home", bob.home], in: directory).status == 0)
        let node = try await Self.callnode(["ctl", "node", "--home", bob.home, "--json"], in: directory)
        let nodeObject = CommandLineTests.jsonLines(node.output).first
        #expect(nodeObject?["do_not_disturb"] as? Bool == true && nodeObject?["calls"] as? Int == 1, "\(node.output)")

        // Hung up from Bob's side: Alice's node says the call ended.
        #expect(try await Self.callnode(["ctl", "hangup", short, "--home", bob.home], in: directory).status == 0)
        _ = try await CommandLineTests.waitForLine(in: alice.log, process: alice.0) { $0.contains("\"ended\"") }
        let after = try await Self.callnode(["ctl", "calls", "--home", alice.home], in: directory)
        #expect(after.output.contains("no calls"), "\(after.output)")

        // A home with no node running: a clear error, exit 1.
        let missing = try await Self.callnode(["ctl", "calls", "--home", directory.path + "/nobody"], in: directory)
        #expect(missing.status == 1 && missing.output.contains("no such socket"), "\(missing.output)")

        // The drain through the API ends the node once its (no) calls are done.
        #expect(try await Self.callnode(["ctl", "drain", "--home", bob.home], in: directory).status == 0)
        #expect(await bob.0.wait() == 0)
    }

    /// Polls `ctl calls --json` at `home` until `predicate` holds for the call list.
    static func waitForCalls(_ home: String, in directory: Directory, _ predicate: ([[String: Any]]) -> Bool) async throws -> [[String: Any]] {
        var calls: [[String: Any]] = []
        for _ in 0..<100 {
            let listed = try await Self.callnode(["ctl", "calls", "--home", home, "--json"], in: directory)
            calls = CommandLineTests.jsonLines(listed.output).first?["calls"] as? [[String: Any]] ?? []
            if predicate(calls) { return calls }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw TestFailure("the calls never matched: \(calls)")
    }

    @Test func everyCallRequestWorksFromCtlAndFromCurl() async throws {
        let directory = try Directory()
        let bob = try await Self.listener("bob", in: directory, ["--input", "silence"])
        defer { bob.0.stop() }
        let alice = try await Self.listener("alice", in: directory, ["--input", "tone:440"])
        defer { alice.0.stop() }
        let carol = try await Self.listener("carol", in: directory, ["--input", "tone:660"])
        defer { carol.0.stop() }
        let socket = bob.home + "/control.sock"
        func ctl(_ arguments: [String]) async throws -> String {
            let run = try await Self.callnode(["ctl"] + arguments + ["--home", bob.home], in: directory)
            #expect(run.status == 0, "ctl \(arguments.joined(separator: " ")): \(run.output)")
            return run.output
        }
        func curl(_ method: String, _ path: String, _ body: String? = nil) async throws -> String {
            try await ControlRequests.curl(["--unix-socket", socket, "-X", method] + (body.map { ["-d", $0] } ?? []) + ["http://node" + path]).output
        }
        func dial(_ caller: (ChildProcess, home: String, address: String, log: String)) async throws -> String {
            let placed = try await Self.callnode(["ctl", "call", "--home", caller.home, bob.address], in: directory)
            let call = try #require(placed.output.split(separator: "\n").compactMap { UUID(uuidString: String($0)) }.first, "\(placed.output)")
            _ = try await Self.waitForCalls(bob.home, in: directory) { $0.contains { $0["id"] as? String == call.uuidString && $0["status"] as? String == "ringing" } }
            return String(call.uuidString.prefix(8)).lowercased()
        }

        // Declined (ctl), then placed again and answered (curl); a second caller answered (ctl)
        // with the first kept on.
        let declined = try await dial(carol)
        #expect(try await ctl(["decline", declined]).contains("ended"))
        _ = try await CommandLineTests.waitForLine(in: carol.log, process: carol.0) { $0.contains("\"ended\"") }
        let a = try await dial(alice)
        #expect(try await curl("POST", "/v1/calls/\(a)/answer").contains("\"status\""))
        // Carol's second call placed from curl on her node's socket.
        let placed = try await ControlRequests.curl(["--unix-socket", carol.home + "/control.sock", "-d", #"{"to": "\#(bob.address)"}"#,
                                                        "http://node/v1/calls"]).output
        let c = try #require(placed.split(separator: "\"").compactMap { UUID(uuidString: String($0)) }.first, "\(placed)")
            .uuidString.prefix(8).lowercased()
        _ = try await Self.waitForCalls(bob.home, in: directory) { $0.contains { ($0["id"] as? String ?? "").lowercased().hasPrefix(c) && $0["status"] as? String == "ringing" } }
        _ = try await ctl(["answer", c, "--others", "keep"])
        _ = try await Self.waitForCalls(bob.home, in: directory) { calls in calls.count == 2 && calls.allSatisfy { $0["status"] as? String == "connected" } }

        // Mute and unmute, hold and resume: each from ctl, then from curl.
        #expect(try await ctl(["mute", a]).contains("muted"))
        #expect(!(try await ctl(["unmute", a]).contains("muted")))
        #expect(try await curl("POST", "/v1/calls/\(a)/mute").contains("\"muted\":true"))
        #expect(try await curl("POST", "/v1/calls/\(a)/unmute").contains("\"muted\":false"))
        #expect(try await ctl(["hold", a]).contains("held"))
        _ = try await CommandLineTests.waitForLine(in: alice.log, process: alice.0) { $0.contains("\"remote-hold\"") && $0.contains("true") }
        #expect(try await ctl(["resume", a]).contains("connected"))
        #expect(try await curl("POST", "/v1/calls/\(a)/hold").contains("\"held\":true"))
        #expect(try await curl("POST", "/v1/calls/\(a)/resume").contains("\"held\":false"))

        // Volumes from ctl and curl.
        #expect(try await ctl(["volume", a, "--output", "2"]).contains("output 2"))
        #expect(try await curl("PUT", "/v1/calls/\(a)/volume", #"{"microphone": 0.5}"#).contains("\"microphone\":0.5"))

        // A conference of the two, and out again; then a swap holds the other.
        _ = try await ctl(["merge", a, c])
        let merged = try await Self.waitForCalls(bob.home, in: directory) { calls in calls.count == 2 && calls.allSatisfy { !($0["group"] is NSNull) } }
        #expect(Set(merged.compactMap { $0["group"] as? String }).count == 1)
        #expect(try await ctl(["show", a]).contains("group: "))
        _ = try await ctl(["unmerge", a])
        _ = try await Self.waitForCalls(bob.home, in: directory) { calls in calls.contains { $0["id"] as? String != nil && ($0["id"] as! String).lowercased().hasPrefix(a) && $0["group"] is NSNull } }
        _ = try await ctl(["swap", c])
        _ = try await Self.waitForCalls(bob.home, in: directory) { calls in
            calls.contains { ($0["id"] as? String ?? "").lowercased().hasPrefix(a) && $0["held"] as? Bool == true }
                && calls.contains { ($0["id"] as? String ?? "").lowercased().hasPrefix(c) && $0["held"] as? Bool == false }
        }

        // Digits and a looping prompt (started and stopped) from ctl and from curl.
        #expect(try await ctl(["dtmf", c, "7"]).contains("sent 7"))
        _ = try await CommandLineTests.waitForLine(in: carol.log, process: carol.0) { $0.contains("\"dtmf\"") && $0.contains("\"7\"") }
        #expect(try await curl("POST", "/v1/calls/\(c)/dtmf", #"{"digits": "9"}"#).contains("\"status\""))
        _ = try await CommandLineTests.waitForLine(in: carol.log, process: carol.0) { $0.contains("\"dtmf\"") && $0.contains("\"9\"") }
        // curl reads the events meanwhile (server-sent events).
        let curlEvents = directory.path + "/curl-events.log"
        let streaming = try ChildProcess("/usr/bin/curl", ["-s", "-N", "--max-time", "20", "--unix-socket", socket, "http://node/v1/events"], output: curlEvents)
        defer { streaming.stop() }
        try await Task.sleep(for: .milliseconds(300))
        #expect(try await ctl(["play", c, "--tone", "700", "--loop"]).contains("looping"))
        #expect(try await ctl(["play", c, "--stop"]).contains("stopped"))
        #expect(try await curl("POST", "/v1/calls/\(c)/play", #"{"tone": 700, "loop": true}"#).contains("\"playback\""))
        #expect(try await curl("DELETE", "/v1/calls/\(c)/play").contains("\"stopped\":true"))
        let streamed = try await CommandLineTests.waitForLine(in: curlEvents, process: streaming) { $0.contains("playback-stopped") }
        #expect(streamed.hasPrefix("data: {"), "\(streamed)")
        streaming.stop()
        let recording = directory.path + "/bob-c.wav"
        #expect(try await curl("POST", "/v1/calls/\(c)/record", #"{"path": "\#(recording)"}"#).contains("\"path\""))
        try await Task.sleep(for: .milliseconds(600))
        #expect(try await curl("DELETE", "/v1/calls/\(c)/record").contains("\"seconds\""))
        #expect(try Self.toneSequence(recording, of: [440, 660]) == [660])

        // Do-not-disturb and the node from curl; a hang-up from curl and one from ctl.
        #expect(try await curl("PUT", "/v1/do-not-disturb", #"{"on": true}"#).contains("\"do_not_disturb\":true"))
        #expect(try await curl("GET", "/v1/node").contains("\"do_not_disturb\":true"))
        #expect(try await curl("POST", "/v1/calls/\(a)/hangup").contains("\"id\""))
        _ = try await CommandLineTests.waitForLine(in: alice.log, process: alice.0) { $0.contains("\"ended\"") }
        _ = try await ctl(["hangup", c])
        _ = try await Self.waitForCalls(bob.home, in: directory) { $0.isEmpty }
        // A drain from curl: the node exits once its (no) calls are over.
        #expect(try await curl("POST", "/v1/drain").contains("\"draining\":true"))
        #expect(await bob.0.wait() == 0)
    }

    @Test func overTCPTheAPINeedsItsTokenFromAFileAndCtlPresentsIt() async throws {
        let directory = try Directory()
        // No token: the node says how to give one and does not start.
        let refused = try await Self.callnode(["listen", "--home", directory.path + "/n", "--listen", "127.0.0.1:0",
                                               "--control", "tcp:127.0.0.1:0"], in: directory)
        #expect(refused.status != 0 && refused.output.contains("needs a token"), "\(refused.output)")
        let tokenFile = directory.path + "/token"
        try "# the control API's token\nt-\(UUID().uuidString)\n".write(toFile: tokenFile, atomically: true, encoding: .utf8)
        let node = try await Self.listener("n", in: directory, ["--control", "tcp:127.0.0.1:0", "--control-token-file", tokenFile])
        defer { node.0.stop() }
        let control = try #require(CommandLineTests.jsonLines((try? String(contentsOfFile: node.log, encoding: .utf8)) ?? "")
            .first { $0["event"] as? String == "control" }?["address"] as? String)
        #expect(control.hasPrefix("tcp:127.0.0.1:"))
        let withToken = try await Self.callnode(["ctl", "node", "--control", control, "--token-file", tokenFile], in: directory)
        #expect(withToken.status == 0 && withToken.output.contains("taking_calls: true"), "\(withToken.output)")
        let without = try await Self.callnode(["ctl", "node", "--control", control], in: directory)
        #expect(without.status == 1 && without.output.contains("Authorization: Bearer"), "\(without.output)")
        // Nothing was left at the home's default socket.
        #expect(access(node.home + "/control.sock", F_OK) != 0)
    }

    /// Whether `needles` appear in `sequence` in that order (others may come between).
    static func inOrder(_ needles: [Double], in sequence: [Double]) -> Bool {
        var rest = needles[...]
        for value in sequence where value == rest.first { rest = rest.dropFirst() }
        return rest.isEmpty
    }

    @Test func theIVRExampleAnswersPlaysItsMenuAndRecordsAMessageThroughTheAPIAlone() async throws {
        let directory = try Directory()
        let node = try await Self.listener("ivr-node", in: directory, ["--input", "silence"])
        defer { node.0.stop() }
        let messages = directory.path + "/messages"
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Examples/ivr/ivr.py").path
        let ivrLog = directory.path + "/ivr.log"
        let ivr = try ChildProcess("/usr/bin/python3", [script, "--socket", node.home + "/control.sock", "--messages", messages,
                                                        "--calls", "1"], output: ivrLog)
        defer { ivr.stop() }
        _ = try await CommandLineTests.waitForLine(in: ivrLog, process: ivr) { $0.contains("ivr: serving") }

        // A caller whose microphone plays 1300 Hz: what it says is the message.
        let caller = try await Self.listener("caller", in: directory, ["--input", "tone:1300"])
        defer { caller.0.stop() }
        let placed = try await Self.callnode(["ctl", "call", "--home", caller.home, node.address], in: directory)
        let call = try #require(placed.output.split(separator: "\n").compactMap { UUID(uuidString: String($0)) }.first, "\(placed.output)")
        let short = String(call.uuidString.prefix(8)).lowercased()
        _ = try await CommandLineTests.waitForLine(in: caller.log, process: caller.0) { $0.contains("\"connected\"") }
        let heard = directory.path + "/caller-heard.wav"
        #expect(try await Self.callnode(["ctl", "record", short, heard, "--received-only", "--home", caller.home], in: directory).status == 0)

        // The greeting, then the menu; 1 leaves a message after the beep, # ends it.
        _ = try await CommandLineTests.waitForLine(in: ivrLog, process: ivr) { $0.lowercased().contains("\(short): menu") }
        try await Task.sleep(for: .milliseconds(1_300))
        let one = try await Self.callnode(["ctl", "dtmf", short, "1", "--home", caller.home], in: directory)
        #expect(one.status == 0, "\(one.output)")
        try await Task.sleep(for: .milliseconds(2_500))
        let hash = try await Self.callnode(["ctl", "dtmf", short, "#", "--home", caller.home], in: directory)
        #expect(hash.status == 0, "\(hash.output)")

        // The IVR says goodbye and hangs up; it saved the message and exits after its one call.
        _ = try await CommandLineTests.waitForLine(in: caller.log, process: caller.0) { $0.contains("\"ended\"") }
        #expect(await ivr.wait() == 0)
        let output = (try? String(contentsOfFile: ivrLog, encoding: .utf8)) ?? ""
        let saved = try #require(output.split(separator: "\n").first { $0.hasPrefix("saved message ") }, "\(output)")
        let files = try FileManager.default.contentsOfDirectory(atPath: messages).filter { $0.hasSuffix(".wav") }
        #expect(files.count == 1 && saved.contains(files.first ?? "?"), "\(files) \(saved)")
        let message = messages + "/" + (files.first ?? "")
        let length = Double(try WAV.read(path: message).samples.count) / 48_000
        #expect(length > 1.5 && length < 4, "the message is \(length) s")
        #expect(try Self.toneSequence(message, of: [440, 660, 1_000, 520, 1_300]) == [1_300], "the message holds only the caller")
        // What the caller heard, in order: greeting, menu, beep, goodbye.
        let prompts = try Self.toneSequence(heard, of: [440, 660, 1_000, 520, 1_300])
        #expect(Self.inOrder([440, 660, 1_000, 520], in: prompts) && !prompts.contains(1_300), "\(prompts)")
    }
}
}
