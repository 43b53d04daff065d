import CallNode
import CallNodeTestSupport
import Foundation
import SIP
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Calls over SIP between two real nodes: sofia-sip's agents on loopback carrying the call
/// core's offer and answer (the caller's in its INVITE, the callee's in its 200 OK), libnice
/// ICE and SRTP beneath, as between nodes on their own signaling.
extension RealTimeTests {
@Suite(.serialized) struct SIPCallTests {
    typealias Fixture = TwoNodeTests.Fixture

    /// Whether `node` has no call left, polled for up to two seconds (a refused call's leg tears
    /// down after its response went out).
    static func noCallsLeft(_ node: CallNode) async throws -> Bool {
        for _ in 0..<100 {
            if await node.liveCalls.isEmpty { return true }
            try await Task.sleep(for: .milliseconds(20))
        }
        return await node.liveCalls.isEmpty
    }

    /// A port free for UDP and TCP (a SIP agent takes both).
    static func freePort() -> Int { FreePort.udpAndTCP() }

    /// Alice and Bob, each listening for SIP on loopback; returns Bob's SIP address too.
    static func nodes(_ f: Fixture, bobAnswers: Bool = true, keyExchange: KeyExchange = .sdes,
                      ice: Bool = false, bobCodecs: [AudioEncoding] = [.opus, .pcmu, .pcma]) async throws -> (CallNode, CallNode, String, String) {
        let alice = try await f.node("alice", input: .tone(440), output: .wav(f.path("alice-out.wav")), keyExchange: keyExchange)
        let bob = try await f.node("bob", input: .tone(660), output: .wav(f.path("bob-out.wav")), autoAnswer: bobAnswers, keyExchange: keyExchange)
        let aliceURI = try await alice.listenSIP(SIPListenSettings(host: "127.0.0.1", port: Self.freePort(), user: "alice", offersICE: ice))
        let bobURI = try await bob.listenSIP(SIPListenSettings(host: "127.0.0.1", port: Self.freePort(), user: "bob", offersICE: ice,
                                                               codecs: bobCodecs))
        return (alice, bob, aliceURI, bobURI)
    }

    static func hearing(_ events: AsyncStream<NodeEvent>, beyond packets: Int = 0) async throws -> MediaStatistics {
        let event = try await TwoNodeTests.next(events) {
            if case let .statistics(_, s) = $0 { s.packetsReceived >= packets + 25 && s.receiveLevel > -40 } else { false }
        }
        guard case let .statistics(_, statistics) = event else { throw TestFailure("not statistics") }
        return statistics
    }

