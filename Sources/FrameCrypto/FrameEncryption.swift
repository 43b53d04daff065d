import Crypto
internal import CSSL
import Foundation
import SRTPKeys

/// An end-to-end layer over each Opus frame, under SRTP: AES-256-GCM with keys only the two
/// peers hold (``FrameKeyAgreement``), so the audio stays private even if the SRTP keys leak or
/// a relay or media server sits in the path (the idea SimpleX's calls use).
///
/// A sealed frame is `ciphertext ‖ 16-byte tag ‖ 4-byte counter` (big-endian): the counter
/// counts the sender's frames, and the nonce is 8 zero bytes and that counter, unique for the
/// key (every call and direction has its own). The frame carries what it needs to be opened,
/// so a browser's encoded-transform code (which sees frames before RTP numbers them) seals and
/// opens the same format, and a redundant copy opens like its original.
public struct FrameEncryptionKey: Sendable, Equatable, CustomStringConvertible {
    let key: SymmetricKey

    /// - Throws: ``SRTPKeyError/wrongLength(expected:got:)`` unless `bytes` is 32 bytes long.
    public init(bytes: [UInt8]) throws(SRTPKeyError) {
        guard bytes.count == 32 else { throw .wrongLength(expected: 32, got: bytes.count) }
        key = SymmetricKey(data: bytes)
    }

    init(_ key: SymmetricKey) { self.key = key }

    /// A fresh random key.
    public static func random() -> FrameEncryptionKey {
        FrameEncryptionKey(SymmetricKey(size: .bits256))
    }

    /// The key as base64, for the page's authenticated WebSocket.
    public var base64: String { key.withUnsafeBytes { Base64.encode(Array($0)) } }

    /// Parses ``base64``.
    public init(base64 text: String) throws(SRTPKeyError) {
        guard let bytes = Base64.decode(text) else { throw .malformed("frame key is not valid base64") }
        try self.init(bytes: bytes)
    }

    public static func == (a: Self, b: Self) -> Bool { a.key == b.key }
    public var description: String { "frame encryption key (redacted)" }
}

/// A call's two frame keys: ours seals what we send, the peer's opens what we receive.
public struct FrameKeys: Sendable, Equatable {
    public var outbound: FrameEncryptionKey
    public var inbound: FrameEncryptionKey

    public init(outbound: FrameEncryptionKey, inbound: FrameEncryptionKey) {
        self.outbound = outbound
        self.inbound = inbound
    }

    /// One key both ways (tests and fixed set-ups).
    public init(shared: FrameEncryptionKey) {
        self.init(outbound: shared, inbound: shared)
    }
}

/// Agrees a call's frame keys over the signaling channel: each side sends an ephemeral X25519
/// public key (its share) inside the mutually authenticated, pinned TLS connection — through a
/// relay too, which splices TLS it cannot read — and both derive, with HKDF-SHA256 over the
/// shared secret, one key per direction, bound to the call ID and both identities. Nobody else
/// can derive them, they are never sent, and every call has new ones.
public struct FrameKeyAgreement: Sendable {
    private let privateKey: Curve25519.KeyAgreement.PrivateKey

    public init() { privateKey = Curve25519.KeyAgreement.PrivateKey() }

    /// This side's share (base64 of the X25519 public key), for the peer.
    public var share: String { privateKey.publicKey.rawRepresentation.base64EncodedString() }

    /// The call's keys from the peer's share.
    /// - Parameters:
    ///   - call: the call's ID (both sides use the caller's).
    ///   - caller, callee: the two identities (certificate fingerprints, hex), caller first.
    ///   - isCaller: which of the two this side is.
    /// - Throws: ``SRTPKeyError/malformed(_:)`` when the share is not an X25519 public key.
    public func keys(peerShare: String, call: UUID, caller: String, callee: String, isCaller: Bool) throws(SRTPKeyError) -> FrameKeys {
        guard let raw = Data(base64Encoded: peerShare),
              let peer = try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: raw),
              let secret = try? privateKey.sharedSecretFromKeyAgreement(with: peer) else {
            throw .malformed("the peer's frame key share is not an X25519 public key")
        }
        let salt = withUnsafeBytes(of: call.uuid) { Data($0) }
        func derive(_ direction: String) -> FrameEncryptionKey {
            let info = Data("callnode frame key v1|\(caller)|\(callee)|\(direction)".utf8)
            return FrameEncryptionKey(secret.hkdfDerivedSymmetricKey(using: SHA256.self, salt: salt, sharedInfo: info, outputByteCount: 32))
        }
        let fromCaller = derive("caller-to-callee"), fromCallee = derive("callee-to-caller")
        return isCaller ? FrameKeys(outbound: fromCaller, inbound: fromCallee) : FrameKeys(outbound: fromCallee, inbound: fromCaller)
    }
}

