import Crypto
import Foundation
import NIOCore
import Testing
@testable import Signaling

/// The relay registers a fingerprint only for the node that proves it holds its key, keeps
/// registrations alive only while their nodes speak, and limits what one address may do.
@Suite struct RelayAuthenticationTests {
    /// A raw control connection, speaking relay frames by hand as a stranger would.
    struct RawClient {
        let channel: any Channel
        var messages: AsyncStream<RelayMessage>.AsyncIterator

        init(_ relay: RelayServer) async throws {
            let (channel, stream) = try await RelayClient.open("127.0.0.1", port: relay.port, upgrade: nil)
            self.channel = channel
            messages = stream.makeAsyncIterator()
        }

        mutating func exchange(_ message: RelayMessage) async throws -> RelayMessage? {
            try await RelayClient.send(message, on: channel)
            return await messages.next()
        }
    }

    /// Registers `identity` through the node's own client; returns once the relay confirmed.
    func register(_ identity: NodeIdentity, at relay: RelayServer, keepAlive: Duration = .seconds(20)) async throws -> Task<Void, any Error> {
        let (confirmed, confirm) = AsyncStream.makeStream(of: Void.self)
        let task = Task {
            try await RelayClient.register(relay: "127.0.0.1", port: relay.port, identity: identity, keepAlive: keepAlive,
                                           registered: { confirm.yield() }) { _, _ in }
        }
        var iterator = confirmed.makeAsyncIterator()
        _ = await iterator.next()
        return task
    }

