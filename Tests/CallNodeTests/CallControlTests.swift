import CallNode
import CallNodeTestKit
import CallNodeTestSupport
import Foundation
import Testing

/// Whole nodes on manual time (``InMemoryNodes``) doing what a person does with calls: being
/// refused and why, restarting ICE from either side, switching the speaker in an app-owned
/// session, calls taking agents made ahead. The same stories ran on sockets and libnice in
/// real time before; they are call logic, so they run here deterministically, and the
/// real-time suites keep what only real parts can show.
@Suite struct CallControlTests {
    /// Calls `target` from `caller` (a node of `f` named `name`) and returns the rejection the
    /// caller reported, with how its call ended.
    static func rejection(_ f: InMemoryNodes, _ name: String, calling target: CallTarget,
                          line: Int = #line) async throws -> (RejectReason?, CallEndReason) {
        let caller = try #require(f.nodes[name])
        let call = try await caller.call(target)
        let ended = try await f.waitFor(name, advancing: true, frames: 500, line: line) {
            if case .ended(call, _, _, _) = $0 { true } else { false }
        }
        guard case let .ended(_, reason, _, _) = ended.event else { throw TestFailure("not an end") }
        let rejected = f.events(name).lazy.compactMap { event -> RejectReason? in
            if case let .rejected(uuid, reason) = event, uuid == call { reason } else { nil }
        }.first
        return (rejected, reason)
    }

    @Test func calleesRejectWithTheirReason() async throws {
        let f = try InMemoryNodes()
        var oneCall = ProviderConfiguration(localizedName: "bob")
        oneCall.maximumCallGroups = 1
        oneCall.maximumCallsPerCallGroup = 1
        let alice = try await f.node("alice")
        let bob = try await f.node("bob", autoAnswer: false) { $0.provider = oneCall }
        let bobAddress = try #require(bob.listenAddress)

        // Alice is not Bob's contact.
        let unknown = try await Self.rejection(f, "alice", calling: .address(bobAddress))
        #expect(unknown.0 == .unknownCaller)
        #expect(unknown.1 == .unanswered || unknown.1 == .remoteEnded || unknown.1 == .failed, "\(unknown.1)")

        try await f.trust(alice, as: "alice", bob, as: "bob")
        await bob.manager.setDoNotDisturb(true)
        #expect(try await Self.rejection(f, "alice", calling: .contact("bob")).0 == .doNotDisturb)
        await bob.manager.setDoNotDisturb(false)

        try await bob.store.directory.block(CallHandle(.generic, alice.identity.fingerprint.hex))
        #expect(try await Self.rejection(f, "alice", calling: .contact("bob")).0 == .blocked)
        try await bob.store.directory.unblock(CallHandle(.generic, alice.identity.fingerprint.hex))

        // Busy: one call rings at Bob, a second one finds no room.
        let ringing = try await alice.call(.contact("bob"))
        try await f.waitFor("bob", advancing: true) { if case .incoming = $0 { true } else { false } }
        #expect(try await Self.rejection(f, "alice", calling: .contact("bob")).0 == .busy)

        // Declined: Bob hangs up the ringing call.
        try await bob.hangUp(ringing)
        try await f.waitFor("alice", advancing: true) { $0 == .rejected(ringing, .declined) }
        // None of these calls was ever connected, and none is left.
        #expect(!f.events("alice").contains { if case .connected = $0 { true } else { false } })
        #expect(await alice.liveCalls.isEmpty)
        #expect(await bob.liveCalls.isEmpty)
        await f.shutdown()
    }

