import ArgumentParser
import CallNode
import Calls
@_spi(Benchmarks) import ICE
import Media
import Foundation
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Call setup through two real nodes on loopback: dial → the first decoded audio frame at the
/// callee, split into stages, beside the bare libnice connect measured in the same run.
struct SetupBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "setup",
        abstract: "Dial → first decoded audio at the callee, two nodes on loopback (median of --runs).",
        discussion: """
            Two CallNodes in this process, on 127.0.0.1: TCP + mutual TLS 1.3 signaling, libnice \
            ICE, SRTP and Opus, the callee answering at once. Each run dials, waits for the \
            callee's first decoded frame, hangs up and waits for both ends. Stages come from the \
            nodes' own events; the bare libnice connect (two agents, no node) is interleaved.
            """)

    @Option(help: "Calls to measure (after one warm-up call).")
    var runs = 20

    @Option(help: ArgumentHelp("Connectivity-check pacing in ms (default: the node's own, libnice's is 20).", valueName: "MS"))
    var pacing = Int(IceConfiguration().checkPacing.milliseconds)

    @Option(help: ArgumentHelp("ICE agents each node makes ahead of its calls (the node's default is 1; 0 makes every agent during setup).", valueName: "N"))
    var iceAgentPool = CallNodeConfiguration(home: "").iceAgentPool

    @Option(help: ArgumentHelp("How the callee's offer keys SRTP: dtls (the default: a handshake after ICE connects) or sdes.", valueName: "KIND"))
    var keyExchange: String = KeyExchange.dtls.rawValue

    @Flag(help: "One JSON object per stage on stdout.")
    var json = false

    func validate() throws {
        guard KeyExchange(rawValue: keyExchange) != nil else { throw ValidationError("--key-exchange must be dtls or sdes") }
        guard runs > 0 else { throw ValidationError("--runs must be at least 1") }
        guard (1...1000).contains(pacing) else { throw ValidationError("--pacing must be 1...1000 ms") }
        guard (0...8).contains(iceAgentPool) else { throw ValidationError("--ice-agent-pool must be 0...8") }
    }

    /// Milliseconds from the dial to each stage of one call.
    struct Run {
        var ringing = 0.0      // caller: the callee rings (TCP, TLS, invite, ringing back)
        var incoming = 0.0     // callee: the invite arrived
        var pairCallee = 0.0   // callee: ICE selected a pair
        var connected = 0.0    // caller: media started
        var firstAudio = 0.0   // callee: first decoded frame
    }

    func run() async throws {
        let pair = try await NodePair(pacing: pacing, iceAgentPool: iceAgentPool, keyExchange: KeyExchange(rawValue: keyExchange) ?? .dtls)
        defer { pair.removeHome() }
        let (caller, callee) = (pair.caller, pair.callee)

        var runs: [Run] = [], bare: [Double] = []
        for index in 0...self.runs {
            let run = try await Self.measure(caller: caller, callee: callee)
            guard let connect = await BareLibniceBenchmark.connectOnce(pacingMS: UInt32(pacing)) else {
                throw ValidationError("bare libnice did not connect on loopback")
            }
            if index > 0 {  // the first call warms caches and lazy setup
                runs.append(run)
                bare.append(connect.milliseconds)
            }
        }
        await pair.shutdown()

        func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }
        let stages: [(String, Double)] = [
            ("dial → ringing at the caller (TCP, TLS 1.3, invite)", median(runs.map(\.ringing))),
            ("dial → invite at the callee", median(runs.map(\.incoming))),
            ("dial → ICE pair selected at the callee", median(runs.map(\.pairCallee))),
            ("dial → connected at the caller (media started)", median(runs.map(\.connected))),
            ("dial → first decoded audio at the callee", median(runs.map(\.firstAudio))),
            ("bare libnice connect (anchor)", median(bare)),
        ]
        let all = runs.map(\.firstAudio).sorted()
        for (stage, value) in stages {
            if json {
                print("{\"group\":\"setup\",\"stage\":\"\(stage)\",\"pacing_ms\":\(pacing),\"ice_agent_pool\":\(iceAgentPool),\"runs\":\(runs.count),\"median_ms\":\(String(format: "%.1f", value))}")
            } else {
                print(stage.padding(toLength: 56, withPad: " ", startingAt: 0) + String(format: "median %7.1f ms", value))
            }
        }
        if !json {
            print(String(format: "first audio over %d calls: min %.1f ms, median %.1f ms, max %.1f ms (goal ≤ 40 ms)",
                         all.count, all[0], all[all.count / 2], all[all.count - 1]))
        }
    }

    /// One call: dial, wait for the callee's first audio, hang up, wait for both ends.
    static func measure(caller: CallNode, callee: CallNode) async throws -> Run {
        let callerEvents = caller.events(), calleeEvents = callee.events()
        let start = ContinuousClock.now
        func since() -> Double { (ContinuousClock.now - start).milliseconds }
        let uuid = try await caller.call(.contact("bob"))
        var run = Run()
        // Both streams feed one loop until the callee hears audio and both calls ended.
        enum Seen: Sendable { case caller(NodeEvent), callee(NodeEvent), timeout }
        let (merged, continuation) = AsyncStream.makeStream(of: Seen.self)
        let pumps = [
            Task { for await event in callerEvents { continuation.yield(.caller(event)) } },
            Task { for await event in calleeEvents { continuation.yield(.callee(event)) } },
            Task { try? await Task.sleep(for: .seconds(20)); continuation.yield(.timeout) },
        ]
        defer { for pump in pumps { pump.cancel() } }
        var calleeCall: UUID?
        var ended = 0
        loop: for await seen in merged {
            switch seen {
            case let .caller(.ringing(call, _)) where call == uuid: run.ringing = since()
            case let .caller(.connected(call, _)) where call == uuid: run.connected = since()
            case let .caller(.ended(call, reason, detail, _)) where call == uuid:
                if run.firstAudio == 0 { throw ValidationError("the call ended before audio: \(reason) \(detail ?? "")") }
                ended += 1
            case let .callee(.incoming(call, _, _, _)):
                calleeCall = call
                run.incoming = since()
            case let .callee(.selectedPair(call, _)) where call == calleeCall:
                if run.pairCallee == 0 { run.pairCallee = since() }
            case let .callee(.firstAudio(call, _)) where call == calleeCall:
                run.firstAudio = since()
                try? await caller.hangUp(uuid)
            case let .callee(.ended(call, _, _, _)) where call == calleeCall:
                ended += 1
            case .timeout:
                throw ValidationError("a call did not complete within 20 s")
            default:
                break
            }
            if ended == 2 { break loop }
        }
        return run
    }
}

