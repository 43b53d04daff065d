internal import CSRTP
internal import CSRTPOpenSSL
@_exported import SRTPKeys
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A libsrtp2 call that failed.
public struct SRTPError: Error, Sendable, Equatable, CustomStringConvertible {
    public var function: String
    /// The `srtp_err_status_t` value.
    public var status: Int32
    public var description: String { "\(function) failed with libsrtp status \(status)" }
}

/// The one funnel for libsrtp status codes.
func srtp(_ status: srtp_err_status_t, _ function: String) throws(SRTPError) {
    guard status == srtp_err_status_ok else { throw SRTPError(function: function, status: Int32(status.rawValue)) }
}

/// Process-wide libsrtp initialisation (srtp_init must run once, before any session), with
/// its ciphers moved onto OpenSSL (``SRTPLibrary/openSSLCiphers``).
private let srtpStart: (initialized: Bool, openSSL: Int32) = {
    guard srtp_init() == srtp_err_status_ok else { return (false, -1) }
    return (true, csrtp_use_openssl())
}()
private var srtpInitialized: Bool { srtpStart.initialized }

/// libsrtp's process-wide state. `srtp_init` is not safe to call twice or concurrently; every
/// part of the process (and any embedder code using libsrtp directly) should go through here.
public enum SRTPLibrary {
    /// Initialises libsrtp once; later calls return at once.
    public static func initialize() throws(SRTPError) {
        guard srtpInitialized else { throw SRTPError(function: "srtp_init", status: -1) }
    }

    /// Whether SRTP runs on OpenSSL's AES-ICM, AES-GCM and HMAC-SHA1 (one context per key)
    /// rather than the library's own build of them (Debian's: NSS, a context per packet).
    /// libsrtp checks each replacement against its test vectors and keeps its own ciphers
    /// if one fails; `nil` if it did not start at all.
    public static var openSSLCiphers: Bool? {
        srtpStart.initialized ? srtpStart.openSSL == 0 : nil
    }
}

/// What happened to an inbound packet that was not accepted.
public enum SRTPDrop: Error, Sendable, Equatable {
    /// Authentication failed (tampered, or the wrong key).
    case authenticationFailed
    /// Already seen, or too old for the replay window.
    case replayed
    /// Too short or otherwise unusable.
    case malformed
}

/// One direction of SRTP/SRTCP (libsrtp2 session). Owns its `srtp_t`; use from one isolation
/// domain (the media actor).
public final class SRTPSession {
    public enum Direction: Sendable { case outbound, inbound }

    private var session: srtp_t?
    public let direction: Direction
    /// Plain RTP: packets pass as they are (a SIP peer without SRTP, when allowed).
    public let isPassthrough: Bool

    /// A session that protects nothing: RTP and RTCP go and come in the clear.
    public init(unprotected direction: Direction) {
        self.direction = direction
        isPassthrough = true
    }

    /// - Throws: ``SRTPError`` if libsrtp cannot be initialised or rejects the key.
    public init(key: SRTPKey, direction: Direction) throws(SRTPError) {
        guard srtpInitialized else { throw SRTPError(function: "srtp_init", status: -1) }
        self.direction = direction
        isPassthrough = false
        var policy = srtp_policy_t()
        switch key.suite {
        case .aesCM128HmacSHA1_80: csrtp_policy_aes_cm_128_hmac_sha1_80(&policy)
        case .aeadAES128GCM: csrtp_policy_aead_aes_128_gcm(&policy)
        }
        switch direction {
        case .outbound: csrtp_policy_set_ssrc_any_outbound(&policy)
        case .inbound: csrtp_policy_set_ssrc_any_inbound(&policy)
        }
        policy.window_size = 1024
        policy.allow_repeat_tx = 0
        var material = key.material
        var created: srtp_t?
        let status = material.withUnsafeMutableBufferPointer { keyBytes in
            policy.key = keyBytes.baseAddress
            return srtp_create(&created, &policy)
        }
        // Scrub the local copy of the key.
        for i in material.indices { material[i] = 0 }
        try srtp(status, "srtp_create")
        session = created
    }

    deinit {
        if let session { srtp_dealloc(session) }
    }

    /// Encrypts and authenticates one RTP packet.
    public func protect(_ packet: [UInt8]) throws(SRTPError) -> [UInt8] {
        var bytes = packet
        try protect(inPlace: &bytes)
        return bytes
    }

    /// Encrypts and authenticates one RTCP compound packet.
    public func protectRTCP(_ packet: [UInt8]) throws(SRTPError) -> [UInt8] {
        var bytes = packet
        try srtp(runInPlace(&bytes, overhead: 16 + 4 + 4) { session, bytes, length in csrtp_protect_rtcp(session, bytes, length) },
                 "srtp_protect_rtcp")
        return bytes
    }

