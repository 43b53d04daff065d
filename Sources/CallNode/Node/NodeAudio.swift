import AudioSession
import Foundation
import Locking
import Media

/// Where a node's microphone audio comes from.
public enum NodeAudioInput: Sendable, Equatable, CustomStringConvertible {
    /// A WAV file, looped (any rate or channel count; converted to the call's format).
    case wav(String)
    /// A sine tone at this frequency.
    case tone(Double)
    case silence
    /// An ALSA capture device (`default`, `pulse`, `hw:0`, …).
    case alsa(String)

    /// Parses `wav:PATH`, `tone`, `tone:HZ`, `silence` or `alsa:DEVICE`.
    public init?(spec: String) {
        if spec.hasPrefix("wav:"), spec.count > 4 { self = .wav(String(spec.dropFirst(4))) }
        else if spec == "tone" { self = .tone(440) }
        else if spec.hasPrefix("tone:"), let hz = Double(spec.dropFirst(5)), hz > 0, hz < 24_000 { self = .tone(hz) }
        else if spec == "silence" { self = .silence }
        else if spec.hasPrefix("alsa:"), spec.count > 5 { self = .alsa(String(spec.dropFirst(5))) }
        else { return nil }
    }

    public var description: String {
        switch self {
        case let .wav(path): "wav:\(path)"
        // The name must parse back as a spec in any locale (`tone:1,100` would not).
        case let .tone(hz): "tone:" + (hz == hz.rounded() ? "\(Int(hz))" : String(format: "%.1f", hz))
        case .silence: "silence"
        case let .alsa(device): "alsa:\(device)"
        }
    }
}

/// Where a node plays the far end's audio.
public enum NodeAudioOutput: Sendable, Equatable, CustomStringConvertible {
    /// Records to a WAV file (48 kHz mono, 16-bit), written as it goes.
    case wav(String)
    /// Records each call to its own WAV file in this directory (the session's output plays
    /// nothing): see ``CallAudio/perCall(input:recordingsIn:)``.
    case recordings(String)
    /// Discards the audio.
    case null
    /// An ALSA playback device.
    case alsa(String)

    /// Parses `wav:PATH` (a path ending in `/`, or an existing directory: one recording per
    /// call there), `null` or `alsa:DEVICE`.
    public init?(spec: String) {
        if spec.hasPrefix("wav:"), spec.count > 4 {
            let path = String(spec.dropFirst(4))
            var isDirectory: ObjCBool = false
            if path.hasSuffix("/") || (FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && isDirectory.boolValue) {
                self = .recordings(path)
            } else {
                self = .wav(path)
            }
        }
        else if spec == "null" { self = .null }
        else if spec.hasPrefix("alsa:"), spec.count > 5 { self = .alsa(String(spec.dropFirst(5))) }
        else { return nil }
    }

    public var description: String {
        switch self {
        case let .wav(path): "wav:\(path)"
        case let .recordings(directory): "wav:\(directory.hasSuffix("/") ? directory : directory + "/")"
        case .null: "null"
        case let .alsa(device): "alsa:\(device)"
        }
    }
}

/// The audio session backend of a terminal node: the microphone and speaker are whatever
/// `--input` and `--output` name — files, tones, or ALSA devices. The session opens them on
/// activation like any device, so the ownership rules are the same as with real hardware.
public struct NodeAudioBackend: AudioDeviceBackend {
    public var input: NodeAudioInput
    public var output: NodeAudioOutput
    /// The second output the speaker override switches to (`--speaker`); `nil` keeps `output`.
    public var speaker: NodeAudioOutput?
    /// ALSA period for `alsa:` devices.
    public var period: Duration
    /// What to capture from if the input fails mid-call (a USB headset unplugged).
    public var fallbackInputDevice: NodeAudioInput?
    /// What to play to if the output fails mid-call.
    public var fallbackOutputDevice: NodeAudioOutput?
    /// Makes the input device (not its fallback) fail when thrown, as an unplugged headset
    /// does: for a simulation.
    @_spi(Simulation) public var inputFailure: DeviceFailureSwitch?

    public init(input: NodeAudioInput = .tone(440), output: NodeAudioOutput = .null, speaker: NodeAudioOutput? = nil,
                period: Duration = .milliseconds(10)) {
        self.input = input
        self.output = output
        self.speaker = speaker
        self.period = period
    }

    /// ALSA devices share ALSA's namespace (so two sessions on one card interrupt each other);
    /// files and tones are private to this backend.
    public var deviceNamespace: String {
        if case .alsa = input { return "alsa" }
        if case .alsa = output { return "alsa" }
        if case .alsa = speaker { return "alsa" }
        if case .alsa = fallbackInputDevice { return "alsa" }
        if case .alsa = fallbackOutputDevice { return "alsa" }
        return "callnode.io.\(input).\(output)"
    }

