import CallNodeTestKit
import CallNodeTestSupport
import Clocks
import DTLS
import Foundation
import Locking
import Media
import Signaling
import Testing

/// Two endpoints carried by hand, datagram by datagram, so every step is deterministic.
@Suite struct DTLSEndpointTests {
    static func certificate() throws -> DTLSCertificate {
        let identity = try NodeIdentity.generate(commonName: "dtls-test")
        return try DTLSCertificate(certificateDER: identity.certificateDER, privateKeyPEM: identity.privateKeyPEM)
    }

    struct Exchange {
        var client: DTLSProgress
        var server: DTLSProgress
        var datagrams: [[UInt8]] = []
    }

    /// Runs the handshake to its end: what one side sends, the other receives (unless `drop`
    /// says otherwise), until neither has anything to send.
    static func handshake(_ client: DTLSEndpoint, _ server: DTLSEndpoint,
                          drop: (Int, [UInt8]) -> Bool = { _, _ in false }) -> Exchange {
        var exchange = Exchange(client: client.start(), server: server.start())
        var toServer = exchange.client.send, toClient: [[UInt8]] = []
        var index = 0
        while !toServer.isEmpty || !toClient.isEmpty {
            exchange.datagrams += toServer + toClient
            var nextToClient: [[UInt8]] = [], nextToServer: [[UInt8]] = []
            for datagram in toServer {
                index += 1
                if drop(index, datagram) { continue }
                exchange.server = server.receive(datagram)
                nextToClient += exchange.server.send
            }
            for datagram in toClient {
                index += 1
                if drop(index, datagram) { continue }
                exchange.client = client.receive(datagram)
                nextToServer += exchange.client.send
            }
            toServer = nextToServer
            toClient = nextToClient
        }
        exchange.client = DTLSProgress(send: [], state: client.currentState)
        exchange.server = DTLSProgress(send: [], state: server.currentState)
        return exchange
    }

    static func keys(_ state: DTLSState) -> DTLSKeys? {
        if case let .connected(keys) = state { return keys }
        return nil
    }

    /// A minimal RTP packet (version 2, payload type 111).
    static func rtp(sequence: UInt16) -> [UInt8] {
        [0x80, 111, UInt8(sequence >> 8), UInt8(sequence & 0xFF), 0, 0, 0, 1, 0x11, 0x22, 0x33, 0x44] + [UInt8](repeating: 0xAB, count: 40)
    }

    @Test(arguments: [SRTPSuite.aeadAES128GCM, .aesCM128HmacSHA1_80])
    func aHandshakeExportsMatchingSRTPKeysThatCarryPackets(suite: SRTPSuite) throws {
        let alice = try Self.certificate(), bob = try Self.certificate()
        let client = try DTLSEndpoint(certificate: alice, role: .client, remoteFingerprint: bob.fingerprint)
        // The server's preference decides; the client offers both.
        let server = try DTLSEndpoint(certificate: bob, role: .server, remoteFingerprint: alice.fingerprint, suites: [suite])
        let exchange = Self.handshake(client, server)
        let clientKeys = try #require(Self.keys(exchange.client.state), "client: \(exchange.client.state)")
        let serverKeys = try #require(Self.keys(exchange.server.state), "server: \(exchange.server.state)")
        #expect(clientKeys.suite == suite && serverKeys.suite == suite)
        #expect(clientKeys.outbound == serverKeys.inbound && clientKeys.inbound == serverKeys.outbound)
        #expect(clientKeys.outbound != clientKeys.inbound)
        #expect(clientKeys.peerFingerprint == bob.fingerprint && serverKeys.peerFingerprint == alice.fingerprint)
        #expect(exchange.datagrams.allSatisfy { $0.count <= 1200 && (20...63).contains($0[0]) })

        // The keys work in libsrtp both ways.
        let packet = Self.rtp(sequence: 7)
        let protected = try SRTPSession(key: clientKeys.outbound, direction: .outbound).protect(packet)
        #expect(try SRTPSession(key: serverKeys.inbound, direction: .inbound).unprotect(protected).get() == packet)
        let back = try SRTPSession(key: serverKeys.outbound, direction: .outbound).protect(packet)
        #expect(try SRTPSession(key: clientKeys.inbound, direction: .inbound).unprotect(back).get() == packet)
    }

