import AudioSession
@_spi(Simulation) import CallCore
import Calls
import Clocks
import Foundation
import ICE
import JanusRoom
import Media
import RTP
import SDP
import SIP
import Signaling

/// Everything a ``CallNode`` needs to start.
public struct CallNodeConfiguration: Sendable {
    /// The node's home: identity files and the SQLite database (`callnode.sqlite`).
    public var home: String
    /// The name this node gives in its invitations (informational).
    public var displayName: String?
    /// Where to accept signaling connections; `nil` for a node that only places calls.
    public var listenAddress: SignalAddress? = SignalAddress(host: "0.0.0.0", port: 7600)
    /// Ring for callers whose fingerprint is not among the contacts (otherwise they are
    /// rejected with ``RejectReason/unknownCaller``).
    public var acceptUnknownCallers = false
    /// Answer every incoming call at once.
    public var autoAnswer = false
    /// STUN, TURN, relay-only and host-address settings for every call's ICE agent (the role
    /// is set per call).
    public var ice = IceConfiguration()
    /// ICE agents made and gathered ahead of calls, as WebRTC's ICE candidate pool: a call
    /// then starts with candidates in hand instead of making an agent first (about 5 ms of
    /// every call's setup on a 2-core machine). One serves calls that come one at a time; an
    /// agent taken by a call is replaced once that call hears audio or ends. 0 turns the pool
    /// off.
    public var iceAgentPool = 1
    /// With STUN or TURN servers set, how long a pooled agent stays usable: its
    /// server-reflexive and relayed candidates name NAT bindings and allocations, which age.
    /// Host-only agents are kept until used.
    public var iceAgentPoolRefresh: Duration = .seconds(30)
    /// Codec, jitter buffer and RTCP settings; the frame duration sets the node's media clock.
    public var media = MediaConfiguration()
    /// Where the audio session finds its microphone and speaker.
    public var audio: any AudioDeviceBackend = NodeAudioBackend()
    /// Echo cancellation, noise suppression and gain control on the microphone: `nil` (the
    /// default) lets the backend decide — on for a real microphone (`alsa:`), off for files and
    /// tones; `true` or `false` forces it.
    public var voiceProcessing: Bool?
    /// What voice processing does when on.
    public var voiceProcessingOptions = VoiceProcessingOptions()
    /// Always-prepared recording: the microphone is opened when the node starts and kept
    /// running between calls, so a call's first frame of microphone audio is there at once.
    public var recordingAlwaysPrepared = false
    /// CallKit-free mode: the node activates its own app-owned session when a call connects.
    /// Otherwise (the default) the call manager, as the system provider, owns activation.
    public var appOwnedAudio = false
    /// Ring timeout, action timeouts, maximum calls.
    public var provider = ProviderConfiguration(localizedName: "CallNode")
    /// Bounds on signaling connections.
    public var signalingLimits = SignalingLimits()
    /// How often an idle call's signaling connection sends a keep-alive (keeps NAT and relay
    /// paths open).
    public var keepAliveInterval: Duration = .seconds(15)
    /// How long a connected call may hear nothing from the peer (no authentic RTP or RTCP)
    /// before it ends as failed. It is reported as connection lost after the media's stall
    /// timeout (1 s) and as restored when packets return; this is the point of giving up, and
    /// the node's consent check (RFC 7675's 30 s): it stops sending to a peer that went away.
    public var connectionLostTimeout: Duration = .seconds(30)
    /// While a call's connection stays lost, ICE restarts after this long and again every
    /// interval: new candidates find a new path when the old one is gone for good (an address
    /// or NAT mapping changed). Either side restarts (a break in one direction is seen on one
    /// side only); the caller waits half an interval longer, so that when both lost the path
    /// the callee's offer goes first. A path that comes back sooner is kept; a restart waits
    /// while the last one's answer has not come. `nil` (or zero): never restart by itself.
    public var iceRestartInterval: Duration? = .seconds(5)
    /// How long a call waits once its signaling connection was closed from the other end and
    /// its media stopped (what a peer whose process died leaves) before it ends, saying the
    /// other node went away. With the media's 1 s stall, a killed peer is noticed in about 4 s;
    /// a peer that moves to another network resumes within it, and a break that closes nothing
    /// waits for the resume window instead.
    public var peerGoneAfter: Duration = .seconds(3)
    /// Does the start's one-time work (libsrtp's self-test) on the calling thread rather than a
    /// thread of its own: a simulation, whose order of events a thread finishing at any moment
    /// would change.
    @_spi(Simulation) public var warmsUpInline = false
    /// How long a call's media waits after the audio session is active before its leg hears
    /// so (on `clock`): a phone's system activates the session some hundreds of milliseconds
    /// after the answer, and a simulation puts the other events of that window in it. Zero
    /// (never set otherwise): at once.
    @_spi(Simulation) public var audioActivationDelay: Duration = .zero
    /// Where the node's own random choices come from (a SIP dialog's wait after glare): nil, the
    /// system's generator; a simulation sets it, so that its runs replay.
    @_spi(Simulation) public var randomSeed: UInt64?
    /// A simulation's change to what a leg does — each action, given the call's state before
    /// and after the event that led to it: a fixed defect put back, for a sweep to show it finds
    /// it (never set otherwise: the call's state decides alone).
    @_spi(Simulation) public var legActionRewrite: (@Sendable (_ before: LegState, _ after: LegState, LegAction) -> LegAction)?
    /// How long a call whose signaling connection dropped (a reset, a relay restart, this
    /// host's address changing) waits to carry on over a new one before it ends as failed. The
    /// caller reconnects (directly or through the relay, with the same pinned identities) and
    /// resumes the call by its ID and a secret only the two nodes know; messages sent meanwhile
    /// arrive once, in order, after it. Media goes on all the while.
    public var resumeWindow: Duration = .seconds(30)
    /// Reads this host's addresses and default routes; nil: never watch them. A call restarts
    /// ICE at once when an address its path uses goes or the default route changes, and resumes
    /// its signaling when its connection's address went.
    public var hostNetwork: (@Sendable () -> HostNetworkSnapshot)? = { HostNetworkSnapshot.current() }
    /// When to read ``hostNetwork`` again: each element of the stream is a possible change.
    /// Default: the kernel's routing messages (``HostNetworkWatcher``), so a change is seen
    /// ~0.1 s after it happens and an unchanging network wakes nothing. Nil: read it every
    /// ``hostNetworkCheckInterval`` on ``clock`` instead (tests on manual time).
    public var hostNetworkChanges: (@Sendable () -> AsyncStream<Void>)? = { HostNetworkWatcher.changes() }
    /// How often ``hostNetwork`` is read when ``hostNetworkChanges`` is nil, on ``clock``.
    public var hostNetworkCheckInterval: Duration = .milliseconds(500)
    /// Playback only: the audio session's `playback` category; no microphone is ever opened,
    /// calls send silence and play the far end (a monitor, an announcement listener).
    public var playbackOnly = false
    /// Audio each call has of its own instead of the session's microphone or speaker (a
    /// greeting from its start, a recording per call), made when the call's media is built.
    /// Nil (the default): every call is on the session's bridge.
    public var callAudio: CallAudioProvider?
    /// What answering a call with ``autoAnswer`` does to the calls already on: hold them (the
    /// default, CallKit's hold-and-accept), merge the new call into a conference with them, end
    /// them, or keep them as they are.
    public var autoAnswerOthers: OtherCallsOnAnswer = .hold
    /// Refuse callers as busy while this many calls are in progress (nil: the call manager's
    /// own limit, ``ProviderConfiguration/maximumCalls``).
    public var maximumCalls: Int?
    /// What a call held here sends to the held party: nothing (the default: the call goes
    /// `inactive`), or a tone or a WAV file (`sendonly`, RFC 3264 §8.4). The held party hears
    /// it; nobody hears the microphone.
    public var holdAudio: HoldAudio = .silence
    /// How this node's offers key SRTP: DTLS-SRTP (the default: ephemeral keys that never
    /// travel in signaling, so a recorded call stays secret even if a node's identity key
    /// leaks later; and what browsers speak) or SDES (keys in the SDP, one round trip less
    /// to first audio). Answers follow the offer.
    public var keyExchange: KeyExchange = .dtls
    /// Whether calls with other nodes encrypt every frame end to end under SRTP (keys agreed
    /// inside the pinned signaling TLS, ``FrameKeyAgreement``): `preferred` (the default) when
    /// the peer can, `required` refuses a peer that cannot, `off` never.
    public var frameEncryption: FrameEncryptionPolicy = .preferred
    /// Tests only: replaces the agreed frame keys (to show what a node with a wrong key gets).
    var frameKeyAdjustment: (@Sendable (FrameKeys) -> FrameKeys)?
    /// How long a DTLS handshake may take once ICE has connected before the call fails. Its
    /// flights are resent after 0.25, 0.5, four times after 1 s, three after 2 s, then every
    /// 5 s (OpenSSL gives a flight up after twelve resends, 25.75 s): enough through half the
    /// datagrams lost each way, and for a peer whose ICE is still on a fresh round of checks
    /// (a round runs out some 7 s in).
    public var dtlsHandshakeTimeout: Duration = .seconds(30)
    /// A rendezvous relay to stay registered at (reachable by fingerprint through it) and to
    /// call contacts that have no address through.
    public var relay: SignalAddress?
    /// The clock every timer of the node runs on: its calls' keep-alives, connection-lost
    /// timeouts and ICE restarts, the manager's ring and action timeouts, idle connections,
    /// the ICE pool's refresh. Continuous time by default; a manual one in tests.
    public var clock: TimerClock = .continuous
    /// The calendar time recordings and Recents are stamped with (the system's by default).
    public var wallClock: @Sendable () -> Date = { Date() }
    /// The clock that paces every call's media (one tick per frame for all calls): real time
    /// when nil (the default), made by the node; a manual one in tests, which the node then
    /// never runs by itself.
    public var mediaClock: MediaClock?
    /// Makes the ICE path of each call (and of the pool): libnice's ``IceAgent`` by default;
    /// an in-memory path in tests (`CallNodeTestKit`'s `InMemoryIceNetwork`).
    public var makeIcePath: @Sendable (IceConfiguration) async throws -> any IcePath = { try await IceAgent(configuration: $0) }
    /// How the node reaches other nodes' signaling and is reached: mutual TLS over TCP when nil
    /// (the default); an in-memory network in tests (`CallNodeTestKit`'s `InMemorySignalNetwork`),
    /// where ``listenAddress`` is the node's name on it. Relays and the web port stay on TCP.
    public var signalNetwork: (any SignalNetwork)?
    /// The SIP stack ``CallNode/listenSIP(_:)`` starts: sofia-sip on UDP, TCP (and TLS) when
    /// nil (the default); an in-memory network in tests and simulations (`CallNodeTestKit`'s
    /// `InMemorySIPNetwork`), where the node is reached at its settings' URI.
    public var sipNetwork: (any SIPNetwork)?
    /// How the node reaches its relay (``relay``): its own TCP and TLS client when nil (the
    /// default); an in-memory relay in tests (`CallNodeTestKit`'s `InMemoryRelay`).
    public var relayNetwork: (any RelayNetwork)?

