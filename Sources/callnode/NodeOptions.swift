import ArgumentParser
import CallNode
import Foundation

/// `--home`, shared by every command that opens the node's home directory.
struct HomeOption: ParsableArguments {
    @Option(name: .long, help: ArgumentHelp("The node's home: identity and database (default ~/.callnode).", valueName: "DIR"))
    var home: String = CallNodeConfiguration.defaultHome
}

/// The options of `listen` and `call`.
struct NodeOptions: ParsableArguments {
    @OptionGroup var home: HomeOption

    @Option(name: .long, help: ArgumentHelp("Accept signaling connections on this address (listen default 0.0.0.0:7600; call default: none).", valueName: "HOST:PORT"))
    var signal: String?

    @Option(name: .long, help: ArgumentHelp("Rendezvous relay: stay reachable there by fingerprint, and call contacts without an address through it.", valueName: "HOST:PORT"))
    var relay: String?

    @Option(name: .long, help: ArgumentHelp("The name this node gives when it calls.", valueName: "NAME"))
    var name: String?

    @Flag(name: .long, help: "Answer incoming calls at once.")
    var autoAnswer = false

    @Flag(name: .long, help: "With --auto-answer, merge each new call into a conference with the calls already on (default: hold them).")
    var conference = false

    @Option(name: .long, help: ArgumentHelp("Refuse callers as busy while this many calls are in progress.", valueName: "N"))
    var maxCalls: Int?

    @Flag(name: .long, help: "Let callers who are not contacts ring (their fingerprint is shown).")
    var acceptUnknown = false

    @Option(name: .long, help: ArgumentHelp("Microphone: wav:PATH (looped), tone[:HZ], silence or alsa:DEVICE.", valueName: "SPEC"))
    var input: String = "tone:440"

    @Option(name: .long, help: ArgumentHelp("Speaker: wav:PATH (recorded), null or alsa:DEVICE.", valueName: "SPEC"))
    var output: String = "null"

    @Option(name: .long, help: ArgumentHelp("A second output the o key switches to: wav:PATH, null or alsa:DEVICE.", valueName: "SPEC"))
    var speaker: String?

    @Option(name: .long, help: ArgumentHelp("Where to capture from if the microphone fails mid-call (a USB headset unplugged): tone[:HZ], silence or alsa:DEVICE. Without one (or if it fails too) the call ends as failed, naming the device.", valueName: "SPEC"))
    var fallbackInput: String?

    @Option(name: .long, help: ArgumentHelp("Where to play to if the output fails mid-call (a sink removed): wav:PATH, null or alsa:DEVICE. Without one (or if it fails too) the call ends as failed, naming the device.", valueName: "SPEC"))
    var fallbackOutput: String?

    @Option(name: .long, help: ArgumentHelp("Echo cancellation, noise suppression and gain control on the microphone: auto (on for alsa: input), on or off. The v key bypasses it during a call.", valueName: "WHEN"))
    var voiceProcessing: String = "auto"

    @Flag(name: .long, help: "Always-prepared recording: open the microphone at start and keep it running between calls, so each call has microphone audio at once.")
    var prepareRecording = false

    @Flag(name: .long, help: "CallKit-free mode: the node activates its own audio session (default: the call manager does, as the system provider).")
    var appOwnedAudio = false

    @Option(name: .long, help: ArgumentHelp("Hang up each call this many seconds after it connects.", valueName: "SECONDS"))
    var duration: Double?

    @Option(name: .long, help: ArgumentHelp("Opus bitrate in bit/s.", valueName: "BPS"))
    var bitrate: Int = 40_000

    @Option(name: .long, help: ArgumentHelp("Audio frame length: 10, 20, 40 or 60 ms.", valueName: "MS"))
    var frameMs: Int = 20

    @Option(name: .long, help: ArgumentHelp("Send each frame again in the next packet (RFC 2198, if the peer supports it): adaptive (while the peer reports loss), always or off.", valueName: "WHEN"))
    var redundancy: String = RedundancyPolicy.adaptive.rawValue

    @Option(name: .long, help: ArgumentHelp("While a call's connection stays lost, restart ICE after this many seconds and again every as many (either side; the caller half an interval later; 0: never).", valueName: "SECONDS"))
    var iceRestart: Double = 5

