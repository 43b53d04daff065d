import ArgumentParser
import CallNode
@_spi(Benchmarks) import Media
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Two real `callnode` processes in a call on loopback, measured from outside as an operator
/// would: whole-process CPU and context switches from /proc, resident memory; beside the bare
/// Opus+SRTP loop in the same run. Unlike `media` (in-memory link, manual clock), this sees
/// every thread, hop and wakeup the node's real path costs.
struct ProcessBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "process",
        abstract: "Whole-process CPU, context switches and memory of two callnode processes in a call on loopback.",
        discussion: """
            Starts `callnode listen` (auto-answering) and `callnode call` from the same build \
            directory as this benchmark (build both with -c release), with speech-like audio both \
            ways at the node's defaults (Opus 40 kbit/s, complexity 8, 20 ms). After both hear \
            each other and a settling second, it reads /proc/PID/stat and /proc/PID/status over \
            the window: CPU seconds per call-second and context switches per second for each \
            side (summed over the process's threads: threads that end within the window are not \
            counted), and their resident memory. Then --further-calls more callers call the \
            callee, one after another (a callnode callee holds the calls it had, as a phone does): \
            what each call beyond the first adds to the callee's memory (the \
            first call also pays for what the process sets up once: its threads' allocator \
            arenas, the libraries' first use). The bare Opus+SRTP loop (one leg's C work) runs \
            after, with the same settings.
            """)

    @Option(help: "Seconds measured per run, after audio flows.")
    var window: Int = 10

    @Option(help: "Runs; the median is reported.")
    var runs: Int = 3

    @Option(help: "Opus complexity for both processes and the bare loop, 0–10.")
    var complexity: Int = 8

    @Flag(help: "Also with frames not encrypted end to end (--frame-encryption off on both).")
    var compareFrameEncryption = false

    @Option(help: "Calls placed to the callee after the window, one after another: what each call beyond the first adds to its memory (0: none; baresip takes four calls at most).")
    var furtherCalls: Int = 3

    func validate() throws {
        guard window >= 2, runs >= 1 else { throw ValidationError("--window is at least 2 s, --runs at least 1") }
        guard (0...10).contains(complexity) else { throw ValidationError("--complexity is 0–10") }
        guard (0...3).contains(furtherCalls) else { throw ValidationError("--further-calls is 0–3 (baresip answers four calls at most)") }
    }

    struct Sample {
        var cpuTicks: Int
        var contextSwitches: Int
        var residentKiB: Int
    }

    struct Side {
        var cpuPerCallSecond: Double
        var switchesPerSecond: Double
        var residentMiB: Double
        /// At the end of the window, in the call.
        var memory = Memory()
        /// The callee before it was called (a node listening, nothing else): the caller's is
        /// not taken (it dials as it starts).
        var idle: Memory?
        /// The callee once the further calls are up too, and how many there were.
        var withFurtherCalls: (memory: Memory, calls: Int)?
    }

    /// A process's memory from /proc/PID/smaps_rollup, KiB: what is its own (anonymous: heap,
    /// stacks, the codec's and SRTP's state) apart from file mappings shared with every process
    /// that maps the same files (the binary, the Swift runtime, Foundation, ICU, libc), which
    /// PSS divides among them.
    struct Memory {
        var rss = 0
        var pss = 0
        var anonymous = 0
        var pssFile = 0
        var privateClean = 0
        var privateDirty = 0
    }

    func run() async throws {
        let executable = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
            .deletingLastPathComponent().appendingPathComponent("callnode").path
        guard FileManager.default.isExecutableFile(atPath: executable) else {
            throw ValidationError("\(executable) is missing: swift build -c release --product callnode")
        }
        let variants: [(String, [String])] = compareFrameEncryption
            ? [("frames encrypted end to end", []), ("frames not encrypted end to end", ["--frame-encryption", "off"])]
            : [("frames encrypted end to end (the default)", [])]
        let ticksPerSecond = Double(sysconf(Int32(_SC_CLK_TCK)))
        let baresip = ["/usr/bin/baresip", "/usr/local/bin/baresip"].first(where: FileManager.default.isExecutableFile(atPath:))
        let speech = SyntheticSpeech.samples(seconds: 10)
        // Each run measures every variant, baresip and the bare loop one after another, so a
        // machine that is busier in one run shows in all of them, and the ratios are per run.
        var sides: [String: [(caller: Side, callee: Side)]] = [:]
        var bare: [Double] = []
        var pacedBare: [Double] = []
        var ratios: [String: [Double]] = [:]
        for run in 0..<runs {
            guard let loop = BareMediaBenchmark.run(frames: window * 50, pcm: speech, bitrate: 40_000, complexity: Int32(complexity),
                                                    expectedLossPercent: 0) else {
                throw ValidationError("the bare Opus/SRTP loop failed")
            }
            let bareCPU = Self.seconds(loop) / Double(window)
            bare.append(bareCPU)
            // The same loop at a call's pace (a frame every 20 ms): the codec's work on cold caches.
            guard let pacedLoop = BareMediaBenchmark.run(frames: window * 50, pcm: speech, bitrate: 40_000, complexity: Int32(complexity),
                                                         expectedLossPercent: 0, paced: true) else {
                throw ValidationError("the paced bare Opus/SRTP loop failed")
            }
            let pacedCPU = Self.seconds(pacedLoop) / Double(window)
            pacedBare.append(pacedCPU)
            var anchor: Double?
            if let baresip {
                let measured = try await measureBaresip(baresip, ticksPerSecond: ticksPerSecond, run: run)
                sides["baresip", default: []].append(measured)
                anchor = (measured.0.cpuPerCallSecond + measured.1.cpuPerCallSecond) / 2
                ratios["baresip/bare", default: []].append(anchor! / bareCPU)  // set just above
                ratios["baresip/paced", default: []].append(anchor! / pacedCPU)
            }
            for (label, extra) in variants {
                let measured = try await measure(executable, extra: extra, ticksPerSecond: ticksPerSecond, run: run)
                sides[label, default: []].append(measured)
                let mean = (measured.0.cpuPerCallSecond + measured.1.cpuPerCallSecond) / 2
                ratios[label + "/bare", default: []].append(mean / bareCPU)
                ratios[label + "/paced", default: []].append(mean / pacedCPU)
                if let anchor { ratios[label + "/baresip", default: []].append(mean / anchor) }
            }
        }
        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        for (label, _) in variants {
            for (index, name) in ["caller", "callee"].enumerated() {
                let list = (sides[label] ?? []).map { index == 0 ? $0.caller : $0.callee }
                print(String(format: "process %@ (%@): %.4f s CPU per call-second, %.0f context switches per second, %.1f MiB resident (median of %d)",
                             name, label, median(list.map(\.cpuPerCallSecond)), median(list.map(\.switchesPerSecond)), median(list.map(\.residentMiB)), runs))
            }
        }
        for label in variants.map(\.0) + (sides["baresip"] != nil ? ["baresip"] : []) {
            printMemory(label, sides[label] ?? [])
        }
        print(String(format: "process anchor: bare Opus+SRTP loop %.4f s CPU per call-second (one leg's encode, protect, unprotect, decode; complexity %d; median of %d)",
                     median(bare), complexity, runs))
        print(String(format: "process anchor: the same loop paced, a frame every 20 ms %.4f s CPU per call-second (%.2f× the unpaced loop; median of %d)",
                     median(pacedBare), median(zip(pacedBare, bare).map { $0 / $1 }), runs))
        if let measured = sides["baresip"] {
            for (index, name) in ["caller", "callee"].enumerated() {
                let list = measured.map { index == 0 ? $0.caller : $0.callee }
                print(String(format: "process anchor: baresip %@ (Opus 40 kbit/s, complexity %d, SRTP): %.4f s CPU per call-second, %.0f context switches per second, %.1f MiB resident (median of %d)",
                             name, complexity, median(list.map(\.cpuPerCallSecond)), median(list.map(\.switchesPerSecond)), median(list.map(\.residentMiB)), runs))
            }
        } else {
            print("process anchor: baresip is not installed (apt-get install baresip-core) — no C softphone in this run")
        }
        if let againstBare = ratios["baresip/bare"], let againstPaced = ratios["baresip/paced"] {
            print(String(format: "process ratio (baresip, mean of both sides, per run): %.2f× the bare loop (min %.2f, max %.2f), %.2f× the paced loop (min %.2f, max %.2f)",
                         median(againstBare), againstBare.min() ?? 0, againstBare.max() ?? 0,
                         median(againstPaced), againstPaced.min() ?? 0, againstPaced.max() ?? 0))
        }
        for (label, _) in variants {
            let perRun = ratios[label + "/bare"] ?? []
            let perRunPaced = ratios[label + "/paced"] ?? []
            var line = String(format: "process ratio (%@, mean of both sides, per run): %.2f× the bare loop (min %.2f, max %.2f), %.2f× the paced loop (min %.2f, max %.2f)",
                              label, median(perRun), perRun.min() ?? 0, perRun.max() ?? 0,
                              median(perRunPaced), perRunPaced.min() ?? 0, perRunPaced.max() ?? 0)
            if let againstBaresip = ratios[label + "/baresip"] {
                line += String(format: ", %.2f× baresip (min %.2f, max %.2f)", median(againstBaresip), againstBaresip.min() ?? 0, againstBaresip.max() ?? 0)
            }
            print(line)
        }
    }

    /// Memory per process, idle and in the call, and what the call added (the callee's
    /// figures in the call less its own before it: the same process). Medians over the runs.
    func printMemory(_ label: String, _ runs: [(caller: Side, callee: Side)]) {
        guard !runs.isEmpty else { return }
        func median(_ values: [Int]) -> Double { Double(values.sorted()[values.count / 2]) / 1024 }
        func line(_ what: String, _ list: [Memory]) -> String {
            String(format: "%@: anonymous (its own) %.1f MiB, PSS %.1f MiB (of which files %.1f), RSS %.1f MiB (shared files %.1f)",
                   what, median(list.map(\.anonymous)), median(list.map(\.pss)), median(list.map(\.pssFile)), median(list.map(\.rss)),
                   median(list.map { $0.rss - $0.anonymous }))
        }
        let idle = runs.compactMap(\.callee.idle)
        print("process memory (\(label)): " + line("idle callee", idle) + "; " + line("callee in the call", runs.map(\.callee.memory))
              + "; " + line("caller in the call", runs.map(\.caller.memory)))
        // PSS is no measure of what a call adds: the caller, started meanwhile, maps the same
        // files and takes half of their share.
        let added = runs.compactMap { run in run.callee.idle.map { run.callee.memory.anonymous - $0.anonymous } }
        let dirty = runs.compactMap { run in run.callee.idle.map { run.callee.memory.privateDirty - $0.privateDirty } }
        print(String(format: "process memory (%@): one call adds %.0f KiB anonymous (%.0f KiB private dirty) to the callee (median of %d)",
                     label, median(added) * 1024, median(dirty) * 1024, runs.count))
        let further = runs.compactMap { run in
            run.callee.withFurtherCalls.map { ($0.memory.anonymous - run.callee.memory.anonymous) / $0.calls }
        }
        if !further.isEmpty, let calls = runs.first?.callee.withFurtherCalls?.calls {
            print(String(format: "process memory (%@): each call beyond the first adds %.0f KiB anonymous to the callee (%d calls more; median of %d)",
                         label, median(further) * 1024, calls, further.count))
        }
    }

    /// The same call between two baresip processes (the C softphone anchor): SIP straight to
    /// 127.0.0.1, Opus mono at the same bitrate and complexity, 20 ms, SRTP (SDES,
    /// AES_CM_128_HMAC_SHA1_80), speech from a WAV file both ways (`aufile`); what arrives is
    /// decoded but played nowhere (`aubridge` without a source opens no player thread), where
    /// callnode plays into `null`.
    func measureBaresip(_ executable: String, ticksPerSecond: Double, run: Int) async throws -> (Side, Side) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("callnode-process-baresip-\(getpid())-\(run)").path
        try? FileManager.default.removeItem(atPath: directory)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let speech = directory + "/speech.wav"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        // aufile ends the call when its file runs out: make it outlast the measurement.
        try WAV.write(SyntheticSpeech.samples(seconds: Double(window + 15), seed: 3), format: AudioFormat(), path: speech)
        let ports = (callee: 25_070 + 4 * run, caller: 25_072 + 4 * run)
        let audio = ["audio_player aubridge,nullplay", "audio_alert aubridge,nullplay", "audio_source aufile,\(speech)"]
        let modules = ["aufile.so", "aubridge.so"]
        try Self.writeBaresipHomes(directory, ports: ports, complexity: complexity, audio: audio, modules: modules)
        let calleeLog = directory + "/callee.log", callerLog = directory + "/caller.log"
        let callee = try Self.spawn(executable, ["-f", directory + "/callee", "-t", String(window + 20)], output: calleeLog)
        defer { kill(callee, SIGKILL); var status: Int32 = 0; waitpid(callee, &status, 0) }
        _ = try await Self.waitFor(calleeLog, "baresip is ready")
        let calleeIdle = try await Self.idleMemory(callee)
        let caller = try Self.spawn(executable, ["-f", directory + "/caller", "-t", String(window + 6 + furtherCallsSeconds),
                                                 "-e", "/dial sip:callee@127.0.0.1:\(ports.callee)"], output: callerLog)
        defer { kill(caller, SIGKILL); var status: Int32 = 0; waitpid(caller, &status, 0) }
        _ = try await Self.waitFor(callerLog, "Call established")
        _ = try await Self.waitFor(calleeLog, "Call established")
        _ = try await Self.waitFor(calleeLog, "SRTP is Enabled")
        var further: [pid_t] = []
        defer { for pid in further { kill(pid, SIGKILL); var status: Int32 = 0; waitpid(pid, &status, 0) } }
        return try await window(caller: caller, callee: callee, calleeIdle: calleeIdle, ticksPerSecond: ticksPerSecond) {
            for k in 0..<furtherCalls {
                let side = "caller\(k + 2)", port = 25_170 + 8 * run + 2 * k
                try Self.writeBaresipHome(directory, side: side, port: port, complexity: complexity, audio: audio, modules: modules)
                further.append(try Self.spawn(executable, ["-f", directory + "/" + side, "-t", String(furtherCallsSeconds),
                                                           "-e", "/dial sip:callee@127.0.0.1:\(ports.callee)"], output: directory + "/\(side).log"))
                try await Self.waitFor(calleeLog, "Call established", count: 2 + k)
            }
        }
    }

    /// How long the first call outlasts its window for the further calls, and how long they last.
    var furtherCallsSeconds: Int { furtherCalls > 0 ? 12 : 0 }

    /// A baresip home for the callee and the caller (`DIR/callee`, `DIR/caller`): SIP straight
    /// to 127.0.0.1 on the given ports, Opus 48 kHz mono at 40 kbit/s and `complexity`, 20 ms,
    /// SRTP (SDES) mandatory, the callee answering by itself; `audio` lines and their modules
    /// say where sound comes from and goes.
    static func writeBaresipHomes(_ directory: String, ports: (callee: Int, caller: Int), complexity: Int,
                                  audio: [String], modules: [String], jitter: String = "5-10") throws {
        for (side, port) in [("callee", ports.callee), ("caller", ports.caller)] {
            try writeBaresipHome(directory, side: side, port: port, complexity: complexity, audio: audio, modules: modules, jitter: jitter)
        }
    }

    /// One of ``writeBaresipHomes(_:ports:complexity:audio:modules:jitter:)``'s homes, `DIR/side`
    /// (`callee` answers by itself; any other side calls).
    static func writeBaresipHome(_ directory: String, side: String, port: Int, complexity: Int,
                                 audio: [String], modules: [String], jitter: String = "5-10") throws {
        try FileManager.default.createDirectory(atPath: directory + "/" + side, withIntermediateDirectories: true)
        let lines = ["poll_method epoll", "sip_listen 127.0.0.1:\(port)", "net_interface 127.0.0.1"] + audio + [
            "ausrc_srate 48000", "auplay_srate 48000", "ausrc_channels 1", "auplay_channels 1", "rtcp_mux yes",
            "jitter_buffer_delay \(jitter)", "module_path /usr/lib/baresip/modules", "module opus.so",
        ] + modules.map { "module \($0)" } + [
            "module srtp.so", "module_tmp account.so", "module_app menu.so", "statmode_default off", "ringback_disabled yes",
            "opus_bitrate 40000", "opus_complexity \(complexity)", "opus_stereo no", "opus_sprop_stereo no",
            "opus_application voip", "opus_inbandfec no", "opus_dtx no",
        ]
        try (lines.joined(separator: "\n") + "\n").write(toFile: directory + "/\(side)/config", atomically: true, encoding: .utf8)
        let answer = side == "callee" ? ";answermode=auto" : ""
        try "<sip:\(side)@127.0.0.1:\(port)>;regint=0\(answer);ptime=20;mediaenc=srtp-mand\n"
            .write(toFile: directory + "/\(side)/accounts", atomically: true, encoding: .utf8)
    }

    /// A settling second, then both processes measured over the window; then, with
    /// `placeFurtherCalls` (which returns once the callee has them all, placed one after
    /// another), the callee's memory with ``furtherCalls`` calls more, after a settling second.
    func window(caller: pid_t, callee: pid_t, calleeIdle: Memory, ticksPerSecond: Double,
                placeFurtherCalls: (() async throws -> Void)? = nil) async throws -> (Side, Side) {
        try await Task.sleep(for: .seconds(1))
        let before = (try Self.sample(caller), try Self.sample(callee))
        let started = ContinuousClock.now
        try await Task.sleep(for: .seconds(window))
        let after = (try Self.sample(caller), try Self.sample(callee))
        let elapsed = Self.seconds(ContinuousClock.now - started)
        func side(_ a: Sample, _ b: Sample, _ pid: pid_t) throws -> Side {
            Side(cpuPerCallSecond: Double(b.cpuTicks - a.cpuTicks) / ticksPerSecond / elapsed,
                 switchesPerSecond: Double(b.contextSwitches - a.contextSwitches) / elapsed,
                 residentMiB: Double(b.residentKiB) / 1024, memory: try Self.memory(pid))
        }
        var calleeSide = try side(before.1, after.1, callee)
        calleeSide.idle = calleeIdle
        let callerSide = try side(before.0, after.0, caller)
        if furtherCalls > 0, let placeFurtherCalls {
            try await placeFurtherCalls()
            try await Task.sleep(for: .seconds(1))
            calleeSide.withFurtherCalls = (try Self.memory(callee), furtherCalls)
        }
        return (callerSide, calleeSide)
    }

    /// `pid`'s memory from /proc/PID/smaps_rollup.
    static func memory(_ pid: pid_t) throws -> Memory {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/smaps_rollup", encoding: .utf8) else {
            throw ValidationError("process \(pid) is gone")
        }
        var fields: [Substring: Int] = [:]
        for line in text.split(separator: "\n") {
            let parts = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            if parts.count >= 2, parts[0].hasSuffix(":"), let value = Int(parts[1]) { fields[parts[0].dropLast()] = value }
        }
        return Memory(rss: fields["Rss"] ?? 0, pss: fields["Pss"] ?? 0, anonymous: fields["Anonymous"] ?? 0, pssFile: fields["Pss_File"] ?? 0,
                      privateClean: fields["Private_Clean"] ?? 0, privateDirty: fields["Private_Dirty"] ?? 0)
    }

    /// The callee's memory once it has been idle (ready for calls, none yet) for a second.
    static func idleMemory(_ pid: pid_t) async throws -> Memory {
        try await Task.sleep(for: .seconds(1))
        return try memory(pid)
    }

    /// One call: returns the caller's and the callee's figures over the window.
    func measure(_ executable: String, extra: [String], ticksPerSecond: Double, run: Int) async throws -> (Side, Side) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("callnode-process-\(getpid())-\(run)").path
        try? FileManager.default.removeItem(atPath: directory)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let speech = directory + "/speech.wav"
        try WAV.write(SyntheticSpeech.samples(seconds: 6, seed: 3), format: AudioFormat(), path: speech)
        let calleeIdentity = try NodeIdentity.loadOrCreate(home: directory + "/callee").identity.fingerprint.hex
        let common = ["--bind", "127.0.0.1", "--input", "wav:" + speech, "--output", "null", "--json", "--accept-unknown"] + extra
            + ["--opus-complexity", String(complexity), "--no-complexity-follows-load"]  // baresip's is fixed too
        let calleeLog = directory + "/callee.log", callerLog = directory + "/caller.log"
        let callee = try Self.spawn(executable, ["listen", "--home", directory + "/callee", "--listen", "127.0.0.1:0", "--auto-answer",
                                                 "--calls", String(1 + furtherCalls), "--max-calls", String(1 + furtherCalls)] + common,
                                    output: calleeLog)  // (CallKit's default of two call groups would refuse a third caller)
        defer { kill(callee, SIGKILL); var status: Int32 = 0; waitpid(callee, &status, 0) }
        let listening = try await Self.waitFor(calleeLog, "\"listening\"")
        guard let address = (try? JSONSerialization.jsonObject(with: Data(listening.utf8)) as? [String: Any])?["address"] as? String else {
            throw ValidationError("no listening address in \(calleeLog)")
        }
        let calleeIdle = try await Self.idleMemory(callee)
        let caller = try Self.spawn(executable, ["call", "\(calleeIdentity)@\(address)", "--home", directory + "/caller",
                                                 "--duration", String(window + 4 + furtherCallsSeconds)] + common, output: callerLog)
        defer { kill(caller, SIGKILL); var status: Int32 = 0; waitpid(caller, &status, 0) }
        _ = try await Self.waitFor(callerLog, "\"first-audio\"")
        _ = try await Self.waitFor(calleeLog, "\"first-audio\"")
        var further: [pid_t] = []
        defer { for pid in further { kill(pid, SIGKILL); var status: Int32 = 0; waitpid(pid, &status, 0) } }
        return try await window(caller: caller, callee: callee, calleeIdle: calleeIdle, ticksPerSecond: ticksPerSecond) {
            for k in 0..<furtherCalls {
                further.append(try Self.spawn(executable, ["call", "\(calleeIdentity)@\(address)", "--home", directory + "/caller\(k + 2)",
                                                           "--duration", String(furtherCallsSeconds)] + common, output: directory + "/caller\(k + 2).log"))
                // One after another: a call that comes while another still rings is refused as busy.
                try await Self.waitFor(calleeLog, "\"first-audio\"", count: 2 + k)
            }
        }
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// utime + stime (clock ticks) from /proc/PID/stat, context switches and VmRSS from /proc/PID/status.
    static func sample(_ pid: pid_t) throws -> Sample {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { throw ValidationError("process \(pid) is gone") }
        // Fields after the command name: state is field 3; utime and stime are 14 and 15.
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Int(fields[11]), let system = Int(fields[12]) else { throw ValidationError("cannot read /proc/\(pid)/stat") }
        func value(_ name: String) -> Int {
            status.split(separator: "\n").first { $0.hasPrefix(name + ":") }
                .flatMap { Int($0.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first ?? "") } ?? 0
        }
        // Context switches are counted per thread: sum the process's threads.
        var switches = 0
        for task in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? [] {
            guard let text = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/status", encoding: .utf8) else { continue }
            for line in text.split(separator: "\n") where line.hasPrefix("voluntary_ctxt_switches:") || line.hasPrefix("nonvoluntary_ctxt_switches:") {
                switches += Int(line.split(whereSeparator: { $0 == " " || $0 == "\t" }).last ?? "") ?? 0
            }
        }
        return Sample(cpuTicks: user + system, contextSwitches: switches, residentKiB: value("VmRSS"))
    }

    /// Starts `path` with stdout and stderr into `output`, stdin from /dev/null, and this
    /// process's environment with `environment` laid over it.
    static func spawn(_ path: String, _ arguments: [String], output: String, environment: [String: String] = [:]) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
        defer { for arg in argv { free(arg) } }
        var variables = ProcessInfo.processInfo.environment
        variables.merge(environment) { $1 }
        let envp: [UnsafeMutablePointer<CChar>?] = variables.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for variable in envp { free(variable) } }
        // The child starts with no signal blocked and the usual dispositions (this process's
        // runtime blocks some), so SIGTERM and SIGINT stop it.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t(), defaults = sigset_t()
        sigemptyset(&none)
        sigemptyset(&defaults)
        for signal in [SIGINT, SIGTERM, SIGPIPE, SIGCHLD] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        var pid: pid_t = 0
        guard posix_spawn(&pid, path, &actions, &attributes, argv, envp) == 0 else { throw ValidationError("cannot start \(path)") }
        return pid
    }

    /// Waits for `pid` to exit (polling, so no thread blocks), killing it past `limit`.
    static func waitForExit(_ pid: pid_t, limit: Duration) async throws {
        let deadline = ContinuousClock.now + limit
        var status: Int32 = 0
        while waitpid(pid, &status, WNOHANG) == 0 {
            guard ContinuousClock.now < deadline else {
                kill(pid, SIGKILL)
                waitpid(pid, &status, 0)
                throw ValidationError("process \(pid) did not finish within \(limit)")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
    }

    /// The first line of `path` containing `text` (once `count` lines do), waiting up to 20 s.
    @discardableResult
    static func waitFor(_ path: String, _ text: String, count: Int = 1) async throws -> String {
        for _ in 0..<200 {
            let content = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            let lines = content.split(separator: "\n").filter { $0.contains(text) }
            if lines.count >= count, let line = lines.first { return String(line) }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw ValidationError("\(path) never said \(text):\n" + ((try? String(contentsOfFile: path, encoding: .utf8)) ?? ""))
    }
}
