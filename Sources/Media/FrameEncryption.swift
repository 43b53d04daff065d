import Crypto

/// An end-to-end layer over each Opus payload, under SRTP: AES-256-GCM with a key both peers
/// agreed over signaling, so the audio stays private even if the SRTP keys leak (the idea
/// SimpleX's calls use).
///
/// The nonce is the packet's SSRC, timestamp and sequence number — unique per packet of a
/// call — so nothing extra is sent but the 16-byte tag. Those header fields are also the
/// additional authenticated data: a payload cannot be moved to another packet.
public struct FrameEncryptionKey: Sendable, Equatable, CustomStringConvertible {
    let key: SymmetricKey

    /// - Throws: ``SRTPKeyError/wrongLength(expected:got:)`` unless `bytes` is 32 bytes long.
    public init(bytes: [UInt8]) throws(SRTPKeyError) {
        guard bytes.count == 32 else { throw .wrongLength(expected: 32, got: bytes.count) }
        key = SymmetricKey(data: bytes)
    }

    /// A fresh random key.
    public static func random() -> FrameEncryptionKey {
        try! FrameEncryptionKey(bytes: SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) })  // 32 bytes by construction
    }

    /// The key as base64, for signaling.
    public var base64: String { key.withUnsafeBytes { Base64.encode(Array($0)) } }

    /// Parses ``base64``.
    public init(base64 text: String) throws(SRTPKeyError) {
        guard let bytes = Base64.decode(text) else { throw .malformed("frame key is not valid base64") }
        try self.init(bytes: bytes)
    }

    public static func == (a: Self, b: Self) -> Bool { a.key == b.key }
    public var description: String { "frame encryption key (redacted)" }
}

/// Seals and opens payloads with a ``FrameEncryptionKey``.
struct FrameCipher {
    static let tagLength = 16
    let key: FrameEncryptionKey

    private static func nonce(ssrc: UInt32, timestamp: UInt32, sequence: UInt16) -> [UInt8] {
        [UInt8(ssrc >> 24), UInt8((ssrc >> 16) & 0xFF), UInt8((ssrc >> 8) & 0xFF), UInt8(ssrc & 0xFF),
         UInt8(timestamp >> 24), UInt8((timestamp >> 16) & 0xFF), UInt8((timestamp >> 8) & 0xFF), UInt8(timestamp & 0xFF),
         UInt8(sequence >> 8), UInt8(sequence & 0xFF), 0xCA, 0x11]
    }

    func seal(_ payload: [UInt8], ssrc: UInt32, timestamp: UInt32, sequence: UInt16) throws -> [UInt8] {
        let nonce = Self.nonce(ssrc: ssrc, timestamp: timestamp, sequence: sequence)
        let box = try AES.GCM.seal(payload, using: key.key, nonce: AES.GCM.Nonce(data: nonce), authenticating: nonce)
        return Array(box.ciphertext) + Array(box.tag)
    }

    /// `nil` when the payload was not sealed with this key for this packet.
    func open(_ sealed: [UInt8], ssrc: UInt32, timestamp: UInt32, sequence: UInt16) -> [UInt8]? {
        guard sealed.count > Self.tagLength else { return nil }
        let nonce = Self.nonce(ssrc: ssrc, timestamp: timestamp, sequence: sequence)
        guard let gcmNonce = try? AES.GCM.Nonce(data: nonce),
              let box = try? AES.GCM.SealedBox(nonce: gcmNonce, ciphertext: sealed.dropLast(Self.tagLength),
                                                tag: sealed.suffix(Self.tagLength)),
              let plain = try? AES.GCM.open(box, using: key.key, authenticating: nonce) else { return nil }
        return Array(plain)
    }
}