    @Test func twoHandshakesGiveDifferentKeys() throws {
        let alice = try Self.certificate(), bob = try Self.certificate()
        var seen: [[UInt8]] = []
        for _ in 0..<2 {
            let exchange = Self.handshake(
                try DTLSEndpoint(certificate: alice, role: .client, remoteFingerprint: bob.fingerprint),
                try DTLSEndpoint(certificate: bob, role: .server, remoteFingerprint: alice.fingerprint))
            seen.append(try #require(Self.keys(exchange.client.state)).outbound.material)
        }
        // Ephemeral key exchange: the same two certificates never give the same keys.
        #expect(seen[0] != seen[1])
    }

    @Test func aCertificateThatDoesNotMatchTheFingerprintAbortsBothSides() throws {
        let alice = try Self.certificate(), bob = try Self.certificate(), mallory = try Self.certificate()
        // Alice expects Bob, but Mallory answers.
        let client = try DTLSEndpoint(certificate: alice, role: .client, remoteFingerprint: bob.fingerprint)
        let server = try DTLSEndpoint(certificate: mallory, role: .server, remoteFingerprint: alice.fingerprint)
        let exchange = Self.handshake(client, server)
        #expect(exchange.client.state == .failed(.fingerprintMismatch(expected: bob.fingerprint.sdpValue,
                                                                      presented: mallory.fingerprint.sdpValue)))
        #expect(Self.keys(exchange.server.state) == nil, "the server must not use keys the client refused: \(exchange.server.state)")
        let message = DTLSError.fingerprintMismatch(expected: "a", presented: "b").description
        #expect(message.contains("does not match the fingerprint"))

        // The other way round: the server checks the client's certificate too.
        let client2 = try DTLSEndpoint(certificate: mallory, role: .client, remoteFingerprint: bob.fingerprint)
        let server2 = try DTLSEndpoint(certificate: bob, role: .server, remoteFingerprint: alice.fingerprint)
        let second = Self.handshake(client2, server2)
        guard case .failed(.fingerprintMismatch) = second.server.state else {
            Issue.record("server accepted an unexpected client certificate: \(second.server.state)")
            return
        }
        #expect(Self.keys(second.client.state) == nil)
    }

    @Test func noCommonSRTPProfileIsATypedFailure() throws {
        let alice = try Self.certificate(), bob = try Self.certificate()
        let client = try DTLSEndpoint(certificate: alice, role: .client, remoteFingerprint: bob.fingerprint, suites: [.aeadAES128GCM])
        let server = try DTLSEndpoint(certificate: bob, role: .server, remoteFingerprint: alice.fingerprint, suites: [.aesCM128HmacSHA1_80])
        let exchange = Self.handshake(client, server)
        #expect(exchange.client.state == .failed(.noCommonSRTPProfile) || exchange.server.state == .failed(.noCommonSRTPProfile),
                "client \(exchange.client.state), server \(exchange.server.state)")
        #expect(Self.keys(exchange.client.state) == nil && Self.keys(exchange.server.state) == nil)
    }

    @Test func aSmallMTUFragmentsTheFlightsAndStillConnects() throws {
        let alice = try Self.certificate(), bob = try Self.certificate()
        let client = try DTLSEndpoint(certificate: alice, role: .client, remoteFingerprint: bob.fingerprint, mtu: 400)
        let server = try DTLSEndpoint(certificate: bob, role: .server, remoteFingerprint: alice.fingerprint, mtu: 400)
        let exchange = Self.handshake(client, server)
        #expect(Self.keys(exchange.client.state) != nil && Self.keys(exchange.server.state) != nil)
        #expect(exchange.datagrams.allSatisfy { $0.count <= 400 }, "largest: \(exchange.datagrams.map(\.count).max() ?? 0)")
        #expect(exchange.datagrams.count > 6, "the certificate flights should need several datagrams")
        #expect(throws: DTLSError.self) {
            try DTLSEndpoint(certificate: alice, role: .client, remoteFingerprint: bob.fingerprint, mtu: 200)
        }
    }

    @Test func garbageDuringTheHandshakeIsIgnored() throws {
        let alice = try Self.certificate(), bob = try Self.certificate()
        let client = try DTLSEndpoint(certificate: alice, role: .client, remoteFingerprint: bob.fingerprint)
        let server = try DTLSEndpoint(certificate: bob, role: .server, remoteFingerprint: alice.fingerprint)
        // Records with DTLS's first byte and nonsense after it, truncated headers, huge lengths.
        var generator = SplitMix64(seed: 9)
        for length in [1, 5, 13, 14, 40, 300] {
            for first in [20, 22, 23, 63] as [UInt8] {
                let junk = [first] + (1..<length).map { _ in UInt8(truncatingIfNeeded: generator.next()) }
                #expect(server.receive(junk).state == .handshaking)
            }
        }
        let exchange = Self.handshake(client, server)
        #expect(Self.keys(exchange.client.state) != nil && Self.keys(exchange.server.state) != nil,
                "client \(exchange.client.state), server \(exchange.server.state)")
    }

    @Test func closeNotifyEndsThePeersAssociation() throws {
        let alice = try Self.certificate(), bob = try Self.certificate()
        let client = try DTLSEndpoint(certificate: alice, role: .client, remoteFingerprint: bob.fingerprint)
        let server = try DTLSEndpoint(certificate: bob, role: .server, remoteFingerprint: alice.fingerprint)
        _ = Self.handshake(client, server)
        let alert = client.close()
        #expect(!alert.isEmpty)
        var state = server.currentState
        for datagram in alert { state = server.receive(datagram).state }
        #expect(state == .closed)
    }

    @Test func fingerprintsParseAndPrintAsSDPWritesThem() throws {
        let value = "sha-256 " + (0..<32).map { String(format: "%02X", $0 * 7 % 256) }.joined(separator: ":")
        let fingerprint = try #require(DTLSFingerprint(sdp: value))
        #expect(fingerprint.sdpValue == value && fingerprint.bytes.count == 32)
        #expect(DTLSFingerprint(sdp: "SHA-256 " + value.dropFirst(8))?.algorithm == "sha-256")
        for bad in ["", "sha-256", "sha-256 AB:CD", "sha-256 ZZ" + value.dropFirst(10), "sha-256 " + value.dropFirst(8) + ":", "a b c"] {
            #expect(DTLSFingerprint(sdp: bad) == nil, "accepted \(bad)")
        }
        let certificate = try Self.certificate()
        #expect(certificate.fingerprint.algorithm == "sha-256" && certificate.fingerprint.bytes.count == 32)
    }

    @Test func aKeyThatIsNotTheCertificatesIsRefused() throws {
        let one = try NodeIdentity.generate(), other = try NodeIdentity.generate()
        #expect(throws: DTLSError.self) {
            try DTLSCertificate(certificateDER: one.certificateDER, privateKeyPEM: other.privateKeyPEM)
        }
        #expect(throws: DTLSError.self) {
            try DTLSCertificate(certificateDER: [0x30, 0x03, 0x01, 0x02, 0x03], privateKeyPEM: one.privateKeyPEM)
        }
    }
}

