import AudioDevices


/// What the session is for: which directions it opens.
public enum AudioSessionCategory: String, Sendable, CaseIterable, CustomStringConvertible {
    /// Microphone and output: a call.
    case playAndRecord
    /// Output only (announcements, ringtones, listen-only calls). There is no microphone.
    case playback
    /// Microphone only.
    case record

    /// Whether activation opens a capture device.
    public var hasMicrophone: Bool { self != .playback }
    /// Whether activation opens a playback device.
    public var hasOutput: Bool { self != .record }
    public var description: String { rawValue }
}

/// How the session's audio is processed.
public enum AudioSessionMode: String, Sendable, CaseIterable {
    /// Two-way voice: the device endpoints are tuned for low latency.
    case voiceChat
    /// No particular tuning.
    case `default`
}

/// Options of a category, as in `AVAudioSession.CategoryOptions`.
public struct AudioSessionOptions: OptionSet, Sendable, Hashable {
    public let rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }
    /// In play-and-record, output goes to the speaker route unless the app prefers another.
    public static let defaultToSpeaker = AudioSessionOptions(rawValue: 1)
    /// Activation does not interrupt other sessions on the same devices.
    public static let mixWithOthers = AudioSessionOptions(rawValue: 2)
}

/// Where output goes regardless of the preferred route.
public enum AudioOutputOverride: String, Sendable {
    /// The preferred output, or the backend's default output.
    case none
    /// The backend's speaker device.
    case speaker
}

/// Everything an app may set on the session, at any time (applied at the next activation, or
/// at once when it changes which devices an active session uses).
public struct AudioSessionConfiguration: Sendable, Equatable {
    public var category: AudioSessionCategory
    public var mode: AudioSessionMode
    public var options: AudioSessionOptions
    /// ALSA PCM name of the preferred microphone; `nil` uses the backend's default input.
    public var preferredInput: String?
    /// ALSA PCM name of the preferred output; `nil` uses the backend's default output.
    public var preferredOutput: String?
    public var outputOverride: AudioOutputOverride
    /// PCM format of the opened endpoints (mono 48 kHz by default).
    public var format: AudioFormat

    public init(category: AudioSessionCategory = .playAndRecord, mode: AudioSessionMode = .voiceChat,
                options: AudioSessionOptions = [], preferredInput: String? = nil, preferredOutput: String? = nil,
                outputOverride: AudioOutputOverride = .none, format: AudioFormat = AudioFormat()) {
        self.category = category
        self.mode = mode
        self.options = options
        self.preferredInput = preferredInput
        self.preferredOutput = preferredOutput
        self.outputOverride = outputOverride
        self.format = format
    }
}

/// A device the session can use.
public struct AudioRoute: Sendable, Hashable, CustomStringConvertible {
    /// The ALSA PCM name (`default`, `pulse`, `hw:CARD=PCH,DEV=0`, …) or a manual endpoint's name.
    public var name: String
    /// Human-readable description from the device hints.
    public var label: String
    public var isInput: Bool
    public var isOutput: Bool

    public init(name: String, label: String = "", isInput: Bool, isOutput: Bool) {
        self.name = name
        self.label = label
        self.isInput = isInput
        self.isOutput = isOutput
    }
    public var description: String { label.isEmpty ? name : "\(name) (\(label))" }
}

/// The devices an active session opened.
public struct ActiveAudioRoute: Sendable, Equatable {
    /// The capture device, or `nil` when the category has no microphone.
    public var input: String?
    /// The playback device, or `nil` when the category has no output.
    public var output: String?
    public init(input: String?, output: String?) {
        self.input = input
        self.output = output
    }
}

/// Why the set of routes changed.
public enum AudioRouteChangeReason: Sendable, Equatable {
    case newDeviceAvailable(AudioRoute)
    case oldDeviceUnavailable(AudioRoute)
    /// The output override or preferred devices changed the active route.
    case override
    case categoryChange
}

/// What an ``AudioSessionOwner`` reports.
public enum AudioSessionEvent: Sendable, Equatable {
    /// The session opened its devices. In system-owned mode this is CallKit's `didActivate`:
    /// the moment to start media, and the only one.
    case didActivate(ActiveAudioRoute)
    /// The session closed its devices (`didDeactivate`).
    case didDeactivate
    case routeChanged(AudioRouteChangeReason)
    /// Another session took a device this one had open; its devices are closed.
    case interruptionBegan(by: String)
    /// The other session let go. The owner may activate again.
    case interruptionEnded(shouldResume: Bool)
    case configurationChanged(AudioSessionConfiguration)
    /// A device in use failed mid-call and no fallback would open (the message names it and
    /// says why): the session goes on without it, and calls that need it cannot.
    case deviceFailed(String)
}

/// Misuse of the audio session and device failures, each with a message a developer can act on.
public enum AudioSessionError: Error, Sendable, Equatable, CustomStringConvertible {
    /// `activate()` on a session that is already active.
    case alreadyActive
    /// `deactivate()` on a session that is not active.
    case notActive
    /// Deactivation while media still uses the session's endpoints.
    case mediaRunning(endpoints: Int)
    /// Activation while another session holds the devices.
    case interrupted(by: String)
    /// The category has no microphone and automatic configuration is off.
    case noMicrophone(AudioSessionCategory)
    /// The category has no output.
    case noOutput(AudioSessionCategory)
    /// A system-owned session already has its provider.
    case providerAlreadyAttached
    /// A device could not be opened.
    case device(AudioDeviceError)

    public var description: String {
        switch self {
        case .alreadyActive:
            "the audio session is already active: activate it once, and only where the owner of the session does (in CallKit mode that is the provider, which reports didActivate)"
        case .notActive:
            "the audio session is not active, so there is nothing to deactivate"
        case let .mediaRunning(count):
            "cannot deactivate the audio session while media uses it (\(count) endpoint(s) running): stop the call's media first"
        case let .interrupted(by):
            "the audio session is interrupted by \(by): wait for interruptionEnded before activating"
        case let .noMicrophone(category):
            "the audio session category '\(category)' has no microphone: set the category to playAndRecord or record (or enable automatic configuration) before starting capture"
        case let .noOutput(category):
            "the audio session category '\(category)' has no output: set the category to playAndRecord or playback before starting playback"
        case .providerAlreadyAttached:
            "this system-owned audio session already belongs to a call provider; give each provider its own session"
        case let .device(error):
            "the audio session could not open its device: \(error)"
        }
    }
}
