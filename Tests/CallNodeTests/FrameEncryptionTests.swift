@testable import CallNode
import CallNodeTestKit
import CallNodeTestSupport
import Foundation
import Testing

/// End-to-end frame encryption between nodes, negotiated in the offer and answer, with keys
/// agreed inside the signaling TLS; and the security code both sides show.
@Suite struct FrameEncryptionTests {
    static func secured(_ f: InMemoryNodes, _ name: String) -> MediaSecurity? {
        f.events(name).lazy.compactMap { if case let .secured(_, security) = $0 { security } else { nil } }.first
    }

    @Test(arguments: [KeyExchange.sdes, .dtls])
    func framesAreEncryptedBothWaysByDefaultAndBothSidesShowOneCode(keyExchange: KeyExchange) async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", input: .tone(440), keyExchange: keyExchange)
        let bob = try await f.node("bob", input: .tone(660), keyExchange: keyExchange)
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        try await f.waitFor("alice", advancing: true) { if case .connected = $0 { true } else { false } }
        try await f.waitFor("bob", advancing: true) { if case .connected = $0 { true } else { false } }
        for _ in 0..<100 { await f.step() }
        let aliceSecurity = try #require(Self.secured(f, "alice")), bobSecurity = try #require(Self.secured(f, "bob"))
        #expect(aliceSecurity.frameEncryption && bobSecurity.frameEncryption)
        let code = try #require(aliceSecurity.securityCode)
        #expect(code == bobSecurity.securityCode)
        #expect(code == SecurityCode.between(alice.identity.fingerprint, bob.identity.fingerprint))
        #expect(code.wholeMatch(of: /\d{3} \d{3} \d{3} \d{3}/) != nil, "\(code)")
        let bobCall = await bob.liveCalls.first ?? call
        let heard = try #require(await bob.statistics(bobCall)), heardBack = try #require(await alice.statistics(call))
        #expect(heard.frameDecryptionFailures == 0 && heardBack.frameDecryptionFailures == 0)
        #expect(heard.receiveLevel > -30 && heardBack.receiveLevel > -30, "levels \(heard.receiveLevel), \(heardBack.receiveLevel)")
        try await alice.hangUp(call)
        await f.shutdown()
    }

    @Test func aNodeWithAWrongFrameKeyPlaysNothingAndCountsTheFailures() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", input: .tone(440))
        let bob = try await f.node("bob", input: .tone(660)) { configuration in
            // Bob opens with a key that is not Alice's.
            configuration.frameKeyAdjustment = { keys in FrameKeys(outbound: keys.outbound, inbound: .random()) }
        }
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        try await f.waitFor("bob", advancing: true) { if case .connected = $0 { true } else { false } }
        for _ in 0..<100 { await f.step() }
        let bobCall = await bob.liveCalls.first ?? call
        let heard = try #require(await bob.statistics(bobCall)), heardBack = try #require(await alice.statistics(call))
        #expect(heard.packetsReceived >= 90, "SRTP still carries the packets: \(heard.packetsReceived)")
        #expect(heard.frameDecryptionFailures >= 90, "\(heard.frameDecryptionFailures) failures")
        #expect(heard.receiveLevel < -60, "bob heard something: \(heard.receiveLevel) dB")
        // The other way, Bob's key is right: Alice hears him.
        #expect(heardBack.frameDecryptionFailures == 0 && heardBack.receiveLevel > -30)
        try await alice.hangUp(call)
        await f.shutdown()
    }

    @Test(arguments: [(FrameEncryptionPolicy.required, FrameEncryptionPolicy.off), (.off, .required)])
    func requiredAgainstOffEndsTheCallWithTheReasonOnBothSides(policies: (FrameEncryptionPolicy, FrameEncryptionPolicy)) async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", input: .tone(440)) { $0.frameEncryption = policies.0 }
        let bob = try await f.node("bob", input: .tone(660)) { $0.frameEncryption = policies.1 }
        try await f.trust(alice, as: "alice", bob, as: "bob")
        _ = try await alice.call(.contact("bob"))
        let aliceEnd = try await f.waitFor("alice", advancing: true) { if case .ended = $0 { true } else { false } }
        let bobEnd = try await f.waitFor("bob", advancing: true) { if case .ended = $0 { true } else { false } }
        guard case let .ended(_, aliceReason, aliceDetail, _) = aliceEnd.event,
              case let .ended(_, bobReason, bobDetail, _) = bobEnd.event else { return }
        #expect(aliceReason == .failed && bobReason == .failed)
        for detail in [aliceDetail, bobDetail] {
            #expect(detail?.contains("encrypt frames end to end") == true || detail?.contains("frames encrypted end to end") == true,
                    "\(detail ?? "-")")
        }
        // The caller (who answers the callee's offer) finds the mismatch and ends the call, saying
        // why; the callee hears that reason.
        #expect(aliceDetail?.contains("the other node") == false, "\(aliceDetail ?? "-")")
        #expect(bobDetail?.contains("the other node ended the call") == true, "\(bobDetail ?? "-")")
        let expected = policies.0 == .required ? "and the caller requires it" : "the callee requires frames encrypted end to end, and the caller has frame encryption off"
        #expect(aliceDetail?.contains(expected) == true && bobDetail?.contains(expected) == true, "\(aliceDetail ?? "-") / \(bobDetail ?? "-")")
        // Each side's words name who is who: the callee never reads the caller's requirement as its own.
        #expect(bobDetail?.contains("this node") == false, "\(bobDetail ?? "-")")
        #expect(!f.events("alice").contains { if case .connected = $0 { true } else { false } })
        await f.shutdown()
    }

    @Test func offOnBothSidesOrOneSidePreferredGivesAPlainCallThatSaysSo() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", input: .tone(440)) { $0.frameEncryption = .preferred }
        let bob = try await f.node("bob", input: .tone(660)) { $0.frameEncryption = .off }
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        try await f.waitFor("alice", advancing: true) { if case .connected = $0 { true } else { false } }
        for _ in 0..<50 { await f.step() }
        #expect(Self.secured(f, "alice")?.frameEncryption == false && Self.secured(f, "bob")?.frameEncryption == false)
        #expect(try #require(await alice.statistics(call)).receiveLevel > -30)
        try await alice.hangUp(call)
        await f.shutdown()
    }
}
