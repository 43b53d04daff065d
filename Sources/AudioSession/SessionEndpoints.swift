import AudioDevices
import VoiceProcessing
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
        /// Every call's port: the capture copied to each, their playback summed.
        var bridge = AudioBridge()
        /// What the bridge released for the output, kept (and emptied after each write) so a
        /// frame's playback allocates nothing.
        var outputs: [AudioBridge.Output] = []
    }
    let state = Locked(Open())

    /// A new port on the bridge, removed when the returned handle goes away.
    func makePort() -> BridgePortHandle {
        BridgePortHandle(devices: self, id: state.withLock { $0.bridge.addPort() })
    }

    /// Writes what the bridge released to the open output (and the echo reference). Called
    /// under the lock, so the device sees the bridge's timeline in order.
    static func play(_ outputs: [AudioBridge.Output], in open: Open) {
        guard let playback = open.playback else { return }
        for output in outputs {
            switch output {
            case let .play(samples):
                playback.write(samples)
                open.processor?.playback(samples)
            case let .skipped(count):
                playback.fillSkipped(samples: count)
            }
        }
    }

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

/// A port on the session's bridge, shared by one call's source and sink; the port goes when
/// both do.
public final class BridgePortHandle: Sendable {
    /// The port, for ``AudioSessionOwner/setMode(_:of:)`` and conferences.
    public let id: BridgePortID
    let devices: SessionDevices

    init(devices: SessionDevices, id: BridgePortID) {
        self.devices = devices
        self.id = id
    }

    deinit {
        devices.state.withLock { open in
            SessionDevices.play(open.bridge.removePort(id), in: open)
        }
    }
}

/// One call's microphone and output on the session's bridge.
public struct SessionPort: Sendable {
    public let source: SessionSource
    public let sink: SessionSink
    public var id: BridgePortID { source.port.id }
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
    /// The bridge port this source reads from.
    public let port: BridgePortHandle
    private var devices: SessionDevices { port.devices }
    private let attachment: SessionAttachment

    init(port: BridgePortHandle, format: AudioFormat) {
        self.port = port
        self.format = format
        attachment = SessionAttachment(devices: port.devices, capture: true)
    }

    /// Attaches to the session's open capture device.
    /// - Throws: ``AudioDeviceError/failed(_:)`` when the session has no microphone open.
    public func start() throws(AudioDeviceError) { try attachment.start() }
    public func stop() {
        attachment.stop()
        let id = port.id
        _ = devices.state.withLock { $0.bridge.pause(id, capture: true) }
    }

    public func read(into frame: inout [Int16]) -> Bool {
        let id = port.id
        devices.state.withLock { open in
            let (capture, processor, custom) = (open.capture, open.processor, open.custom)
            open.bridge.read(id, into: &frame) { fresh in
                Self.capture(into: &fresh, capture: capture, processor: processor, custom: custom)
            }
        }
        return true  // a device never ends; the session may swap it for another route
    }

    /// Fresh samples for the bridge: the microphone (processed), the app's audio, or both.
    private static func capture(into frame: inout [Int16], capture: (any AudioSource)?, processor: VoiceProcessor?,
                                custom: (source: any AudioSource, mixing: CustomCaptureMixing)?) {
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
    }

    public func skip(samples: Int) {
        let id = port.id
        devices.state.withLock { open in
            let (capture, custom) = (open.capture, open.custom)
            open.bridge.skipCapture(id, count: samples) { count in
                capture?.skip(samples: count)
                custom?.source.skip(samples: count)
            }
        }
    }
}

/// The session's output, as media sees it. Writes are dropped while no playback device is open.
public final class SessionSink: AudioSink {
    public let format: AudioFormat
    /// The bridge port this sink plays into.
    public let port: BridgePortHandle
    private var devices: SessionDevices { port.devices }
    private let attachment: SessionAttachment

    init(port: BridgePortHandle, format: AudioFormat) {
        self.port = port
        self.format = format
        attachment = SessionAttachment(devices: port.devices, capture: false)
    }

    /// Attaches to the session's open playback device.
    /// - Throws: ``AudioDeviceError/failed(_:)`` when the session has no output open.
    public func start() throws(AudioDeviceError) { try attachment.start() }
    public func stop() {
        attachment.stop()
        let id = port.id
        devices.state.withLock { open in SessionDevices.play(open.bridge.pause(id, capture: false), in: open) }
    }

    /// Adds the frame to the bridge's mix; what every port has played goes to the output
    /// (and to the echo canceller as its reference: what the speaker is about to play).
    public func write(_ frame: [Int16]) {
        let id = port.id
        devices.state.withLock { open in
            guard open.playback != nil else { return }
            open.bridge.write(id, frame, into: &open.outputs)
            SessionDevices.play(open.outputs, in: open)
            open.outputs.removeAll(keepingCapacity: true)
        }
    }

    public func fillSkipped(samples: Int) {
        let id = port.id
        devices.state.withLock { open in
            guard open.playback != nil else { return }
            SessionDevices.play(open.bridge.skipPlayback(id, count: samples), in: open)
        }
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
