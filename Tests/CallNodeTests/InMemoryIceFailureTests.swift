import CallNodeTestKit
import ICE
import Testing

/// The in-memory ICE paths fail as libnice's do: a connected pair whose peer is out of reach
/// for the consent timeout, and a round whose checks find no pair in the check timeout, report
/// `failed` (so the simulation reaches a leg's `iceFailed`); a failed path stays failed until
/// its next round. The network alone, ticked by hand.
@Suite struct InMemoryIceFailureTests {
    /// Both ends of a call on `network`, their parameters exchanged.
    static func pair(_ network: InMemoryIceNetwork) async throws -> (InMemoryIcePath, InMemoryIcePath) {
        let a = network.makePath(role: .controlling), b = network.makePath(role: .controlled)
        let (ga, gb) = (try await a.gather(), try await b.gather())
        _ = try await a.setRemote(gb.credentials, candidates: try await b.localCandidates(), endOfCandidates: true)
        _ = try await b.setRemote(ga.credentials, candidates: try await a.localCandidates(), endOfCandidates: true)
        return (a, b)
    }


    static func ticks(_ network: InMemoryIceNetwork, from start: inout Duration, for duration: Duration) async {
        let end = start + duration
        while start < end {
            start += .milliseconds(20)
            await network.tick(now: start)
        }
    }

    /// The path's connection as sending on it finds it (`connected`, or the state a send is
    /// refused in).
    static func connection(of path: InMemoryIcePath) async -> IceConnectionState? {
        do {
            try await path.send([0])
            return .connected
        } catch {
            if case let .notConnected(state) = error { return state }
            return nil
        }
    }

    @Test func aPairOutOfReachFailsAfterTheConsentTimeoutAndARoundWithoutAPairAfterTheCheckTimeout() async throws {
        let network = InMemoryIceNetwork()
        let (a, b) = try await Self.pair(network)
        var now = Duration.zero
        await Self.ticks(network, from: &now, for: .milliseconds(100))
        #expect(await Self.connection(of: a) == .connected)
        #expect(await Self.connection(of: b) == .connected)

        network.setConditions(.init(partitioned: true))
        await Self.ticks(network, from: &now, for: InMemoryIceNetwork.consentTimeout - .milliseconds(100))
        // Not yet: the pair stands until consent expires.
        #expect(await Self.connection(of: a) == .connected)
        await Self.ticks(network, from: &now, for: .milliseconds(200))
        #expect(await Self.connection(of: a) == .failed)
        #expect(await Self.connection(of: b) == .failed)

        // A new round while the partition lasts: its checks find nothing and fail 2.5 s in.
        let (ra, rb) = (try await a.restart(), try await b.restart())
        _ = try await a.setRemote(rb.credentials, candidates: try await b.localCandidates(), endOfCandidates: true)
        _ = try await b.setRemote(ra.credentials, candidates: try await a.localCandidates(), endOfCandidates: true)
        await Self.ticks(network, from: &now, for: InMemoryIceNetwork.checkTimeout - .milliseconds(100))
        #expect(await Self.connection(of: a) == .checking)
        await Self.ticks(network, from: &now, for: .milliseconds(200))
        #expect(await Self.connection(of: a) == .failed)
        #expect(await Self.connection(of: b) == .failed)

        // Healed, the failed round stays failed; the next round connects.
        network.setConditions(.init())
        await Self.ticks(network, from: &now, for: .milliseconds(200))
        #expect(await Self.connection(of: a) == .failed, "a failed round stays failed")
        let (fa, fb) = (try await a.restart(), try await b.restart())
        _ = try await a.setRemote(fb.credentials, candidates: try await b.localCandidates(), endOfCandidates: true)
        _ = try await b.setRemote(fa.credentials, candidates: try await a.localCandidates(), endOfCandidates: true)
        await Self.ticks(network, from: &now, for: .milliseconds(100))
        #expect(await Self.connection(of: a) == .connected)
        #expect(await Self.connection(of: b) == .connected)
        await a.close()
        await b.close()
    }

    /// With `disconnectedAfter` (libnice with consent freshness on), a connected pair whose
    /// peer is out of reach says it is disconnected first (sending on it is refused, as
    /// libnice's is), connects again if the peer comes back before consent runs out, and fails
    /// if it does not. Each path tells its selected pair, and forgets it on a new round.
    @Test func aPairOutOfReachIsDisconnectedThenConnectedAgainOrFailed() async throws {
        var conditions = InMemoryIceNetwork.Conditions()
        conditions.disconnectedAfter = .seconds(2)
        conditions.consentTimeout = .seconds(4)
        let network = InMemoryIceNetwork(conditions: conditions)
        let (a, b) = try await Self.pair(network)
        var now = Duration.zero
        await Self.ticks(network, from: &now, for: .milliseconds(100))
        #expect(await a.selectedPair.map { "\($0.local.address) \($0.remote.address)" } == "\(a.address.dropLast(2)) \(b.address.dropLast(2))")

        var cut = conditions
        cut.partitioned = true
        network.setConditions(cut)
        await Self.ticks(network, from: &now, for: .milliseconds(1_900))
        #expect(await Self.connection(of: a) == .connected)
        await Self.ticks(network, from: &now, for: .milliseconds(200))
        #expect(await Self.connection(of: a) == .disconnected)
        #expect(await Self.connection(of: b) == .disconnected)
        network.setConditions(conditions)
        await Self.ticks(network, from: &now, for: .milliseconds(40))
        #expect(await Self.connection(of: a) == .connected, "the peer came back before consent ran out")

        network.setConditions(cut)
        await Self.ticks(network, from: &now, for: .milliseconds(3_000))
        #expect(await Self.connection(of: a) == .disconnected)
        await Self.ticks(network, from: &now, for: .milliseconds(1_100))
        #expect(await Self.connection(of: a) == .failed)
        _ = try await a.restart()
        #expect(await a.selectedPair == nil, "a new round has no pair yet")
        await a.close()
        await b.close()
    }
}