/// Associations over a datagram path that loses what the test says, with OpenSSL's own
/// retransmission timer: outcomes only, never durations.
@Suite struct DTLSAssociationTests {
    /// Two associations joined by closures; `lose` sees each datagram with its number.
    final class Path: Sendable {
        let lose: @Sendable (Int) -> Bool
        let counter = Locked(0)
        let ends = Locked<[DTLSAssociation?]>([nil, nil])
        init(lose: @escaping @Sendable (Int) -> Bool) { self.lose = lose }

        func carry(_ datagram: [UInt8], to index: Int) {
            let number = counter.withLock { n -> Int in
                n += 1
                return n
            }
            guard !lose(number) else { return }
            ends.withLock { $0[index] }?.receive(datagram)
        }
    }

    static func pair(lose: @escaping @Sendable (Int) -> Bool, serverAnswers: Bool = true,
                     timeout: Duration = .seconds(10)) throws -> (DTLSAssociation, DTLSAssociation) {
        let alice = try DTLSEndpointTests.certificate(), bob = try DTLSEndpointTests.certificate()
        let path = Path(lose: lose)
        let client = DTLSAssociation(
            endpoint: try DTLSEndpoint(certificate: alice, role: .client, remoteFingerprint: bob.fingerprint),
            handshakeTimeout: timeout) { datagram in if serverAnswers { path.carry(datagram, to: 1) } }
        let server = DTLSAssociation(
            endpoint: try DTLSEndpoint(certificate: bob, role: .server, remoteFingerprint: alice.fingerprint),
            handshakeTimeout: timeout) { datagram in path.carry(datagram, to: 0) }
        path.ends.withLock { $0 = [client, server] }
        return (client, server)
    }

