@testable import CallNode
import CallNodeTestKit
import CallNodeTestSupport
import Foundation
import Media
import Testing

/// Several calls at one node, on manual time: Bob talks with Alice, Carol calls; hold-and-answer,
/// swap, merge into a conference, unmerge — checked by which tones each person hears in each
/// stretch of their recording.
@Suite struct MultiCallTests {
    /// Each person's voice: a tone of their own.
    static let voices: [String: Double] = ["alice": 440, "bob": 660, "carol": 880]

    /// What a person heard in a stretch of their recording: the voices in it (by the share of
    /// the stretch's energy at each voice's frequency), or none when it is silent.
    static func voices(in samples: ArraySlice<Int16>) -> Set<String> {
        let energy = samples.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(max(1, samples.count))
        guard energy > 100 else { return [] }  // below −50 dBFS: silence
        var heard: Set<String> = []
        for (name, frequency) in voices where Goertzel.share(of: frequency, in: samples) > 0.1 {
            heard.insert(name)
        }
        return heard
    }

    /// A recording and the manual time its first sample was played at.
    struct Recording {
        let samples: [Int16]
        let start: Duration

        /// The voices heard in each 100 ms block of the middle of [from, to) (manual time),
        /// leaving out `margin` at each end for the switch itself.
        func heard(from: Duration, to: Duration, margin: Duration = .milliseconds(300)) -> [Set<String>] {
            let first = Int(((from + margin - start) / .milliseconds(20)).rounded()) * 960
            let last = Int(((to - margin - start) / .milliseconds(20)).rounded()) * 960
            return stride(from: max(0, first), to: min(samples.count, last) - 4_799, by: 4_800).map {
                MultiCallTests.voices(in: samples[$0..<($0 + 4_800)])
            }
        }
    }

    @Test func holdAndAnswerSwapMergeAndUnmergeWithThreeNodes() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", input: .tone(440), output: .wav(f.path("alice.wav")))
        let bob = try await f.node("bob", input: .tone(660), output: .wav(f.path("bob.wav")), autoAnswer: false)
        let carol = try await f.node("carol", input: .tone(880), output: .wav(f.path("carol.wav")))
        try await f.trust(alice, as: "alice", bob, as: "bob")
        try await f.trust(carol, as: "carol", bob, as: "bob")
        func connected(_ name: String, after: Int = 0) async throws -> Duration {
            var seen = 0
            return try await f.waitFor(name, advancing: true) {
                guard case .connected = $0 else { return false }
                seen += 1
                return seen > after
            }.at
        }
        func phase(_ frames: Int = 100) async -> (Duration, Duration) {
            let from = f.timers.now.offset
            for _ in 0..<frames { await f.step() }
            return (from, f.timers.now.offset)
        }

        // Alice calls Bob; he answers.
        let aliceCall = try await alice.call(.contact("bob"))
        let ringing = try await f.waitFor("bob", advancing: true) { if case .incoming = $0 { true } else { false } }
        guard case let .incoming(bobAlice, _, _, _) = ringing.event else { return }
        try await bob.answer(bobAlice)
        let aliceStart = try await connected("alice"), bobStart = try await connected("bob")
        let talking = await phase()

        // Carol calls: it rings while Bob talks to Alice; he answers, holding Alice.
        let carolCall = try await carol.call(.contact("bob"))
        let second = try await f.waitFor("bob", advancing: true) {
            if case let .incoming(uuid, _, _, _) = $0 { uuid != bobAlice } else { false }
        }
        guard case let .incoming(bobCarol, _, _, _) = second.event else { return }
        try await bob.answer(bobCarol, others: .hold)
        let carolStart = try await connected("carol")
        #expect(await bob.manager.state(of: bobAlice)?.isOnHold == true)
        let holdAndAnswer = await phase()

        // Swap back to Alice: Carol is held.
        try await bob.swap(to: bobAlice)
        let swapped = await phase()
        #expect(await bob.manager.state(of: bobCarol)?.isOnHold == true)

        // Merge: everyone hears everyone else.
        try await bob.merge(bobCarol, with: bobAlice)
        let merged = await phase()
        #expect(Set(bob.conference(of: bobAlice)) == [bobAlice, bobCarol])

        // Unmerge Carol: Bob talks to her alone; Alice is held.
        try await bob.unmerge(bobCarol)
        let split = await phase()
        #expect(bob.conference(of: bobAlice).isEmpty)

        try await alice.hangUp(aliceCall)
        try await carol.hangUp(carolCall)
        try await f.waitFor("bob", advancing: true) {
            if case let .ended(uuid, _, _, _) = $0 { uuid == bobCarol } else { false }
        }
        await f.shutdown()

