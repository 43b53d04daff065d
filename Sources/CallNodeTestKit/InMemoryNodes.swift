import CallNode
import Clocks
import Foundation
import Locking

/// Two whole nodes — call managers, legs, audio sessions, media with real Opus and SRTP — on
/// manual time, over in-memory signaling and an in-memory ICE network: no socket, no libnice,
/// no waiting. Every timer (keep-alives, connection-lost timeouts, ICE restarts, ring and action
/// timeouts) runs on the test's `ManualClock`; media ticks on a manual `MediaClock`.
///
/// Time moves only when the caller steps it (``step()``, or ``waitFor(_:advancing:frames:line:_:)``
/// with `advancing`), so a call's story is the same on every run.
public final class InMemoryNodes: @unchecked Sendable {  // the event log is behind its own lock; the rest is set once in init
    public let timers = ManualClock()
    public let media = MediaClock.manual()
    public let network: InMemoryIceNetwork
    public let signaling = InMemorySignalNetwork()
    /// SIP between the nodes (for those that listen for it), a tick at a time with the media.
    public let sip: InMemorySIPNetwork
    public let directory: String
    private let logs = Locked<[String: [NodeEvent]]>([:])
    private var readers: [Task<Void, Never>] = []
    public private(set) var nodes: [String: CallNode] = [:]

    /// - Parameter directory: where the nodes' homes go (made, and removed at the end); a new
    ///   temporary directory by default.
    /// `sipConditions`: how the in-memory SIP network between the nodes delays its messages.
    public init(conditions: InMemoryIceNetwork.Conditions = .init(), seed: UInt64 = 1, directory: String? = nil,
                sipConditions: InMemorySIPNetwork.Conditions = .init()) throws {
        network = InMemoryIceNetwork(conditions: conditions, seed: seed)
        media.add(network)  // first: each tick delivers what is due before the calls read
        sip = InMemorySIPNetwork(seed: seed, conditions: sipConditions)
        self.directory = directory ?? FileManager.default.temporaryDirectory.appendingPathComponent("callnode-manual-\(UUID())").path
        try FileManager.default.createDirectory(atPath: self.directory, withIntermediateDirectories: true)
    }

    deinit {
        for reader in readers { reader.cancel() }
        // The nodes (and their databases) go before their files do: SQLite keys its locks and
        // WAL index by inode, and a database removed while still open can meet a new one made
        // on the same inode by a test running beside this one.
        nodes.removeAll()
        try? FileManager.default.removeItem(atPath: directory)
    }

    public func path(_ name: String) -> String { directory + "/" + name }

    /// A node named `name` on the in-memory networks, its events logged.
    /// Each node records to its own file by default: sessions on the same files and tones share
    /// devices (and would interrupt each other when tests run side by side).
    /// `configure` changes anything else before the node is made.
    public func node(_ name: String, input: NodeAudioInput = .silence, output: NodeAudioOutput? = nil, autoAnswer: Bool = true,
                     keyExchange: KeyExchange = .sdes,
                     configure: (inout CallNodeConfiguration) -> Void = { _ in }) async throws -> CallNode {
        var configuration = CallNodeConfiguration(home: path(name))
        configuration.displayName = name
        configuration.listenAddress = SignalAddress(host: name, port: 7600)
        configuration.signalNetwork = signaling
        configuration.sipNetwork = sip
        let network = self.network
        configuration.makeIcePath = { ice in network.makePath(role: ice.role) }
        configuration.clock = TimerClock(timers)
        configuration.mediaClock = media
        configuration.audio = NodeAudioBackend(input: input, output: output ?? .wav(path("\(name)-heard.wav")))
        configuration.autoAnswer = autoAnswer
        configuration.keyExchange = keyExchange
        // The real host's interfaces change under tests that run beside these: a test that
        // wants a network change sets its own snapshot.
        configuration.hostNetwork = nil
        configure(&configuration)
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
    public func trust(_ a: CallNode, as aName: String, _ b: CallNode, as bName: String) async throws {
        try await a.store.contacts.add(Contact(name: bName, fingerprint: b.identity.fingerprint.hex, address: b.listenAddress?.description))
        try await b.store.contacts.add(Contact(name: aName, fingerprint: a.identity.fingerprint.hex, address: a.listenAddress?.description))
    }

    public func events(_ name: String) -> [NodeEvent] { logs.withLock { $0[name] ?? [] } }

    /// One frame period of manual time: timers first, then the media clock (the network
    /// delivers, then every call sends and plays), then every task gets to run.
    public func step() async {
        timers.advance(by: media.frameDuration)
        sip.advance()
        await media.advance(frames: 1)
        await settle()
    }

    /// Lets the nodes' tasks run (message handling, media events, a call's teardown) before
    /// time moves again: manual time stands still meanwhile, so how long this takes changes
    /// nothing a test asserts, as long as the nodes get to finish what one instant started.
    public func settle() async {
        for _ in 0..<8 { await Task.yield() }
        try? await Task.sleep(for: .microseconds(100))
        for _ in 0..<8 { await Task.yield() }
    }

    /// Waits until `name` has logged an event matching `predicate`, stepping manual time a frame
    /// at a time when `advancing` (up to `frames`), otherwise letting tasks run for at most
    /// `frames` rounds of a millisecond. Returns the event and the manual time it was seen at.
    @discardableResult
    public func waitFor(_ name: String, advancing: Bool = false, frames: Int = 2_000, line: Int = #line,
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
        throw Timeout(description: "\(name): no matching event (waited at line \(line)); events: \(events(name).map(Self.kind)); ended: \(ended)")
    }

    /// What ``waitFor(_:advancing:frames:line:_:)`` throws when no matching event came.
    public struct Timeout: Error, CustomStringConvertible {
        public let description: String
        public init(description: String) { self.description = description }
    }

    /// Shuts every node down.
    public func shutdown() async {
        for node in nodes.values { await node.shutdown() }
    }

    /// An event's kind without its identifiers and figures: what the determinism check compares.
    public static func kind(_ event: NodeEvent) -> String {
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
        case .earlyMedia: "early-media"
        case .transfer: "transfer"
        case .statistics: "statistics"
        case let .remoteHold(_, on): "remote-hold(\(on))"
        case .dtmf: "dtmf"
        case .connectionLost: "connection-lost"
        case .connectionRestored: "connection-restored"
        case .signalingLost: "signaling-lost"
        case .recordingFailed: "recording-failed"
        case .signalingResumed: "signaling-resumed"
        case .hostNetworkChanged: "network-changed"
        case let .playoutReset(_, reset): "playout-reset(\(reset.reason.rawValue))"
        case let .iceRestarted(_, byPeer): "ice-restart(by-peer: \(byPeer))"
        case let .rejected(_, reason): "rejected(\(reason.rawValue))"
        case let .ended(_, reason, _, _): "ended(\(reason.rawValue))"
        default: "\(event)".split(separator: "(").first.map(String.init) ?? "other"
        }
    }

    /// The events whose order is the call's own (not the manager's state snapshots and session
    /// statuses or the periodic statistics, which other tasks publish).
    public func story(_ name: String) -> [String] {
        events(name).map(Self.kind).filter { !["state", "session", "statistics"].contains($0) }
    }
}
