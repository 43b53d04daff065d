import ArgumentParser
import CallNode
import Dispatch
import Foundation
import NodeControl
import Logging
import NodeSettings

#if canImport(Glibc)
import Glibc
#endif

/// Log lines go to standard error at `warning` and above, or at the level in
/// `CALLNODE_LOG_LEVEL` (trace, debug, info, notice, warning, error, critical). Set up once,
/// before the first node starts.
let loggingReady: Void = {
    let level = ProcessInfo.processInfo.environment["CALLNODE_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .warning
    LoggingSystem.bootstrap { label in
        var handler = StreamLogHandler.standardError(label: label)
        handler.logLevel = level
        return handler
    }
}()

/// Opens a node or exits with one clear line.
func openNode(_ configuration: CallNodeConfiguration) async throws -> CallNode {
    _ = loggingReady
    do {
        return try await CallNode(configuration: configuration)
    } catch {
        printError("callnode: \(error)")
        throw ExitCode(1)
    }
}

/// Merges the settings, then opens the node (or exits with one clear line).
func openNode(_ options: NodeOptions, defaultListen: String?,
              adjust: (inout CallNodeConfiguration) -> Void = { _ in }) async throws -> (CallNode, NodeSetup) {
    let settings = try await loadSettings(home: options.home.home)
    let setup = try options.setup(settings, defaultListen: defaultListen)
    var configuration = try setup.configuration(home: options.home.home)
    adjust(&configuration)
    _ = try await serveMetrics(setup, json: options.json)
    return (try await openNode(configuration), setup)
}

/// Starts SIP on the node when the settings ask for it, and says where (or exits with one
/// clear line).
/// `ephemeral`: the address was chosen for this call (no --sip), which is said.
func startSIP(_ node: CallNode, _ setup: NodeSetup, runner: CallRunner, ephemeral: Bool = false) async throws {
    guard let settings = setup.sipSettings else { return }
    do {
        let uri = try await node.listenSIP(settings)
        if runner.json {
            var event: [String: Any] = ["event": "sip", "uri": uri]
            if let tls = settings.tlsURI { event["tls_uri"] = tls }
            if ephemeral { event["ephemeral"] = true }
            runner.emit(event)
        } else if ephemeral {
            print("SIP: \(uri) (a port picked on the address that routes to the peer; --sip HOST:PORT sets one)")
        } else {
            print("SIP: \(uri)" + (settings.tlsURI.map { " and \($0)" } ?? ""))
        }
        fflush(nil)
    } catch {
        printError("callnode: \(error)")
        await node.shutdown()
        throw ExitCode(1)
    }
}

struct Listen: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Wait for calls.",
        usage: "callnode listen [<options>]",
        discussion: """
            Listens for signaling on --listen (default 0.0.0.0:7600). Callers must be contacts \
            (callnode contacts add) unless --accept-unknown is given. Incoming calls ring until \
            answered: with --auto-answer at once, otherwise press a (or run with --auto-answer). \
            Several calls at once: a call that comes while another is on rings; answering it \
            holds the other (--auto-answer does the same; with --conference it is merged in \
            instead); --max-calls refuses callers past the limit as busy. \
            With --duration each call is hung up that long after it connects; the node keeps \
            listening until Ctrl-C (or until --calls calls have ended). \
            --output wav:DIR/ records each call to its own file in DIR (callnode recents shows \
            which); --input wav:PATH plays each call the file from its start.
            Every option can also come from CALLNODE_* variables or the home's config.yaml \
            (callnode config show). As a service: contrib/callnode.service.
            Keys on a terminal: \(callKeysHelp)
            """)

    @Option(name: .long, help: ArgumentHelp("Exit once this many calls have ended (default: keep listening until Ctrl-C).", valueName: "N"))
    var calls: Int?

    @OptionGroup var options: NodeOptions

    func validate() throws {
        if let calls, calls < 1 { throw ValidationError("--calls must be at least 1") }
    }

    func run() async throws {
        let (node, setup) = try await openNode(options, defaultListen: "0.0.0.0:7600")
        let runner = CallRunner(node: node, json: options.json, duration: setup.duration, exitAfterCalls: calls,
                                drainGrace: setup.drainGrace)
        runner.attach()
        await node.start()
        if setup.doNotDisturb { await node.manager.setDoNotDisturb(true) }
        try await startSIP(node, setup, runner: runner)
        let control = try await startControl(node, setup, home: options.home.home, runner: runner, byDefault: true)
        if let room = setup.conferenceRoom {
            await node.keepConference(in: room, pin: ProcessInfo.processInfo.environment["CALLNODE_ROOM_PIN"].flatMap { $0.isEmpty ? nil : $0 })
        }
        let outcome = await runner.run(calling: nil)
        await control?.close()
        await runner.waitForServers()
        await node.leaveConferenceRoom()
        await node.shutdown()
        if case let .failed(message) = outcome {
            printError(message)
            throw ExitCode(outcome.exitCode)
        }
    }
}

