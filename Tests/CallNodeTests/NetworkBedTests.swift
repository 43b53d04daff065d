import CallNode
import CallNodeTestSupport
import Foundation
import Locking
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The real-network test bed (`scripts/netbed`): hosts A and B each behind its own NAT, a public
/// router between them with coturn (STUN + TURN) and `callnode relay`. Every scenario runs real
/// `callnode` processes inside the namespaces and reads their `--json` events.
enum NetworkBed {
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("scripts/netbed").path
    static let publicAddress = "100.64.0.1"
    static let relay = "\(publicAddress):7700"
    static let stun = "\(publicAddress):3478"
    static let turn = "u:p@\(publicAddress):3478"

    /// Why the bed cannot be built here (printed loudly), or nil.
    static let unavailableReason: String? = {
        let log = "/tmp/callnode-netbed-check-\(getpid()).log"
        defer { unlink(log) }
        let status = (try? ChildProcess.run(script, ["--prefix", "nbchk", "check"], output: log)) ?? -1
        guard status != 0 else { return nil }
        let reason = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
        let text = reason.isEmpty ? "scripts/netbed check failed (status \(status))" : reason
        FileHandle.standardError.write(Data("""

            ************************************************************************
            NetworkBedTests SKIPPED: \(text)
            ************************************************************************

            """.utf8))
        return text
    }()

    static var isAvailable: Bool { unavailableReason == nil }
}

/// One topology for one test: built in `init`, torn down (with every process in it) by `down()`.
/// Its namespaces carry a prefix of their own (`scripts/netbed --prefix`), so tests holding a
/// ``NetworkBedSlotTrait`` slot run their beds side by side.
final class Bed {
    let prefix: String
    let directory: String
    private var processes: [BedProcess] = []

    /// Beds made so far by this process: each gets a prefix of its own, so beds run side by side.
    private static let made = Locked(0)

    /// Builds the bed (`netbed up`, waited for off the cooperative pool: it takes seconds).
    init(_ name: String) async throws {
        let serial = Self.made.withLock { made -> Int in
            made += 1
            return made
        }
        prefix = "n\(getpid() % 10_000)" + String(serial, radix: 36)
        directory = "/tmp/callnode-bed-\(getpid())-\(name)"
        try? FileManager.default.removeItem(atPath: directory)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let status = try await ChildProcess.running(NetworkBed.script, ["--prefix", prefix, "up"], output: directory + "/bed.log")
        guard status == 0 else {
            throw TestFailure("the test bed did not come up:\n" + ((try? String(contentsOfFile: directory + "/bed.log", encoding: .utf8)) ?? ""))
        }
    }

    /// Stops every process and removes the namespaces, on a thread of its own (a `defer`
    /// cannot wait, and stopping takes a second or so); the suite waits for it before it ends.
    /// The logs stay (the next run of the same scenario replaces them), so a failure can be
    /// read afterwards.
    func down() {
        let children = processes.map(\.child), prefix = self.prefix, log = directory + "/bed.log"
        BackgroundTeardown.start(name: "bed-down") {
            for child in children { child.stop(grace: .milliseconds(500)) }
            _ = try? ChildProcess.run(NetworkBed.script, ["--prefix", prefix, "down"], output: log)
        }
    }

    /// `loss PERCENT`, `cut a`, `restore a`…
    func control(_ arguments: [String]) async throws {
        let status = try await ChildProcess.running(NetworkBed.script, ["--prefix", prefix] + arguments, output: directory + "/bed.log")
        guard status == 0 else { throw TestFailure("netbed \(arguments.joined(separator: " ")) failed") }
    }

    /// Starts `callnode ARGUMENTS` inside `host` (a, b or router).
    func start(_ host: String, _ arguments: [String], log: String) throws -> BedProcess {
        let path = directory + "/" + log
        let child = try ChildProcess(NetworkBed.script, ["--prefix", prefix, "exec", host, try BuildProducts.executable("callnode")] + arguments,
                                     output: path)
        let process = BedProcess(child: child, log: path)
        processes.append(process)
        return process
    }

    /// Starts another program (a SIP softphone) inside `host`, stopped with the bed.
    func start(_ host: String, program: String, _ arguments: [String], log: String) throws -> BedProcess {
        let path = directory + "/" + log
        let child = try ChildProcess(NetworkBed.script, ["--prefix", prefix, "exec", host, program] + arguments, output: path,
                                     nullStdin: true)
        let process = BedProcess(child: child, log: path)
        processes.append(process)
        return process
    }

    /// Runs `callnode ARGUMENTS` outside the namespaces (identities, contacts, recents).
    func callnode(_ arguments: [String]) async throws -> (status: Int32, output: String) {
        let log = directory + "/cli-\(UUID().uuidString.prefix(6)).log"
        let status = try await ChildProcess.running(try BuildProducts.executable("callnode"), arguments, output: log)
        return (status, (try? String(contentsOfFile: log, encoding: .utf8)) ?? "")
    }