    /// SDES or DTLS keys; plain RTP from one port (what SIP peers get by default) or ICE; Opus,
    /// or G.711 when Bob speaks only that (the re-INVITEs of hold and resume keep it).
    @Test(arguments: [(KeyExchange.sdes, false, AudioEncoding.opus), (.dtls, false, .opus), (.sdes, true, .opus), (.dtls, true, .opus),
                      (.sdes, false, .pcmu)])
    func twoNodesCallOverSIPHearEachOtherHoldAndHangUp(keyExchange: KeyExchange, ice: Bool, codec: AudioEncoding) async throws {
        let f = try Fixture()
        let (alice, bob, aliceURI, bobURI) = try await Self.nodes(f, keyExchange: keyExchange, ice: ice, bobCodecs: [codec])
        let aliceEvents = alice.events(), bobEvents = bob.events(), alicePairs = alice.events()
        let call = try await alice.call(.sip(bobURI))
        guard case let .selectedPair(_, pair) = try await TwoNodeTests.next(alicePairs, where: { if case .selectedPair(call, _) = $0 { true } else { false } })
        else { return }
        #expect(pair.usesICE == ice, "the status line says whether ICE chose the path: \(pair)")
        guard case let .incoming(bobCall, _, name, known) = try await TwoNodeTests.next(bobEvents, where: { if case .incoming = $0 { true } else { false } })
        else { return }
        #expect(name == "alice" && !known, "\(name ?? "-")")
        let bobHeard = try await Self.hearing(bobEvents)
        let aliceHeard = try await Self.hearing(aliceEvents)
        #expect(bobHeard.packetsLost == 0 && aliceHeard.packetsLost == 0)
        #expect(bobHeard.encoding == codec && aliceHeard.encoding == codec)
        // DTMF as RFC 4733 events, on the codec's clock (8 kHz with G.711).
        try await alice.playDTMF(call, "7#")
        _ = try await TwoNodeTests.next(bobEvents) { $0 == .dtmf(bobCall, "7") }
        _ = try await TwoNodeTests.next(bobEvents) { $0 == .dtmf(bobCall, "#") }

        // Hold and resume are re-INVITEs: Bob hears the hold, then audio again.
        try await alice.setHeld(call, true)
        _ = try await TwoNodeTests.next(bobEvents) { $0 == .remoteHold(bobCall, true) }
        try await alice.setHeld(call, false)
        _ = try await TwoNodeTests.next(bobEvents) { $0 == .remoteHold(bobCall, false) }
        let resumed = try #require(await bob.statistics(bobCall))
        #expect(try await Self.hearing(bobEvents, beyond: resumed.packetsReceived).encoding == codec)

        try await alice.hangUp(call)
        guard case let .ended(_, reason, _, _) = try await TwoNodeTests.next(bobEvents, where: { if case .ended(bobCall, _, _, _) = $0 { true } else { false } })
        else { return }
        #expect(reason == .remoteEnded)
        // Bob's Recents name Alice by her SIP address.
        try await bob.store.flush()
        let recent = try #require(try await bob.store.recents().first { $0.id == bobCall })
        #expect(recent.handle == aliceURI)
        await alice.shutdown()
        await bob.shutdown()
        // What each heard was the other's tone.
        let heardByBob = try WAV.read(path: f.path("bob-out.wav")).samples
        let heardByAlice = try WAV.read(path: f.path("alice-out.wav")).samples
        #expect(Goertzel.power(of: 440, in: heardByBob) > 10 * Goertzel.power(of: 660, in: heardByBob))
        #expect(Goertzel.power(of: 660, in: heardByAlice) > 10 * Goertzel.power(of: 440, in: heardByAlice))
    }

    @Test func aSIPCalleeDeclinesOrIsBusyAndACallerHangingUpWhileItRingsCancels() async throws {
        let f = try Fixture()
        var oneCall = ProviderConfiguration(localizedName: "bob")
        oneCall.maximumCallGroups = 1
        oneCall.maximumCallsPerCallGroup = 1
        let alice = try await f.node("alice")
        let bob = try await f.node("bob", autoAnswer: false, provider: oneCall)
        _ = try await alice.listenSIP(SIPListenSettings(host: "127.0.0.1", port: Self.freePort(), user: "alice"))
        let bobURI = try await bob.listenSIP(SIPListenSettings(host: "127.0.0.1", port: Self.freePort(), user: "bob"))
        let aliceEvents = alice.events(), bobEvents = bob.events()

        // Declined: 603.
        let declined = try await alice.call(.sip(bobURI))
        guard case let .incoming(ringing, _, _, _) = try await TwoNodeTests.next(bobEvents, where: { if case .incoming = $0 { true } else { false } })
        else { return }
        _ = try await TwoNodeTests.next(aliceEvents) { if case .ringing(declined, _) = $0 { true } else { false } }
        try await bob.hangUp(ringing)
        _ = try await TwoNodeTests.next(aliceEvents) { $0 == .rejected(declined, .declined) }
        // Bob's declined call is over on his side too before the next one (his one call slot is
        // free only then; the 603 can reach Alice first, and on a loaded machine her next INVITE
        // came while it was still being torn down, and was refused as busy).
        _ = try await TwoNodeTests.next(bobEvents) { if case .ended(ringing, _, _, _) = $0 { true } else { false } }

        // Busy: 486 while another call rings there.
        let first = try await alice.call(.sip(bobURI))
        guard case let .incoming(bobFirst, _, _, _) = try await TwoNodeTests.next(bobEvents, where: {
            if case let .incoming(uuid, _, _, _) = $0 { uuid != ringing } else { false }
        }) else { return }
        let second = try await alice.call(.sip(bobURI))
        _ = try await TwoNodeTests.next(aliceEvents) { $0 == .rejected(second, .busy) }

        // The caller hangs up while it rings: a CANCEL ends it at Bob.
        try await alice.hangUp(first)
        guard case let .ended(_, reason, _, _) = try await TwoNodeTests.next(bobEvents, where: { if case .ended(bobFirst, _, _, _) = $0 { true } else { false } })
        else { return }
        #expect(reason == .remoteEnded || reason == .unanswered, "\(reason)")
        #expect(await bob.liveCalls.isEmpty)
        await alice.shutdown()
        await bob.shutdown()
    }

