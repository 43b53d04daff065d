import AudioCodec
import CallNode
import CallNodeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// What the softphones do not exercise, against SIPp (Debian's `sip-tester`) running the
/// scenarios in `scripts/sipp/`: a session timer asked for, refreshed by UPDATE and refused
/// below its floor (RFC 4028), an offer in an UPDATE (RFC 3311), a callee that requires 100rel
/// (RFC 3262) and answers in its reliable 183, early media both ways, bad requests in a call
/// (a REFER to what is not a SIP address or to a blocked target, a NOTIFY for no subscription,
/// a PRACK for no reliable response), an INVITE replacing no call here. SIPp
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

    /// Bob, a node in this process playing 660 Hz, listening for SIP on loopback; its port.
    static func sipNode(_ f: Fixture, autoAnswer: Bool = true, appOwned: Bool = false) async throws -> (CallNode, port: Int) {
        let node = try await f.node("bob", input: .tone(660), autoAnswer: autoAnswer, appOwned: appOwned)
        let port = SIPCallTests.freePort()
        _ = try await node.listenSIP(SIPListenSettings(host: "127.0.0.1", port: port, user: "bob"))
        return (node, port)
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
        let (node, port) = try await Self.sipNode(f)
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

    /// A caller given early media (an IVR's greeting before it answers): the node's 183
    /// carries its answer (the scenario checks it) and its audio while it still rings, and the
    /// node hears the caller's tone then; answered, the 200 carries the same answer.
    @Test func aCallerGetsTheNodesGreetingBeforeTheNodeAnswers() async throws {
        let f = try Fixture()
        let tone = f.path("caller.wav")
        try SIPp.writeMuLaw(tone: 1_000, seconds: 2, to: tone)
        let (node, port) = try await Self.sipNode(f, autoAnswer: false, appOwned: true)
        let events = node.events()
        let caller = Task {
            try await SIPp.run("caller-early-media.xml", in: f.path("sipp"), remote: "127.0.0.1:\(port)", service: "bob",
                               replacing: ["CALLER_FILE": tone])
        }
        guard case let .incoming(call, _, _, _) = try await TwoNodeTests.next(events, where: { if case .incoming = $0 { true } else { false } })
        else { return }
        try await node.progress(call)
        _ = try await TwoNodeTests.next(events) { $0 == .earlyMedia(call) }
        // The caller's tone is heard while the call is unanswered.
        var (packets, level) = (0, -100.0)
        for _ in 0..<40 {
            try await Task.sleep(for: .milliseconds(50))
            let early = await node.statistics(call)
            (packets, level) = (early?.packetsReceived ?? 0, early?.receiveLevel ?? -100)
            if packets > 30, level > -40 { break }
        }
        #expect(packets > 30 && level > -40, "before the answer: \(packets) packets at \(level) dB")
        try await node.answer(call)
        _ = try await TwoNodeTests.next(events) { if case .connected = $0 { true } else { false } }
        let run = try await caller.value
        #expect(run.status == 0, "\(run.log)")
        await node.shutdown()
    }

    /// What a call must survive in its dialog, from SIPp: a REFER to what is not a SIP address
    /// (400), one to a target this node blocks (403), a NOTIFY for no subscription (481), a
    /// PRACK for no reliable response (481). The scenario checks each answer; the call goes on
    /// to the caller's BYE, and nothing was placed for the refused transfers.
    @Test func badRequestsInACallAreAnsweredAndTheCallGoesOn() async throws {
        let f = try Fixture()
        let (node, port) = try await Self.sipNode(f)
        let blocked = "sip:mallory@127.0.0.1:5999"
        try await node.store.directory.block(CallHandle(.generic, blocked))
        let events = node.events()
        let run = try await SIPp.run("caller-bad-requests.xml", in: f.path("sipp"), remote: "127.0.0.1:\(port)", service: "bob",
                                     replacing: ["BLOCKED_TARGET": blocked])
        #expect(run.status == 0, "\(run.log)")
        let ended = try await TwoNodeTests.next(events) { if case .ended = $0 { true } else { false } }
        guard case let .ended(_, reason, detail, _) = ended else { return }
        #expect(reason == .remoteEnded, "the call ended by the caller's BYE, not before: \(detail ?? "")")
        #expect(await node.liveCalls.isEmpty, "no call placed for a refused transfer")
        await node.shutdown()
    }

    /// Glare (RFC 3261 §14.1): the node's hold re-INVITE crosses the caller's re-INVITE. The
    /// node refuses the caller's with 491 and, refused with 491 itself, tries again after its
    /// random wait; the caller answers the retry (the scenario checks each step), and the call
    /// is held and goes on to the caller's BYE.
    @Test func reInvitesThatCrossAreRefusedWith491AndTheNodesIsTriedAgain() async throws {
        let f = try Fixture()
        let (node, port) = try await Self.sipNode(f)
        let events = node.events()
        let caller = Task { try await SIPp.run("caller-glare.xml", in: f.path("sipp"), remote: "127.0.0.1:\(port)", service: "bob") }
        guard case let .connected(call, _) = try await TwoNodeTests.next(events, where: { if case .connected = $0 { true } else { false } })
        else { return }
        try await node.setHeld(call, true)
        let run = try await caller.value
        #expect(run.status == 0, "\(run.log)")
        let ended = try await TwoNodeTests.next(events) { if case .ended(call, _, _, _) = $0 { true } else { false } }
        guard case let .ended(_, reason, detail, _) = ended else { return }
        #expect(reason == .remoteEnded, "ended by the caller's BYE, not by the glare: \(detail ?? "")")
        await node.shutdown()
    }

    /// A re-INVITE without an offer (RFC 3261 §14.2, as PBXes send to refresh a session or move
    /// its media): the node offers the session as it stands in its 200 (the scenario checks that
    /// its audio line names the port the node's first answer did) and takes the caller's answer
    /// from the ACK; the call goes on until the caller's BYE.
    @Test func aReinviteWithoutAnOfferIsAnsweredWithTheSessionAndTheAckAnswers() async throws {
        let f = try Fixture()
        let (node, port) = try await Self.sipNode(f)
        let events = node.events()
        let run = try await SIPp.run("caller-reinvite-without-offer.xml", in: f.path("sipp"), remote: "127.0.0.1:\(port)", service: "bob")
        #expect(run.status == 0, "\(run.log)")
        let ended = try await TwoNodeTests.next(events) { if case .ended = $0 { true } else { false } }
        guard case let .ended(_, reason, detail, _) = ended else { return }
        #expect(reason == .remoteEnded, "ended by the caller's BYE: \(detail ?? "")")
        await node.shutdown()
    }

    /// A caller's gateway switches the call to fax (a re-INVITE offering T.38 and no audio):
    /// the node refuses it with 488 (the scenario checks it) and the call goes on as it was
    /// (RFC 3261 §14.2), with audio both ways, until the caller's BYE. The node used to end the
    /// call as failed on such an offer.
    @Test func aReinviteSwitchingToFaxIsRefusedWith488AndTheCallGoesOn() async throws {
        let f = try Fixture()
        let (node, port) = try await Self.sipNode(f)
        let events = node.events()
        let run = try await SIPp.run("caller-fax-reinvite.xml", in: f.path("sipp"), remote: "127.0.0.1:\(port)", service: "bob")
        #expect(run.status == 0, "\(run.log)")
        let ended = try await TwoNodeTests.next(events) { if case .ended = $0 { true } else { false } }
        guard case let .ended(_, reason, detail, _) = ended else { return }
        #expect(reason == .remoteEnded, "ended by the caller's BYE, not by the refused offer: \(detail ?? "")")
        await node.shutdown()
    }

    /// An INVITE that claims to replace a dialog this node does not have (a stale attended
    /// transfer) gets 481 (the scenario checks it), and nothing rings.
    @Test func anInviteReplacingNoCallHereGets481() async throws {
        let f = try Fixture()
        let (node, port) = try await Self.sipNode(f)
        let run = try await SIPp.run("caller-replaces-unknown.xml", in: f.path("sipp"), remote: "127.0.0.1:\(port)", service: "bob")
        #expect(run.status == 0, "\(run.log)")
        #expect(await node.liveCalls.isEmpty)
        await node.shutdown()
    }

    /// A callee with early media: its 183 carries an answer and it streams an announcement
    /// (1 kHz) before it answers; its 200 follows 2.5 s later, and then it streams 1.6 kHz.
    /// The node plays the announcement (heard at the start of its recording), says "early
    /// media" before "connected", and connects on the 200 without a second negotiation.
    @Test func aCalleesEarlyMediaIsHeardBeforeItAnswers() async throws {
        let f = try Fixture()
        let announcement = f.path("announcement.wav"), answered = f.path("answered.wav")
        try SIPp.writeMuLaw(tone: 1_000, seconds: 2, to: announcement)
        try SIPp.writeMuLaw(tone: 1_600, seconds: 2, to: answered)
        let sippPort = SIPCallTests.freePort()
        let callee = Task {
            try await SIPp.run("callee-early-media.xml", in: f.path("sipp"), remote: nil, localPort: sippPort,
                               replacing: ["EARLY_FILE": announcement, "ANSWER_FILE": answered, "EARLY_MS": "2500"])
        }
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
        let early = try #require(text.range(of: "early media: hearing the callee"), "\(text)")
        let connected = try #require(text.range(of: "connected in"), "\(text)")
        #expect(early.lowerBound < connected.lowerBound, "early media is told before the call connects: \(text)")
        let heard = try WAV.read(path: f.path("heard.wav"))
        let rate = heard.format.sampleRate
        // The recording starts with the early media: the announcement over its first two
        // seconds, the answered tone over the last second.
        #expect(heard.samples.count > 4 * rate, "\(heard.samples.count) samples")
        let start = Array(heard.samples[(rate / 4)..<(2 * rate)])
        let end = Array(heard.samples[(heard.samples.count - rate)...])
        #expect(Goertzel.power(of: 1_000, in: start, rate: Double(rate)) > 20 * Goertzel.power(of: 1_600, in: start, rate: Double(rate)),
                "the announcement was not heard before the answer: \(text)")
        #expect(Goertzel.power(of: 1_600, in: end, rate: Double(rate)) > 20 * Goertzel.power(of: 1_000, in: end, rate: Double(rate)),
                "the answered call's audio was not heard after the 200")
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
    /// `replacing`: words of the scenario replaced before it runs (a file's path, a pause).
    static func run(_ scenario: String, in directory: String, remote: String?, service: String = "service",
                    localPort: Int = FreePort.udpAndTCP(), seconds: Int = 30, extra: [String] = [],
                    replacing: [String: String] = [:]) async throws -> (status: Int32, log: String) {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let messages = directory + "/messages.log", errors = directory + "/errors.log"
        var path = scenarios + "/" + scenario
        if !replacing.isEmpty {
            var text = try String(contentsOfFile: path, encoding: .utf8)
            for (word, value) in replacing { text = text.replacingOccurrences(of: word, with: value) }
            path = directory + "/" + scenario
            try text.write(toFile: path, atomically: true, encoding: .utf8)
        }
        var arguments = remote.map { [$0] } ?? []
        arguments += ["-sf", path, "-s", service, "-m", "1", "-i", "127.0.0.1", "-mi", "127.0.0.1",
                      "-mp", String(FreePort.udpAndTCP()), "-rtp_echo", "-p", String(localPort),
                      "-timeout", "\(seconds)s", "-timeout_error", "-recv_timeout", "15000", "-nostdin",
                      "-trace_msg", "-message_file", messages, "-trace_err", "-error_file", errors] + extra
        let child = try ChildProcess(executable, arguments, output: directory + "/sipp.out", nullStdin: true)
        let status = await child.wait()
        let log = [errors, messages].map { (try? String(contentsOfFile: $0, encoding: .utf8)) ?? "" }.joined(separator: "\n----\n")
        return (status, String(log.suffix(6_000)))
    }

    /// Writes a tone as SIPp's `rtp_stream` plays it: 8 kHz mu-law bytes after a WAV header.
    static func writeMuLaw(tone frequency: Double, seconds: Int, to path: String) throws {
        let samples = (0..<(8_000 * seconds)).map { Int16(12_000 * sin(2 * Double.pi * frequency * Double($0) / 8_000)) }
        var bytes: [UInt8] = []
        G711.encode(samples, law: .mu, into: &bytes)
        var file = Data("RIFF".utf8)
        func put32(_ value: Int) { withUnsafeBytes(of: UInt32(value).littleEndian) { file.append(contentsOf: $0) } }
        func put16(_ value: Int) { withUnsafeBytes(of: UInt16(value).littleEndian) { file.append(contentsOf: $0) } }
        put32(36 + bytes.count)
        file.append(contentsOf: Array("WAVEfmt ".utf8))
        put32(16); put16(7); put16(1); put32(8_000); put32(8_000); put16(1); put16(8)
        file.append(contentsOf: Array("data".utf8))
        put32(bytes.count)
        file.append(contentsOf: bytes)
        try file.write(to: URL(fileURLWithPath: path))
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