    /// The relay network the node uses: ``relayNetwork``, or its own client.
    var relays: any RelayNetwork { relayNetwork ?? TCPRelayNetwork(limits: signalingLimits) }
    /// A stand-in for the node's audio session, for the ownership study only (package access:
    /// an embedder cannot set it). See ``AudioOwnerStandIn``.
    package var audioStandIn: (any AudioOwnerStandIn)?

    public init(home: String) { self.home = home }

    /// `~/.callnode`, or `./.callnode` when there is no home directory.
    public static var defaultHome: String {
        (ProcessInfo.processInfo.environment["HOME"].map { $0 + "/.callnode" }) ?? ".callnode"
    }
}

/// How nodes reach each other's signaling, other than mutual TLS over TCP (which needs no
/// value of this type: it is what a node uses when ``CallNodeConfiguration/signalNetwork`` is nil).
public protocol SignalNetwork: Sendable {
    /// Opens a connection to the node at `address` as `identity`, refusing a peer whose identity
    /// is not `pin` (when given), and runs `body` with it; the connection closes when `body`
    /// returns.
    /// - Throws: ``SignalingError`` when the address cannot be reached or the identity is wrong.
    func connect(to address: SignalAddress, as identity: NodeIdentity, pin: Fingerprint?,
                 _ body: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void) async throws
    /// Accepts connections for `address` as `identity`, running `handler` for each, until the
    /// calling task is cancelled.
    func serve(_ address: SignalAddress, as identity: NodeIdentity,
               _ handler: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void) async
    /// Accepts connections for `address` from now on, before the task running ``serve(_:as:_:)``
    /// has started: a node says it is listening when it starts, and a dial that follows must
    /// reach it (as a bound socket is reached before its accept loop runs). `serve` then runs
    /// them and stops accepting when cancelled. The default does nothing (a network that accepts
    /// only inside `serve`).
    func open(_ address: SignalAddress, as identity: NodeIdentity,
              _ handler: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void)
}

