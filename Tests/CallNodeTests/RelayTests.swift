@testable import CallNode
import CallNodeTestSupport
import Foundation
import Locking
import Testing

/// Nodes that meet through the rendezvous relay: by fingerprint, and in sessions.
extension RealTimeTests {
@Suite(.serialized) struct RelayTests {
    typealias Fixture = TwoNodeTests.Fixture

    func relayedNode(_ f: Fixture, _ name: String, relay: RelayServer, input: NodeAudioInput = .silence,
                     output: NodeAudioOutput = .null) async throws -> CallNode {
        var configuration = CallNodeConfiguration(home: f.path(name))
        configuration.displayName = name
        configuration.listenAddress = nil  // reachable only through the relay
        configuration.relay = SignalAddress(host: "127.0.0.1", port: relay.port)
        configuration.ice.localAddresses = ["127.0.0.1"]
        configuration.audio = NodeAudioBackend(input: input, output: output)
        configuration.autoAnswer = true
        return try await CallNode(configuration: configuration)
    }

    @Test func registeredNodesCallThroughTheRelayWhichSeesOnlyTLS() async throws {
        let f = try Fixture()
        let relay = try await RelayServer(host: "127.0.0.1", port: 0)
        let alice = try await relayedNode(f, "alice", relay: relay, input: .tone(440))
        let bob = try await relayedNode(f, "bob", relay: relay)
        // Contacts without addresses: the relay is the way to reach them.
        try await alice.store.contacts.add(Contact(name: "bob", fingerprint: bob.identity.fingerprint.hex))
        try await bob.store.contacts.add(Contact(name: "alice", fingerprint: alice.identity.fingerprint.hex))
        let aliceEvents = alice.events(), bobEvents = bob.events()
        await alice.start()
        await bob.start()
        _ = try await TwoNodeTests.next(aliceEvents) { if case .registered = $0 { true } else { false } }
        _ = try await TwoNodeTests.next(bobEvents) { if case .registered = $0 { true } else { false } }
        #expect(relay.statistics.registered == 2)

        let call = try await alice.call(.contact("bob"))
        guard case let .incoming(_, from, name, _) = try await TwoNodeTests.next(bobEvents, where: { if case .incoming = $0 { true } else { false } }) else { return }
        #expect(from == alice.identity.fingerprint && name == "alice")
        // Frames are encrypted end to end through the relay too (keys agreed inside the spliced TLS).
        guard case let .secured(_, security) = try await TwoNodeTests.next(bobEvents, where: { if case .secured = $0 { true } else { false } })
        else { return }
        #expect(security.frameEncryption && security.securityCode == SecurityCode.between(alice.identity.fingerprint, bob.identity.fingerprint))
        _ = try await TwoNodeTests.next(bobEvents) { if case let .statistics(_, s) = $0 { s.packetsReceived > 25 && s.receiveLevel > -40 } else { false } }
        try await alice.hangUp(call)
        _ = try await TwoNodeTests.next(bobEvents) { if case let .ended(_, reason, _, _) = $0 { reason == .remoteEnded } else { false } }

        let seen = relay.statistics
        #expect(seen.splices == 1)
        #expect(seen.tlsRecords > 10 && seen.nonTLSStreams == 0, "\(seen)")
        await alice.shutdown()
        await bob.shutdown()
        await relay.close()
    }

    /// A node that runs for months joins many sessions: each join's task is forgotten once it
    /// ends, not kept until the node shuts down.
    @Test func endedJoinsLeaveNoTasksBehind() async throws {
        let f = try Fixture()
        let node = try await f.node("joiner")
        let events = node.events()
        // The start-up warm-up is a task that ends on its own too: counted after it is done.
        let warmed = ContinuousClock.now + .seconds(10)
        while await !node.isWarmedUp && ContinuousClock.now < warmed { try await Task.sleep(for: .milliseconds(10)) }
        let before = await node.keptTaskCount
        let nowhere = SignalAddress(host: "127.0.0.1", port: Int(try #require(TwoNodeTests.bindLoopback())))
        for index in 0..<5 { try await node.join(session: "session-\(index)", relay: nowhere) }
        for _ in 0..<5 { _ = try await TwoNodeTests.next(events) { if case .sessionFailed = $0 { true } else { false } } }
        // Each forgets itself right after reporting the failure (waited for, bounded).
        let deadline = ContinuousClock.now + .seconds(10)
        while await node.keptTaskCount > before && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(10)) }
        // No more than before: a task of the node's own start (its agent pool filling) may end
        // meanwhile on a loaded machine, so fewer is no failure; a join's kept task is.
        #expect(await node.keptTaskCount <= before, "the ended joins' tasks are still kept")
        await node.shutdown()
    }