struct Web: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Serve a call page: a browser calls this node, and the node rings the browser.",
        usage: "callnode web [<options>]",
        discussion: """
            Serves one page and a WebSocket on --page. Open the printed address in a browser: \
            the page calls the node (it answers per its policy: --auto-answer, or press a) and \
            the node rings the page (press r, or give --ring-page). Media is WebRTC: ICE, \
            DTLS-SRTP and Opus with the node's configured --input and --output. \
            The WebSocket needs the secret (printed at start, or --secret); the page reads it \
            from the address's #secret=… part, which browsers never send to a server. \
            Browsers allow the microphone only on localhost or https: open the page on this \
            machine, serve it with --https (and --page 0.0.0.0:8443), or through a tunnel \
            (ssh -L 8080:localhost:8080 HOST).
            Keys on a terminal: r ring the page, \(callKeysHelp)
            """)

    @Option(name: .long, help: ArgumentHelp("Serve the page and its WebSocket here (default 127.0.0.1:8080). The node's own signaling for other nodes is --listen (default: none).", valueName: "HOST:PORT"))
    var page: String?

    @Option(name: .long, help: ArgumentHelp("The secret a page must present (default: a new random one, printed at start). A secret: better in config.yaml, CALLNODE_SECRET or --secret-file.", valueName: "TEXT"))
    var secret: String?

    @Option(name: .long, help: ArgumentHelp("Read the page's secret from this file (its first line).", valueName: "PATH"))
    var secretFile: String?

    @Flag(name: .long, inversion: .prefixedNo, help: "Ring the first page that connects.")
    var ringPage: Bool?

    @Flag(name: .long, inversion: .prefixedNo, help: "Serve the page over HTTPS, so a browser on another machine may use its microphone: with the node's identity certificate (the browser warns that it is self-signed; its fingerprint is the node's), or with --certificate and --certificate-key.")
    var https: Bool?

    @Option(name: .long, help: ArgumentHelp("With --https: the certificate chain to serve (PEM).", valueName: "PATH"))
    var certificate: String?

    @Option(name: .long, help: ArgumentHelp("With --https: the certificate's private key (PEM).", valueName: "PATH"))
    var certificateKey: String?

    @Option(name: .long, help: ArgumentHelp("Exit once this many calls have ended (default: keep serving until Ctrl-C).", valueName: "N"))
    var calls: Int?

    @OptionGroup var options: NodeOptions

    /// The page's settings, merged as the node's are.
    struct PageSetup {
        var address: SignalAddress
        var secret: String
        var ringPage: Bool
        var https: WebPageCertificate?
    }

    func pageSetup(_ settings: NodeSettings, identity: () throws -> NodeIdentity) throws -> PageSetup {
        let read = SettingsReader(settings: settings)
        let address = try read.address("page", page) ?? SignalAddress(host: "127.0.0.1", port: 8080)
        read.warnIfOnCommandLine("secret", given: secret != nil)
        var secretValue = try read.resolved("secret", secret)
        if secretValue.value == nil, let line = try read.secretLines("secret-file", secretFile).first {
            secretValue = ResolvedSetting(key: "secret", values: [line], source: .file, origin: "the secret file", secret: true)
        }
        if let value = secretValue.value, value.count < 8 || value.contains(where: { $0.isWhitespace }) {
            throw ValidationError("\(secretValue.origin) must be at least 8 characters without spaces")
        }
        var tls: WebPageCertificate?
        let certificatePath = try read.string("certificate", certificate)
        let keyPath = try read.string("certificate-key", certificateKey)
        if try read.flag("https", https) {
            do {
                switch (certificatePath, keyPath) {
                case let (certificate?, key?): tls = try WebPageCertificate(certificatePath: certificate, keyPath: key)
                case (nil, nil): tls = try WebPageCertificate(identity: try identity())
                default: throw ValidationError("--certificate and --certificate-key go together")
                }
            } catch let error as SignalingError {
                throw ValidationError("\(error)")
            }
        } else if certificatePath != nil || keyPath != nil {
            throw ValidationError("--certificate and --certificate-key serve the page over HTTPS: give --https too")
        }
        return PageSetup(address: address, secret: secretValue.value ?? WebSignalingServer.makeSecret(),
                         ringPage: try read.flag("ring-page", ringPage), https: tls)
    }

    func run() async throws {
        let settings = try await loadSettings(home: options.home.home)
        let setup = try options.setup(settings, defaultListen: nil)
        if options.listen != nil {
            printError("callnode: note: --listen is the node's signaling address for other nodes; the page's address is --page")
        }
        _ = try await serveMetrics(setup, json: options.json)
        let node = try await openNode(try setup.configuration(home: options.home.home))
        let page: PageSetup
        do {
            page = try pageSetup(settings, identity: { node.identity })
        } catch {
            await node.shutdown()
            throw error
        }
        let runner = CallRunner(node: node, json: options.json, duration: setup.duration,
                                exitAfterCalls: calls, ringsWebPage: page.ringPage, drainGrace: setup.drainGrace)
        runner.attach()
        await node.start()
        try await startSIP(node, setup, runner: runner)
        do {
            let bound = try await node.serveWeb(host: page.address.host, port: page.address.port, secret: page.secret,
                                                https: page.https)
            let host = ["0.0.0.0", "::"].contains(bound.host) ? "localhost" : bound.host
            let shown = SignalAddress(host: host, port: bound.port)
            let url = "\(page.https == nil ? "http" : "https")://\(shown)/#secret=\(page.secret)"
            if options.json {
                var event: [String: Any] = ["event": "web", "url": url, "address": bound.description]
                if let https = page.https { event["certificate_fingerprint"] = https.fingerprint.hex }
                runner.emit(event)
            } else {
                print("call page: \(url)")
                if let https = page.https {
                    print("certificate fingerprint: \(https.fingerprint.short) (what the browser shows for the page's certificate)")
                }
            }
            // Out now, terminal or not: a service's journal (or `callnode web > log`) shows the
            // address while the node runs, not at its exit.
            fflush(nil)
        } catch {
            printError("callnode: \(error)")
            await node.shutdown()
            throw ExitCode(1)
        }
        let control = try await startControl(node, setup, home: options.home.home, runner: runner, byDefault: true)
        let outcome = await runner.run(calling: nil)
        await control?.close()
        await runner.waitForServers()
        await node.shutdown()
        if case let .failed(message) = outcome {
            printError(message)
            throw ExitCode(outcome.exitCode)
        }
    }
}

