import CallNode
import CallNodeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Running a node as an operator does: settings from the environment and config.yaml with
/// secrets kept out of argv and output, a directory that other processes change live, and
/// metrics scraped while a call runs. Real `callnode` processes.
extension RealTimeTests {
@Suite(.serialized) struct OperatorTests {
    static func callnode() throws -> String { try BuildProducts.executable("callnode") }

    /// Runs `callnode` to completion with extra environment variables; its output (stdout and stderr).
    static func run(_ arguments: [String], environment: [String: String] = [:], log: String) async throws -> (status: Int32, output: String) {
        let child = try ChildProcess(try callnode(), arguments, output: log, environment: environment)
        let status = await child.wait()
        return (status, (try? String(contentsOfFile: log, encoding: .utf8)) ?? "")
    }

    /// `GET /metrics` over a plain socket.
    static func scrape(_ url: String) throws -> String {
        guard let rest = url.split(separator: "//").last, let hostPort = rest.split(separator: "/").first,
              let address = SignalAddress(String(hostPort)) else { throw TestFailure("bad metrics URL \(url)") }
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var sin = sockaddr_in()
        sin.sin_family = sa_family_t(AF_INET)
        sin.sin_port = in_port_t(UInt16(address.port).bigEndian)
        inet_pton(AF_INET, address.host, &sin.sin_addr)
        let connected = withUnsafePointer(to: &sin) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard connected == 0 else { throw TestFailure("cannot connect to \(url)") }
        let request = "GET /metrics HTTP/1.1\r\nHost: \(hostPort)\r\nConnection: close\r\n\r\n"
        _ = request.withCString { send(fd, $0, strlen($0), 0) }
        var response = [UInt8](), buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = recv(fd, &buffer, buffer.count, 0)
            if count <= 0 { break }
            response += buffer[..<count]
        }
        return String(decoding: response, as: UTF8.self)
    }

    static func value(_ metrics: String, _ series: String) -> Double? {
        metrics.split(separator: "\n").first { $0.hasPrefix(series + " ") }.flatMap { Double($0.split(separator: " ").last ?? "") }
    }

    @Test func settingsMergeFromFlagsEnvironmentAndFileAndSecretsStayMasked() async throws {
        let directory = "/tmp/callnode-settings-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try "bitrate: 32000\nframe-ms: 40\nredundancy: off\nturn:\n  - filed:in-the-file@turn.example:3478\n"
            .write(toFile: directory + "/config.yaml", atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: directory + "/config.yaml")

        let shown = try await Self.run(["config", "show", "--home", directory, "--json", "--redundancy", "always", "--no-complexity-follows-load"],
                                 environment: ["CALLNODE_FRAME_MS": "60"], log: directory + "/show.log")
        #expect(shown.status == 0, "\(shown.output)")
        let settings = CommandLineTests.jsonLines(shown.output).reduce(into: [String: (String, String)]()) { all, line in
            guard let key = line["key"] as? String, let values = line["value"] as? [String], let source = line["source"] as? String else { return }
            all[key] = (values.joined(separator: ","), source)
        }
        #expect(settings["redundancy"]! == ("always", "flag"))
        #expect(settings["frame-ms"]! == ("60", "environment"))
        #expect(settings["bitrate"]! == ("32000", "file"))
        #expect(settings["key-exchange"]! == ("dtls", "default"))
        #expect(settings["complexity-follows-load"]! == ("false", "flag"))
        #expect(settings["turn"]! == ("********@turn.example:3478", "file"))
        #expect(!shown.output.contains("in-the-file"))
        #expect(!shown.output.contains("warning"), "\(shown.output)")

        // A secret on the command line works but warns; it is never printed.
        let argv = try await Self.run(["config", "show", "--home", directory, "--turn", "argv:on-the-line@turn.example:3478"], log: directory + "/argv.log")
        #expect(argv.status == 0)
        #expect(argv.output.contains("warning: --turn on the command line can be read by every user"), "\(argv.output)")
        #expect(!argv.output.contains("on-the-line"))
        // A bad value names where it came from.
        let bad = try await Self.run(["config", "show", "--home", directory], environment: ["CALLNODE_BITRATE": "loud"], log: directory + "/bad.log")
        #expect(bad.status != 0 && bad.output.contains("CALLNODE_BITRATE 'loud'"), "\(bad.output)")
        // --home from the environment.
        let viaEnvironment = try await Self.run(["config", "show"], environment: ["CALLNODE_HOME": directory], log: directory + "/home.log")
        #expect(viaEnvironment.output.contains("32000"))
    }

