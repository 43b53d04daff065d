import CSSL
import Locking
import SRTPKeys

/// Which side of the DTLS handshake this node plays, from SDP's `a=setup` (RFC 5763 §5):
/// `active` opens the handshake (client), `passive` waits for it (server).
public enum DTLSRole: String, Sendable, Equatable {
    case client
    case server

    /// The `a=setup` value an answer carries for this role.
    public var setup: String { self == .client ? "active" : "passive" }
}

/// A certificate fingerprint as SDP carries it (`a=fingerprint:sha-256 AB:CD:…`, RFC 8122).
public struct DTLSFingerprint: Sendable, Hashable, CustomStringConvertible {
    /// The hash function's name as SDP writes it, lower case (`sha-256`).
    public let algorithm: String
    public let bytes: [UInt8]

    public init(algorithm: String, bytes: [UInt8]) {
        self.algorithm = algorithm.lowercased()
        self.bytes = bytes
    }

    /// Parses an `a=fingerprint` value: `<hash-func> <hex pairs separated by colons>`.
    /// `nil` for anything else.
    public init?(sdp value: String) {
        let fields = value.split(separator: " ", omittingEmptySubsequences: true)
        guard fields.count == 2 else { return nil }
        let pairs = fields[1].split(separator: ":", omittingEmptySubsequences: false)
        guard pairs.count >= 16, pairs.count <= 64 else { return nil }
        var bytes: [UInt8] = []
        for pair in pairs {
            guard pair.count == 2, let byte = UInt8(pair, radix: 16) else { return nil }
            bytes.append(byte)
        }
        self.init(algorithm: String(fields[0]), bytes: bytes)
    }

    /// The `a=fingerprint` value: `sha-256 AB:CD:…`.
    public var sdpValue: String {
        algorithm + " " + bytes.map { hexByte($0) }.joined(separator: ":")
    }

    public var description: String { sdpValue }
}

private func hexByte(_ byte: UInt8) -> String {
    let digits = Array("0123456789ABCDEF")
    return String([digits[Int(byte >> 4)], digits[Int(byte & 0xF)]])
}

/// Why a DTLS association could not give SRTP keys.
public enum DTLSError: Error, Sendable, Equatable, CustomStringConvertible {
    /// OpenSSL refused a setting or a certificate (a bug or a broken installation).
    case setup(String)
    /// The handshake failed: the peer's alert or OpenSSL's reason.
    case handshakeFailed(String)
    /// The peer's certificate is not the one its session description announced.
    case fingerprintMismatch(expected: String, presented: String)
    /// The handshake finished without an SRTP protection profile both sides support.
    case noCommonSRTPProfile
    /// The handshake did not finish in time (the peer never answered, or its packets were lost).
    case timedOut(Duration)
    /// The association was closed before the handshake finished.
    case closed

    public var description: String {
        switch self {
        case let .setup(detail): "DTLS could not be set up: \(detail)"
        case let .handshakeFailed(detail): "the DTLS handshake failed: \(detail)"
        case let .fingerprintMismatch(expected, presented):
            "the peer's DTLS certificate does not match the fingerprint in its session description (expected \(expected), presented \(presented)); someone may be in the path, so the call is refused"
        case .noCommonSRTPProfile: "the DTLS handshake agreed on no SRTP profile (the peer supports neither AES_CM_128_HMAC_SHA1_80 nor AEAD_AES_128_GCM)"
        case let .timedOut(after): "the DTLS handshake did not finish within \(after) (the peer never answered)"
        case .closed: "the DTLS association closed before its handshake finished"
        }
    }
}

/// OpenSSL's pending errors as one line, oldest first; clears the queue.
func openSSLErrors() -> String {
    var lines: [String] = []
    while true {
        let code = ERR_get_error()
        if code == 0 { break }
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buffer, buffer.count)
        lines.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }
    return lines.isEmpty ? "no detail from OpenSSL" : lines.joined(separator: "; ")
}

/// The certificate and key a node presents in DTLS: the node's own identity, so the DTLS
/// fingerprint is the fingerprint people already know the node by.
public final class DTLSCertificate: @unchecked Sendable {  // immutable after init; OpenSSL objects are reference counted and only read
    let certificate: OpaquePointer
    let privateKey: OpaquePointer
    /// SHA-256 over the certificate's DER bytes, for `a=fingerprint`.
    public let fingerprint: DTLSFingerprint

