import CallNode
import CallNodeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Several `callnode listen` processes behind Kamailio's dispatcher, with the configuration an
/// operator runs (`contrib/kamailio/kamailio.cfg`): callers dial one SIP address and the calls
/// are spread over the nodes; a node killed mid-run loses its calls and later calls go to the
/// others; a node drained (SIGTERM with `--drain-grace`) finishes its call, takes no new one
/// and exits 0. Each node auto-answers into per-call recordings; each caller plays its own
/// tone, so a recording says whose call it holds.
extension RealTimeTests {
@Suite(.serialized, .enabled(if: KamailioServer.isInstalled, "needs kamailio (scripts/bootstrap installs it)"))
struct SIPScaleOutTests {
    typealias Fixture = TwoNodeTests.Fixture

    static let configuration = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("contrib/kamailio/kamailio.cfg").path

    /// One node of the service: its process, `--json` log, SIP port and recordings directory.
    struct ServiceNode {
        let name: String
        let process: BedProcess
        let sipPort: Int
        let recordings: String

        var connectedCalls: Int { process.events("connected").count }
        var endedCalls: [[String: Any]] { process.events("ended") }

        /// The dominant tone of each recording this node made.
        func recordedTones(among tones: [Double]) throws -> [Double] {
            let files = (try? FileManager.default.contentsOfDirectory(atPath: recordings).filter { $0.hasSuffix(".wav") }.sorted()) ?? []
            return try files.map { file in
                // A G.711 call's recording is at 8 kHz (what the call carried): its second second.
                let (format, samples) = try WAV.read(path: recordings + "/" + file)
                let rate = format.sampleRate
                let middle = samples.count > 2 * rate ? Array(samples[rate..<2 * rate]) : samples
                return tones.max { Goertzel.power(of: $0, in: middle[...], rate: Double(rate)) < Goertzel.power(of: $1, in: middle[...], rate: Double(rate)) }!
            }
        }
    }

    /// A port handed out free can still be taken by another process before the node binds it;
    /// the node then exits saying so, and starts again on other ports.
    static func startNode(_ f: Fixture, _ name: String, extra: [String] = []) async throws -> ServiceNode {
        try await FreePort.startRetrying { attempt in
            let sipPort = FreePort.udpAndTCP(), recordings = f.path(name + "-recordings")
            let log = f.path(name + (attempt == 1 ? "" : "-\(attempt)") + ".log")
            let child = try ChildProcess(try BuildProducts.executable("callnode"), [
                "listen", "--home", f.path(name), "--listen", "127.0.0.1:\(FreePort.udpAndTCP())", "--sip", "127.0.0.1:\(sipPort)",
                "--sip-user", "service", "--auto-answer", "--accept-unknown", "--input", "silence", "--output", "wav:\(recordings)/",
                "--max-calls", "4", "--json",
            ] + extra, output: log, nullStdin: true)
            let process = BedProcess(child: child, log: log)
            do {
                try await process.waitFor("sip", timeout: .seconds(30))
            } catch where !child.isRunning && process.text.contains("cannot listen") {
                throw FreePort.Taken("\(name) could not listen: \(process.text)")
            }
            return ServiceNode(name: name, process: process, sipPort: sipPort, recordings: recordings)
        }
    }

