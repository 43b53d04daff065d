import Foundation
import Logging
import SIP
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

/// The node's SIP calls: its agent, and the dialect of each call by the agent's id for it.
/// Incoming INVITEs go through the node's admission as any call does; everything else of a
/// dialog goes to its call's dialect.
actor SIPRouter {
    let agent: SIPAgent
    let settings: SIPListenSettings
    private var dialects: [Int: SIPDialect] = [:]
    private let logger: Logger
    private weak var node: CallNode?
    /// The registration's state, and the retry waiting after a failure (with its delay).
    private(set) var registration: SIPRegistrationState?
    private var retry: Task<Void, Never>?
    private var retryDelay: Duration = .zero

    /// The node's timer clock (a manual one in tests): the retry after a failure waits on it.
    private let clock: TimerClock

    init(agent: SIPAgent, settings: SIPListenSettings, node: CallNode, clock: TimerClock, logger: Logger) {
        self.agent = agent
        self.clock = clock
        self.settings = settings
        self.node = node
        self.logger = logger
    }

    /// Reads the agent's events until it stops.
    func run() async {
        for await event in agent.events {
            await route(event)
        }
    }

    /// Registers at the settings' registrar (if any).
    func register() {
        guard let account = settings.registration, let registrar = account.registrarURI, let parts = account.parts else { return }
        logger.info("registering \(account)")
        agent.register(account.addressOfRecord, at: registrar, user: account.user ?? parts.user, password: account.password,
                       expires: Int(account.expires.components.seconds))
    }

    private func registrationChanged(_ event: SIPEvent) async {
        guard let account = settings.registration else { return }
        let aor = account.addressOfRecord
        let state: SIPRegistrationState
        if (200..<300).contains(event.status) {
            retryDelay = .zero
            state = event.expires > 0 ? .registered(addressOfRecord: aor, expires: .seconds(event.expires)) : .unregistered(addressOfRecord: aor)
        } else {
            // Tried again later, waiting longer while it keeps failing (up to ten times the first wait).
            retryDelay = retryDelay == .zero ? account.retryAfter : min(retryDelay * 2, account.retryAfter * 10)
            state = .failed(addressOfRecord: aor, status: event.status, reason: event.phrase, retryIn: retryDelay)
            let delay = retryDelay, clock = self.clock
            retry?.cancel()
            retry = Task { [weak self] in
                try? await clock.sleep(for: delay)
                guard !Task.isCancelled else { return }
                await self?.register()
            }
        }
        guard state != registration else { return }
        registration = state
        switch state {
        case .failed: logger.notice("SIP: \(state)")
        default: logger.info("SIP: \(state)")
        }
        node?.broadcaster.send(.sipRegistration(state))
    }

    private func route(_ event: SIPEvent) async {
        if event.kind == .registration {
            await registrationChanged(event)
            return
        }
        if let dialect = dialects[event.call] {
            await dialect.received(event)
            if event.kind == .terminated { dialects[event.call] = nil }
            return
        }
        guard event.kind == .invite else { return }
        await invited(event)
    }

    /// A new INVITE: a call admitted (or refused) by the node, its offer waiting in its dialect.
    private func invited(_ event: SIPEvent) async {
        guard let node else { return }
        let from = event.fromURI ?? "sip:unknown"
        let dialect = makeDialect(call: event.call, outgoing: false, uri: nil)
        if let sdp = event.sdp {
            await dialect.received(SIPEvent(kind: .invite, call: event.call, contentType: "application/sdp", body: sdp))
        }
        logger.info("SIP INVITE from \(from)\(event.sdp == nil ? " (no offer)" : "")")
        let name = event.fromDisplay.flatMap { $0.trimmingCharacters(in: CharacterSet(charactersIn: "\" ")).nilIfEmpty }
        let admitted = await node.admit(dialect, handle: from, invitation: CallInvitation(displayName: name, title: nil))
        if admitted == nil { dialects[event.call] = nil }
    }

    /// A dialect for a new outgoing call to `uri`.
    func outgoing(to uri: String) -> SIPDialect {
        makeDialect(call: agent.newCall(), outgoing: true, uri: uri)
    }

    private func makeDialect(call: Int, outgoing: Bool, uri: String?) -> SIPDialect {
        let traits = DialectTraits(peer: .other, resumable: false, firstOffer: .byCaller, offersICE: settings.offersICE,
                                   mediaAddress: settings.mediaAddress, mediaEncryption: settings.mediaEncryption,
                                   codecs: settings.codecs)
        let dialect = SIPDialect(agent: agent, call: call, outgoing: outgoing, uri: uri, traits: traits, logger: logger) { [weak self] call, onWire in
            // A dialog on the wire is forgotten when it has ended there (its BYE answered, a
            // late CANCEL); an INVITE that never went out, now.
            guard !onWire else { return }
            await self?.forget(call)
        }
        dialects[call] = dialect
        return dialect
    }

    private func forget(_ call: Int) {
        dialects[call] = nil
    }

    func stop() async {
        retry?.cancel()
        retry = nil
        await agent.stop()
    }

    /// What OPTIONS probes are answered with (told only when it changes): 200 while the node
    /// takes calls, 503 with Retry-After while it is full (a few seconds) or draining (longer).
    private var lastAvailability: (takingCalls: Bool, draining: Bool) = (true, false)

    func setAvailability(takingCalls: Bool, draining: Bool) {
        guard lastAvailability != (takingCalls, draining) else { return }
        lastAvailability = (takingCalls, draining)
        if takingCalls {
            agent.setAvailability(status: 200)
        } else {
            agent.setAvailability(status: 503, retryAfter: draining ? SIPDialect.drainingRetryAfter : SIPDialect.fullRetryAfter)
        }
    }
}

