import CallNode
import CallNodeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A sound device that goes away mid-call, as real processes: Bob plays the call to a
/// PulseAudio null sink (through ALSA's `pulse` PCM) that is unloaded while the call runs.
extension RealTimeTests {
@Suite(.serialized) struct DeviceLossTests {
    /// Two PulseAudio servers, each with one null sink: ALSA PCMs `callsink` (the first) and
    /// `fallbacksink` (the second; a sink on its own server, so that PulseAudio cannot move the
    /// stream there by itself as it does between sinks of one server).
    final class Devices {
        let directory: String
        let main: PulseAudioServer
        let spare: PulseAudioServer
        let alsaConfig: String

        init(_ directory: String) throws {
            self.directory = directory
            main = try PulseAudioServer(name: "-main-\(UUID().uuidString.prefix(6))")
            spare = try PulseAudioServer(name: "-spare-\(UUID().uuidString.prefix(6))")
            alsaConfig = directory + "/asound.conf"
            try """
                pcm.callsink { type pulse server "unix:\(main.socket)" device "\(main.sink)" }
                pcm.fallbacksink { type pulse server "unix:\(spare.socket)" device "\(spare.sink)" }

                """.write(toFile: alsaConfig, atomically: true, encoding: .utf8)
        }

        /// `callnode ARGUMENTS` with these PCMs in its ALSA configuration.
        func callnode(_ arguments: [String], log: String) throws -> ChildProcess {
            try ChildProcess("/usr/bin/env", ["ALSA_CONFIG_PATH=/usr/share/alsa/alsa.conf:\(alsaConfig)",
                                              try BuildProducts.executable("callnode")] + arguments, output: log)
        }

        /// Removes the main server's sink (a USB headset unplugged, in effect).
        func unplug() async throws {
            let status = try await ChildProcess.running("/usr/bin/env", ["PULSE_SERVER=unix:\(main.socket)", "pactl", "unload-module", "module-null-sink"],
                                              output: directory + "/pactl.log")
            guard status == 0 else { throw TestFailure("pactl unload-module failed: \((try? String(contentsOfFile: directory + "/pactl.log", encoding: .utf8)) ?? "")") }
        }

        /// Records what the spare sink plays, from now until `stop()`.
        func recordSpare(to path: String) throws -> ChildProcess {
            // Raw samples: a WAV header would only be finished on a clean exit. A latency of
            // 20 ms: without one the server may hand parec its audio in fragments of up to two
            // seconds, and what it holds when parec is stopped is lost (a recording 1.5 s short).
            try ChildProcess("/usr/bin/env", ["PULSE_SERVER=unix:\(spare.socket)", "parec", "-d", "\(spare.sink).monitor",
                                              "--rate=48000", "--channels=1", "--format=s16le", "--latency-msec=20", path])
        }

        func stop() {
            main.stop()
            spare.stop()
        }
    }

    /// Bob listens, answering and playing to `callsink` (with `extra` options); Alice calls him
    /// with a 440 Hz tone for `seconds`. Returns Bob, Alice and their logs.
    static func call(_ devices: Devices, bobOptions extra: [String], seconds: Int) async throws
        -> (bob: ChildProcess, bobLog: String, alice: ChildProcess, aliceLog: String) {
        let directory = devices.directory
        var fingerprints: [String: String] = [:]
        for name in ["alice", "bob"] {
            let id = try await CommandLineTests.run(["identity", "--home", directory + "/" + name], log: directory + "/id-\(name).log")
            fingerprints[name] = try #require(id.output.split(separator: "\n").compactMap { Fingerprint(String($0)) }.first).hex
        }
        _ = try await CommandLineTests.run(["contacts", "add", "alice", fingerprints["alice"]!, "--home", directory + "/bob"], log: directory + "/c.log")
        let bobLog = directory + "/bob.log", aliceLog = directory + "/alice.log"
        let bob = try devices.callnode(["listen", "--home", directory + "/bob", "--listen", "127.0.0.1:0", "--bind", "127.0.0.1",
                                        "--auto-answer", "--input", "tone:660", "--output", "alsa:callsink", "--calls", "1", "--json"] + extra,
                                       log: bobLog)
        let listening = try await CommandLineTests.waitForLine(in: bobLog, process: bob) { $0.contains("\"listening\"") }
        let address = try #require(CommandLineTests.jsonLines(listening).first?["address"] as? String)
        let alice = try ChildProcess(try BuildProducts.executable("callnode"), [
            "call", "\(fingerprints["bob"]!)@\(address)", "--home", directory + "/alice", "--bind", "127.0.0.1",
            "--input", "tone:440", "--duration", String(seconds), "--json",
        ], output: aliceLog)
        _ = try await CommandLineTests.waitForLine(in: bobLog, process: bob) { $0.contains("\"first-audio\"") }
        return (bob, bobLog, alice, aliceLog)
    }

