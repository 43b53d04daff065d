import ArgumentParser
import CallNode
import Foundation
import NodeControl
import NodeSettings

/// `--home`, shared by every command that opens the node's home directory.
struct HomeOption: ParsableArguments {
    @Option(name: .customLong("home"), help: ArgumentHelp("The node's home: identity, database and config.yaml (default: CALLNODE_HOME, else ~/.callnode).", valueName: "DIR"))
    var given: String?

    /// The flag, else `CALLNODE_HOME`, else ~/.callnode.
    var home: String {
        given ?? ProcessInfo.processInfo.environment["CALLNODE_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? CallNodeConfiguration.defaultHome
    }
}

/// The options of `listen`, `call`, `web` and `join`. None has a default here: a flag that is
/// not given leaves the setting to `CALLNODE_*`, config.yaml or its default (`setup`).
struct NodeOptions: ParsableArguments {
    @OptionGroup var home: HomeOption

    @Option(name: .long, help: ArgumentHelp("Accept signaling connections (other nodes' calls) on this address (listen default 0.0.0.0:7600; call, web, join: none).", valueName: "HOST:PORT"))
    var listen: String?

    // The earlier spelling of --listen.
    @Option(name: .customLong("signal"), help: .hidden)
    var signal: String?

    @Option(name: .long, help: ArgumentHelp("Rendezvous relay: stay reachable there by fingerprint, and call contacts without an address through it.", valueName: "HOST:PORT"))
    var relay: String?

    @Option(name: .long, help: ArgumentHelp("The name this node gives when it calls.", valueName: "NAME"))
    var name: String?

    @Flag(name: .long, inversion: .prefixedNo, help: "Answer incoming calls at once.")
    var autoAnswer: Bool?

    @Flag(name: .long, inversion: .prefixedNo, help: "With --auto-answer, merge each new call into a conference with the calls already on (default: hold them).")
    var conference: Bool?

    @Option(name: .long, help: ArgumentHelp("Keep this node's conference in a Janus AudioBridge room (janus:http://HOST:8088/janus#ROOM): the node joins it at start as one participant, merges every caller it answers into it (implies --auto-answer --conference), and joins again if the room call ends. A room's PIN from CALLNODE_ROOM_PIN.", valueName: "ROOM"))
    var conferenceRoom: String?

    @Option(name: .long, help: ArgumentHelp("Refuse callers as busy while this many calls are in progress.", valueName: "N"))
    var maxCalls: String?

    @Option(name: .long, help: ArgumentHelp("Drain on SIGTERM: take no new calls (SIP callers and a proxy's OPTIONS probes get 503 with Retry-After), let the calls in progress finish for at most this long, then hang up the rest and exit 0. A second SIGTERM (or Ctrl-C) hangs up at once. Without it SIGTERM hangs up at once.", valueName: "SECONDS"))
    var drainGrace: String?

    @Flag(name: .long, inversion: .prefixedNo, help: "Let callers who are not contacts ring (their fingerprint is shown).")
    var acceptUnknown: Bool?

    @Flag(name: .long, inversion: .prefixedNo, help: "Do not disturb: refuse callers (they are told so) until it is turned off (the n key toggles it).")
    var dnd: Bool?

    @Option(name: .long, help: ArgumentHelp("Microphone: wav:PATH (looped), tone[:HZ], silence or alsa:DEVICE (default tone:440).", valueName: "SPEC"))
    var input: String?

    @Option(name: .long, help: ArgumentHelp("Speaker: wav:PATH (recorded), wav:DIR/ (a file per call), null or alsa:DEVICE (default null).", valueName: "SPEC"))
    var output: String?

    @Option(name: .long, help: ArgumentHelp("A second output the o key switches to: wav:PATH, null or alsa:DEVICE.", valueName: "SPEC"))
    var speaker: String?

