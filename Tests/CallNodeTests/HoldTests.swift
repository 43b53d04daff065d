@testable import CallNode
import CallNodeTestKit
import CallNodeTestSupport
import Foundation
import Media
import Testing

/// Hold as RFC 3264 says, on whole nodes on manual time: a re-offer `inactive` (or `sendonly`
/// with hold audio), answered in kind; a held call carries no audio either way; the peer is
/// told; resume brings both directions back and keeps a mute.
@Suite struct HoldTests {
    enum Holder: String, CaseIterable { case caller, callee }

    /// The 20 ms frames of a recording, as their peak level and the power at `frequency`.
    static func frames(_ path: String) throws -> [[Int16]] {
        let samples = try WAV.read(path: path).samples
        return stride(from: 0, to: samples.count - 959, by: 960).map { Array(samples[$0..<($0 + 960)]) }
    }

    static func hasTone(_ frame: [Int16], _ frequency: Double) -> Bool {
        let peak = frame.map { abs(Int($0)) }.max() ?? 0
        // A tone at 0.3 of full scale after Opus: the frequency dominates the frame's energy.
        return peak > 1_000 && Goertzel.share(of: frequency, in: frame) > 0.4
    }

    /// The longest run of frames with nothing audible in them (peak ≤ −50 dBFS).
    static func longestSilence(_ frames: [[Int16]]) -> Int {
        var longest = 0, run = 0
        for frame in frames {
            run = (frame.map { abs(Int($0)) }.max() ?? 0) <= 100 ? run + 1 : 0
            longest = max(longest, run)
        }
        return longest
    }

    @Test(arguments: Holder.allCases)
    func aHeldCallCarriesNoAudioEitherWayAndResumesBothWays(holder: Holder) async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", input: .tone(440), output: .wav(f.path("alice-heard.wav")))
        let bob = try await f.node("bob", input: .tone(660), output: .wav(f.path("bob-heard.wav")))
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        try await f.waitFor("bob") { if case .connected = $0 { true } else { false } }
        let bobCall = try #require(await bob.liveCalls.first)
        for _ in 0..<50 { await f.step() }
        let (holding, held, holdingCall, heldCall, heldName) = holder == .caller
            ? (alice, bob, call, bobCall, "bob") : (bob, alice, bobCall, call, "alice")

        try await holding.setHeld(holdingCall, true)
        try await f.waitFor(heldName, advancing: true, frames: 20) { if case .remoteHold(_, true) = $0 { true } else { false } }
        for _ in 0..<5 { await f.step() }
        let sentByHeld = try #require(await held.statistics(heldCall)).packetsSent
        let sentByHolding = try #require(await holding.statistics(holdingCall)).packetsSent
        for _ in 0..<100 { await f.step() }
        // Neither side sends audio while held (RTCP goes on: the call stays alive and measured).
        #expect(try #require(await held.statistics(heldCall)).packetsSent == sentByHeld)
        #expect(try #require(await holding.statistics(holdingCall)).packetsSent == sentByHolding)
        #expect(await holding.manager.state(of: holdingCall)?.isOnHold == true)
        #expect(!f.events(heldName).contains { if case .connectionLost = $0 { true } else { false } })

        try await holding.setHeld(holdingCall, false)
        try await f.waitFor(heldName, advancing: true, frames: 20) { if case .remoteHold(_, false) = $0 { true } else { false } }
        for _ in 0..<60 { await f.step() }
        #expect(try #require(await held.statistics(heldCall)).packetsSent > sentByHeld + 50)
        #expect(try #require(await holding.statistics(holdingCall)).packetsSent > sentByHolding + 50)
        try await alice.hangUp(call)
        try await f.waitFor("bob") { if case .ended = $0 { true } else { false } }
        await f.shutdown()

