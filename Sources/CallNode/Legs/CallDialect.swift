import Foundation
import Signaling

/// A signaling dialect: how one call's signals travel between this node and its peer.
///
/// A call's leg speaks ``CallSignal``s — invitation, ringing, offer and answer, candidates,
/// end, refusal — and hears them back through ``DialectCall``; it never sees node envelopes,
/// WebSocket frames or SIP requests. One dialect object carries one call: node envelopes
/// (direct or through the relay), the call page's WebSocket, and any other wire an embedder
/// plugs in (``CallNode/call(over:handle:title:)`` and ``CallNode/admit(_:handle:invitation:)``).
/// A dialect adds no phase to the call: what its wire needs (a handshake to resume on a new
/// connection, numbering, an acknowledgement) stays inside it.
public protocol CallDialect: AnyObject, Sendable {
    /// What the dialect's wire asks of the call.
    var traits: DialectTraits { get }
    /// The call begins: what arrives for it goes to `call` from now on.
    func start(_ call: DialectCall) async
    /// Outgoing: reach the peer, and say ``DialectCall/signalingUp(peer:)`` once the wire is
    /// up (or ``DialectCall/signalingLost(_:resumable:)`` if it never comes up).
    func dial() async
    /// Sends a signal, in order (a dialect whose calls outlive a connection keeps it for the next).
    func send(_ signal: CallSignal) async
    /// The call's state asks for one try at a new connection after the wire was lost; a try
    /// that does not resume the call is told with ``DialectCall/reconnectFailed()``.
    func reconnect() async
    /// Gives up the current connection (it left from an address this host no longer has).
    func dropConnection() async
    /// This host's address the wire leaves from, if it knows (to tell whether it went).
    var localAddress: String? { get async }
    /// The call is over: close what the dialect holds for it.
    func close() async
    /// Asks the peer to call `target` in this side's place: a blind transfer, or, with `other`
    /// (this node's call with the target, of the same dialect), an attended one, the new call
    /// replacing `other` at the target. Nil once asked, else why it cannot be. Its progress
    /// comes back through ``DialectCall/transferProgress(status:detail:)``.
    func transfer(to target: String, replacing other: (any CallDialect)?) async -> String?
    /// How the peer's side names this call's dialog, for another call's attended transfer to
    /// replace it there (SIP: its dialog, which the REFER's Replaces names); nil where the wire
    /// has no such name.
    var replaceableDialog: ReplaceableDialog? { get async }
    /// This side's microphone was muted or unmuted (its media sends silence either way): a wire
    /// that shows it to others says so (a Janus room marks the participant muted).
    func microphoneMuted(_ muted: Bool) async
}

/// A call's dialog as an attended transfer names it to the peer's side (SIP: the call's
/// dialog at this node's stack, from which the Replaces header is made).
public struct ReplaceableDialog: Sendable, Hashable {
    /// The wire's own number for the dialog.
    public let id: Int
    public init(id: Int) { self.id = id }
}

extension CallDialect {
    public func transfer(to target: String, replacing other: (any CallDialect)?) async -> String? {
        "this call's wire has no transfer (only SIP calls can be transferred)"
    }

    public var replaceableDialog: ReplaceableDialog? { get async { nil } }

    public func microphoneMuted(_ muted: Bool) async {}

    public func reconnect() async {}
    public func dropConnection() async {}
    public var localAddress: String? { get async { nil } }
}

/// What a dialect's wire asks of the calls it carries.
public struct DialectTraits: Sendable, Equatable {
    /// Who is at the other end: what media it takes follows from it.
    public enum Peer: Sendable, Equatable {
        /// Another node: SDES or DTLS, redundancy up to three frames, frame keys in the SDP.
        case node
        /// A browser's call page: DTLS only, WebRTC stream ids, one redundant frame, frame
        /// keys offered over its own channel.
        case webPage
        /// A room on a media server (a Janus AudioBridge): DTLS only, WebRTC stream ids, no
        /// frame encryption (the room mixes what it hears), no security code (no identity).
        case room
        /// Anything else: the node's own media settings, no frame encryption.
        case other
    }

    public var peer: Peer
    /// Whether a call can outlive its connection (resumed on a new one by a handshake of the
    /// dialect's own).
    public var resumable: Bool
    /// Which side makes the first offer: the callee, once it answers (node envelopes, the
    /// page), or the caller with its invitation (SIP's INVITE).
    public var firstOffer: FirstOffer
    /// Whether this side's offers use ICE (false: plain RTP from one UDP port, for peers that
    /// do not speak ICE, as most SIP phones). Answers follow the offer either way.
    public var offersICE: Bool
    /// Without ICE: the address of this host to take RTP on (nil: the one the route to the peer
    /// leaves from).
    public var mediaAddress: String?
    /// Whether the call's media may go unencrypted: SRTP always between nodes and with pages;
    /// a SIP peer that speaks no SRTP may be allowed plain RTP (``MediaEncryption``).
    public var mediaEncryption: MediaEncryption
    /// The codecs the call may use, most wanted first: Opus between nodes and with pages; SIP
    /// peers may also get G.711 (``SIPListenSettings/codecs``).
    public var codecs: [AudioEncoding]
    /// The peer only ever sends (a room's feed): its `sendonly` is what it is, not a hold, and
    /// is not reported as one.
    public var receivesOnly: Bool
    /// Frame keys the dialect brings instead of agreeing them with the peer: an end-to-end
    /// encrypted group's (this member's sender key out, a feed's publisher's in), which the
    /// group changes while the call runs (``CallNode/setFrameKeys(_:outbound:inbound:)``).
    public var frameKeys: FrameKeys?
    /// A later offer of the peer's that the running call cannot take (fax, video, other keys)
    /// is refused and the call goes on as it was: SIP's 488 to a re-INVITE or UPDATE (RFC 3261
    /// §14.2). False: the peer is told of the error and the call ends as failed (a node or page
    /// offers only what the call can take, so an offer it cannot is a broken peer).
    public var refusesLaterOffers: Bool