    @Option(name: .long, help: ArgumentHelp("Where to capture from if the microphone fails mid-call (a USB headset unplugged): tone[:HZ], silence or alsa:DEVICE. Without one (or if it fails too) the call ends as failed, naming the device.", valueName: "SPEC"))
    var fallbackInput: String?

    @Option(name: .long, help: ArgumentHelp("Where to play to if the output fails mid-call (a sink removed): wav:PATH, null or alsa:DEVICE. Without one (or if it fails too) the call ends as failed, naming the device.", valueName: "SPEC"))
    var fallbackOutput: String?

    @Option(name: .long, help: ArgumentHelp("Echo cancellation, noise suppression and gain control on the microphone: auto (on for alsa: input; the default), on or off. The v key bypasses it during a call.", valueName: "WHEN"))
    var voiceProcessing: String?

    @Flag(name: .long, inversion: .prefixedNo, help: "Always-prepared recording: open the microphone at start and keep it running between calls, so each call has microphone audio at once.")
    var prepareRecording: Bool?

    @Flag(name: .long, inversion: .prefixedNo, help: "CallKit-free mode: the node activates its own audio session (default: the call manager does, as the system provider).")
    var appOwnedAudio: Bool?

    @Option(name: .long, help: ArgumentHelp("Hang up each call this many seconds after it connects.", valueName: "SECONDS"))
    var duration: String?

    @Option(name: .long, help: ArgumentHelp("Opus bitrate in bit/s (default 40000).", valueName: "BPS"))
    var bitrate: String?

    @Option(name: .long, help: ArgumentHelp("Opus encoder complexity, 0–10 (default 8): lower costs less CPU per call for a little quality.", valueName: "N"))
    var opusComplexity: String?

    @Flag(name: .long, inversion: .prefixedNo, help: "Lower the Opus complexity of every call while this node's media runs late for its own work (many calls) and raise it back when calm (the default); a host busy with other programs does not lower it. --no-complexity-follows-load keeps --opus-complexity fixed.")
    var complexityFollowsLoad: Bool?

    @Option(name: .long, help: ArgumentHelp("Audio frame length: 10, 20 (the default), 40 or 60 ms.", valueName: "MS"))
    var frameMs: String?

    @Option(name: .long, help: ArgumentHelp("Send each frame again in the next packet (RFC 2198, if the peer supports it): adaptive (while the peer reports loss; the default), always or off.", valueName: "WHEN"))
    var redundancy: String?

    @Option(name: .long, help: ArgumentHelp("While a call's connection stays lost, restart ICE after this many seconds and again every as many (either side; the caller half an interval later; 0: never, and no fresh rounds of checks during setup either; default 5). During setup a round of checks without a pair after 2.5 s gives way to a fresh one, five times at most.", valueName: "SECONDS"))
    var iceRestart: String?

    @Option(name: .long, help: ArgumentHelp("When a call's signaling connection drops (a reset, a relay restart, this host's address changing), the side that can reach the other (the caller; the callee too when it knows the caller's address or shares its relay) reconnects and resumes the call; it ends as failed if that does not succeed within this many seconds (default 30).", valueName: "SECONDS"))
    var resumeWindow: String?

    @Option(name: .long, help: ArgumentHelp("How this node's offers key SRTP: dtls (the default: a DTLS-SRTP handshake on the media path; ephemeral keys, forward secrecy, what browsers speak) or sdes (keys inside the signaled SDP). Answers follow the offer.", valueName: "KIND"))
    var keyExchange: String?

    @Option(name: .long, help: ArgumentHelp("End-to-end encryption of every frame under SRTP, with keys agreed inside the pinned signaling TLS (through a relay too): preferred (the default: when the peer can), required (refuse a peer that cannot, saying why) or off.", valueName: "WHEN"))
    var frameEncryption: String?

    @Flag(name: .long, inversion: .prefixedNo, help: "Playback only: never open a microphone; calls send silence and play the other side.")
    var playbackOnly: Bool?