    /// `start()` warms libsrtp and the dialing TLS settings up on a thread of its own; shutting
    /// down waits for it, so a process that exits right after (a dial refused at once) does
    /// not run OpenSSL's exit handlers under a thread still inside libcrypto.
    @Test func shuttingDownWaitsForTheWarmUp() async throws {
        let f = try Fixture()
        var configuration = CallNodeConfiguration(home: f.path("quick"))
        configuration.listenAddress = nil
        configuration.ice.localAddresses = ["127.0.0.1"]
        configuration.iceAgentPool = 0
        let node = try await CallNode(configuration: configuration)
        let finished = Locked(false)
        await node.replaceWarmUp {
            usleep(300_000)  // its own thread: a slow warm-up, as on a loaded machine
            finished.withLock { $0 = true }
        }
        await node.start()
        #expect(await !node.isWarmedUp)
        await node.shutdown()
        #expect(finished.withLock { $0 }, "shut-down returned while the warm-up still ran")
    }

    /// Shutting down lets go of the relay: the node does not report that the relay dropped it.
    @Test func aNodeShuttingDownDoesNotReportTheRelayLost() async throws {
        let f = try Fixture()
        let relay = try await RelayServer(host: "127.0.0.1", port: 0)
        let bob = try await relayedNode(f, "bob", relay: relay)
        let bobEvents = bob.events()
        await bob.start()
        _ = try await TwoNodeTests.next(bobEvents) { if case .registered = $0 { true } else { false } }
        await bob.shutdown()
        var after: [String] = []
        for await event in bobEvents { after.append("\(event)") }  // the stream ends with the shut-down
        #expect(!after.contains { $0.contains("relayLost") }, "\(after)")
        await relay.close()
    }

    /// The relay restarts (a new process on the same port, knowing nobody): the registered node
    /// registers again by itself, and a call through the new relay reaches it.
    @Test func aRegisteredNodeSurvivesARelayRestart() async throws {
        let f = try Fixture()
        let first = try await RelayServer(host: "127.0.0.1", port: 0)
        let port = first.port
        let bob = try await relayedNode(f, "bob", relay: first, input: .tone(440))
        let bobEvents = bob.events()
        await bob.start()
        _ = try await TwoNodeTests.next(bobEvents) { if case .registered = $0 { true } else { false } }
        await first.close()
        _ = try await TwoNodeTests.next(bobEvents) { if case .relayLost = $0 { true } else { false } }
        let second = try await RelayServer(host: "127.0.0.1", port: port)
        _ = try await TwoNodeTests.next(bobEvents, within: .seconds(20)) { if case .registered = $0 { true } else { false } }
        #expect(second.statistics.registered == 1)

        let alice = try await relayedNode(f, "alice", relay: second)
        try await bob.store.contacts.add(Contact(name: "alice", fingerprint: alice.identity.fingerprint.hex))
        let aliceEvents = alice.events()
        await alice.start()
        let call = try await alice.call(.relayed(bob.identity.fingerprint, relay: SignalAddress(host: "127.0.0.1", port: port)))
        _ = try await TwoNodeTests.next(aliceEvents) { if case let .statistics(_, s) = $0 { s.packetsReceived > 25 && s.receiveLevel > -40 } else { false } }
        try await alice.hangUp(call)
        await alice.shutdown()
        await bob.shutdown()
        await second.close()
    }

    @Test func anUnregisteredFingerprintIsUnreachable() async throws {
        let f = try Fixture()
        let relay = try await RelayServer(host: "127.0.0.1", port: 0)
        let alice = try await relayedNode(f, "alice", relay: relay)
        let events = alice.events()
        await alice.start()
        let nobody = try NodeIdentity.generate().fingerprint
        let call = try await alice.call(.relayed(nobody, relay: SignalAddress(host: "127.0.0.1", port: relay.port)))
        guard case let .ended(_, reason, detail, _) = try await TwoNodeTests.next(events, where: { if case .ended(call, _, _, _) = $0 { true } else { false } }) else { return }
        #expect(reason == .failed)
        #expect(detail?.contains("no node with that fingerprint is registered") == true, "\(detail ?? "-")")
        await alice.shutdown()
        await relay.close()
    }

