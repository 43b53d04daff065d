/// Where one call (a leg) is in its life. Each phase carries what only it has, so a state
/// such as "media before the offer and answer" or "an ICE restart before negotiation" cannot be
/// written.
public enum LegPhase: Sendable, Equatable {
    /// Outgoing: the signaling connection to the callee is being opened.
    case dialing
    /// Outgoing: the invitation is out; the callee has not said it rings yet.
    case inviting
    /// Ringing: the callee's phone (outgoing) or this node (incoming).
    case ringing
    /// Incoming, answered: the offer is out, the caller's answer not yet in.
    case offering
    /// The offer and answer are done; ICE checks the candidate pairs.
    case checking
    /// ICE connected; the media's keys are being made (the DTLS handshake, with DTLS-SRTP).
    case securing(iceConnectedAt: Duration)
    /// The media is built and keyed; it starts when the audio session is activated.
    case awaitingAudio(iceConnectedAt: Duration)
    /// The media runs before the call is answered (early media: the callee's announcements or
    /// ringback here, or this side's greeting before it answers); the call connects when it is.
    case earlyMedia(iceConnectedAt: Duration)
    /// Media runs.
    case connected(since: Duration)
    /// Media runs but the path is lost: nothing heard, or ICE says disconnected.
    case reconnecting(Reconnecting)
    /// Over, for a reason; nothing of the call is left.
    case ended(LegEnd)

    /// What a lost connection carries while it is being recovered.
    public struct Reconnecting: Sendable, Equatable {
        /// When media first started (a restored call is connected since then again).
        public var connectedSince: Duration
        /// When the connection was lost.
        public var lostAt: Duration
        /// Which signals say it is lost; it is restored when none does.
        public var signals: Set<LegLossSignal>
    }

    /// Whether the call has media (started, whether or not its path is lost right now).
    public var hasMedia: Bool {
        switch self {
        case .connected, .reconnecting: true
        default: false
        }
    }

    /// Whether ICE has connected once (the media's keys and media may exist).
    public var iceHasConnected: Bool {
        switch self {
        case .securing, .awaitingAudio, .earlyMedia, .connected, .reconnecting: true
        default: false
        }
    }

    /// Whether the offer and answer are done (an ICE restart is possible from here on).
    public var isNegotiated: Bool {
        switch self {
        case .checking, .securing, .awaitingAudio, .earlyMedia, .connected, .reconnecting: true
        default: false
        }
    }

    public var hasEnded: Bool {
        if case .ended = self { true } else { false }
    }
}

/// Why a connection counts as lost.
public enum LegLossSignal: Hashable, Sendable, CaseIterable {
    /// ICE reports the selected pair disconnected.
    case ice
    /// No authentic media arrived for the stall timeout.
    case media
}

/// How a leg ended, and whose doing it was.
public struct LegEnd: Sendable, Equatable {
    /// The reason the call manager records (Recents, the `ended` event).
    public var reason: CallEndReason
    /// What failed, for failures and the peer's reasons; nil for a plain hang-up.
    public var detail: String?
}

/// A timer of a leg. Armed and cancelled by ``LegAction``s, run on the node's injected clock.
public enum LegTimer: Hashable, Sendable, CaseIterable {
    /// Sends a keep-alive on the signaling connection (so NATs and the relay keep it open).
    case keepAlive
    /// Ends the call when its connection stays lost this long.
    case connectionLost
    /// Restarts ICE while the connection stays lost (the callee after one interval, the
    /// caller after one and a half, so that their offers do not cross).
    case iceRestart
    /// Ends the call when its signaling connection stays lost this long.
    case resumeWindow
    /// Tries a new signaling connection again (backing off from 0.25 s to 2 s between tries).
    case reconnect
    /// Ends a call whose signaling connection the other end closed while its media stopped
    /// (the peer's process is gone), unless either comes back first.
    case peerGone
    /// Starts a fresh round of checks (an ICE restart) when the current one has found no pair
    /// within ``LegTimings/setupIceRound``: libnice's retries of a check come further and
    /// further apart, so through heavy loss a fresh round gets through sooner than waiting.
    case setupRound
}

/// Whether a call's signaling connection is up, or lost and being resumed on a new one.
public enum LegSignaling: Sendable, Equatable {
    case up
    /// Lost at `since`: whichever side can reach the other reconnects; messages wait for
    /// the new connection.
    case resuming(since: Duration)