        let recordings = try [
            "alice": Recording(samples: WAV.read(path: f.path("alice.wav")).samples, start: aliceStart),
            "bob": Recording(samples: WAV.read(path: f.path("bob.wav")).samples, start: bobStart),
            "carol": Recording(samples: WAV.read(path: f.path("carol.wav")).samples, start: carolStart),
        ]
        func expectHeard(_ name: String, _ window: (Duration, Duration), _ voices: Set<String>, _ what: String) {
            let blocks = recordings[name]!.heard(from: window.0, to: window.1)
            #expect(blocks.count >= 10, "\(what): \(name)'s recording has \(blocks.count) blocks there")
            let wrong = blocks.filter { $0 != voices }
            #expect(wrong.count <= 1, "\(what): \(name) should hear \(voices.sorted()), heard \(blocks.map { $0.sorted() })")
        }
        expectHeard("alice", talking, ["bob"], "Alice and Bob")
        expectHeard("bob", talking, ["alice"], "Alice and Bob")
        expectHeard("alice", holdAndAnswer, [], "hold-and-answer")
        expectHeard("bob", holdAndAnswer, ["carol"], "hold-and-answer")
        expectHeard("carol", holdAndAnswer, ["bob"], "hold-and-answer")
        expectHeard("alice", swapped, ["bob"], "swapped back")
        expectHeard("bob", swapped, ["alice"], "swapped back")
        expectHeard("carol", swapped, [], "swapped back")
        expectHeard("alice", merged, ["bob", "carol"], "merged")
        expectHeard("bob", merged, ["alice", "carol"], "merged")
        expectHeard("carol", merged, ["alice", "bob"], "merged")
        expectHeard("alice", split, [], "unmerged")
        expectHeard("bob", split, ["carol"], "unmerged")
        expectHeard("carol", split, ["bob"], "unmerged")
        // Bob's recording is as long as his calls ran (one output, the calls summed, not
        // interleaved one after the other).
        let bobSeconds = Double(recordings["bob"]!.samples.count) / 48_000
        let wall = Double((split.1 - bobStart) / .milliseconds(1)) / 1_000
        #expect(abs(bobSeconds - wall) < 0.5, "Bob's recording is \(bobSeconds) s for \(wall) s of calls")
    }
}

/// What a node answering by itself does with a second caller.
@Suite struct AutoAnswerPolicyTests {
    /// Alice calls auto-answering Bob, then Carol does; returns Bob's calls (Alice's, Carol's).
    static func twoCallers(_ f: InMemoryNodes, configure: @escaping (inout CallNodeConfiguration) -> Void) async throws
        -> (bob: CallNode, alice: CallNode, carol: CallNode, aliceCall: UUID, carolCall: UUID) {
        let alice = try await f.node("alice", input: .tone(440), output: .wav(f.path("alice.wav")))
        let bob = try await f.node("bob", input: .tone(660), output: .wav(f.path("bob.wav")), configure: configure)
        let carol = try await f.node("carol", input: .tone(880), output: .wav(f.path("carol.wav")))
        try await f.trust(alice, as: "alice", bob, as: "bob")
        try await f.trust(carol, as: "carol", bob, as: "bob")
        let aliceCall = try await alice.call(.contact("bob"))
        try await f.waitFor("alice", advancing: true) { if case .connected = $0 { true } else { false } }
        let carolCall = try await carol.call(.contact("bob"))
        return (bob, alice, carol, aliceCall, carolCall)
    }

    @Test func aSecondCallerIsAnsweredWithTheFirstHeld() async throws {
        let f = try InMemoryNodes()
        let (bob, alice, _, aliceCall, _) = try await Self.twoCallers(f) { _ in }
        try await f.waitFor("carol", advancing: true) { if case .connected = $0 { true } else { false } }
        try await f.waitFor("alice", advancing: true, frames: 20) { if case .remoteHold(_, true) = $0 { true } else { false } }
        #expect(bob.manager.controller.calls.filter(\.isOnHold).count == 1)
        #expect(await alice.manager.state(of: aliceCall)?.phase == .connected)
        await f.shutdown()
    }

    /// A merge requested while a hold of one of its calls is still on its way (an answer that
    /// holds the others, then a merge at once) resumes that call too: seen in a conference of
    /// four where one member stayed held, hearing no one.
    @Test func aMergeRightAfterAHoldResumesTheCallBeingHeld() async throws {
        let f = try InMemoryNodes()
        let (bob, _, _, _, _) = try await Self.twoCallers(f) { _ in }
        try await f.waitFor("carol", advancing: true) { if case .connected = $0 { true } else { false } }
        try await f.waitFor("alice", advancing: true, frames: 20) { if case .remoteHold(_, true) = $0 { true } else { false } }
        let calls = bob.manager.controller.calls
        let held = try #require(calls.first { $0.isOnHold }), active = try #require(calls.first { !$0.isOnHold })
        // The active call's hold is requested (not waited for), and the merge follows at once.
        _ = try await bob.manager.controller.request(.setHeld(call: active.id, onHold: true))
        try await bob.merge(active.id, with: held.id)
        for _ in 0..<20 { await f.step() }
        let after = bob.manager.controller.calls
        #expect(after.allSatisfy { !$0.isOnHold }, "held after the merge: \(after.filter(\.isOnHold).map(\.id))")
        #expect(Set(bob.conference(of: held.id)) == [held.id, active.id])
        await f.shutdown()
    }

