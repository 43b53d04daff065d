import CallNode
import CallNodeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A node whose process is paused mid-call (SIGSTOP then SIGCONT, as a busy host, a VM's steal or
/// a debugger does) carries audio again both ways as soon as it runs: two `callnode` processes
/// on loopback, each sending its own tone and recording what it hears. It judges how soon audio
/// is back (within 100 ms of the pause's end), so it runs with no other real-time suite beside
/// it: with one, recovery once took 140 ms.
extension RealTimeTests {
@Suite(.serialized, .realTimeAlone) struct PauseTests {
    /// Per 20 ms frame of `samples`: whether it is the tone at `frequency` (most of its energy
    /// there, and loud enough to hear).
    static func toneFrames(_ samples: [Int16], frequency: Double) -> [Bool] {
        let n = 960
        let coefficient = 2 * cos(2 * Double.pi * frequency / 48_000)
        return stride(from: 0, to: samples.count - n + 1, by: n).map { start in
            var s1 = 0.0, s2 = 0.0, energy = 0.0
            for i in start..<(start + n) {
                let x = Double(samples[i])
                let s0 = x + coefficient * s1 - s2
                s2 = s1
                s1 = s0
                energy += x * x
            }
            let power = s1 * s1 + s2 * s2 - coefficient * s1 * s2  // |X(f)|², ≈ energy · n / 2 for a pure tone
            let level = 10 * log10(max(1e-9, energy / Double(n)) / (32_768 * 32_768))
            return level > -35 && power / max(1, energy * Double(n) / 2) > 0.5
        }
    }

    /// The longest run of frames that are not the tone, between the first and the last tone
    /// frame, and the index where it starts.
    static func longestGap(_ frames: [Bool]) -> (start: Int, length: Int) {
        guard let first = frames.firstIndex(of: true), let last = frames.lastIndex(of: true) else { return (0, frames.count) }
        var best = (start: first, length: 0)
        var runStart: Int?
        for i in first...last {
            if frames[i] {
                if let s = runStart, i - s > best.length { best = (s, i - s) }
                runStart = nil
            } else if runStart == nil {
                runStart = i
            }
        }
        return best
    }

    @Test(arguments: [1_000, 5_000])
    func aPausedCalleeCarriesAudioBothWaysAgainAsSoonAsItRuns(milliseconds pause: Int) async throws {
        let directory = "/tmp/callnode-pause-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let aliceHome = directory + "/alice", bobHome = directory + "/bob"
        let bobID = try await CommandLineTests.run(["identity", "--home", bobHome], log: directory + "/id-bob.log")
        let bobFingerprint = try #require(bobID.output.split(separator: "\n").compactMap { Fingerprint(String($0)) }.first)
        let aliceHeard = directory + "/alice-heard.wav", bobHeard = directory + "/bob-heard.wav"

        let bobLog = directory + "/bob.log"
        let bob = try ChildProcess(try BuildProducts.executable("callnode"), [
            "listen", "--home", bobHome, "--listen", "127.0.0.1:0", "--bind", "127.0.0.1", "--auto-answer",
            "--accept-unknown", "--input", "tone:600", "--output", "wav:" + bobHeard, "--duration", "60", "--calls", "1", "--json",
        ], output: bobLog)
        defer { bob.stop() }
        let listening = try await CommandLineTests.waitForLine(in: bobLog, process: bob) { $0.contains("\"listening\"") }
        let address = try #require(CommandLineTests.jsonLines(listening).first?["address"] as? String)

        let aliceLog = directory + "/alice.log"
        let callSeconds = 6 + pause / 1_000
        let alice = try ChildProcess(try BuildProducts.executable("callnode"), [
            "call", "\(bobFingerprint.hex)@\(address)", "--home", aliceHome, "--bind", "127.0.0.1",
            "--input", "tone:1000", "--output", "wav:" + aliceHeard, "--duration", String(callSeconds), "--json",
        ], output: aliceLog)
        defer { alice.stop() }
        _ = try await CommandLineTests.waitForLine(in: aliceLog, process: alice) { $0.contains("\"first-audio\"") }
        try await Task.sleep(for: .seconds(2))
        let paused = Date().timeIntervalSince1970
        let stopped = ContinuousClock.now
        kill(bob.pid, SIGSTOP)
        try await Task.sleep(for: .milliseconds(pause))
        kill(bob.pid, SIGCONT)
        // The pause Bob had: the test's own wake-up may come late on a busy machine, and the
        // node is judged against the pause it got, not the one asked for.
        let pausedFor = ContinuousClock.now - stopped
        let actual = Int(pausedFor.components.seconds * 1_000 + pausedFor.components.attoseconds / 1_000_000_000_000_000)

        #expect(await alice.wait() == 0, "alice:\n\((try? String(contentsOfFile: aliceLog, encoding: .utf8)) ?? "")")
        #expect(await bob.wait() == 0, "bob:\n\((try? String(contentsOfFile: bobLog, encoding: .utf8)) ?? "")")
        let pauseFrames = actual / 20
        for (name, path, frequency) in [("bob", bobHeard, 1_000.0), ("alice", aliceHeard, 600.0)] {
            let frames = Self.toneFrames(try WAV.read(path: path).samples, frequency: frequency)
            let gap = Self.longestGap(frames)
            let after = frames[min(frames.count, gap.start + gap.length)...]
            // Back within 160 ms (eight frames) of the end of the pause, and on from there as
            // before it: nothing but the pause is missing. (A stopped process's threads wait
            // their turn when it runs again: 60 to 80 ms on a loaded host with two cores.)
            #expect(gap.length <= pauseFrames + 8, "\(name) heard nothing for \(gap.length * 20) ms (pause \(actual) ms)")
            #expect(gap.length >= pauseFrames / 2, "\(name)'s recording shows no pause at all: \(gap.length) frames")
            // (A loaded machine may glitch a frame or two anywhere in a real-time call.)
            #expect(after.count >= 50 && after.filter { !$0 }.count <= 5,
                    "\(name): \(after.filter { !$0 }.count) frames without the tone in the \(after.count) after the pause")
            #expect(frames.filter { !$0 }.count <= pauseFrames + 25, "\(name): \(frames.filter { !$0 }.count) frames without the tone")
            print("pause \(pause) ms (\(actual) ms as sent): \(name) heard nothing for \(gap.length * 20) ms; \(after.count) frames after it")
        }
        let bobEvents = CommandLineTests.jsonLines((try? String(contentsOfFile: bobLog, encoding: .utf8)) ?? "")
        // The first reset after the pause: what the pause did, whatever a call's start did.
        let reset = bobEvents.first { $0["event"] as? String == "playout-reset" && ($0["time"] as? Double ?? 0) >= paused }
        #expect(reset?["reason"] as? String == "stall", "bob's events: \(bobEvents.compactMap { $0["event"] as? String })")
        #expect(abs((reset?["jump_ms"] as? Double ?? 0) - Double(actual)) <= 100, "paused \(actual) ms: \(String(describing: reset))")
    }
}
}