    /// Kamailio with the operator's configuration, the nodes in its dispatcher list, probing
    /// every second and failing over after 1.5 s of silence; with `tlsPort`, TLS towards callers
    /// there too (`WITH_TLS`, a certificate made with openssl).
    static func startKamailio(_ f: Fixture, nodes: [ServiceNode], tlsPort: Int? = nil) throws -> KamailioServer {
        let port = FreePort.udpAndTCP()
        let list = f.path("dispatcher.list")
        try nodes.map { "1 sip:127.0.0.1:\($0.sipPort)\n" }.joined().write(toFile: list, atomically: true, encoding: .utf8)
        var defines = [
            "LISTEN=udp:127.0.0.1:\(port)", "LISTEN_TCP=tcp:127.0.0.1:\(port)", "DISPATCHER_LIST=\"\(list)\"",
            "PROBE_INTERVAL=1", "NODE_TIMEOUT_MS=1500",
        ]
        if let tlsPort {
            let made = try ChildProcess.run("/usr/bin/openssl", [
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f.path("proxy.key"),
                "-out", f.path("proxy.pem"), "-days", "2", "-subj", "/CN=127.0.0.1",
            ], output: f.path("openssl.log"))
            guard made == 0 else { throw TestFailure("openssl could not make the proxy's certificate") }
            try """
                [server:default]
                method = TLSv1.2+
                verify_certificate = no
                require_certificate = no
                private_key = \(f.path("proxy.key"))
                certificate = \(f.path("proxy.pem"))

                [client:default]
                method = TLSv1.2+
                verify_certificate = no
                require_certificate = no

                """.write(toFile: f.path("tls.cfg"), atomically: true, encoding: .utf8)
            defines += ["WITH_TLS", "TLS_LISTEN=tls:127.0.0.1:\(tlsPort)", "TLS_CONFIG=\"\(f.path("tls.cfg"))\""]
        }
        let kamailio = try KamailioServer(directory: f.path("kamailio"), port: port, configuration: Self.configuration, defines: defines)
        try kamailio.start()
        return kamailio
    }

    static var hasKamailioTLS: Bool {
        FileManager.default.fileExists(atPath: "/usr/lib/x86_64-linux-gnu/kamailio/modules/tls.so")
            || FileManager.default.fileExists(atPath: "/usr/lib/aarch64-linux-gnu/kamailio/modules/tls.so")
    }

    /// A caller reaches the service over TLS (`WITH_TLS`); Kamailio carries the call on to a
    /// node over UDP, and the caller and the node hear each other.
    @Test(.enabled(if: Self.hasKamailioTLS, "needs kamailio-tls-modules (scripts/bootstrap installs it)"))
    func aCallerReachesTheServiceOverTLS() async throws {
        let f = try Fixture()
        let node = try await Self.startNode(f, "node1")
        defer { node.process.child.stop() }
        let tlsPort = FreePort.udpAndTCP()
        let kamailio = try Self.startKamailio(f, nodes: [node], tlsPort: tlsPort)
        defer { kamailio.stop() }
        let caller = try await f.node("caller", input: .tone(700), keyExchange: .sdes)
        var settings = SIPListenSettings(host: "127.0.0.1", port: FreePort.udpAndTCP(), user: "caller")
        settings.tlsPort = FreePort.udpAndTCP()
        try await caller.listenSIP(settings)
        let setup = try await Self.call(caller, "sip:service@127.0.0.1:\(tlsPort);transport=tls", seconds: 2)
        #expect(setup != nil, "the call over TLS did not connect: \(kamailio.logText().suffix(800))")
        #expect(node.connectedCalls == 1)
        await caller.shutdown()
        node.process.child.stop()
        _ = try await node.process.exit(timeout: .seconds(40))
        #expect(try node.recordedTones(among: [500, 700, 900]) == [700])
        // The recording is named after the SIP caller, as Recents names it.
        let files = try FileManager.default.contentsOfDirectory(atPath: node.recordings)
        #expect(files.count == 1 && files[0].contains("_sip-caller-127-0-0-1-"), "\(files)")
    }

    /// A caller that plays `tone`, speaking SIP on a port of its own.
    static func caller(_ f: Fixture, _ name: String, tone: Double) async throws -> CallNode {
        let node = try await f.node(name, input: .tone(tone), keyExchange: .sdes)
        try await node.listenSIP(SIPListenSettings(host: "127.0.0.1", port: FreePort.udpAndTCP(), user: name))
        return node
    }

