import Media
import Locking

/// The devices an active session opened, shared with the endpoints it hands to media.
///
/// The session opens and closes devices; media only reads and writes through
/// ``SessionSource`` and ``SessionSink``, whose `start`/`stop` attach to the session instead
/// of opening anything. So media can neither open a device twice nor close one the session
/// still owns, and the session knows how many media endpoints are running.
final class SessionDevices: Sendable {
    struct Open {
        var capture: (any AudioSource)?
        var playback: (any AudioSink)?
        /// Echo cancellation, noise suppression and gain control on the capture, fed with the
        /// playback as its echo reference.
        var processor: VoiceProcessor?
        /// Audio the app supplies, mixed with or instead of the microphone.
        var custom: (source: any AudioSource, mixing: CustomCaptureMixing)?
        var runningSources = 0
        var runningSinks = 0
    }
    let state = Locked(Open())

    var running: Int { state.withLock { $0.runningSources + $0.runningSinks } }

    /// Counts one more running media endpoint, if the device it needs is open.
    func attach(capture: Bool) -> AudioDeviceError? {
        state.withLock { open in
            if capture {
                guard open.capture != nil else {
                    return .failed("the audio session has no microphone open: media starts after the session is activated (didActivate), in a category with a microphone")
                }
                open.runningSources += 1
            } else {
                guard open.playback != nil else {
                    return .failed("the audio session has no output open: media starts after the session is activated (didActivate), in a category with output")
                }
                open.runningSinks += 1
            }
            return nil
        }
    }

    func detach(capture: Bool) {
        state.withLock { open in
            if capture { open.runningSources -= 1 } else { open.runningSinks -= 1 }
        }
    }
}

/// Whether one media endpoint is attached to the session's devices (attached at most once).
final class SessionAttachment: Sendable {
    private let devices: SessionDevices
    private let capture: Bool
    private let attached = Locked(false)

    init(devices: SessionDevices, capture: Bool) {
        self.devices = devices
        self.capture = capture
    }

    func start() throws(AudioDeviceError) {
        let failure: AudioDeviceError? = attached.withLock { attached in
            guard !attached else { return nil }
            if let failure = devices.attach(capture: capture) { return failure }
            attached = true
            return nil
        }
        if let failure { throw failure }
    }

    func stop() {
        attached.withLock { attached in
            guard attached else { return }
            attached = false
            devices.detach(capture: capture)
        }
    }
}

/// The session's microphone, as media sees it. Reads give silence while the session has no
/// capture device open (interrupted or deactivated by the system), never stale audio.
public final class SessionSource: AudioSource {
    public let format: AudioFormat
    private let devices: SessionDevices
    private let attachment: SessionAttachment

    init(devices: SessionDevices, format: AudioFormat) {
        self.devices = devices
        self.format = format
        attachment = SessionAttachment(devices: devices, capture: true)
    }

    /// Attaches to the session's open capture device.
    /// - Throws: ``AudioDeviceError/failed(_:)`` when the session has no microphone open.
    public func start() throws(AudioDeviceError) { try attachment.start() }
    public func stop() { attachment.stop() }

    public func read(into frame: inout [Int16]) -> Bool {
        let (capture, processor, custom) = devices.state.withLock { ($0.capture, $0.processor, $0.custom) }
        if let capture {
            _ = capture.read(into: &frame)  // read even when replaced, so the device never backs up
            processor?.process(&frame)
        } else {
            for index in frame.indices { frame[index] = 0 }
        }
        if let custom {
            switch custom.mixing {
            case .replace:
                if !custom.source.read(into: &frame) { for index in frame.indices { frame[index] = 0 } }
            case let .mix(microphoneGain, customGain):
                var supplied = [Int16](repeating: 0, count: frame.count)
                let more = custom.source.read(into: &supplied)
                for index in frame.indices {
                    let sum = Float(frame[index]) * microphoneGain + (more ? Float(supplied[index]) * customGain : 0)
                    frame[index] = Int16(max(-32_768, min(32_767, sum.rounded())))
                }
            }
        }
        return true  // a device never ends; the session may swap it for another route
    }

    public func skip(samples: Int) {
        let (capture, custom) = devices.state.withLock { ($0.capture, $0.custom) }
        capture?.skip(samples: samples)
        custom?.source.skip(samples: samples)
    }
}

/// The session's output, as media sees it. Writes are dropped while no playback device is open.
public final class SessionSink: AudioSink {
    public let format: AudioFormat
    private let devices: SessionDevices
    private let attachment: SessionAttachment

    init(devices: SessionDevices, format: AudioFormat) {
        self.devices = devices
        self.format = format
        attachment = SessionAttachment(devices: devices, capture: false)
    }

    /// Attaches to the session's open playback device.
    /// - Throws: ``AudioDeviceError/failed(_:)`` when the session has no output open.
    public func start() throws(AudioDeviceError) { try attachment.start() }
    public func stop() { attachment.stop() }

    public func write(_ frame: [Int16]) {
        let (playback, processor) = devices.state.withLock { ($0.playback, $0.processor) }
        guard let playback else { return }
        playback.write(frame)
        processor?.playback(frame)  // the echo reference: what the speaker is about to play
    }

    public func fillSkipped(samples: Int) {
        devices.state.withLock { $0.playback }?.fillSkipped(samples: samples)
    }
}

/// How app-supplied capture audio (``AudioSessionOwner/setCustomCapture(_:mixing:)``) combines
/// with the microphone.
public enum CustomCaptureMixing: Sendable, Equatable {
    /// The app's audio instead of the microphone (the microphone keeps running, unheard).
    case replace
    /// Both, each scaled (1 = unchanged), summed with saturation.
    case mix(microphoneGain: Float = 1, customGain: Float = 1)
}