    @Test func aCalleeWithAnotherIdentityThanTheContactsIsRefused() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice")
        let bob = try await f.node("bob") { $0.acceptUnknownCallers = true }
        let mallory = try await f.node("mallory") { $0.acceptUnknownCallers = true }
        // Alice's contact "bob" has Bob's fingerprint but Mallory's address.
        try await alice.store.contacts.add(Contact(name: "bob", fingerprint: bob.identity.fingerprint.hex,
                                                   address: mallory.listenAddress?.description))
        let call = try await alice.call(.contact("bob"))
        let ended = try await f.waitFor("alice", advancing: true) { if case .ended(call, _, _, _) = $0 { true } else { false } }
        guard case let .ended(_, reason, detail, _) = ended.event else { return }
        #expect(reason == .failed)
        #expect(detail?.contains("not the pinned") == true, "\(detail ?? "-")")
        // Mallory never saw an invitation.
        for _ in 0..<25 { await f.step() }
        #expect(!f.events("mallory").contains { if case .incoming = $0 { true } else { false } })
        await f.shutdown()
    }

    @Test func aMissingAudioDeviceEndsTheCallWithTheReason() async throws {
        try await ALSATestLock.withLock {
            let f = try InMemoryNodes()
            let alice = try await f.node("alice", input: .alsa("callnode_no_such_device"))
            let bob = try await f.node("bob", input: .tone(440))
            try await f.trust(alice, as: "alice", bob, as: "bob")
            let call = try await alice.call(.contact("bob"))
            let ended = try await f.waitFor("alice", advancing: true) { if case .ended(call, _, _, _) = $0 { true } else { false } }
            guard case let .ended(_, reason, detail, _) = ended.event else { return }
            #expect(reason == .failed)
            #expect(detail?.contains("callnode_no_such_device") == true, "\(detail ?? "-")")
            // Bob's side of it ends too, and no call is left at either.
            try await f.waitFor("bob", advancing: true) { if case .ended = $0 { true } else { false } }
            #expect(await alice.liveCalls.isEmpty)
            #expect(await bob.liveCalls.isEmpty)
            await f.shutdown()
        }
    }

    /// How many packets `name`'s call has received with audible sound, once it has at least
    /// `packets` more than `beyond` (stepping time until then).
    static func hearing(_ f: InMemoryNodes, _ name: String, call: UUID, beyond: Int, packets: Int = 25,
                        line: Int = #line) async throws -> Int {
        let node = try #require(f.nodes[name])
        for _ in 0..<500 {
            if let s = await node.statistics(call), s.packetsReceived >= beyond + packets, s.receiveLevel > -40 {
                return s.packetsReceived
            }
            await f.step()
        }
        throw TestFailure("\(name) did not hear \(packets) packets beyond \(beyond) (line \(line))")
    }

    @Test func eitherSideRestartsICEAndAudioGoesOnBothWays() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", input: .tone(440))
        let bob = try await f.node("bob", input: .tone(660))
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        let incoming = try await f.waitFor("bob", advancing: true) { if case .incoming = $0 { true } else { false } }
        guard case let .incoming(bobCall, _, _, _) = incoming.event else { return }
        let aliceBefore = try await Self.hearing(f, "alice", call: call, beyond: 0)
        let bobBefore = try await Self.hearing(f, "bob", call: bobCall, beyond: 0)

        let stranger = UUID()
        await #expect(throws: CallNodeError.noSuchCall(stranger)) { try await bob.restartICE(stranger) }

        func pairs(_ name: String, _ uuid: UUID) -> Int {
            f.events(name).count { if case .selectedPair(uuid, _) = $0 { true } else { false } }
        }
        let bobPairs = pairs("bob", bobCall), alicePairs = pairs("alice", call)
        try await bob.restartICE(bobCall)
        try await f.waitFor("bob", advancing: true) { $0 == .iceRestarted(bobCall, byPeer: false) }
        try await f.waitFor("alice", advancing: true) { $0 == .iceRestarted(call, byPeer: true) }
        // New checks select a pair again on both sides, and audio keeps coming both ways.
        for _ in 0..<200 where pairs("bob", bobCall) == bobPairs || pairs("alice", call) == alicePairs { await f.step() }
        #expect(pairs("bob", bobCall) > bobPairs && pairs("alice", call) > alicePairs)
        let aliceAfter = try await Self.hearing(f, "alice", call: call, beyond: aliceBefore)
        let bobAfter = try await Self.hearing(f, "bob", call: bobCall, beyond: bobBefore)

        // The caller restarts too (a break only it sees); the callee answers.
        let bobPairsAgain = pairs("bob", bobCall), alicePairsAgain = pairs("alice", call)
        try await alice.restartICE(call)
        try await f.waitFor("alice", advancing: true) { $0 == .iceRestarted(call, byPeer: false) }
        try await f.waitFor("bob", advancing: true) { $0 == .iceRestarted(bobCall, byPeer: true) }
        for _ in 0..<200 where pairs("bob", bobCall) == bobPairsAgain || pairs("alice", call) == alicePairsAgain { await f.step() }
        #expect(pairs("bob", bobCall) > bobPairsAgain && pairs("alice", call) > alicePairsAgain)
        _ = try await Self.hearing(f, "alice", call: call, beyond: aliceAfter)
        _ = try await Self.hearing(f, "bob", call: bobCall, beyond: bobAfter)
        #expect(await alice.liveCalls == [call])
        #expect(await bob.liveCalls == [bobCall])
        // Audio never stopped long enough to be reported lost.
        #expect(!f.events("alice").contains { if case .connectionLost = $0 { true } else { false } })

        try await alice.hangUp(call)
        try await f.waitFor("bob", advancing: true) { if case .ended(_, .remoteEnded, _, _) = $0 { true } else { false } }
        await f.shutdown()
    }

    @Test func appOwnedNodesCallAndTheCalleeSwitchesToItsSpeaker() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", input: .tone(440)) { $0.appOwnedAudio = true }
        let bob = try await f.node("bob", input: .tone(660), output: .wav(f.path("bob-default.wav"))) {
            $0.appOwnedAudio = true
            $0.audio = NodeAudioBackend(input: .tone(660), output: .wav(f.path("bob-default.wav")),
                                        speaker: .wav(f.path("bob-speaker.wav")))
        }
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        let incoming = try await f.waitFor("bob", advancing: true) { if case .incoming = $0 { true } else { false } }
        guard case let .incoming(bobCall, _, _, _) = incoming.event else { return }
        let heard = try await Self.hearing(f, "bob", call: bobCall, beyond: 0)
        _ = try await Self.hearing(f, "alice", call: call, beyond: 0)
        // Bob switches to his speaker mid-call: the output reopens there and audio goes on.
        try await bob.setSpeaker(true)
        _ = try await Self.hearing(f, "bob", call: bobCall, beyond: heard, packets: 50)
        try await alice.hangUp(call)
        try await f.waitFor("bob", advancing: true) { if case .ended(_, .remoteEnded, _, _) = $0 { true } else { false } }
        await f.shutdown()
        // Both outputs heard Alice's tone: first the default, then the speaker.
        let before = try WAV.read(path: f.path("bob-default.wav")).samples, after = try WAV.read(path: f.path("bob-speaker.wav")).samples
        #expect(before.count > 48_000 / 2 && after.count > 48_000 / 2, "\(before.count) then \(after.count) samples")
        #expect(after.map { abs(Int($0)) }.max() ?? 0 > 3_000)
    }

    /// A pooled agent gathered as controlling, and libnice keeps the role an agent gathered
    /// in (it reads the new one back, but checks in the old: both sides of a call claimed
    /// control): the callee, which controls a node call, takes one; the caller makes its own.
    @Test("callees take agents made ahead, callers make their own, and the pool refills after first audio", arguments: [1, 0])
    func callsTakePooledAgents(pool: Int) async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", input: .tone(440)) { $0.iceAgentPool = pool }
        let bob = try await f.node("bob", input: .tone(660)) { $0.iceAgentPool = pool }
        try await f.trust(alice, as: "alice", bob, as: "bob")
        for _ in 0..<5 { await f.step() }
        #expect(await alice.pooledICEAgents == pool)
        #expect(await bob.pooledICEAgents == pool)
        for (caller, callerName, callee, calleeName) in [(alice, "alice", bob, "bob"), (bob, "bob", alice, "alice")] {
            let incomingBefore = f.events(calleeName).count { if case .incoming = $0 { true } else { false } }
            let firstAudioBefore = (f.events(callerName).count { $0.isFirstAudio }, f.events(calleeName).count { $0.isFirstAudio })
            let call = try await caller.call(.contact(calleeName))
            // The callee took its agent when the invitation came; the caller's pool is kept.
            for _ in 0..<100 where f.events(calleeName).count(where: { if case .incoming = $0 { true } else { false } }) == incomingBefore {
                await f.settle()
                try await Task.sleep(for: .milliseconds(1))
            }
            let incoming = f.events(calleeName).last { if case .incoming = $0 { true } else { false } }
            guard case let .incoming(calleeCall, _, _, _) = incoming else { throw TestFailure("no invitation at \(calleeName)") }
            #expect(await caller.pooledICEAgents == pool)
            #expect(await callee.pooledICEAgents == 0)
            for _ in 0..<300 where f.events(callerName).count(where: { $0.isFirstAudio }) == firstAudioBefore.0
                || f.events(calleeName).count(where: { $0.isFirstAudio }) == firstAudioBefore.1 { await f.step() }
            for _ in 0..<5 { await f.step() }
            // Refilled once audio flows, not while the call was being set up.
            #expect(await caller.pooledICEAgents == pool)
            #expect(await callee.pooledICEAgents == pool)
            _ = try await Self.hearing(f, calleeName, call: calleeCall, beyond: 0, packets: 10)
            try await caller.hangUp(call)
            var steps = 0
            while steps < 50 {
                let callerLive = await caller.liveCalls, calleeLive = await callee.liveCalls
                if callerLive.isEmpty && calleeLive.isEmpty { break }
                await f.step()
                steps += 1
            }
            #expect(await caller.liveCalls.isEmpty)
            #expect(await callee.liveCalls.isEmpty)
        }
        await f.shutdown()
        #expect(await alice.pooledICEAgents == 0)
        #expect(await bob.pooledICEAgents == 0)
    }
}

