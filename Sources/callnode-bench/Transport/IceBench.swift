import ArgumentParser
import CallNode
import CallNodeTestKit
@_spi(Benchmarks) import ICE
@_spi(Benchmarks) import Media
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Loopback ICE connect time: from the start of checks to connected on both agents.
struct IceBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ice",
        abstract: "Loopback ICE connect time (start of checks → connected on both), min/median/max.")

    @Option(help: "Connects per pacing.")
    var runs = 20

    @Option(help: "Connectivity-check pacing values to compare, in ms.")
    var pacing: [Int] = [20, 5]

    @Flag(help: "One JSON object per pacing on stdout.")
    var json = false

    func run() async throws {
        for ms in pacing {
            var agentSamples: [Duration] = [], bareSamples: [Duration] = []
            // Interleaved, so both see the same machine load.
            for _ in 0..<runs {
                agentSamples.append(try await Self.connectOnce(pacing: .milliseconds(ms)))
                guard let bare = await BareLibniceBenchmark.connectOnce(pacingMS: UInt32(ms)) else {
                    throw ValidationError("bare libnice did not connect on loopback")
                }
                bareSamples.append(bare)
            }
            report(ms: ms, what: "IceAgent", agentSamples)
            report(ms: ms, what: "bare libnice", bareSamples)
        }
    }

    func report(ms: Int, what: String, _ samples: [Duration]) {
        let sorted = samples.sorted()
        let (lo, median, hi) = (sorted[0], sorted[sorted.count / 2], sorted[sorted.count - 1])
        if json {
            print("{\"group\":\"ice\",\"subject\":\"\(what)\",\"pacing_ms\":\(ms),\"runs\":\(runs),\"min_ms\":\(Self.ms(lo)),\"median_ms\":\(Self.ms(median)),\"max_ms\":\(Self.ms(hi))}")
        } else {
            print("ice connect, \(what), pacing \(ms) ms, \(runs) runs: min \(Self.ms(lo)) ms, median \(Self.ms(median)) ms, max \(Self.ms(hi)) ms")
        }
    }

    func validate() throws {
        guard runs > 0 else { throw ValidationError("--runs must be at least 1") }
        guard pacing.allSatisfy({ (1...1000).contains($0) }) else { throw ValidationError("--pacing values are 1...1000 ms") }
    }

    static func ms(_ d: Duration) -> String {
        let c = d.components
        let micros: Int64 = c.seconds * 1_000_000 + c.attoseconds / 1_000_000_000_000
        let whole = micros / 1000
        let fraction = (micros % 1000) / 10
        return "\(whole)." + (fraction < 10 ? "0\(fraction)" : "\(fraction)")
    }

    /// Gathers fully on both sides first, so the measured span is checks only.
    static func connectOnce(pacing: Duration) async throws -> Duration {
        func make(_ role: IceRole) async throws -> IceAgent {
            var c = IceConfiguration(role: role)
            c.localAddresses = ["127.0.0.1"]
            c.checkPacing = pacing
            c.connectTimeout = .seconds(10)
            return try await IceAgent(configuration: c)
        }
        let a = try await make(.controlling)
        let b = try await make(.controlled)
        let gA = try await a.gather(), gB = try await b.gather()
        var candA: [IceCandidate] = [], candB: [IceCandidate] = []
        for await c in gA.candidates { candA.append(c) }
        for await c in gB.candidates { candB.append(c) }
        async let readyA = waitConnected(a)
        async let readyB = waitConnected(b)
        let start = ContinuousClock.now
        try await a.setRemoteCredentials(gB.credentials)
        try await b.setRemoteCredentials(gA.credentials)
        try await a.addRemoteCandidates(candB)
        try await b.addRemoteCandidates(candA)
        let (endA, endB) = await (readyA, readyB)
        await a.close()
        await b.close()
        guard let endA, let endB else { throw ValidationError("loopback ICE did not connect") }
        return max(endA, endB) - start
    }

    static func waitConnected(_ agent: IceAgent) async -> ContinuousClock.Instant? {
        for await event in agent.events {
            switch event {
            case .stateChanged(.connected): return .now
            case .stateChanged(.failed), .stateChanged(.closed): return nil
            default: continue
            }
        }
        return nil
    }
}