    /// Verifies and decrypts one SRTP packet; a drop says why it must not be played.
    public func unprotect(_ packet: [UInt8]) -> Result<[UInt8], SRTPDrop> {
        var bytes = packet
        if let drop = unprotect(inPlace: &bytes) { return .failure(drop) }
        return .success(bytes)
    }

    /// Verifies and decrypts one SRTCP packet.
    public func unprotectRTCP(_ packet: [UInt8]) -> Result<[UInt8], SRTPDrop> {
        guard packet.count >= 8 else { return .failure(.malformed) }
        var bytes = packet
        if let drop = Self.drop(runInPlace(&bytes, overhead: 0) { session, bytes, length in csrtp_unprotect_rtcp(session, bytes, length) }) {
            return .failure(drop)
        }
        return .success(bytes)
    }

    /// Encrypts and authenticates the RTP packet in `packet` where it lies: it grows by the
    /// authentication tag. No allocation when `packet` is uniquely held and has the capacity.
    public func protect(inPlace packet: inout [UInt8]) throws(SRTPError) {
        try srtp(runInPlace(&packet, overhead: 16 + 4) { session, bytes, length in csrtp_protect(session, bytes, length) },
                 "srtp_protect")
    }

    /// Verifies and decrypts the SRTP packet in `packet` where it lies; on success it is the
    /// plain RTP packet, otherwise the drop says why it must not be played (and `packet` is
    /// not to be used).
    public func unprotect(inPlace packet: inout [UInt8]) -> SRTPDrop? {
        guard packet.count >= 12 else { return .malformed }
        return Self.drop(runInPlace(&packet, overhead: 0) { session, bytes, length in csrtp_unprotect(session, bytes, length) })
    }

    /// Why a packet that failed to open must not be played; nil when it opened.
    private static func drop(_ status: srtp_err_status_t) -> SRTPDrop? {
        switch status {
        case srtp_err_status_ok: nil
        case srtp_err_status_replay_fail, srtp_err_status_replay_old: .replayed
        case srtp_err_status_auth_fail: .authenticationFailed
        default: .malformed
        }
    }

    /// Zeros for the room libsrtp may write past a packet.
    private static let room = [UInt8](repeating: 0, count: 64)

    private func runInPlace(_ packet: inout [UInt8], overhead: Int,
                            _ call: (srtp_t, UnsafeMutablePointer<UInt8>, UnsafeMutablePointer<Int32>) -> srtp_err_status_t) -> srtp_err_status_t {
        if isPassthrough { return srtp_err_status_ok }
        guard let session else { return srtp_err_status_fail }
        let count = packet.count
        // libsrtp writes the tag (and may read a little) past the packet's length.
        packet.append(contentsOf: Self.room[0..<(overhead + 16)])  // copied as a block (a repeated element goes element by element, allocating in debug builds)
        var length = Int32(count)
        let status = packet.withUnsafeMutableBufferPointer { bytes in call(session, bytes.baseAddress!, &length) }  // count + 16 > 0
        packet.removeLast(packet.count - (status == srtp_err_status_ok ? Int(length) : count))
        return status
    }
}

/// The AES-CM keystream for a raw key, salt-derived IV and length: a direct window on
/// libsrtp's cipher, used to check it against RFC 3711 appendix B.2.
@_spi(Testing)
public func aesCounterModeKeystream(key: [UInt8], salt: [UInt8], length: Int) throws(SRTPError) -> [UInt8] {
    guard srtpInitialized else { throw SRTPError(function: "srtp_init", status: -1) }
    var cipher: UnsafeMutablePointer<srtp_cipher_t>?
    try srtp(csrtp_aes_icm_128_alloc(&cipher), "srtp_cipher_type_alloc")
    guard let cipher else { throw SRTPError(function: "srtp_cipher_type_alloc", status: -1) }
    defer { _ = srtp_cipher_dealloc(cipher) }
    try srtp(srtp_cipher_init(cipher, key + salt), "srtp_cipher_init")
    var iv = [UInt8](repeating: 0, count: 16)
    try srtp(srtp_cipher_set_iv(cipher, &iv, Int32(srtp_direction_encrypt.rawValue)), "srtp_cipher_set_iv")
    var out = [UInt8](repeating: 0, count: length)
    var outLength = UInt32(length)
    try srtp(srtp_cipher_encrypt(cipher, &out, &outLength), "srtp_cipher_encrypt")
    return out
}
