import CallNode
import CallNodeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Nodes and a softphone behind a real registrar: Kamailio (Debian's) on loopback with digest
/// authentication, its locations in memory. Each registers its address of record and is reached
/// by it; a restart of the registrar is survived (the next refresh registers again); a wrong
/// password is reported and retried.
extension RealTimeTests {
@Suite(.serialized, .enabled(if: KamailioServer.isInstalled, "needs kamailio (scripts/bootstrap installs it)"))
struct SIPRegistrarTests {
    typealias Fixture = TwoNodeTests.Fixture
    static let domain = "example.test"

    static func registrar(_ f: Fixture) throws -> KamailioServer {
        let server = try KamailioServer(directory: f.path("kamailio"), port: SIPCallTests.freePort(), domain: domain,
                                        users: ["alice": "alice-secret", "bob": "bob-secret", "carol": "carol-secret"])
        try server.start()
        return server
    }

    /// A node listening for SIP that registers `user` at `server`.
    static func node(_ f: Fixture, _ user: String, tone: Double, password: String? = nil, expires: Duration = .seconds(3600),
                     server: KamailioServer) async throws -> CallNode {
        let node = try await f.node(user, input: .tone(tone), output: .wav(f.path("\(user)-out.wav")), acceptUnknown: true, keyExchange: .sdes)
        var settings = SIPListenSettings(host: "127.0.0.1", port: SIPCallTests.freePort(), user: user)
        settings.registration = SIPRegistrationSettings(addressOfRecord: "sip:\(user)@\(domain)", registrar: server.uri,
                                                        password: password ?? "\(user)-secret", expires: expires, retryAfter: .seconds(1))
        try await node.listenSIP(settings)
        return node
    }

    static func registered(_ events: AsyncStream<NodeEvent>, _ user: String) async throws {
        let event = try await TwoNodeTests.next(events) { if case .sipRegistration = $0 { true } else { false } }
        guard case let .sipRegistration(.registered(aor, expires)) = event else {
            throw TestFailure("\(user) did not register: \(event)")
        }
        #expect(aor == "sip:\(user)@\(domain)" && expires > .zero)
    }

    /// Alice and Bob register; Alice calls Bob by his address of record through the registrar
    /// (her INVITE challenged with 407 and answered); each hears the other.
    @Test func twoNodesRegisterAndReachEachOtherByAddressOfRecord() async throws {
        let f = try Fixture()
        let server = try Self.registrar(f)
        defer { server.stop() }
        let alice = try await Self.node(f, "alice", tone: 440, server: server)
        let bob = try await Self.node(f, "bob", tone: 660, server: server)
        let aliceEvents = alice.events(), bobEvents = bob.events()
        // The registration may have finished before the subscription: ask, else wait.
        if case .registered = await alice.sipRegistration {} else { try await Self.registered(aliceEvents, "alice") }
        if case .registered = await bob.sipRegistration {} else { try await Self.registered(bobEvents, "bob") }

        let call = try await alice.call(.sip("sip:bob@\(Self.domain)"))
        guard case let .incoming(bobCall, _, _, _) = try await TwoNodeTests.next(bobEvents, where: { if case .incoming = $0 { true } else { false } })
        else { return }
        #expect(bob.handle(of: bobCall) == "sip:alice@\(Self.domain)", "Bob sees Alice's address of record")
        let bobHeard = try await SIPCallTests.hearing(bobEvents)
        let aliceHeard = try await SIPCallTests.hearing(aliceEvents)
        #expect(bobHeard.packetsLost == 0 && aliceHeard.packetsLost == 0)
        try await alice.hangUp(call)
        _ = try await TwoNodeTests.next(bobEvents) { if case .ended(bobCall, .remoteEnded, _, _) = $0 { true } else { false } }
        await alice.shutdown()
        await bob.shutdown()
        server.stop()  // its log is complete once it has stopped
        // Alice's INVITE was challenged (407) and sent again with her credentials.
        #expect(server.logText().components(separatedBy: "request INVITE sip:bob@\(Self.domain)").count - 1 == 2,
                "\(server.logText().suffix(1500))")
        let heardByBob = try WAV.read(path: f.path("bob-out.wav")).samples
        #expect(Goertzel.power(of: 440, in: heardByBob) > 10 * Goertzel.power(of: 660, in: heardByBob))
    }

    /// The registrar restarts and forgets every binding: a call to the node's address of
    /// record gets 480 until the node's next refresh, which is challenged afresh and answered;
    /// then calls reach it again.
    @Test func aNodeRegistersAgainAfterTheRegistrarRestarts() async throws {
        let f = try Fixture()
        let server = try Self.registrar(f)
        defer { server.stop() }
        let alice = try await Self.node(f, "alice", tone: 440, expires: .seconds(6), server: server)
        let bob = try await Self.node(f, "bob", tone: 660, server: server)
        let aliceEvents = alice.events(), bobEvents = bob.events()
        if case .registered = await alice.sipRegistration {} else { try await Self.registered(aliceEvents, "alice") }
        try server.restart()
        let lost = try await bob.call(.sip("sip:alice@\(Self.domain)"))
        guard case let .ended(_, reason, detail, _) = try await TwoNodeTests.next(bobEvents, where: { if case .ended(lost, _, _, _) = $0 { true } else { false } })
        else { return }
        #expect(reason == .failed && detail?.contains("480") == true, "\(reason) \(detail ?? "-")")
        // Alice's refresh comes within half her 6 s; Bob tries until a call rings there.
        let deadline = ContinuousClock.now + .seconds(15)
        var reached = false
        while !reached && ContinuousClock.now < deadline {
            let attempt = try await bob.call(.sip("sip:alice@\(Self.domain)"))
            let outcome = try await TwoNodeTests.next(bobEvents) {
                switch $0 {
                case .connected(attempt, _), .ended(attempt, _, _, _): true
                default: false
                }
            }
            if case .connected = outcome { reached = true } else { try await Task.sleep(for: .milliseconds(500)) }
        }
        #expect(reached, "no call reached Alice after the registrar restarted")
        #expect(await alice.sipRegistration.map { if case .registered = $0 { true } else { false } } == true)
        await alice.shutdown()
        await bob.shutdown()
    }

    /// A wrong password: the registrar's 403 is reported (and tried again later), never a loop
    /// of challenges.
    @Test func aWrongPasswordIsReportedAndRetried() async throws {
        let f = try Fixture()
        let server = try Self.registrar(f)
        defer { server.stop() }
        let node = try await f.node("alice", keyExchange: .sdes)
        let events = node.events()
        var settings = SIPListenSettings(host: "127.0.0.1", port: SIPCallTests.freePort(), user: "alice")
        settings.registration = SIPRegistrationSettings(addressOfRecord: "sip:alice@\(Self.domain)", registrar: server.uri,
                                                        password: "not-her-password", retryAfter: .seconds(1))
        try await node.listenSIP(settings)
        let event = try await TwoNodeTests.next(events) { if case .sipRegistration = $0 { true } else { false } }
        guard case let .sipRegistration(.failed(aor, status, reason, retry)) = event else {
            Issue.record("not a failure: \(event)")
            return
        }
        #expect(aor == "sip:alice@\(Self.domain)" && status == 403 && reason.contains("Wrong password") && retry == .seconds(1))
        #expect(SIPRegistrationState.failed(addressOfRecord: aor, status: status, reason: reason, retryIn: retry).description
            .contains("check the user name and password"))
        // Tried again after the wait, refused again: the next wait is twice as long.
        let again = try await TwoNodeTests.next(events) { if case .sipRegistration = $0 { true } else { false } }
        #expect(again == .sipRegistration(.failed(addressOfRecord: aor, status: 403, reason: reason, retryIn: .seconds(2))), "\(again)")
        await node.shutdown()
    }

    /// baresip registers at the same registrar and calls a node by its address of record; the
    /// node hears baresip's tone and baresip the node's.
    @Test func aSoftphoneCallsARegisteredNodeByItsAddressOfRecord() async throws {
        let f = try Fixture()
        let server = try Self.registrar(f)
        defer { server.stop() }
        let alice = try await Self.node(f, "alice", tone: 660, server: server)
        #expect(await server.waitForLog("registered sip:alice@\(Self.domain)", timeout: .seconds(10)))
        let phone = f.path("baresip"), phonePort = FreePort.udpAndTCPWithTLSNext()
        try SIPInteropTests.baresip(in: phone, port: phonePort, mediaEncryption: "", codec: "PCMU/8000")
        let account = "<sip:carol@\(Self.domain)>;auth_pass=carol-secret;outbound=\"\(server.uri);transport=udp\";regint=3600;"
            + "answermode=auto;audio_codecs=PCMU/8000\n"
        try account.write(toFile: phone + "/accounts", atomically: true, encoding: .utf8)
        let events = alice.events()
        let baresip = try ChildProcess("/usr/bin/baresip", ["-f", phone, "-4", "-e", "/dial sip:alice@\(Self.domain)", "-t", "12"],
                                       output: f.path("baresip.log"), nullStdin: true)
        defer { baresip.stop() }
        guard case let .incoming(call, _, _, _) = try await TwoNodeTests.next(events, where: { if case .incoming = $0 { true } else { false } })
        else { return }
        #expect(alice.handle(of: call) == "sip:carol@\(Self.domain)")
        let heard = try await SIPCallTests.hearing(events, beyond: 100)
        #expect(heard.encoding == .pcmu)
        try await alice.hangUp(call)
        _ = try await TwoNodeTests.next(events) { if case .ended(call, .localEnded, _, _) = $0 { true } else { false } }
        await alice.shutdown()
        baresip.stop()
        #expect(SIPInteropTests.holds(try WAV.read(path: f.path("alice-out.wav")).samples, 550, over: 660), "the node did not hear baresip")
        #expect(SIPInteropTests.holds(try SIPInteropTests.baresipHeard(in: phone), 660, over: 550), "baresip did not hear the node")
    }

    /// `callnode listen --sip-register`: the password from the environment or a file (never a
    /// flag); without one, a clear error before anything starts; registered, it says so.
    @Test func theCommandLineRegistersWithThePasswordFromTheEnvironmentOrAFile() async throws {
        let f = try Fixture()
        let server = try Self.registrar(f)
        defer { server.stop() }
        let port = String(SIPCallTests.freePort())
        let arguments = ["listen", "--home", f.path("cli"), "--listen", "127.0.0.1:0", "--sip", "127.0.0.1:" + port,
                         "--sip-register", "sip:bob@\(Self.domain)", "--sip-registrar", server.uri]
        let missing = try await CommandLineTests.run(arguments, log: f.path("missing.log"))
        #expect(missing.status == 64 && missing.output.contains("needs its password: set CALLNODE_SIP_PASSWORD"), "\(missing.output)")
        try "bob-secret\n".write(toFile: f.path("password"), atomically: true, encoding: .utf8)
        for (extra, environment) in [(["--sip-password-file", f.path("password")], [String: String]()), ([], ["CALLNODE_SIP_PASSWORD": "bob-secret"])] {
            let log = f.path("listen-\(extra.count).log")
            let node = try ChildProcess(try BuildProducts.executable("callnode"), arguments + extra, output: log, environment: environment)
            defer { node.stop() }
            let line = try await CommandLineTests.waitForLine(in: log, process: node) { $0.contains("SIP: registered") || $0.contains("failed") }
            #expect(line.contains("SIP: registered as sip:bob@\(Self.domain)"), "\(line)")
            node.stop()
            #expect(!((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("bob-secret"), "the password was printed")
        }
    }
}
}