    @Option(name: .long, help: ArgumentHelp("What a call you hold (h) sends the other side: silence (the default: the call goes quiet both ways), tone (a soft 425 Hz waiting tone) or wav:PATH (looped, 48000 Hz mono).", valueName: "SPEC"))
    var holdAudio: String?

    @Option(name: .long, help: ArgumentHelp("Serve Prometheus metrics (calls, setup times, loss, jitter, RTT, rejects) over HTTP at http://HOST:PORT/metrics.", valueName: "HOST:PORT"))
    var metrics: String?

    @Option(name: .long, help: ArgumentHelp("Serve the control API (HTTP and JSON: list, place and answer calls, play prompts, record, stream events; `callnode ctl`) at unix:PATH (listen and web default: unix:HOME/control.sock, this user only), or tcp:HOST:PORT on loopback with a token (control-token in config.yaml, CALLNODE_CONTROL_TOKEN or --control-token-file); none turns it off.", valueName: "ADDRESS"))
    var control: String?

    @Option(name: .long, help: ArgumentHelp("Read the control API's token (for tcp:) from this file (its first line).", valueName: "PATH"))
    var controlTokenFile: String?

    @Option(name: .long, help: ArgumentHelp("Serve the console (a page for a browser on this machine: live calls with their levels and quality, actions, Recents with recordings) and the control API at http://HOST:PORT/console/, on loopback. It asks for the control token, or, when none is set, the one the node keeps in HOME/console-token (this user only).", valueName: "HOST:PORT"))
    var console: String?

    @Option(name: .long, help: ArgumentHelp("Speak SIP on this address too (UDP and TCP): SIP softphones, PBXs and other nodes call this node at sip:USER@HOST:PORT, and `call sip:…` calls them. Add TLS on a port of its own with udp:HOST:PORT,tls:HOST:PORT (the node's identity certificate).", valueName: "HOST:PORT"))
    var sip: String?

    @Option(name: .long, help: ArgumentHelp("The user part of this node's SIP address (default callnode).", valueName: "NAME"))
    var sipUser: String?

    @Option(name: .long, help: ArgumentHelp("SIP calls' media: preferred (the default: offer SRTP, take a phone's plain RTP, and say so), required (refuse plain RTP with 488) or off (offer plain RTP).", valueName: "WHEN"))
    var sipMediaEncryption: String?

    @Option(name: .long, help: ArgumentHelp("SIP over TLS presents this certificate chain (PEM) rather than the node's self-signed identity: one a CA signed for this host, for phones and proxies that check. Needs a tls: address in --sip and --sip-certificate-key.", valueName: "PATH"))
    var sipCertificate: String?

    @Option(name: .long, help: ArgumentHelp("The private key (PEM) of --sip-certificate.", valueName: "PATH"))
    var sipCertificateKey: String?

    @Flag(name: .long, inversion: .prefixedNo, help: "Offer ICE on SIP calls this node places (host, STUN and TURN candidates): for peers behind NATs that speak ICE. Off by default: most SIP phones and PBXs do not, and an offer they can take without it is answered either way. Answers follow the caller's offer.")
    var sipIce: Bool?

    @Option(name: .long, help: ArgumentHelp("Register this address of record at a SIP registrar (needs --sip), so callers reach this node by it; calls then go out through the registrar. The password comes from CALLNODE_SIP_PASSWORD, config.yaml's sip-password or --sip-password-file, never the command line.", valueName: "sip:USER@DOMAIN"))
    var sipRegister: String?

    @Option(name: .long, help: ArgumentHelp("Where to register (default: the address of record's domain), e.g. sip:pbx.example.org:5060.", valueName: "URI"))
    var sipRegistrar: String?

    @Option(name: .long, help: ArgumentHelp("The user name to authenticate as (default: the address of record's user).", valueName: "NAME"))
    var sipAuthUser: String?

    @Option(name: .long, help: ArgumentHelp("Read the SIP password from this file (its first line).", valueName: "PATH"))
    var sipPasswordFile: String?

