import Media
import Synchronization

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
        var runningSources = 0
        var runningSinks = 0
    }
    let state = Mutex(Open())

    var running: Int { state.withLock { $0.runningSources + $0.runningSinks } }
}

/// The session's microphone, as media sees it. Reads give silence while the session has no
/// capture device open (interrupted or deactivated by the system), never stale audio.
public final class SessionSource: AudioSource {
    public let format: AudioFormat
    private let devices: SessionDevices
    private let attached = Mutex(false)

    init(devices: SessionDevices, format: AudioFormat) {
        self.devices = devices
        self.format = format
    }

    /// Attaches to the session's open capture device.
    /// - Throws: ``AudioDeviceError/failed(_:)`` when the session has no microphone open.
    public func start() throws(AudioDeviceError) {
        let result: AudioDeviceError? = attached.withLock { attached in
            if attached { return nil }
            return devices.state.withLock { open in
                guard open.capture != nil else {
                    return .failed("the audio session has no microphone open: media starts after the session is activated (didActivate), in a category with a microphone")
                }
                open.runningSources += 1
                attached = true
                return nil
            }
        }
        if let result { throw result }
    }

    public func stop() {
        attached.withLock { attached in
            guard attached else { return }
            attached = false
            devices.state.withLock { $0.runningSources -= 1 }
        }
    }

    public func read(into frame: inout [Int16]) -> Bool {
        let capture = devices.state.withLock { $0.capture }
        guard let capture else {
            for index in frame.indices { frame[index] = 0 }
            return true
        }
        _ = capture.read(into: &frame)
        return true  // a device never ends; the session may swap it for another route
    }
}

/// The session's output, as media sees it. Writes are dropped while no playback device is open.
public final class SessionSink: AudioSink {
    public let format: AudioFormat
    private let devices: SessionDevices
    private let attached = Mutex(false)

    init(devices: SessionDevices, format: AudioFormat) {
        self.devices = devices
        self.format = format
    }

    public func start() throws(AudioDeviceError) {
        let result: AudioDeviceError? = attached.withLock { attached in
            if attached { return nil }
            return devices.state.withLock { open in
                guard open.playback != nil else {
                    return .failed("the audio session has no output open: media starts after the session is activated (didActivate), in a category with output")
                }
                open.runningSinks += 1
                attached = true
                return nil
            }
        }
        if let result { throw result }
    }

    public func stop() {
        attached.withLock { attached in
            guard attached else { return }
            attached = false
            devices.state.withLock { $0.runningSinks -= 1 }
        }
    }

    public func write(_ frame: [Int16]) {
        devices.state.withLock { $0.playback }?.write(frame)
    }
}
