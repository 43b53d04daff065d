import CallNode
import CallNodeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A node as a service for several callers at once, as real processes: per-call recordings.
extension RealTimeTests {
@Suite(.serialized) struct ServiceTests {
    @Test func twoCallersAtOnceLeaveTwoRecordingsEachWithOnlyItsCaller() async throws {
        let directory = "/tmp/callnode-service-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let homes = ["alice", "bob", "carol"].reduce(into: [String: String]()) { $0[$1] = directory + "/" + $1 }
        var fingerprints: [String: Fingerprint] = [:]
        for (name, home) in homes {
            let id = try await CommandLineTests.run(["identity", "--home", home], log: directory + "/id-\(name).log")
            let fingerprint = try #require(id.output.split(separator: "\n").compactMap { Fingerprint(String($0)) }.first)
            fingerprints[name] = fingerprint
        }
        for caller in ["alice", "carol"] {
            _ = try await CommandLineTests.run(["contacts", "add", caller, fingerprints[caller]!.hex, "--home", homes["bob"]!], log: directory + "/c-\(caller).log")
        }
        let messages = directory + "/messages/"
        let bobLog = directory + "/bob.log"
        let bob = try ChildProcess(try BuildProducts.executable("callnode"), [
            "listen", "--home", homes["bob"]!, "--listen", "127.0.0.1:0", "--bind", "127.0.0.1", "--auto-answer",
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
        #expect(await alice.wait() == 0, "alice:\n\((try? String(contentsOfFile: directory + "/alice.log", encoding: .utf8)) ?? "")")
        #expect(await carol.wait() == 0, "carol:\n\((try? String(contentsOfFile: directory + "/carol.log", encoding: .utf8)) ?? "")")
        #expect(await bob.wait() == 0, "bob:\n\((try? String(contentsOfFile: bobLog, encoding: .utf8)) ?? "")")

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
        let recents = try await CommandLineTests.run(["recents", "--home", homes["bob"]!], log: directory + "/recents.log")
        for file in files { #expect(recents.output.contains(messages + file), "\(recents.output)") }
    }
}
}

extension RealTimeTests.ServiceTests {
    /// The voicemail example, run as a process: two callers at once each hear the greeting and
    /// the beep, and leave a message of their own, as long as allowed; the service hangs up.
    @Test func voicemailTakesAMessageFromEachOfTwoCallersAtOnce() async throws {
        let directory = "/tmp/callnode-voicemail-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { if ProcessInfo.processInfo.environment["KEEP"] == nil { try? FileManager.default.removeItem(atPath: directory) } }
        let messages = directory + "/messages/", log = directory + "/service.log"
        let service = try ChildProcess(try BuildProducts.executable("answering-service"), [
            "--listen", "127.0.0.1:0", "--bind", "127.0.0.1", "--messages", messages, "--max-seconds", "3", "--home", directory + "/service",
        ], output: log)
        defer { service.stop() }
        let listening = try await RealTimeTests.CommandLineTests.waitForLine(in: log, process: service) { $0.hasPrefix("voicemail on ") }
        let address = String(listening.dropFirst("voicemail on ".count).prefix { $0 != "," })

        func dial(_ name: String, tone: Int) throws -> ChildProcess {
            try ChildProcess(try BuildProducts.executable("callnode"), [
                "call", address, "--home", "\(directory)/\(name)", "--bind", "127.0.0.1", "--input", "tone:\(tone)",
                "--output", "wav:\(directory)/\(name)-heard.wav", "--duration", "20", "--json",
            ], output: "\(directory)/\(name).log")
        }
        let alice = try dial("alice", tone: 440), carol = try dial("carol", tone: 880)
        defer { alice.stop(); carol.stop() }
        // The service hangs up after the prompt (~2.6 s) and the 3 s message.
        let (aliceStatus, carolStatus) = (await alice.wait(), await carol.wait())
        #expect(aliceStatus == 0 && carolStatus == 0, "\((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
        service.stop()

        let files = try FileManager.default.contentsOfDirectory(atPath: messages).filter { $0.hasSuffix(".wav") }
        #expect(files.count == 2, "\(files)")
        var callers: Set<Double> = []
        for file in files {
            let samples = try WAV.read(path: messages + file).samples
            let seconds = Double(samples.count) / 48_000
            #expect(seconds > 2.8 && seconds <= 3.0, "\(file) is \(seconds) s; messages are cut at 3 s")
            let tones = [440.0, 880.0].filter { tone in RealTimeTests.PauseTests.toneFrames(samples, frequency: tone).filter { $0 }.count > 100 }
            #expect(tones.count == 1, "\(file) holds \(tones) (one caller each)")
            callers.formUnion(tones)
        }
        #expect(callers == [440, 880])
        for name in ["alice", "carol"] {
            let heard = try WAV.read(path: "\(directory)/\(name)-heard.wav").samples
            let beep = RealTimeTests.PauseTests.toneFrames(heard, frequency: 1_000).filter { $0 }.count
            #expect(beep >= 15, "\(name) heard the beep in \(beep) frames")
        }
        let recents = try await RealTimeTests.CommandLineTests.run(["recents", "--home", directory + "/service"], log: directory + "/recents.log")
        for file in files { #expect(recents.output.contains(messages + file), "\(recents.output)") }
    }
}