    public init(peer: Peer, resumable: Bool, firstOffer: FirstOffer = .byCallee, offersICE: Bool = true, mediaAddress: String? = nil,
                mediaEncryption: MediaEncryption = .required, codecs: [AudioEncoding] = [.opus], receivesOnly: Bool = false,
                frameKeys: FrameKeys? = nil, refusesLaterOffers: Bool = false) {
        self.frameKeys = frameKeys
        self.refusesLaterOffers = refusesLaterOffers
        self.codecs = codecs
        self.receivesOnly = receivesOnly
        self.peer = peer
        self.resumable = resumable
        self.firstOffer = firstOffer
        self.offersICE = offersICE
        self.mediaAddress = mediaAddress
        self.mediaEncryption = mediaEncryption
    }
}

/// A dialect's way into the call it carries: what arrives on its wire, in the call's terms.
/// Every method queues an input for the call's leg and returns at once.
public struct DialectCall: Sendable {
    /// Weak: the leg holds its dialect, which holds this.
    private let reference: WeakLeg
    public let id: UUID

    init(leg: CallLeg) {
        reference = WeakLeg(leg)
        id = leg.uuid
    }

    private var leg: CallLeg? { reference.leg }

    /// A signal from the peer.
    public func received(_ signal: CallSignal) {
        leg?.post(.signal(signal))
    }

    /// Outgoing: the wire to the peer is up (`peer`: its authenticated identity, if the wire
    /// has one); the invitation goes out next.
    public func signalingUp(peer: Fingerprint?) {
        leg?.post(.signalingUp(peer: peer))
    }

    /// The wire closed (`detail` says how). A `resumable` call waits for the dialect to resume
    /// it; anything else ends.
    public func signalingLost(_ detail: String, resumable: Bool) {
        leg?.post(.signalingLost(detail, resumable: resumable))
    }

    /// The call goes on over a new connection.
    public func signalingResumed() {
        leg?.post(.event(.signalingResumed, done: nil))
    }

    /// A try at a new connection did not resume the call.
    public func reconnectFailed() {
        leg?.post(.event(.reconnectFailed, done: nil))
    }

    /// The peer sent a DTMF digit on the wire (SIP INFO) rather than in its media: it is
    /// reported as a digit heard in the call (``NodeEvent/dtmf(_:_:)``).
    public func receivedDTMF(_ digit: Character) {
        leg?.post(.media(.dtmf(digit)))
    }

    /// The peer refused the first offer for its encryption, and the dialect's media policy lets
    /// the call go unencrypted: the call offers again in plain RTP, once, and says so (its media
    /// is reported unencrypted).
    public func firstOfferRefusedEncrypted() {
        leg?.post(.event(.firstOfferRefusedEncrypted, done: nil))
    }

    /// The peer asks this side to call someone else in its place (SIP's REFER: a transfer):
    /// the node decides as for any call it places, tells the peer through the request, places
    /// the call and, once it connects, ends this one.
    public func transferRequested(_ request: TransferRequest) {
        leg?.post(.transferRequested(request))
    }

    /// How a transfer of this side's asking goes (the peer reports its new call's progress):
    /// told as ``NodeEvent/transfer(_:status:detail:)``.
    public func transferProgress(status: Int, detail: String) {
        leg?.post(.transferProgress(status: status, detail: detail))
    }

    /// This side's transfer succeeded (`detail` says to whom): the call ends.
    public func transferred(_ detail: String) {
        leg?.post(.event(.end(.transferred(detail)), done: nil))
    }

    /// Something on the wire makes the call impossible (`detail` says what): it ends as failed.
    public func failed(_ detail: String) {
        leg?.post(.event(.end(.failed(detail)), done: nil))
    }

    /// Something happened in the room the call joined (who is there, joins, leaves, talks):
    /// told as ``NodeEvent/room(_:_:)``.
    public func room(_ event: RoomEvent) {
        guard let leg else { return }
        leg.broadcaster.send(.room(id, event))
    }

    /// Runs `work` as a task of the call: it is cancelled and awaited when the call ends.
    public func run(_ work: @escaping @Sendable () async -> Void) {
        leg?.spawn(work)
    }
}

/// A peer's request that this side call someone else in its place (SIP's REFER: a transfer),
/// from its dialect to the node (``DialectCall/transferRequested(_:)``).
public struct TransferRequest: Sendable {
    /// Whom to call (a `sip:` URI).
    public var target: String
    /// Tells the peer the node's decision: 202 (it calls the target), 403 (a blocked target),
    /// or another refusal, with a phrase.
    public var respond: @Sendable (_ status: Int, _ phrase: String?) async -> Void
    /// The new call's dialect (SIP's reports the call's progress to the peer); nil if it
    /// cannot be made.
    public var dialect: @Sendable () async -> (any CallDialect)?
    /// The new call connected or ended: another transfer may be followed.
    public var settled: @Sendable () async -> Void
    /// Who asks (SIP's Referred-By, else the REFER's From), when the wire says.
    public var referredBy: String?

    public init(target: String, referredBy: String? = nil, respond: @escaping @Sendable (Int, String?) async -> Void,
                dialect: @escaping @Sendable () async -> (any CallDialect)?, settled: @escaping @Sendable () async -> Void) {
        self.target = target
        self.referredBy = referredBy
        self.respond = respond
        self.dialect = dialect
        self.settled = settled
    }
}