    @Option(name: .long, help: ArgumentHelp("While registered, send the registrar an OPTIONS this often, holding a NAT's binding open so that calls still reach this node behind it (RFC 5626; default 25, 0 never).", valueName: "SECONDS"))
    var sipKeepalive: String?

    @Flag(name: .long, help: "Print one JSON object per line on stdout for every event.")
    var json = false

    @OptionGroup var network: NetworkOptions

    /// The flags given on the command line, by setting name (what `config show` merges).
    var givenFlags: [String: [String]] {
        var given: [String: [String]] = [:]
        func put(_ key: String, _ value: String?) { if let value { given[key] = [value] } }
        func put(_ key: String, _ value: Bool?) { if let value { given[key] = [value ? "true" : "false"] } }
        put("listen", listen ?? signal); put("relay", relay); put("name", name)
        put("auto-answer", autoAnswer); put("conference", conference); put("conference-room", conferenceRoom); put("max-calls", maxCalls); put("drain-grace", drainGrace)
        put("accept-unknown", acceptUnknown); put("dnd", dnd); put("input", input); put("output", output); put("speaker", speaker)
        put("fallback-input", fallbackInput); put("fallback-output", fallbackOutput)
        put("voice-processing", voiceProcessing); put("prepare-recording", prepareRecording)
        put("app-owned-audio", appOwnedAudio); put("duration", duration); put("bitrate", bitrate); put("opus-complexity", opusComplexity)
        put("complexity-follows-load", complexityFollowsLoad)
        put("frame-ms", frameMs); put("redundancy", redundancy); put("ice-restart", iceRestart)
        put("resume-window", resumeWindow); put("key-exchange", keyExchange); put("frame-encryption", frameEncryption); put("playback-only", playbackOnly)
        put("hold-audio", holdAudio); put("metrics", metrics); put("control", control); put("control-token-file", controlTokenFile); put("console", console); put("sip", sip); put("sip-user", sipUser)
        put("sip-media-encryption", sipMediaEncryption); put("sip-ice", sipIce); put("sip-certificate", sipCertificate); put("sip-certificate-key", sipCertificateKey); put("sip-register", sipRegister); put("sip-registrar", sipRegistrar)
        put("sip-auth-user", sipAuthUser); put("sip-password-file", sipPasswordFile); put("sip-keepalive", sipKeepalive)
        put("stun", network.stun); put("turn-file", network.turnFile); put("relay-only", network.relayOnly)
        put("ice-tcp", network.iceTcp); put("consent-freshness", network.consentFreshness)
        if !network.turn.isEmpty { given["turn"] = network.turn }
        if !network.bind.isEmpty { given["bind"] = network.bind }
        return given
    }