    @Option(name: .long, help: ArgumentHelp("When a call's signaling connection drops (a reset, a relay restart, this host's address changing), the side that can reach the other (the caller; the callee too when it knows the caller's address or shares its relay) reconnects and resumes the call; it ends as failed if that does not succeed within this many seconds.", valueName: "SECONDS"))
    var resumeWindow: Double = 30

    @Option(name: .long, help: ArgumentHelp("How this node's offers key SRTP: dtls (a DTLS-SRTP handshake on the media path; ephemeral keys, forward secrecy, what browsers speak) or sdes (keys inside the signaled SDP). Answers follow the offer.", valueName: "KIND"))
    var keyExchange: String = KeyExchange.dtls.rawValue

    @Flag(name: .long, help: "Playback only: never open a microphone; calls send silence and play the other side.")
    var playbackOnly = false

    @Option(name: .long, help: ArgumentHelp("What a call you hold (h) sends the other side: silence (the call goes quiet both ways), tone (a soft 425 Hz waiting tone) or wav:PATH (looped, 48000 Hz mono).", valueName: "SPEC"))
    var holdAudio = "silence"

    @Flag(name: .long, help: "Print one JSON object per line on stdout for every event.")
    var json = false

    @OptionGroup var network: NetworkOptions

    func validate() throws {
        guard NodeAudioInput(spec: input) != nil else {
            throw ValidationError("--input '\(input)' is not wav:PATH, tone, tone:HZ, silence or alsa:DEVICE")
        }
        guard NodeAudioOutput(spec: output) != nil else {
            throw ValidationError("--output '\(output)' is not wav:PATH, null or alsa:DEVICE")
        }
        if let speaker, NodeAudioOutput(spec: speaker) == nil {
            throw ValidationError("--speaker '\(speaker)' is not wav:PATH, null or alsa:DEVICE")
        }
        if let fallbackInput {
            guard let fallback = NodeAudioInput(spec: fallbackInput) else {
                throw ValidationError("--fallback-input '\(fallbackInput)' is not tone, tone:HZ, silence or alsa:DEVICE")
            }
            if case .wav = fallback { throw ValidationError("--fallback-input takes a device, a tone or silence, not a WAV file") }
        }
        if let fallbackOutput, NodeAudioOutput(spec: fallbackOutput) == nil {
            throw ValidationError("--fallback-output '\(fallbackOutput)' is not wav:PATH, null or alsa:DEVICE")
        }
        guard ["auto", "on", "off"].contains(voiceProcessing) else {
            throw ValidationError("--voice-processing must be auto, on or off (got '\(voiceProcessing)')")
        }
        guard [10, 20, 40, 60].contains(frameMs) else { throw ValidationError("--frame-ms must be 10, 20, 40 or 60 (got \(frameMs))") }
        guard (6_000...510_000).contains(bitrate) else { throw ValidationError("--bitrate must be 6000–510000 (got \(bitrate))") }
        guard RedundancyPolicy(rawValue: redundancy) != nil else {
            throw ValidationError("--redundancy must be adaptive, always or off (got '\(redundancy)')")
        }
        if let duration, !(duration > 0) { throw ValidationError("--duration must be a positive number of seconds") }
        guard KeyExchange(rawValue: keyExchange) != nil else {
            throw ValidationError("--key-exchange must be dtls or sdes (got '\(keyExchange)')")
        }
        if let maxCalls, maxCalls < 1 { throw ValidationError("--max-calls must be at least 1") }
        if conference && !autoAnswer { throw ValidationError("--conference merges auto-answered calls: give --auto-answer too") }
        guard iceRestart >= 0, iceRestart <= 3600 else { throw ValidationError("--ice-restart must be 0–3600 seconds (0: never)") }
        guard resumeWindow >= 1, resumeWindow <= 3600 else { throw ValidationError("--resume-window must be 1–3600 seconds") }
        if let signal, SignalAddress(signal) == nil { throw ValidationError("--signal '\(signal)' is not HOST:PORT") }
        if let relay, SignalAddress(relay) == nil { throw ValidationError("--relay '\(relay)' is not HOST:PORT") }
        guard let hold = HoldAudio(holdAudio) else {
            throw ValidationError("--hold-audio '\(holdAudio)' is not silence, tone or wav:PATH")
        }
        if case let .file(path) = hold {
            let format: AudioFormat
            do { format = try WAV.read(path: path).format } catch { throw ValidationError("--hold-audio: \(error)") }
            guard format == AudioFormat(sampleRate: 48_000, channels: 1) else {
                throw ValidationError("--hold-audio: \(path) is \(format); hold audio must be 48000 Hz mono (sox IN -r 48000 -c 1 -b 16 OUT)")
            }
        }
        if case let .wav(path) = NodeAudioInput(spec: input) {
            guard FileManager.default.fileExists(atPath: path) else { throw ValidationError("--input: no such file: \(path)") }
            // Read it now: a file the node cannot play is refused before any call is placed.
            do { _ = try WAV.read(path: path) } catch { throw ValidationError("--input: \(error)") }
        }
    }