    @Test func withConferenceASecondCallerIsMergedIn() async throws {
        let f = try InMemoryNodes()
        let (bob, _, _, _, _) = try await Self.twoCallers(f) { $0.autoAnswerOthers = .merge }
        try await f.waitFor("carol", advancing: true) { if case .connected = $0 { true } else { false } }
        for _ in 0..<100 { await f.step() }
        let calls = bob.manager.controller.calls
        #expect(calls.count == 2 && calls.allSatisfy { !$0.isOnHold })
        #expect(bob.conference(of: calls[0].id).count == 2)
        await f.shutdown()
        // Carol hears Bob and Alice; Alice hears Bob and Carol (the last second of the call).
        for (name, expected) in [("carol", Set(["alice", "bob"])), ("alice", Set(["bob", "carol"]))] {
            let samples = try WAV.read(path: f.path("\(name).wav")).samples
            let last = samples.suffix(48_000).dropLast(9_600)
            let blocks = stride(from: last.startIndex, to: last.endIndex - 4_799, by: 4_800).map { MultiCallTests.voices(in: samples[$0..<($0 + 4_800)]) }
            #expect(blocks.count >= 6 && blocks.allSatisfy { $0 == expected }, "\(name) heard \(blocks.map { $0.sorted() })")
        }
    }

    @Test func pastMaxCallsACallerIsRefusedAsBusy() async throws {
        let f = try InMemoryNodes()
        let (bob, _, _, _, _) = try await Self.twoCallers(f) { $0.maximumCalls = 1 }
        let refused = try await f.waitFor("carol", advancing: true) { if case .ended = $0 { true } else { false } }
        guard case let .ended(_, reason, detail, _) = refused.event else { return }
        #expect(reason == .remoteEnded && detail == "rejected: busy", "\(reason) \(detail ?? "")")
        #expect(bob.manager.controller.calls.count == 1)
        await f.shutdown()
    }
}

extension AutoAnswerPolicyTests {
    @Test func aConferenceTakesNoMoreCallsThanTheProviderAllows() async throws {
        let f = try InMemoryNodes()
        let bob = try await f.node("bob", input: .tone(660)) {
            $0.autoAnswerOthers = .keep
            $0.provider.maximumCallsPerCallGroup = 2
            $0.provider.maximumCallGroups = 3
        }
        var calls: [UUID] = []
        for (index, name) in ["alice", "carol", "dave"].enumerated() {
            let caller = try await f.node(name, input: .tone(Double(300 + 100 * index)))
            try await f.trust(caller, as: name, bob, as: "bob")
            _ = try await caller.call(.contact("bob"))
            try await f.waitFor(name, advancing: true) { if case .connected = $0 { true } else { false } }
            calls.append(try #require(bob.manager.controller.calls.last?.id))
        }
        try await bob.merge(calls[1], with: calls[0])
        for _ in 0..<5 { await f.step() }
        #expect(Set(bob.conference(of: calls[0])) == Set(calls.prefix(2)))
        await #expect(throws: CallRequestError.maximumCallsReached(limit: 2)) { try await bob.merge(calls[2], with: calls[0]) }
        for _ in 0..<5 { await f.step() }
        #expect(bob.conference(of: calls[2]).isEmpty)
        await f.shutdown()
    }
}

extension AutoAnswerPolicyTests {
    @Test func endAndAnswerEndsTheCallOnAndAnswersTheNewOne() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", input: .tone(440))
        let bob = try await f.node("bob", input: .tone(660), autoAnswer: false)
        let carol = try await f.node("carol", input: .tone(880))
        try await f.trust(alice, as: "alice", bob, as: "bob")
        try await f.trust(carol, as: "carol", bob, as: "bob")
        _ = try await alice.call(.contact("bob"))
        let first = try await f.waitFor("bob", advancing: true) { if case .incoming = $0 { true } else { false } }
        guard case let .incoming(aliceCall, _, _, _) = first.event else { return }
        try await bob.answer(aliceCall)
        try await f.waitFor("alice", advancing: true) { if case .connected = $0 { true } else { false } }
        _ = try await carol.call(.contact("bob"))
        let second = try await f.waitFor("bob", advancing: true) {
            if case let .incoming(uuid, _, _, _) = $0 { uuid != aliceCall } else { false }
        }
        guard case let .incoming(carolCall, _, _, _) = second.event else { return }
        try await bob.answer(carolCall, others: .end)
        try await f.waitFor("carol", advancing: true) { if case .connected = $0 { true } else { false } }
        try await f.waitFor("alice", advancing: true) { if case .ended(_, .remoteEnded, _, _) = $0 { true } else { false } }
        #expect(bob.manager.controller.calls.map(\.id) == [carolCall])
        await f.shutdown()
    }
}