/// Seals frames with the outbound key (counting them) and opens frames with the inbound one.
///
/// A group's sender keys change while frames flow (a member left): ``rekey(outbound:inbound:)``
/// replaces a key; the inbound key before the last change still opens what the peer sealed
/// before it switched, so a change made in flight drops no frame.
package struct FrameCipher {
    package static let tagLength = 16
    package static let overhead = tagLength + 4
    package private(set) var keys: FrameKeys
    private var counter: UInt32 = 0
    /// One OpenSSL AES-256-GCM context per direction, keyed once: a frame only sets its nonce
    /// (swift-crypto's one-shot API builds a context, a nonce, a box and a few arrays per call).
    private var sealing: GCMContext
    private var opening: GCMContext
    /// The inbound key before the last change, tried when a frame does not open with the new one.
    private var previousOpening: GCMContext?

    package init(keys: FrameKeys) {
        self.keys = keys
        sealing = GCMContext(key: keys.outbound.key, encrypting: true)
        opening = GCMContext(key: keys.inbound.key, encrypting: false)
    }

    /// Replaces the outbound key (its frames are counted from 0 again: a new key, new nonces)
    /// or the inbound one (nil leaves a key; the same key again changes nothing).
    package mutating func rekey(outbound: FrameEncryptionKey?, inbound: FrameEncryptionKey?) {
        if let outbound, outbound != keys.outbound {
            keys.outbound = outbound
            sealing = GCMContext(key: outbound.key, encrypting: true)
            counter = 0
        }
        if let inbound, inbound != keys.inbound {
            keys.inbound = inbound
            previousOpening = opening
            opening = GCMContext(key: inbound.key, encrypting: false)
        }
    }

    package mutating func seal(_ frame: [UInt8]) throws -> [UInt8] { try seal(frame[...]) }

    /// Seals a frame where it lies (the encoder's output buffer): one array, the sealed frame.
    package mutating func seal(_ frame: ArraySlice<UInt8>) throws -> [UInt8] {
        let count = counter
        counter &+= 1
        guard let sealed = frame.withUnsafeBufferPointer({ sealing.seal($0, counter: count) }) else { throw FrameCipherError.sealFailed }
        return sealed
    }

    /// Appends the frame sealed to `out`, which is kept from frame to frame.
    package mutating func seal(_ frame: ArraySlice<UInt8>, appendingTo out: inout [UInt8]) throws {
        let count = counter
        counter &+= 1
        guard frame.withUnsafeBufferPointer({ sealing.seal($0, counter: count, appendingTo: &out) }) else { throw FrameCipherError.sealFailed }
    }

    /// `nil` when the frame was not sealed with the peer's key.
    package func open(_ sealed: [UInt8]) -> [UInt8]? { open(sealed[...]) }

    /// Opens a frame where it lies (in a received packet): one array, the frame.
    package func open(_ sealed: ArraySlice<UInt8>) -> [UInt8]? {
        guard sealed.count > Self.overhead else { return nil }
        return sealed.withUnsafeBufferPointer { opening.open($0) ?? previousOpening?.open($0) }
    }

    /// Opens a frame where it lies into `frame` (a buffer kept for reuse); false, `frame`
    /// unspecified, when it does not open.
    package func open(_ sealed: ArraySlice<UInt8>, into frame: inout [UInt8]) -> Bool {
        guard sealed.count > Self.overhead else { return false }
        return sealed.withUnsafeBufferPointer { opening.open($0, into: &frame) || previousOpening?.open($0, into: &frame) == true }
    }
}

enum FrameCipherError: Error { case sealFailed }

/// An `EVP_CIPHER_CTX` for AES-256-GCM with its key set, reused for every frame of one
/// direction. The nonce is 8 zero bytes and the frame's 32-bit counter (big-endian); a sealed
/// frame is ciphertext ‖ 16-byte tag ‖ counter, as WebCrypto's AES-GCM output plus the counter.
final class GCMContext {
    private let context: OpaquePointer

    init(key: SymmetricKey, encrypting: Bool) {
        guard let context = EVP_CIPHER_CTX_new() else { fatalError("EVP_CIPHER_CTX_new: out of memory") }
        self.context = context
        key.withUnsafeBytes { key in
            let bytes = key.bindMemory(to: UInt8.self).baseAddress
            if encrypting {
                EVP_EncryptInit_ex(context, EVP_aes_256_gcm(), nil, bytes, nil)
            } else {
                EVP_DecryptInit_ex(context, EVP_aes_256_gcm(), nil, bytes, nil)
            }
        }
    }

    deinit { EVP_CIPHER_CTX_free(context) }

    private static func nonce(_ counter: UInt32) -> (UInt64, UInt32) {
        (0, counter.bigEndian)
    }