extension String {
    fileprivate var nilIfEmpty: String? { isEmpty ? nil : self }
}

extension CallNode {
    /// Listens for SIP at `settings`' address (UDP and TCP): SIP softphones, PBXs and other
    /// nodes can call this node at ``SIPListenSettings/uri``, and ``call(_:title:)`` with
    /// ``CallTarget/sip(_:)`` calls them. Incoming SIP calls go through the same admission as
    /// any other (the block list, do-not-disturb, the maximum of calls), ring and appear in
    /// Recents under their `sip:` address.
    ///
    /// - Returns: this node's SIP address.
    /// - Throws: ``CallNodeError/sip(_:)`` when it cannot listen there.
    @discardableResult
    public func listenSIP(_ settings: SIPListenSettings) async throws(CallNodeError) -> String {
        guard isStarted, !isShutDown else { throw .notRunning }
        guard sipRouter == nil else { throw .sip("this node listens for SIP already") }
        let host = settings.host.contains(":") ? "[\(settings.host)]" : settings.host
        let from = "<sip:\(settings.user)@\(host):\(settings.port)>"
        let agent: SIPAgent
        do {
            var tls: (url: String, certificateDirectory: String)?
            if let tlsPort = settings.tlsPort {
                tls = ("sips:\(host):\(tlsPort)", try writeSIPCertificate(settings.tlsCertificate))
            }
            agent = try await SIPAgent.start(listening: "sip:\(host):\(settings.port)", tls: tls, from: from,
                                             userAgent: "CallNode")
        } catch let error as SIPError {
            throw .sip(error.description)
        } catch let error as CallNodeError {
            throw error
        } catch {
            throw .sip("cannot prepare the TLS certificate: \(error)")
        }
        if let account = settings.registration, account.parts == nil {
            await agent.stop()
            throw .sip("'\(account.addressOfRecord)' is not an address of record (sip:user@domain)")
        }
        let router = SIPRouter(agent: agent, settings: settings, node: self, clock: configuration.clock, logger: logger)
        sipRouter = router
        keep(Task { await router.run() })
        await router.register()
        logger.info("listening for SIP at \(settings.uri) (UDP and TCP)\(settings.tlsURI.map { " and \($0)" } ?? "")")
        return settings.uri
    }

    /// The node's identity (key and certificate), or the given certificate chain and key, where
    /// sofia-sip's TLS reads it: `agent.pem` (key then certificates, mode 0600) and `cafile.pem`
    /// in the home's `sip-tls` directory.
    private func writeSIPCertificate(_ given: SIPCertificate?) throws -> String {
        let directory = configuration.home + "/sip-tls"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true,
                                                attributes: [.posixPermissions: 0o700])
        let agentPath = directory + "/agent.pem"
        if let given {
            // Checked as a TLS server would load them: both readable, and the key the chain's.
            do {
                _ = try WebPageCertificate(certificatePath: given.certificatePath, keyPath: given.keyPath)
            } catch {
                guard case let .cannotListen(_, reason) = error else { throw CallNodeError.sip("the TLS certificate: \(error)") }
                throw CallNodeError.sip("the TLS certificate: \(reason)")
            }
            let chain = try String(contentsOfFile: given.certificatePath, encoding: .utf8)
            var key = try String(contentsOfFile: given.keyPath, encoding: .utf8)
            if !key.hasSuffix("\n") { key += "\n" }
            _ = FileManager.default.createFile(atPath: agentPath, contents: nil, attributes: [.posixPermissions: 0o600])
            try (key + chain).write(toFile: agentPath, atomically: false, encoding: .utf8)
            try chain.write(toFile: directory + "/cafile.pem", atomically: true, encoding: .utf8)
            return directory
        }
        let base64 = Data(identity.certificateDER).base64EncodedString()
        var lines: [Substring] = []
        var rest = Substring(base64)
        while !rest.isEmpty {
            lines.append(rest.prefix(64))
            rest = rest.dropFirst(64)
        }
        let certificate = "-----BEGIN CERTIFICATE-----\n" + lines.joined(separator: "\n") + "\n-----END CERTIFICATE-----\n"
        let key = identity.privateKeyPEM.hasSuffix("\n") ? identity.privateKeyPEM : identity.privateKeyPEM + "\n"
        _ = FileManager.default.createFile(atPath: agentPath, contents: nil, attributes: [.posixPermissions: 0o600])
        try (key + certificate).write(toFile: agentPath, atomically: false, encoding: .utf8)
        try certificate.write(toFile: directory + "/cafile.pem", atomically: true, encoding: .utf8)
        return directory
    }

    /// Where this node's SIP registration stands, if it registers (``SIPListenSettings/registration``).
    public var sipRegistration: SIPRegistrationState? {
        get async { await sipRouter?.registration }
    }

    /// Places a SIP call to `uri`.
    func callSIP(_ uri: String, title: String?) async throws(CallNodeError) -> UUID {
        guard let sipRouter else { throw .sip("this node does not speak SIP: listen for it first (--sip)") }
        guard uri.hasPrefix("sip:") || uri.hasPrefix("sips:") else { throw .sip("'\(uri)' is not a SIP URI (sip:user@host[:port])") }
        let dialect = await sipRouter.outgoing(to: uri)
        return try await call(over: dialect, handle: uri, title: title)
    }
}