struct Call: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Call another node.",
        discussion: """
            TARGET is a contact name, HOST:PORT, FINGERPRINT@HOST:PORT (the callee must present \
            that identity), a FINGERPRINT reached through --relay HOST:PORT, or a SIP address \
            (sip:USER@HOST[:PORT]; this node's SIP side is --sip HOST:PORT, or without it a port \
            picked on the address that routes to the peer, as softphones do), or a Janus room: \
            janus:http://HOST:8088/janus#ROOM (an AudioBridge: the node joins it and hears the \
            room's mix), janus:http://HOST:8088/janus#videoroom:ROOM (a VideoRoom: the node \
            publishes and hears every other publisher's feed; #videoroom:ROOM/FEED hears one), \
            #e2ee:ROOM (a VideoRoom made with require_e2ee: frames encrypted end to end, each \
            member's key sent to the others' nodes, never to Janus; the node must listen for \
            calls, and shows the group's security code), over Janus's WebSocket (janus:ws://HOST:8188#ROOM) or Unix socket \
            (janus:unix:/PATH#ROOM); a room's PIN from CALLNODE_ROOM_PIN, never on the command \
            line. Calling HOST:PORT alone shows the callee's identity without checking it.
            Exit status 0 when the call connected and ended normally; 1 with one line saying why \
            otherwise (unreachable, rejected with its reason, ICE failure, device error).
            Keys on a terminal: \(callKeysHelp)
            """)

    @Argument(help: ArgumentHelp("Contact name, HOST:PORT, FINGERPRINT@HOST:PORT, sip:USER@HOST[:PORT], or janus:http://HOST:PORT/janus#[videoroom:|e2ee:]ROOM.",
                                 valueName: "TARGET"))
    var target: String

    @OptionGroup var options: NodeOptions

    func run() async throws {
        let settings = try await loadSettings(home: options.home.home)
        var setup = try options.setup(settings, defaultListen: nil)
        let callTarget: CallTarget
        let roomPIN = ProcessInfo.processInfo.environment["CALLNODE_ROOM_PIN"].flatMap { $0.isEmpty ? nil : $0 }
        switch CallTarget.parse(target, relay: setup.relay, roomPIN: roomPIN) {
        case let .success(parsed): callTarget = parsed
        case let .failure(problem):
            printError("callnode: \(problem)")
            throw ExitCode(1)
        }
        var ephemeralSIP = false
        if case let .sip(uri) = callTarget, setup.sip == nil {
            // As softphones do: a port the kernel picks on the address that routes to the peer.
            guard let chosen = await SIPListenSettings.ephemeral(toward: uri) else {
                printError("callnode: cannot find this host's address toward '\(uri)' (the host does not resolve, or no route leads there); give --sip HOST:PORT")
                throw ExitCode(1)
            }
            setup.sip = SignalAddress(host: chosen.host, port: chosen.port)
            ephemeralSIP = true
        }
        if case let .janus(address, _) = callTarget, address.plugin == .videoRoom(feed: nil), setup.maxCalls == nil {
            // A VideoRoom group: each other publisher's feed is a call of its own.
            setup.maxCalls = 16
        }
        if case let .janus(address, _) = callTarget, address.endToEnd, setup.listen == nil {
            // An encrypted group's members send their keys to this node: a port the kernel picks.
            setup.listen = SignalAddress(host: "0.0.0.0", port: 0)
        }
        var callsSIP = false
        if case .sip = callTarget { callsSIP = true }
        if let chosen = options.keyExchange, !callsSIP {
            // Between nodes the callee makes the offer, so its key exchange keys the call: said,
            // not silently ignored (a SIP call is offered by this node, and takes it).
            printError("callnode: note: --key-exchange \(chosen) applies to calls this node answers and to SIP calls; "
                       + "between nodes the callee makes the offer, so the callee's key exchange keys this call (the `secured` line says which)")
        }
        _ = try await serveMetrics(setup, json: options.json)
        let node = try await openNode(try setup.configuration(home: options.home.home))
        let runner = CallRunner(node: node, json: options.json, duration: setup.duration, exitAfterCalls: 1)
        runner.attach()
        await node.start()
        try await startSIP(node, setup, runner: runner, ephemeral: ephemeralSIP)
        let outcome = await runner.run(calling: callTarget)
        await node.shutdown()
        if case let .failed(message) = outcome {
            printError(message)
            throw ExitCode(outcome.exitCode)
        }
    }
}