extension SignalNetwork {
    public func open(_ address: SignalAddress, as identity: NodeIdentity,
                     _ handler: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void) {}
}

/// How a node reaches a rendezvous relay: registering there to be called, calling a node
/// registered there, joining a session. The node's own TCP and TLS client (``RelayClient``) by
/// default; the test kit's in-memory relay in tests and simulations.
public protocol RelayNetwork: Sendable {
    /// Stays registered at `relay` as `identity` (`registered` once it is), running `incoming`
    /// for each call the relay splices in; returns when the relay drops the registration.
    func register(at relay: SignalAddress, as identity: NodeIdentity, clock: TimerClock, registered: @escaping @Sendable () -> Void,
                  incoming: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void) async throws
    /// Calls the node registered at `relay` under `fingerprint`, running `body` on the connection.
    func dial(_ fingerprint: Fingerprint, at relay: SignalAddress, as identity: NodeIdentity,
              _ body: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void) async throws
    /// Joins `session` at `relay`: waits for the other participant (`waiting` if first), then
    /// runs `body` (`isClient`: this side places the call).
    func join(_ session: String, at relay: SignalAddress, as identity: NodeIdentity, waiting: @escaping @Sendable () -> Void,
              _ body: @escaping @Sendable (SignalingConnection, SignalMessages, _ isClient: Bool) async -> Void) async throws
}