    @Test func aStrangerCannotRegisterSomeoneElsesFingerprint() async throws {
        let relay = try await RelayServer(host: "127.0.0.1", port: 0)
        let victim = try NodeIdentity.generate(), stranger = try NodeIdentity.generate()
        let registration = try await register(victim, at: relay)
        #expect(relay.statistics.registered == 1)

        // The stranger's own certificate under the victim's fingerprint.
        var first = try await RawClient(relay)
        let challenge = try #require(try await first.exchange(RelayMessage(
            op: "register", fingerprint: victim.fingerprint.hex, certificate: Data(stranger.certificateDER).base64EncodedString())))
        #expect(challenge.op == "challenge")
        let signature = try RelayProof.sign(identity: stranger, challenge: try #require(challenge.token))
        let refusal = try #require(try await first.exchange(RelayMessage(op: "prove", signature: signature)))
        #expect(refusal.op == "error" && refusal.reason?.contains("does not match the fingerprint") == true, "\(refusal)")

        // The victim's (public) certificate, signed with the stranger's key.
        var second = try await RawClient(relay)
        let challenge2 = try #require(try await second.exchange(RelayMessage(
            op: "register", fingerprint: victim.fingerprint.hex, certificate: Data(victim.certificateDER).base64EncodedString())))
        let token = try #require(challenge2.token)
        let key = try P256.Signing.PrivateKey(pemRepresentation: stranger.privateKeyPEM)
        let forged = try key.signature(for: RelayProof.signedBytes(fingerprint: victim.fingerprint.hex, challenge: token))
        let refusal2 = try #require(try await second.exchange(RelayMessage(op: "prove", signature: forged.derRepresentation.base64EncodedString())))
        #expect(refusal2.op == "error" && refusal2.reason?.contains("does not verify") == true, "\(refusal2)")

        // A proof made for another challenge (replayed) does not verify either.
        var third = try await RawClient(relay)
        _ = try await third.exchange(RelayMessage(op: "register", fingerprint: victim.fingerprint.hex,
                                                  certificate: Data(victim.certificateDER).base64EncodedString()))
        let replayed = try RelayProof.sign(identity: victim, challenge: token)
        let refusal3 = try #require(try await third.exchange(RelayMessage(op: "prove", signature: replayed)))
        #expect(refusal3.op == "error", "\(refusal3)")

        // The old protocol (no certificate) is refused with a reason.
        var fourth = try await RawClient(relay)
        let challenge4 = try #require(try await fourth.exchange(RelayMessage(op: "register", fingerprint: victim.fingerprint.hex)))
        let refusal4 = try #require(try await fourth.exchange(RelayMessage(op: "prove", signature: "AAAA")))
        #expect(challenge4.op == "challenge" && refusal4.reason?.contains("needs the node's certificate") == true, "\(refusal4)")

        // The victim is still the one registered: a dial reaches it.
        #expect(relay.statistics.registered == 1)
        #expect(relay.statistics.refusedRegistrations == 4)
        var caller = try await RawClient(relay)
        let reached = try await caller.exchange(RelayMessage(op: "dial", fingerprint: victim.fingerprint.hex))
        #expect(reached?.op == "connected", "\(String(describing: reached))")
        try? await caller.channel.close()
        registration.cancel()
        await relay.close()
    }

    @Test func registrationsAndDialsAreLimitedPerAddress() async throws {
        var limits = RelayLimits()
        limits.registrationsPerAddress = 2
        limits.dialsPerAddressPerMinute = 3
        let relay = try await RelayServer(host: "127.0.0.1", port: 0, limits: limits)
        let one = try await register(try NodeIdentity.generate(), at: relay)
        let two = try await register(try NodeIdentity.generate(), at: relay)
        // The third from the same address is refused, with the reason thrown to the node.
        await #expect(throws: RelayError.self) {
            try await RelayClient.register(relay: "127.0.0.1", port: relay.port, identity: try NodeIdentity.generate()) { _, _ in }
        }
        #expect(relay.statistics.registered == 2)
        let nobody = try NodeIdentity.generate().fingerprint.hex
        var replies: [RelayMessage] = []
        for _ in 0..<4 {
            var client = try await RawClient(relay)
            if let reply = try await client.exchange(RelayMessage(op: "dial", fingerprint: nobody)) { replies.append(reply) }
        }
        #expect(replies.prefix(3).allSatisfy { $0.reason?.contains("no node with that fingerprint") == true }, "\(replies)")
        #expect(replies.last?.reason?.contains("too many requests") == true, "\(replies)")
        #expect(relay.statistics.rateLimited == 1)
        one.cancel()
        two.cancel()
        await relay.close()
    }

    @Test func aSilentRegistrationIsDroppedAndKeepAlivesKeepOneRegistered() async throws {
        var limits = RelayLimits()
        limits.registrationIdleTimeout = .seconds(2)
        let relay = try await RelayServer(host: "127.0.0.1", port: 0, limits: limits)
        // A node that keeps sending keep-alives.
        let speaking = try await register(try NodeIdentity.generate(), at: relay, keepAlive: .milliseconds(200))
        // A registration that then says nothing more.
        let silentIdentity = try NodeIdentity.generate()
        var silent = try await RawClient(relay)
        let challenge = try #require(try await silent.exchange(RelayMessage(
            op: "register", fingerprint: silentIdentity.fingerprint.hex, certificate: Data(silentIdentity.certificateDER).base64EncodedString())))
        let proof = try RelayProof.sign(identity: silentIdentity, challenge: try #require(challenge.token))
        // The silence starts no earlier than this: the relay hears the proof after it. (Taken
        // after the answer, a test resumed late on a busy machine would count short.)
        let lastSpoke = ContinuousClock.now
        #expect(try await silent.exchange(RelayMessage(op: "prove", signature: proof))?.op == "registered")
        #expect(relay.statistics.registered == 2)
        // The relay closes the silent one after its idle timeout: its stream ends.
        while await silent.messages.next() != nil {}
        #expect(ContinuousClock.now - lastSpoke >= .milliseconds(1500))
        // The relay forgets it once its side of the connection has closed (a moment after ours).
        for _ in 0..<100 where relay.statistics.registered != 1 { try await Task.sleep(for: .milliseconds(20)) }
        #expect(relay.statistics.registered == 1)
        speaking.cancel()
        await relay.close()
    }
}