    /// Loads a DER certificate and its PEM private key (PKCS#8 or SEC1).
    public init(certificateDER: [UInt8], privateKeyPEM: String) throws(DTLSError) {
        ERR_clear_error()
        let parsed: OpaquePointer? = certificateDER.withUnsafeBufferPointer { buffer in
            var pointer: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_X509(nil, &pointer, buffer.count)
        }
        guard let parsed else { throw .setup("the certificate does not parse: \(openSSLErrors())") }
        let pem = Array(privateKeyPEM.utf8)
        let key: OpaquePointer? = pem.withUnsafeBytes { bytes in
            guard let bio = BIO_new_mem_buf(bytes.baseAddress, Int32(bytes.count)) else { return nil }
            defer { BIO_free(bio) }
            return PEM_read_bio_PrivateKey(bio, nil, nil, nil)
        }
        guard let key else {
            X509_free(parsed)
            throw .setup("the private key does not parse: \(openSSLErrors())")
        }
        guard X509_check_private_key(parsed, key) == 1 else {
            X509_free(parsed)
            EVP_PKEY_free(key)
            throw .setup("the private key does not belong to the certificate")
        }
        certificate = parsed
        privateKey = key
        fingerprint = Self.digest(parsed, algorithm: "sha-256") ?? DTLSFingerprint(algorithm: "sha-256", bytes: [])
    }

    deinit {
        X509_free(certificate)
        EVP_PKEY_free(privateKey)
    }

    /// The digest of `certificate` with the hash SDP names (`sha-1`, `sha-256`, …), or `nil`
    /// for an unknown hash.
    static func digest(_ certificate: OpaquePointer, algorithm: String) -> DTLSFingerprint? {
        let name = String(algorithm.lowercased().filter { $0 != "-" })
        guard ["sha1", "sha224", "sha256", "sha384", "sha512"].contains(name), let md = EVP_get_digestbyname(name) else { return nil }
        var output = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        guard X509_digest(certificate, md, &output, &length) == 1 else { return nil }
        return DTLSFingerprint(algorithm: algorithm, bytes: Array(output.prefix(Int(length))))
    }
}

/// SRTP keys a finished handshake exported (RFC 5764 §4.2).
public struct DTLSKeys: Sendable, Equatable {
    public let suite: SRTPSuite
    /// What this node protects its packets with.
    public let outbound: SRTPKey
    /// What the peer's packets are unprotected with.
    public let inbound: SRTPKey
    /// The fingerprint of the certificate the peer presented (it matched the expected one).
    public let peerFingerprint: DTLSFingerprint
}

/// Where a handshake stands after a step.
public enum DTLSState: Sendable, Equatable {
    case handshaking
    case connected(DTLSKeys)
    case failed(DTLSError)
    /// The peer closed the association (close_notify) after it was connected.
    case closed
}

/// What one step produced: datagrams to send, and the state after it.
public struct DTLSProgress: Sendable, Equatable {
    public var send: [[UInt8]]
    public var state: DTLSState

    public init(send: [[UInt8]], state: DTLSState) {
        self.send = send
        self.state = state
    }
}

extension SRTPSuite {
    /// OpenSSL's `use_srtp` profile name (RFC 5764 §4.1.2, RFC 7714 §14.2).
    var dtlsProfileName: String {
        switch self {
        case .aesCM128HmacSHA1_80: "SRTP_AES128_CM_SHA1_80"
        case .aeadAES128GCM: "SRTP_AEAD_AES_128_GCM"
        }
    }

    /// Master key and salt lengths in bytes.
    var keyAndSaltLengths: (key: Int, salt: Int) {
        switch self {
        case .aesCM128HmacSHA1_80: (16, 14)
        case .aeadAES128GCM: (16, 12)
        }
    }

    init?(dtlsProfileName name: String) {
        guard let suite = Self.allCases.first(where: { $0.dtlsProfileName == name }) else { return nil }
        self = suite
    }
}

/// One side of a DTLS 1.2 association that keys SRTP, as a state machine over datagrams:
/// feed it what arrives, send what it returns. OpenSSL runs over memory BIOs, so it never
/// touches a socket; the caller carries datagrams over ICE.
///
/// Thread-safe: every call holds the endpoint's lock.
public final class DTLSEndpoint: Sendable {
    public let role: DTLSRole
    public let remoteFingerprint: DTLSFingerprint
    /// The largest datagram sent; handshake messages are fragmented to fit.
    public let mtu: Int