    /// A home with an identity; returns its fingerprint.
    func identity(_ name: String) async throws -> (home: String, fingerprint: String) {
        let home = directory + "/" + name
        let result = try await callnode(["identity", "--home", home])
        guard result.status == 0, let fingerprint = result.output.split(separator: "\n").compactMap({ Fingerprint(String($0)) }).first else {
            throw TestFailure("identity failed: \(result.output)")
        }
        return (home, fingerprint.hex)
    }

    /// The relay on the router, listening.
    func startRelay() async throws -> BedProcess {
        let relay = try start("router", ["relay", "--listen", NetworkBed.relay], log: "relay.log")
        _ = try await relay.waitForLine(timeout: .seconds(20)) { $0.contains("relay listening") }
        return relay
    }
}

extension String {
    /// The `time` of a `--json` event line (-∞ when it has none).
    var timeValue: Double {
        ((try? JSONSerialization.jsonObject(with: Data(utf8))) as? [String: Any])?["time"] as? Double ?? -.infinity
    }
}

/// A `callnode` process in the bed and its `--json` event log.
struct BedProcess {
    let child: ChildProcess
    let log: String

    var text: String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }

    var events: [[String: Any]] {
        text.split(separator: "\n").compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any] }
    }

    func events(_ name: String) -> [[String: Any]] { events.filter { $0["event"] as? String == name } }

    /// Polls the log until a line satisfies `predicate` (bounded; fails if the process exits first).
    @discardableResult
    func waitForLine(timeout: Duration, _ predicate: (String) -> Bool) async throws -> String {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let current = text
            if let line = current.split(separator: "\n").map(String.init).first(where: predicate) { return line }
            guard child.isRunning else { throw TestFailure("\(log) ended before the line came:\n\(current)") }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw TestFailure("no such line in \(log) within \(timeout):\n\(text)")
    }

    /// Waits for the first event named `name` and returns it.
    @discardableResult
    func waitFor(_ name: String, timeout: Duration = .seconds(30)) async throws -> [String: Any] {
        let line = try await waitForLine(timeout: timeout) { $0.contains("\"event\":\"\(name)\"") }
        guard let event = (try? JSONSerialization.jsonObject(with: Data(line.utf8))) as? [String: Any] else {
            throw TestFailure("unparsable event line: \(line)")
        }
        return event
    }

    /// Waits (bounded, without blocking a thread) for the process to exit; its status.
    func exit(timeout: Duration) async throws -> Int32 {
        let deadline = ContinuousClock.now + timeout
        while child.isRunning {
            guard ContinuousClock.now < deadline else {
                child.stop()
                throw TestFailure("\(log) still ran after \(timeout):\n\(text)")
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        return await child.wait()
    }
}

/// The scenarios that build network test beds: apart from the serialized real-time tests, at
/// most ``NetworkBedSlotTrait/capacity`` beds at a time (their processes are paced by the wall
/// clock on two cores), never beside a test that counts the process's threads and descriptors.
@Suite(.networkBedSlot) enum NetworkBeds {}

extension NetworkBeds {
@Suite(.enabled(if: NetworkBed.isAvailable, "needs root and network namespaces; the reason is printed above"))
struct NetworkBedTests {
    /// Alice on A, Bob on B, each the other's contact; a speech-like WAV for Alice to send.
    struct Callers {
        let alice: (home: String, fingerprint: String)
        let bob: (home: String, fingerprint: String)
        let sent: String
    }

    static func callers(in bed: Bed, bobKnowsAlice: Bool = true) async throws -> Callers {
        let alice = try await bed.identity("alice")
        let bob = try await bed.identity("bob")
        guard try await bed.callnode(["contacts", "add", "bob", bob.fingerprint, "--home", alice.home]).status == 0 else {
            throw TestFailure("contacts add failed")
        }
        if bobKnowsAlice {
            guard try await bed.callnode(["contacts", "add", "alice", alice.fingerprint, "--home", bob.home]).status == 0 else {
                throw TestFailure("contacts add failed")
            }
        }
        let sent = bed.directory + "/sent.wav"
        try WAV.write(SyntheticSpeech.samples(seconds: 3, seed: 11), format: AudioFormat(), path: sent)
        return Callers(alice: alice, bob: bob, sent: sent)
    }

    /// Bob listening on B, registered at the relay, answering at once and recording.
    static func startBob(_ bed: Bed, _ callers: Callers, network: [String], recording: String, log: String) async throws -> BedProcess {
        let bob = try bed.start("b", [
            "listen", "--home", callers.bob.home, "--relay", NetworkBed.relay, "--auto-answer",
            "--input", "silence", "--output", "wav:" + recording, "--duration", "120", "--calls", "1", "--json",
        ] + network, log: log)
        try await bob.waitFor("registered", timeout: .seconds(30))
        return bob
    }

    /// Alice on A calling Bob (by fingerprint, through the relay) for `seconds`.
    static func startAlice(_ bed: Bed, _ callers: Callers, network: [String], seconds: Int, log: String) throws -> BedProcess {
        try bed.start("a", [
            "call", "bob", "--home", callers.alice.home, "--relay", NetworkBed.relay,
            "--input", "wav:" + callers.sent, "--duration", String(seconds), "--json",
        ] + network, log: log)
    }

    /// How well the recording matches what Alice sent over the second around `at` seconds
    /// (default: the middle of the recording); see ``AudioAlignment/piecewise(sent:received:from:to:)``.
    static func correlation(_ callers: Callers, recording: String, at seconds: Double? = nil, span: Double = 1) throws -> Double {
        let heard = try WAV.read(path: recording).samples, sent = try WAV.read(path: callers.sent).samples
        let middle = seconds ?? Double(heard.count) / 48_000 / 2
        return AudioAlignment.piecewise(sent: sent, received: heard, from: Int((middle - span / 2) * 48_000),
                                        to: Int((middle + span / 2) * 48_000))
    }

    static func epoch() -> Double { Date().timeIntervalSince1970 }

    // MARK: - 1. STUN only

    @Test func stunOnlyCallsThroughTheRelayConnectTenOfTenOnServerReflexivePairs() async throws {
        let bed = try await Bed("stun")
        defer { bed.down() }
        let callers = try await Self.callers(in: bed)
        _ = try await bed.startRelay()
        let network = ["--stun", NetworkBed.stun]
        var connected = 0
        var setups: [Double] = [], matches: [Double] = []
        for round in 1...10 {
            let recording = bed.directory + "/recording-\(round).wav"
            let bob = try await Self.startBob(bed, callers, network: network, recording: recording, log: "bob-\(round).log")
            let alice = try Self.startAlice(bed, callers, network: network, seconds: 3, log: "alice-\(round).log")
            let status = try await alice.exit(timeout: .seconds(40))
            _ = try await bob.exit(timeout: .seconds(20))
            guard status == 0, let setup = alice.events("connected").first?["setup_ms"] as? Double else {
                Issue.record("round \(round): the call did not complete (status \(status)):\n\(alice.text)")
                continue
            }
            let pair = try #require(alice.events("selected-pair").last)
            #expect(pair["local_type"] as? String == "srflx", "round \(round): \(pair)")
            #expect(["srflx", "prflx"].contains(pair["remote_type"] as? String ?? ""), "round \(round): \(pair)")
            let match = try Self.correlation(callers, recording: recording)
            let stats = bob.events("stats").last ?? [:]
            #expect(match > 0.7, "round \(round): recording correlates \(match) with what was sent; Bob's last figures \(stats)")
            if match > 0.7 { connected += 1 }
            matches.append(match)
            setups.append(setup)
        }
        #expect(connected == 10, "\(connected) of 10 calls connected with audio")
        print("netbed stun: \(connected)/10 connected; setup ms \(setups.map { String(format: "%.0f", $0) }.joined(separator: " ")); correlation \(matches.map { String(format: "%.2f", $0) }.joined(separator: " "))")
    }

    // MARK: - 2. TURN relay-only, UDP and TCP to the server

    @Test(arguments: ["udp", "tcp"])
    func relayOnlyCallsUseATurnRelayedPair(transport: String) async throws {
        let bed = try await Bed("turn-\(transport)")
        defer { bed.down() }
        let callers = try await Self.callers(in: bed)
        _ = try await bed.startRelay()
        let network = ["--turn", NetworkBed.turn + (transport == "tcp" ? "?transport=tcp" : ""), "--relay-only"]
        let recording = bed.directory + "/recording.wav"
        let bob = try await Self.startBob(bed, callers, network: network, recording: recording, log: "bob.log")
        let alice = try Self.startAlice(bed, callers, network: network, seconds: 3, log: "alice.log")
        let status = try await alice.exit(timeout: .seconds(40))
        _ = try await bob.exit(timeout: .seconds(20))
        #expect(status == 0, "\(alice.text)")
        for side in [alice, bob] {
            let pair = try #require(side.events("selected-pair").last, "\(side.text)")
            #expect(pair["local_type"] as? String == "relay", "\(pair)")
            #expect(pair["remote_type"] as? String == "relay", "\(pair)")
        }
        let match = try Self.correlation(callers, recording: recording)
        #expect(match > 0.7, "recording correlates \(match) with what was sent")
        print("netbed turn/\(transport): setup \(alice.events("connected").first?["setup_ms"] ?? "-") ms, correlation \(match)")
    }

    // MARK: - 3. Loss

    /// With RFC 2198 redundancy (the default) and, at 10 %, with Opus's in-band FEC alone; and
    /// 10 % bursty loss (bursts of 3 packets on average, `netbed loss 10 3`) with redundancy.
    ///
    /// The subject is loss, so every attempt first checks that both nodes kept real time while
    /// the loss ran: each sent 50 packets a second (20 ms frames) and received almost none too
    /// late to play (the bed's links add loss, never delay). On a machine starved of CPU a
    /// debug node's media clock stalls: it sends fewer frames than it plays, or sends them in
    /// bursts, and the far end conceals frames no network lost. Such an attempt is reported
    /// and run again (at most three in all); a punctual attempt is judged in full, and if no
    /// attempt was punctual the test fails with what it saw.
    @Test(arguments: [(10, "adaptive", 1), (30, "adaptive", 1), (10, "off", 1), (10, "adaptive", 3)])
    func lossBetweenTheNATsKeepsTheCallUpWithFECAndConcealment(percent: Int, redundancy: String, burst: Int) async throws {
        var seen: [String] = []
        for attempt in 1...3 {
            let run = try await Self.lossRun(percent: percent, redundancy: redundancy, burst: burst, attempt: attempt)
            seen.append(run.punctuality.map(\.description).joined(separator: "; "))
            if !run.punctuality.allSatisfy(\.keptRealTime) {
                print("netbed loss \(percent)% (redundancy \(redundancy)): attempt \(attempt) not counted, the machine did not keep real time: \(seen.last!)")
                continue
            }
            Self.judge(run, percent: percent, redundancy: redundancy, burst: burst)
            return
        }
        Issue.record("no attempt kept real time: \(seen.joined(separator: " | "))")
    }

    /// How well a node kept real time over a stretch of a call, from its once-a-second stats.
    struct Punctuality: CustomStringConvertible {
        var name: String
        /// Packets sent per second (50 at 20 ms frames).
        var sendRate: Double
        /// Packets received, and those among them that came too late to play.
        var received: Int
        var late: Int

        var keptRealTime: Bool { sendRate >= 45 && late * 50 <= max(received, 1) }
        var description: String {
            "\(name) sent \(String(format: "%.1f", sendRate)) packets/s, \(late) of \(received) received came too late"
        }

        init(_ process: BedProcess, name: String, from: Double, to: Double) {
            self.name = name
            let window = process.events("stats").filter { stats in
                guard let time = stats["time"] as? Double else { return false }
                return time >= from && time <= to
            }
            func delta(_ key: String) -> Int { ((window.last?[key] as? Int) ?? 0) - ((window.first?[key] as? Int) ?? 0) }
            let seconds = ((window.last?["time"] as? Double) ?? 0) - ((window.first?["time"] as? Double) ?? 0)
            sendRate = seconds > 5 ? Double(delta("packets_sent")) / seconds : 0
            received = delta("packets_received")
            late = delta("late")
        }
    }

    struct LossRun {
        var status: Int32
        var alice: BedProcess
        var bob: BedProcess
        var statsUnderLoss: [String: Any]
        var match: Double
        /// Alice's and Bob's, while the loss ran.
        var punctuality: [Punctuality]
    }

    static func lossRun(percent: Int, redundancy: String, burst: Int, attempt: Int) async throws -> LossRun {
        let bed = try await Bed("loss-\(percent)-\(burst)-\(redundancy)" + (attempt > 1 ? "-\(attempt)" : ""))
        defer { bed.down() }
        let callers = try await Self.callers(in: bed)
        _ = try await bed.startRelay()
        let network = ["--stun", NetworkBed.stun, "--redundancy", redundancy]
        let recording = bed.directory + "/recording.wav"
        let bob = try await Self.startBob(bed, callers, network: network, recording: recording, log: "bob.log")
        let alice = try Self.startAlice(bed, callers, network: network, seconds: 34, log: "alice.log")
        try await alice.waitFor("connected")
        try await bed.control(["loss", String(percent), String(burst)])
        let lossStarted = ContinuousClock.now, lossStartedAt = Date().timeIntervalSince1970
        try await Task.sleep(until: lossStarted + .seconds(30))
        let statsUnderLoss = bob.events("stats").last ?? [:]
        let lossEndedAt = Date().timeIntervalSince1970
        try await bed.control(["loss", "0"])
        let status = try await alice.exit(timeout: .seconds(30))
        _ = try await bob.exit(timeout: .seconds(20))
        let punctuality = [Punctuality(alice, name: "alice", from: lossStartedAt, to: lossEndedAt),
                           Punctuality(bob, name: "bob", from: lossStartedAt, to: lossEndedAt)]
        // Ten seconds of the recording made under loss (a single second holds only 50 packets,
        // too few to judge concealment by at 30 % random loss).
        let match = try Self.correlation(callers, recording: recording, at: 15, span: 10)
        return LossRun(status: status, alice: alice, bob: bob, statsUnderLoss: statsUnderLoss, match: match, punctuality: punctuality)
    }

    static func judge(_ run: LossRun, percent: Int, redundancy: String, burst: Int) {
        let (alice, bob, statsUnderLoss) = (run.alice, run.bob, run.statsUnderLoss)
        #expect(run.status == 0, "\(alice.text)")
        let ended = alice.events("ended").last
        #expect(ended?["reason"] as? String == "localEnded", "\(ended ?? [:])")
        #expect(bob.events("connection-lost").isEmpty && alice.events("connection-lost").isEmpty, "the call dropped under loss")
        let lost = statsUnderLoss["packets_lost"] as? Int ?? 0, received = statsUnderLoss["packets_received"] as? Int ?? 0
        let fec = statsUnderLoss["fec_recovered"] as? Int ?? 0, concealed = statsUnderLoss["concealed"] as? Int ?? 0
        let redundant = statsUnderLoss["redundancy_recovered"] as? Int ?? 0
        let sentRedundancy = alice.events("stats").last?["sending_redundancy"] as? Bool ?? false
        #expect(sentRedundancy == (redundancy != "off"), "alice sending redundancy: \(sentRedundancy)")
        if redundancy == "off" {
            #expect(redundant == 0 && fec > 0, "under loss: \(statsUnderLoss)")
        } else {
            // Each packet carries the frame before it: single losses play whole from the next one.
            #expect(redundant > 0, "under loss: \(statsUnderLoss)")
        }
        #expect(lost > 0, "under loss: \(statsUnderLoss)")
        if redundancy == "off" || percent >= 30 || burst > 1 {
            // Losses that nothing rebuilds are concealed. With redundancy at 10 % that takes
            // two packets lost in a row and no next-packet decode for the first, so a 30 s run
            // may conceal nothing at all.
            #expect(concealed > 0, "under loss: \(statsUnderLoss)")
        }
        if redundancy == "off" {
            // FEC counts only frames whose next packet carried LBRR data for them (speech, once
            // the encoder plans for the loss RTCP reports); the rest, pauses among them, are
            // concealed.
            #expect(fec > 0 && concealed > 0, "rebuilt \(fec) by FEC, \(concealed) concealed")
        } else {
            // The jitter buffer keeps the copies in time, so most lost frames are rebuilt (in
            // bursts, those of runs longer than the copies reach are concealed).
            #expect(fec + redundant > concealed, "rebuilt \(redundant) from redundancy and \(fec) by FEC, \(concealed) concealed")
        }
        let measured = Double(lost) / Double(max(1, lost + received)) * 100
        // The recording (made under loss for most of its length) is still aligned with the input.
        let threshold = percent <= 10 && burst == 1 ? 0.8 : 0.6
        #expect(run.match > threshold, "recording correlates \(run.match) under \(percent) % loss")
        print("netbed loss \(percent)%\(burst > 1 ? " in bursts of \(burst)" : "") (redundancy \(redundancy)): measured \(String(format: "%.1f", measured)) % lost, redundancy \(redundant), FEC \(fec), concealed \(concealed), correlation \(String(format: "%.2f", run.match)), \(run.punctuality.map(\.description).joined(separator: "; "))")
    }

    // MARK: - 4. Link cut

    /// Alice calling Bob over STUN through the relay for `seconds`, two seconds after it connected.
    struct LiveCall {
        let callers: Callers
        let alice: BedProcess
        let bob: BedProcess
        let recording: String
    }

    /// With `direct`, Bob listens on the public router itself and Alice dials his address (no
    /// relay): her signaling is a TCP connection of her own through her NAT.
    static func liveCall(in bed: Bed, seconds: Int, network: [String] = ["--stun", NetworkBed.stun],
                         direct: Bool = false) async throws -> LiveCall {
        let callers = try await Self.callers(in: bed)
        _ = try await bed.startRelay()
        let recording = bed.directory + "/recording.wav"
        let bob: BedProcess, alice: BedProcess
        if direct {
            let address = NetworkBed.publicAddress + ":7600"
            bob = try bed.start("router", [
                "listen", "--home", callers.bob.home, "--listen", address, "--auto-answer",
                "--input", "silence", "--output", "wav:" + recording, "--duration", "120", "--calls", "1", "--json",
            ] + network, log: "bob.log")
            try await bob.waitFor("listening", timeout: .seconds(30))
            alice = try bed.start("a", [
                "call", callers.bob.fingerprint + "@" + address, "--home", callers.alice.home,
                "--input", "wav:" + callers.sent, "--duration", String(seconds), "--json",
            ] + network, log: "alice.log")
        } else {
            bob = try await Self.startBob(bed, callers, network: network, recording: recording, log: "bob.log")
            alice = try Self.startAlice(bed, callers, network: network, seconds: seconds, log: "alice.log")
        }
        try await alice.waitFor("connected")
        try await Task.sleep(for: .seconds(2))
        return LiveCall(callers: callers, alice: alice, bob: bob, recording: recording)
    }

    /// After the connection came back (Bob had `receivedAtRestore` packets then): both ends
    /// finish, Alice's call ends normally, Bob kept receiving, and the end of the recording is
    /// Alice's audio again. Returns that correlation.
    static func expectAudioResumed(_ call: LiveCall, receivedAtRestore: Int) async throws -> Double {
        let status = try await call.alice.exit(timeout: .seconds(40))
        _ = try await call.bob.exit(timeout: .seconds(20))
        #expect(status == 0, "\(call.alice.text)")
        #expect(call.alice.events("ended").last?["reason"] as? String == "localEnded")
        let receivedAtEnd = call.bob.events("stats").last?["packets_received"] as? Int ?? 0
        #expect(receivedAtEnd - receivedAtRestore > 100, "packets after the recovery: \(receivedAtEnd - receivedAtRestore)")
        let heardSeconds = Double(try WAV.read(path: call.recording).samples.count) / 48_000
        // The best of a few windows in the last seconds: right after the recovery the jitter
        // buffer drains the late burst, and each dropped or stretched frame shifts the alignment.
        let match = try [3.0, 2.5, 2.0, 1.5].map {
            try Self.correlation(call.callers, recording: call.recording, at: heardSeconds - $0)
        }.max() ?? 0
        #expect(match > 0.7, "after the recovery the recording correlates \(match)")
        return match
    }

    @Test func aCutLinkIsReportedAndTheCallRecoversWhenItReturns() async throws {
        let bed = try await Bed("cut")
        defer { bed.down() }
        let call = try await Self.liveCall(in: bed, seconds: 14)
        let alice = call.alice, bob = call.bob

        let cutAt = Self.epoch()
        try await bed.control(["cut", "a"])
        let lostAlice = try await alice.waitFor("connection-lost", timeout: .seconds(5))
        let lostBob = try await bob.waitFor("connection-lost", timeout: .seconds(5))
        try await Task.sleep(for: .seconds(5) - .milliseconds(Int((Self.epoch() - cutAt) * 1000)))
        let restoredAt = Self.epoch()
        try await bed.control(["restore", "a"])
        let backAlice = try await alice.waitFor("connection-restored", timeout: .seconds(6))
        let backBob = try await bob.waitFor("connection-restored", timeout: .seconds(6))
        let receivedAtRestore = bob.events("stats").last?["packets_received"] as? Int ?? 0
        let match = try await Self.expectAudioResumed(call, receivedAtRestore: receivedAtRestore)

        let delays = [lostAlice, lostBob].map { ($0["time"] as? Double ?? .infinity) - cutAt }
        let recoveries = [backAlice, backBob].map { ($0["time"] as? Double ?? .infinity) - restoredAt }
        #expect(delays.allSatisfy { $0 <= 2 }, "connection lost reported \(delays) s after the cut")
        #expect(recoveries.allSatisfy { $0 <= 3 }, "connection restored reported \(recoveries) s after the link returned")
        print("netbed cut: lost after \(delays) s, restored after \(recoveries) s, correlation after \(match)")
    }

    @Test func aNATThatForgetsItsMappingsIsCrossedByAnICERestart() async throws {
        let bed = try await Bed("rebind")
        defer { bed.down() }
        let call = try await Self.liveCall(in: bed, seconds: 22)
        let alice = call.alice, bob = call.bob

        // Bob's NAT reboots, in effect: the UDP path is gone for good, the signaling is not.
        let rebindAt = Self.epoch()
        try await bed.control(["rebind", "b"])
        try await alice.waitFor("connection-lost", timeout: .seconds(5))
        try await bob.waitFor("connection-lost", timeout: .seconds(5))
        let restartBob = try await bob.waitFor("ice-restart", timeout: .seconds(10))
        let restartAlice = try await alice.waitFor("ice-restart", timeout: .seconds(10))
        let backAlice = try await alice.waitFor("connection-restored", timeout: .seconds(15))
        let backBob = try await bob.waitFor("connection-restored", timeout: .seconds(15))
        let receivedAtRestore = bob.events("stats").last?["packets_received"] as? Int ?? 0
        let match = try await Self.expectAudioResumed(call, receivedAtRestore: receivedAtRestore)

        #expect(restartBob["by_peer"] as? Bool == false, "the callee starts restarts")
        #expect(restartAlice["by_peer"] as? Bool == true)
        // The new path goes to Bob's new mapping.
        let remote = alice.events("selected-pair").last?["remote"] as? String ?? ""
        let port = remote.split(separator: ":").last.flatMap { Int($0) } ?? 0
        #expect((20_000...29_999).contains(port), "alice's last pair goes to \(remote)")
        let times = [restartBob, backAlice, backBob].map { ($0["time"] as? Double ?? .infinity) - rebindAt }
        print("netbed rebind: restart \(times[0]) s after the rebind, restored after \(times[1...]) s, new path to \(remote), correlation \(match)")
    }

    // MARK: - 4b. A host that moves, a signaling connection that is reset

    /// Seconds from `at` until `process` heard its peer again: when ICE selected a new pair
    /// (the old one's address is gone), or, if the media stalled long enough to be reported
    /// lost, when it was reported restored. Nil if neither happened before `end`.
    static func audioBack(_ process: BedProcess, after at: Double, before end: Double = .infinity) -> Double? {
        func time(_ event: [String: Any]) -> Double { event["time"] as? Double ?? .nan }
        func first(_ name: String, after start: Double) -> Double? {
            process.events(name).map(time).filter { $0 > start && $0 < end }.min()
        }
        guard let pair = first("selected-pair", after: at) else { return nil }
        guard let lost = first("connection-lost", after: at) else { return pair - at }
        return first("connection-restored", after: lost).map { max($0, pair) - at }
    }

    /// The rows of `callnode recents` for a home.
    static func recents(_ bed: Bed, _ home: String) async throws -> [String] {
        try await bed.callnode(["recents", "--home", home]).output.split(separator: "\n").map(String.init).filter { $0.contains("\t") }
    }

    /// Host A (the caller) moves to a new address and its NAT forgets its mappings, mid-call, as a
    /// laptop joining another Wi-Fi would: the call resumes its signaling through the relay from
    /// the new address, restarts ICE at once, and audio is back both ways within 3 s; one call
    /// throughout. `CALLNODE_BED_MOVES=N` moves it N times in one call (2 by default) and prints
    /// the median. Signaling through the relay with server-reflexive or TURN-only media, or
    /// `direct`: Alice dials Bob's public address herself.
    /// `callee`: Bob's host moves instead (signaling through the relay, which both are
    /// registered at: Bob dials Alice there and resumes the call himself).
    @Test(arguments: ["stun", "turn", "direct", "callee"])
    func aHostThatMovesToANewAddressKeepsItsCall(media: String) async throws {
        let moves = ProcessInfo.processInfo.environment["CALLNODE_BED_MOVES"].flatMap(Int.init) ?? 2
        let bed = try await Bed("move-" + media)
        defer { bed.down() }
        let network = media == "turn" ? ["--turn", NetworkBed.turn, "--relay-only"] : ["--stun", NetworkBed.stun]
        let call = try await Self.liveCall(in: bed, seconds: 6 + 7 * moves, network: network, direct: media == "direct")
        let alice = call.alice, bob = call.bob
        let mover = media == "callee" ? bob : alice
        var backs: [Double] = []
        var times: [Double] = []
        for n in 1...moves {
            let movedAt = Self.epoch()
            times.append(movedAt)
            try await bed.control(["move", media == "callee" ? "b" : "a"])
            // Resumed on a new connection from the new address, and the path found again.
            try await mover.waitForLine(timeout: .seconds(10)) { line in
                line.contains("\"event\":\"signaling-resumed\"") && line.timeValue > movedAt
            }
            try await Task.sleep(for: .seconds(6))
            let window = Self.epoch()
            for (name, process) in [("alice", alice), ("bob", bob)] {
                guard let back = Self.audioBack(process, after: movedAt, before: window) else {
                    Issue.record("move \(n): \(name) never heard the other again:\n\(process.text)")
                    continue
                }
                #expect(back <= 3, "move \(n): \(name) heard the other again \(back) s after the move")
                backs.append(back)
            }
        }
        let receivedAtEnd = bob.events("stats").last?["packets_received"] as? Int ?? 0
        let match = try await Self.expectAudioResumed(call, receivedAtRestore: receivedAtEnd - 200)
        // One call throughout: one dial, one connected, the same call ID in every event.
        let ids = Set(alice.events.compactMap { $0["call"] as? String })
        #expect(ids.count == 1, "alice's events name \(ids.count) calls")
        #expect(alice.events("connected").count == 1 && bob.events("connected").count == 1)
        #expect(mover.events("ice-restart").contains { $0["by_peer"] as? Bool == false }, "the host that moved restarts ICE itself")
        #expect(try await Self.recents(bed, call.callers.alice.home).count == 1)
        #expect(try await Self.recents(bed, call.callers.bob.home).count == 1)
        let sorted = backs.sorted()
        let median = sorted.isEmpty ? .nan : sorted[sorted.count / 2]
        print("netbed move (\(media)): \(moves) moves, audio back after \(backs.map { String(format: "%.2f", $0) }) s (median \(String(format: "%.2f", median)) s of \(backs.count) sides), correlation at the end \(match)")
    }

    @Test func aSignalingConnectionResetAloneIsResumedAndTheMediaNeverNotices() async throws {
        let bed = try await Bed("resettcp")
        defer { bed.down() }
        let call = try await Self.liveCall(in: bed, seconds: 12)
        let alice = call.alice, bob = call.bob
        let resetAt = Self.epoch()
        try await bed.control(["reset-tcp", "a"])
        try await alice.waitFor("signaling-lost", timeout: .seconds(5))
        let resumed = try await alice.waitFor("signaling-resumed", timeout: .seconds(10))
        try await bob.waitFor("signaling-resumed", timeout: .seconds(10))
        let receivedAtEnd = { bob.events("stats").last?["packets_received"] as? Int ?? 0 }
        let before = receivedAtEnd()
        let match = try await Self.expectAudioResumed(call, receivedAtRestore: before)
        #expect(alice.events("connection-lost").isEmpty && bob.events("connection-lost").isEmpty, "the media path was never lost")
        #expect(try await Self.recents(bed, call.callers.alice.home).count == 1)
        let after = (resumed["time"] as? Double ?? .infinity) - resetAt
        print("netbed reset-tcp: resumed \(String(format: "%.2f", after)) s after the reset; correlation at the end \(match)")
    }

    /// Packets to the caller's mapping stop arriving (dropped on the way in, one way only),
    /// while the caller's packets still reach the callee. Only the caller hears nothing, so only
    /// it can see the break: it restarts ICE itself, and the new round's mapping gets through.
    @Test func aBreakOnlyTheCallerSeesIsRepairedByItsOwnRestart() async throws {
        let bed = try await Bed("oneway")
        defer { bed.down() }
        let call = try await Self.liveCall(in: bed, seconds: 22)
        let alice = call.alice, bob = call.bob
        let pair = try #require(alice.events("selected-pair").last?["local"] as? String)
        let parts = pair.split(separator: ":")
        let rebindAt = Self.epoch()
        try await bed.control(["drop-to", String(parts[0]), String(parts[1])])
        let lost = try await alice.waitFor("connection-lost", timeout: .seconds(5))
        let restart = try await alice.waitFor("ice-restart", timeout: .seconds(12))
        let back = try await alice.waitFor("connection-restored", timeout: .seconds(15))
        let receivedAtRestore = bob.events("stats").last?["packets_received"] as? Int ?? 0
        let match = try await Self.expectAudioResumed(call, receivedAtRestore: receivedAtRestore)
        #expect(restart["by_peer"] as? Bool == false, "the caller starts the restart: \(restart)")
        #expect(bob.events("ice-restart").allSatisfy { $0["by_peer"] as? Bool == true }, "the callee only answers")
        #expect(bob.events("connection-lost").isEmpty, "the callee kept hearing the caller")
        let times = [lost, restart, back].map { ($0["time"] as? Double ?? .infinity) - rebindAt }
        print("netbed one-way break to the caller's \(pair): the caller lost the path after \(times[0]) s, restarted after \(times[1]) s, heard again after \(times[2]) s; callee lost it: \(!bob.events("connection-lost").isEmpty); correlation \(match)")
    }

    // MARK: - 5. Peer crash

    @Test func aKilledPeerEndsTheCallWithAReasonAndARecentsRow() async throws {
        let bed = try await Bed("crash")
        defer { bed.down() }
        let callers = try await Self.callers(in: bed)
        _ = try await bed.startRelay()
        let network = ["--stun", NetworkBed.stun]
        let bob = try await Self.startBob(bed, callers, network: network, recording: bed.directory + "/recording.wav", log: "bob.log")
        // A killed peer's kernel closes its signaling connection and its media stops: the call
        // ends within seconds, with the default resume window (30 s) for a network that breaks.
        let alice = try Self.startAlice(bed, callers, network: network, seconds: 60, log: "alice.log")
        try await alice.waitFor("connected")
        try await Task.sleep(for: .seconds(2))

        let killedAt = Self.epoch()
        kill(bob.child.pid, SIGKILL)
        let ended = try await alice.waitFor("ended", timeout: .seconds(12))
        let after = (ended["time"] as? Double ?? .infinity) - killedAt
        #expect(after <= 5, "the end came \(after) s after the kill")
        #expect(ended["reason"] as? String == "failed", "\(ended)")
        let detail = ended["detail"] as? String ?? ""
        #expect(detail.contains("the other node went away"), "the end gives no reason: \(ended)")
        let status = try await alice.exit(timeout: .seconds(10))
        #expect(status != 0, "a call that failed exits non-zero")
        let recents = try await bed.callnode(["recents", "--home", callers.alice.home])
        #expect(recents.output.contains("outgoing") && recents.output.contains("failed"), "\(recents.output)")
        print("netbed crash: ended \(String(format: "%.2f", after)) s after SIGKILL: \(detail)")
    }

    // MARK: - 6. Unknown and blocked callers

    @Test func unknownAndBlockedCallersAcrossTheRelayAreRejectedWithTheirReasons() async throws {
        let bed = try await Bed("reject")
        defer { bed.down() }
        let callers = try await Self.callers(in: bed, bobKnowsAlice: false)
        _ = try await bed.startRelay()
        let network = ["--stun", NetworkBed.stun]

        var bob = try await Self.startBob(bed, callers, network: network, recording: bed.directory + "/r1.wav", log: "bob-1.log")
        var alice = try Self.startAlice(bed, callers, network: network, seconds: 3, log: "alice-1.log")
        #expect(try await alice.exit(timeout: .seconds(30)) == 1)
        #expect(alice.events("rejected").first?["reason"] as? String == "unknown-caller", "\(alice.text)")
        #expect(alice.text.contains("unknown-caller") || alice.text.contains("unknown caller"))
        bob.child.stop()

        _ = try await bed.callnode(["contacts", "add", "alice", callers.alice.fingerprint, "--home", callers.bob.home])
        #expect(try await bed.callnode(["block", "alice", "--home", callers.bob.home]).status == 0)
        bob = try await Self.startBob(bed, callers, network: network, recording: bed.directory + "/r2.wav", log: "bob-2.log")
        alice = try Self.startAlice(bed, callers, network: network, seconds: 3, log: "alice-2.log")
        #expect(try await alice.exit(timeout: .seconds(30)) == 1)
        #expect(alice.events("rejected").first?["reason"] as? String == "blocked", "\(alice.text)")
        bob.child.stop()
    }
}
}