    /// Offers a node cannot take get a 4xx with the reason, and the node takes the next call.
    @Test func offersTheNodeCannotTakeAreRefusedAndItServesOn() async throws {
        let f = try Fixture()
        let (alice, bob, _, bobURI) = try await Self.nodes(f)
        let port = Int(bobURI.split(separator: ":").last ?? "") ?? 0
        let noMedia = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
        let unknownCodecs = noMedia + "m=audio 40000 RTP/AVP 9 18\r\na=rtpmap:9 G722/8000\r\na=rtpmap:18 G729/8000\r\n"
        let garbage = "this is not SDP at all"
        for sdp in [noMedia, unknownCodecs, garbage] {
            let response = try #require(await SIPProbe.finalResponse(to: SIPProbe.invite(port: port, sdp: sdp), port: port), "no final answer to \(sdp.prefix(20))")
            #expect(response.hasPrefix("SIP/2.0 4"), "\(response.prefix(60))")
        }
        // The refused calls end (the leg's teardown follows the response).
        #expect(try await Self.noCallsLeft(bob))
        // The node still takes a call.
        let events = alice.events()
        let call = try await alice.call(.sip(bobURI))
        _ = try await TwoNodeTests.next(events) { if case .connected(call, _) = $0 { true } else { false } }
        try await alice.hangUp(call)
        await alice.shutdown()
        await bob.shutdown()
    }

    /// Hostile SIP: huge headers, a Content-Length that lies or is not a number, a request
    /// without a Call-ID, a body that is not SDP, SDP without media, bytes that are not SIP at
    /// all. Each request that can be answered is answered (4xx), no call is left of them, and
    /// the node takes the next call.
    @Test func hostileSIPMessagesAreAnsweredAndTheNodeServesOn() async throws {
        let f = try Fixture()
        let (alice, bob, _, bobURI) = try await Self.nodes(f)
        let port = Int(bobURI.split(separator: ":").last ?? "") ?? 0
        let noMedia = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
        // Each a new transaction (its own Call-ID and branch), else it would be a retransmission.
        func plain() -> String { SIPProbe.invite(port: port, sdp: noMedia) }
        let length = "Content-Length: \(noMedia.utf8.count)"
        let hostile: [(name: String, request: String, answer: String)] = [
            ("a 20 000-byte header", plain().replacingOccurrences(of: "Max-Forwards: 70", with: "Max-Forwards: 70\r\nSubject: " + String(repeating: "A", count: 20_000)), "488"),
            ("200 headers", plain().replacingOccurrences(of: "Max-Forwards: 70", with: "Max-Forwards: 70" + String(repeating: "\r\nX-Filler: x", count: 200)), "488"),
            ("a Content-Length past the body", plain().replacingOccurrences(of: length, with: "Content-Length: 5000"), "400"),
            ("a Content-Length that is not a number", plain().replacingOccurrences(of: length, with: "Content-Length: many"), "400"),
            ("no Call-ID", plain().split(separator: "\r\n", omittingEmptySubsequences: false).filter { !$0.hasPrefix("Call-ID") }.joined(separator: "\r\n"), "400"),
            ("a body that is not SDP", SIPProbe.invite(port: port, sdp: String(repeating: "\u{1}\u{2}garbage", count: 50)), "488"),
            ("SDP with no media", plain(), "488"),
        ]
        for (name, request, answer) in hostile {
            let response = await SIPProbe.finalResponse(to: request, port: port)
            #expect(response?.hasPrefix("SIP/2.0 \(answer)") == true, "\(name): \(response?.prefix(60) ?? "no answer")")
        }
        // Not SIP at all: nothing to answer, nothing breaks.
        #expect(await SIPProbe.finalResponse(to: "\u{0}\u{1}\u{2} not a request", port: port) == nil)
        // No call is left of them.
        #expect(try await Self.noCallsLeft(bob))
        // The node still takes a call.
        let events = alice.events()
        let call = try await alice.call(.sip(bobURI))
        _ = try await TwoNodeTests.next(events) { if case .connected(call, _) = $0 { true } else { false } }
        try await alice.hangUp(call)
        await alice.shutdown()
        await bob.shutdown()
    }

