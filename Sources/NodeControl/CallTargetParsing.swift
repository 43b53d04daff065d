import CallNode
import Signaling

/// Why a text names no one a node can call.
public enum CallTargetProblem: Error, Sendable, Equatable, CustomStringConvertible {
    /// A bare fingerprint is reached through a relay, and the node has none.
    case fingerprintNeedsRelay(String)
    /// A `janus:` address that does not name a room, and why.
    case notARoom(String, String)

    public var description: String {
        switch self {
        case let .fingerprintNeedsRelay(fingerprint):
            "calling the fingerprint \(fingerprint) needs a relay (--relay HOST:PORT), or give FINGERPRINT@HOST:PORT"
        case let .notARoom(text, why):
            "'\(text)' is not a room: \(why)"
        }
    }
}

extension CallTarget {
    /// Reads whom to call as the command line and the control API take it: a SIP address
    /// (`sip:` or `sips:`), a Janus room (`janus:http://HOST:PORT/janus#ROOM`, joined with
    /// `roomPIN` if given), FINGERPRINT@HOST:PORT, HOST:PORT, a FINGERPRINT (through `relay`),
    /// or else a contact's name.
    public static func parse(_ text: String, relay: SignalAddress?, roomPIN: String? = nil) -> Result<CallTarget, CallTargetProblem> {
        if text.hasPrefix("sip:") || text.hasPrefix("sips:") { return .success(.sip(text)) }
        if text.lowercased().hasPrefix("janus:") {
            guard let address = JanusRoomAddress(text) else {
                return .failure(.notARoom(text, JanusRoomAddress.problem(text) ?? "not a room's address"))
            }
            return .success(.janus(address, pin: roomPIN))
        }
        if let at = text.firstIndex(of: "@"), let fingerprint = Fingerprint(String(text[..<at])),
           let address = SignalAddress(String(text[text.index(after: at)...])) {
            return .success(.pinned(address, fingerprint))
        }
        if let address = SignalAddress(text) { return .success(.address(address)) }
        if let fingerprint = Fingerprint(text) {
            guard let relay else { return .failure(.fingerprintNeedsRelay(text)) }
            return .success(.relayed(fingerprint, relay: relay))
        }
        return .success(.contact(text))
    }
}
