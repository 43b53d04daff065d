internal import CALSA
import AudioDevices

import Locking

#if canImport(Glibc)
import Glibc
#endif

/// Where an audio session finds and opens devices.
///
/// ``ALSADeviceBackend`` is the real one; ``ManualRenderingBackend`` has no devices at all (the
/// embedder pushes and pulls PCM).
public protocol AudioDeviceBackend: Sendable {
    /// Names the set of devices this backend opens: sessions interrupt each other only on the
    /// same device of the same namespace (all ALSA backends share one; each manual backend is
    /// its own).
    var deviceNamespace: String { get }
    /// What the backend can open now. Polled for route changes; must be quick.
    func availableRoutes() -> [AudioRoute]
    /// Input used when the configuration prefers none.
    var defaultInput: String { get }
    /// Output used when the configuration prefers none.
    var defaultOutput: String { get }
    /// Output used with ``AudioOutputOverride/speaker`` or ``AudioSessionOptions/defaultToSpeaker``.
    var speakerOutput: String { get }
    /// A capture endpoint for `device`, not yet started.
    func makeCapture(device: String, format: AudioFormat, mode: AudioSessionMode) -> any AudioSource
    /// A playback endpoint for `device`, not yet started.
    func makePlayback(device: String, format: AudioFormat, mode: AudioSessionMode) -> any AudioSink
    /// Whether voice processing is on by default: yes for real microphones and speakers, no
    /// for files, tones and manual rendering (the default).
    var prefersVoiceProcessing: Bool { get }
    /// The input to fall back to when the one in use fails mid-call (before the default).
    var fallbackInput: String? { get }
    /// The output to fall back to when the one in use fails mid-call (before the default).
    var fallbackOutput: String? { get }
}

extension AudioDeviceBackend {
    public var prefersVoiceProcessing: Bool { false }
    public var fallbackInput: String? { nil }
    public var fallbackOutput: String? { nil }

    /// A playback endpoint tuned for voice chat.
    public func makePlayback(device: String, format: AudioFormat) -> any AudioSink {
        makePlayback(device: device, format: format, mode: .voiceChat)
    }
}

/// Real ALSA devices: routes from ALSA's device hints, endpoints on their own I/O threads.
public struct ALSADeviceBackend: AudioDeviceBackend {
    public var defaultInput: String
    public var defaultOutput: String
    public var speakerOutput: String
    /// Device period in voice-chat mode (how much audio each blocking read or write carries);
    /// the default mode uses twice as long, trading latency for fewer wake-ups.
    public var period: Duration

    public init(defaultInput: String = "default", defaultOutput: String = "default",
                speakerOutput: String = "default", period: Duration = .milliseconds(10)) {
        self.defaultInput = defaultInput
        self.defaultOutput = defaultOutput
        self.speakerOutput = speakerOutput
        self.period = period
    }

    public var deviceNamespace: String { "alsa" }

    public var prefersVoiceProcessing: Bool { true }

    public func availableRoutes() -> [AudioRoute] { Self.deviceHints() }

    public func makeCapture(device: String, format: AudioFormat, mode: AudioSessionMode) -> any AudioSource {
        ALSACaptureSource(device: device, format: format, period: mode == .voiceChat ? period : period * 2)
    }

    public func makePlayback(device: String, format: AudioFormat, mode: AudioSessionMode) -> any AudioSink {
        ALSAPlaybackSink(device: device, format: format, period: mode == .voiceChat ? period : period * 2)
    }

