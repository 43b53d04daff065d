import CallCore
import Foundation

/// What an invitation says about the call.
public struct Invitation: Sendable, Equatable, Codable {
    /// The caller's chosen display name (informational; the fingerprint is the identity).
    public var displayName: String?
    /// A title for the call or session.
    public var title: String?
    /// Set when the call is a session both sides joined (no ringing).
    public var session: String?
    /// The secret the caller presents to resume this call on a new signaling connection
    /// (``SignalMessage/resume(_:)``); it travels only inside the authenticated channel.
    public var resumeToken: String?

    public init(displayName: String? = nil, title: String? = nil, session: String? = nil, resumeToken: String? = nil) {
        self.displayName = displayName
        self.title = title
        self.session = session
        self.resumeToken = resumeToken
    }
}

/// A caller asking to carry on a call on a new signaling connection (its old one dropped, or
/// its host's address changed).
public struct ResumeRequest: Sendable, Equatable, Codable {
    /// The invitation's ``Invitation/resumeToken``.
    public var token: String
    /// The highest sequence number of the peer's messages received in order: the peer sends
    /// again what came after it.
    public var received: Int

    public init(token: String, received: Int) {
        self.token = token
        self.received = received
    }
}

/// A member's sender key for an end-to-end encrypted group (a room on a media server that
/// forwards frames it cannot open): sent by the member to each other member's node, inside the
/// mutually authenticated TLS connection pinned to that member's identity, so the server
/// carrying the room never sees it. The sender is the connection's peer.
public struct GroupKeyGrant: Sendable, Equatable, Codable {
    /// The room, as the members name it (the room's address).
    public var room: String
    /// Counts the sender's keys: a newer one replaces an older (one made when a member left).
    public var epoch: Int
    /// The key (32 bytes, base64).
    public var key: String

    public init(room: String, epoch: Int, key: String) {
        self.room = room
        self.epoch = epoch
        self.key = key
    }
}

/// One signaling message (the call protocol: invitation, offer, answer, extra info, end,
/// reject), plus hold, errors and keep-alives.
public enum SignalMessage: Sendable, Equatable {
    /// The caller asks the callee to ring.
    case invite(Invitation)
    /// The callee is ringing.
    case ringing
    /// The callee answered: its SDP offer.
    case offer(sdp: String)
    /// The caller's SDP answer.
    case answer(sdp: String)
    /// Trickled ICE candidates (`candidate:…` attribute values); `end` marks end-of-candidates.
    case candidates([String], end: Bool)
    /// The pair the sender's checks found while the call sets up its path. On the wire a
    /// `candidates` message with no candidates and a `path`: a node that does not know it
    /// reads nothing new.
    case pathFound(FoundPath)
    /// The sender put the call on hold (`true`) or resumed it.
    case hold(Bool)
    /// The sender ended the call.
    case end(HangupReason)
    /// The callee refused the call.
    case reject(RejectReason)
    /// The sender could not use something it received.
    case error(String)
    /// Keeps idle connections (and NAT bindings) alive.
    case keepAlive
    /// The caller carries on the call on this (new) connection.
    case resume(ResumeRequest)
    /// The callee took the call over to this connection; it received the caller's messages up
    /// to `received` (the caller sends again what came after).
    case resumed(received: Int)
    /// The callee will not resume the call here, and says why.
    case resumeRefused(String)
    /// A group member's sender key (a connection of its own, no call).
    case groupKey(GroupKeyGrant)
    /// The receiver holds the sender key of this epoch (or says why not: `refused`).
    case groupKeyTaken(epoch: Int, refused: String?)

    /// The wire name of the message type.
    public var type: String {
        switch self {
        case .invite: "invite"
        case .ringing: "ringing"
        case .offer: "offer"
        case .answer: "answer"
        case .candidates, .pathFound: "candidates"
        case .hold: "hold"
        case .end: "end"
        case .reject: "reject"
        case .error: "error"
        case .keepAlive: "keep-alive"
        case .resume: "resume"
        case .resumed: "resumed"
        case .resumeRefused: "resume-refused"
        case .groupKey: "group-key"
        case .groupKeyTaken: "group-key-taken"
        }
    }

    /// Whether the message belongs to one connection rather than to the call's sequence:
    /// keep-alives and the resumption handshake are never numbered or sent again.
    public var isConnectionLevel: Bool {
        switch self {
        case .keepAlive, .resume, .resumed, .resumeRefused, .groupKey, .groupKeyTaken: true
        default: false
        }
    }
}

