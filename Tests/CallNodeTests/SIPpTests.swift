import CallNode
import CallNodeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What the softphones do not exercise, against SIPp (Debian's `sip-tester`) running the
/// scenarios in `scripts/sipp/`: a session timer asked for, refreshed by UPDATE and refused
/// below its floor (RFC 4028), an offer in an UPDATE (RFC 3311), a transfer the node does not
/// take yet, a callee that requires 100rel (RFC 3262) and answers in its reliable 183. SIPp
/// checks what the node sends (each scenario fails on a missing or wrong message or header);
/// the node's own output and recording say what the call did.
extension RealTimeTests {
@Suite(.serialized, .enabled(if: SIPp.isInstalled, "needs SIPp (scripts/bootstrap installs sip-tester)"))
struct SIPpTests {
    typealias Fixture = TwoNodeTests.Fixture

    /// A node listening for SIP on loopback (`callnode listen`), auto-answering with a tone.
    static func listeningNode(_ f: Fixture) async throws -> (ChildProcess, port: Int, log: String) {
        let port = SIPCallTests.freePort(), log = f.path("node.log")
        let node = try ChildProcess(try BuildProducts.executable("callnode"),
                                    ["listen", "--home", f.path("node"), "--listen", "127.0.0.1:0", "--sip", "127.0.0.1:\(port)",
                                     "--auto-answer", "--input", "tone:440", "--output", "null"], output: log)
        _ = try await CommandLineTests.waitForLine(in: log, process: node) { $0.hasPrefix("SIP: sip:") }
        return (node, port, log)
    }

    @Test func aCallerAsksForASessionTimerRefreshesItByUPDATEAndHoldsInAnUPDATE() async throws {
        let f = try Fixture()
        let (node, port, log) = try await Self.listeningNode(f)
        defer { node.stop() }
        let run = try await SIPp.run("update-and-timer.xml", in: f.path("sipp"), remote: "127.0.0.1:\(port)", service: "bob")
        #expect(run.status == 0, "\(run.log)")
        // The node's 200 granted the timer with the caller refreshing (checked by the scenario),
        // answered the hold offered in the UPDATE (recvonly, checked too) and said so.
        let output = try await CommandLineTests.waitForLine(in: log, process: node) { $0.hasPrefix("call ended") }
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(text.contains("on hold by sipp"), "\(text)")
        #expect(output.contains("remoteEnded"), "\(output)")
    }

    @Test func aSessionIntervalBelowTheFloorIsRefusedWith422AndMinSE() async throws {
        let f = try Fixture()
        let (node, port, log) = try await Self.listeningNode(f)
        defer { node.stop() }
        let run = try await SIPp.run("short-session-timer.xml", in: f.path("sipp"), remote: "127.0.0.1:\(port)", service: "bob")
        #expect(run.status == 0, "\(run.log)")
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(!text.contains("connected"), "a call was made of a refused INVITE: \(text)")
    }

    /// A caller behind a NAT (its Via and Contact private, its packets from elsewhere, no
    /// Record-Route): when the node hangs up, its BYE goes to where the INVITE came from.
    @Test func theByeToACallerBehindANATGoesWhereItsInviteCameFrom() async throws {
        let f = try Fixture()
        let node = try await f.node("bob", input: .tone(660), autoAnswer: true)
        let port = SIPCallTests.freePort()
        _ = try await node.listenSIP(SIPListenSettings(host: "127.0.0.1", port: port, user: "bob"))
        let events = node.events()
        let caller = Task { try await SIPp.run("caller-behind-nat.xml", in: f.path("sipp"), remote: "127.0.0.1:\(port)", service: "bob") }
        guard case let .connected(call, _) = try await TwoNodeTests.next(events, where: { if case .connected = $0 { true } else { false } })
        else { return }
        try await Task.sleep(for: .milliseconds(500))
        try await node.hangUp(call)
        let run = try await caller.value
        #expect(run.status == 0, "the BYE did not reach the caller at its NAT's address: \(run.log)")
        await node.shutdown()
    }

    /// A caller whose process goes away without a BYE: its media stops, the OPTIONS the node
    /// then sends in the dialog finds its port closed, and the call ends saying so — not after
    /// the 30 s a call waits for a path that was cut.
    @Test func aCallerThatVanishesWithoutAByeIsFoundGone() async throws {
        let f = try Fixture()
        let (node, port, log) = try await Self.listeningNode(f)
        defer { node.stop() }
        let run = try await SIPp.run("caller-vanishes.xml", in: f.path("sipp"), remote: "127.0.0.1:\(port)", service: "bob")
        #expect(run.status == 0, "\(run.log)")
        let ended = try await CommandLineTests.waitForLine(in: log, process: node) { $0.hasPrefix("call ended") }
        #expect(ended.contains("the SIP peer is gone"), "\(ended)")
        #expect(!ended.contains("nothing heard from the peer for 30 s"), "\(ended)")
    }

    /// The node calls a callee that requires 100rel: sofia PRACKs the reliable 183 (the scenario
    /// checks its RAck), the 183's answer stands for a 200 without SDP, and the call runs: SIPp
    /// echoes the node's RTP, so the node hears its own 440 Hz.
    @Test func aCalleeThatRequires100relIsPRACKedAndItsEarlyAnswerStands() async throws {
        let f = try Fixture()
        let sippPort = SIPCallTests.freePort()
        let callee = Task { try await SIPp.run("callee-100rel.xml", in: f.path("sipp"), remote: nil, localPort: sippPort) }
        try await SIPp.waitUntilListening(port: sippPort)
        let log = f.path("call.log")
        let caller = try ChildProcess(try BuildProducts.executable("callnode"),
                                      ["call", "sip:x@127.0.0.1:\(sippPort)", "--home", f.path("caller"), "--input", "tone:440",
                                       "--output", "wav:" + f.path("heard.wav"), "--duration", "3"], output: log)
        defer { caller.stop() }
        let status = await caller.wait()
        let run = try await callee.value
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(status == 0, "\(text)")
        #expect(run.status == 0, "\(run.log)")
        #expect(text.contains("NOT encrypted: plain RTP"), "\(text)")
        #expect(SIPInteropTests.holds(try WAV.read(path: f.path("heard.wav")).samples, 440, over: 660), "the echo of the node's tone was not heard")
    }
}
}

/// A session timer nobody refreshes takes its 90 s (RFC 4028's floor) to run out: a suite of
/// its own, beside the others, not among the real-time suites that run one at a time.
@Suite(.enabled(if: SIPp.isInstalled, "needs SIPp (scripts/bootstrap installs sip-tester)"))
struct SIPSessionTimerTests {
    /// The caller asked for a 90 s session it refreshes, and never does: the node ends the
    /// session before it expires (a BYE, which the scenario waits for) and says why.
    @Test func aSessionNobodyRefreshesIsEndedWithTheReason() async throws {
        let f = try RealTimeTests.TwoNodeTests.Fixture()
        let (node, port, log) = try await RealTimeTests.SIPpTests.listeningNode(f)
        defer { node.stop() }
        let run = try await SIPp.run("session-never-refreshed.xml", in: f.path("sipp"), remote: "127.0.0.1:\(port)", service: "bob",
                                     seconds: 110, extra: ["-aa"])
        #expect(run.status == 0, "\(run.log)")
        let ended = try await RealTimeTests.CommandLineTests.waitForLine(in: log, process: node) { $0.hasPrefix("call ended") }
        #expect(ended.contains("refreshing the SIP session"), "\(ended)")
    }
}

/// SIPp (`/usr/bin/sipp`) running one call of a scenario from `scripts/sipp/`.
enum SIPp {
    static let executable = "/usr/bin/sipp"
    static var isInstalled: Bool { access(executable, X_OK) == 0 }
    static let scenarios = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("scripts/sipp").path

    /// Runs `scenario` for one call: against `remote` (a caller), or waiting on `localPort` (a
    /// callee, `remote` nil). It echoes the RTP it gets. Returns SIPp's exit status (0: the call
    /// went as the scenario says) and its messages and errors, for a failure's message.
    static func run(_ scenario: String, in directory: String, remote: String?, service: String = "service",
                    localPort: Int = FreePort.udpAndTCP(), seconds: Int = 30, extra: [String] = []) async throws -> (status: Int32, log: String) {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let messages = directory + "/messages.log", errors = directory + "/errors.log"
        var arguments = remote.map { [$0] } ?? []
        arguments += ["-sf", scenarios + "/" + scenario, "-s", service, "-m", "1", "-i", "127.0.0.1", "-mi", "127.0.0.1",
                      "-mp", String(FreePort.udpAndTCP()), "-rtp_echo", "-p", String(localPort),
                      "-timeout", "\(seconds)s", "-timeout_error", "-recv_timeout", "15000", "-nostdin",
                      "-trace_msg", "-message_file", messages, "-trace_err", "-error_file", errors] + extra
        let child = try ChildProcess(executable, arguments, output: directory + "/sipp.out", stdin: open("/dev/null", O_RDONLY))
        let status = await child.wait()
        let log = [errors, messages].map { (try? String(contentsOfFile: $0, encoding: .utf8)) ?? "" }.joined(separator: "\n----\n")
        return (status, String(log.suffix(6_000)))
    }

    /// Waits (bounded) until something has bound UDP `port` on loopback: SIPp listening.
    static func waitUntilListening(port: Int) async throws {
        for _ in 0..<100 {
            let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = UInt16(port).bigEndian
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            close(fd)
            if bound != 0 { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw TestFailure("SIPp never listened on UDP \(port)")
    }
}