    private struct Connection: @unchecked Sendable {  // the SSL objects are only used under `state`'s lock
        let context: OpaquePointer
        let ssl: OpaquePointer
        let inbound: OpaquePointer  // the BIO the peer's datagrams are written into
        let outbound: OpaquePointer  // the BIO OpenSSL's records are read from
        var state: DTLSState = .handshaking
        var started = false
    }

    private let state: Locked<Connection>
    /// The fingerprint OpenSSL's verify callback checks; freed with the endpoint.
    private nonisolated(unsafe) let check: UnsafeMutablePointer<cssl_fingerprint_check>
    /// Kept alive for as long as OpenSSL may use it.
    private let certificate: DTLSCertificate

    /// - Parameters:
    ///   - suites: SRTP profiles in order of preference. A server picks the first one the
    ///     client offers; a client offers them all.
    public init(certificate: DTLSCertificate, role: DTLSRole, remoteFingerprint: DTLSFingerprint,
                suites: [SRTPSuite] = [.aeadAES128GCM, .aesCM128HmacSHA1_80], mtu: Int = 1200) throws(DTLSError) {
        guard !suites.isEmpty else { throw .setup("no SRTP profile to offer") }
        guard mtu >= 300 else { throw .setup("an MTU of \(mtu) bytes is too small for DTLS (at least 300)") }
        self.role = role
        self.remoteFingerprint = remoteFingerprint
        self.mtu = mtu
        self.certificate = certificate
        ERR_clear_error()
        guard let context = SSL_CTX_new(DTLS_method()) else { throw .setup("SSL_CTX_new: \(openSSLErrors())") }
        func fail(_ what: String) -> DTLSError {
            SSL_CTX_free(context)
            return .setup("\(what): \(openSSLErrors())")
        }
        guard cssl_ctx_set_dtls12_only(context) != 0 else { throw fail("DTLS 1.2") }
        guard SSL_CTX_use_certificate(context, certificate.certificate) == 1,
              SSL_CTX_use_PrivateKey(context, certificate.privateKey) == 1 else { throw fail("the certificate") }
        // Ephemeral ECDH only: the SRTP keys cannot be recovered from a recording later.
        guard SSL_CTX_set_cipher_list(context, "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305") == 1 else {
            throw fail("the cipher list")
        }
        // OpenSSL returns 0 on success here.
        guard SSL_CTX_set_tlsext_use_srtp(context, suites.map(\.dtlsProfileName).joined(separator: ":")) == 0 else {
            throw fail("the SRTP profiles")
        }
        let name = String(remoteFingerprint.algorithm.filter { $0 != "-" })
        guard ["sha1", "sha224", "sha256", "sha384", "sha512"].contains(name), let md = EVP_get_digestbyname(name),
              remoteFingerprint.bytes.count == Int(EVP_MD_get_size(md)) else {
            SSL_CTX_free(context)
            throw .setup("the peer's fingerprint '\(remoteFingerprint.sdpValue)' is not a sha-1/224/256/384/512 digest")
        }
        guard let ssl = SSL_new(context) else { throw fail("SSL_new") }
        check = .allocate(capacity: 1)
        check.initialize(to: cssl_fingerprint_check())
        check.pointee.md = md
        withUnsafeMutableBytes(of: &check.pointee.expected) { $0.copyBytes(from: remoteFingerprint.bytes) }
        check.pointee.expected_length = UInt32(remoteFingerprint.bytes.count)
        cssl_require_fingerprint(ssl, check)
        guard let inbound = BIO_new(BIO_s_mem()), let outbound = BIO_new(BIO_s_mem()) else {
            SSL_free(ssl)
            throw fail("BIO_new")
        }
        cssl_bio_set_mem_eof_return(inbound, -1)
        cssl_bio_set_mem_eof_return(outbound, -1)
        SSL_set_bio(ssl, inbound, outbound)  // the SSL owns both BIOs now
        cssl_set_mtu(ssl, mtu - 28)  // the MTU OpenSSL sees excludes the IP and UDP headers
        cssl_set_dtls_timer(ssl)
        if role == .client { SSL_set_connect_state(ssl) } else { SSL_set_accept_state(ssl) }
        state = Locked(Connection(context: context, ssl: ssl, inbound: inbound, outbound: outbound))
    }

