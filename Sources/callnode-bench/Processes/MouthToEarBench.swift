import ArgumentParser
import CallNode
@_spi(Benchmarks) import Media
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Mouth-to-ear delay between two real processes through real-time paced sound devices, for
/// callnode and for baresip in the same run.
///
/// The rig is one private PulseAudio server whose stereo null sink `probe` is the "air": its
/// left channel is the caller's mouth, its right the callee's ear, and one recording of its
/// monitor holds both on one timeline. A chirp train played into `mouth` (→ left) reaches the
/// caller's microphone `mic` (left of the monitor); what the callee plays into `ear` lands on
/// the right. Each chirp's delay from left to right is everything between a mouth and an ear:
/// the caller's capture buffering, framing, the encoder, the network, the callee's jitter
/// buffer and its playback buffering. Both processes reach the server through ALSA's `pulse`
/// PCM, as any ALSA program would.
struct MouthToEarBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mouth-to-ear",
        abstract: "Mouth-to-ear delay between two processes through paced virtual devices, callnode and baresip in one run.",
        discussion: """
            Needs pulseaudio, pulseaudio-utils (pacat, parec) and libasound2-plugins (scripts/bootstrap \
            installs them); baresip-core for the anchor. Build callnode beside this benchmark \
            (swift build -c release --product callnode). A private PulseAudio server is started \
            in a temporary directory; its stereo null sink is the air between a mouth (left) and \
            an ear (right). A 10 ms chirp every second is played into the caller's microphone and \
            found by cross-correlation in what the callee played. Both nodes run Opus 48 kHz mono, \
            20 ms frames, 40 kbit/s, complexity 8, SRTP, on loopback; callnode at its defaults \
            otherwise, baresip with its default jitter buffer unless --baresip-jitter says.
            """)

    @Option(help: "Chirps per subject; the median delay is reported.")
    var chirps = 12

    @Option(help: "Which to measure: callnode, baresip (both by default), janus-room (two nodes in a Janus AudioBridge room: the mouth's node and the ear's).")
    var subjects: [String] = ["callnode", "baresip"]

    @Option(help: "baresip's jitter_buffer_delay, in frames (its default is 5-10).")
    var baresipJitter = "5-10"

    @Option(help: "Extra arguments for both callnode processes (repeat the option), e.g. --callnode-argument=--voice-processing --callnode-argument=off.")
    var callnodeArgument: [String] = []

    @Flag(help: "One JSON object per subject on stdout.")
    var json = false

    @Option(help: "Keep the rig's recordings (stereo 48 kHz s16le WAV, left mouth, right ear) in this directory.")
    var keep: String?

    func validate() throws {
        guard (3...60).contains(chirps) else { throw ValidationError("--chirps is 3–60") }
        guard subjects.allSatisfy({ ["callnode", "baresip", "janus-room"].contains($0) }) else {
            throw ValidationError("--subjects are callnode, baresip and janus-room")
        }
    }

    struct Result {
        var subject: String
        var delays: [Double]
        var missed: Int
        /// What the node said of its own parts (callnode's stats: jitter buffer delay, RTT).
        var jitterBufferMs: Double?
        var roundTripMs: Double?
        /// What the sound server held for the caller's capture stream (its record buffer and the
        /// source's latency) and for the callee's playback stream (its buffer and the sink's).
        var captureDeviceMs: Double?
        var playbackDeviceMs: Double?

        var median: Double { delays.sorted()[delays.count / 2] }
    }

    func run() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("callnode-m2e-\(getpid())").path
        try? FileManager.default.removeItem(atPath: directory)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let rig = try PulseRig(directory: directory + "/pulse")
        defer { rig.stop() }
        // The chirp train: half a second of silence, then a chirp every second.
        var train = [Int16](repeating: 0, count: 24_000)
        for _ in 0..<chirps {
            var second = [Int16](repeating: 0, count: 48_000)
            for (i, value) in LatencyBench.chirp.enumerated() { second[i] = Int16(value) }
            train += second
        }
        let trainPath = directory + "/train.raw"
        _ = FileManager.default.createFile(atPath: trainPath, contents: train.withUnsafeBufferPointer { Data(buffer: $0) })

        var results: [Result] = []
        for subject in subjects {
            let recording = directory + "/\(subject).raw"
            var result: Result
            switch subject {
            case "callnode": result = try await measureCallnode(rig: rig, directory: directory, train: trainPath, recording: recording)
            case "janus-room": result = try await measureRoom(rig: rig, directory: directory, train: trainPath, recording: recording)
            default: result = try await measureBaresip(rig: rig, directory: directory, train: trainPath, recording: recording)
            }
            if let keep {
                try? FileManager.default.createDirectory(atPath: keep, withIntermediateDirectories: true)
                if let data = FileManager.default.contents(atPath: recording) {
                    let samples = data.withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
                    try WAV.write(samples, format: AudioFormat(sampleRate: 48_000, channels: 2), path: keep + "/\(subject).wav")
                }
            }
            results.append(result)
        }
        report(results)
    }

    func report(_ results: [Result]) {
        for result in results {
            let sorted = result.delays.sorted()
            if json {
                var object: [String: Any] = ["group": "mouth-to-ear", "subject": result.subject, "chirps": result.delays.count, "missed": result.missed,
                                             "median_ms": round(result.median * 10) / 10, "min_ms": round(sorted[0] * 10) / 10,
                                             "max_ms": round(sorted[sorted.count - 1] * 10) / 10]
                if let jitter = result.jitterBufferMs { object["jitter_buffer_ms"] = jitter }
                if let capture = result.captureDeviceMs { object["capture_device_ms"] = round(capture * 10) / 10 }
                if let playback = result.playbackDeviceMs { object["playback_device_ms"] = round(playback * 10) / 10 }
                if let rtt = result.roundTripMs { object["rtt_ms"] = rtt }
                if let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) { print(String(decoding: data, as: UTF8.self)) }
            } else {
                let line = String(format: "mouth-to-ear, %@: median %.1f ms (min %.1f, max %.1f; %d chirps found, %d missed)",
                                  result.subject, result.median, sorted[0], sorted[sorted.count - 1], result.delays.count, result.missed)
                print(line)
                // The parts: what is known by construction, what the server and the node said,
                // and the rest (the node's own queues between device and codec, tick phase, and
                // for baresip its jitter buffer, which it does not report).
                var parts = [("frame", 20.0), ("encoder lookahead", 6.5)]
                if let capture = result.captureDeviceMs { parts.insert(("capture device", capture), at: 0) }
                if let rtt = result.roundTripMs { parts.append(("network (RTT/2)", rtt / 2)) }
                if let jitter = result.jitterBufferMs { parts.append(("jitter buffer", jitter)) }
                if let playback = result.playbackDeviceMs { parts.append(("playback device", playback)) }
                let rest = result.median - parts.map(\.1).reduce(0, +)
                print("mouth-to-ear, \(result.subject), parts: " + parts.map { String(format: "%@ %.1f ms", $0.0, $0.1) }.joined(separator: " + ")
                      + String(format: " + the rest %.1f ms", rest))
            }
        }
        if !json, let room = results.first(where: { $0.subject == "janus-room" }), let direct = results.first(where: { $0.subject == "callnode" }) {
            print(String(format: "mouth-to-ear ratio: through a Janus room %.2f× a direct call (%.1f ms against %.1f ms)",
                         room.median / direct.median, room.median, direct.median))
        }
        if !json, let ours = results.first(where: { $0.subject == "callnode" }), let anchor = results.first(where: { $0.subject == "baresip" }) {
            print(String(format: "mouth-to-ear ratio: callnode %.2f× baresip (%.1f ms against %.1f ms)", ours.median / anchor.median, ours.median, anchor.median))
        }
    }

    // MARK: The two subjects

    func measureCallnode(rig: PulseRig, directory: String, train: String, recording: String) async throws -> Result {
        let executable = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
            .deletingLastPathComponent().appendingPathComponent("callnode").path
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw ValidationError("\(executable) is missing: swift build -c release --product callnode")
        }
        let home = directory + "/callnode"
        let calleeIdentity = try NodeIdentity.loadOrCreate(home: home + "/callee").identity.fingerprint.hex
        let common = ["--bind", "127.0.0.1", "--input", "alsa:pulse", "--output", "alsa:pulse", "--json", "--accept-unknown",
                      "--opus-complexity", "8", "--no-complexity-follows-load"] + callnodeArgument
        let calleeLog = home + "/callee.log", callerLog = home + "/caller.log"
        let callee = try ProcessBench.spawn(executable, ["listen", "--home", home + "/callee", "--listen", "127.0.0.1:0", "--auto-answer", "--calls", "1"] + common,
                                            output: calleeLog, environment: rig.environment(source: "silent.monitor", sink: "ear"))
        defer { Self.end(callee) }
        let listening = try await ProcessBench.waitFor(calleeLog, "\"listening\"")
        guard let address = (try? JSONSerialization.jsonObject(with: Data(listening.utf8)) as? [String: Any])?["address"] as? String else {
            throw ValidationError("no listening address in \(calleeLog)")
        }
        let caller = try ProcessBench.spawn(executable, ["call", "\(calleeIdentity)@\(address)", "--home", home + "/caller", "--duration", String(chirps + 8)] + common,
                                            output: callerLog, environment: rig.environment(source: "mic", sink: "silent"))
        defer { Self.end(caller) }
        _ = try await ProcessBench.waitFor(callerLog, "\"first-audio\"")
        _ = try await ProcessBench.waitFor(calleeLog, "\"first-audio\"")
        var result = try await playAndFind("callnode", rig: rig, train: train, recording: recording)
        // The callee's last stats line: its jitter buffer's delay and the RTT it measured.
        let stats = ((try? String(contentsOfFile: calleeLog, encoding: .utf8)) ?? "").split(separator: "\n")
            .compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            .last { $0["event"] as? String == "stats" }
        result.jitterBufferMs = stats?["buffer_delay_ms"] as? Double
        result.roundTripMs = stats?["rtt_ms"] as? Double
        return result
    }

    /// Two nodes in a Janus AudioBridge room: the mouth's node sends into the room, the ear's
    /// hears the room's mix (Janus decodes, mixes and encodes again on the way).
    func measureRoom(rig: PulseRig, directory: String, train: String, recording: String) async throws -> Result {
        let executable = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
            .deletingLastPathComponent().appendingPathComponent("callnode").path
        let home = directory + "/room"
        let port = 29_000 + Int(getpid() % 1000)
        let janus = try await JanusBench.startJanus(directory: home + "/janus", port: port)
        defer { Self.end(janus) }
        let room = "janus:http://127.0.0.1:\(port)/janus#1000"
        let common = ["--input", "alsa:pulse", "--output", "alsa:pulse", "--json", "--opus-complexity", "8", "--no-complexity-follows-load",
                      "--duration", String(chirps + 10)] + callnodeArgument
        let earLog = home + "/ear.log", mouthLog = home + "/mouth.log"
        let ear = try ProcessBench.spawn(executable, ["call", room, "--home", home + "/ear"] + common, output: earLog,
                                         environment: rig.environment(source: "silent.monitor", sink: "ear"))
        defer { Self.end(ear) }
        _ = try await ProcessBench.waitFor(earLog, "\"first-audio\"")
        let mouth = try ProcessBench.spawn(executable, ["call", room, "--home", home + "/mouth"] + common, output: mouthLog,
                                           environment: rig.environment(source: "mic", sink: "silent"))
        defer { Self.end(mouth) }
        _ = try await ProcessBench.waitFor(mouthLog, "\"first-audio\"")
        try await Task.sleep(for: .seconds(1))
        var result = try await playAndFind("janus-room", rig: rig, train: train, recording: recording)
        let stats = ((try? String(contentsOfFile: earLog, encoding: .utf8)) ?? "").split(separator: "\n")
            .compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            .last { $0["event"] as? String == "stats" }
        result.jitterBufferMs = stats?["buffer_delay_ms"] as? Double
        result.roundTripMs = stats?["rtt_ms"] as? Double
        return result
    }

    func measureBaresip(rig: PulseRig, directory: String, train: String, recording: String) async throws -> Result {
        guard let executable = ["/usr/bin/baresip", "/usr/local/bin/baresip"].first(where: FileManager.default.isExecutableFile(atPath:)) else {
            throw ValidationError("baresip is not installed (apt-get install baresip-core)")
        }
        let home = directory + "/baresip"
        let ports = (callee: 25_170, caller: 25_172)
        try ProcessBench.writeBaresipHomes(home, ports: ports, complexity: 8,
                                           audio: ["audio_player alsa,pulse", "audio_source alsa,pulse", "audio_alert alsa,pulse"],
                                           modules: ["alsa.so"], jitter: baresipJitter)
        let calleeLog = home + "/callee.log", callerLog = home + "/caller.log"
        let callee = try ProcessBench.spawn(executable, ["-f", home + "/callee", "-t", String(chirps + 20)], output: calleeLog,
                                            environment: rig.environment(source: "silent.monitor", sink: "ear"))
        defer { Self.end(callee) }
        _ = try await ProcessBench.waitFor(calleeLog, "baresip is ready")
        let caller = try ProcessBench.spawn(executable, ["-f", home + "/caller", "-t", String(chirps + 12), "-e", "/dial sip:callee@127.0.0.1:\(ports.callee)"],
                                            output: callerLog, environment: rig.environment(source: "mic", sink: "silent"))
        defer { Self.end(caller) }
        _ = try await ProcessBench.waitFor(callerLog, "Call established")
        _ = try await ProcessBench.waitFor(calleeLog, "Call established")
        return try await playAndFind("baresip", rig: rig, train: train, recording: recording)
    }

    static func end(_ pid: pid_t) {
        kill(pid, SIGKILL)
        var status: Int32 = 0
        waitpid(pid, &status, 0)
    }

    /// Two settling seconds of the call, then the train played into the mouth while the air is
    /// recorded; each chirp found on the left is looked for on the right.
    func playAndFind(_ subject: String, rig: PulseRig, train: String, recording: String) async throws -> Result {
        try await Task.sleep(for: .seconds(2))
        let recorder = try ProcessBench.spawn("/usr/bin/parec", ["--device=probe.monitor", "--channels=2", "--rate=48000", "--format=s16le",
                                                                 "--latency-msec=20", "--raw", recording],
                                              output: recording + ".log", environment: rig.environment())
        defer { Self.end(recorder) }
        try await Task.sleep(for: .milliseconds(300))
        let player = try ProcessBench.spawn("/usr/bin/pacat", ["--playback", "--device=mouth", "--channels=1", "--rate=48000", "--format=s16le",
                                                               "--raw", train], output: recording + ".player.log", environment: rig.environment())
        // What PulseAudio holds for the two streams, sampled three times during the train.
        var devices: [(capture: Double, playback: Double)] = []
        for _ in 0..<3 {
            try await Task.sleep(for: .seconds(Double(chirps) / 4))
            if let sample = try await rig.streamLatencies() { devices.append(sample) }
        }
        try await ProcessBench.waitForExit(player, limit: .seconds(Double(chirps) + 10))
        try await Task.sleep(for: .seconds(1))
        kill(recorder, SIGTERM)
        try await ProcessBench.waitForExit(recorder, limit: .seconds(5))
        guard let data = FileManager.default.contents(atPath: recording), data.count > 4 * 48_000 else {
            throw ValidationError("parec recorded nothing (\(recording).log)")
        }
        let frames = data.withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
        let left = stride(from: 0, to: frames.count - 1, by: 2).map { frames[$0] }
        let right = stride(from: 1, to: frames.count, by: 2).map { frames[$0] }
        let (delays, missed) = Self.delays(mouth: left, ear: right)
        guard delays.count >= max(3, chirps / 2) else {
            throw ValidationError("\(subject): only \(delays.count) of \(delays.count + missed) chirps reached the ear (recording \(recording))")
        }
        var result = Result(subject: subject, delays: delays, missed: missed)
        if !devices.isEmpty {
            result.captureDeviceMs = devices.map(\.capture).reduce(0, +) / Double(devices.count)
            result.playbackDeviceMs = devices.map(\.playback).reduce(0, +) / Double(devices.count)
        }
        return result
    }

    /// Chirp onsets on the mouth channel (a digital copy of the train: exact), then for each
    /// the lag, within 900 ms, at which the ear channel best matches the chirp; a match much
    /// weaker than the ear's typical one (nothing arrived) counts as missed.
    static func delays(mouth: [Int16], ear: [Int16]) -> (delays: [Double], missed: Int) {
        var onsets: [Int] = []
        var index = 0
        while index < mouth.count {
            if abs(Int(mouth[index])) > 400 {
                // Back to where the chirp's window starts rising: the best match nearby.
                let from = max(0, index - 480)
                onsets.append(from + LatencyBench.bestLag(of: LatencyBench.chirp, in: mouth, from: from, within: 480))
                index += 24_000
            } else {
                index += 1
            }
        }
        let chirpEnergy = LatencyBench.chirp.reduce(0) { $0 + $1 * $1 }
        var delays: [Double] = [], missed = 0
        for onset in onsets where onset + 48_000 < ear.count {
            let lag = LatencyBench.bestLag(of: LatencyBench.chirp, in: ear, from: onset, within: 43_200)
            // Normalised correlation of the best match: a chirp that arrived scores well above 0.5.
            var dot = 0.0, energy = 0.0
            for i in 0..<LatencyBench.chirp.count {
                let value = Double(ear[onset + lag + i])
                dot += LatencyBench.chirp[i] * value
                energy += value * value
            }
            let score = energy > 0 ? dot / (chirpEnergy * energy).squareRoot() : 0
            if score > 0.5 { delays.append(Double(lag) / 48) } else { missed += 1 }
        }
        return (delays, missed)
    }
}