    /// Merges each setting (flag > CALLNODE_* > config.yaml > default) and checks it; an error
    /// names where the bad value came from.
    func setup(_ settings: NodeSettings, defaultListen: String?) throws -> NodeSetup {
        if listen != nil && signal != nil { throw ValidationError("give --listen only (--signal is its earlier name)") }
        let read = SettingsReader(settings: settings)
        var setup = NodeSetup()
        setup.listen = try read.address("listen", listen ?? signal) ?? defaultListen.flatMap(SignalAddress.init)
        setup.relay = try read.address("relay", relay)
        setup.name = try read.string("name", name)
        setup.autoAnswer = try read.flag("auto-answer", autoAnswer)
        setup.conference = try read.flag("conference", conference)
        if let room = try read.string("conference-room", conferenceRoom) {
            guard let address = JanusRoomAddress(room) else {
                throw ValidationError("--conference-room: \(JanusRoomAddress.problem(room) ?? "not a room")")
            }
            setup.conferenceRoom = address
            setup.autoAnswer = true
            setup.conference = true
        }
        setup.maxCalls = try read.integer("max-calls", maxCalls, 1...100_000, "a number of calls (at least 1)")
        setup.drainGrace = try read.number("drain-grace", drainGrace, 0...86_400, "a number of seconds (0–86400)")
        setup.acceptUnknown = try read.flag("accept-unknown", acceptUnknown)
        setup.doNotDisturb = try read.flag("dnd", dnd)
        let inputSetting = try read.resolved("input", input)
        guard let inputSpec = inputSetting.value, let parsedInput = NodeAudioInput(spec: inputSpec) else {
            throw ValidationError("\(inputSetting.origin) '\(inputSetting.value ?? "")' is not wav:PATH, tone, tone:HZ, silence or alsa:DEVICE")
        }
        setup.input = parsedInput
        if case let .wav(path) = parsedInput {
            guard FileManager.default.fileExists(atPath: path) else { throw ValidationError("\(inputSetting.origin): no such file: \(path)") }
            // Read it now: a file the node cannot play is refused before any call is placed.
            do { _ = try WAV.read(path: path) } catch { throw ValidationError("\(inputSetting.origin): \(error)") }
        }
        let outputs = "wav:PATH, wav:DIR/, null or alsa:DEVICE"
        setup.output = try read.parsed("output", output, outputs, NodeAudioOutput.init(spec:)) ?? .null
        setup.speaker = try read.parsed("speaker", speaker, outputs, NodeAudioOutput.init(spec:))
        setup.fallbackInput = try read.parsed("fallback-input", fallbackInput, "tone, tone:HZ, silence or alsa:DEVICE (a device, a tone or silence: not a WAV file)") { spec in
            guard let input = NodeAudioInput(spec: spec) else { return nil }
            if case .wav = input { return nil }
            return input
        }
        setup.fallbackOutput = try read.parsed("fallback-output", fallbackOutput, outputs, NodeAudioOutput.init(spec:))
        setup.voiceProcessing = try read.parsed("voice-processing", voiceProcessing, "auto, on or off") { value -> Bool?? in
            switch value { case "auto": .some(nil); case "on": .some(true); case "off": .some(false); default: nil }
        } ?? nil
        setup.prepareRecording = try read.flag("prepare-recording", prepareRecording)
        setup.appOwnedAudio = try read.flag("app-owned-audio", appOwnedAudio)
        setup.duration = try read.number("duration", duration, 0.001...1e9, "a positive number of seconds")
        setup.bitrate = try read.integer("bitrate", bitrate, 6_000...510_000, "a bitrate in 6000–510000 bit/s") ?? 40_000
        setup.complexity = try read.integer("opus-complexity", opusComplexity, 0...10, "an Opus complexity, 0–10") ?? 8
        setup.complexityFollowsLoad = try read.flag("complexity-follows-load", complexityFollowsLoad)
        setup.frameMs = try read.parsed("frame-ms", frameMs, "10, 20, 40 or 60") { Int($0).flatMap { [10, 20, 40, 60].contains($0) ? $0 : nil } } ?? 20
        setup.redundancy = try read.parsed("redundancy", redundancy, "adaptive, always or off", RedundancyPolicy.init(rawValue:)) ?? .adaptive
        setup.iceRestart = try read.number("ice-restart", iceRestart, 0...3600, "0–3600 seconds (0: never)") ?? 5
        setup.resumeWindow = try read.number("resume-window", resumeWindow, 1...3600, "1–3600 seconds") ?? 30
        setup.keyExchange = try read.parsed("key-exchange", keyExchange, "dtls or sdes", KeyExchange.init(rawValue:)) ?? .dtls
        setup.frameEncryption = try read.parsed("frame-encryption", frameEncryption, "required, preferred or off",
                                                FrameEncryptionPolicy.init(rawValue:)) ?? .preferred
        setup.playbackOnly = try read.flag("playback-only", playbackOnly)
        if setup.playbackOnly && inputSetting.source != .default {
            // Said, not silently dropped: the input given is never opened.
            printError("callnode: warning: --playback-only never opens a microphone: \(inputSetting.origin) '\(inputSpec)' is not used (calls send silence)")
        }
        let holdSetting = try read.resolved("hold-audio", holdAudio)
        guard let hold = HoldAudio(holdSetting.value ?? "silence") else {
            throw ValidationError("\(holdSetting.origin) '\(holdSetting.value ?? "")' is not silence, tone or wav:PATH")
        }
        if case let .file(path) = hold {
            let format: AudioFormat
            do { format = try WAV.read(path: path).format } catch { throw ValidationError("\(holdSetting.origin): \(error)") }
            guard format == AudioFormat(sampleRate: 48_000, channels: 1) else {
                throw ValidationError("\(holdSetting.origin): \(path) is \(format); hold audio must be 48000 Hz mono (sox IN -r 48000 -c 1 -b 16 OUT)")
            }
        }
        setup.holdAudio = hold
        setup.metrics = try read.address("metrics", metrics)
        if let given = try read.string("control", control) {
            if given == "none" {
                setup.control = .off
            } else {
                guard let address = ControlAddress(given) else {
                    throw ValidationError("--control '\(given)' is not unix:PATH, tcp:HOST:PORT or none")
                }
                setup.control = .at(address)
            }
        }
        var token = try read.resolved("control-token", nil).value
        if token == nil { token = try read.secretLines("control-token-file", controlTokenFile).first }
        setup.controlToken = token
        if case .at(.tcp) = setup.control, token?.isEmpty != false {
            throw ValidationError("--control tcp: needs a token: control-token in config.yaml, CALLNODE_CONTROL_TOKEN, or --control-token-file PATH")
        }
        if let console = try read.address("console", console) {
            guard ControlAddress.isLoopback(console.host) else {
                throw ValidationError("--console \(console) is not on loopback: the console is served on 127.0.0.1 or ::1 only (reach it from elsewhere through an SSH tunnel)")
            }
            setup.console = console
        }
        if let listen = try read.parsed("sip", sip, "HOST:PORT or udp:HOST:PORT,tls:HOST:PORT (TLS on the same host)", Self.sipListen) {
            (setup.sip, setup.sipTLSPort) = (listen.address, listen.tlsPort)
        }
        setup.sipUser = try read.parsed("sip-user", sipUser, "a SIP user name (letters, digits, - . _ ! ~ * ' ( ))") { name in
            name.isEmpty || name.contains(where: { !($0.isLetter || $0.isNumber || "-._!~*'()".contains($0)) }) ? nil : name
        } ?? "callnode"
        setup.sipMediaEncryption = try read.parsed("sip-media-encryption", sipMediaEncryption, "preferred, required or off",
                                                   MediaEncryption.init(rawValue:)) ?? .preferred
        setup.sipOffersICE = try read.flag("sip-ice", sipIce)
        switch (try read.string("sip-certificate", sipCertificate), try read.string("sip-certificate-key", sipCertificateKey)) {
        case let (certificate?, key?):
            guard setup.sipTLSPort != nil else {
                throw ValidationError("--sip-certificate is for SIP over TLS: give --sip udp:HOST:PORT,tls:HOST:PORT")
            }
            setup.sipCertificate = SIPCertificate(certificatePath: certificate, keyPath: key)
        case (nil, nil): break
        default: throw ValidationError("--sip-certificate and --sip-certificate-key go together")
        }
        setup.sipRegistration = try sipRegistration(read, listening: setup.sip != nil)
        if setup.conference && !setup.autoAnswer { throw ValidationError("--conference merges auto-answered calls: give --auto-answer too") }
        setup.ice = try network.iceConfiguration(role: .controlling, read)
        return setup
    }
}

extension NodeOptions {
    /// `--sip`'s value: `HOST:PORT` (UDP and TCP), or a list of `udp:`/`tcp:` (one port for
    /// both) and `tls:` addresses, TLS on the same host.
    static func sipListen(_ value: String) -> (address: SignalAddress, tlsPort: Int?)? {
        var plain: SignalAddress?, tls: SignalAddress?
        for entry in value.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) {
            let lowered = entry.lowercased()
            if lowered.hasPrefix("tls:") {
                guard tls == nil, let address = SignalAddress(String(entry.dropFirst(4))) else { return nil }
                tls = address
            } else {
                let text = lowered.hasPrefix("udp:") || lowered.hasPrefix("tcp:") ? String(entry.dropFirst(4)) : entry
                guard let address = SignalAddress(text) else { return nil }
                if let plain, plain != address { return nil }  // UDP and TCP share one address
                plain = address
            }
        }
        guard let plain else { return nil }
        if let tls, tls.host != plain.host || tls.port == plain.port { return nil }
        return (plain, tls?.port)
    }