/// The node's own relay client, over TCP and TLS.
struct TCPRelayNetwork: RelayNetwork {
    let limits: SignalingLimits

    func register(at relay: SignalAddress, as identity: NodeIdentity, clock: TimerClock, registered: @escaping @Sendable () -> Void,
                  incoming: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void) async throws {
        try await RelayClient.register(relay: relay.host, port: relay.port, identity: identity, limits: limits, clock: clock,
                                       registered: registered, incoming: incoming)
    }

    func dial(_ fingerprint: Fingerprint, at relay: SignalAddress, as identity: NodeIdentity,
              _ body: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void) async throws {
        try await RelayClient.dial(relay: relay.host, port: relay.port, fingerprint: fingerprint, identity: identity, limits: limits, body)
    }

    func join(_ session: String, at relay: SignalAddress, as identity: NodeIdentity, waiting: @escaping @Sendable () -> Void,
              _ body: @escaping @Sendable (SignalingConnection, SignalMessages, Bool) async -> Void) async throws {
        try await RelayClient.join(relay: relay.host, port: relay.port, session: session, identity: identity, limits: limits,
                                   waiting: waiting, body)
    }
}

/// `HOST:PORT`.
public struct SignalAddress: Sendable, Hashable, CustomStringConvertible {
    public var host: String
    public var port: Int

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    /// Parses `HOST:PORT`, `[IPv6]:PORT`, or `:PORT` (all addresses).
    public init?(_ text: String) {
        var host: Substring, port: Substring
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") else { return nil }
            host = text[text.index(after: text.startIndex)..<close]
            port = text[text.index(close, offsetBy: 2)...]
        } else {
            guard let colon = text.lastIndex(of: ":"), !text[..<colon].contains(":") else { return nil }
            host = text[..<colon]
            port = text[text.index(after: colon)...]
        }
        guard let number = Int(port), (0...65_535).contains(number) else { return nil }
        self.host = host.isEmpty ? "0.0.0.0" : String(host)
        self.port = number
    }

    public var description: String { host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)" }
}

/// Whom to call.
public enum CallTarget: Sendable, Hashable, CustomStringConvertible {
    /// A contact by name: its address, its fingerprint pinned.
    case contact(String)
    /// An address; the callee's identity is shown, not checked (first contact).
    case address(SignalAddress)
    /// An address with the identity the callee must present.
    case pinned(SignalAddress, Fingerprint)
    /// A node registered at a relay under this fingerprint (pinned).
    case relayed(Fingerprint, relay: SignalAddress)
    /// The other participant of a session (see ``CallNode/join(session:relay:title:startMuted:)``).
    case session(String)
    /// The browser page connected to this node's web port most recently and not in a call
    /// (see ``CallNode/serveWeb(host:port:secret:)``): the node rings it.
    case webPage
    /// A peer another dialect reaches, by the handle it was called with (see
    /// ``CallNode/call(over:handle:title:)``).
    case handle(String)
    /// A SIP address (`sip:bob@example.org`, `sip:bob@192.0.2.7:5062`), called over SIP (see
    /// ``CallNode/listenSIP(_:)``).
    case sip(String)
    /// A Janus AudioBridge room (`janus:http://HOST:8088/janus#ROOM`): the call joins it and
    /// hears the room's mix; `pin`, if the room needs one.
    case janus(JanusRoomAddress, pin: String? = nil)

