import CallNode
import CallNodeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A node as a service for several callers at once, as real processes: per-call recordings.
extension RealTimeTests {
@Suite struct ServiceTests {
    @Test func twoCallersAtOnceLeaveTwoRecordingsEachWithOnlyItsCaller() async throws {
        let directory = "/tmp/callnode-service-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let homes = ["alice", "bob", "carol"].reduce(into: [String: String]()) { $0[$1] = directory + "/" + $1 }
        var fingerprints: [String: Fingerprint] = [:]
        for (name, home) in homes {
            let id = try CommandLineTests.run(["identity", "--home", home], log: directory + "/id-\(name).log")
            let fingerprint = try #require(id.output.split(separator: "\n").compactMap { Fingerprint(String($0)) }.first)
            fingerprints[name] = fingerprint
        }
        for caller in ["alice", "carol"] {
            _ = try CommandLineTests.run(["contacts", "add", caller, fingerprints[caller]!.hex, "--home", homes["bob"]!], log: directory + "/c-\(caller).log")
        }
        let messages = directory + "/messages/"
        let bobLog = directory + "/bob.log"
        let bob = try ChildProcess(try BuildProducts.executable("callnode"), [
            "listen", "--home", homes["bob"]!, "--signal", "127.0.0.1:0", "--bind", "127.0.0.1", "--auto-answer",
            "--input", "tone:660", "--output", "wav:" + messages, "--calls", "2", "--json",
        ], output: bobLog)
        defer { bob.stop() }
        let listening = try await CommandLineTests.waitForLine(in: bobLog, process: bob) { $0.contains("\"listening\"") }
        let address = try #require(CommandLineTests.jsonLines(listening).first?["address"] as? String)

        // Alice calls for 6 s; Carol calls 2 s later for 6 s: 4 s of overlap.
        func dial(_ name: String, tone: Int) throws -> ChildProcess {
            try ChildProcess(try BuildProducts.executable("callnode"), [
                "call", "\(fingerprints["bob"]!.hex)@\(address)", "--home", homes[name]!, "--bind", "127.0.0.1",
                "--input", "tone:\(tone)", "--output", "wav:\(directory)/\(name)-heard.wav", "--duration", "6", "--json",
            ], output: "\(directory)/\(name).log")
        }
        let alice = try dial("alice", tone: 440)
        defer { alice.stop() }
        _ = try await CommandLineTests.waitForLine(in: directory + "/alice.log", process: alice) { $0.contains("\"connected\"") }
        try await Task.sleep(for: .seconds(2))
        let carol = try dial("carol", tone: 880)
        defer { carol.stop() }
        #expect(alice.wait() == 0, "alice:\n\((try? String(contentsOfFile: directory + "/alice.log", encoding: .utf8)) ?? "")")
        #expect(carol.wait() == 0, "carol:\n\((try? String(contentsOfFile: directory + "/carol.log", encoding: .utf8)) ?? "")")
        #expect(bob.wait() == 0, "bob:\n\((try? String(contentsOfFile: bobLog, encoding: .utf8)) ?? "")")

        // Two files, each with its caller only, each as long as its call.
        let files = try FileManager.default.contentsOfDirectory(atPath: messages).filter { $0.hasSuffix(".wav") }.sorted()
        #expect(files.count == 2, "\(files)")
        for (caller, tone, other) in [("alice", 440.0, 880.0), ("carol", 880.0, 440.0)] {
            let name = try #require(files.first { $0.contains("_\(caller)_in_") }, "no recording named for \(caller) in \(files)")
            let samples = try WAV.read(path: messages + name).samples
            let seconds = Double(samples.count) / 48_000
            #expect(seconds > 5.5 && seconds < 7, "\(caller)'s recording is \(seconds) s for a 6 s call")
            let frames = PauseTests.toneFrames(samples, frequency: tone)
            let others = PauseTests.toneFrames(samples, frequency: other)
            #expect(frames.filter { $0 }.count >= frames.count - 20, "\(caller)'s recording: \(frames.filter { !$0 }.count) frames without \(caller)")
            #expect(others.filter { $0 }.isEmpty, "\(caller)'s recording holds the other caller")
        }
        // Both callers heard Bob without a gap, through the overlap too.
        for caller in ["alice", "carol"] {
            let frames = PauseTests.toneFrames(try WAV.read(path: "\(directory)/\(caller)-heard.wav").samples, frequency: 660)
            let gap = PauseTests.longestGap(frames)
            #expect(gap.length <= 3, "\(caller) heard nothing from Bob for \(gap.length * 20) ms")
            #expect(frames.filter { $0 }.count >= 250, "\(caller) heard Bob in \(frames.filter { $0 }.count) frames")
        }
        // Recents name each call's recording.
        let recents = try CommandLineTests.run(["recents", "--home", homes["bob"]!], log: directory + "/recents.log")
        for file in files { #expect(recents.output.contains(messages + file), "\(recents.output)") }
    }
}
}
