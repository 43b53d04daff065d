import Foundation
import Logging
import SIP
import SIPDialog
import Signaling

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
        let agent: any SIPStack
        do {
            if let network = configuration.sipNetwork {
                agent = try await network.start(address: settings.uri, from: from)
            } else {
                agent = try await startSofia(settings, host: host, from: from)
            }
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
        let router = SIPRouter(agent: agent, settings: settings, node: self, clock: configuration.clock, seed: configuration.randomSeed, logger: logger)
        sipRouter = router
        keep(Task { await router.run() })
        await router.register()
        logger.info("listening for SIP at \(settings.uri) (UDP and TCP)\(settings.tlsURI.map { " and \($0)" } ?? "")")
        return settings.uri
    }

    /// sofia-sip's agent at `settings`' address (and its TLS port, with the certificate written
    /// where the stack reads it).
    private func startSofia(_ settings: SIPListenSettings, host: String, from: String) async throws -> SIPAgent {
        var tls: (url: String, certificateDirectory: String)?
        if let tlsPort = settings.tlsPort {
            tls = ("sips:\(host):\(tlsPort)", try writeSIPCertificate(settings.tlsCertificate))
        }
        return try await SIPAgent.start(listening: "sip:\(host):\(settings.port)", tls: tls, from: from, userAgent: "CallNode")
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

    /// The id the node's SIP stack has for `call`'s dialog (nil: not a SIP call here).
    @_spi(Simulation)
    public func sipDialog(of call: UUID) async -> Int? {
        await sipRouter?.dialog(of: call)
    }

    /// When `call`'s SIP dialog's `timer` is due on the node's clock (nil: not armed, or no SIP
    /// call), and the hook its firing calls just before it reaches the dialog (once): what a
    /// simulation needs to land a peer's BYE as a glare's retry fires.
    @_spi(Simulation)
    public func sipTimer(_ timer: SIPDialogTimer, of call: UUID) async -> (due: Duration?, beforeFiring: @Sendable (@escaping @Sendable () -> Void) -> Void)? {
        guard let dialect = await sipRouter?.dialect(of: call) else { return nil }
        let hook = dialect.beforeTimerFires
        return (await dialect.due(timer), { body in hook.withLock { $0 = body } })
    }

    /// The call the node's SIP stack knows by `dialog` (nil: none, or not started yet).
    @_spi(Simulation)
    public func call(ofSIPDialog dialog: Int) async -> UUID? {
        await sipRouter?.call(of: dialog)
    }

    /// Places a SIP call to `uri`.
    func callSIP(_ uri: String, title: String?) async throws(CallNodeError) -> UUID {
        guard let sipRouter else { throw .sip("this node does not speak SIP: listen for it first (--sip)") }
        guard uri.hasPrefix("sip:") || uri.hasPrefix("sips:") else { throw .sip("'\(uri)' is not a SIP URI (sip:user@host[:port])") }
        let dialect = await sipRouter.outgoing(to: uri)
        return try await call(over: dialect, handle: uri, title: title)
    }
}