/// Two nodes in one process call each other on loopback: the README's first command.
struct Demo: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a real two-node call on this machine and record what the callee hears.",
        discussion: """
            Starts two nodes on loopback with temporary homes that trust each other, calls from \
            one to the other through real TLS signaling, libnice ICE, SRTP and Opus, plays a \
            speech-like sound (or a tone) for a few seconds and records the callee's side to a WAV.
            """)

    @Option(name: .long, help: ArgumentHelp("Seconds of audio to send.", valueName: "SECONDS"))
    var seconds: Double = 4

    @Flag(name: .long, help: "Send a 440 Hz tone instead of the synthetic speech.")
    var tone = false

    @Option(name: .long, help: ArgumentHelp("Where to write the recording (default: a temporary directory).", valueName: "PATH"))
    var record: String?

    @Flag(name: .long, help: "Print one JSON object per line for every event.")
    var json = false

    func run() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("callnode-demo-\(getpid())").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let recording = record ?? directory + "/received.wav"
        let input: NodeAudioInput
        if tone {
            input = .tone(440)
        } else {
            let speech = directory + "/speech.wav"
            try WAV.write(SyntheticSpeech.samples(seconds: 3), format: AudioFormat(), path: speech)
            input = .wav(speech)
        }
        func configuration(_ name: String, input: NodeAudioInput, output: NodeAudioOutput) -> CallNodeConfiguration {
            var configuration = CallNodeConfiguration(home: directory + "/" + name)
            configuration.displayName = name
            configuration.listenAddress = SignalAddress(host: "127.0.0.1", port: 0)
            configuration.ice.localAddresses = ["127.0.0.1"]
            configuration.audio = NodeAudioBackend(input: input, output: output)
            return configuration
        }
        var calleeConfiguration = configuration("bob", input: .silence, output: .wav(recording))
        calleeConfiguration.autoAnswer = true
        var callerConfiguration = configuration("alice", input: input, output: .null)
        callerConfiguration.listenAddress = nil  // the caller only places the call
        let caller = try await openNode(callerConfiguration)
        let callee = try await openNode(calleeConfiguration)
        // The two temporary homes trust each other: each is the other's contact.
        try await caller.store.contacts.add(Contact(name: "bob", fingerprint: callee.identity.fingerprint.hex,
                                                    address: callee.listenAddress?.description))
        try await callee.store.contacts.add(Contact(name: "alice", fingerprint: caller.identity.fingerprint.hex))
        if !json {
            print("alice \(caller.identity.fingerprint.short) calls bob \(callee.identity.fingerprint.short) at \(callee.listenAddress?.description ?? "?")")
        }
        let runner = CallRunner(node: caller, json: json, duration: seconds, exitAfterCalls: 1)
        runner.attach()
        await caller.start()
        await callee.start()
        let outcome = await runner.run(calling: .contact("bob"))
        await caller.shutdown()
        await callee.shutdown()
        if case let .failed(message) = outcome {
            printError(message)
            throw ExitCode(1)
        }
        let heard = (try? WAV.read(path: recording).samples) ?? []
        let rms = (heard.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(max(1, heard.count))).squareRoot()
        if json { return }
        print("recording: \(recording) (\(String(format: "%.1f", Double(heard.count) / 48_000)) s, RMS \(Int(rms)))")
        if rms < 100 {
            printError("callnode: the recording is silent: audio did not arrive")
            throw ExitCode(1)
        }
    }
}