    deinit {
        state.withLock { connection in
            SSL_free(connection.ssl)
            SSL_CTX_free(connection.context)
        }
        check.deallocate()
    }

    /// Opens the handshake: a client's first flight; nothing for a server.
    public func start() -> DTLSProgress {
        state.withLock { connection in
            guard !connection.started else { return DTLSProgress(send: [], state: connection.state) }
            connection.started = true
            guard role == .client else { return DTLSProgress(send: [], state: connection.state) }
            return step(&connection)
        }
    }

    /// Takes one datagram from the peer (first byte 20–63, RFC 7983).
    public func receive(_ datagram: [UInt8]) -> DTLSProgress {
        state.withLock { connection in
            connection.started = true
            guard case .handshaking = connection.state else {
                guard case .connected = connection.state else { return DTLSProgress(send: [], state: connection.state) }
                return readAfterHandshake(&connection, datagram)
            }
            _ = datagram.withUnsafeBytes { BIO_write(connection.inbound, $0.baseAddress, Int32($0.count)) }
            return step(&connection)
        }
    }

    /// Retransmits the last flight if OpenSSL's timer has run out; call it when
    /// ``timeUntilRetransmission`` has passed.
    public func handleTimeout() -> DTLSProgress {
        state.withLock { connection in
            guard case .handshaking = connection.state, connection.started else { return DTLSProgress(send: [], state: connection.state) }
            ERR_clear_error()
            if cssl_dtls_handle_timeout(connection.ssl) < 0 {
                connection.state = .failed(.handshakeFailed("retransmission failed: \(openSSLErrors())"))
            }
            return DTLSProgress(send: drain(connection), state: connection.state)
        }
    }

    /// The waits before each resend of a flight, in order, until OpenSSL gives the flight up
    /// (after twelve resends): 0.25 s, 0.5 s, four of 1 s, three of 2 s, then 5 s each.
    public static let retransmissionWaits: [Duration] = {
        var waits: [Duration] = [], previous: UInt32 = 0
        for _ in 0..<12 {
            previous = cssl_dtls_timer(nil, previous)
            // The step is carried in the last microseconds: whole milliseconds are the wait.
            waits.append(.milliseconds(Int(previous / 1000)))
        }
        return waits
    }()

    /// How long until OpenSSL wants to retransmit, or `nil` when no timer runs.
    public var timeUntilRetransmission: Duration? {
        state.withLock { connection in
            var seconds = 0, microseconds = 0
            guard cssl_dtls_get_timeout(connection.ssl, &seconds, &microseconds) == 1 else { return nil }
            return .seconds(seconds) + .microseconds(microseconds)
        }
    }

    /// Ends the association with a close_notify alert (to send), if it was connected.
    public func close() -> [[UInt8]] {
        state.withLock { connection in
            guard case .connected = connection.state else {
                if case .handshaking = connection.state { connection.state = .failed(.closed) }
                return []
            }
            ERR_clear_error()
            _ = SSL_shutdown(connection.ssl)
            connection.state = .closed
            return drain(connection)
        }
    }

    public var currentState: DTLSState { state.withLock { $0.state } }

    // MARK: - Steps (called holding the lock)

    private func step(_ connection: inout Connection) -> DTLSProgress {
        ERR_clear_error()
        let result = SSL_do_handshake(connection.ssl)
        if result == 1 {
            connection.state = finish(connection)
            if case .failed = connection.state {
                // Tell the peer before dropping the association.
                _ = SSL_shutdown(connection.ssl)
            }
        } else {
            let error = SSL_get_error(connection.ssl, result)
            if error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE {
                if check.pointee.mismatch != 0 {
                    let presented = withUnsafeBytes(of: check.pointee.presented) { Array($0.prefix(Int(check.pointee.presented_length))) }
                    connection.state = .failed(.fingerprintMismatch(
                        expected: remoteFingerprint.sdpValue,
                        presented: DTLSFingerprint(algorithm: remoteFingerprint.algorithm, bytes: presented).sdpValue))
                    ERR_clear_error()
                } else {
                    connection.state = .failed(.handshakeFailed(openSSLErrors()))
                }
            }
        }
        return DTLSProgress(send: drain(connection), state: connection.state)
    }

