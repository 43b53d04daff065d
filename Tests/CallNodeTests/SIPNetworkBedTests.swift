import CallNode
import CallNodeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// ICE with a real SIP softphone across a NAT, in the network test bed: baresip (its `ice` and
/// `dtls_srtp` modules, STUN from the bed's coturn) on the public router while a node behind
/// NAT A calls it, and baresip behind NAT B calling a node on the router. Without ICE neither
/// call has media (the side behind the NAT names its private address, and baresip sends only
/// where the SDP says); with it, the pair is a server-reflexive candidate, DTLS-SRTP keys the
/// media, and each side hears the other's tone.
extension NetworkBeds {
@Suite(.serialized, .enabled(if: NetworkBed.isAvailable && FileManager.default.isExecutableFile(atPath: "/usr/bin/baresip"),
                             "needs root, network namespaces and baresip"))
struct SIPNetworkBedTests {
    static let baresipPort = 5070, nodeSIPPort = 5080, nodeListenPort = 7610

    /// What the node's `--json` said about the call's media: its selected pair and its security.
    static func expectICEAndDTLS(_ node: BedProcess, localType: String, remoteType: String) {
        let pair = node.events("selected-pair").last
        #expect(pair?["ice"] as? Bool == true, "\(pair ?? [:])")
        #expect(pair?["local_type"] as? String == localType && pair?["remote_type"] as? String == remoteType, "\(pair ?? [:])")
        let secured = node.events("secured").last
        #expect(secured?["key_exchange"] as? String == "dtls", "\(secured ?? [:])")
        let stats = node.events("stats").last
        #expect((stats?["packets_received"] as? Int ?? 0) > 100, "\(stats ?? [:])")
    }

    /// A node behind NAT A (`--stun`, with ICE or without) calls baresip on the router for 5 s,
    /// recording what it hears; tried again while baresip is not listening yet (its first
    /// INVITE may find nothing there). Its process, once a call connected and ended.
    static func callBaresip(from bed: Bed, ice: Bool, recording: String) async throws -> BedProcess {
        let alice = try await bed.identity("alice")
        for attempt in 0..<10 {
            let process = try bed.start("a", [
                "call", "sip:b@\(NetworkBed.publicAddress):\(Self.baresipPort)", "--home", alice.home,
                "--listen", "10.10.1.2:\(Self.nodeListenPort)", "--sip", "10.10.1.2:\(Self.nodeSIPPort)",
                "--stun", NetworkBed.stun, "--input", "tone:660", "--output", "wav:" + recording, "--duration", "5", "--json",
            ] + (ice ? ["--sip-ice"] : []), log: "alice-\(attempt).log")
            if try await process.exit(timeout: .seconds(40)) == 0 { return process }
            try await Task.sleep(for: .milliseconds(300))
        }
        throw TestFailure("the node's call to baresip never connected")
    }

    @Test func aNodeBehindNATCallsBaresipWithICEAndDTLS() async throws {
        let bed = try await Bed("sip-ice-out")
        defer { bed.down() }
        let phone = bed.directory + "/baresip"
        try RealTimeTests.SIPInteropTests.baresip(in: phone, host: NetworkBed.publicAddress, port: Self.baresipPort, mediaEncryption: "dtls_srtp",
                                    stun: NetworkBed.stun)
        let baresip = try bed.start("router", program: "/usr/bin/baresip", ["-f", phone, "-4", "-t", "20"], log: "baresip.log")
        let recording = bed.directory + "/alice-heard.wav"
        let caller = try await Self.callBaresip(from: bed, ice: true, recording: recording)
        Self.expectICEAndDTLS(caller, localType: "srflx", remoteType: "host")
        baresip.child.stop()
        #expect(RealTimeTests.SIPInteropTests.holds(try WAV.read(path: recording).samples, 550, over: 660), "the node did not hear baresip's 550 Hz")
        #expect(RealTimeTests.SIPInteropTests.holds(try RealTimeTests.SIPInteropTests.baresipHeard(in: phone), 660, over: 550), "baresip did not hear the node's 660 Hz")
    }