    /// The SIP account to register, if one is set: its address of record checked, its password
    /// from the environment, config.yaml or a file (never a flag: argv is visible to every user).
    func sipRegistration(_ read: SettingsReader, listening: Bool) throws -> SIPRegistrationSettings? {
        let aorSetting = try read.resolved("sip-register", sipRegister)
        guard let aor = aorSetting.value else { return nil }
        guard listening else { throw ValidationError("\(aorSetting.origin) registers a SIP address: give --sip HOST:PORT too (where this node speaks SIP)") }
        var account = SIPRegistrationSettings(addressOfRecord: aor, password: "")
        guard account.isAddressOfRecord else { throw ValidationError("\(aorSetting.origin) '\(aor)' is not an address of record (sip:USER@DOMAIN)") }
        account.registrar = try read.string("sip-registrar", sipRegistrar)
        if let registrar = account.registrar, !(registrar.hasPrefix("sip:") || registrar.hasPrefix("sips:")) {
            throw ValidationError("--sip-registrar '\(registrar)' is not a SIP URI (sip:HOST[:PORT])")
        }
        account.user = try read.string("sip-auth-user", sipAuthUser)
        var password = try read.resolved("sip-password", nil).value
        if password == nil { password = try read.secretLines("sip-password-file", sipPasswordFile).first }
        guard let password, !password.isEmpty else {
            throw ValidationError("registering \(aor) needs its password: set CALLNODE_SIP_PASSWORD, sip-password in config.yaml, or --sip-password-file PATH")
        }
        account.password = password
        if let seconds = try read.number("sip-keepalive", sipKeepalive, 0...3600, "a number of seconds (0: never)") {
            account.keepAliveInterval = seconds == 0 ? nil : .milliseconds(Int64(seconds * 1000))
        }
        return account
    }
}