    /// SIP over TLS between two nodes: Bob takes TLS on a port of its own (his identity
    /// certificate), Alice calls `;transport=tls` there; the call's media is SDES-SRTP, its keys
    /// inside the TLS. The port speaks nothing but TLS, so a call that connects went over it.
    @Test func twoNodesCallOverSIPOverTLS() async throws {
        let f = try Fixture()
        let alice = try await f.node("alice", input: .tone(440), output: .wav(f.path("alice-out.wav")), keyExchange: .sdes)
        let bob = try await f.node("bob", input: .tone(660), output: .wav(f.path("bob-out.wav")), keyExchange: .sdes)
        var aliceSettings = SIPListenSettings(host: "127.0.0.1", port: Self.freePort(), user: "alice")
        aliceSettings.tlsPort = Self.freePort()
        var bobSettings = SIPListenSettings(host: "127.0.0.1", port: Self.freePort(), user: "bob")
        bobSettings.tlsPort = Self.freePort()
        try await alice.listenSIP(aliceSettings)
        try await bob.listenSIP(bobSettings)
        let bobTLS = try #require(bobSettings.tlsURI)
        #expect(bobTLS.hasSuffix(";transport=tls"))
        let aliceEvents = alice.events(), bobEvents = bob.events(), security = alice.events()
        let call = try await alice.call(.sip(bobTLS))
        guard case let .secured(_, secured) = try await TwoNodeTests.next(security, where: { if case .secured(call, _) = $0 { true } else { false } })
        else { return }
        #expect(secured.keyExchange == .sdes && !secured.unencrypted, "\(secured)")
        let heard = try await Self.hearing(bobEvents)
        #expect(heard.packetsLost == 0)
        _ = try await Self.hearing(aliceEvents)
        try await alice.hangUp(call)
        _ = try await TwoNodeTests.next(bobEvents) { if case .ended(_, .remoteEnded, _, _) = $0 { true } else { false } }
        // The certificate sofia-sip presents is the node's own, its key private to the node.
        let agent = f.path("bob") + "/sip-tls/agent.pem"
        var status = stat()
        #expect(stat(agent, &status) == 0 && status.st_mode & 0o077 == 0, "agent.pem is readable by others")
        await alice.shutdown()
        await bob.shutdown()
    }

    static func options(port: Int) -> String { SIPProbe.request("OPTIONS", port: port, uri: "sip:127.0.0.1:\(port)") }

