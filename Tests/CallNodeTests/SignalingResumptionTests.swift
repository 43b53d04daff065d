@testable import CallNode
import CallNodeTestKit
import Foundation
import Locking
import Signaling
import Testing

/// Calls that outlive their signaling connection and repair breaks from either side, on manual
/// time: two whole nodes over in-memory signaling and ICE.
@Suite struct SignalingResumptionTests {
    static func isEvent(_ kind: String) -> (NodeEvent) -> Bool {
        { InMemoryNodes.kind($0) == kind }
    }

    static func received(_ node: CallNode) async -> Int {
        guard let call = await node.liveCalls.first else { return 0 }
        return await node.statistics(call)?.packetsReceived ?? 0
    }

    @Test func aDroppedConnectionIsResumedMessagesArriveOnceAndMediaNeverStops() async throws {
        let f = try InMemoryNodes()
        let (alice, bob, call) = try await ManualTimeNodeTests.connectedCall(f)
        for _ in 0..<25 { await f.step() }
        let bobCall = try #require(await bob.liveCalls.first)
        let bobAddress = try #require(bob.listenAddress)

        // The connection resets, and neither can reach the other for a while.
        let aliceAddress = try #require(alice.listenAddress)
        f.signaling.setReachable(bobAddress, false)
        f.signaling.setReachable(aliceAddress, false)
        f.signaling.dropConnections()
        try await f.waitFor("alice", advancing: true, Self.isEvent("signaling-lost"))
        try await f.waitFor("bob", advancing: true, Self.isEvent("signaling-lost"))
        for _ in 0..<50 { await f.step() }
        #expect(!f.story("alice").contains("connection-lost") && !f.story("bob").contains("connection-lost"),
                "the media path knows nothing of the signaling's loss: \(f.story("alice"))")
        // Bob holds the call meanwhile: held at once here, told to Alice when they can talk.
        try await bob.setHeld(bobCall, true)
        let heardBefore = await Self.received(bob)
        for _ in 0..<100 { await f.step() }
        #expect(!f.events("alice").contains { if case .remoteHold = $0 { true } else { false } })
        #expect(await Self.received(bob) - heardBefore >= 95, "media goes on while the signaling is down")

        f.signaling.setReachable(bobAddress, true)
        try await f.waitFor("alice", advancing: true, Self.isEvent("signaling-resumed"))
        try await f.waitFor("bob", advancing: true, Self.isEvent("signaling-resumed"))
        try await f.waitFor("alice", advancing: true) { $0 == .remoteHold(call, true) }
        for _ in 0..<50 { await f.step() }
        #expect(f.events("alice").filter { $0 == .remoteHold(call, true) }.count == 1, "the hold arrived once")
        let calls = (await alice.liveCalls, await bob.liveCalls)
        #expect(calls.0 == [call] && calls.1 == [bobCall], "the same call, not a new one")
        #expect(f.signaling.openConnections == 1)