/// Where the control API is served, as the settings say.
enum ControlSetting: Equatable {
    case off
    case at(ControlAddress)
}

/// The merged, checked settings of `listen`, `call`, `web` and `join`.
struct NodeSetup {
    var listen: SignalAddress?
    var relay: SignalAddress?
    var name: String?
    var autoAnswer = false
    var conference = false
    /// The room the node's conference is kept in (`--conference-room`).
    var conferenceRoom: JanusRoomAddress?
    var maxCalls: Int?
    var drainGrace: Double?
    var acceptUnknown = false
    var doNotDisturb = false
    var input: NodeAudioInput = .tone(440)
    var output: NodeAudioOutput = .null
    var speaker: NodeAudioOutput?
    var fallbackInput: NodeAudioInput?
    var fallbackOutput: NodeAudioOutput?
    var voiceProcessing: Bool?
    var prepareRecording = false
    var appOwnedAudio = false
    var duration: Double?
    var bitrate = 40_000
    var complexity = 8
    var complexityFollowsLoad = true
    var frameMs = 20
    var redundancy = RedundancyPolicy.adaptive
    var iceRestart: Double = 5
    var resumeWindow: Double = 30
    var keyExchange = KeyExchange.dtls
    var frameEncryption = FrameEncryptionPolicy.preferred
    var playbackOnly = false
    var holdAudio = HoldAudio.silence
    var metrics: SignalAddress?
    /// The control API: where the flag or settings put it (nil: the command's default).
    var control: ControlSetting?
    var controlToken: String?
    /// Where the console is served (with the API, over TCP on loopback), if it is.
    var console: SignalAddress?
    var sip: SignalAddress?
    var sipTLSPort: Int?
    var sipUser = "callnode"
    var sipMediaEncryption = MediaEncryption.preferred
    var sipOffersICE = false
    var sipCertificate: SIPCertificate?
    var sipRegistration: SIPRegistrationSettings?
    var ice = IceConfiguration(role: .controlling)

