import CallNode
import CallNodeTestSupport
import Foundation
import Locking
import Testing

/// DTLS-SRTP between real nodes: the handshake over libnice's selected pair, the keys into
/// libsrtp, each side checking the other's certificate against the SDP fingerprint.
extension RealTimeTests {
@Suite(.serialized) struct DTLSCallTests {
    typealias Fixture = TwoNodeTests.Fixture

    static func secured(_ events: AsyncStream<NodeEvent>, _ call: UUID) async throws -> MediaSecurity? {
        guard case let .secured(_, security) = try await TwoNodeTests.next(events, where: {
            if case .secured(call, _) = $0 { true } else { false }
        }) else { return nil }
        return security
    }

    /// Both nodes hear each other's tone: statistics with packets and a level. When none come
    /// within 20 s, the error says what the last statistics held.
    static func hearing(_ events: AsyncStream<NodeEvent>, _ who: String) async throws {
        let last = Locked<MediaStatistics?>(nil)
        do {
            _ = try await TwoNodeTests.next(events) {
                guard case let .statistics(_, s) = $0 else { return false }
                last.withLock { $0 = s }
                return s.packetsReceived >= 25 && s.receiveLevel > -40 && s.authenticationFailures == 0
            }
        } catch {
            let s = last.withLock { $0 }
            throw TestFailure("\(who) did not hear the other side: \(error); its last statistics: "
                + (s.map { "\($0.packetsReceived) packets received, level \($0.receiveLevel) dB, \($0.authenticationFailures) authentication failures, \($0.malformedDropped) malformed, \($0.replaysDropped) replays" } ?? "none"))
        }
    }

    /// The callee offers, so its setting decides how the call is keyed; the caller follows.
    @Test(arguments: [KeyExchange.dtls, .sdes])
    func nodesKeyTheirMediaAsTheOffererChoseAndAudioFlowsBothWays(offerer: KeyExchange) async throws {
        let f = try Fixture()
        let alice = try await f.node("alice", input: .tone(440), keyExchange: offerer == .dtls ? .sdes : .dtls)
        let bob = try await f.node("bob", input: .tone(660), keyExchange: offerer)
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let aliceEvents = alice.events(), bobEvents = bob.events()
        let call = try await alice.call(.contact("bob"))
        guard case let .incoming(bobCall, _, _, _) = try await TwoNodeTests.next(bobEvents, where: { if case .incoming = $0 { true } else { false } })
        else { return }
        let aliceSecurity = try #require(try await Self.secured(aliceEvents, call))
        let bobSecurity = try #require(try await Self.secured(bobEvents, bobCall))
        #expect(aliceSecurity.keyExchange == offerer && bobSecurity.keyExchange == offerer)
        #expect(aliceSecurity.suite == bobSecurity.suite)
        if offerer == .dtls {
            // The callee offered actpass, the caller answered active: the callee is the DTLS
            // server and its first choice, AES-GCM, wins.
            #expect(aliceSecurity.suite == "AEAD_AES_128_GCM")
            #expect(aliceSecurity.handshake != nil && bobSecurity.handshake != nil)
            // Each DTLS certificate is the node's identity: the fingerprint checked on the media
            // path is the one its contact entry holds.
            #expect(DTLSFingerprint(sdp: aliceSecurity.peerFingerprint ?? "")?.bytes == bob.identity.fingerprint.bytes)
            #expect(DTLSFingerprint(sdp: bobSecurity.peerFingerprint ?? "")?.bytes == alice.identity.fingerprint.bytes)
        } else {
            #expect(aliceSecurity.suite == "AES_CM_128_HMAC_SHA1_80" && aliceSecurity.handshake == nil)
        }
        try await Self.hearing(aliceEvents, "alice")
        try await Self.hearing(bobEvents, "bob")
        try await alice.hangUp(call)
        guard case let .ended(_, reason, _, _) = try await TwoNodeTests.next(bobEvents, where: { if case .ended = $0 { true } else { false } })
        else { return }
        #expect(reason == .remoteEnded)
        await alice.shutdown()
        await bob.shutdown()
    }