    /// A proxy's probes: OPTIONS is answered 200 while the node takes calls, 503 with a short
    /// Retry-After while it is at its maximum of calls, and 503 with a long one (and an INVITE
    /// 503 too) once it drains.
    @Test func optionsSayWhetherTheNodeTakesCallsAndADrainingNodeRefusesWith503() async throws {
        let f = try Fixture()
        // Devices of their own (two nodes on one silent input share it: the second to activate
        // would interrupt the first's session).
        let alice = try await f.node("alice", input: .tone(440), keyExchange: .sdes)
        let bob = try await f.node("bob", input: .tone(660), keyExchange: .sdes, maximumCalls: 1)
        try await alice.listenSIP(SIPListenSettings(host: "127.0.0.1", port: Self.freePort(), user: "alice"))
        let port = Self.freePort()
        let bobURI = try await bob.listenSIP(SIPListenSettings(host: "127.0.0.1", port: port, user: "bob"))
        let idle = try #require(await SIPProbe.finalResponse(to: Self.options(port: port), port: port))
        #expect(idle.hasPrefix("SIP/2.0 200"), "\(idle.prefix(80))")
        #expect(!idle.contains("Retry-After"))

        let events = alice.events()
        let call = try await alice.call(.sip(bobURI))
        _ = try await TwoNodeTests.next(events) { if case .connected(call, _) = $0 { true } else { false } }
        let full = try #require(await SIPProbe.finalResponse(to: Self.options(port: port), port: port))
        #expect(full.hasPrefix("SIP/2.0 503") && full.contains("Retry-After: 5"), "\(full.prefix(200))")

        try await alice.hangUp(call)
        _ = try await TwoNodeTests.next(events) { if case .ended(call, _, _, _) = $0 { true } else { false } }
        var answer = ""
        for _ in 0..<50 {
            answer = await SIPProbe.finalResponse(to: Self.options(port: port), port: port) ?? ""
            if answer.hasPrefix("SIP/2.0 200") { break }
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(answer.hasPrefix("SIP/2.0 200"), "not taking calls again after the call ended: \(answer.prefix(80))")

        #expect(await bob.drain(grace: .seconds(1)) == 0)
        let draining = try #require(await SIPProbe.finalResponse(to: Self.options(port: port), port: port))
        #expect(draining.hasPrefix("SIP/2.0 503") && draining.contains("Retry-After: 60"), "\(draining.prefix(200))")
        let refused = try #require(await SIPProbe.finalResponse(to: SIPProbe.invite(port: port, sdp: "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 40000 RTP/AVP 0\r\n"), port: port))
        #expect(refused.hasPrefix("SIP/2.0 503") && refused.contains("Retry-After: 60"), "\(refused.prefix(200))")
        await alice.shutdown()
        await bob.shutdown()
    }

    /// SIP over TLS presents a CA-signed certificate when given one (`--sip-certificate`): a
    /// client that checks certificates against the CA accepts it, where the node's self-signed
    /// identity fails the same check; a key that is not the certificate's is a clear error.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl"), "needs openssl"))
    func sipOverTLSPresentsTheGivenCertificate() async throws {
        let f = try Fixture()
        func openssl(_ arguments: [String], input: String = "") throws -> String {
            let log = f.path("openssl-\(UUID().uuidString.prefix(6)).log")
            _ = try ChildProcess.run("/usr/bin/openssl", arguments, input: input, output: log)
            return (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        }
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        _ = try openssl(["req", "-x509"] + ec + ["-keyout", f.path("ca.key"), "-out", f.path("ca.pem"), "-days", "2", "-subj", "/CN=Test CA"])
        _ = try openssl(["req"] + ec + ["-keyout", f.path("node.key"), "-out", f.path("node.csr"), "-subj", "/CN=127.0.0.1"])
        try "subjectAltName=IP:127.0.0.1\n".write(toFile: f.path("ext"), atomically: true, encoding: .utf8)
        _ = try openssl(["x509", "-req", "-in", f.path("node.csr"), "-CA", f.path("ca.pem"), "-CAkey", f.path("ca.key"), "-CAcreateserial",
                         "-out", f.path("node.pem"), "-days", "2", "-extfile", f.path("ext")])
        /// What a client checking against the CA says of the node's TLS port.
        func verify(_ port: Int) throws -> String {
            try openssl(["s_client", "-connect", "127.0.0.1:\(port)", "-CAfile", f.path("ca.pem"), "-verify_ip", "127.0.0.1",
                         "-verify_return_error", "-brief"], input: "")
        }
        let signed = try await f.node("signed")
        var settings = SIPListenSettings(host: "127.0.0.1", port: Self.freePort(), user: "signed")
        settings.tlsPort = Self.freePort()
        settings.tlsCertificate = SIPCertificate(certificatePath: f.path("node.pem"), keyPath: f.path("node.key"))
        try await signed.listenSIP(settings)
        let accepted = try verify(try #require(settings.tlsPort))
        #expect(accepted.contains("Verification: OK"), "\(accepted)")
        await signed.shutdown()

        let selfSigned = try await f.node("self")
        var own = SIPListenSettings(host: "127.0.0.1", port: Self.freePort(), user: "self")
        own.tlsPort = Self.freePort()
        try await selfSigned.listenSIP(own)
        let refused = try verify(try #require(own.tlsPort))
        #expect(!refused.contains("Verification: OK") && refused.contains("verify error"), "\(refused)")
        await selfSigned.shutdown()

        let mismatched = try await f.node("mismatched")
        var wrong = SIPListenSettings(host: "127.0.0.1", port: Self.freePort(), user: "mismatched")
        wrong.tlsPort = Self.freePort()
        wrong.tlsCertificate = SIPCertificate(certificatePath: f.path("node.pem"), keyPath: f.path("ca.key"))
        await #expect {
            try await mismatched.listenSIP(wrong)
        } throws: { error in
            "\(error)".contains("TLS certificate") && "\(error)".contains("match")
        }
        wrong.tlsCertificate = SIPCertificate(certificatePath: f.path("missing.pem"), keyPath: f.path("node.key"))
        await #expect {
            try await mismatched.listenSIP(wrong)
        } throws: { error in
            "\(error)".contains("missing.pem")
        }
        await mismatched.shutdown()
    }

    /// A phone that sends DTMF as SIP INFO (`application/dtmf-relay`, `application/dtmf`): each
    /// digit is reported as heard in the call. The phone here is a bare SIP agent offering G.711.
    @Test func dtmfSentAsSIPInfoIsHeard() async throws {
        let f = try Fixture()
        let bob = try await f.node("bob", acceptUnknown: true, keyExchange: .sdes)
        let bobURI = try await bob.listenSIP(SIPListenSettings(host: "127.0.0.1", port: Self.freePort(), user: "bob"))
        let events = bob.events()
        let phonePort = Self.freePort()
        let phone = try await SIPAgent.start(listening: "sip:127.0.0.1:\(phonePort)", from: "<sip:phone@127.0.0.1:\(phonePort)>")
        let offer = "v=0\r\no=phone 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n"
            + "m=audio \(Self.freePort()) RTP/AVP 0\r\na=sendrecv\r\n"
        let sipCall = phone.newCall()
        phone.invite(sipCall, to: bobURI, sdp: offer)
        var answered = false
        for await event in phone.events where event.call == sipCall && event.kind == .response && event.status >= 200 {
            answered = event.status == 200
            break
        }
        #expect(answered)
        guard case let .connected(call, _) = try await TwoNodeTests.next(events, where: { if case .connected = $0 { true } else { false } })
        else { return }
        phone.info(sipCall, contentType: "application/dtmf-relay", body: "Signal=5\r\nDuration=160\r\n")
        _ = try await TwoNodeTests.next(events) { $0 == .dtmf(call, "5") }
        phone.info(sipCall, contentType: "application/dtmf", body: "*")
        _ = try await TwoNodeTests.next(events) { $0 == .dtmf(call, "*") }
        // Not a digit: nothing is heard, the call goes on.
        phone.info(sipCall, contentType: "application/dtmf-relay", body: "Signal=hello\r\n")
        phone.info(sipCall, contentType: "application/dtmf", body: "9")
        _ = try await TwoNodeTests.next(events) { $0 == .dtmf(call, "9") }
        phone.bye(sipCall)
        _ = try await TwoNodeTests.next(events) { if case .ended(call, .remoteEnded, _, _) = $0 { true } else { false } }
        await phone.stop()
        await bob.shutdown()
    }

    @Test func callingSIPWithoutListeningOrAnAddressThatIsNotSIPIsAClearError() async throws {
        let f = try Fixture()
        let alice = try await f.node("alice")
        await #expect(throws: CallNodeError.self) { _ = try await alice.call(.sip("sip:bob@127.0.0.1:5099")) }
        _ = try await alice.listenSIP(SIPListenSettings(host: "127.0.0.1", port: Self.freePort(), user: "alice"))
        do {
            _ = try await alice.call(.sip("bob@example.org"))
            Issue.record("a URI without sip: was called")
        } catch {
            #expect(error.description.contains("not a SIP URI"), "\(error)")
        }
        await alice.shutdown()
    }
}
}