extension Duration {
    var milliseconds: Double { Double(components.seconds) * 1000 + Double(components.attoseconds) / 1e15 }
}

/// Two nodes on loopback in this process, the callee answering at once and trusting the caller.
struct NodePair {
    let caller: CallNode
    let callee: CallNode
    let directory: String

    init(pacing: Int = Int(IceConfiguration().checkPacing.milliseconds), iceAgentPool: Int = CallNodeConfiguration(home: "").iceAgentPool,
         keyExchange: KeyExchange = .dtls) async throws {
        let home = FileManager.default.temporaryDirectory.appendingPathComponent("callnode-bench-\(getpid())").path
        directory = home
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        func configuration(_ name: String, input: NodeAudioInput) -> CallNodeConfiguration {
            var c = CallNodeConfiguration(home: home + "/" + name)
            c.displayName = name
            c.listenAddress = SignalAddress(host: "127.0.0.1", port: 0)
            c.ice.localAddresses = ["127.0.0.1"]
            c.ice.checkPacing = .milliseconds(pacing)
            c.iceAgentPool = iceAgentPool
            c.audio = NodeAudioBackend(input: input, output: .null)
            c.keyExchange = keyExchange
            return c
        }
        var calleeConfiguration = configuration("bob", input: .silence)
        calleeConfiguration.autoAnswer = true
        var callerConfiguration = configuration("alice", input: .tone(440))
        callerConfiguration.listenAddress = nil
        var logger = Logger(label: "callnode.bench")
        logger.logLevel = .warning
        let caller = try await CallNode(configuration: callerConfiguration, logger: logger)
        let callee = try await CallNode(configuration: calleeConfiguration, logger: logger)
        self.caller = caller
        self.callee = callee
        try await caller.store.contacts.add(Contact(name: "bob", fingerprint: callee.identity.fingerprint.hex,
                                                    address: callee.listenAddress?.description))
        try await callee.store.contacts.add(Contact(name: "alice", fingerprint: caller.identity.fingerprint.hex))
        await caller.start()
        await callee.start()
    }

    func shutdown() async {
        await caller.shutdown()
        await callee.shutdown()
    }

    func removeHome() { try? FileManager.default.removeItem(atPath: directory) }
}