    /// A caller played by the test itself: a real signaling connection, a real ICE agent (on
    /// loopback, controlled) and a real DTLS client with `certificate`. Its answer announces
    /// `announced` as its fingerprint, and its candidates pass through `rewrite` first.
    /// Returns the handshake's outcome.
    static func rawCaller(to node: CallNode, identity: NodeIdentity, certificate: DTLSCertificate, announced: DTLSFingerprint,
                          rewrite: @escaping @Sendable (String) -> String = { $0 }) async throws -> Result<DTLSKeys, DTLSError>? {
        let address = try #require(node.listenAddress)
        var ice = IceConfiguration()
        ice.localAddresses = ["127.0.0.1"]
        ice.role = .controlled
        let agent = try await IceAgent(configuration: ice)
        let gathering = try await agent.gather()
        for await _ in gathering.candidates {}
        let candidates = try await agent.localCandidates().map { rewrite($0.description) }
        let call = UUID()
        defer { Task { await agent.close() } }
        return try await SignalingClient.connect(host: address.host, port: address.port, identity: identity, pin: nil) {
            connection, messages -> Result<DTLSKeys, DTLSError>? in
            try await connection.send(.invite(Invitation(displayName: identity.commonName)), call: call)
            for await message in messages {
                guard case let .success(envelope) = message else { continue }
                switch envelope.message {
                case let .offer(sdp):
                    var local = LocalAudioParameters(iceUfrag: gathering.credentials.ufrag, icePwd: gathering.credentials.pwd,
                                                     candidates: candidates, endOfCandidates: true, keys: [:])
                    local.fingerprint = announced.sdpValue
                    let (answer, negotiated) = try OfferAnswer.answer(to: try SessionDescription(parsing: sdp), sessionID: "1",
                                                                      capabilities: AudioCapabilities(), local: local)
                    try await connection.send(.answer(sdp: answer.serialized), call: call)
                    let remote = try negotiated.remoteCandidates.map { try IceCandidate(parsing: $0) }
                    _ = try await agent.setRemote(IceCredentials(ufrag: negotiated.remoteIceUfrag, pwd: negotiated.remoteIcePwd),
                                                  candidates: remote, endOfCandidates: negotiated.remoteEndOfCandidates)
                    #expect(negotiated.dtls?.setup == .active)
                    let nodeFingerprint = try #require(DTLSFingerprint(sdp: negotiated.dtls?.remoteFingerprint ?? ""))
                    for await event in agent.events { if case .stateChanged(.connected) = event { break } }
                    let association = DTLSAssociation(
                        endpoint: try DTLSEndpoint(certificate: certificate, role: .client, remoteFingerprint: nodeFingerprint),
                        handshakeTimeout: .seconds(10)) { datagram in try? await agent.send(datagram) }
                    let pump = Task {
                        for await datagram in agent.datagrams where (20...63).contains(datagram.bytes.first ?? 0) {
                            association.receive(datagram.bytes)
                        }
                    }
                    defer { pump.cancel() }
                    do throws(DTLSError) {
                        let keys = try await association.keys()
                        await association.close()
                        return .success(keys)
                    } catch {
                        return .failure(error)
                    }
                case let .candidates(lines, end):
                    _ = try await agent.addRemoteCandidates(lines.compactMap { try? IceCandidate(parsing: $0) })
                    if end { try await agent.endOfRemoteCandidates() }
                default:
                    continue
                }
            }
            return nil
        }
    }

    /// A caller whose DTLS certificate is not the one its answer announced: the node refuses
    /// the handshake and ends the call saying why.
    @Test func aCertificateThatDoesNotMatchTheSDPFingerprintEndsTheCallWithTheReason() async throws {
        let f = try Fixture()
        let alice = try await f.node("alice", input: .tone(440), acceptUnknown: true)
        let aliceEvents = alice.events()
        let mallory = try NodeIdentity.generate(commonName: "mallory"), decoy = try NodeIdentity.generate(commonName: "decoy")
        let malloryCertificate = try DTLSCertificate(certificateDER: mallory.certificateDER, privateKeyPEM: mallory.privateKeyPEM)
        // The lie: the decoy's fingerprint, while DTLS presents Mallory's certificate.
        let handshake = try await Self.rawCaller(to: alice, identity: mallory, certificate: malloryCertificate,
                                                 announced: DTLSFingerprint(algorithm: "sha-256", bytes: decoy.fingerprint.bytes))
        // Alice refused the certificate during the handshake, so Mallory never got keys.
        let outcome = try #require(handshake)
        guard case let .failure(error) = outcome else {
            Issue.record("the handshake with a lying peer gave keys")
            return
        }
        #expect(error != DTLSError.timedOut(.seconds(10)), "alice should refuse with an alert, not fall silent")
        guard case let .ended(_, reason, detail, _) = try await TwoNodeTests.next(aliceEvents, where: { if case .ended = $0 { true } else { false } })
        else { return }
        #expect(reason == .failed)
        print("DTLS mismatch: the liar saw '\(error)'; alice ended the call: \(detail ?? "none")")
        #expect(detail?.contains("does not match the fingerprint in its session description") == true, "detail: \(detail ?? "none")")
        #expect(detail?.contains(DTLSFingerprint(algorithm: "sha-256", bytes: mallory.fingerprint.bytes).sdpValue) == true,
                "the reason names the certificate presented: \(detail ?? "none")")
        await alice.shutdown()
    }

    /// A peer that names its host candidates by mDNS, as browsers do (`<uuid>.local`), where
    /// this machine cannot resolve them: the node connects anyway, through the peer-reflexive
    /// address the peer's own checks reveal, and the handshake gives keys.
    @Test func mDNSCandidatesThatDoNotResolveStillConnectThroughPeerReflexiveAddresses() async throws {
        let f = try Fixture()
        let alice = try await f.node("alice", input: .tone(440), acceptUnknown: true)
        let aliceEvents = alice.events()
        let browser = try NodeIdentity.generate(commonName: "browser")
        let certificate = try DTLSCertificate(certificateDER: browser.certificateDER, privateKeyPEM: browser.privateKeyPEM)
        let name = UUID().uuidString.lowercased() + ".local"
        let handshake = try await Self.rawCaller(to: alice, identity: browser, certificate: certificate, announced: certificate.fingerprint) {
            $0.replacingOccurrences(of: " 127.0.0.1 ", with: " \(name) ")
        }
        guard case .success = try #require(handshake) else {
            Issue.record("no keys: \(String(describing: handshake))")
            return
        }
        guard case let .selectedPair(_, pair) = try await TwoNodeTests.next(aliceEvents, where: { if case .selectedPair = $0 { true } else { false } })
        else { return }
        #expect(pair.remoteType == .peerReflexive && pair.remote.hasPrefix("127.0.0.1:"), "pair: \(pair)")
        await alice.shutdown()
    }
}
}