    @Test func aLostFirstFlightIsRetransmittedAndTheHandshakeFinishes() async throws {
        // The client's ClientHello is lost; OpenSSL's timer sends it again.
        let (client, server) = try Self.pair(lose: { $0 == 1 })
        let clientKeys = try await client.keys()
        let serverKeys = try await server.keys()
        #expect(clientKeys.outbound == serverKeys.inbound && clientKeys.inbound == serverKeys.outbound)
        await client.close()
        await server.close()
    }

    @Test func aLostLastFlightIsRecovered() async throws {
        // Every datagram of the server's last flight the first time round: the client must
        // retransmit its Finished and the connected server must answer it again.
        let (client, server) = try Self.pair(lose: { (4...5).contains($0) })
        let clientKeys = try await client.keys()
        let serverKeys = try await server.keys()
        #expect(clientKeys.outbound == serverKeys.inbound)
        await client.close()
        await server.close()
    }

    /// The first flight is resent after a quarter second (OpenSSL's own default waits a whole
    /// second, then two, four, eight: through heavy loss a handshake ran out of time).
    @Test func theFirstRetransmissionComesAfterAQuarterSecond() throws {
        let alice = try DTLSEndpointTests.certificate(), bob = try DTLSEndpointTests.certificate()
        let client = try DTLSEndpoint(certificate: alice, role: .client, remoteFingerprint: bob.fingerprint)
        #expect(!client.start().send.isEmpty)
        let wait = try #require(client.timeUntilRetransmission)
        #expect(wait > .milliseconds(150) && wait <= .milliseconds(250), "\(wait)")
    }

    /// OpenSSL gives a flight up after twelve resends. Paced 0.25, 0.5, 1, 1, 1, 1, 2, 2, 2,
    /// 5, 5, 5 s they span 25.75 s: a peer whose ICE is on its second or third round of checks
    /// (each runs out some 7 s in) still gets the flight. (At 0.25, 0.5 and then 1 s, the
    /// flight was given up 10.75 s in: calls through 50 % loss failed so.)
    @Test func twelveResendsSpanMostOfTheHandshakesThirtySeconds() {
        let waits = DTLSEndpoint.retransmissionWaits
        #expect(waits.first == .milliseconds(250))
        #expect(waits.prefix(6).allSatisfy { $0 <= .seconds(1) }, "the first six come within a second of each other: \(waits)")
        let span = waits.reduce(Duration.zero, +)
        #expect(span == .milliseconds(25_750), "\(waits)")
        #expect(span < .seconds(30), "within the handshake's limit (CallNodeConfiguration.dtlsHandshakeTimeout)")
    }

