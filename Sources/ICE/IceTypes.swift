/// Which side of the ICE negotiation an agent takes (RFC 8445 §6.1.1).
public enum IceRole: String, Sendable, Hashable, CaseIterable {
    /// Nominates the pair; by convention the caller (offerer).
    case controlling
    /// Accepts the nomination; by convention the callee (answerer).
    case controlled
}

/// The connection state of an ``IceAgent``.
public enum IceConnectionState: String, Sendable, Hashable, CaseIterable {
    /// Created; nothing gathered yet.
    case new
    /// Local candidates are being gathered.
    case gathering
    /// Connectivity checks are running (or waiting for remote candidates).
    case checking
    /// A pair is selected and datagrams flow; ``IceAgent/send(_:)`` works only here.
    case connected
    /// No pair works: checks ran out or the configured ``IceConfiguration/connectTimeout`` passed.
    /// Terminal until ``IceAgent/restart()``.
    case failed
    /// Connected before, now not: the link went quiet or consent expired (RFC 7675).
    case disconnected
    /// ``IceAgent/close()`` ran; the agent holds no resources.
    case closed
}

/// The local or remote ICE credentials (`a=ice-ufrag`, `a=ice-pwd`).
public struct IceCredentials: Sendable, Hashable {
    /// The username fragment (at least 4 `ice-char`s).
    public var ufrag: String
    /// The password (at least 22 `ice-char`s).
    public var pwd: String

    /// Creates credentials.
    public init(ufrag: String, pwd: String) {
        self.ufrag = ufrag
        self.pwd = pwd
    }
}

/// A candidate's transport address, as a peer names it.
public struct IceEndpoint: Sendable, Hashable, CustomStringConvertible {
    public var address: String
    public var port: UInt16

    public init(address: String, port: UInt16) {
        self.address = address
        self.port = port
    }

    public init(_ candidate: IceCandidate) {
        self.init(address: candidate.address, port: candidate.port)
    }

    public var description: String { address.contains(":") ? "[\(address)]:\(port)" : "\(address):\(port)" }
}

/// The candidate pair ICE selected for sending and receiving.
public struct IceCandidatePair: Sendable, Hashable, CustomStringConvertible {
    /// This agent's side of the pair.
    public var local: IceCandidate
    /// The peer's side of the pair.
    public var remote: IceCandidate

    /// Creates a pair.
    public init(local: IceCandidate, remote: IceCandidate) {
        self.local = local
        self.remote = remote
    }

    /// `host 127.0.0.1:5000 <-> srflx 203.0.113.7:6000 (UDP)`.
    public var description: String {
        "\(local.type.rawValue) \(Self.endpoint(local)) <-> \(remote.type.rawValue) \(Self.endpoint(remote)) (\(local.transport.rawValue))"
    }

    private static func endpoint(_ c: IceCandidate) -> String {
        c.address.contains(":") ? "[\(c.address)]:\(c.port)" : "\(c.address):\(c.port)"
    }
}

/// What an ``IceAgent`` reports on ``IceAgent/events``.
public enum IceEvent: Sendable, Hashable {
    /// The connection state changed; emitted once per change.
    case stateChanged(IceConnectionState)
    /// ICE selected (or re-selected) the pair that carries datagrams.
    case selectedPair(IceCandidatePair)
}

/// A datagram received on the selected pair.
public struct IceDatagram: Sendable, Hashable {
    /// The bytes as received (an RTP, RTCP or other packet); STUN is consumed by libnice.
    public var bytes: [UInt8]

    /// Wraps received bytes.
    public init(bytes: [UInt8]) { self.bytes = bytes }
}

/// One round of local gathering: the credentials to signal and the candidates as they are found.
public struct IceGathering: Sendable {
    /// The local credentials for this round (new after each ``IceAgent/restart()``).
    public let credentials: IceCredentials
    /// Local candidates as they are found (trickle). The sequence finishes at end-of-candidates,
    /// which is when to signal `a=end-of-candidates`. Iterate it once.
    public let candidates: AsyncStream<IceCandidate>

    /// A round with these credentials whose candidates come from `candidates` (for other
    /// ``IcePath`` implementations).
    public init(credentials: IceCredentials, candidates: AsyncStream<IceCandidate>) {
        self.credentials = credentials
        self.candidates = candidates
    }
}

/// Errors from an ``IceAgent``. Each says what failed and, where it helps, what to change.
public enum IceError: Error, Sendable, Equatable, CustomStringConvertible {
    /// libnice refused a call; `function` names it.
    case libnice(function: String, detail: String)
    /// A configured address is not an IP literal and could not be resolved.
    case unresolvableAddress(String)
    /// The configuration cannot work; the text says why.
    case invalidConfiguration(String)
    /// ``IceAgent/send(_:)`` was called while not connected.
    case notConnected(IceConnectionState)
    /// The datagram is larger than the transport carries.
    case datagramTooLarge(Int)
    /// The agent was closed.
    case closed
    /// A remote candidate cannot be used by this agent (wrong component, a name that does not
    /// resolve, …); it was skipped and the others still apply.
    case unusableRemoteCandidate(IceCandidate, reason: String)

    public var description: String {
        switch self {
        case .libnice(let function, let detail): "libnice \(function) failed: \(detail)"
        case .unresolvableAddress(let a): "cannot resolve '\(a)' to an IP address"
        case .invalidConfiguration(let why): "invalid ICE configuration: \(why)"
        case .notConnected(let state): "cannot send: ICE is \(state.rawValue), not connected"
        case .datagramTooLarge(let n): "datagram of \(n) bytes is larger than the 65507-byte UDP limit"
        case .closed: "the ICE agent is closed"
        case .unusableRemoteCandidate(let c, let reason): "remote candidate skipped (\(reason)): \(c)"
        }
    }
}