    public func availableRoutes() -> [AudioRoute] {
        var routes = [AudioRoute(name: input.description, label: "node input", isInput: true, isOutput: false),
                      AudioRoute(name: output.description, label: "node output", isInput: false, isOutput: true)]
        if let speaker, speaker != output {
            routes.append(AudioRoute(name: speaker.description, label: "node speaker", isInput: false, isOutput: true))
        }
        if let fallback = fallbackInputDevice, fallback != input {
            routes.append(AudioRoute(name: fallback.description, label: "node fallback input", isInput: true, isOutput: false))
        }
        if let fallback = fallbackOutputDevice, fallback != output, fallback != speaker {
            routes.append(AudioRoute(name: fallback.description, label: "node fallback output", isInput: false, isOutput: true))
        }
        return routes
    }

    /// Voice processing is on by default when the microphone is a real device.
    public var prefersVoiceProcessing: Bool {
        if case .alsa = input { return true }
        return false
    }

    public var fallbackInput: String? { fallbackInputDevice?.description }
    public var fallbackOutput: String? { fallbackOutputDevice?.description }

    public var defaultInput: String { input.description }
    public var defaultOutput: String { output.description }
    public var speakerOutput: String { (speaker ?? output).description }

    public func makeCapture(device: String, format: AudioFormat, mode: AudioSessionMode) -> any AudioSource {
        let source = makeCaptureDevice(device: device, format: format, mode: mode)
        if let inputFailure, (NodeAudioInput(spec: device) ?? input) == input { return FailingSource(source, when: inputFailure) }
        return source
    }

    private func makeCaptureDevice(device: String, format: AudioFormat, mode: AudioSessionMode) -> any AudioSource {
        switch NodeAudioInput(spec: device) ?? input {
        case let .wav(path):
            do {
                let (fileFormat, samples) = try WAV.read(path: path)
                let mono = WAV.monoResampled(samples, from: fileFormat, to: format.sampleRate)
                guard !mono.isEmpty else { return UnavailableSource(error: .unsupportedFormat("\(path) has no audio"), format: format) }
                return WAVFileSource(samples: mono, format: AudioFormat(sampleRate: format.sampleRate, channels: 1), loops: true)
            } catch {
                return UnavailableSource(error: error, format: format)
            }
        case let .tone(hz): return ToneSource(frequency: hz, amplitude: 0.3, format: format)
        case .silence: return SilenceSource(format: format)
        case let .alsa(name): return ALSACaptureSource(device: name, format: format, period: mode == .voiceChat ? period : period * 2)
        }
    }

    public func makePlayback(device: String, format: AudioFormat, mode: AudioSessionMode) -> any AudioSink {
        switch NodeAudioOutput(spec: device) ?? output {
        case let .wav(path): return WAVFileSink(path: path, format: format)
        case .null, .recordings: return NullSink(format: format)  // each call records on its own
        case let .alsa(name): return ALSAPlaybackSink(device: name, format: format, period: mode == .voiceChat ? period : period * 2)
        }
    }
}

/// A switch that makes a device fail for good (``NodeAudioBackend/inputFailure``).
@_spi(Simulation)
public final class DeviceFailureSwitch: Sendable {
    private let reason = Locked<String?>(nil)

    public init() {}

    /// The device fails from now on, for `why`.
    public func fail(_ why: String) { reason.withLock { $0 = $0 ?? why } }

    /// Why the device failed (nil: it works).
    public var failure: String? { reason.withLock { $0 } }
}

/// A device that works until its switch is thrown, then reads silence and says why.
final class FailingSource: AudioSource {
    private let device: any AudioSource
    private let failing: DeviceFailureSwitch

    init(_ device: any AudioSource, when failing: DeviceFailureSwitch) {
        self.device = device
        self.failing = failing
    }

    var format: AudioFormat { device.format }
    func start() throws(AudioDeviceError) {
        if let failure = failing.failure { throw .failed(failure) }
        try device.start()
    }
    func stop() { device.stop() }
    func read(into frame: inout [Int16]) -> Bool {
        guard failing.failure == nil else { return false }
        return device.read(into: &frame)
    }
    func skip(samples: Int) { device.skip(samples: samples) }
    var failure: String? { failing.failure }
    var canFail: Bool { true }
}

/// A capture endpoint that could not be made (a WAV file that does not read): opening it
/// fails with the reason, so the session's activation reports it.
final class UnavailableSource: AudioSource {
    let error: AudioDeviceError
    let format: AudioFormat
    init(error: AudioDeviceError, format: AudioFormat) {
        self.error = error
        self.format = format
    }
    func start() throws(AudioDeviceError) { throw error }
    func stop() {}
    func read(into frame: inout [Int16]) -> Bool { false }
}

/// A stand-in for a node's audio session, for the ownership study only.
///
/// Package access: no embedder can plug one in, so a node built outside this package always
/// takes its calls' endpoints from its own ``AudioSessionOwner``, activated by its one owner.
/// The node tells the stand-in the two moments the classic CallKit bug is made of — the app's
/// answer action (where a careless app activates audio itself) and the provider's activation —
/// and builds each call's media on the endpoints it hands out. The test kit's deliberately
/// unsafe session implements it, to replay the bug on whole nodes.
package protocol AudioOwnerStandIn: Sendable {
    /// The node performs an answer action (before any signaling for it).
    func answerActionPerformed() async
    /// The session's owner activated it (the manager's `didActivate`), before media starts.
    func providerDidActivate() async
    /// The endpoints a call's media reads and plays.
    func callEndpoints() async throws -> (microphone: any AudioSource, output: any AudioSink)
}