extension NodeEvent {
    fileprivate var isFirstAudio: Bool { if case .firstAudio = self { true } else { false } }
}

/// `--max-calls` is the one limit: an answering service takes as many independent callers as
/// it is set to (not CallKit's two call groups), each kept apart, and refuses the next as busy.
@Suite struct MaximumCallsTests {
    @Test func anAnsweringServiceTakesAsManyCallersAsItsLimitAndRefusesTheNext() async throws {
        let f = try InMemoryNodes()
        let service = try await f.node("service") { configuration in
            configuration.maximumCalls = 4
            configuration.autoAnswerOthers = .keep
            configuration.acceptUnknownCallers = true
        }
        var callers: [(String, CallNode)] = []
        for index in 1...5 {
            let name = "caller\(index)"
            let caller = try await f.node(name, input: .tone(300 + Double(index) * 100))
            try await caller.store.contacts.add(Contact(name: "service", fingerprint: service.identity.fingerprint.hex,
                                                        address: service.listenAddress?.description))
            callers.append((name, caller))
        }
        var calls: [UUID] = []
        for (name, caller) in callers.prefix(4) {
            calls.append(try await caller.call(.contact("service")))
            try await f.waitFor(name, advancing: true) { if case .connected = $0 { true } else { false } }
        }
        #expect(await service.liveCalls.count == 4)
        // None of them was held for another: each keeps sending and being heard.
        for _ in 0..<50 { await f.step() }
        for call in await service.liveCalls {
            let heard = try #require(await service.statistics(call))
            #expect(heard.receiveLevel > -40, "a caller is not heard (\(heard.receiveLevel) dB)")
        }
        // The fifth finds the service busy.
        let (name, fifth) = callers[4]
        let refused = try await fifth.call(.contact("service"))
        try await f.waitFor(name, advancing: true) { $0 == .rejected(refused, .busy) }
        for ((_, caller), call) in zip(callers, calls) { try await caller.hangUp(call) }
        await f.shutdown()
    }
}

/// The caller gives up while the call rings: the callee has a missed call, in its events and Recents.
@Suite struct MissedCallTests {
    @Test func aCallerThatGivesUpWhileItRingsLeavesAMissedCall() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice")
        let bob = try await f.node("bob", autoAnswer: false)
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        let rang = try await f.waitFor("bob", advancing: true) { if case .incoming = $0 { true } else { false } }
        guard case let .incoming(bobCall, _, _, _) = rang.event else { return }
        for _ in 0..<100 { await f.step() }  // two seconds of ringing
        try await alice.hangUp(call)
        let ended = try await f.waitFor("bob", advancing: true) { if case .ended(bobCall, _, _, _) = $0 { true } else { false } }
        guard case let .ended(_, reason, detail, _) = ended.event else { return }
        #expect(reason == .unanswered)
        #expect(detail?.hasPrefix("missed") == true, "\(detail ?? "-")")
        try await bob.store.flush()
        let rows = try await bob.store.recents()
        let recent = try #require(rows.first { $0.id == bobCall })
        #expect(recent.reason == .unanswered && recent.connected == nil && recent.direction == .incoming,
                "the Recents row: \(recent); every row: \(rows)")
        await f.shutdown()
    }
}