    /// The PCM devices ALSA's configuration names (`snd_device_name_hint`): virtual ones such as
    /// `default`, `null` and `pulse`, and every card's devices. Reads configuration files only.
    public static func deviceHints() -> [AudioRoute] {
        _ = calsa_silence_errors()
        var hints: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
        guard snd_device_name_hint(-1, "pcm", &hints) == 0, let hints else { return [] }
        defer { snd_device_name_free_hint(hints) }
        func hint(_ entry: UnsafeMutableRawPointer, _ id: String) -> String? {
            guard let value = snd_device_name_get_hint(entry, id) else { return nil }
            defer { free(value) }
            return String(cString: value)
        }
        var routes: [AudioRoute] = []
        var index = 0
        while let entry = hints[index] {
            index += 1
            guard let name = hint(entry, "NAME") else { continue }
            let label = (hint(entry, "DESC") ?? "").split(separator: "\n").joined(separator: " — ")
            let direction = hint(entry, "IOID")  // nil means both
            routes.append(AudioRoute(name: name, label: label,
                                     isInput: direction == nil || direction == "Input",
                                     isOutput: direction == nil || direction == "Output"))
        }
        return routes
    }
}

/// No devices: every route is a ``ManualAudioEndpoint`` that the embedder feeds and drains
/// (manual rendering). Routes can be added and removed at run time to exercise route changes.
public final class ManualRenderingBackend: AudioDeviceBackend {
    private let state: Locked<(routes: [AudioRoute], endpoints: [String: ManualAudioEndpoint])>
    public let defaultInput: String
    public let defaultOutput: String
    public let speakerOutput: String

    /// - Parameter routes: Devices to offer; by default one `manual` route in both directions
    ///   and a `speaker` output.
    public init(routes: [AudioRoute] = [AudioRoute(name: "manual", isInput: true, isOutput: true),
                                        AudioRoute(name: "speaker", isInput: false, isOutput: true)],
                defaultInput: String = "manual", defaultOutput: String = "manual", speakerOutput: String = "speaker") {
        state = Locked((routes, [:]))
        self.defaultInput = defaultInput
        self.defaultOutput = defaultOutput
        self.speakerOutput = speakerOutput
    }

    public var deviceNamespace: String { "manual-\(UInt(bitPattern: ObjectIdentifier(self).hashValue))" }

    public func availableRoutes() -> [AudioRoute] { state.withLock { $0.routes } }

    /// Offers another device (a route change for sessions that poll).
    public func add(_ route: AudioRoute) { state.withLock { $0.routes.append(route) } }
    /// Takes a device away.
    public func remove(named name: String) { state.withLock { $0.routes.removeAll { $0.name == name } } }

    /// The endpoint behind `device`: push capture audio into it, pull what was played.
    public func endpoint(_ device: String, format: AudioFormat = AudioFormat()) -> ManualAudioEndpoint {
        state.withLock { state in
            if let existing = state.endpoints[device] { return existing }
            let made = ManualAudioEndpoint(format: format)
            state.endpoints[device] = made
            return made
        }
    }

    public func makeCapture(device: String, format: AudioFormat, mode: AudioSessionMode) -> any AudioSource {
        ManualDeviceEndpoint(endpoint: endpoint(device, format: format), present: { [weak self] in
            self?.availableRoutes().contains { $0.name == device && $0.isInput } ?? false
        }, device: device)
    }

    public func makePlayback(device: String, format: AudioFormat, mode: AudioSessionMode) -> any AudioSink {
        ManualDeviceEndpoint(endpoint: endpoint(device, format: format), present: { [weak self] in
            self?.availableRoutes().contains { $0.name == device && $0.isOutput } ?? false
        }, device: device)
    }
}

/// A manual endpoint that refuses to open when its route is not offered, as a real device would.
final class ManualDeviceEndpoint: AudioSource, AudioSink {
    var failure: String? { nil }
    var canFail: Bool { false }
    let endpoint: ManualAudioEndpoint
    let present: @Sendable () -> Bool
    let device: String
    var format: AudioFormat { endpoint.format }

    init(endpoint: ManualAudioEndpoint, present: @escaping @Sendable () -> Bool, device: String) {
        self.endpoint = endpoint
        self.present = present
        self.device = device
    }

    func start() throws(AudioDeviceError) {
        guard present() else { throw .notFound("manual route '\(device)' is not offered") }
    }
    func stop() {}
    func read(into frame: inout [Int16]) -> Bool { endpoint.read(into: &frame) }
    func write(_ frame: [Int16]) { endpoint.write(frame) }
}
