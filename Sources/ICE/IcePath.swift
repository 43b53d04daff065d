/// What a call needs of ICE: gather, exchange credentials and candidates, learn when a pair
/// connects or is lost, carry datagrams, restart, close.
///
/// ``IceAgent`` (libnice) is the production path. Test kits provide in-memory paths with loss,
/// delay and partition on manual time, so whole calls run deterministically without sockets.
/// Implementations are safe to call from any task; ``events`` and ``datagrams`` are each
/// iterated once, by the path's owner.
public protocol IcePath: AnyObject, Sendable {
    /// State changes and the selected pair.
    var events: AsyncStream<IceEvent> { get }
    /// What arrives on the selected pair (connectivity checks are the path's own business).
    var datagrams: AsyncStream<IceDatagram> { get }
    /// This round's local credentials.
    var localCredentials: IceCredentials { get async }
    /// Starts the first round of gathering.
    func gather() async throws(IceError) -> IceGathering
    /// Every local candidate gathered so far.
    func localCandidates() async throws(IceError) -> [IceCandidate]
    /// Switches the role before the peer's credentials are set (a path made ahead of a call).
    func setRole(_ role: IceRole) async throws(IceError)
    /// The peer's credentials and candidates in one step; returns the candidates it skipped, and why.
    func setRemote(_ remote: IceCredentials, candidates: [IceCandidate], endOfCandidates: Bool) async throws(IceError) -> [IceError]
    /// Trickled candidates; returns those it skipped, and why.
    func addRemoteCandidates(_ candidates: [IceCandidate]) async throws(IceError) -> [IceError]
    func endOfRemoteCandidates() async throws(IceError)
    /// Sends one datagram on the selected pair.
    /// - Throws: ``IceError/notConnected(_:)`` unless connected.
    func send(_ bytes: [UInt8]) async throws(IceError)
    /// A full ICE restart: new credentials, a new gathering, new checks.
    func restart() async throws(IceError) -> IceGathering
    /// Takes the pair the peer's checks found (its candidate at `remote`, this side's at
    /// `local`) while this round's checks have found none; `peerUfrag` names the peer's round.
    /// Returns whether it was taken (see ``IceAgent/adoptPeerPair(local:remote:peerUfrag:)``).
    func adoptPeerPair(local: IceEndpoint, remote: IceEndpoint, peerUfrag: String) async -> Bool
    /// The pair in use, once the checks selected one (nil for a path without checks of its own).
    var selectedPair: IceCandidatePair? { get async }
    /// Releases everything; idempotent.
    func close() async
    /// Direct datagram access for the media path, or nil (then ``send(_:)`` and ``datagrams``).
    var datagramPort: (any DatagramPort)? { get }
}

extension IcePath {
    /// A path without connectivity checks of its own has no pair to take.
    public func adoptPeerPair(local: IceEndpoint, remote: IceEndpoint, peerUfrag: String) async -> Bool { false }
    /// Nor a pair to tell the peer of.
    public var selectedPair: IceCandidatePair? { get async { nil } }
}

extension IceAgent: IcePath {}