        // What each person heard: the other's tone, a silence as long as the hold, the tone again.
        for (name, tone) in [("alice", 660.0), ("bob", 440.0)] {
            let frames = try Self.frames(f.path("\(name)-heard.wav"))
            let silence = Self.longestSilence(frames)
            #expect(silence >= 100 && silence <= 125, "\(name): a silence of \(silence) frames for a hold of ~105")
            #expect(frames.suffix(40).filter { Self.hasTone($0, tone) }.count >= 35, "\(name) does not hear the other after the resume")
            #expect(frames.prefix(60).filter { Self.hasTone($0, tone) }.count >= 35, "\(name) did not hear the other before the hold")
        }
    }

    @Test func theHeldPartyHearsHoldAudioAndTheHolderHearsNothing() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", input: .tone(440), output: .wav(f.path("alice-heard.wav"))) { $0.holdAudio = .tone }
        let bob = try await f.node("bob", input: .tone(660), output: .wav(f.path("bob-heard.wav")))
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        try await f.waitFor("bob") { if case .connected = $0 { true } else { false } }
        for _ in 0..<50 { await f.step() }
        try await alice.setHeld(call, true)
        try await f.waitFor("bob", advancing: true, frames: 20) { if case .remoteHold(_, true) = $0 { true } else { false } }
        for _ in 0..<100 { await f.step() }
        try await alice.hangUp(call)
        try await f.waitFor("bob") { if case .ended = $0 { true } else { false } }
        await f.shutdown()

        // Bob hears the 425 Hz waiting tone, never Alice's 440 Hz microphone, in the hold's last second.
        let bobHeard = try Self.frames(f.path("bob-heard.wav")).suffix(60).prefix(50)
        #expect(bobHeard.filter { Self.hasTone($0, 425) }.count >= 45)
        #expect(bobHeard.allSatisfy { Goertzel.power(of: 440, in: $0) < Goertzel.power(of: 425, in: $0) })
        // Alice hears nothing of Bob.
        let aliceHeard = try Self.frames(f.path("alice-heard.wav")).suffix(60).prefix(50)
        #expect(Self.longestSilence(Array(aliceHeard)) == 50)
    }

    @Test func aMuteIsKeptThroughHoldAndResume() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", input: .tone(440))
        let bob = try await f.node("bob", input: .tone(660), output: .wav(f.path("bob-heard.wav")))
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        try await f.waitFor("bob") { if case .connected = $0 { true } else { false } }
        for _ in 0..<20 { await f.step() }
        try await alice.setMuted(call, true)
        try await alice.setHeld(call, true)
        for _ in 0..<20 { await f.step() }
        try await alice.setHeld(call, false)
        try await f.waitFor("bob", advancing: true, frames: 20) { if case .remoteHold(_, false) = $0 { true } else { false } }
        for _ in 0..<60 { await f.step() }
        #expect(await alice.manager.state(of: call)?.isMuted == true)
        try await alice.hangUp(call)
        try await f.waitFor("bob") { if case .ended = $0 { true } else { false } }
        await f.shutdown()
        // After the resume Bob hears silence, not Alice's muted microphone.
        let after = try Self.frames(f.path("bob-heard.wav")).suffix(50)
        #expect(after.allSatisfy { ($0.map { abs(Int($0)) }.max() ?? 0) <= 33 })
    }

    @Test func holdsThatCrossAreSettledAndBothSidesEndUpHeld() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", input: .tone(440))
        let bob = try await f.node("bob", input: .tone(660))
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        try await f.waitFor("bob") { if case .connected = $0 { true } else { false } }
        let bobCall = try #require(await bob.liveCalls.first)
        for _ in 0..<20 { await f.step() }
        // Both hold in the same instant: their offers cross on the wire.
        async let a: Void = alice.setHeld(call, true)
        async let b: Void = bob.setHeld(bobCall, true)
        _ = try await (a, b)
        for _ in 0..<20 { await f.step() }
        let sentA = try #require(await alice.statistics(call)).packetsSent
        let sentB = try #require(await bob.statistics(bobCall)).packetsSent
        for _ in 0..<50 { await f.step() }
        #expect(try #require(await alice.statistics(call)).packetsSent == sentA)
        #expect(try #require(await bob.statistics(bobCall)).packetsSent == sentB)
        // Alice resumes: Bob still holds, so nothing flows yet; Bob resumes: both ways again.
        try await alice.setHeld(call, false)
        for _ in 0..<20 { await f.step() }
        #expect(try #require(await alice.statistics(call)).packetsSent == sentA)
        try await bob.setHeld(bobCall, false)
        for _ in 0..<30 { await f.step() }
        #expect(try #require(await alice.statistics(call)).packetsSent > sentA + 20)
        #expect(try #require(await bob.statistics(bobCall)).packetsSent > sentB + 20)
        await f.shutdown()
    }
}