/// The versioned envelope every signaling frame carries: one JSON object,
/// `{"v":1,"type":"offer","call":"<uuid>","seq":3,"ack":2,"sdp":"v=0…"}`.
///
/// Between nodes a call's messages are numbered (`seq`, from 1 per sender and call) and each
/// envelope acknowledges the peer's messages received in order (`ack`), so that a call can move
/// to a new connection and the messages the old one lost are sent again, once
/// (``SignalSequence``). Web pages leave both out.
public struct SignalEnvelope: Sendable, Equatable, Codable {
    /// The protocol version this node speaks.
    public static let currentVersion = 1

    public var version: Int
    /// The call the message belongs to (absent for keep-alives and connection-level errors).
    public var call: UUID?
    public var message: SignalMessage
    /// This message's number in the sender's sequence for the call.
    public var seq: Int?
    /// The highest number of the receiver's messages the sender has received in order.
    public var ack: Int?

    public init(call: UUID?, _ message: SignalMessage, seq: Int? = nil, ack: Int? = nil, version: Int = SignalEnvelope.currentVersion) {
        self.version = version
        self.call = call
        self.message = message
        self.seq = seq
        self.ack = ack
    }

    private enum Key: String, CodingKey {
        case v, type, call, seq, ack, invitation, sdp, candidates, end, path, hold, reason, message, token, received, grant, epoch
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Key.self)
        version = try c.decode(Int.self, forKey: .v)
        call = try c.decodeIfPresent(UUID.self, forKey: .call)
        seq = try c.decodeIfPresent(Int.self, forKey: .seq)
        ack = try c.decodeIfPresent(Int.self, forKey: .ack)
        if let seq, seq < 1 { throw DecodingError.dataCorruptedError(forKey: .seq, in: c, debugDescription: "sequence numbers start at 1") }
        if let ack, ack < 0 { throw DecodingError.dataCorruptedError(forKey: .ack, in: c, debugDescription: "a negative acknowledgement") }
        let type = try c.decode(String.self, forKey: .type)
        switch type {
        case "invite": message = .invite(try c.decodeIfPresent(Invitation.self, forKey: .invitation) ?? Invitation())
        case "ringing": message = .ringing
        case "offer": message = .offer(sdp: try c.decode(String.self, forKey: .sdp))
        case "answer": message = .answer(sdp: try c.decode(String.self, forKey: .sdp))
        case "candidates" where c.contains(.path):
            message = .pathFound(try c.decode(FoundPath.self, forKey: .path))
        case "candidates":
            message = .candidates(try c.decodeIfPresent([String].self, forKey: .candidates) ?? [],
                                  end: try c.decodeIfPresent(Bool.self, forKey: .end) ?? false)
        case "hold": message = .hold(try c.decode(Bool.self, forKey: .hold))
        case "end": message = .end(try c.decode(HangupReason.self, forKey: .reason))
        case "reject": message = .reject(try c.decode(RejectReason.self, forKey: .reason))
        case "error": message = .error(try c.decode(String.self, forKey: .message))
        case "keep-alive": message = .keepAlive
        case "resume":
            let received = try c.decode(Int.self, forKey: .received)
            guard received >= 0 else { throw DecodingError.dataCorruptedError(forKey: .received, in: c, debugDescription: "a negative sequence number") }
            message = .resume(ResumeRequest(token: try c.decode(String.self, forKey: .token), received: received))
        case "resumed":
            let received = try c.decode(Int.self, forKey: .received)
            guard received >= 0 else { throw DecodingError.dataCorruptedError(forKey: .received, in: c, debugDescription: "a negative sequence number") }
            message = .resumed(received: received)
        case "resume-refused": message = .resumeRefused(try c.decode(String.self, forKey: .reason))
        case "group-key": message = .groupKey(try c.decode(GroupKeyGrant.self, forKey: .grant))
        case "group-key-taken":
            message = .groupKeyTaken(epoch: try c.decode(Int.self, forKey: .epoch), refused: try c.decodeIfPresent(String.self, forKey: .reason))
        default:
            throw DecodingError.dataCorruptedError(forKey: .type, in: c, debugDescription: "unknown message type '\(type)'")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Key.self)
        try c.encode(version, forKey: .v)
        try c.encode(message.type, forKey: .type)
        try c.encodeIfPresent(call, forKey: .call)
        try c.encodeIfPresent(seq, forKey: .seq)
        try c.encodeIfPresent(ack, forKey: .ack)
        switch message {
        case let .invite(invitation): try c.encode(invitation, forKey: .invitation)
        case .ringing, .keepAlive: break
        case let .offer(sdp), let .answer(sdp): try c.encode(sdp, forKey: .sdp)
        case let .candidates(candidates, end):
            try c.encode(candidates, forKey: .candidates)
            try c.encode(end, forKey: .end)
        case let .pathFound(path):
            try c.encode([String](), forKey: .candidates)
            try c.encode(false, forKey: .end)
            try c.encode(path, forKey: .path)
        case let .hold(on): try c.encode(on, forKey: .hold)
        case let .end(reason): try c.encode(reason, forKey: .reason)
        case let .reject(reason): try c.encode(reason, forKey: .reason)
        case let .error(text): try c.encode(text, forKey: .message)
        case let .resume(request):
            try c.encode(request.token, forKey: .token)
            try c.encode(request.received, forKey: .received)
        case let .resumed(received): try c.encode(received, forKey: .received)
        case let .resumeRefused(reason): try c.encode(reason, forKey: .reason)
        case let .groupKey(grant): try c.encode(grant, forKey: .grant)
        case let .groupKeyTaken(epoch, refused):
            try c.encode(epoch, forKey: .epoch)
            try c.encodeIfPresent(refused, forKey: .reason)
        }
    }

    /// The envelope as one JSON frame body.
    public func encoded() -> [UInt8] {
        // Encoding these plain values cannot fail.
        (try? JSONEncoder().encode(self)).map { Array($0) } ?? []
    }

    /// Decodes one frame body.
    ///
    /// - Throws: ``SignalingError/malformed(_:)`` for bytes that are not a JSON envelope, and
    ///   ``SignalingError/unsupportedVersion(_:)`` for a newer protocol.
    public static func decode(_ bytes: some Collection<UInt8>) throws(SignalingError) -> SignalEnvelope {
        let envelope: SignalEnvelope
        do {
            envelope = try JSONDecoder().decode(SignalEnvelope.self, from: Data(bytes))
        } catch let DecodingError.dataCorrupted(context) {
            throw .malformed(context.codingPath.isEmpty ? "not a JSON envelope" : context.debugDescription)
        } catch let DecodingError.keyNotFound(key, _) {
            throw .malformed("missing field '\(key.stringValue)'")
        } catch let DecodingError.typeMismatch(_, context) {
            throw .malformed("wrong type at '\(context.codingPath.map(\.stringValue).joined(separator: "."))'")
        } catch let DecodingError.valueNotFound(_, context) {
            throw .malformed("missing value at '\(context.codingPath.map(\.stringValue).joined(separator: "."))'")
        } catch {
            throw .malformed("not a JSON envelope")
        }
        guard envelope.version == currentVersion else { throw .unsupportedVersion(envelope.version) }
        return envelope
    }
}

