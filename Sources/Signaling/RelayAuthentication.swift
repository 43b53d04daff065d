import Crypto
import Foundation
import NIOCore
import X509

/// Proof that a node registering at a relay holds the identity it registers: the relay sends a
/// fresh random challenge, the node signs it with its identity key, the relay checks the
/// signature against the certificate the node sent and the certificate against the
/// fingerprint. A stranger can neither register someone else's fingerprint (the certificate
/// would not match) nor replay a node's proof (every challenge is new).
enum RelayProof {
    /// What the node signs: a fixed label (so the signature can mean nothing else), the
    /// fingerprint and the relay's challenge.
    static func signedBytes(fingerprint: String, challenge: String) -> [UInt8] {
        Array("callnode relay registration v1\n\(fingerprint)\n\(challenge)".utf8)
    }

    /// The node's side: its certificate (base64 DER) for `register`, and the signature over
    /// the challenge (base64 DER ECDSA) for `prove`.
    static func sign(identity: NodeIdentity, challenge: String) throws -> String {
        let key = try P256.Signing.PrivateKey(pemRepresentation: identity.privateKeyPEM)
        let signature = try key.signature(for: signedBytes(fingerprint: identity.fingerprint.hex, challenge: challenge))
        return signature.derRepresentation.base64EncodedString()
    }

    /// The relay's side: nil when the proof holds, else why not (sent back to the node).
    static func check(fingerprint: String, certificate: String?, signature: String?, challenge: String) -> String? {
        guard let certificate, let der = Data(base64Encoded: certificate) else {
            return "register needs the node's certificate (this relay checks identities: update the node)"
        }
        guard Fingerprint(certificateDER: Array(der)).hex == fingerprint else {
            return "the certificate does not match the fingerprint registered"
        }
        guard let signature, let signatureDER = Data(base64Encoded: signature),
              let parsed = try? Certificate(derEncoded: Array(der)),
              let key = P256.Signing.PublicKey(parsed.publicKey),
              let ecdsa = try? P256.Signing.ECDSASignature(derRepresentation: signatureDER),
              key.isValidSignature(ecdsa, for: signedBytes(fingerprint: fingerprint, challenge: challenge)) else {
            return "the proof of identity does not verify"
        }
        return nil
    }
}

/// A relay's limits per client address, against a stranger filling its registry or using it
/// to ring nodes without end.
public struct RelayLimits: Sendable, Equatable {
    /// Nodes registered at once from one IP address.
    public var registrationsPerAddress = 32
    /// Dials, session creations and joins from one IP address per minute.
    public var dialsPerAddressPerMinute = 120
    /// A registration whose node has sent nothing (not even a keep-alive) for this long is
    /// dropped: its node is gone or its NAT forgot the connection.
    public var registrationIdleTimeout: Duration = .seconds(75)

    public init() {}
}

/// The number of requests each address made in the last minute.
struct RelayRateWindow {
    private var times: [String: [NIODeadline]] = [:]

    /// Counts one request from `address` at `now`; false when it goes over `limit` per minute.
    mutating func admit(_ address: String, now: NIODeadline, limit: Int) -> Bool {
        let start = now - .minutes(1)
        var recent = (times[address] ?? []).filter { $0 > start }
        guard recent.count < limit else {
            times[address] = recent
            return false
        }
        recent.append(now)
        times[address] = recent
        if times.count > 10_000 { times = times.filter { $0.value.contains { $0 > start } } }
        return true
    }
}
