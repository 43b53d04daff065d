/// The audio codecs a call can use, as RTP names them (RFC 3551 for G.711, RFC 7587 for Opus).
public enum AudioEncoding: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// Opus at 48 kHz: wideband speech, FEC, redundancy; what nodes and browsers speak.
    case opus
    /// G.711 µ-law (PCMU) at 8 kHz, 64 kbit/s: what every SIP phone and PBX speaks.
    case pcmu
    /// G.711 A-law (PCMA) at 8 kHz, 64 kbit/s: the European telephone network's.
    case pcma

    /// The encoding name in `a=rtpmap`.
    public var rtpName: String {
        switch self {
        case .opus: "opus"
        case .pcmu: "PCMU"
        case .pcma: "PCMA"
        }
    }

    /// The RTP clock rate (Opus always runs its RTP clock at 48 kHz, whatever it codes).
    public var clockRate: Int { self == .opus ? 48_000 : 8_000 }

    /// The channels `a=rtpmap` names (Opus is always `/2` there, RFC 7587 §7).
    public var rtpChannels: Int? { self == .opus ? 2 : nil }

    /// The payload type RFC 3551 gives it, or `nil` for a dynamic one (Opus).
    public var staticPayloadType: Int? {
        switch self {
        case .opus: nil
        case .pcmu: 0
        case .pcma: 8
        }
    }

    /// The payload type's encoding for RFC 3551's static types, `nil` for others.
    public static func forStaticPayloadType(_ payloadType: Int) -> AudioEncoding? {
        allCases.first { $0.staticPayloadType == payloadType }
    }

    /// `opus/48000/2`, `PCMU/8000`.
    public var description: String {
        rtpChannels.map { "\(rtpName)/\(clockRate)/\($0)" } ?? "\(rtpName)/\(clockRate)"
    }

    /// Whether the encoding is G.711 (either law).
    public var isG711: Bool { self != .opus }
}
