import Foundation
import Logging
import SIP
import SIPDialog
import Signaling

/// Where a node listens for SIP and who it is there.
public struct SIPListenSettings: Sendable, Equatable {
    /// The address to listen at (UDP and TCP): `127.0.0.1`, `0.0.0.0`.
    public var host: String
    public var port: Int
    /// The user part of this node's SIP address (`sip:USER@HOST:PORT`).
    public var user: String
    /// Whether this node's offers to SIP peers use ICE (off by default: most SIP phones and
    /// PBXs do not speak it, and get plain RTP from one port). Offers with ICE are answered
    /// with ICE either way.
    public var offersICE: Bool
    /// Whether SIP calls' media must be SRTP: ``MediaEncryption/preferred`` (the default)
    /// offers SRTP keyed by SDES or DTLS and takes a phone's plain RTP offer; `required`
    /// refuses it (488); `off` offers plain RTP.
    public var mediaEncryption: MediaEncryption
    /// The codecs offered and taken, most wanted first: Opus, then G.711 µ-law and A-law (what
    /// every SIP phone speaks), by default.
    public var codecs: [AudioEncoding]

    public init(host: String, port: Int, user: String = "callnode", offersICE: Bool = false,
                mediaEncryption: MediaEncryption = .preferred, codecs: [AudioEncoding] = [.opus, .pcmu, .pcma]) {
        self.codecs = codecs
        self.host = host
        self.port = port
        self.user = user
        self.offersICE = offersICE
        self.mediaEncryption = mediaEncryption
    }

    /// A port to take SIP over TLS on too (on ``host``), or `nil`: TLS presents the node's
    /// identity certificate (self-signed: peers that check certificates against authorities
    /// need it trusted). Calls to `sips:` addresses or `;transport=tls` go out over TLS.
    public var tlsPort: Int?
    /// The certificate chain and private key (PEM files) SIP over TLS presents instead of the
    /// node's self-signed identity: one a CA signed for this host, for phones and proxies that
    /// check certificates.
    public var tlsCertificate: SIPCertificate?

    /// An account at a registrar (a PBX, Kamailio) to register with, or `nil`: then callers
    /// reach this node at its own address only.
    public var registration: SIPRegistrationSettings?

    /// The address RTP is taken on without ICE: the SIP address when it is a specific one.
    var mediaAddress: String? { ["0.0.0.0", "::", "*"].contains(host) ? nil : host }

    /// This node's SIP address.
    public var uri: String { "sip:\(user)@\(host.contains(":") ? "[\(host)]" : host):\(port)" }

    /// This node's SIP address over TLS, if it takes TLS.
    public var tlsURI: String? {
        tlsPort.map { "sip:\(user)@\(host.contains(":") ? "[\(host)]" : host):\($0);transport=tls" }
    }
}

/// A certificate chain and its private key, PEM files, for SIP over TLS.
public struct SIPCertificate: Sendable, Equatable {
    public var certificatePath: String
    public var keyPath: String

    public init(certificatePath: String, keyPath: String) {
        self.certificatePath = certificatePath
        self.keyPath = keyPath
    }
}

/// An account at a SIP registrar: the node registers its address there, refreshes the binding
/// before it expires and registers again after a failure; calls then go out through the
/// registrar, from the address of record, answering its digest challenges.
public struct SIPRegistrationSettings: Sendable, Equatable, CustomStringConvertible {
    /// The address of record callers dial: `sip:alice@example.org`.
    public var addressOfRecord: String
    /// Where REGISTERs (and calls) go: `sip:pbx.example.org:5060`. `nil`: the address of
    /// record's domain.
    public var registrar: String?
    /// The digest user name (`nil`: the address of record's user part).
    public var user: String?
    /// The digest password. Never printed (``description`` leaves it out).
    public var password: String
    /// How long a binding is asked to last (the registrar may shorten it); it is refreshed before.
    public var expires: Duration
    /// How long after a failure to try again (doubling up to ten times as long while it fails).
    public var retryAfter: Duration
    /// How often an OPTIONS goes to the registrar to hold a NAT's binding open, so callers
    /// still reach this node behind it (RFC 5626 §4.4; 25 s suits UDP mappings that NATs drop
    /// after 30 s); `nil` never.
    public var keepAliveInterval: Duration? = .seconds(25)

    public init(addressOfRecord: String, registrar: String? = nil, user: String? = nil, password: String,
                expires: Duration = .seconds(3600), retryAfter: Duration = .seconds(5)) {
        self.addressOfRecord = addressOfRecord
        self.registrar = registrar
        self.user = user
        self.password = password
        self.expires = expires
        self.retryAfter = retryAfter
    }

    /// The address of record's user and host parts (`sip:alice@example.org:5070` → alice,
    /// example.org:5070), or `nil` when it is not a SIP URI with both.
    var parts: (user: String, host: String)? {
        let scheme = addressOfRecord.hasPrefix("sips:") ? "sips:" : addressOfRecord.hasPrefix("sip:") ? "sip:" : nil
        guard let scheme else { return nil }
        let rest = addressOfRecord.dropFirst(scheme.count).split(separator: ";").first ?? ""
        let pieces = rest.split(separator: "@", maxSplits: 1)
        guard pieces.count == 2, !pieces[0].isEmpty, !pieces[1].isEmpty else { return nil }
        return (String(pieces[0]), String(pieces[1]))
    }

    /// Whether ``addressOfRecord`` is a SIP URI with a user and a domain.
    public var isAddressOfRecord: Bool { parts != nil }

    /// Where REGISTERs go: ``registrar``, else `sip:` the address of record's host.
    var registrarURI: String? {
        if let registrar { return registrar.hasPrefix("sip:") || registrar.hasPrefix("sips:") ? registrar : "sip:" + registrar }
        return parts.map { (addressOfRecord.hasPrefix("sips:") ? "sips:" : "sip:") + $0.host }
    }

    public var description: String {
        "\(addressOfRecord) at \(registrarURI ?? "?") as \(user ?? parts?.user ?? "?")"
    }
}

/// Where a node's SIP registration stands (``NodeEvent/sipRegistration(_:)``).
public enum SIPRegistrationState: Sendable, Equatable, CustomStringConvertible {
    /// Registered: calls to the address of record reach this node; refreshed before `expires`.
    case registered(addressOfRecord: String, expires: Duration)
    /// The registrar refused or did not answer; tried again after `retryIn`.
    case failed(addressOfRecord: String, status: Int, reason: String, retryIn: Duration)
    /// Removed (the node stopped, or the registrar dropped the binding).
    case unregistered(addressOfRecord: String)

    public var description: String {
        switch self {
        case let .registered(aor, expires): "registered as \(aor) (for \(expires.components.seconds) s, refreshed before)"
        case let .failed(aor, status, reason, retry):
            "registering \(aor) failed: \(status) \(reason)\(status == 403 ? " (check the user name and password)" : ""); trying again in \(retry.components.seconds) s"
        case let .unregistered(aor): "\(aor) is no longer registered"
        }
    }
}
