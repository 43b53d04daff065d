// SRTP key and suite values: what signaling (SDES), DTLS-SRTP and the media path exchange.
// A leaf module, so key exchange does not depend on the media path that uses the keys.

/// The SRTP protection profiles CallNode offers (RFC 4568 names).
public enum SRTPSuite: String, Sendable, CaseIterable {
    /// AES-128 counter mode with an 80-bit HMAC-SHA1 tag (the default; universally supported).
    case aesCM128HmacSHA1_80 = "AES_CM_128_HMAC_SHA1_80"
    /// AES-128-GCM (RFC 7714): authenticated encryption, 16-byte tag.
    case aeadAES128GCM = "AEAD_AES_128_GCM"

    /// Master key plus salt length in bytes.
    public var keyLength: Int {
        switch self {
        case .aesCM128HmacSHA1_80: 30
        case .aeadAES128GCM: 28
        }
    }
}

/// Why an SDES key attribute could not be used.
public enum SRTPKeyError: Error, Sendable, Equatable, CustomStringConvertible {
    case unknownSuite(String)
    case malformed(String)
    case wrongLength(expected: Int, got: Int)

    public var description: String {
        switch self {
        case let .unknownSuite(name): "unsupported SRTP crypto suite '\(name)'"
        case let .malformed(detail): "malformed SRTP key: \(detail)"
        case let .wrongLength(expected, got): "SRTP key material must be \(expected) bytes, got \(got)"
        }
    }
}

/// An SRTP master key and salt for one direction, as signaling carries it
/// (RFC 4568 `inline:` base64, the key parameter of `a=crypto`).
public struct SRTPKey: Sendable, Equatable, CustomStringConvertible {
    public let suite: SRTPSuite
    /// Key followed by salt, ``SRTPSuite/keyLength`` bytes.
    public let material: [UInt8]

    public init(suite: SRTPSuite, material: [UInt8]) throws(SRTPKeyError) {
        guard material.count == suite.keyLength else { throw .wrongLength(expected: suite.keyLength, got: material.count) }
        self.suite = suite
        self.material = material
    }

    /// A fresh random key from the system's secure generator.
    public static func random(suite: SRTPSuite = .aesCM128HmacSHA1_80) -> SRTPKey {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<suite.keyLength).map { _ in UInt8.random(in: 0...255, using: &generator) }
        return try! SRTPKey(suite: suite, material: bytes)  // length matches the suite by construction
    }

    /// `inline:<base64>` (RFC 4568 §6.1), without lifetime or MKI.
    public var inlineKeyParameter: String { "inline:" + Base64.encode(material) }

    /// Parses `inline:<base64>[|lifetime][|MKI:length]` for `suite`; lifetime and MKI are ignored.
    public init(suite: SRTPSuite, inlineKeyParameter text: String) throws(SRTPKeyError) {
        guard text.hasPrefix("inline:") else { throw .malformed("expected 'inline:' followed by base64") }
        let value = text.dropFirst("inline:".count).split(separator: "|", omittingEmptySubsequences: false).first ?? ""
        guard let bytes = Base64.decode(String(value)) else { throw .malformed("not valid base64") }
        try self.init(suite: suite, material: bytes)
    }

    /// Parses an `a=crypto` value: `<tag> <suite> inline:<key>[...]`.
    public init(cryptoAttribute text: String) throws(SRTPKeyError) {
        let fields = text.split(separator: " ")
        guard fields.count >= 3 else { throw .malformed("expected '<tag> <suite> inline:<key>'") }
        guard let suite = SRTPSuite(rawValue: String(fields[1])) else { throw .unknownSuite(String(fields[1])) }
        try self.init(suite: suite, inlineKeyParameter: String(fields[2]))
    }

    public var description: String { "\(suite.rawValue) key (redacted)" }
}

/// Minimal RFC 4648 base64 (standard alphabet, padded), enough for SDES and frame keys.
public enum Base64 {
    private static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)

    /// Encodes `bytes`, padded with `=`.
    public static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        var i = 0
        while i < bytes.count {
            let b0 = bytes[i], b1 = i + 1 < bytes.count ? bytes[i + 1] : 0, b2 = i + 2 < bytes.count ? bytes[i + 2] : 0
            out.append(alphabet[Int(b0 >> 2)])
            out.append(alphabet[Int((b0 & 3) << 4 | b1 >> 4)])
            out.append(i + 1 < bytes.count ? alphabet[Int((b1 & 15) << 2 | b2 >> 6)] : UInt8(ascii: "="))
            out.append(i + 2 < bytes.count ? alphabet[Int(b2 & 63)] : UInt8(ascii: "="))
            i += 3
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// Decodes padded base64; `nil` for anything else.
    public static func decode(_ text: String) -> [UInt8]? {
        var values: [UInt8] = []
        var padding = 0
        for c in text.utf8 {
            if c == UInt8(ascii: "=") { padding += 1; continue }
            guard padding == 0, let v = alphabet.firstIndex(of: c) else { return nil }
            values.append(UInt8(v))
        }
        guard (values.count + padding) % 4 == 0, padding <= 2, !values.isEmpty else { return nil }
        var out: [UInt8] = []
        var i = 0
        while i + 1 < values.count {
            out.append(values[i] << 2 | values[i + 1] >> 4)
            if i + 2 < values.count { out.append(values[i + 1] << 4 | values[i + 2] >> 2) }
            if i + 3 < values.count { out.append(values[i + 2] << 6 | values[i + 3]) }
            i += 4
        }
        return out
    }
}