/// A private PulseAudio server holding the mouth-to-ear rig (see ``MouthToEarBench``).
final class PulseRig {
    let directory: String
    let socket: String
    private let pid: pid_t

    init(directory: String) throws {
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/pulseaudio"), FileManager.default.isExecutableFile(atPath: "/usr/bin/parec") else {
            throw ValidationError("pulseaudio and pulseaudio-utils are not installed: run scripts/bootstrap")
        }
        self.directory = directory
        socket = directory + "/native"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        pid = try ProcessBench.spawn("/usr/bin/pulseaudio", [
            "--daemonize=no", "--exit-idle-time=-1", "-n", "--use-pid-file=no", "--system=false", "--disable-shm=yes", "--log-level=info",
            "--load=module-native-protocol-unix socket=\(socket) auth-anonymous=1",
            "--load=module-null-sink sink_name=probe rate=48000 channels=2 channel_map=front-left,front-right",
            "--load=module-remap-sink sink_name=mouth master=probe channels=1 channel_map=mono master_channel_map=front-left remix=no",
            "--load=module-remap-sink sink_name=ear master=probe channels=1 channel_map=mono master_channel_map=front-right remix=no",
            "--load=module-remap-source source_name=mic master=probe.monitor channels=1 channel_map=mono master_channel_map=front-left remix=no",
            "--load=module-null-sink sink_name=silent rate=48000 channels=1",
        ], output: directory + "/log", environment: ["PULSE_RUNTIME_PATH": directory, "HOME": directory, "XDG_RUNTIME_DIR": directory])
        for _ in 0..<150 where access(socket, F_OK) != 0 { usleep(100_000) }
        guard access(socket, F_OK) == 0 else {
            stop()
            throw ValidationError("pulseaudio did not start (log: \(directory)/log)")
        }
    }

    /// The environment that points a process's ALSA `pulse` PCM (and pacat/parec) at the rig.
    func environment(source: String? = nil, sink: String? = nil) -> [String: String] {
        var environment = ["PULSE_SERVER": "unix:" + socket]
        if let source { environment["PULSE_SOURCE"] = source }
        if let sink { environment["PULSE_SINK"] = sink }
        return environment
    }

    func stop() { MouthToEarBench.end(pid) }

    /// What the server holds, in ms, for the stream recording from `mic` (buffer + source
    /// latency) and the one playing into `ear` (buffer + sink latency), from `pactl list`.
    func streamLatencies() async throws -> (capture: Double, playback: Double)? {
        func pactl(_ arguments: [String]) async throws -> String {
            let output = directory + "/pactl.out"
            let pid = try ProcessBench.spawn("/usr/bin/pactl", arguments, output: output, environment: environment())
            try await ProcessBench.waitForExit(pid, limit: .seconds(5))
            return (try? String(contentsOfFile: output, encoding: .utf8)) ?? ""
        }
        func index(of name: String, in short: String) -> String? {
            for line in short.split(separator: "\n") {
                let fields = line.split(separator: "\t")
                if fields.count > 1, fields[1] == name { return String(fields[0]) }
            }
            return nil
        }
        /// Sum of the two latencies of the block attached (`key`: N) to `target`.
        func latency(_ listing: String, key: String, target: String, second: String) -> Double? {
            for block in listing.components(separatedBy: "\n\n") {
                let lines = block.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
                guard lines.contains("\(key): \(target)") else { continue }
                func usec(_ field: String) -> Double? {
                    lines.first { $0.hasPrefix(field + ":") }.flatMap { Double($0.dropFirst(field.count + 1).split(separator: " ").first ?? "") }
                }
                if let buffer = usec("Buffer Latency"), let device = usec(second) { return (buffer + device) / 1000 }
            }
            return nil
        }
        let sinks = try await pactl(["list", "short", "sinks"])
        let sources = try await pactl(["list", "short", "sources"])
        let inputs = try await pactl(["list", "sink-inputs"])
        let outputs = try await pactl(["list", "source-outputs"])
        guard let ear = index(of: "ear", in: sinks), let mic = index(of: "mic", in: sources) else { return nil }
        guard let playback = latency(inputs, key: "Sink", target: ear, second: "Sink Latency") else { return nil }
        guard let capture = latency(outputs, key: "Source", target: mic, second: "Source Latency") else { return nil }
        return (capture, playback)
    }
}