    public var description: String {
        switch self {
        case let .contact(name): name
        case let .address(address): address.description
        case let .pinned(address, fingerprint): "\(address) (\(fingerprint.short))"
        case let .relayed(fingerprint, relay): "\(fingerprint.short) via relay \(relay)"
        case let .session(id): "session \(id)"
        case .webPage: "the web page"
        case let .handle(handle): handle
        case let .sip(uri): uri
        case let .janus(address, _): address.description
        }
    }
}

/// Why ``CallNode/call(_:title:)`` could not place a call.
public enum CallNodeError: Error, Sendable, Equatable, CustomStringConvertible {
    case unknownContact(String)
    case contactWithoutAddress(String)
    case request(CallRequestError)
    case notRunning
    case sessionNeedsJoin
    case noSuchCall(UUID)
    /// The call has no audio yet (it has not connected) or any more.
    case noMedia(UUID)
    /// The call's media refused the request (a prompt or recording in the wrong format).
    case media(String)
    case restartFailed(String)
    /// Early media could not start (``CallNode/progress(_:)``), for this reason.
    case earlyMedia(String)
    /// The call cannot be transferred (``CallNode/transfer(_:to:)``), for this reason.
    case transfer(String)
    /// ``CallTarget/webPage`` with no page connected (or every page in a call).
    case noWebPage
    /// ``CallTarget/handle(_:)`` is reached through its dialect (``CallNode/call(over:handle:title:)``).
    case handleNeedsDialect(String)
    /// SIP: not listening for it, a URI that is not SIP, or an address it cannot listen at.
    case sip(String)
    /// A room this node cannot join as asked (an encrypted group without a listener for its keys).
    case room(String)

    public var description: String {
        switch self {
        case let .unknownContact(name): "no contact named '\(name)' (see `callnode contacts list`)"
        case let .contactWithoutAddress(name): "the contact '\(name)' has no address: give --relay HOST:PORT to reach it through a relay, or add an address with `callnode contacts add \(name) FINGERPRINT HOST:PORT`"
        case let .request(error): error.description
        case .notRunning: "the node is not running"
        case .sessionNeedsJoin: "a session is entered with join(session:relay:), not called"
        case let .noSuchCall(uuid): "no connected call \(uuid)"
        case let .noMedia(uuid): "the call \(uuid) has no audio yet (it has not connected)"
        case let .media(problem): problem
        case let .restartFailed(reason): "the ICE restart failed: \(reason)"
        case let .earlyMedia(reason): "early media cannot start: \(reason)"
        case let .transfer(reason): "cannot transfer the call: \(reason)"
        case .noWebPage: "no web page is connected and free (open the node's web page first)"
        case let .handleNeedsDialect(handle): "'\(handle)' is reached through its dialect: call(over:handle:title:)"
        case let .sip(problem): "SIP: \(problem)"
        case let .room(problem): problem
        }
    }
}

/// The ICE pair a call uses, as the CLI and JSON output describe it.
public struct SelectedPairInfo: Sendable, Equatable {
    public var localType: IceCandidateType
    public var remoteType: IceCandidateType
    public var transport: IceTransport
    public var local: String
    public var remote: String
    /// Whether ICE chose the pair; `false` for a plain RTP path (a SIP peer without ICE: the
    /// peer's address from its SDP, then where its packets come from).
    public var usesICE = true
}

