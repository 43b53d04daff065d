@_spi(Simulation) import CallNode
import CallNodeTestKit
import Foundation
import Testing

/// A node whose audio session is slow to activate (a phone's system activates it some hundreds
/// of milliseconds after the answer; the simulator sets the delay to put other events in that
/// window): the call's leg waits for its audio that long, counted connected by its manager,
/// and then runs.
@Suite struct AudioActivationDelayTests {
    @Test func aLegWaitsForItsAudioAsLongAsTheSessionTakesThenRuns() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", input: .tone(440)) { $0.audioActivationDelay = .milliseconds(400) }
        let bob = try await f.node("bob", input: .tone(660))
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        func awaiting() async -> Bool {
            if case .awaitingAudio = await alice.inspect().legs[call]?.phase { true } else { false }
        }
        for _ in 0..<300 where await !awaiting() { await f.step() }
        #expect(await awaiting())
        #expect(await alice.manager.state(of: call)?.phase == .connected, "the manager counts the call connected once its media is")
        var frames = 0
        while await awaiting(), frames < 100 {
            await f.step()
            frames += 1
        }
        // 400 ms is 20 frames of 20 ms (give or take where in a frame the wait began).
        #expect((18...22).contains(frames), "the leg waited \(frames) frames for its audio")
        let after = await alice.inspect().legs[call]?.phase
        #expect({ if case .connected = after { true } else { false } }(), "\(String(describing: after))")
        for _ in 0..<50 { await f.step() }
        #expect(try #require(await alice.statistics(call)).packetsReceived > 20)
        try await alice.hangUp(call)
        try await f.waitFor("bob", advancing: true) { if case .ended = $0 { true } else { false } }
        await f.shutdown()
    }
}