    /// Between OpenSSL's own resends the association sends the last flight again every quarter
    /// second (on its clock: a manual one here, on which OpenSSL's real-time timer barely
    /// moves), so a peer on a lossy path gets many more tries than OpenSSL's twelve.
    @Test func theLastFlightGoesAgainEveryQuarterSecondBetweenOpenSSLsResends() async throws {
        let alice = try DTLSEndpointTests.certificate(), bob = try DTLSEndpointTests.certificate()
        let clock = ManualClock()
        let sent = Locked<[[UInt8]]>([])
        let began = ContinuousClock.now
        let client = DTLSAssociation(endpoint: try DTLSEndpoint(certificate: alice, role: .client, remoteFingerprint: bob.fingerprint),
                                     handshakeTimeout: .seconds(30), clock: TimerClock(clock)) { datagram in sent.withLock { $0.append(datagram) } }
        // Two and a half seconds of the clock, a quarter second at a time (one tick each);
        // nobody answers.
        #expect(DTLSAssociation.repeatInterval == .milliseconds(250))
        // Each step's copy is waited for (bounded), so the count does not race the ticks.
        // The ClientHello first (bounded generously: a loaded machine, a full suite's first
        // minutes, once took over two seconds to run the handshake's start).
        let start = ContinuousClock.now + .seconds(15)
        while sent.withLock({ $0.isEmpty }) && ContinuousClock.now < start { try await Task.sleep(for: .milliseconds(5)) }
        try #require(sent.withLock { $0.count } == 1, "the ClientHello did not go")
        for step in 1...10 {
            let before = sent.withLock { $0.count }
            await clock.waitForSleepers()
            clock.advance(by: DTLSAssociation.repeatInterval)
            let deadline = ContinuousClock.now + .seconds(2)
            while sent.withLock({ $0.count }) == before && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
            #expect(sent.withLock { $0.count } > before, "no copy in step \(step)")
        }
        let flights = sent.withLock { $0 }
        // The ClientHello, then a copy every 250 ms: ten in 2.5 seconds, byte for byte the
        // datagrams sent before. OpenSSL's own resends, on real time, are new records, and a
        // tick that carries one sends no copy: every tick but those OpenSSL's schedule had
        // room for in the real time the test took (one or two on an idle machine, more on a
        // busy one) carries a copy.
        let elapsed = ContinuousClock.now - began
        var resendsDue = 0, due = Duration.zero
        for wait in DTLSEndpoint.retransmissionWaits {
            due += wait
            if due <= elapsed { resendsDue += 1 }
        }
        #expect(flights.count >= 11, "\(flights.count) datagrams")
        #expect(flights.allSatisfy { $0.first == 22 }, "handshake records only")
        let copies = flights.indices.filter { index in flights[..<index].contains(flights[index]) }.count
        #expect(copies >= 10 - resendsDue, "\(copies) of \(flights.count) datagrams repeat an earlier one, \(resendsDue) resends of OpenSSL's due in \(elapsed)")
        await client.close()
    }

