@testable import CallNode
import CallNodeTestKit
import CallNodeTestSupport
import Foundation
import Locking
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Two whole nodes — call managers, legs, audio sessions, media with real Opus and SRTP — on
/// manual time, over in-memory signaling and an in-memory ICE network: no socket, no libnice,
/// no waiting. Every timer (keep-alives, connection-lost timeouts, ICE restarts, ring and action
/// timeouts) runs on the test's `ManualClock`; media ticks on a manual `MediaClock`.
final class ManualTimeNodes: @unchecked Sendable {  // the event log is behind its own lock; the rest is set once in init
    let timers = ManualClock()
    let media = MediaClock.manual()
    let network: InMemoryIceNetwork
    let signaling = InMemorySignalNetwork()
    let directory: String
    private let logs = Locked<[String: [NodeEvent]]>([:])
    private var readers: [Task<Void, Never>] = []
    private(set) var nodes: [String: CallNode] = [:]

    init(conditions: InMemoryIceNetwork.Conditions = .init(), seed: UInt64 = 1) throws {
        network = InMemoryIceNetwork(conditions: conditions, seed: seed)
        media.add(network)  // first: each tick delivers what is due before the calls read
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("callnode-manual-\(UUID())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
    }

    deinit {
        for reader in readers { reader.cancel() }
        try? FileManager.default.removeItem(atPath: directory)
    }

    func path(_ name: String) -> String { directory + "/" + name }

    /// A node named `name` on the in-memory networks, its events logged.
    /// Each node records to its own file by default: sessions on the same files and tones share
    /// devices (and would interrupt each other when tests run side by side).
    func node(_ name: String, input: NodeAudioInput = .silence, output: NodeAudioOutput? = nil, autoAnswer: Bool = true,
              keyExchange: KeyExchange = .sdes) async throws -> CallNode {
        var configuration = CallNodeConfiguration(home: path(name))
        configuration.displayName = name
        configuration.listenAddress = SignalAddress(host: name, port: 7600)
        configuration.signalNetwork = signaling
        let network = self.network
        configuration.makeIcePath = { ice in network.makePath(role: ice.role) }
        configuration.clock = TimerClock(timers)
        configuration.mediaClock = media
        configuration.audio = NodeAudioBackend(input: input, output: output ?? .wav(path("\(name)-heard.wav")))
        configuration.autoAnswer = autoAnswer
        configuration.keyExchange = keyExchange
        let node = try await CallNode(configuration: configuration)
        let events = node.events()
        let logs = self.logs
        logs.withLock { $0[name] = [] }
        readers.append(Task { for await event in events { logs.withLock { $0[name, default: []].append(event) } } })
        await node.start()
        nodes[name] = node
        return node
    }

    /// `a` knows `b` by name at its in-memory address, and back.
    func trust(_ a: CallNode, as aName: String, _ b: CallNode, as bName: String) async throws {
        try await a.store.contacts.add(Contact(name: bName, fingerprint: b.identity.fingerprint.hex, address: b.listenAddress?.description))
        try await b.store.contacts.add(Contact(name: aName, fingerprint: a.identity.fingerprint.hex, address: a.listenAddress?.description))
    }

    func events(_ name: String) -> [NodeEvent] { logs.withLock { $0[name] ?? [] } }

    /// One frame period of manual time: timers first, then the media clock (the network
    /// delivers, then every call sends and plays), then every task gets to run.
    func step() async {
        timers.advance(by: media.frameDuration)
        await media.advance(frames: 1)
        await settle()
    }

    /// Lets the nodes' tasks run (message handling, media events, a call's teardown) before
    /// time moves again: manual time stands still meanwhile, so how long this takes changes
    /// nothing a test asserts, as long as the nodes get to finish what one instant started.
    func settle() async {
        for _ in 0..<8 { await Task.yield() }
        try? await Task.sleep(for: .microseconds(100))
        for _ in 0..<8 { await Task.yield() }
    }

    /// Waits until `name` has logged an event matching `predicate`, stepping manual time a frame
    /// at a time when `advancing` (up to `frames`), otherwise letting tasks run for at most
    /// `frames` rounds of a millisecond. Returns the event and the manual time it was seen at.
    @discardableResult
    func waitFor(_ name: String, advancing: Bool = false, frames: Int = 2_000, line: Int = #line,
                 _ predicate: (NodeEvent) -> Bool) async throws -> (event: NodeEvent, at: Duration) {
        for _ in 0..<frames {
            if let event = events(name).first(where: predicate) { return (event, timers.now.offset) }
            if advancing {
                await step()
            } else {
                await settle()
                try await Task.sleep(for: .milliseconds(1))
            }
        }
        if let event = events(name).first(where: predicate) { return (event, timers.now.offset) }
        let ended = events(name).compactMap { event -> String? in if case let .ended(_, _, detail, _) = event { detail } else { nil } }
        throw TestFailure("\(name): no matching event (waited at line \(line)); events: \(events(name).map(Self.kind)); ended: \(ended)")
    }

    /// Shuts every node down.
    func shutdown() async {
        for node in nodes.values { await node.shutdown() }
    }

    /// An event's kind without its identifiers and figures: what the determinism check compares.
    static func kind(_ event: NodeEvent) -> String {
        switch event {
        case .listening: "listening"
        case .dialing: "dialing"
        case .incoming: "incoming"
        case .ringing: "ringing"
        case .state: "state"
        case .selectedPair: "selected-pair"
        case .connected: "connected"
        case .secured: "secured"
        case .firstAudio: "first-audio"
        case .statistics: "statistics"
        case let .remoteHold(_, on): "remote-hold(\(on))"
        case .dtmf: "dtmf"
        case .connectionLost: "connection-lost"
        case .connectionRestored: "connection-restored"
        case let .playoutReset(_, reset): "playout-reset(\(reset.reason.rawValue))"
        case let .iceRestarted(_, byPeer): "ice-restart(by-peer: \(byPeer))"
        case let .rejected(_, reason): "rejected(\(reason.rawValue))"
        case let .ended(_, reason, _, _): "ended(\(reason.rawValue))"
        default: "\(event)".split(separator: "(").first.map(String.init) ?? "other"
        }
    }

    /// The events whose order is the call's own (not the manager's state snapshots and session
    /// statuses or the periodic statistics, which other tasks publish).
    func story(_ name: String) -> [String] {
        events(name).map(Self.kind).filter { !["state", "session", "statistics"].contains($0) }
    }
}

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
        try await alice.setMuted(call, true)
        try await bob.answer(bobCall)
        try await f.waitFor("bob") { if case .connected = $0 { true } else { false } }
        for _ in 0..<50 { await f.step() }
        try await alice.setHeld(call, true)
        for _ in 0..<10 { await f.step() }
        try await alice.setHeld(call, false)
        for _ in 0..<50 { await f.step() }
        #expect(await alice.manager.state(of: call)?.isMuted == true)
        let received = try #require(await bob.statistics(bobCall)).packetsReceived
        #expect(received >= 100, "the path carried \(received) packets")
        try await alice.hangUp(call)
        try await f.waitFor("bob") { if case .ended = $0 { true } else { false } }
        await f.shutdown()
        let samples = try WAV.read(path: f.path("bob-heard.wav")).samples
        let peak = samples.map { abs(Int($0)) }.max() ?? 0
        #expect(samples.count >= 100 * 960, "the recording has \(samples.count) samples")
        #expect(peak <= 33, "bob heard alice's muted microphone (peak \(peak))")  // −60 dBFS
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
