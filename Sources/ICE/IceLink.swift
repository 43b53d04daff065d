/// In-process signaling between two agents: for test rigs, benchmarks and nodes that embed both
/// ends of a call in one program.
extension IceAgent {
    /// Gathers on both agents and trickles each one's credentials and candidates to the other,
    /// then marks end-of-candidates on both. Returns when both gatherings have finished; the
    /// agents connect on their own from there (watch ``events``).
    ///
    /// - Parameter restart: Run an ICE restart on both instead of a first gathering.
    public static func link(_ a: IceAgent, _ b: IceAgent, restart: Bool = false) async throws(IceError) {
        let gatheringA = restart ? try await a.restart() : try await a.gather()
        let gatheringB = restart ? try await b.restart() : try await b.gather()
        try await a.setRemoteCredentials(gatheringB.credentials)
        try await b.setRemoteCredentials(gatheringA.credentials)
        let result = await withTaskGroup(of: Result<Void, IceError>.self) { group in
            group.addTask { await trickle(gatheringA.candidates, to: b) }
            group.addTask { await trickle(gatheringB.candidates, to: a) }
            var outcome: Result<Void, IceError> = .success(())
            for await r in group { if case .failure = r { outcome = r } }
            return outcome
        }
        try result.get()
    }

    private static func trickle(_ candidates: AsyncStream<IceCandidate>, to peer: IceAgent) async -> Result<Void, IceError> {
        do throws(IceError) {
            for await candidate in candidates { try await peer.addRemoteCandidate(candidate) }
            try await peer.endOfRemoteCandidates()
            return .success(())
        } catch {
            return .failure(error)
        }
    }
}