    private func readAfterHandshake(_ connection: inout Connection, _ datagram: [UInt8]) -> DTLSProgress {
        ERR_clear_error()
        _ = datagram.withUnsafeBytes { BIO_write(connection.inbound, $0.baseAddress, Int32($0.count)) }
        var buffer = [UInt8](repeating: 0, count: 2048)
        // Retransmitted handshake messages make OpenSSL resend its last flight; application
        // data is not used, and a close_notify ends the association.
        while true {
            let read = SSL_read(connection.ssl, &buffer, Int32(buffer.count))
            if read > 0 { continue }
            if SSL_get_error(connection.ssl, read) == SSL_ERROR_ZERO_RETURN { connection.state = .closed }
            break
        }
        ERR_clear_error()
        return DTLSProgress(send: drain(connection), state: connection.state)
    }

    /// The handshake finished: check the peer's certificate and export the SRTP keys.
    private func finish(_ connection: Connection) -> DTLSState {
        guard let peer = SSL_get1_peer_certificate(connection.ssl) else {
            return .failed(.handshakeFailed("the peer presented no certificate"))
        }
        defer { X509_free(peer) }
        guard let presented = DTLSCertificate.digest(peer, algorithm: remoteFingerprint.algorithm) else {
            return .failed(.handshakeFailed("unsupported fingerprint hash '\(remoteFingerprint.algorithm)'"))
        }
        guard presented.bytes == remoteFingerprint.bytes else {
            return .failed(.fingerprintMismatch(expected: remoteFingerprint.sdpValue, presented: presented.sdpValue))
        }
        guard let profile = SSL_get_selected_srtp_profile(connection.ssl), let name = profile.pointee.name,
              let suite = SRTPSuite(dtlsProfileName: String(cString: name)) else {
            return .failed(.noCommonSRTPProfile)
        }
        let (keyLength, saltLength) = suite.keyAndSaltLengths
        var material = [UInt8](repeating: 0, count: 2 * (keyLength + saltLength))
        let label = "EXTRACTOR-dtls_srtp"
        guard SSL_export_keying_material(connection.ssl, &material, material.count, label, label.utf8.count, nil, 0, 0) == 1 else {
            return .failed(.handshakeFailed("exporting the SRTP keys failed: \(openSSLErrors())"))
        }
        // RFC 5764 §4.2: client key, server key, client salt, server salt.
        let clientKey = Array(material[0..<keyLength])
        let serverKey = Array(material[keyLength..<(2 * keyLength)])
        let clientSalt = Array(material[(2 * keyLength)..<(2 * keyLength + saltLength)])
        let serverSalt = Array(material[(2 * keyLength + saltLength)...])
        do {
            let client = try SRTPKey(suite: suite, material: clientKey + clientSalt)
            let server = try SRTPKey(suite: suite, material: serverKey + serverSalt)
            return .connected(DTLSKeys(suite: suite, outbound: role == .client ? client : server,
                                       inbound: role == .client ? server : client, peerFingerprint: presented))
        } catch {
            return .failed(.handshakeFailed("exported keys have the wrong length: \(error)"))
        }
    }

    /// What OpenSSL wrote, cut into datagrams of whole records no larger than the MTU.
    private func drain(_ connection: Connection) -> [[UInt8]] {
        let pending = cssl_bio_pending(connection.outbound)
        guard pending > 0 else { return [] }
        var bytes = [UInt8](repeating: 0, count: pending)
        let read = BIO_read(connection.outbound, &bytes, Int32(pending))
        guard read > 0 else { return [] }
        return Self.pack(records: Array(bytes.prefix(Int(read))), mtu: mtu - 28)
    }

    /// Splits a byte stream of DTLS records (13-byte header, 2-byte length at offset 11) and
    /// packs consecutive records into datagrams of at most `mtu` bytes.
    static func pack(records bytes: [UInt8], mtu: Int) -> [[UInt8]] {
        var datagrams: [[UInt8]] = []
        var current: [UInt8] = []
        var offset = 0
        while offset < bytes.count {
            guard bytes.count - offset >= 13 else { break }
            let length = Int(bytes[offset + 11]) << 8 | Int(bytes[offset + 12])
            let end = min(bytes.count, offset + 13 + length)
            let record = bytes[offset..<end]
            if !current.isEmpty && current.count + record.count > mtu {
                datagrams.append(current)
                current = []
            }
            current.append(contentsOf: record)
            offset = end
        }
        if !current.isEmpty { datagrams.append(current) }
        return datagrams
    }
}
