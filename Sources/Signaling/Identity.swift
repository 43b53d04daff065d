import Crypto
import Foundation
import SwiftASN1
import X509

/// A node's identity: the SHA-256 of its certificate's DER bytes, like WebRTC's `a=fingerprint`.
///
/// Written as 64 lowercase hex digits; parsing also accepts upper case and colon-separated
/// pairs (`AB:CD:…`), the way other tools print fingerprints.
public struct Fingerprint: Sendable, Hashable, Codable, CustomStringConvertible, Comparable {
    /// The 32 digest bytes.
    public let bytes: [UInt8]

    /// The fingerprint of a DER-encoded certificate.
    public init(certificateDER der: [UInt8]) {
        bytes = Array(SHA256.hash(data: der))
    }

    /// Parses 64 hex digits, with or without colons. `nil` for anything else.
    public init?(_ text: String) {
        let digits = text.filter { $0 != ":" }
        guard digits.count == 64 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(32)
        var index = digits.startIndex
        while index < digits.endIndex {
            let next = digits.index(index, offsetBy: 2)
            guard let byte = UInt8(digits[index..<next], radix: 16) else { return nil }
            bytes.append(byte)
            index = next
        }
        self.bytes = bytes
    }

    /// 64 lowercase hex digits.
    public var hex: String { bytes.map { String(format: "%02x", $0) }.joined() }
    public var description: String { hex }
    /// The first 8 bytes, colon-separated: enough for a person to compare by eye.
    public var short: String { bytes.prefix(8).map { String(format: "%02X", $0) }.joined(separator: ":") }

    public static func < (lhs: Fingerprint, rhs: Fingerprint) -> Bool { lhs.bytes.lexicographicallyPrecedes(rhs.bytes) }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let value = Fingerprint(text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not a SHA-256 fingerprint: \(text)"))
        }
        self = value
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(hex)
    }
}

/// Why an identity could not be loaded or created.
public struct IdentityError: Error, Sendable, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}

/// A node's long-lived P-256 key pair and the self-signed certificate that carries it.
///
/// The certificate's fingerprint is the node's address-book identity; no certificate
/// authority is involved. Both halves live in the node's home directory as PEM files
/// (`identity.key`, mode 0600, and `identity.crt`).
public struct NodeIdentity: Sendable {
    /// The certificate, DER-encoded.
    public let certificateDER: [UInt8]
    /// The private key as PKCS#8 PEM.
    package let privateKeyPEM: String
    /// SHA-256 over ``certificateDER``.
    public let fingerprint: Fingerprint
    /// The name in the certificate's subject.
    public let commonName: String

    /// A fresh key pair and a self-signed certificate valid for 20 years.
    public static func generate(commonName: String = "callnode") throws(IdentityError) -> NodeIdentity {
        let key = P256.Signing.PrivateKey()
        do {
            let name = try DistinguishedName { CommonName(commonName) }
            let now = Date()
            let certificate = try Certificate(
                version: .v3,
                serialNumber: Certificate.SerialNumber(),
                publicKey: .init(key.publicKey),
                notValidBefore: now.addingTimeInterval(-3600),
                notValidAfter: now.addingTimeInterval(20 * 365 * 86_400),
                issuer: name,
                subject: name,
                signatureAlgorithm: .ecdsaWithSHA256,
                extensions: try Certificate.Extensions {
                    Critical(BasicConstraints.notCertificateAuthority)
                },
                issuerPrivateKey: .init(key))
            var serializer = DER.Serializer()
            try serializer.serialize(certificate)
            return NodeIdentity(certificateDER: serializer.serializedBytes, privateKeyPEM: key.pemRepresentation,
                                commonName: commonName)
        } catch {
            throw IdentityError(message: "cannot create a certificate: \(error)")
        }
    }

    init(certificateDER: [UInt8], privateKeyPEM: String, commonName: String) {
        self.certificateDER = certificateDER
        self.privateKeyPEM = privateKeyPEM
        self.commonName = commonName
        fingerprint = Fingerprint(certificateDER: certificateDER)
    }

    /// Loads the identity stored in `home`, creating the directory and a new identity on first
    /// use. Reads two small files; call it at start-up.
    ///
    /// - Returns: the identity, and whether it was created now.
    /// - Throws: ``IdentityError`` naming the file that could not be read, parsed or written.
    public static func loadOrCreate(home: String, commonName: String = "callnode") throws(IdentityError) -> (identity: NodeIdentity, created: Bool) {
        let files = FileManager.default
        let keyPath = home + "/identity.key", certificatePath = home + "/identity.crt"
        if files.fileExists(atPath: keyPath) || files.fileExists(atPath: certificatePath) {
            let keyPEM: String, certificatePEM: String
            do {
                keyPEM = try String(contentsOfFile: keyPath, encoding: .utf8)
                certificatePEM = try String(contentsOfFile: certificatePath, encoding: .utf8)
            } catch {
                throw IdentityError(message: "cannot read the identity in \(home) (identity.key and identity.crt): \(error.localizedDescription)")
            }
            do {
                let key = try P256.Signing.PrivateKey(pemRepresentation: keyPEM)
                let certificate = try Certificate(pemEncoded: certificatePEM)
                guard certificate.publicKey == Certificate.PublicKey(key.publicKey) else {
                    throw IdentityError(message: "identity.key does not belong to identity.crt")
                }
                var serializer = DER.Serializer()
                try serializer.serialize(certificate)
                let name = certificate.subject.description
                return (NodeIdentity(certificateDER: serializer.serializedBytes, privateKeyPEM: keyPEM, commonName: name), false)
            } catch let error as IdentityError {
                throw IdentityError(message: "the identity in \(home) is unusable: \(error.message); move the files away to create a new one")
            } catch {
                throw IdentityError(message: "the identity in \(home) is unusable: \(error); move the files away to create a new one")
            }
        }
        let identity = try generate(commonName: commonName)
        do {
            try files.createDirectory(atPath: home, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let certificate = try Certificate(derEncoded: identity.certificateDER)
            try Data(identity.privateKeyPEM.utf8).write(to: URL(fileURLWithPath: keyPath), options: .atomic)
            try files.setAttributes([.posixPermissions: 0o600], ofItemAtPath: keyPath)
            try Data(try certificate.serializeAsPEM().pemString.utf8).write(to: URL(fileURLWithPath: certificatePath), options: .atomic)
        } catch {
            throw IdentityError(message: "cannot write a new identity to \(home): \(error.localizedDescription)")
        }
        return (identity, true)
    }
}
