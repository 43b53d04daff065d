import CallNode
import CallNodeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The `callnode` executable end to end: two processes on loopback.
extension RealTimeTests {
@Suite(.serialized) struct CommandLineTests {
    static func run(_ arguments: [String], log: String) async throws -> (status: Int32, output: String) {
        let status = try await ChildProcess.running(try BuildProducts.executable("callnode"), arguments, output: log)
        return (status, (try? String(contentsOfFile: log, encoding: .utf8)) ?? "")
    }

    /// Polls a child's output (bounded) until a line satisfies `predicate`.
    static func waitForLine(in path: String, process: ChildProcess, where predicate: (String) -> Bool) async throws -> String {
        for _ in 0..<300 {
            let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            if let line = text.split(separator: "\n").map(String.init).first(where: predicate) { return line }
            guard process.isRunning else { throw TestFailure("the process exited early:\n\(text)") }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw TestFailure("no matching line in \(path)")
    }

    static func jsonLines(_ text: String) -> [[String: Any]] {
        text.split(separator: "\n").compactMap { line in
            (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any]
        }
    }

    @Test func twoProcessesCompleteACallAndTheRecordingHoldsTheSentAudio() async throws {
        let directory = "/tmp/callnode-cli-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let sent = directory + "/sent.wav", recorded = directory + "/recorded.wav"
        try WAV.write(SyntheticSpeech.samples(seconds: 3, seed: 5), format: AudioFormat(), path: sent)
        let aliceHome = directory + "/alice", bobHome = directory + "/bob"

        // Identities, and each side's contact for the other.
        let aliceID = try await Self.run(["identity", "--home", aliceHome], log: directory + "/id-alice.log")
        let bobID = try await Self.run(["identity", "--home", bobHome], log: directory + "/id-bob.log")
        #expect(aliceID.status == 0 && bobID.status == 0)
        let aliceFingerprint = try #require(aliceID.output.split(separator: "\n").compactMap { Fingerprint(String($0)) }.first)
        let bobFingerprint = try #require(bobID.output.split(separator: "\n").compactMap { Fingerprint(String($0)) }.first)
        #expect(try await Self.run(["contacts", "add", "alice", aliceFingerprint.hex, "--home", bobHome], log: directory + "/c1.log").status == 0)
        let listed = try await Self.run(["contacts", "list", "--home", bobHome], log: directory + "/c2.log")
        #expect(listed.output.contains("alice\t\(aliceFingerprint.hex)"))

        // Bob listens and answers; Alice calls for 5 s.
        let listenLog = directory + "/listen.log"
        let listener = try ChildProcess(try BuildProducts.executable("callnode"), [
            "listen", "--home", bobHome, "--signal", "127.0.0.1:0", "--bind", "127.0.0.1", "--auto-answer",
            "--output", "wav:" + recorded, "--input", "silence", "--duration", "30", "--calls", "1", "--json",
        ], output: listenLog)
        defer { listener.stop() }
        let listening = try await Self.waitForLine(in: listenLog, process: listener) { $0.contains("\"listening\"") }
        let address = try #require(Self.jsonLines(listening).first?["address"] as? String)

        let callLog = directory + "/call.log"
        let call = try await Self.run([
            "call", "\(bobFingerprint.hex)@\(address)", "--home", aliceHome, "--bind", "127.0.0.1",
            "--input", "wav:" + sent, "--duration", "5", "--json",
        ], log: callLog)
        #expect(call.status == 0, "call failed:\n\(call.output)")
        let events = Self.jsonLines(call.output)
        let connected = try #require(events.first { $0["event"] as? String == "connected" })
        #expect((connected["setup_ms"] as? Double ?? -1) > 0)
        // The setup, step by step, in the order it happened, ending when media started.
        let setup = try #require(events.first { $0["event"] as? String == "setup" })
        let steps = try #require(setup["steps"] as? [[String: Any]])
        let names = steps.compactMap { $0["step"] as? String }, times = steps.compactMap { $0["ms"] as? Double }
        for step in ["signaling-connected", "invite-sent", "ringing", "offer-received", "answer-sent", "pair-selected",
                     "ice-connected", "media-secured", "media-started"] {
            #expect(names.contains(step), "no \(step) in \(names)")
        }
        #expect(names.last == "media-started" && times == times.sorted(), "\(steps)")
        #expect(names.firstIndex(of: "signaling-connected")! < names.firstIndex(of: "offer-received")!)
        #expect(abs(times.last! - (connected["setup_ms"] as? Double ?? 0)) < 5, "\(steps) / \(connected)")
        let pair = try #require(events.first { $0["event"] as? String == "selected-pair" })
        #expect(pair["local_type"] as? String == "host")
        let ended = try #require(events.first { $0["event"] as? String == "ended" })
        #expect(ended["reason"] as? String == "localEnded")
        #expect((ended["duration_s"] as? Double ?? 0) > 4)
        #expect(events.contains { $0["event"] as? String == "stats" })

        // The listener exits after its first call; the recording holds what Alice sent.
        #expect(await listener.wait() == 0, "listener:\n\((try? String(contentsOfFile: listenLog, encoding: .utf8)) ?? "")")
        let heard = try WAV.read(path: recorded).samples
        #expect(heard.count > 48_000 * 4)
        let match = AudioAlignment.best(sent: try WAV.read(path: sent).samples, received: heard)
        #expect(match.correlation > 0.7, "correlation \(match.correlation)")

        // Recents on Alice's side, via the CLI.
        let recents = try await Self.run(["recents", "--home", aliceHome], log: directory + "/recents.log")
        #expect(recents.output.contains("outgoing") && recents.output.contains("localEnded"))
    }

    /// `callnode listen` on a pseudo-terminal (util-linux `script`; `stty` first, if given)
    /// with keys written to it, logging to `directory/listen.log`, listening on loopback.
    final class TerminalListener {
        let process: ChildProcess
        let log: String
        let address: String
        private let keys: Int32

        init(directory: String, stty: String? = nil, arguments: String) async throws {
            var ends: [Int32] = [0, 0]
            guard pipe(&ends) == 0 else { throw TestFailure("pipe failed") }
            for fd in ends { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
            keys = ends[1]
            log = directory + "/listen.log"
            let command = (stty.map { "stty \($0); " } ?? "") + "exec \(try BuildProducts.executable("callnode")) listen --home \(directory)/bob"
                + " --listen 127.0.0.1:0 --bind 127.0.0.1 " + arguments
            process = try ChildProcess("/usr/bin/script", ["-qfec", command, "/dev/null"], output: log, stdin: ends[0])
            close(ends[0])
            let listening = try await CommandLineTests.waitForLine(in: log, process: process) { $0.contains("listening on ") }
            address = try #require(listening.split(separator: " ").first { $0.hasPrefix("127.0.0.1:") }.map(String.init))
        }

        func press(_ key: String) { _ = key.withCString { write(keys, $0, 1) } }

        deinit {
            close(keys)
            process.stop()
        }
    }

    /// `D` on a terminal drains by hand: new callers are refused as draining, the call in
    /// progress runs to its end, then the node exits 0.
    @Test func theDrainKeyFinishesTheCallTakesNoNewOneAndExits() async throws {
        let directory = "/tmp/callnode-cli-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let callnode = try BuildProducts.executable("callnode")
        let terminal = try await TerminalListener(directory: directory, arguments: "--accept-unknown --auto-answer --input tone:440 --output null")
        let (listener, listenLog, address) = (terminal.process, terminal.log, terminal.address)
        let firstLog = directory + "/first.log"
        let first = try ChildProcess(callnode, ["call", address, "--home", directory + "/alice", "--bind", "127.0.0.1", "--duration", "4"],
                                     output: firstLog)
        defer { first.stop() }
        _ = try await Self.waitForLine(in: firstLog, process: first) { $0.contains("connected in") }
        terminal.press("D")
        _ = try await Self.waitForLine(in: listenLog, process: listener) { $0.contains("draining (D): taking no new calls; 1 in progress") }
        let secondLog = directory + "/second.log"
        let second = try ChildProcess(callnode, ["call", address, "--home", directory + "/carol", "--bind", "127.0.0.1"], output: secondLog)
        defer { second.stop() }
        #expect(await second.wait() == 1)
        let refused = (try? String(contentsOfFile: secondLog, encoding: .utf8)) ?? ""
        #expect(refused.contains("draining"), "\(refused)")
        #expect(await first.wait() == 0, "the call in progress was cut: \((try? String(contentsOfFile: firstLog, encoding: .utf8)) ?? "")")
        #expect(await listener.wait() == 0)
        let listened = (try? String(contentsOfFile: listenLog, encoding: .utf8)) ?? ""
        #expect(listened.contains("drained: every call has ended"), "\(listened.suffix(600))")
    }

    /// `[` and `]` lower and raise the microphone 3 dB a step, `-` and `+` the output: the
    /// screen says each level, and the caller hears the microphone's change.
    @Test func volumeKeysChangeWhatThePeerHearsAndSaySo() async throws {
        let directory = "/tmp/callnode-cli-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let terminal = try await TerminalListener(directory: directory, arguments: "--accept-unknown --auto-answer --input tone:440 --output null")
        let callerLog = directory + "/caller.log"
        let caller = try ChildProcess(try BuildProducts.executable("callnode"),
                                      ["call", terminal.address, "--home", directory + "/alice", "--bind", "127.0.0.1", "--duration", "7", "--json"],
                                      output: callerLog)
        defer { caller.stop() }
        func heardLevels() -> [Double] {
            Self.jsonLines((try? String(contentsOfFile: callerLog, encoding: .utf8)) ?? "")
                .filter { $0["event"] as? String == "stats" }.compactMap { $0["receive_level_db"] as? Double }
        }
        _ = try await Self.waitForLine(in: callerLog, process: caller) { $0.contains("\"connected\"") }
        for _ in 0..<50 where heardLevels().count < 2 { try await Task.sleep(for: .milliseconds(100)) }
        let before = try #require(heardLevels().last)
        for _ in 0..<4 { terminal.press("[") }
        _ = try await Self.waitForLine(in: terminal.log, process: terminal.process) { $0.contains("microphone volume -12 dB") }
        terminal.press("-")
        _ = try await Self.waitForLine(in: terminal.log, process: terminal.process) { $0.contains("output volume -3 dB") }
        let counted = heardLevels().count
        for _ in 0..<50 where heardLevels().count < counted + 2 { try await Task.sleep(for: .milliseconds(100)) }
        let after = try #require(heardLevels().last)
        #expect(abs((before - after) - 12) < 2, "the caller heard \(before) dB, then \(after) dB")
        #expect(await caller.wait() == 0)
    }

    /// On a terminal (a pseudo-terminal 60 columns wide, made by util-linux `script`, keys
    /// written to it): an incoming call says which keys answer or decline it, `d` declines it
    /// (the caller hears why), `a` answers the next, and the status line, redrawn in place
    /// every second, stays on one row of the terminal with the keys still on it.
    @Test func onANarrowTerminalKeysAnswerOrDeclineAndTheStatusLineKeepsToOneRow() async throws {
        let directory = "/tmp/callnode-cli-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let callnode = try BuildProducts.executable("callnode")
        let terminal = try await TerminalListener(directory: directory, stty: "cols 60 rows 24",
                                                  arguments: "--accept-unknown --input tone:440 --output null --calls 2")
        let (listener, listenLog, address) = (terminal.process, terminal.log, terminal.address)
        func press(_ key: String) { terminal.press(key) }

        // The first call: declined with `d`.
        let declinedLog = directory + "/declined.log"
        let declined = try ChildProcess(callnode, ["call", address, "--home", directory + "/alice", "--bind", "127.0.0.1"], output: declinedLog)
        defer { declined.stop() }
        _ = try await Self.waitForLine(in: listenLog, process: listener) { $0.contains("a answer, d decline") }
        press("d")
        #expect(await declined.wait() == 1)
        let declinedOutput = (try? String(contentsOfFile: declinedLog, encoding: .utf8)) ?? ""
        #expect(declinedOutput.contains("rejected: declined"), "\(declinedOutput)")

        // The second: answered with `a`, and 4 s long.
        let answeredLog = directory + "/answered.log"
        let answered = try ChildProcess(callnode, ["call", address, "--home", directory + "/alice", "--bind", "127.0.0.1", "--duration", "4"],
                                        output: answeredLog)
        defer { answered.stop() }
        for _ in 0..<300 where ((try? String(contentsOfFile: listenLog, encoding: .utf8)) ?? "").components(separatedBy: "a answer, d decline").count < 3 {
            try await Task.sleep(for: .milliseconds(100))
        }
        press("a")
        #expect(await answered.wait() == 0, "\((try? String(contentsOfFile: answeredLog, encoding: .utf8)) ?? "")")
        #expect(await listener.wait() == 0)

        // Every drawing of the status line, escape sequences aside.
        let screen = try String(contentsOfFile: listenLog, encoding: .utf8)
        let drawn = screen.replacingOccurrences(of: "\u{1B}[2K", with: "")
            .split(whereSeparator: { $0 == "\r" || $0 == "\n" }).filter { $0.hasPrefix("●") }
        #expect(drawn.count >= 2, "\(screen)")
        for status in drawn {
            #expect(status.count < 60, "wider than the terminal: \(status)")
            #expect(status.hasPrefix("● in call with") && status.hasSuffix("m h 0-9 o q"), "\(status)")
        }
        #expect(screen.contains("call ended: declined"), "\(screen)")
    }

    /// A call whose audio cannot start (a microphone that does not exist) fails at the caller
    /// with the reason and leaves nothing behind at the callee: no call there that only its
    /// 30 s resumption window would end (the caller's invitation used to go out after its end).
    @Test func aCallWhoseMicrophoneIsMissingLeavesNoCallAtTheCallee() async throws {
        let directory = "/tmp/callnode-cli-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let listenLog = directory + "/listen.log"
        let listener = try ChildProcess(try BuildProducts.executable("callnode"), [
            "listen", "--home", directory + "/bob", "--listen", "127.0.0.1:0", "--bind", "127.0.0.1", "--auto-answer",
            "--accept-unknown", "--input", "silence", "--output", "null", "--json",
        ], output: listenLog)
        defer { listener.stop() }
        let listening = try await Self.waitForLine(in: listenLog, process: listener) { $0.contains("\"listening\"") }
        let address = try #require(Self.jsonLines(listening).first?["address"] as? String)

        let failed = try await Self.run(["call", address, "--home", directory + "/alice", "--bind", "127.0.0.1",
                                   "--input", "alsa:callnode-no-such-device"], log: directory + "/failed.log")
        #expect(failed.status == 1)
        #expect(failed.output.contains("ALSA capture device 'callnode-no-such-device'"), "\(failed.output)")
        // Then a call that works; once the callee has seen it end, every call it saw is in its log.
        let good = try await Self.run(["call", address, "--home", directory + "/alice", "--bind", "127.0.0.1", "--duration", "2"],
                                log: directory + "/good.log")
        #expect(good.status == 0, "\(good.output)")
        let seen = Self.jsonLines((try? String(contentsOfFile: listenLog, encoding: .utf8)) ?? "")
        let goodCall = try #require(seen.last { $0["event"] as? String == "incoming" }?["call"] as? String)
        _ = try await Self.waitForLine(in: listenLog, process: listener) { $0.contains("\"ended\"") && $0.contains(goodCall) }
        let events = Self.jsonLines(try String(contentsOfFile: listenLog, encoding: .utf8))
        let goodArrived = try #require(events.firstIndex { $0["event"] as? String == "incoming" && $0["call"] as? String == goodCall })
        // Any call that reached the callee before the good one had ended before it arrived.
        for (index, event) in events.enumerated() where event["event"] as? String == "incoming" && index < goodArrived {
            let call = event["call"] as? String
            let ended = events.firstIndex { $0["event"] as? String == "ended" && $0["call"] as? String == call }
            #expect(ended.map { $0 < goodArrived } == true, "a call was left at the callee: \(events.filter { $0["call"] as? String == call })")
        }
    }

    /// Ctrl-C while the call rings: it never connected, so the exit status is 1 with the reason.
    @Test func aCallHungUpWhileItRingsExitsNonZero() async throws {
        let directory = "/tmp/callnode-cli-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let executable = try BuildProducts.executable("callnode")
        let port = Int(TwoNodeTests.bindLoopback() ?? 7699)
        let callee = try ChildProcess(executable, ["listen", "--home", directory + "/b", "--listen", "127.0.0.1:\(port)", "--accept-unknown",
                                                   "--bind", "127.0.0.1"], output: directory + "/b.log")
        defer { callee.stop() }
        _ = try await Self.waitForLine(in: directory + "/b.log", process: callee) { $0.contains("listening on") }
        let caller = try ChildProcess(executable, ["call", "127.0.0.1:\(port)", "--home", directory + "/a", "--bind", "127.0.0.1"],
                                      output: directory + "/a.log")
        _ = try await Self.waitForLine(in: directory + "/a.log", process: caller) { $0.contains("ringing") }
        kill(caller.pid, SIGINT)
        let status = await caller.wait()
        let output = (try? String(contentsOfFile: directory + "/a.log", encoding: .utf8)) ?? ""
        #expect(status == 1, "\(output)")
        #expect(output.contains("the call did not connect: hung up before it was answered"), "\(output)")
    }

    /// `listen --dnd`: callers are refused with the reason, and the caller exits 1 saying so.
    @Test func aNodeListeningWithDoNotDisturbRefusesCallers() async throws {
        let directory = "/tmp/callnode-cli-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let executable = try BuildProducts.executable("callnode")
        let port = Int(TwoNodeTests.bindLoopback() ?? 7698)
        let callee = try ChildProcess(executable, ["listen", "--home", directory + "/b", "--listen", "127.0.0.1:\(port)", "--accept-unknown",
                                                   "--dnd", "--bind", "127.0.0.1"], output: directory + "/b.log")
        defer { callee.stop() }
        _ = try await Self.waitForLine(in: directory + "/b.log", process: callee) { $0.contains("listening on") }
        let caller = try await Self.run(["call", "127.0.0.1:\(port)", "--home", directory + "/a", "--bind", "127.0.0.1"], log: directory + "/a.log")
        #expect(caller.status == 1)
        #expect(caller.output.contains("do-not-disturb"), "\(caller.output)")
        let calleeOutput = (try? String(contentsOfFile: directory + "/b.log", encoding: .utf8)) ?? ""
        #expect(calleeOutput.contains("refused a call") && calleeOutput.contains("do-not-disturb"), "\(calleeOutput)")
    }

    @Test func failuresExitNonZeroWithOneClearLine() async throws {
        let directory = "/tmp/callnode-cli-\(getpid())-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // Nobody listens on this port.
        let unreachable = try await Self.run(["call", "127.0.0.1:9", "--home", directory + "/a", "--bind", "127.0.0.1"], log: directory + ".1.log")
        #expect(unreachable.status == 1)
        #expect(unreachable.output.contains("cannot reach 127.0.0.1:9"), "\(unreachable.output)")
        // One line says why, not two (the `call ended` line leaves it to the last line).
        #expect(unreachable.output.components(separatedBy: "cannot reach 127.0.0.1:9").count == 2, "\(unreachable.output)")
        let badFlag = try await Self.run(["call", "127.0.0.1:9", "--input", "microphone", "--home", directory + "/a"], log: directory + ".2.log")
        #expect(badFlag.status != 0)
        #expect(badFlag.output.contains("--input 'microphone' is not"), "\(badFlag.output)")
        // A value checked as the command runs (here, as it would be from config.yaml) points to
        // that command's help, not to the top command's usage.
        let badValue = try await Self.run(["call", "127.0.0.1:9", "--bitrate", "5", "--home", directory + "/a"], log: directory + ".5.log")
        #expect(badValue.status == 64)
        #expect(badValue.output.contains("--bitrate '5' is not a bitrate") && badValue.output.contains("See 'callnode call --help'."),
                "\(badValue.output)")
        #expect(!badValue.output.contains("callnode <subcommand>"), "\(badValue.output)")
        try? FileManager.default.removeItem(atPath: directory + ".5.log")
        let noContact = try await Self.run(["call", "nobody", "--home", directory + "/a"], log: directory + ".3.log")
        #expect(noContact.status == 1)
        #expect(noContact.output.contains("no contact named 'nobody'"), "\(noContact.output)")
        // A WAV the node cannot play is refused before anything is dialed, with the reason.
        var unplayable = WAV.encode([0, 0, 0, 0], format: AudioFormat())
        unplayable[34] = 12  // 12 bits per sample
        #expect(FileManager.default.createFile(atPath: directory + ".bad.wav", contents: Data(unplayable)))
        let badWAV = try await Self.run(["call", "127.0.0.1:9", "--input", "wav:" + directory + ".bad.wav", "--home", directory + "/a"], log: directory + ".4.log")
        #expect(badWAV.status == 64, "\(badWAV.output)")
        #expect(badWAV.output.contains("--input:") && badWAV.output.contains("12 bits"), "\(badWAV.output)")
        #expect(!badWAV.output.contains("cannot reach"), "it dialed anyway: \(badWAV.output)")
        try? FileManager.default.removeItem(atPath: directory + ".bad.wav")
        try? FileManager.default.removeItem(atPath: directory + ".4.log")
        try? FileManager.default.removeItem(atPath: directory + ".1.log")
        try? FileManager.default.removeItem(atPath: directory + ".2.log")
        try? FileManager.default.removeItem(atPath: directory + ".3.log")
    }

    /// Corners a newcomer hits: a read-only command on a new home creates nothing, `config show`
    /// cuts no key or value, an input that playback-only never opens is said, the usage line does
    /// not read as if options were required, and a caller's key exchange that the callee's offer
    /// overrides is said.
    @Test func cornersANewcomerHitsAreSaid() async throws {
        let directory = "/tmp/callnode-cli-\(getpid())-\(UUID().uuidString.prefix(8))"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let recents = try await Self.run(["recents", "--home", directory + "/new"], log: directory + ".1.log")
        #expect(recents.status == 0 && recents.output.contains("no recent calls"), "\(recents.output)")
        let contacts = try await Self.run(["contacts", "list", "--home", directory + "/new"], log: directory + ".2.log")
        #expect(contacts.status == 0 && contacts.output.contains("no contacts"), "\(contacts.output)")
        #expect(!FileManager.default.fileExists(atPath: directory + "/new/identity.key"), "a read-only command created an identity")
        #expect(!FileManager.default.fileExists(atPath: directory + "/new/callnode.sqlite"), "a read-only command created a database")

        let shown = try await Self.run(["config", "show", "--home", directory + "/a", "--turn", "user:hunter2pw@turn.example.org:3478"],
                                 log: directory + ".3.log")
        #expect(shown.status == 0, "\(shown.output)")
        #expect(shown.output.contains("complexity-follows-load "), "\(shown.output)")
        #expect(shown.output.contains("turn.example.org:3478"), "\(shown.output)")
        #expect(!shown.output.contains("hunter2pw"), "the TURN password was shown")

        let help = try await Self.run(["listen", "--help"], log: directory + ".4.log")
        #expect(help.output.contains("USAGE: callnode listen [<options>]"), "\(help.output.prefix(600))")

        let playback = try await Self.run(["call", "127.0.0.1:9", "--home", directory + "/a", "--bind", "127.0.0.1", "--playback-only",
                                     "--input", "tone:440", "--key-exchange", "sdes"], log: directory + ".5.log")
        #expect(playback.output.contains("--playback-only never opens a microphone: --input 'tone:440' is not used"), "\(playback.output)")
        #expect(playback.output.contains("--key-exchange sdes applies to calls this node answers"), "\(playback.output)")
        for n in 1...5 { try? FileManager.default.removeItem(atPath: directory + ".\(n).log") }
    }
}
}