    static func events(_ path: String, _ name: String) -> [[String: Any]] {
        CommandLineTests.jsonLines((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").filter { $0["event"] as? String == name }
    }

    @Test func anUnpluggedOutputFallsBackAndTheCallGoesOnThere() async throws {
        let directory = "/tmp/callnode-devloss-\(getpid())-\(UUID().uuidString.prefix(6))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let devices = try Devices(directory)
        defer { devices.stop() }
        let run = try await Self.call(devices, bobOptions: ["--fallback-output", "alsa:fallbacksink"], seconds: 11)
        defer { run.bob.stop(); run.alice.stop() }
        try await Task.sleep(for: .seconds(1))

        let recording = directory + "/fallback.raw"
        let recorder = try devices.recordSpare(to: recording)
        let unpluggedAt = Date().timeIntervalSince1970
        try await devices.unplug()
        let change = try await CommandLineTests.waitForLine(in: run.bobLog, process: run.bob) { $0.contains("\"route-change\"") }
        let event = try #require(CommandLineTests.jsonLines(change).first)
        #expect(event["reason"] as? String == "old-device-unavailable")
        #expect(event["device"] as? String == "alsa:callsink")
        #expect(event["output"] as? String == "alsa:fallbacksink")
        let after = (event["time"] as? Double ?? .infinity) - unpluggedAt
        #expect(after < 1, "the route changed \(after) s after the sink went")
        // About three seconds of the fallback: until the recording holds 130 frames (48 kHz
        // mono, 16 bits), or seven seconds on a loaded machine that starts the recorder late
        // (the call lasts long enough for either).
        let enough = 130 * 960 * 2, recordingDeadline = ContinuousClock.now + .seconds(7)
        while ContinuousClock.now < recordingDeadline {
            try await Task.sleep(for: .milliseconds(100))
            let size = (try? FileManager.default.attributesOfItem(atPath: recording)[.size] as? Int) ?? 0
            if size >= enough { break }
        }
        recorder.stop(grace: .milliseconds(200))

        #expect(await run.alice.wait() == 0)
        #expect(await run.bob.wait() == 0, "\((try? String(contentsOfFile: run.bobLog, encoding: .utf8)) ?? "")")
        #expect(Self.events(run.bobLog, "ended").first?["reason"] as? String == "remoteEnded", "the call went on to its end")
        #expect(Self.events(run.bobLog, "audio-device-failed").isEmpty)
        // The fallback plays Alice: her tone, in (nearly) every frame of the 3 s recorded.
        let bytes = try Data(contentsOf: URL(fileURLWithPath: recording))
        let samples = stride(from: 0, to: bytes.count - 1, by: 2).map { Int16(bitPattern: UInt16(bytes[$0]) | UInt16(bytes[$0 + 1]) << 8) }
        let frames = PauseTests.toneFrames(samples, frequency: 440)
        #expect(frames.count >= 120, "recorded \(frames.count) frames on the fallback")
        #expect(frames.filter { $0 }.count >= frames.count - 10, "\(frames.filter { !$0 }.count) of \(frames.count) frames without Alice")
        print("device loss: route changed \(String(format: "%.2f", after)) s after the sink was unloaded; the fallback played Alice in \(frames.filter { $0 }.count) of \(frames.count) frames")
    }

    @Test func anUnpluggedOutputWithNoFallbackEndsTheCallNamingTheDevice() async throws {
        let directory = "/tmp/callnode-devloss-\(getpid())-\(UUID().uuidString.prefix(6))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let devices = try Devices(directory)
        defer { devices.stop() }
        let run = try await Self.call(devices, bobOptions: [], seconds: 30)
        defer { run.bob.stop(); run.alice.stop() }
        try await Task.sleep(for: .seconds(1))
        try await devices.unplug()
        let ended = try await CommandLineTests.waitForLine(in: run.bobLog, process: run.bob) { $0.contains("\"ended\"") }
        let event = try #require(CommandLineTests.jsonLines(ended).first)
        #expect(event["reason"] as? String == "failed")
        let detail = event["detail"] as? String ?? ""
        #expect(detail.contains("the audio output 'alsa:callsink' failed") && detail.contains("no other output to fall back to"), "\(detail)")
        #expect(!Self.events(run.bobLog, "audio-device-failed").isEmpty)
        #expect(!Self.events(run.bobLog, "route-change").isEmpty)
        // Alice learns the call ended after a failure on Bob's side.
        _ = await run.alice.wait()
        let aliceEnd = Self.events(run.aliceLog, "ended").first
        #expect(aliceEnd?["reason"] as? String == "remoteEnded", "\(aliceEnd ?? [:])")
        #expect((aliceEnd?["detail"] as? String)?.contains("after a failure on its side") == true, "\(aliceEnd ?? [:])")
        print("device loss without fallback: \(detail)")
    }
}
}