    /// Where this node speaks SIP, if it does.
    var sipSettings: SIPListenSettings? {
        sip.map { address in
            var settings = SIPListenSettings(host: address.host, port: address.port, user: sipUser, offersICE: sipOffersICE,
                                             mediaEncryption: sipMediaEncryption)
            settings.registration = sipRegistration
            settings.tlsPort = sipTLSPort
            settings.tlsCertificate = sipCertificate
            return settings
        }
    }

    /// Each call plays a WAV input from its start, and records to its own file when the output
    /// is a directory.
    func perCallAudio() throws -> CallAudioProvider? {
        var samples: [Int16]?, rate = 48_000
        if !playbackOnly, case let .wav(path) = input {
            // Kept at the file's rate: each call's codec rate is made from it once.
            let (format, raw) = try WAV.read(path: path)
            (samples, rate) = (WAV.monoResampled(raw, from: format, to: format.sampleRate), format.sampleRate)
        }
        var directory: String?
        if case let .recordings(path) = output {
            do {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            } catch {
                throw ValidationError("--output: cannot make the recordings directory \(path): \(error.localizedDescription)")
            }
            directory = path
        }
        guard samples != nil || directory != nil else { return nil }
        return CallAudio.perCall(input: samples, inputRate: rate, recordingsIn: directory)
    }

    func configuration(home: String) throws -> CallNodeConfiguration {
        var configuration = CallNodeConfiguration(home: home)
        configuration.displayName = name
        configuration.listenAddress = listen
        configuration.relay = relay
        configuration.autoAnswer = autoAnswer
        // Calls recorded one file each are a service's independent callers: none is held for another.
        let recordsPerCall = if case .recordings = output { true } else { false }
        configuration.autoAnswerOthers = conference ? .merge : recordsPerCall ? .keep : .hold
        configuration.maximumCalls = maxCalls
        configuration.acceptUnknownCallers = acceptUnknown
        configuration.ice = ice
        // A WAV input is each call's own (from its start): the session's microphone is then silence.
        var sessionInput = input
        if case .wav = sessionInput { sessionInput = .silence }
        var audio = NodeAudioBackend(input: sessionInput, output: output, speaker: speaker)
        audio.fallbackInputDevice = fallbackInput
        audio.fallbackOutputDevice = fallbackOutput
        configuration.audio = audio
        configuration.appOwnedAudio = appOwnedAudio
        configuration.playbackOnly = playbackOnly
        configuration.callAudio = try perCallAudio()
        configuration.holdAudio = holdAudio
        configuration.voiceProcessing = voiceProcessing
        configuration.recordingAlwaysPrepared = prepareRecording
        configuration.keyExchange = keyExchange
        configuration.frameEncryption = frameEncryption
        configuration.iceRestartInterval = iceRestart > 0 ? .milliseconds(Int(iceRestart * 1000)) : nil
        configuration.resumeWindow = .milliseconds(Int(resumeWindow * 1000))
        var media = MediaConfiguration()
        media.opus.bitrate = bitrate
        media.opus.complexity = complexity
        media.complexityFollowsLoad = complexityFollowsLoad
        media.opus.frameDuration = .milliseconds(frameMs)
        media.jitterBuffer.frameDuration = .milliseconds(frameMs)
        media.redundancy = redundancy
        configuration.media = media
        return configuration
    }
}
