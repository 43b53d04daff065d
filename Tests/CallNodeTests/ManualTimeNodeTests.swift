@testable import CallNode
import CallNodeTestKit
import CallNodeTestSupport
import Foundation
import Locking
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The test kit's two-node harness, under the name these tests grew up with.
typealias ManualTimeNodes = InMemoryNodes

@Suite struct ManualTimeNodeTests {
    /// Alice (a 440 Hz tone) calls Bob (a 660 Hz tone, answering at once) and both hear each other.
    static func connectedCall(_ f: ManualTimeNodes, bobOutput: NodeAudioOutput? = nil,
                              keyExchange: KeyExchange = .sdes) async throws -> (alice: CallNode, bob: CallNode, call: UUID) {
        let alice = try await f.node("alice", input: .tone(440), keyExchange: keyExchange)
        let bob = try await f.node("bob", input: .tone(660), output: bobOutput, keyExchange: keyExchange)
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        // DTLS needs a few round trips over the in-memory path, which moves on media ticks.
        try await f.waitFor("alice", advancing: keyExchange == .dtls) { if case .connected = $0 { true } else { false } }
        try await f.waitFor("bob", advancing: keyExchange == .dtls) { if case .connected = $0 { true } else { false } }
        return (alice, bob, call)
    }

    @Test(arguments: [KeyExchange.sdes, .dtls])
    func twoNodesConnectAndHearEachOther(keyExchange: KeyExchange) async throws {
        let f = try ManualTimeNodes()
        let (alice, bob, call) = try await Self.connectedCall(f, keyExchange: keyExchange)
        for _ in 0..<100 { await f.step() }
        let bobCall = await bob.liveCalls.first ?? call
        let heard = try #require(await bob.statistics(bobCall))
        let heardBack = try #require(await alice.statistics(call))
        #expect(heard.packetsReceived >= 90, "bob received \(heard.packetsReceived) packets in 2 s")
        #expect(heard.receiveLevel > -30 && heardBack.receiveLevel > -30, "levels \(heard.receiveLevel), \(heardBack.receiveLevel)")
        #expect(heard.packetsLost == 0)
        try await alice.hangUp(call)
        try await f.waitFor("bob") { if case .ended(_, .remoteEnded, _, _) = $0 { true } else { false } }
        await f.shutdown()
        #expect(f.story("alice").starts(with: ["listening", "dialing", "ringing", "selected-pair", "secured", "connected"]),
                "\(f.story("alice"))")
    }

    /// The figures a call's end is summed up with (the terminal's "sent N packets" line) are
    /// the call's last, not the periodic ones from up to a second before.
    @Test func aCallsLastStatisticsComeBeforeItsEnd() async throws {
        let f = try ManualTimeNodes()
        let (alice, _, call) = try await Self.connectedCall(f)
        // One periodic report (each second) and most of a second more.
        for _ in 0..<90 { await f.step() }
        let sentBeforeHangUp = try #require(await alice.statistics(call)).packetsSent
        try await alice.hangUp(call)
        try await f.waitFor("alice") { if case .ended = $0 { true } else { false } }
        let events = f.events("alice")
        let end = try #require(events.firstIndex { if case .ended = $0 { true } else { false } })
        let last = events[..<end].compactMap { event -> MediaStatistics? in
            if case let .statistics(_, statistics) = event { statistics } else { nil }
        }.last
        #expect(sentBeforeHangUp >= 80, "sent \(sentBeforeHangUp) in 90 frames")
        #expect((last?.packetsSent ?? 0) >= sentBeforeHangUp,
                "the last figures before the end: \(last?.packetsSent ?? 0) sent, where \(sentBeforeHangUp) had been sent")
        // Nothing of the call's figures comes after its end.
        #expect(!events[end...].contains { if case .statistics = $0 { true } else { false } })
        await f.shutdown()
    }

    @Test func mediaLossIsReportedThenAnICERestartRestoresTheCall() async throws {
        let f = try ManualTimeNodes()
        let (alice, bob, call) = try await Self.connectedCall(f)
        for _ in 0..<50 { await f.step() }
        let cutAt = f.timers.now.offset
        f.network.setConditions(.init(partitioned: true))
        let lostAlice = try await f.waitFor("alice", advancing: true) { if case .connectionLost = $0 { true } else { false } }
        let lostBob = try await f.waitFor("bob", advancing: true) { if case .connectionLost = $0 { true } else { false } }
        // The media's stall timeout (1 s) says it, not before (seen within a few frames: each
        // node notices in its own task, and the test moves on only once they had a chance to).
        for lost in [lostAlice.at, lostBob.at] {
            #expect(lost - cutAt >= .seconds(1) && lost - cutAt <= .milliseconds(1_500), "lost after \(lost - cutAt)")
        }
        // The callee restarts ICE after the restart interval (5 s); the caller follows.
        let restart = try await f.waitFor("bob", advancing: true) { if case .iceRestarted(_, byPeer: false) = $0 { true } else { false } }
        #expect(restart.at - lostBob.at >= .milliseconds(4_500) && restart.at - lostBob.at <= .milliseconds(5_500),
                "restart after \(restart.at - lostBob.at)")
        try await f.waitFor("alice", advancing: true) { if case .iceRestarted(_, byPeer: true) = $0 { true } else { false } }
        // The path heals: the restarted checks connect and audio flows again.
        f.network.setConditions(.init())
        try await f.waitFor("alice", advancing: true, frames: 400) { if case .connectionRestored = $0 { true } else { false } }
        try await f.waitFor("bob", advancing: true, frames: 400) { if case .connectionRestored = $0 { true } else { false } }
        let bobCall = await bob.liveCalls.first ?? call
        let before = try #require(await bob.statistics(bobCall)).packetsReceived
        for _ in 0..<50 { await f.step() }
        let after = try #require(await bob.statistics(bobCall))
        #expect(after.packetsReceived - before >= 45, "\(after.packetsReceived - before) packets after the restore")
        #expect(after.receiveLevel > -30)
        #expect(!f.events("alice").contains { if case .ended = $0 { true } else { false } })
        try await alice.hangUp(call)
        await f.shutdown()
    }

    @Test func aConnectionLostForTheWholeTimeoutEndsTheCallAsFailedOnBothSides() async throws {
        let f = try ManualTimeNodes()
        _ = try await Self.connectedCall(f)
        f.network.setConditions(.init(partitioned: true))
        let lost = try await f.waitFor("alice", advancing: true) { if case .connectionLost = $0 { true } else { false } }
        var timedOut: [String] = []
        for name in ["alice", "bob"] {
            let ended = try await f.waitFor(name, advancing: true, frames: 2_000) { if case .ended = $0 { true } else { false } }
            guard case let .ended(_, reason, detail, _) = ended.event else { continue }
            // Both sides lost the path at the same manual instant, give or take the frame in
            // which each node noticed; whichever times out first ends the call, and the other
            // may learn of it from the first one's end before its own timer fires.
            #expect(reason == .failed || reason == .remoteEnded, "\(name): \(reason)")
            if detail?.contains("the connection was lost") == true { timedOut.append(name) }
            // 30 s after the loss was reported (the stall timeout came first).
            #expect(ended.at - lost.at >= .seconds(29) && ended.at - lost.at <= .milliseconds(31_500), "\(name) ended after \(ended.at - lost.at)")
        }
        #expect(!timedOut.isEmpty, "neither side ended for the lost connection")
        await f.shutdown()
    }

    @Test func crossingHangUpsEndEachSideOnce() async throws {
        let f = try ManualTimeNodes()
        let (alice, bob, call) = try await Self.connectedCall(f)
        for _ in 0..<10 { await f.step() }
        let bobCall = try #require(await bob.liveCalls.first)
        async let a: Void = alice.hangUp(call)
        async let b: Void = bob.hangUp(bobCall)
        _ = try await (a, b)
        try await f.waitFor("alice") { if case .ended = $0 { true } else { false } }
        try await f.waitFor("bob") { if case .ended = $0 { true } else { false } }
        for _ in 0..<10 { await f.step() }
        for name in ["alice", "bob"] {
            let ends = f.events(name).filter { if case .ended = $0 { true } else { false } }
            #expect(ends.count == 1, "\(name): \(ends)")
            #expect(!f.events(name).contains { if case .peerError = $0 { true } else { false } }, "\(name): \(f.events(name))")
        }
        let left = (await alice.liveCalls, await bob.liveCalls)
        #expect(left.0.isEmpty && left.1.isEmpty)
        // Once a call has ended nothing of it runs: each leg's task group finishes, and the
        // only ICE paths left open are the ones pooled for the next call.
        func running() async -> Int { await alice.legRuns.count + bob.legRuns.count }
        for _ in 0..<500 { if await running() == 0 { break }; await f.settle() }
        #expect(await running() == 0, "legs still running their children")
        let pooled = await alice.pooledICEAgents + bob.pooledICEAgents
        #expect(f.network.openPaths == pooled, "\(f.network.openPaths) paths open, \(pooled) pooled")
        await f.shutdown()
    }

    @Test func aMuteSetWhileRingingIsNeverHeardThroughHoldAndResume() async throws {
        let f = try ManualTimeNodes()
        let alice = try await f.node("alice", input: .tone(440), autoAnswer: false)
        let bob = try await f.node("bob", input: .tone(660), output: .wav(f.path("bob-heard.wav")), autoAnswer: false)
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        let incoming = try await f.waitFor("bob") { if case .incoming = $0 { true } else { false } }
        guard case let .incoming(bobCall, _, _, _) = incoming.event else { return }
        try await f.waitFor("alice") { if case .ringing = $0 { true } else { false } }
        // Both mute while the call rings, before any media exists, and are shown muted.
        try await alice.setMuted(call, true)
        try await bob.setMuted(bobCall, true)
        try await f.waitFor("alice") { if case .state(call, _, _, true) = $0 { true } else { false } }
        try await f.waitFor("bob") { if case .state(bobCall, _, _, true) = $0 { true } else { false } }
        try await bob.answer(bobCall)
        try await f.waitFor("bob") { if case .connected = $0 { true } else { false } }
        for _ in 0..<50 { await f.step() }
        try await alice.setHeld(call, true)
        for _ in 0..<10 { await f.step() }
        try await alice.setHeld(call, false)
        for _ in 0..<50 { await f.step() }
        #expect(await alice.manager.state(of: call)?.isMuted == true)
        let received = try #require(await bob.statistics(bobCall)).packetsReceived
        #expect(received >= 90, "the path carried \(received) packets")  // none while held
        // Nothing of Bob's muted tone reached Alice either; the path works: Bob unmutes and
        // Alice hears him.
        #expect(try #require(await alice.statistics(call)).receiveLevel < -60)
        try await bob.setMuted(bobCall, false)
        for _ in 0..<25 { await f.step() }
        let heard = try #require(await alice.statistics(call)).receiveLevel
        #expect(heard > -40, "alice hears bob at \(heard) dBFS once he unmutes")
        try await alice.hangUp(call)
        try await f.waitFor("bob") { if case .ended = $0 { true } else { false } }
        await f.shutdown()
        let samples = try WAV.read(path: f.path("bob-heard.wav")).samples
        let peak = samples.map { abs(Int($0)) }.max() ?? 0
        #expect(samples.count >= 100 * 960, "the recording has \(samples.count) samples")
        #expect(peak <= 33, "bob heard alice's muted microphone (peak \(peak))")  // −60 dBFS
    }

    /// The seed bug, replayed on whole nodes: Bob's node takes its call's endpoints from the test
    /// kit's deliberately unsafe session. When his answer action activates it and the provider
    /// activates it again (the careless CallKit app), the call connects, packets flow both ways,
    /// and Alice hears nothing of Bob's microphone — nor Bob anything of Alice. With the provider
    /// the only one to activate (the same session and sequence, one activation fewer), and with
    /// the node's own `AudioSessionOwner<SystemOwned>` (where the app's activation does not
    /// compile), both hear each other.
    @Test(arguments: [UnsafeDoubleActivationSession.Flow.appAndProvider, .providerOnly, nil])
    func theSeedBugReplayedOnWholeNodes(flow: UnsafeDoubleActivationSession.Flow?) async throws {
        let f = try ManualTimeNodes()
        let speaker = ManualAudioEndpoint(bufferDuration: .seconds(4))
        let unsafe = flow.map { UnsafeDoubleActivationSession(microphone: ToneSource(frequency: 660, amplitude: 0.3, format: AudioFormat()),
                                                              speaker: speaker, flow: $0) }
        let alice = try await f.node("alice", input: .tone(440))
        let bob = try await f.node("bob", input: .tone(660), autoAnswer: false) { $0.audioStandIn = unsafe }
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        let incoming = try await f.waitFor("bob") { if case .incoming = $0 { true } else { false } }
        guard case let .incoming(bobCall, _, _, _) = incoming.event else { return }
        try await bob.answer(bobCall)
        for name in ["alice", "bob"] {
            try await f.waitFor(name) { if case .connected = $0 { true } else { false } }
        }
        for _ in 0..<100 { await f.step() }
        let aliceHeard = try #require(await alice.statistics(call))
        let bobHeard = try #require(await bob.statistics(bobCall))
        try await alice.hangUp(call)
        try await f.waitFor("bob") { if case .ended = $0 { true } else { false } }
        await f.shutdown()
        // Either way the call "works": connected, and packets flow both ways.
        #expect(aliceHeard.packetsReceived >= 90 && bobHeard.packetsReceived >= 90,
                "packets: alice \(aliceHeard.packetsReceived), bob \(bobHeard.packetsReceived)")
        let played = speaker.pullPlayback(maximum: speaker.playbackAvailable)
        let rms = (played.suffix(48_000).reduce(0.0) { $0 + Double($1) * Double($1) } / Double(max(1, min(48_000, played.count)))).squareRoot()
        switch flow {
        case .appAndProvider:
            #expect(unsafe?.activations == 2)
            #expect(aliceHeard.receiveLevel < -60, "alice heard bob's dead microphone at \(aliceHeard.receiveLevel) dB")
            #expect(rms < 50, "bob's speaker played after the second activation (RMS \(rms))")
        case .providerOnly:
            #expect(unsafe?.activations == 1)
            #expect(aliceHeard.receiveLevel > -30, "alice heard bob at \(aliceHeard.receiveLevel) dB")
            #expect(rms > 1000, "bob's speaker played alice (RMS \(rms))")
        case nil:
            #expect(aliceHeard.receiveLevel > -30 && bobHeard.receiveLevel > -30,
                    "levels: alice \(aliceHeard.receiveLevel), bob \(bobHeard.receiveLevel)")
        }
    }

    @Test func theSameCallTellsTheSameStoryEveryTime() async throws {
        var stories: [[String]] = []
        for _ in 0..<3 {
            let f = try ManualTimeNodes()
            let (alice, _, call) = try await Self.connectedCall(f)
            for _ in 0..<60 { await f.step() }
            f.network.setConditions(.init(partitioned: true))
            for name in ["alice", "bob"] {
                try await f.waitFor(name, advancing: true) { if case .connectionLost = $0 { true } else { false } }
            }
            f.network.setConditions(.init())
            for name in ["alice", "bob"] {
                try await f.waitFor(name, advancing: true) { if case .connectionRestored = $0 { true } else { false } }
            }
            try await alice.hangUp(call)
            try await f.waitFor("bob") { if case .ended = $0 { true } else { false } }
            await f.shutdown()
            stories.append(f.story("alice") + ["|"] + f.story("bob"))
        }
        #expect(stories.allSatisfy { $0 == stories[0] }, "\(stories)")
        print("manual-time call story: \(stories[0].joined(separator: " "))")
    }
}