/// Signaling failures a caller can act on.
public enum SignalingError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A frame announced more bytes than the limit.
    case frameTooLarge(Int, limit: Int)
    /// The connection closed in the middle of a frame.
    case truncatedFrame
    /// A frame's body is not a valid envelope.
    case malformed(String)
    /// The peer speaks another protocol version.
    case unsupportedVersion(Int)
    /// The peer's certificate is not the pinned one.
    case wrongIdentity(expected: Fingerprint, presented: Fingerprint?)
    /// TCP or TLS could not be set up.
    case unreachable(String, reason: String)
    /// The TLS handshake did not finish in time.
    case handshakeTimeout
    /// The connection is closed.
    case closed
    /// The listen address could not be bound.
    case cannotListen(String, reason: String)

    public var description: String {
        switch self {
        case let .frameTooLarge(size, limit): "signaling frame of \(size) bytes exceeds the \(limit)-byte limit"
        case .truncatedFrame: "the signaling connection closed in the middle of a frame"
        case let .malformed(why): "malformed signaling message: \(why)"
        case let .unsupportedVersion(v): "the peer speaks signaling version \(v); this node speaks \(SignalEnvelope.currentVersion)"
        case let .wrongIdentity(expected, presented):
            "the peer presented identity \(presented?.hex ?? "none"), not the pinned \(expected.hex): refusing (check the contact's fingerprint)"
        case let .unreachable(address, reason): "cannot reach \(address): \(reason)"
        case .handshakeTimeout: "the TLS handshake did not finish in time"
        case .closed: "the signaling connection is closed"
        case let .cannotListen(address, reason): "cannot listen on \(address): \(reason)"
        }
    }
}
