import AudioSession
import Calls
import Foundation
import ICE
import Locking
import Media
import Signaling

/// Everything that reaches a ``CallLeg``: from the router (the manager's actions, audio
/// activation, the host's network), from the call's dialect (what the peer says, the wire
/// coming up, lost or resumed) and from the tasks the leg started (ICE and media events,
/// timers, media that finished being built). The leg takes them one at a time, each to
/// completion: what happens while one is being performed is the next input, never a step
/// inside it.
enum LegInput: Sendable {
    /// An incoming call was admitted: prepare ICE, ring (`ring`: not a session's call, which is
    /// answered at once).
    case invited(ring: Bool)
    /// An action of the call manager (CallKit's provider action) for this call.
    case perform(ProviderAction)
    /// An event for the call's state (an end from the router, say); `done` is told once the
    /// leg has taken it.
    case event(LegEvent, done: LegReply<Void>?)
    /// A signal from the peer, through the call's dialect.
    case signal(CallSignal)
    /// The outgoing call's wire is up (`peer`: its authenticated identity, if it has one).
    case signalingUp(peer: Fingerprint?)
    /// The call's wire closed; a `resumable` call waits to be resumed on a new one.
    case signalingLost(String, resumable: Bool)
    case ice(IceEvent)
    case media(MediaEvent)
    /// The call's media finished being built and keyed (with DTLS: after the handshake), or failed.
    case mediaPrepared(Result<PreparedMedia, any Error>)
    case timerFired(LegTimer, generation: UInt64)
    /// The audio session is active (the provider activated it, or this node did, app-owned).
    case audioActive
    case hostNetworkChanged(HostNetworkSnapshot, from: HostNetworkSnapshot)
    /// The embedder asks for an ICE restart; the reply is the error, if it could not start.
    case restartICE(LegReply<CallNodeError?>)
    /// The embedder's early media before it answers (``CallNode/progress(_:)``).
    case progress(LegReply<CallNodeError?>)
    /// The peer asks for the call to be transferred (its dialect's ``TransferRequest``).
    case transferRequested(TransferRequest)
    /// How this side's transfer goes, as the peer reports it.
    case transferProgress(status: Int, detail: String)
    /// A local candidate of trickle round `round` to send (`nil`: the end of its candidates).
    case trickled(round: Int, candidate: String?)
    /// A group's frame keys changed (nil leaves one): media built later takes them too.
    case frameKeys(outbound: FrameEncryptionKey?, inbound: FrameEncryptionKey?)
    /// The call's media statistics now (nil before media).
    case statistics(LegReply<MediaStatistics?>)
    /// Mix this into what the call sends (nil: stop); the reply is the error, if it could not.
    case appAudio((any AudioSource)?, volume: Double, LegReply<CallNodeError?>)
    /// Set the call's gains (nil leaves one); the reply is both as they are then (nil: no media).
    case volumes(microphone: Double?, output: Double?, LegReply<CallVolumes?>)
    /// Record the call into this sink from now on (nil: stop); the reply is the error, if any.
    case recordingTap((any AudioSink)?, mixingSent: Bool, LegReply<CallNodeError?>)

    /// Answers whoever waits on this input with its fallback (the leg ended before taking it).
    func refuse() {
        switch self {
        case let .event(_, done): done?.refuse()
        case let .restartICE(reply): reply.refuse()
        case let .progress(reply): reply.refuse()
        case let .statistics(reply): reply.refuse()
        case let .appAudio(_, _, reply), let .recordingTap(_, _, reply): reply.refuse()
        case let .volumes(_, _, reply): reply.refuse()
        default: break
        }
    }
}

/// What a leg tells the router, in order. The leg waits for each to be taken, so the router's
/// view (which connection carries the call, which bridge port is its) is current before the
/// leg goes on. The router answers, where it has to, with an input (``LegInput/audioActive``).
enum LegReport: Sendable {
    /// The call's signaling connection is now this one (dialed, or resumed on it), or a
    /// resumption is being tried on it: the call's messages there are routed to the leg.
    case connection(SignalingConnection)
    /// The call's media is built, on this port of the audio session's bridge (nil with a
    /// stand-in session).
    case mediaPort(BridgePortID?)
    /// The call joined `other`'s conference, or left its own (`nil`).
    case group(UUID?)
    /// The media is ready and waits for the audio session: the router answers with
    /// ``LegInput/audioActive`` once it is active (app-owned: after activating it).
    case awaitingAudio
    /// The peer asks for the call to be transferred: the node decides and places the call.
    case transferRequested(TransferRequest)
    /// The call has ended (before it releases what it holds): what its end event says.
    /// `reason`: the one the manager records here.
    case ended(detail: String?, duration: Duration?, reason: CallEndReason?)
    /// The call released everything it held.
    case released
}

/// The answer to an input that someone waits for, given exactly once: by the leg when it takes
/// the input, or the fallback when the leg ended first.
final class LegReply<Value: Sendable>: Sendable {
    private let handler: Locked<(@Sendable (Value) -> Void)?>
    private let fallback: Value

    init(fallback: Value, _ handler: @escaping @Sendable (Value) -> Void) {
        self.handler = Locked(handler)
        self.fallback = fallback
    }

    func callAsFunction(_ value: Value) {
        let waiting = handler.withLock { waiting in
            let taken = waiting
            waiting = nil
            return taken
        }
        waiting?(value)
    }

    func refuse() { self(fallback) }
}

extension SignalMessage {
    /// A call's signal as a node envelope's message (an invitation without a resume token):
    /// what a dialect on node envelopes or the page's WebSocket sends. Nil for early media,
    /// which node envelopes do not carry: their callee offers once it answers, so there is no
    /// offer to answer early (``CallNode/progress(_:)`` refuses such calls).
    public init?(_ signal: CallSignal) {
        switch signal {
        case .earlyAnswer, .accepted: return nil
        case let .invite(invitation):
            self = .invite(Invitation(displayName: invitation.displayName, title: invitation.title, session: invitation.session))
        case .ringing: self = .ringing
        case let .offer(sdp): self = .offer(sdp: sdp)
        case let .answer(sdp): self = .answer(sdp: sdp)
        case let .candidates(lines, end): self = .candidates(lines, end: end)
        case let .pathFound(path): self = .pathFound(path)
        case let .end(reason): self = .end(reason)
        case let .reject(reason): self = .reject(reason)
        case let .error(text): self = .error(text)
        case .keepAlive: self = .keepAlive
        }
    }
}

extension CallSignal {
    /// A node envelope's message as a call's signal; nil for what only the wire speaks (the
    /// resumption handshake) and for the old hold message (offers and answers say hold now).
    public init?(_ message: SignalMessage) {
        switch message {
        case let .invite(invitation):
            self = .invite(CallInvitation(displayName: invitation.displayName, title: invitation.title, session: invitation.session))
        case .ringing: self = .ringing
        case let .offer(sdp): self = .offer(sdp: sdp)
        case let .answer(sdp): self = .answer(sdp: sdp)
        case let .candidates(lines, end): self = .candidates(lines, end: end)
        case let .pathFound(path): self = .pathFound(path)
        case let .end(reason): self = .end(reason)
        case let .reject(reason): self = .reject(reason)
        case let .error(text): self = .error(text)
        case .keepAlive: self = .keepAlive
        case .hold, .resume, .resumed, .resumeRefused, .groupKey, .groupKeyTaken: return nil
        }
    }
}
