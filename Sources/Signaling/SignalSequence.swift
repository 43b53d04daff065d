import Foundation

/// One call's messages between two nodes, numbered so that they outlive a connection.
///
/// Each side numbers the messages it sends for a call (1, 2, 3…), keeps them until the peer
/// acknowledges them (every envelope acknowledges what its sender received in order), and drops
/// a message it already had. When the call moves to a new connection, each side tells the other
/// what it received (``ResumeRequest/received``, ``SignalMessage/resumed(received:)``) and sends
/// again only what came after: every message arrives once, in order, whichever connection
/// carried it. Connection-level messages (keep-alives, the resumption handshake) are not
/// numbered. A plain value: no I/O, no clock.
public struct SignalSequence: Sendable, Equatable {
    /// Messages kept for the peer at most (a call that is cut off this long is failing anyway).
    public static let defaultLimit = 1_024

    /// The number of the last message numbered here.
    public private(set) var sent = 0
    /// The highest number of the peer's messages received in order.
    public private(set) var received = 0
    /// Messages sent and not acknowledged yet, oldest first.
    public private(set) var unacknowledged: [SignalEnvelope] = []
    public let limit: Int

    public init(limit: Int = SignalSequence.defaultLimit) {
        self.limit = limit
    }

    /// Too many messages wait for the peer's acknowledgement.
    public struct BacklogFull: Error, Sendable, Equatable, CustomStringConvertible {
        public let limit: Int
        public init(limit: Int) { self.limit = limit }
        public var description: String { "\(limit) signaling messages are waiting for the peer: it has not acknowledged any for too long" }
    }

    /// Numbers `message` for `call` and keeps it until the peer acknowledges it; the envelope
    /// acknowledges what was received here. Connection-level messages come back unnumbered.
    public mutating func stamp(_ message: SignalMessage, call: UUID) throws(BacklogFull) -> SignalEnvelope {
        guard !message.isConnectionLevel else { return SignalEnvelope(call: call, message, ack: received) }
        guard unacknowledged.count < limit else { throw BacklogFull(limit: limit) }
        sent += 1
        let envelope = SignalEnvelope(call: call, message, seq: sent, ack: received)
        unacknowledged.append(envelope)
        return envelope
    }

    /// Takes in an envelope from the peer: forgets what it acknowledges, and says whether its
    /// message is new (false: a repeat of one already received, to be dropped).
    public mutating func accept(_ envelope: SignalEnvelope) -> Bool {
        if let ack = envelope.ack { acknowledge(upTo: ack) }
        guard let seq = envelope.seq else { return true }
        guard seq > received else { return false }
        received = seq
        return true
    }

    /// Forgets the messages the peer has received.
    public mutating func acknowledge(upTo number: Int) {
        unacknowledged.removeAll { ($0.seq ?? 0) <= number }
    }

    /// The peer received up to `number`: what to send again, in order, each acknowledging what
    /// was received here by now.
    public mutating func resend(after number: Int) -> [SignalEnvelope] {
        acknowledge(upTo: number)
        return unacknowledged.map { envelope in
            var again = envelope
            again.ack = received
            return again
        }
    }
}