    /// Calls the service from `caller` and hangs up `seconds` after it connects; the time from
    /// the dial to the connection, or nil when the call did not connect.
    static func call(_ caller: CallNode, _ service: String, seconds: Double) async throws -> Duration? {
        let events = caller.events()
        let started = ContinuousClock.now
        let call = try await caller.call(.sip(service))
        let outcome = try await TwoNodeTests.next(events, within: .seconds(20)) {
            switch $0 {
            case .connected(call, _), .ended(call, _, _, _): true
            default: false
            }
        }
        guard case .connected = outcome else { return nil }
        let setup = ContinuousClock.now - started
        try await Task.sleep(for: .milliseconds(Int64(seconds * 1000)))
        try await caller.hangUp(call)
        _ = try await TwoNodeTests.next(events) { if case .ended(call, _, _, _) = $0 { true } else { false } }
        return setup
    }

    /// A listening node stopped (SIGTERM) while its calls are up ends each one and reports
    /// each end in its JSON before it exits: an operator's log misses no call's end.
    @Test func aNodeStoppedInTheMiddleOfItsCallsReportsEachEnd() async throws {
        let f = try Fixture()
        let node = try await Self.startNode(f, "stopped")
        defer { node.process.child.stop() }
        let callers = [try await Self.caller(f, "first", tone: 500), try await Self.caller(f, "second", tone: 700)]
        for caller in callers {
            let events = caller.events()
            let call = try await caller.call(.sip("sip:service@127.0.0.1:\(node.sipPort)"))
            _ = try await TwoNodeTests.next(events, within: .seconds(20)) { if case .connected(call, _) = $0 { true } else { false } }
        }
        for _ in 0..<200 where node.connectedCalls < 2 { try await Task.sleep(for: .milliseconds(50)) }
        #expect(node.connectedCalls == 2)
        node.process.child.stop()
        #expect(try await node.process.exit(timeout: .seconds(40)) == 0, "\(node.process.text.suffix(500))")
        #expect(node.endedCalls.count == 2, "\(node.endedCalls.count) of 2 calls' ends reported: \(node.process.text.suffix(800))")
        for caller in callers { await caller.shutdown() }
    }

