@testable import CallNode
import CallNodeTestKit
import CallNodeTestSupport
import Foundation
import Media
import Testing

/// The rest of the in-call controls on whole nodes (manual time): DTMF both ways, playback only.
@Suite struct InCallControlsTests {
    static func digits(_ f: InMemoryNodes, _ name: String) -> String {
        String(f.events(name).compactMap { if case let .dtmf(_, digit) = $0 { digit } else { nil } })
    }

    @Test func digitsGoBothWaysAsTelephoneEventsInOrder() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", input: .tone(440))
        let bob = try await f.node("bob", input: .tone(660))
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        try await f.waitFor("bob") { if case .connected = $0 { true } else { false } }
        let bobCall = try #require(await bob.liveCalls.first)
        for _ in 0..<10 { await f.step() }
        try await alice.playDTMF(call, "159#")
        try await bob.playDTMF(bobCall, "*0D")
        for _ in 0..<150 { await f.step() }
        #expect(Self.digits(f, "bob") == "159#")
        #expect(Self.digits(f, "alice") == "*0D")
        // A digit that is not one is refused with the reason, and nothing is sent.
        await #expect(throws: CallRequestError.self) { try await alice.playDTMF(call, "12x") }
        for _ in 0..<50 { await f.step() }
        #expect(Self.digits(f, "bob") == "159#")
        await f.shutdown()
    }

    @Test func aPlaybackOnlyNodeOpensNoMicrophoneSendsSilenceAndHearsThePeer() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", input: .tone(440), output: .wav(f.path("alice.wav")))
        let bob = try await f.node("bob", input: .tone(660), output: .wav(f.path("bob.wav"))) { $0.playbackOnly = true }
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        try await f.waitFor("bob") { if case .connected = $0 { true } else { false } }
        for _ in 0..<100 { await f.step() }
        #expect(await bob.systemSession?.activeRoute?.input == nil, "the playback-only session opened a microphone")
        let bobCall = try #require(await bob.liveCalls.first)
        let heard = try #require(await bob.statistics(bobCall))
        let heardBack = try #require(await alice.statistics(call))
        #expect(heard.receiveLevel > -30, "bob hears alice at \(heard.receiveLevel) dB")
        #expect(heardBack.receiveLevel < -90, "alice hears bob's microphone at \(heardBack.receiveLevel) dB")
        try await alice.hangUp(call)
        try await f.waitFor("bob") { if case .ended = $0 { true } else { false } }
        await f.shutdown()
    }
}