struct Relay: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a rendezvous relay for nodes that cannot reach each other directly.",
        discussion: """
            Nodes started with --relay stay registered here under their fingerprint; callers reach \
            them by fingerprint, and session joiners meet by session ID. The relay splices byte \
            streams: the nodes' TLS runs end to end through it, so it never reads signaling. \
            A node registers only a fingerprint whose key it proves it holds (a signed challenge); \
            registrations silent for 75 s are dropped; each IP address has limits.
            """)

    @Option(name: .long, help: ArgumentHelp("Address to listen on.", valueName: "HOST:PORT"))
    var listen: String = "0.0.0.0:7700"

    @Option(name: .long, help: ArgumentHelp("Nodes one IP address may keep registered at once.", valueName: "N"))
    var registrationsPerAddress: Int = RelayLimits().registrationsPerAddress

    @Option(name: .long, help: ArgumentHelp("Dials, session creations and joins one IP address may make per minute.", valueName: "N"))
    var dialsPerMinute: Int = RelayLimits().dialsPerAddressPerMinute

    func validate() throws {
        guard SignalAddress(listen) != nil else { throw ValidationError("--listen '\(listen)' is not HOST:PORT") }
        guard registrationsPerAddress >= 1 else { throw ValidationError("--registrations-per-address must be at least 1") }
        guard dialsPerMinute >= 1 else { throw ValidationError("--dials-per-minute must be at least 1") }
    }

    func run() async throws {
        // Checked in validate().
        let address = SignalAddress(listen)!
        let relay: RelayServer
        do {
            var limits = RelayLimits()
            limits.registrationsPerAddress = registrationsPerAddress
            limits.dialsPerAddressPerMinute = dialsPerMinute
            relay = try await RelayServer(host: address.host, port: address.port, limits: limits)
        } catch {
            printError("callnode: \(error)")
            throw ExitCode(1)
        }
        print("relay listening on \(SignalAddress(host: address.host, port: relay.port))")
        fflush(nil)
        signal(SIGINT, SIG_IGN)
        signal(SIGTERM, SIG_IGN)
        let (signals, signalled) = AsyncStream.makeStream(of: Void.self)
        let stops = [DispatchSource.makeSignalSource(signal: SIGINT), DispatchSource.makeSignalSource(signal: SIGTERM)]
        for stop in stops {
            stop.setEventHandler { signalled.yield() }
            stop.resume()
        }
        // Runs until SIGINT or SIGTERM (then closes) or until the listening socket closes.
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await _ in signals {
                    await relay.close()
                    return
                }
            }
            group.addTask { await relay.waitUntilClosed() }
            await group.next()
            group.cancelAll()
        }
        for stop in stops { stop.cancel() }
        let s = relay.statistics
        print("relay stopped: \(s.splices) splices, \(s.splicedBytes) bytes in \(s.tlsRecords) TLS records; "
              + "\(s.refusedRegistrations) registrations refused, \(s.rateLimited) requests over the rate limit")
    }
}

