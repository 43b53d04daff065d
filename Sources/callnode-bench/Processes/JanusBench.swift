import ArgumentParser
import CallNode
import Foundation
import Janus
import JanusRoom

#if canImport(Glibc)
import Glibc
#endif

/// Rooms on Janus against the node's own bridge, every figure beside its anchor in the same run:
/// the CPU a room's host spends per party (Janus's AudioBridge, or a `callnode listen
/// --conference` hosting the same callers), a participant's CPU in a room call against a
/// caller's in a plain call, and the time from dial to first audio either way.
struct JanusBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "janus",
        abstract: "Janus AudioBridge rooms against the node's own bridge: host CPU per party, a participant's CPU, setup to first audio.",
        discussion: """
            Needs janus (scripts/bootstrap installs it) and callnode built beside this benchmark \
            (swift build -c release --product callnode). A private Janus runs in a temporary \
            directory with one 48 kHz room. For each --parties N: N `callnode call` processes \
            join the room, then the same N call one `callnode listen --conference` that merges \
            them; each host's CPU and the callers' are sampled over --window seconds once every \
            caller hears audio. Callers play a tone each (Opus 40 kbit/s, complexity 8, fixed).
            """)

    @Option(help: "Parties per room (repeat the option).")
    var parties: [Int] = [4, 8]

    @Option(help: "Seconds each host and its callers are measured over.")
    var window = 10

    @Option(help: "The callers' Opus complexity (fixed, not following load).")
    var complexity = 8

    func validate() throws {
        guard parties.allSatisfy({ (2...64).contains($0) }) else { throw ValidationError("--parties is 2–64") }
        guard (3...120).contains(window) else { throw ValidationError("--window is 3–120 seconds") }
    }

    /// One host's round: its CPU per party-second, the callers' mean CPU per call-second, their
    /// setup to first audio (ms, each caller).
    struct Round {
        var hostPerParty: Double
        var callerCPU: Double
        var firstAudio: [Double]
    }

    func run() async throws {
        let executable = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
            .deletingLastPathComponent().appendingPathComponent("callnode").path
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw ValidationError("\(executable) is missing: swift build -c release --product callnode")
        }
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/janus") else { throw ValidationError("janus is not installed: apt-get install janus") }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("callnode-janus-\(getpid())").path
        try? FileManager.default.removeItem(atPath: directory)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let port = 28_000 + Int(getpid() % 1000)
        let janus = try await Self.startJanus(directory: directory + "/janus", port: port)
        defer { kill(janus, SIGTERM); var status: Int32 = 0; waitpid(janus, &status, 0) }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        print("janus: host CPU per party, a participant's CPU, setup to first audio (window \(window) s, callers at complexity \(complexity))")
        for count in parties {
            let room = try await measureRoom(executable, janus: janus, port: port, parties: count, directory: directory + "/room-\(count)", ticks: ticks)
            let bridge = try await measureBridge(executable, parties: count, directory: directory + "/bridge-\(count)", ticks: ticks)
            func ms(_ seconds: Double) -> String { String(format: "%.2f", seconds * 1000) }
            func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
            print("\(count) parties: host per party \(ms(room.hostPerParty)) ms/s (Janus) vs \(ms(bridge.hostPerParty)) ms/s (node's bridge), "
                  + String(format: "%.2f×", room.hostPerParty / bridge.hostPerParty)
                  + "; a participant \(ms(room.callerCPU)) ms/s in the room vs \(ms(bridge.callerCPU)) ms/s in a plain call, "
                  + String(format: "%.2f×", room.callerCPU / bridge.callerCPU)
                  + "; first audio median \(String(format: "%.0f", median(room.firstAudio))) ms (room) vs "
                  + "\(String(format: "%.0f", median(bridge.firstAudio))) ms (node)")
            fflush(nil)
        }
    }

    /// The callers' common arguments.
    private func callerArguments(home: String, input: String) -> [String] {
        ["--home", home, "--input", input, "--output", "null", "--json", "--duration", String(window + 8),
         "--opus-complexity", String(complexity), "--no-complexity-follows-load"]
    }

    private func measureRoom(_ executable: String, janus: pid_t, port: Int, parties: Int, directory: String, ticks: Double) async throws -> Round {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var callers: [pid_t] = []
        defer { Self.stop(callers) }
        for index in 0..<parties {
            let log = directory + "/caller-\(index).log"
            callers.append(try ProcessBench.spawn(executable, ["call", "janus:http://127.0.0.1:\(port)/janus#1000"]
                + callerArguments(home: directory + "/caller-\(index)", input: "tone:\(300 + 50 * index)"), output: log))
        }
        let firstAudio = try await Self.firstAudio(directory: directory, count: parties)
        let (host, callersCPU) = try await sample(host: janus, callers: callers, ticks: ticks)
        return Round(hostPerParty: host / Double(parties), callerCPU: callersCPU, firstAudio: firstAudio)
    }

    private func measureBridge(_ executable: String, parties: Int, directory: String, ticks: Double) async throws -> Round {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let hostLog = directory + "/host.log"
        let host = try ProcessBench.spawn(executable, [
            "listen", "--home", directory + "/host", "--listen", "127.0.0.1:0", "--bind", "127.0.0.1", "--auto-answer", "--conference",
            "--accept-unknown", "--input", "silence", "--output", "null", "--json", "--max-calls", String(parties + 1),
            "--opus-complexity", String(complexity), "--no-complexity-follows-load",
        ], output: hostLog)
        var callers: [pid_t] = []
        defer { Self.stop(callers + [host]) }
        let listening = try await ProcessBench.waitFor(hostLog, "\"listening\"")
        guard let address = (try? JSONSerialization.jsonObject(with: Data(listening.utf8)) as? [String: Any])?["address"] as? String else {
            throw ValidationError("no listening address in \(hostLog)")
        }
        let identity = try NodeIdentity.loadOrCreate(home: directory + "/host").identity.fingerprint.hex
        for index in 0..<parties {
            callers.append(try ProcessBench.spawn(executable, ["call", "\(identity)@\(address)", "--bind", "127.0.0.1"]
                + callerArguments(home: directory + "/caller-\(index)", input: "tone:\(300 + 50 * index)"),
                output: directory + "/caller-\(index).log"))
        }
        let firstAudio = try await Self.firstAudio(directory: directory, count: parties)
        let (hostCPU, callersCPU) = try await sample(host: host, callers: callers, ticks: ticks)
        return Round(hostPerParty: hostCPU / Double(parties), callerCPU: callersCPU, firstAudio: firstAudio)
    }

    /// A settling second, then the host's CPU (seconds per second) and the callers' mean.
    private func sample(host: pid_t, callers: [pid_t], ticks: Double) async throws -> (Double, Double) {
        try await Task.sleep(for: .seconds(1))
        let before = try ([host] + callers).map(ProcessBench.sample)
        let started = ContinuousClock.now
        try await Task.sleep(for: .seconds(window))
        let after = try ([host] + callers).map(ProcessBench.sample)
        let elapsed = ProcessBench.seconds(ContinuousClock.now - started)
        let cpu = zip(before, after).map { Double($1.cpuTicks - $0.cpuTicks) / ticks / elapsed }
        return (cpu[0], cpu.dropFirst().reduce(0, +) / Double(callers.count))
    }

    /// Each caller's dial to first audio (ms), once every caller heard its first audio.
    private static func firstAudio(directory: String, count: Int) async throws -> [Double] {
        var delays: [Double] = []
        for index in 0..<count {
            let line = try await ProcessBench.waitFor(directory + "/caller-\(index).log", "\"first-audio\"")
            guard let after = (try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])?["after_ms"] as? Double else {
                throw ValidationError("caller \(index) gave no first-audio time: \(line)")
            }
            delays.append(after)
        }
        return delays
    }

    private static func stop(_ pids: [pid_t]) {
        for pid in pids { kill(pid, SIGTERM) }
        for pid in pids { var status: Int32 = 0; waitpid(pid, &status, 0) }
    }

    /// A private Janus: the AudioBridge and the HTTP transport only, room 1000 at 48 kHz, its
    /// candidates on this host's address towards the outside (it never gathers on loopback).
    static func startJanus(directory: String, port: Int) async throws -> pid_t {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let library = "/usr/lib/x86_64-linux-gnu/janus"
        let plugins = ["duktape", "echotest", "lua", "nosip", "recordplay", "sip", "streaming", "textroom", "videocall", "voicemail", "videoroom"]
        let files = [
            "janus.jcfg": """
            general: {
                configs_folder = "\(directory)"
                plugins_folder = "\(library)/plugins"
                transports_folder = "\(library)/transports"
                events_folder = "\(library)/events"
                loggers_folder = "\(library)/loggers"
                debug_level = 3
            }
            certificates: {}
            media: {}
            nat: {}
            plugins: {
                disable = "\(plugins.map { "libjanus_\($0).so" }.joined(separator: ","))"
            }
            transports: {
                disable = "libjanus_mqtt.so,libjanus_nanomsg.so,libjanus_pfunix.so,libjanus_rabbitmq.so,libjanus_websockets.so"
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
            "janus.plugin.audiobridge.jcfg": """
            general: {
            }
            room-1000: {
                description = "bench"
                sampling_rate = 48000
            }

            """,
        ]
        for (name, text) in files { try text.write(toFile: directory + "/" + name, atomically: true, encoding: .utf8) }
        let pid = try ProcessBench.spawn("/usr/bin/janus", ["-F", directory, "-C", directory + "/janus.jcfg", "-o"], output: directory + "/janus.log")
        let http = JanusHTTP(host: "127.0.0.1", port: port)
        for _ in 0..<100 {
            if let reply = try? await http.post("/janus", ["janus": "info", "transaction": "bench"]), reply["janus"]?.string == "server_info" { return pid }
            try await Task.sleep(for: .milliseconds(100))
        }
        kill(pid, SIGKILL)
        throw ValidationError("janus did not answer on 127.0.0.1:\(port): see \(directory)/janus.log")
    }
}
