/// An RFC 4733 telephone event (a DTMF digit) as carried in an RTP payload.
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// |     event     |E|R| volume    |          duration             |
/// ```
public struct TelephoneEvent: Sendable, Equatable {
    /// Event code: 0–9 for the digits, 10 `*`, 11 `#`, 12–15 `A`–`D`.
    public var event: UInt8
    /// Set on the last packets of an event.
    public var isEnd: Bool
    /// Power level in −dBm0 (0–63; larger is quieter).
    public var volume: UInt8
    /// Length so far, in RTP timestamp units from the event's timestamp.
    public var duration: UInt16

    public init(event: UInt8, isEnd: Bool = false, volume: UInt8 = 10, duration: UInt16) {
        self.event = event
        self.isEnd = isEnd
        self.volume = min(63, volume)
        self.duration = duration
    }

    /// Parses the first four bytes of a telephone-event payload.
    /// - Throws: ``RTPParseError/truncated(needed:available:)`` for payloads shorter than four bytes.
    public init(parsing payload: [UInt8]) throws(RTPParseError) {
        guard payload.count >= 4 else { throw .truncated(needed: 4, available: payload.count) }
        event = payload[0]
        isEnd = payload[1] & 0x80 != 0
        volume = payload[1] & 0x3F
        duration = UInt16(payload[2]) << 8 | UInt16(payload[3])
    }

    public func serialized() -> [UInt8] {
        [event, (isEnd ? 0x80 : 0) | (volume & 0x3F), UInt8(duration >> 8), UInt8(duration & 0xFF)]
    }

    /// The event code of a DTMF digit (`0`–`9`, `*`, `#`, `A`–`D`, case-insensitive), or `nil`.
    public static func code(for digit: Character) -> UInt8? {
        switch digit {
        case "0"..."9": UInt8(digit.asciiValue! - 48)  // ASCII digits by the range above
        case "*": 10
        case "#": 11
        case "A"..."D": UInt8(digit.asciiValue! - 65 + 12)
        case "a"..."d": UInt8(digit.asciiValue! - 97 + 12)
        default: nil
        }
    }

    /// The digit an event code stands for, or `nil` for codes above 15 (not DTMF).
    public static func digit(for code: UInt8) -> Character? {
        guard code < 16 else { return nil }
        return Array("0123456789*#ABCD")[Int(code)]
    }
}