    /// Without ICE, through a NAT: a node behind NAT A calls baresip on the router offering
    /// plain RTP (no `--sip-ice`) with `--stun`; its offer names the address the bed's coturn
    /// saw its RTP socket come from (NAT A's), so baresip, which sends only where the SDP says,
    /// reaches it: each side hears the other's tone.
    @Test func aNodeBehindNATOffersItsStunMappedAddressWithoutICE() async throws {
        let bed = try await Bed("sip-stun-plain")
        defer { bed.down() }
        let phone = bed.directory + "/baresip"
        // DTLS-SRTP, baresip its client: its first ClientHello meets NAT A before anything of the
        // node's went its way and is dropped; the node's STUN Binding Indication to it opens the
        // way, and its retransmission gets through.
        try RealTimeTests.SIPInteropTests.baresip(in: phone, host: NetworkBed.publicAddress, port: Self.baresipPort, mediaEncryption: "dtls_srtp")
        // baresip sends from the public address its SDP names, as a server on the Internet does
        // (the router would otherwise pick its address on NAT A's link, which no mapping expects).
        let route = try bed.start("router", program: "/usr/sbin/ip", ["route", "replace", "100.64.1.0/24", "dev", "to-a", "proto", "kernel",
                                                                      "scope", "link", "src", NetworkBed.publicAddress], log: "route.log")
        #expect(try await route.exit(timeout: .seconds(10)) == 0)
        let baresip = try bed.start("router", program: "/usr/bin/baresip", ["-f", phone, "-4", "-t", "20"], log: "baresip.log")
        let recording = bed.directory + "/alice-heard.wav"
        let caller = try await Self.callBaresip(from: bed, ice: false, recording: recording)
        let pair = caller.events("selected-pair").last
        #expect(pair?["ice"] as? Bool == false, "\(pair ?? [:])")
        let stats = caller.events("stats").last
        #expect((stats?["packets_received"] as? Int ?? 0) > 100, "baresip's RTP did not reach the node behind its NAT: \(stats ?? [:])")
        baresip.child.stop()
        #expect(RealTimeTests.SIPInteropTests.holds(try WAV.read(path: recording).samples, 550, over: 660), "the node did not hear baresip's 550 Hz")
        #expect(RealTimeTests.SIPInteropTests.holds(try RealTimeTests.SIPInteropTests.baresipHeard(in: phone), 660, over: 550), "baresip did not hear the node's 660 Hz")
    }