    /// The server finishes first (the client's Finished arrived) and its own final flight is
    /// lost; the client's resends are lost too from then on. OpenSSL alone would leave the
    /// client waiting; the copies of the final flight that follow it finish the client within
    /// a second of the association's clock.
    @Test func copiesOfTheFinishingFlightFinishThePeerWhoseResendsAreLost() async throws {
        let alice = try DTLSEndpointTests.certificate(), bob = try DTLSEndpointTests.certificate()
        let clock = ManualClock()
        struct Wire {
            var client: DTLSAssociation?
            var server: DTLSAssociation?
            /// When the client's final flight went out (on the manual clock).
            var secondFlightAt: ManualClock.Instant?
            var droppedFromServer = 0
            /// What the server sent before the client was there to take it.
            var early: [[UInt8]] = []
        }
        let wire = Locked(Wire())
        let server = DTLSAssociation(endpoint: try DTLSEndpoint(certificate: bob, role: .server, remoteFingerprint: alice.fingerprint),
                                     handshakeTimeout: .seconds(30), clock: TimerClock(clock)) { datagram in
            // What the server sends in answer to the client's final flight (its own final
            // flight) is lost; its copies, half a second later on the clock, are not.
            let client = wire.withLock { w -> DTLSAssociation? in
                if let at = w.secondFlightAt, clock.now < at.advanced(by: .milliseconds(400)) {
                    w.droppedFromServer += 1
                    return nil
                }
                if w.client == nil { w.early.append(datagram) }
                return w.client
            }
            client?.receive(datagram)
        }
        wire.withLock { $0.server = server }
        // The client starts at once: its ClientHello must find the server there.
        let client = DTLSAssociation(endpoint: try DTLSEndpoint(certificate: alice, role: .client, remoteFingerprint: bob.fingerprint),
                                     handshakeTimeout: .seconds(30), clock: TimerClock(clock)) { datagram in
            let server = wire.withLock { w -> DTLSAssociation? in
                if w.secondFlightAt == nil && Self.carriesChangeCipherSpec(datagram) { w.secondFlightAt = clock.now }
                return w.server
            }
            // Once the server has finished, nothing more from the client arrives.
            guard let server, server.established == nil else { return }
            server.receive(datagram)
        }
        for datagram in wire.withLock({ w in
            w.client = client
            defer { w.early = [] }
            return w.early
        }) { client.receive(datagram) }
        // The handshake runs at once (nothing else is lost); then up to 10 s of the manual clock.
        let deadline = ContinuousClock.now + .seconds(10)
        while server.established == nil && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        for _ in 0..<200 where client.established == nil {
            clock.advance(by: .milliseconds(50))
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(wire.withLock { $0.droppedFromServer } > 0, "the final flight was sent and dropped")
        let serverKeys = try #require(server.established, "the server finished")
        let clientKeys = try #require(client.established, "the client finished from a copy of the final flight")
        #expect(clientKeys.outbound == serverKeys.inbound && clientKeys.inbound == serverKeys.outbound)
        await client.close()
        await server.close()
    }

    /// Whether a datagram holds a ChangeCipherSpec record (content type 20): a side's final
    /// flight. Records are 13 bytes of header (type, version, epoch, sequence, length) and
    /// their length.
    static func carriesChangeCipherSpec(_ datagram: [UInt8]) -> Bool {
        var offset = 0
        while offset + 13 <= datagram.count {
            if datagram[offset] == 20 { return true }
            offset += 13 + (Int(datagram[offset + 11]) << 8 | Int(datagram[offset + 12]))
        }
        return false
    }

    /// Half the datagrams lost each way (eight seeded patterns, side by side), and every
    /// handshake finishes within 12 s: its flights are resent every second at most (OpenSSL's
    /// default timer would have resent them at 1, 3 and 7 s, the next at 15).
    @Test func handshakesThroughHalfTheDatagramsLostFinish() async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for seed in UInt64(1)...8 {
                group.addTask {
                    let pattern = Locked(SplitMix64(seed: seed))
                    let (client, server) = try Self.pair(lose: { _ in pattern.withLock { $0.next() % 2 == 0 } }, timeout: .seconds(12))
                    defer { Task { await client.close(); await server.close() } }
                    let clientKeys = try await client.keys()
                    let serverKeys = try await server.keys()
                    #expect(clientKeys.outbound == serverKeys.inbound && clientKeys.inbound == serverKeys.outbound, "seed \(seed)")
                }
            }
            try await group.waitForAll()
        }
    }

    @Test func aPeerThatNeverAnswersTimesOut() async throws {
        let (client, server) = try Self.pair(lose: { _ in false }, serverAnswers: false, timeout: .milliseconds(300))
        await #expect(throws: DTLSError.timedOut(.milliseconds(300))) { try await client.keys() }
        // The server heard nothing either, and gives up the same way.
        await #expect(throws: DTLSError.timedOut(.milliseconds(300))) { try await server.keys() }
        await server.close()
        await client.close()
    }
}