        try await bob.setHeld(bobCall, false)
        try await f.waitFor("alice", advancing: true) { $0 == .remoteHold(call, false) }
        try await alice.hangUp(call)
        try await f.waitFor("bob", advancing: true) { if case .ended(_, .remoteEnded, _, _) = $0 { true } else { false } }
        await f.shutdown()
        #expect(try await alice.store.recents().count == 1)
        #expect(try await bob.store.recents().count == 1)
    }

    @Test func aCallNotResumedWithinTheWindowEndsAsFailedOnBothSides() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", input: .tone(440)) { $0.resumeWindow = .seconds(5) }
        let bob = try await f.node("bob", input: .tone(660)) { $0.resumeWindow = .seconds(5) }
        try await f.trust(alice, as: "alice", bob, as: "bob")
        _ = try await alice.call(.contact("bob"))
        try await f.waitFor("alice") { if case .connected = $0 { true } else { false } }
        try await f.waitFor("bob") { if case .connected = $0 { true } else { false } }
        f.signaling.setReachable(try #require(bob.listenAddress), false)
        f.signaling.setReachable(try #require(alice.listenAddress), false)
        f.signaling.dropConnections()
        let lost = try await f.waitFor("alice", advancing: true, Self.isEvent("signaling-lost"))
        for name in ["alice", "bob"] {
            let ended = try await f.waitFor(name, advancing: true, frames: 400) { if case .ended = $0 { true } else { false } }
            guard case let .ended(_, reason, detail, _) = ended.event else { continue }
            #expect(reason == .failed, "\(name): \(reason)")
            #expect(detail == "the signaling connection was lost and the call could not be resumed within 5 s", "\(name): \(detail ?? "")")
            #expect(ended.at - lost.at >= .milliseconds(4_900) && ended.at - lost.at <= .milliseconds(5_200), "\(name) after \(ended.at - lost.at)")
        }
        await f.shutdown()
    }

    @Test func theCalleeResumesWhenOnlyItCanReachTheCaller() async throws {
        let f = try InMemoryNodes()
        let (alice, bob, call) = try await ManualTimeNodeTests.connectedCall(f)
        for _ in 0..<25 { await f.step() }
        // Bob's address is out of reach (he moved behind a NAT, say); Alice's is not.
        f.signaling.setReachable(try #require(bob.listenAddress), false)
        f.signaling.dropConnections()
        try await f.waitFor("alice", advancing: true, Self.isEvent("signaling-resumed"))
        try await f.waitFor("bob", advancing: true, Self.isEvent("signaling-resumed"))
        try await alice.setHeld(call, true)
        try await f.waitFor("bob", advancing: true) { if case .remoteHold(_, true) = $0 { true } else { false } }
        #expect(f.signaling.openConnections == 1)
        await f.shutdown()
    }

    @Test func whenBothReconnectAtOnceTheCallersConnectionWins() async throws {
        let f = try InMemoryNodes()
        let (alice, bob, call) = try await ManualTimeNodeTests.connectedCall(f)
        for _ in 0..<25 { await f.step() }
        f.signaling.dropConnections()
        try await f.waitFor("alice", advancing: true, Self.isEvent("signaling-resumed"))
        try await f.waitFor("bob", advancing: true, Self.isEvent("signaling-resumed"))
        for _ in 0..<25 { await f.step() }
        // One connection carries the call, and messages go both ways on it.
        #expect(f.signaling.openConnections == 1)
        try await alice.setHeld(call, true)
        try await f.waitFor("bob", advancing: true) { if case .remoteHold(_, true) = $0 { true } else { false } }
        let bobCall = try #require(await bob.liveCalls.first)
        try await bob.setMuted(bobCall, true)
        try await alice.setHeld(call, false)
        try await f.waitFor("bob", advancing: true) { if case .remoteHold(_, false) = $0 { true } else { false } }
        try await bob.hangUp(bobCall)
        try await f.waitFor("alice", advancing: true) { if case .ended(_, .remoteEnded, _, _) = $0 { true } else { false } }
        await f.shutdown()
    }

    @Test func aStrangerWithTheTokenCannotResumeSomeoneElsesCall() async throws {
        let f = try InMemoryNodes()
        let (alice, bob, call) = try await ManualTimeNodeTests.connectedCall(f)
        let mallory = try await f.node("mallory")
        let token = try #require(await (alice.legs[call]?.dialect as? EnvelopeDialect)?.token)
        let bobAddress = try #require(bob.listenAddress)

        /// Asks Bob to resume Alice's call as `identity` with `token`; Bob's answer.
        func resume(as identity: NodeIdentity, token: String) async throws -> SignalMessage? {
            let answer = Locked<SignalMessage?>(nil)
            try await f.signaling.connect(to: bobAddress, as: identity, pin: nil) { connection, messages in
                try? await connection.send(SignalEnvelope(call: call, .resume(ResumeRequest(token: token, received: 0))))
                for await item in messages {
                    if case let .success(envelope) = item, envelope.call == call {
                        answer.withLock { $0 = envelope.message }
                        return
                    }
                }
            }
            return answer.withLock { $0 }
        }
        // The token replayed from another identity, and a guess from Alice's own.
        #expect(try await resume(as: mallory.identity, token: token) == .resumeRefused("this call is not yours to resume"))
        #expect(try await resume(as: alice.identity, token: String(repeating: "0", count: 64)) == .resumeRefused("wrong resume token"))
        // The call goes on over its own connection, both ways.
        let before = await Self.received(alice)
        for _ in 0..<50 { await f.step() }
        #expect(await Self.received(alice) - before >= 45)
        #expect(await bob.liveCalls.count == 1)
        try await alice.setHeld(call, true)
        try await f.waitFor("bob", advancing: true) { if case .remoteHold(_, true) = $0 { true } else { false } }
        #expect(!f.story("bob").contains("signaling-lost"))
        await f.shutdown()
    }

    @Test func aBreakOnlyTheCallerSeesIsRepairedByARestartItStarts() async throws {
        let f = try InMemoryNodes()
        let (alice, bob, call) = try await ManualTimeNodeTests.connectedCall(f)
        for _ in 0..<25 { await f.step() }
        // Nothing reaches Alice (the caller, ICE-controlled) any more; Bob still hears her.
        let brokenAt = f.timers.now.offset
        f.network.breakPaths(toward: .controlled)
        let lost = try await f.waitFor("alice", advancing: true, Self.isEvent("connection-lost"))
        // Bob's media never stalls: until its pair's consent could run out, it has lost nothing.
        while f.timers.now.offset - brokenAt < InMemoryIceNetwork.consentTimeout - .milliseconds(100) { await f.step() }
        #expect(!f.story("bob").contains("connection-lost"), "\(f.story("bob"))")
        let restart = try await f.waitFor("alice", advancing: true) { $0 == .iceRestarted(call, byPeer: false) }
        #expect(restart.at - lost.at >= .milliseconds(7_400) && restart.at - lost.at <= .milliseconds(7_600),
                "the caller restarts an interval and a half after the loss: \(restart.at - lost.at)")
        try await f.waitFor("bob", advancing: true) { if case .iceRestarted(_, byPeer: true) = $0 { true } else { false } }
        try await f.waitFor("alice", advancing: true, frames: 200, Self.isEvent("connection-restored"))
        let before = await Self.received(alice)
        for _ in 0..<50 { await f.step() }
        #expect(await Self.received(alice) - before >= 45, "Alice hears Bob again")
        // Bob's consent checks get no answers through the break (they go to Alice), so its ICE
        // may give the pair up as consent runs out, 8 s in, just before Alice's restart (8.5 s)
        // comes (libnice: 7.9 s); that restart repairs Bob's side too, and Bob starts none.
        #expect(f.story("bob").last == "connection-restored", "\(f.story("bob"))")
        #expect(!f.events("bob").contains { if case .iceRestarted(_, byPeer: false) = $0 { true } else { false } })
        _ = bob
        await f.shutdown()
    }

    /// A call hung up while its signaling was down: the end cannot reach the other side, which
    /// resumes the call once it can and is told the call was hung up — so it ends as hung up on,
    /// not as failed (found by the simulator: `callnode-sim`, a hang-up during an unreachable
    /// node).
    @Test func aCallHungUpWhileItsSignalingWasDownEndsAsHungUpOnOnTheOtherSide() async throws {
        let f = try InMemoryNodes()
        let (alice, bob, call) = try await ManualTimeNodeTests.connectedCall(f)
        for _ in 0..<10 { await f.step() }
        let addresses = [try #require(alice.listenAddress), try #require(bob.listenAddress)]
        for address in addresses { f.signaling.setReachable(address, false) }
        f.signaling.dropConnections()
        try await f.waitFor("alice", advancing: true, Self.isEvent("signaling-lost"))
        try await f.waitFor("bob", advancing: true, Self.isEvent("signaling-lost"))
        try await alice.hangUp(call)
        try await f.waitFor("alice", advancing: true, Self.isEvent("ended(localEnded)"))
        for _ in 0..<25 { await f.step() }
        #expect(!f.events("bob").contains { if case .ended = $0 { true } else { false } }, "Bob cannot know yet")
        for address in addresses { f.signaling.setReachable(address, true) }
        let bobEnd = try await f.waitFor("bob", advancing: true, frames: 500) { if case .ended = $0 { true } else { false } }
        guard case let .ended(ended, reason, detail, _) = bobEnd.event else { return }
        #expect(ended == call)
        #expect(reason == .remoteEnded, "Bob's call ended as \(reason.rawValue): \(detail ?? "-")")
        #expect(await bob.liveCalls.isEmpty)
        _ = bob
        await f.shutdown()
    }

    @Test func aChangeOfThisHostsRouteRestartsICEAtOnceAndTheCallGoesOn() async throws {
        let f = try InMemoryNodes()
        let network = Locked(HostNetworkSnapshot(addresses: ["192.0.2.10"], defaultRoutes: ["wlan0 via 192.0.2.1"]))
        let alice = try await f.node("alice", input: .tone(440)) { configuration in
            configuration.hostNetwork = { network.withLock { $0 } }
            configuration.hostNetworkChanges = nil  // read on the manual clock, every 0.5 s
        }
        let bob = try await f.node("bob", input: .tone(660))
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        try await f.waitFor("alice", advancing: true) { if case .connected = $0 { true } else { false } }
        for _ in 0..<25 { await f.step() }
        #expect(!f.story("alice").contains("ice-restart(by-peer: false)"), "no change, no restart")

        // A laptop moves to another network: a new address and a new default route.
        let changedAt = f.timers.now.offset
        network.withLock { $0 = HostNetworkSnapshot(addresses: ["198.51.100.7"], defaultRoutes: ["wlan0 via 198.51.100.1"]) }
        let change = try await f.waitFor("alice", advancing: true, Self.isEvent("network-changed"))
        #expect(change.event == .hostNetworkChanged(added: ["198.51.100.7"], removed: ["192.0.2.10"], routeChanged: true))
        let restart = try await f.waitFor("alice", advancing: true) { $0 == .iceRestarted(call, byPeer: false) }
        #expect(restart.at - changedAt <= .milliseconds(600), "restarted \(restart.at - changedAt) after the change")
        try await f.waitFor("bob", advancing: true) { if case .iceRestarted(_, byPeer: true) = $0 { true } else { false } }
        let before = await Self.received(bob)
        for _ in 0..<50 { await f.step() }
        #expect(await Self.received(bob) - before >= 45)
        #expect(await alice.liveCalls == [call])
        await f.shutdown()
    }
}

/// A peer whose process dies closes its signaling connection (its kernel does) and its media
/// stops: the survivor ends the call within seconds, saying the other node went away. A
/// network that breaks closes nothing: that call waits, restarting ICE, as before.
@Suite struct PeerGoneTests {
    @Test func aPeerWhoseProcessDiedIsNoticedWithinSeconds() async throws {
        let f = try InMemoryNodes()
        let (alice, bob, _) = try await ManualTimeNodeTests.connectedCall(f)
        for _ in 0..<50 { await f.step() }
        let diedAt = f.timers.now.offset
        // Bob's process is gone: nothing answers at his address, his connection closes, his media
        // stops (and, in this one process, his node cannot reach Alice's either).
        f.signaling.setReachable(try #require(bob.listenAddress), false)
        f.signaling.setReachable(try #require(alice.listenAddress), false)
        f.network.setConditions(.init(partitioned: true))
        f.signaling.dropConnections()
        let ended = try await f.waitFor("alice", advancing: true, frames: 1_000) { if case .ended = $0 { true } else { false } }
        guard case let .ended(_, reason, detail, _) = ended.event else { return }
        #expect(reason == .failed)
        #expect(detail?.contains("went away") == true, "\(detail ?? "-")")
        // The media stall (1 s) and the grace (3 s), not the resume window (30 s).
        #expect(ended.at - diedAt <= .seconds(5), "ended \(ended.at - diedAt) after the peer died")
        await f.shutdown()
    }

    @Test func aBrokenNetworkThatClosesNothingIsWaitedFor() async throws {
        let f = try InMemoryNodes()
        _ = try await ManualTimeNodeTests.connectedCall(f)
        for _ in 0..<50 { await f.step() }
        f.network.setConditions(.init(partitioned: true))
        for _ in 0..<(15 * 50) { await f.step() }  // 15 s: past the stall, the grace and two restarts
        #expect(!f.events("alice").contains { if case .ended = $0 { true } else { false } })
        // The network comes back: the call goes on.
        f.network.setConditions(.init())
        try await f.waitFor("alice", advancing: true, frames: 500) { if case .connectionRestored = $0 { true } else { false } }
        await f.shutdown()
    }
}