struct Session: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Create meeting sessions at a relay.",
        subcommands: [New.self])

    struct New: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print a fresh, unguessable session ID and its link; two nodes then `callnode join` it.")
        @Option(name: .long, help: ArgumentHelp("The relay that hosts the session.", valueName: "HOST:PORT"))
        var relay: String
        @Option(name: .long, help: ArgumentHelp("Seconds the session stays joinable.", valueName: "SECONDS"))
        var ttl: Int = 3600

        func validate() throws {
            guard SignalAddress(relay) != nil else { throw ValidationError("--relay '\(relay)' is not HOST:PORT") }
        }

        func run() async throws {
            // Checked in validate().
            let address = SignalAddress(relay)!
            do {
                let id = try await RelayClient.newSession(relay: address.host, port: address.port, ttl: ttl)
                print(id)
                print("callnode://\(address)/meet/\(id)")
            } catch {
                printError("callnode: \(error)")
                throw ExitCode(1)
            }
        }
    }
}

struct Join: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Join a session by ID or link: no ringing, no contacts needed.",
        discussion: """
            Both participants run `callnode join` with the same ID (from `callnode session new`). \
            The first waits for the second; a third is refused. Identities are shown, not checked. \
            The session ends for both when one leaves (q or Ctrl-C), the connection closes, or it times out.
            """)

    @Argument(help: ArgumentHelp("Session ID, or callnode://HOST:PORT/meet/ID.", valueName: "ID|LINK"))
    var session: String

    @Flag(name: .long, help: "Join with the microphone muted (m unmutes).")
    var muted = false

    @Option(name: .long, help: "A title shown to the other participant.")
    var title: String?

    @OptionGroup var options: NodeOptions

    func run() async throws {
        let settings = try await loadSettings(home: options.home.home)
        let setup = try options.setup(settings, defaultListen: nil)
        var id = session, relay = setup.relay
        if session.hasPrefix("callnode://") {
            let rest = session.dropFirst("callnode://".count)
            guard let slash = rest.firstIndex(of: "/"), rest[slash...].hasPrefix("/meet/"),
                  let address = SignalAddress(String(rest[..<slash])) else {
                printError("callnode: '\(session)' is not a callnode://HOST:PORT/meet/ID link")
                throw ExitCode(1)
            }
            relay = address
            id = String(rest[rest.index(slash, offsetBy: 6)...])
        }
        guard let relay else {
            printError("callnode: joining by ID needs --relay HOST:PORT (or pass the whole callnode:// link)")
            throw ExitCode(1)
        }
        var configuration = try setup.configuration(home: options.home.home)
        configuration.relay = nil  // a session needs no registration
        _ = try await serveMetrics(setup, json: options.json)
        let node = try await openNode(configuration)
        let runner = CallRunner(node: node, json: options.json, duration: setup.duration, exitAfterCalls: 1)
        runner.attach()
        await node.start()
        do {
            try await node.join(session: id, relay: relay, title: title, startMuted: muted)
        } catch {
            printError("callnode: \(error)")
            throw ExitCode(1)
        }
        let outcome = await runner.run(calling: nil)
        await node.shutdown()
        if case let .failed(message) = outcome {
            printError(message)
            throw ExitCode(1)
        }
    }
}