    /// Each call plays a WAV input from its start, and records to its own file when the output
    /// is a directory.
    func perCallAudio() throws -> CallAudioProvider? {
        var samples: [Int16]?
        if !playbackOnly, case let .wav(path) = NodeAudioInput(spec: input) {
            let (format, raw) = try WAV.read(path: path)
            samples = WAV.monoResampled(raw, from: format, to: 48_000)
        }
        var directory: String?
        if case let .recordings(path) = NodeAudioOutput(spec: output) {
            do {
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            } catch {
                throw ValidationError("--output: cannot make the recordings directory \(path): \(error.localizedDescription)")
            }
            directory = path
        }
        guard samples != nil || directory != nil else { return nil }
        return CallAudio.perCall(input: samples, recordingsIn: directory)
    }

    func configuration(defaultSignal: String?) throws -> CallNodeConfiguration {
        var configuration = CallNodeConfiguration(home: home.home)
        configuration.displayName = name
        configuration.listenAddress = (signal ?? defaultSignal).flatMap(SignalAddress.init)
        configuration.relay = relay.flatMap(SignalAddress.init)
        configuration.autoAnswer = autoAnswer
        // Calls recorded one file each are a service's independent callers: none is held for another.
        let recordsPerCall = if case .recordings = NodeAudioOutput(spec: output) { true } else { false }
        configuration.autoAnswerOthers = conference ? .merge : recordsPerCall ? .keep : .hold
        configuration.maximumCalls = maxCalls
        configuration.acceptUnknownCallers = acceptUnknown
        configuration.ice = try network.iceConfiguration(role: .controlling)
        // Both checked in validate().
        // A WAV input is each call's own (from its start): the session's microphone is then silence.
        var sessionInput = NodeAudioInput(spec: input)!  // checked in validate()
        if case .wav = sessionInput { sessionInput = .silence }
        var audio = NodeAudioBackend(input: sessionInput, output: NodeAudioOutput(spec: output)!,
                                     speaker: speaker.flatMap(NodeAudioOutput.init(spec:)))
        audio.fallbackInputDevice = fallbackInput.flatMap(NodeAudioInput.init(spec:))
        audio.fallbackOutputDevice = fallbackOutput.flatMap(NodeAudioOutput.init(spec:))
        configuration.audio = audio
        configuration.appOwnedAudio = appOwnedAudio
        configuration.playbackOnly = playbackOnly
        configuration.callAudio = try perCallAudio()
        configuration.holdAudio = HoldAudio(holdAudio) ?? .silence  // checked in validate()
        configuration.voiceProcessing = voiceProcessing == "auto" ? nil : voiceProcessing == "on"
        configuration.recordingAlwaysPrepared = prepareRecording
        configuration.keyExchange = KeyExchange(rawValue: keyExchange) ?? .dtls  // checked in validate()
        configuration.iceRestartInterval = iceRestart > 0 ? .milliseconds(Int(iceRestart * 1000)) : nil
        configuration.resumeWindow = .milliseconds(Int(resumeWindow * 1000))
        var media = MediaConfiguration()
        media.opus.bitrate = bitrate
        media.opus.frameDuration = .milliseconds(frameMs)
        media.jitterBuffer.frameDuration = .milliseconds(frameMs)
        media.redundancy = RedundancyPolicy(rawValue: redundancy) ?? .adaptive  // checked in validate()
        configuration.media = media
        return configuration
    }
}