/// What a node reports, in order, to every subscriber of ``CallNode/events()``.
public enum NodeEvent: Sendable, Equatable {
    /// The signaling listener is bound.
    case listening(SignalAddress)
    /// An outgoing call was placed.
    case dialing(UUID, CallTarget)
    /// A call rings here: who is calling (fingerprint proven by TLS; name if a contact).
    case incoming(UUID, from: Fingerprint, name: String?, known: Bool)
    /// The callee is ringing.
    case ringing(UUID, callee: Fingerprint)
    /// The call's state changed: its phase in the call protocol, and hold and mute.
    case state(UUID, phase: String, held: Bool, muted: Bool)
    case selectedPair(UUID, SelectedPairInfo)
    /// ICE connected and media started; `setup` runs from dial (or invite) to here.
    case connected(UUID, setup: Duration)
    /// The call's setup, step by step (sent with ``connected``): where the time went.
    case setup(UUID, [SetupStep])
    /// The call's media is keyed: how, with which SRTP suite, and (DTLS) how long the
    /// handshake took and whose certificate it checked.
    case secured(UUID, MediaSecurity)
    /// The first frame of the peer's audio was decoded and played; `after` runs from dial (or
    /// invite) to here.
    case firstAudio(UUID, after: Duration)
    /// The call's media runs before it is answered: the callee's early answer (SIP's 183: its
    /// announcements, its network's ringback) plays here with the microphone silent, or this
    /// callee's greeting goes to the caller (``CallNode/progress(_:)``). `connected` follows
    /// when the call is answered.
    case earlyMedia(UUID)
    /// A transfer of the call goes on: this node's (``CallNode/transfer(_:to:)``: the peer's
    /// new call's progress, 1xx; 2xx done, the call ends; 3xx–6xx failed, the call goes on) or
    /// the peer's, which this node follows (202 taken and calling, 403 refused; 200 done, the
    /// call ends; 500 failed).
    case transfer(UUID, status: Int, detail: String)
    case statistics(UUID, MediaStatistics)
    case remoteHold(UUID, Bool)
    case dtmf(UUID, Character)
    case connectionLost(UUID)
    case connectionRestored(UUID)
    /// The call's signaling connection dropped; the call goes on and is being resumed on a
    /// new one (whichever side can reach the other reconnects).
    case signalingLost(UUID)
    /// The call's own recording stopped early (a full disk, the directory removed): the file is
    /// valid up to `reason`'s time, the call goes on, Recents marks the recording incomplete.
    case recordingFailed(UUID, path: String, reason: String)
    /// The call carries on over a new signaling connection.
    case signalingResumed(UUID)
    /// This host's addresses or default route changed.
    case hostNetworkChanged(added: [String], removed: [String], routeChanged: Bool)
    /// The audio session's route changed (a device came or went, a fallback took over, the
    /// speaker override), with the devices in use after it (nil while inactive).
    case audioRouteChanged(AudioRouteChangeReason, ActiveAudioRoute?)
    /// Another audio session took the devices; the calls' audio stops until it lets go.
    case audioInterrupted(by: String)
    case audioInterruptionEnded
    /// A device in use failed and nothing could take over: the calls end as failed.
    case audioDeviceFailed(String)
    /// Playout moved to a new place on the peer's stream (this node stalled, the peer's
    /// timestamps jumped, or it started a new stream): audio goes on from the newest packets.
    case playoutReset(UUID, PlayoutReset)
    /// ICE restarted: new credentials and checks, the call and its media go on. `byPeer` when
    /// the other side started it.
    case iceRestarted(UUID, byPeer: Bool)
    /// The callee refused the call.
    case rejected(UUID, RejectReason)
    /// This node refused an incoming call before it rang (a blocked or unknown caller, busy).
    case refused(UUID, from: Fingerprint, RejectReason)
    /// The call ended. `detail` says what failed, for failures; `duration` is the connected time.
    case ended(UUID, reason: CallEndReason, detail: String?, duration: Duration?)
    /// Input this node could not use (a malformed frame, an SDP that does not parse).
    case peerError(String)
    /// Registered at the relay: callers can reach this node by fingerprint.
    case registered(SignalAddress)
    /// The relay connection dropped (the node retries).
    case relayLost(String)
    /// First to join a session: waiting for the other participant.
    case sessionWaiting(String)
    /// A session join was refused or failed (unknown, expired or full session; relay down).
    case sessionFailed(String)
    /// A browser page connected to (or left) the web port.
    case webPage(connected: Bool, from: String)
    /// Something happened in the room a call joined (``CallTarget/janus(_:pin:)``): who is
    /// there, who joins, leaves, talks.
    case room(UUID, RoomEvent)
    /// How this node's conference fares in the room it is kept in
    /// (``CallNode/keepConference(in:pin:)``).
    case conferenceRoom(JanusRoomAddress, ConferenceRoomStatus)
    /// A call's session status (joined, left, connection closed, timed out, …).
    case session(UUID, SessionStatus)
    /// The SIP registration changed: registered, failed (and when it is tried again), removed.
    case sipRegistration(SIPRegistrationState)
}