    @Test func aRunningNodeFollowsContactsAndBlocksAndItsMetricsShowTheCall() async throws {
        let directory = "/tmp/callnode-operator-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let aliceHome = directory + "/alice", bobHome = directory + "/bob"
        let aliceID = try await Self.run(["identity", "--home", aliceHome], log: directory + "/id-alice.log")
        let bobID = try await Self.run(["identity", "--home", bobHome], log: directory + "/id-bob.log")
        let alice = try #require(aliceID.output.split(separator: "\n").compactMap { Fingerprint(String($0)) }.first)
        let bob = try #require(bobID.output.split(separator: "\n").compactMap { Fingerprint(String($0)) }.first)

        // Bob listens, knowing nobody yet.
        let listenLog = directory + "/listen.log"
        let listener = try ChildProcess(try Self.callnode(), [
            "listen", "--home", bobHome, "--listen", "127.0.0.1:0", "--bind", "127.0.0.1", "--auto-answer",
            "--input", "tone:440", "--json", "--metrics", "127.0.0.1:0",
        ], output: listenLog)
        defer { listener.stop() }
        let listening = try await CommandLineTests.waitForLine(in: listenLog, process: listener) { $0.contains("\"listening\"") }
        let address = try #require(CommandLineTests.jsonLines(listening).first?["address"] as? String)
        let metricsLine = try await CommandLineTests.waitForLine(in: listenLog, process: listener) { $0.contains("\"metrics\"") }
        let metricsURL = try #require(CommandLineTests.jsonLines(metricsLine).first?["url"] as? String)
        func call(_ name: String, seconds: Int) throws -> ChildProcess {
            try ChildProcess(try Self.callnode(), [
                "call", "\(bob.hex)@\(address)", "--home", aliceHome, "--bind", "127.0.0.1", "--input", "tone:600",
                "--duration", "\(seconds)", "--json",
            ], output: directory + "/\(name).log")
        }
        func events(_ name: String) -> [[String: Any]] {
            CommandLineTests.jsonLines((try? String(contentsOfFile: directory + "/\(name).log", encoding: .utf8)) ?? "")
        }

        // Unknown: refused.
        let first = try call("unknown", seconds: 2)
        #expect(await first.wait() != 0)
        #expect(events("unknown").contains { $0["event"] as? String == "rejected" && $0["reason"] as? String == "unknown-caller" })

        // Another process adds Alice: the running node lets her ring at once.
        #expect(try await Self.run(["contacts", "add", "alice", alice.hex, "--home", bobHome], log: directory + "/add.log").status == 0)
        let second = try call("known", seconds: 5)
        // A scrape during the call shows it connected, with its figures.
        var during = ""
        for _ in 0..<100 {
            during = try Self.scrape(metricsURL)
            if Self.value(during, "callnode_calls{state=\"connected\"}") == 1, during.contains("callnode_call_loss_ratio{call=") { break }
            try await Task.sleep(for: .milliseconds(100))
        }
        #expect(Self.value(during, "callnode_calls{state=\"connected\"}") == 1, "\(during)")
        #expect(Self.value(during, "callnode_calls_total{direction=\"incoming\"}") == 1)
        #expect(Self.value(during, "callnode_refused_total{reason=\"unknown-caller\"}") == 1, "\(during)")
        #expect(during.contains("callnode_call_setup_seconds_count 1"), "\(during)")
        #expect(during.contains("callnode_call_jitter_seconds{call=") && during.contains("callnode_call_rtt_seconds{call="))
        #expect(during.contains("callnode_ice_selected_pairs_total{local=\"host\",remote=\"host\"}"), "\(during)")
        // Every metric the shipped dashboard and alert rules query is there while a call runs.
        let queried = try ShippedMonitoring.metricNames()
        #expect(queried.count > 15, "\(queried)")
        let exported = Set(during.split(separator: "\n").filter { !$0.hasPrefix("#") }.compactMap {
            $0.split(whereSeparator: { $0 == "{" || $0 == " " }).first.map(String.init)
        })
        #expect(queried.subtracting(exported).isEmpty, "queried but not exported: \(queried.subtracting(exported).sorted())")
        #expect(await second.wait() == 0, "\(events("known"))")
        // Frames were encrypted end to end (the default), and the code matches `contacts show`.
        let secured = try #require(events("known").first { $0["event"] as? String == "secured" })
        #expect(secured["frame_encryption"] as? Bool == true, "\(secured)")
        let shown = try await Self.run(["contacts", "show", "alice", "--home", bobHome], log: directory + "/show.log")
        let code = try #require(secured["security_code"] as? String)
        #expect(shown.output.contains("security code: \(code)"), "\(shown.output) / \(code)")

        // Another process blocks her: her next call is refused as blocked.
        #expect(try await Self.run(["block", "alice", "--home", bobHome], log: directory + "/block.log").status == 0)
        let third = try call("blocked", seconds: 2)
        #expect(await third.wait() != 0)
        #expect(events("blocked").contains { $0["event"] as? String == "rejected" && $0["reason"] as? String == "blocked" }, "\(events("blocked"))")
        let after = try Self.scrape(metricsURL)
        #expect(Self.value(after, "callnode_calls{state=\"connected\"}") == 0, "\(after)")
        #expect(Self.value(after, "callnode_refused_total{reason=\"blocked\"}") == 1, "\(after)")
        let listened = CommandLineTests.jsonLines((try? String(contentsOfFile: listenLog, encoding: .utf8)) ?? "")
        #expect(listened.filter { $0["event"] as? String == "refused" }.compactMap { $0["reason"] as? String } == ["unknown-caller", "blocked"])
        #expect(!after.contains("callnode_call_loss_ratio{call="), "a finished call's figures stay: \(after)")
        #expect((Self.value(after, "callnode_calls_ended_total{reason=\"remoteEnded\"}") ?? 0) >= 1, "\(after)")
    }