    /// Both ends behind NATs, registered with Kamailio on the public side, which keeps the
    /// addresses the registrations came from but stays out of the dialogs (no Record-Route):
    /// ACK, BYE and the rest go straight between baresip behind NAT A and a node behind NAT B,
    /// plain RTP (no ICE) on STUN-mapped addresses. The node calls baresip by its address of
    /// record and hangs up; both NATs forget every flow (conntrack -F); the node's keep-alive
    /// opens its binding again, so baresip's call to the node's address of record reaches it;
    /// baresip hangs up. Each side hears the other's tone in both calls.
    ///
    /// NAT A forwards baresip's SIP port, as a phone's router is often told to: the node's ACK
    /// to baresip's 200 comes straight from the node, and baresip never sent anything the node's
    /// way that would let it in. The node behind NAT B has no such help: as it answers, it sends
    /// to the caller's address itself (and every keep-alive interval while the call lasts).
    @Test func phonesBehindTwoNATsCallEachOtherThroughARegistrarThatStaysOutOfTheDialog() async throws {
        let bed = try await Bed("sip-kamailio-nat")
        defer { bed.down() }
        let registrar = "\(NetworkBed.publicAddress):5060"
        let config = try KamailioServer.config(port: 5060, domain: NetworkBed.publicAddress,
                                               users: ["alice": "alice-secret", "bob": "bob-secret"],
                                               address: NetworkBed.publicAddress, recordRoute: false, natHelper: true)
        try FileManager.default.createDirectory(atPath: bed.directory + "/kamailio", withIntermediateDirectories: true)
        try config.write(toFile: bed.directory + "/kamailio/kamailio.cfg", atomically: true, encoding: .utf8)
        let kamailio = try bed.start("router", program: KamailioServer.executable, [
            "-f", bed.directory + "/kamailio/kamailio.cfg", "-DD", "-E", "-Y", bed.directory + "/kamailio",
            "-P", bed.directory + "/kamailio/kamailio.pid", "-m", "32", "-M", "8",
        ], log: "kamailio.log")
        try await kamailio.waitForLine(timeout: .seconds(20)) { $0.contains("Listening on") }
        try await bed.control(["forward", "a", String(Self.baresipPort)])

        let phone = bed.directory + "/baresip", console = 5555
        try RealTimeTests.SIPInteropTests.baresip(in: phone, host: "10.10.1.2", port: Self.baresipPort, stun: NetworkBed.stun, console: console,
                                    account: "<sip:alice@\(NetworkBed.publicAddress)>;auth_pass=alice-secret;outbound=\"sip:\(registrar)\";"
                                        + "regint=600;answermode=auto;medianat=stun;stunserver=stun:\(NetworkBed.stun)")
        let baresip = try bed.start("a", program: "/usr/bin/baresip", ["-f", phone, "-4"], log: "baresip.log")
        try await kamailio.waitForLine(timeout: .seconds(20)) { $0.contains("registered sip:alice@") }
        func baresipCommand(_ command: String) async throws {
            let sent = try bed.start("a", program: "/bin/bash", ["-c", "echo '\(command)' > /dev/udp/127.0.0.1/\(console)"], log: "cons.log")
            #expect(try await sent.exit(timeout: .seconds(10)) == 0)
        }
        func baresipEnded(_ count: Int) async throws {
            try await baresip.waitForLine(timeout: .seconds(20)) { _ in baresip.text.components(separatedBy: "terminated (duration").count > count }
        }

        let bob = try await bed.identity("bob")
        try "bob-secret\n".write(toFile: bed.directory + "/bob-password", atomically: true, encoding: .utf8)
        let recordings = bed.directory + "/bob-heard/"
        let node = try bed.start("b", [
            "listen", "--home", bob.home, "--listen", "10.10.2.2:\(Self.nodeListenPort)", "--sip", "10.10.2.2:\(Self.nodeSIPPort)",
            "--sip-register", "sip:bob@\(NetworkBed.publicAddress)", "--sip-registrar", "sip:\(registrar)",
            "--sip-password-file", bed.directory + "/bob-password", "--sip-keepalive", "5",
            "--stun", NetworkBed.stun, "--auto-answer", "--accept-unknown",
            "--input", "tone:660", "--output", "wav:" + recordings, "--calls", "2", "--json",
        ], log: "bob.log")
        try await node.waitFor("sip-registered", timeout: .seconds(30))

        // The node calls baresip's address of record, and hangs up: its BYE must reach baresip.
        let placed = try await bed.callnode(["ctl", "call", "--home", bob.home, "sip:alice@\(NetworkBed.publicAddress)"])
        #expect(placed.status == 0, "\(placed.output)")
        let first = try await node.waitFor("connected")
        let firstCall = try #require(first["call"] as? String)
        try await Task.sleep(for: .seconds(4))  // the call's length: tones both ways
        let hungUp = try await bed.callnode(["ctl", "hangup", firstCall, "--home", bob.home])
        #expect(hungUp.status == 0, "\(hungUp.output)")
        try await baresipEnded(1)

        // Both NATs forget everything; the node's next keep-alive opens its way again.
        let keepAlives = { kamailio.text.components(separatedBy: "request OPTIONS sip:bob@").count - 1 }
        try await bed.control(["forget", "a"])
        try await bed.control(["forget", "b"])
        let before = keepAlives()
        try await kamailio.waitForLine(timeout: .seconds(20)) { _ in keepAlives() > before }

        // baresip calls the node's address of record, and hangs up: its BYE must reach the node.
        try await baresipCommand("/dial sip:bob@\(NetworkBed.publicAddress)")
        try await node.waitForLine(timeout: .seconds(30)) { _ in node.events("connected").count == 2 }
        try await Task.sleep(for: .seconds(4))
        try await baresipCommand("/hangup")
        try await baresipEnded(2)
        #expect(try await node.exit(timeout: .seconds(20)) == 0, "\(node.text)")
        baresip.child.stop()

        let ended = node.events("ended").map { $0["reason"] as? String }
        #expect(ended == ["localEnded", "remoteEnded"], "\(node.events("ended"))")
        for pair in node.events("selected-pair") { #expect(pair["ice"] as? Bool == false, "\(pair)") }
        // The dialogs' requests went straight between the phones: none reached the registrar.
        // Each 200 was acknowledged at once: an ACK that does not arrive makes the answerer
        // repeat its 200, which the registrar relays again (without the node's opening of its
        // way to the caller, baresip's ACKs to it are dropped by NAT B until the call ends).
        let log = kamailio.text.split(separator: "\n")
        #expect(!log.contains { $0.contains("request BYE") }, "a BYE went through the registrar")
        for callee in ["alice", "bob"] {
            let answers = log.filter { $0.contains("reply 200 ") && $0.contains("for INVITE sip:\(callee)@") }
            #expect(answers.count == 1, "\(callee)'s 200 was repeated (its ACK did not arrive): \(answers)")
        }
        let heard = try FileManager.default.contentsOfDirectory(atPath: recordings).filter { $0.hasSuffix(".wav") }
        #expect(heard.count == 2, "\(heard)")
        for file in heard {
            #expect(RealTimeTests.SIPInteropTests.holds(try WAV.read(path: recordings + file).samples, 550, over: 660), "the node did not hear baresip's 550 Hz in \(file)")
        }
        let dumps = try FileManager.default.contentsOfDirectory(atPath: phone + "/snd").filter { $0.hasSuffix("-dec.wav") }.sorted()
        #expect(dumps.count == 2, "\(dumps)")
        for dump in dumps {
            let (format, samples) = try WAV.read(path: phone + "/snd/" + dump)
            let left = format.channels == 2 ? stride(from: 0, to: samples.count, by: 2).map { samples[$0] } : samples
            #expect(RealTimeTests.SIPInteropTests.holds(left, 660, over: 550, rate: format.sampleRate), "baresip did not hear the node's 660 Hz in \(dump)")
        }
    }

    @Test func baresipBehindNATCallsTheNodeWithICEAndDTLS() async throws {
        let bed = try await Bed("sip-ice-in")
        defer { bed.down() }
        let bob = try await bed.identity("bob")
        let recording = bed.directory + "/bob-heard.wav"
        let node = try bed.start("router", [
            "listen", "--home", bob.home, "--listen", "\(NetworkBed.publicAddress):\(Self.nodeListenPort)",
            "--sip", "\(NetworkBed.publicAddress):\(Self.nodeSIPPort)", "--stun", NetworkBed.stun, "--auto-answer", "--accept-unknown",
            // The router's address towards B (its public one sits on loopback, which ICE skips).
            "--bind", "100.64.2.1",
            "--input", "tone:660", "--output", "wav:" + recording, "--calls", "1", "--json",
        ], log: "bob.log")
        try await node.waitFor("listening", timeout: .seconds(30))
        let phone = bed.directory + "/baresip"
        try RealTimeTests.SIPInteropTests.baresip(in: phone, host: "10.10.2.2", port: Self.baresipPort, mediaEncryption: "dtls_srtp", stun: NetworkBed.stun)
        let baresip = try bed.start("b", program: "/usr/bin/baresip",
                                    ["-f", phone, "-4", "-e", "/dial sip:callnode@\(NetworkBed.publicAddress):\(Self.nodeSIPPort)", "-t", "15"],
                                    log: "baresip.log")
        // baresip hangs up when its tone file ends (12 s): the node's BYE would go to the
        // Contact baresip gave, its private address behind the NAT, which nothing routes to.
        #expect(try await node.exit(timeout: .seconds(40)) == 0, "\(node.text)")
        #expect(node.events("ended").last?["reason"] as? String == "remoteEnded", "\(node.events("ended"))")
        Self.expectICEAndDTLS(node, localType: "host", remoteType: "srflx")
        baresip.child.stop()
        #expect(RealTimeTests.SIPInteropTests.holds(try WAV.read(path: recording).samples, 550, over: 660), "the node did not hear baresip's 550 Hz")
        #expect(RealTimeTests.SIPInteropTests.holds(try RealTimeTests.SIPInteropTests.baresipHeard(in: phone), 660, over: 550), "baresip did not hear the node's 660 Hz")
    }
}
}
