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
extension RealTimeTests {
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
        let alice = try bed.identity("alice")
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
        let bed = try Bed("sip-ice-out")
        defer { bed.down() }
        let phone = bed.directory + "/baresip"
        try SIPInteropTests.baresip(in: phone, host: NetworkBed.publicAddress, port: Self.baresipPort, mediaEncryption: "dtls_srtp",
                                    stun: NetworkBed.stun)
        let baresip = try bed.start("router", program: "/usr/bin/baresip", ["-f", phone, "-4", "-t", "20"], log: "baresip.log")
        let recording = bed.directory + "/alice-heard.wav"
        let caller = try await Self.callBaresip(from: bed, ice: true, recording: recording)
        Self.expectICEAndDTLS(caller, localType: "srflx", remoteType: "host")
        baresip.child.stop()
        #expect(SIPInteropTests.holds(try WAV.read(path: recording).samples, 550, over: 660), "the node did not hear baresip's 550 Hz")
        #expect(SIPInteropTests.holds(try SIPInteropTests.baresipHeard(in: phone), 660, over: 550), "baresip did not hear the node's 660 Hz")
    }

    /// Without ICE, through a NAT: a node behind NAT A calls baresip on the router offering
    /// plain RTP (no `--sip-ice`) with `--stun`; its offer names the address the bed's coturn
    /// saw its RTP socket come from (NAT A's), so baresip, which sends only where the SDP says,
    /// reaches it: each side hears the other's tone.
    @Test func aNodeBehindNATOffersItsStunMappedAddressWithoutICE() async throws {
        let bed = try Bed("sip-stun-plain")
        defer { bed.down() }
        let phone = bed.directory + "/baresip"
        // DTLS-SRTP, baresip its client: its first ClientHello meets NAT A before anything of the
        // node's went its way and is dropped; the node's STUN Binding Indication to it opens the
        // way, and its retransmission gets through.
        try SIPInteropTests.baresip(in: phone, host: NetworkBed.publicAddress, port: Self.baresipPort, mediaEncryption: "dtls_srtp")
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
        #expect(SIPInteropTests.holds(try WAV.read(path: recording).samples, 550, over: 660), "the node did not hear baresip's 550 Hz")
        #expect(SIPInteropTests.holds(try SIPInteropTests.baresipHeard(in: phone), 660, over: 550), "baresip did not hear the node's 660 Hz")
    }

    @Test func baresipBehindNATCallsTheNodeWithICEAndDTLS() async throws {
        let bed = try Bed("sip-ice-in")
        defer { bed.down() }
        let bob = try bed.identity("bob")
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
        try SIPInteropTests.baresip(in: phone, host: "10.10.2.2", port: Self.baresipPort, mediaEncryption: "dtls_srtp", stun: NetworkBed.stun)
        let baresip = try bed.start("b", program: "/usr/bin/baresip",
                                    ["-f", phone, "-4", "-e", "/dial sip:callnode@\(NetworkBed.publicAddress):\(Self.nodeSIPPort)", "-t", "15"],
                                    log: "baresip.log")
        // baresip hangs up when its tone file ends (12 s): the node's BYE would go to the
        // Contact baresip gave, its private address behind the NAT, which nothing routes to.
        #expect(try await node.exit(timeout: .seconds(40)) == 0, "\(node.text)")
        #expect(node.events("ended").last?["reason"] as? String == "remoteEnded", "\(node.events("ended"))")
        Self.expectICEAndDTLS(node, localType: "host", remoteType: "srflx")
        baresip.child.stop()
        #expect(SIPInteropTests.holds(try WAV.read(path: recording).samples, 550, over: 660), "the node did not hear baresip's 550 Hz")
        #expect(SIPInteropTests.holds(try SIPInteropTests.baresipHeard(in: phone), 660, over: 550), "baresip did not hear the node's 660 Hz")
    }
}
}