    @Test func twoJoinersTalkAThirdIsRefusedAndAnExpiredSessionIsRefused() async throws {
        let f = try Fixture()
        let relay = try await RelayServer(host: "127.0.0.1", port: 0)
        let address = SignalAddress(host: "127.0.0.1", port: relay.port)
        let id = try await RelayClient.newSession(relay: "127.0.0.1", port: relay.port)
        #expect(id.count == 32)

        // Strangers: no contacts on either side, and no listener.
        let alice = try await f.node("alice", input: .tone(440))
        let bob = try await f.node("bob", input: .tone(660), autoAnswer: false)
        let aliceEvents = alice.events(), bobEvents = bob.events()
        try await alice.join(session: id, relay: address, title: "standup", startMuted: true)
        _ = try await TwoNodeTests.next(aliceEvents) { $0 == .sessionWaiting(id) }
        try await bob.join(session: id, relay: address)
        // Both connect without anyone answering; the one who asked to start muted sends silence.
        _ = try await TwoNodeTests.next(aliceEvents) { if case .connected = $0 { true } else { false } }
        _ = try await TwoNodeTests.next(bobEvents) { if case .connected = $0 { true } else { false } }
        _ = try await TwoNodeTests.next(aliceEvents) { if case let .statistics(_, s) = $0 { s.packetsReceived > 25 && s.receiveLevel > -40 } else { false } }
        _ = try await TwoNodeTests.next(bobEvents) { if case let .statistics(_, s) = $0 { s.packetsReceived > 25 && s.receiveLevel < -60 } else { false } }

        // A third participant is refused.
        let carol = try await f.node("carol")
        let carolEvents = carol.events()
        try await carol.join(session: id, relay: address)
        guard case let .sessionFailed(reason) = try await TwoNodeTests.next(carolEvents, where: { if case .sessionFailed = $0 { true } else { false } }) else { return }
        #expect(reason.contains("already has two participants"), "\(reason)")

        // Alice leaves: Bob's session ends, distinctly as the other side's leave.
        let aliceCall = try #require(await alice.liveCalls.first)
        try await alice.hangUp(aliceCall)
        guard case let .ended(_, bobReason, _, _) = try await TwoNodeTests.next(bobEvents, where: { if case .ended = $0 { true } else { false } }) else { return }
        #expect(bobReason == .remoteEnded)
        _ = try await TwoNodeTests.next(aliceEvents) { if case .session(_, .left) = $0 { true } else { false } }

        // The ended session is forgotten once its splice closes.
        for _ in 0..<100 where relay.statistics.sessions > 0 { try await Task.sleep(for: .milliseconds(20)) }
        #expect(relay.statistics.sessions == 0)
        try await carol.join(session: id, relay: address)
        guard case let .sessionFailed(forgotten) = try await TwoNodeTests.next(carolEvents, where: { if case .sessionFailed = $0 { true } else { false } }) else { return }
        #expect(forgotten.contains("unknown or expired"), "\(forgotten)")
        #expect(relay.statistics.refusedJoins == 2)
        await alice.shutdown()
        await bob.shutdown()
        await carol.shutdown()
        await relay.close()
    }

    @Test func aSessionNobodyElseJoinsExpiresForTheWaitingJoiner() async throws {
        let f = try Fixture()
        let relay = try await RelayServer(host: "127.0.0.1", port: 0)
        let id = try await RelayClient.newSession(relay: "127.0.0.1", port: relay.port, ttl: 1)
        let alice = try await f.node("alice")
        let events = alice.events()
        try await alice.join(session: id, relay: SignalAddress(host: "127.0.0.1", port: relay.port))
        guard case let .sessionFailed(reason) = try await TwoNodeTests.next(events, where: { if case .sessionFailed = $0 { true } else { false } }) else { return }
        #expect(reason.contains("expired"), "\(reason)")
        #expect(relay.statistics.openSessions == 0)
        // Joining the expired ID later is refused.
        try await alice.join(session: id, relay: SignalAddress(host: "127.0.0.1", port: relay.port))
        guard case let .sessionFailed(late) = try await TwoNodeTests.next(events, where: { if case .sessionFailed = $0 { true } else { false } }) else { return }
        #expect(late.contains("unknown or expired session"), "\(late)")
        await alice.shutdown()
        await relay.close()
    }
}
}