    /// The systemd unit is valid as written (ExecStart pointed at this build's binary; its man
    /// pages are checked after `scripts/install`, not here).
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-analyze"), "needs systemd-analyze"))
    func theServiceUnitVerifies() async throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let unit = try String(contentsOf: root.appendingPathComponent("contrib/callnode.service"), encoding: .utf8)
        #expect(unit.contains("ExecStart=/usr/local/bin/callnode listen"))
        #expect(unit.contains("Environment=CALLNODE_HOME=/var/lib/callnode") && unit.contains("Restart=on-failure"))
        let directory = "/tmp/callnode-unit-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try unit.replacingOccurrences(of: "ExecStart=/usr/local/bin/callnode", with: "ExecStart=\(try Self.callnode())")
            .write(toFile: directory + "/callnode.service", atomically: true, encoding: .utf8)
        let status = try await ChildProcess.running("/usr/bin/systemd-analyze", ["verify", "--man=no", directory + "/callnode.service"],
                                          output: directory + "/verify.log")
        let output = (try? String(contentsOfFile: directory + "/verify.log", encoding: .utf8)) ?? ""
        #expect(status == 0 && output.isEmpty, "\(output)")
    }

    /// SIGTERM (what `systemctl stop` sends) ends a listening node cleanly: exit status 0.
    @Test func sigtermStopsAListeningNodeCleanly() async throws {
        let directory = "/tmp/callnode-sigterm-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let log = directory + "/listen.log"
        let listener = try ChildProcess(try Self.callnode(), [
            "listen", "--home", directory + "/home", "--listen", "127.0.0.1:0", "--bind", "127.0.0.1", "--json",
        ], output: log)
        defer { listener.stop() }
        _ = try await CommandLineTests.waitForLine(in: log, process: listener) { $0.contains("\"listening\"") }
        kill(listener.pid, SIGTERM)
        #expect(await listener.wait() == 0, "\((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        // A service's journal says what stopped it, not to press Ctrl-C.
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(output.contains("stopping (SIGTERM)") && !output.contains("Ctrl-C"), "\(output)")
    }
}
}
