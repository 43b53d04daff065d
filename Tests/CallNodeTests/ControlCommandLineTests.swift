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
@Suite struct ControlCommandLineTests {
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
        return try await ControlServerTests.offPool { try CommandLineTests.run(arguments, log: log) }
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
            let powers = frequencies.map { (frequency: $0, power: 2 * Goertzel.power(of: $0, in: window) / energy) }
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
            let listed = try await ControlServerTests.curl(["--unix-socket", socket, "http://node/v1/calls/\(short)"])
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
        let played = try await ControlServerTests.curl(["--unix-socket", socket, "-X", "POST", "-d", #"{"tone": 1000, "seconds": 1}"#,
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
        #expect(bob.0.wait() == 0)
    }
}
}