    func seal(_ frame: UnsafeBufferPointer<UInt8>, counter: UInt32) -> [UInt8]? {
        var ok = false
        let sealed = [UInt8](unsafeUninitializedCapacity: frame.count + FrameCipher.overhead) { out, count in
            if frame.count > 0 { out.baseAddress!.initialize(from: frame.baseAddress!, count: frame.count) }  // non-empty, checked
            out.baseAddress!.advanced(by: frame.count).initialize(repeating: 0, count: FrameCipher.overhead)
            count = frame.count + FrameCipher.overhead
            ok = sealInPlace(out, count: frame.count, counter: counter)
        }
        return ok ? sealed : nil
    }

    /// Appends `frame` sealed to `out` (no allocation when `out` is held once and has room).
    func seal(_ frame: UnsafeBufferPointer<UInt8>, counter: UInt32, appendingTo out: inout [UInt8]) -> Bool {
        let start = out.count
        out.append(contentsOf: frame)
        out.append(contentsOf: Self.room)
        return out.withUnsafeMutableBufferPointer { all in
            sealInPlace(UnsafeMutableBufferPointer(rebasing: all[start...]), count: frame.count, counter: counter)
        }
    }

    private static let room = [UInt8](repeating: 0, count: FrameCipher.overhead)
    private static let zeros = [UInt8](repeating: 0, count: 2_048)

    /// Seals the `count` bytes at the start of `buffer` where they lie and writes the tag and
    /// the counter after them (`buffer` holds `count` + ``FrameCipher/overhead`` bytes).
    private func sealInPlace(_ buffer: UnsafeMutableBufferPointer<UInt8>, count: Int, counter: UInt32) -> Bool {
        var nonce = Self.nonce(counter)
        let ok = withUnsafeBytes(of: &nonce) { iv in
            EVP_EncryptInit_ex(context, nil, nil, nil, iv.bindMemory(to: UInt8.self).baseAddress) == 1
        }
        guard ok, let base = buffer.baseAddress else { return false }
        var written: Int32 = 0, final: Int32 = 0
        guard EVP_EncryptUpdate(context, base, &written, base, Int32(count)) == 1,
              EVP_EncryptFinal_ex(context, base + Int(written), &final) == 1,
              Int(written + final) == count,
              EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_GET_TAG, Int32(FrameCipher.tagLength), base + count) == 1
        else { return false }
        let tail = count + FrameCipher.tagLength
        buffer[tail] = UInt8(counter >> 24)
        buffer[tail + 1] = UInt8((counter >> 16) & 0xFF)
        buffer[tail + 2] = UInt8((counter >> 8) & 0xFF)
        buffer[tail + 3] = UInt8(counter & 0xFF)
        return true
    }

    func open(_ sealed: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        var plain: [UInt8] = []
        return open(sealed, into: &plain) ? plain : nil
    }

    /// Opens `sealed` into `plain`, replacing what it held (no allocation when `plain` is held
    /// once and has room).
    func open(_ sealed: UnsafeBufferPointer<UInt8>, into plain: inout [UInt8]) -> Bool {
        let n = sealed.count, length = n - FrameCipher.overhead
        guard length >= 0 else { return false }
        let counter = UInt32(sealed[n - 4]) << 24 | UInt32(sealed[n - 3]) << 16 | UInt32(sealed[n - 2]) << 8 | UInt32(sealed[n - 1])
        var nonce = Self.nonce(counter)
        let ok = withUnsafeBytes(of: &nonce) { iv in
            EVP_DecryptInit_ex(context, nil, nil, nil, iv.bindMemory(to: UInt8.self).baseAddress) == 1
        }
        guard ok else { return false }
        // Sized to the frame, keeping the buffer (appended as a block: a repeated element costs
        // an allocation per byte in a debug build).
        let size = max(length, 1)
        if plain.count > size {
            plain.removeLast(plain.count - size)
        } else if plain.count < size {
            if size - plain.count <= Self.zeros.count {
                plain.append(contentsOf: Self.zeros[..<(size - plain.count)])
            } else {
                plain = [UInt8](repeating: 0, count: size)
            }
        }
        let opened = plain.withUnsafeMutableBufferPointer { out -> Bool in
            var written: Int32 = 0, final: Int32 = 0
            // OpenSSL copies the tag; it does not write through the pointer.
            let tag = UnsafeMutableRawPointer(mutating: sealed.baseAddress! + length)  // sealed.count > overhead, checked by the caller
            guard EVP_DecryptUpdate(context, out.baseAddress, &written, sealed.baseAddress, Int32(length)) == 1,
                  EVP_CIPHER_CTX_ctrl(context, EVP_CTRL_GCM_SET_TAG, Int32(FrameCipher.tagLength), tag) == 1,
                  EVP_DecryptFinal_ex(context, out.baseAddress! + Int(written), &final) == 1
            else { return false }
            return Int(written + final) == length
        }
        guard opened else { return false }
        if plain.count != length { plain.removeAll(keepingCapacity: true) }
        return true
    }
}