/// One step of a call's setup and when it happened, from the dial (the caller) or the
/// invitation's arrival (the callee): `signaling-connected`, `invite-sent`, `ringing`,
/// `offer-sent`/`offer-received`, `answer-sent`/`answer-received`, `pair-selected`,
/// `ice-connected`, `media-secured`, `media-started`.
public struct SetupStep: Sendable, Equatable {
    public var name: String
    public var at: Duration

    public init(_ name: String, at: Duration) {
        self.name = name
        self.at = at
    }
}

/// Whether a node encrypts frames end to end (``CallNodeConfiguration/frameEncryption``).
public enum FrameEncryptionPolicy: String, Sendable, CaseIterable {
    case required, preferred, off
}

/// How a call's media is protected.
public struct MediaSecurity: Sendable, Equatable, CustomStringConvertible {
    public var keyExchange: KeyExchange
    /// The SRTP suite (RFC 4568 name), as the handshake or the SDP picked it.
    public var suite: String
    /// How long the DTLS handshake took (ICE connected to keys), for DTLS.
    public var handshake: Duration?
    /// The fingerprint the peer's DTLS certificate matched, for DTLS.
    public var peerFingerprint: String?
    /// Whether every frame is also encrypted end to end under SRTP, both ways.
    public var frameEncryption: Bool
    /// The code both sides show (``SecurityCode``), from both identities.
    public var securityCode: String?
    /// Plain RTP: nothing protects the media (a SIP peer without SRTP, where allowed).
    public var unencrypted: Bool

    public init(keyExchange: KeyExchange, suite: String, handshake: Duration? = nil, peerFingerprint: String? = nil,
                frameEncryption: Bool = false, securityCode: String? = nil, unencrypted: Bool = false) {
        self.unencrypted = unencrypted
        self.keyExchange = keyExchange
        self.suite = suite
        self.handshake = handshake
        self.peerFingerprint = peerFingerprint
        self.frameEncryption = frameEncryption
        self.securityCode = securityCode
    }

    public var description: String {
        if unencrypted { return "NOT encrypted: plain RTP (the peer speaks no SRTP; --sip-media-encryption required refuses such calls)" }
        return switch keyExchange {
        case .sdes: "SRTP \(suite), keyed by SDES" + frames
        case .dtls:
            "SRTP \(suite), keyed by DTLS" + (handshake.map { String(format: " (handshake %.1f ms)", Double($0.components.attoseconds) / 1e15 + Double($0.components.seconds) * 1000) } ?? "") + frames
        }
    }

    private var frames: String {
        frameEncryption ? "; frames encrypted end to end" : "; frames not encrypted end to end"
    }
}

/// What a call held here sends to the held party (``CallNodeConfiguration/holdAudio``).
public enum HoldAudio: Sendable, Equatable, CustomStringConvertible {
    /// Nothing: the held call carries no audio either way (`inactive`).
    case silence
    /// A soft tone (425 Hz, as many networks' waiting tone), for the held party to know the
    /// call is still there.
    case tone
    /// A WAV file, looped (mono; at another rate than the call's it is resampled as it plays).
    case file(String)

    /// Parses `silence`, `tone` or `wav:PATH`.
    public init?(_ text: String) {
        switch text {
        case "silence", "none": self = .silence
        case "tone": self = .tone
        default:
            guard text.hasPrefix("wav:"), text.count > 4 else { return nil }
            self = .file(String(text.dropFirst(4)))
        }
    }

    public var description: String {
        switch self {
        case .silence: "silence"
        case .tone: "tone"
        case let .file(path): "wav:\(path)"
        }
    }

    /// A new source of it at the rate the call sends (`format`: 8 kHz for a G.711 call whose
    /// own source is at the codec's rate), or nil for silence. A file at another rate is
    /// resampled by the call's media as it plays.
    func makeSource(format: AudioFormat) throws(AudioDeviceError) -> (any AudioSource)? {
        switch self {
        case .silence: return nil
        case .tone: return ToneSource(frequency: 425, amplitude: 0.1, format: format)
        case let .file(path):
            let source = try WAVFileSource(path: path, loops: true)
            guard source.format.channels == 1 else {
                throw .unsupportedFormat("hold audio \(path) is \(source.format); it must be mono")
            }
            return source
        }
    }
}