    @Test func callsAreSpreadOverTheNodesAndAKilledNodesCallsGoElsewhere() async throws {
        let f = try Fixture()
        var nodes: [ServiceNode] = []
        for name in ["node1", "node2", "node3"] { nodes.append(try await Self.startNode(f, name)) }
        defer { for node in nodes { node.process.child.stop() } }
        let kamailio = try Self.startKamailio(f, nodes: nodes)
        defer { kamailio.stop() }
        let service = "sip:service@127.0.0.1:\(kamailio.port)"
        let tones: [Double] = [500, 700, 900]
        var callers: [CallNode] = []
        for (index, tone) in tones.enumerated() { callers.append(try await Self.caller(f, "caller\(index)", tone: tone)) }

        // Wave 1: three callers at once; round robin gives each node one call.
        let first = try await withThrowingTaskGroup(of: Duration?.self) { group in
            for caller in callers { group.addTask { try await Self.call(caller, service, seconds: 2.5) } }
            return try await group.reduce(into: [Duration?]()) { $0.append($1) }
        }
        #expect(first.allSatisfy { $0 != nil }, "a call of the first wave did not connect: \(first)")
        for node in nodes { #expect(node.connectedCalls == 1, "\(node.name) answered \(node.connectedCalls) calls") }

        // A node dies (SIGKILL: no BYE, no 503, its port closed): the next calls go to the two
        // others, the first of them after Kamailio's 1.5 s without an answer.
        kill(nodes[1].process.child.pid, SIGKILL)
        _ = await nodes[1].process.child.wait()
        var afterKill: [Duration] = []
        for caller in callers {
            let setup = try await Self.call(caller, service, seconds: 1.5)
            #expect(setup != nil, "a call after the kill did not connect")
            if let setup { afterKill.append(setup) }
        }
        #expect(nodes[1].connectedCalls == 1, "the killed node answered after its death")
        #expect(nodes[0].connectedCalls + nodes[2].connectedCalls == 5, "\(nodes[0].connectedCalls) + \(nodes[2].connectedCalls)")
        print("scale-out: setup after a node was killed: \(afterKill.map { "\($0)" }.joined(separator: ", "))")
        #expect(await kamailio.waitForLog("left out until a probe answers 200") || kamailio.logText().contains("is down"),
                "Kamailio never marked the killed node down")

        for caller in callers { await caller.shutdown() }
        // Each live node's recordings: one per call it answered, each holding one caller's tone;
        // every caller's calls are found (three each), and the nodes' own counts add up.
        for node in [nodes[0], nodes[2]] {
            node.process.child.stop()
            #expect(try await node.process.exit(timeout: .seconds(40)) == 0, "\(node.process.text.suffix(500))")
            #expect(node.endedCalls.count == node.connectedCalls, "\(node.name): \(node.endedCalls.count) ended, \(node.connectedCalls) connected")
        }
        var heard: [Double] = []
        for node in nodes { heard += try node.recordedTones(among: tones) }
        #expect(heard.count == 6, "\(heard.count) recordings for 6 answered calls")
        for tone in tones { #expect(heard.filter { $0 == tone }.count == 2, "caller at \(tone) Hz: \(heard)") }
    }

    @Test func aDrainedNodeFinishesItsCallTakesNoNewOneAndExitsCleanly() async throws {
        let f = try Fixture()
        var nodes: [ServiceNode] = []
        for name in ["node1", "node2"] { nodes.append(try await Self.startNode(f, name, extra: ["--drain-grace", "30"])) }
        defer { for node in nodes { node.process.child.stop() } }
        let kamailio = try Self.startKamailio(f, nodes: nodes)
        defer { kamailio.stop() }
        let service = "sip:service@127.0.0.1:\(kamailio.port)"
        let long = try await Self.caller(f, "long", tone: 500), later = try await Self.caller(f, "later", tone: 900)

        // A long call lands on one node; that node is told to stop (SIGTERM) while it runs.
        let longCall = Task { try await Self.call(long, service, seconds: 6) }
        var drained: ServiceNode?
        for _ in 0..<100 where drained == nil {
            drained = nodes.first { $0.connectedCalls == 1 }
            if drained == nil { try await Task.sleep(for: .milliseconds(50)) }
        }
        let draining = try #require(drained, "the long call reached no node")
        let other = nodes.first { $0.name != draining.name }!
        kill(draining.process.child.pid, SIGTERM)
        try await draining.process.waitFor("draining", timeout: .seconds(5))

        // New calls go to the other node: refused with 503 by the draining one (or left out
        // after its probe said 503), never answered there.
        for _ in 0..<3 {
            #expect(try await Self.call(later, service, seconds: 1) != nil, "a call during the drain did not connect")
        }
        #expect(draining.connectedCalls == 1, "the draining node took a new call")
        #expect(other.connectedCalls == 3)
        // The long call ran to its end (the caller hung up after 6 s), then the node exited 0.
        #expect(try await longCall.value != nil)
        #expect(try await draining.process.exit(timeout: .seconds(20)) == 0, "\(draining.process.text.suffix(800))")
        let ended = draining.endedCalls.first
        #expect(ended?["reason"] as? String == "remoteEnded", "\(ended ?? [:])")
        #expect((ended?["duration_s"] as? Double ?? 0) > 5.5, "the drained call was cut short: \(ended ?? [:])")
        #expect(draining.process.events("drained").first?["hung_up"] as? Int == 0)
        #expect(try draining.recordedTones(among: [500, 900]) == [500])
        await long.shutdown()
        await later.shutdown()
    }
}
}