    public var isUp: Bool { self == .up }
}

/// How a call ends, as the leg learns of it.
public enum LegEnding: Sendable, Equatable {
    /// The user here hung up (or declined, if the call rings here).
    case hangUp
    /// The peer sent `end` with its reason.
    case peerEnded(HangupReason)
    /// The peer refused the call.
    case peerRejected(RejectReason)
    /// Something failed here (`detail` says what); the peer is told the call failed.
    case failed(String)
    /// One of the manager's actions timed out (`detail` names it); the peer is told.
    case actionTimedOut(String)
    /// The manager ended the call itself: nobody answered before the ring timeout, the answer
    /// failed, or audio could not be activated.
    case endedByManager(CallEndReason)
    /// The signaling connection closed (with the error, if any) before the call ended.
    case signalingClosed(String)
    /// The node shuts down.
    case shutdown
    /// The call was transferred (`detail` says to whom): the peer now talks to someone else
    /// (this side asked it to), or this side followed the peer's transfer and its new call
    /// connected. The peer is told the call is over, if it has not said so.
    case transferred(String)
}

/// The settings a leg's timers follow (from ``CallNodeConfiguration``).
public struct LegTimings: Sendable, Equatable {
    public var keepAliveInterval: Duration
    public var connectionLostTimeout: Duration
    /// `nil` or zero: never restart ICE by itself.
    public var iceRestartInterval: Duration?
    /// How many fresh rounds of checks a call starts (by restarting ICE) when a round fails
    /// before any pair worked. Through heavy loss a round can run out (libnice sends a check
    /// four times, 0.5, 1.5 and 2 s after the first, and gives the pair up half a second after
    /// the last) where a fresh one gets through; a path that cannot work fails each round
    /// alike, so this also bounds how long that takes to say. 0 (or no restart interval): the
    /// first failure ends the call.
    public var setupIceRestarts: Int
    /// How long a round of checks may go without a pair before a fresh one starts (counted
    /// in ``setupIceRestarts``); `nil`: only when a round fails. A round on an ordinary path
    /// connects within a second (through a TURN server over TCP, two); by two and a half
    /// seconds libnice has given up every pair the peer's checks did not bring back.
    public var setupIceRound: Duration?
    /// How long a call whose signaling connection dropped waits to be resumed on a new one.
    public var resumeWindow: Duration
    /// How long a call waits once its signaling connection was closed from the other end and
    /// its media has stopped too — what a peer whose process is gone leaves — before it ends.
    public var peerGoneAfter: Duration

    public init(keepAliveInterval: Duration = .seconds(15), connectionLostTimeout: Duration = .seconds(30),
                iceRestartInterval: Duration? = .seconds(5), resumeWindow: Duration = .seconds(30),
                peerGoneAfter: Duration = .seconds(3), setupIceRestarts: Int = 5, setupIceRound: Duration? = .milliseconds(2500)) {
        self.keepAliveInterval = keepAliveInterval
        self.connectionLostTimeout = connectionLostTimeout
        self.iceRestartInterval = iceRestartInterval
        self.setupIceRestarts = setupIceRestarts
        self.setupIceRound = setupIceRound
        self.resumeWindow = resumeWindow
        self.peerGoneAfter = peerGoneAfter
    }
}

/// Which way a call's audio flows now: what the last offer and answer agreed and this side's
/// hold. A held call carries no audio either way (the holder may send hold audio).
public struct MediaFlow: Sendable, Equatable {
    /// Audio goes to the peer (the microphone, or hold audio while held here).
    public var sending: Bool
    /// The peer's audio is played.
    public var receiving: Bool
    /// This side holds the call: its bridge port neither takes the microphone nor plays.
    public var heldHere: Bool

    public init(sending: Bool, receiving: Bool, heldHere: Bool) {
        self.sending = sending
        self.receiving = receiving
        self.heldHere = heldHere
    }

    public static let both = MediaFlow(sending: true, receiving: true, heldHere: false)
}

/// Which side of a call makes the first offer: its dialect's wire decides.
public enum FirstOffer: Sendable, Equatable {
    /// The callee, once it answers (node envelopes, the call page; SIP's delayed offer).
    case byCallee
    /// The caller, with its invitation (SIP's INVITE with SDP); the callee's answer says it
    /// took the call.
    case byCaller
}
