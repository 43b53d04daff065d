import Locking
import Media

/// A deliberately unsafe audio session, to replay the bug CallNode's ownership rule prevents.
///
/// Both the app and the provider may activate it, as with CallKit when an app activates its
/// audio session itself and the system activates it again once the answer is fulfilled. Each
/// activation re-opens the devices, and endpoints handed out before a later activation stay on
/// the devices it closed: the call connects, packets flow, and the microphone delivers nothing.
/// ``AudioSessionOwner`` cannot be driven into this (its system-owned sessions have no public
/// activation at all); this type exists only in the test kit, for the study and its tests.
public final class UnsafeDoubleActivationSession: Sendable {
    private let microphoneDevice: ManualAudioEndpoint
    private let speakerDevice: ManualAudioEndpoint
    /// How many activations ran; which one the devices are open for now.
    private let generation = Locked(0)

    /// - Parameters: the devices behind the session (manual rendering: the test pushes
    ///   microphone audio and pulls what is played).
    public init(microphone: ManualAudioEndpoint, speaker: ManualAudioEndpoint) {
        microphoneDevice = microphone
        speakerDevice = speaker
    }

    /// The app activates the session itself (in its answer action): the mistake.
    public func appActivate() { generation.withLock { $0 += 1 } }

    /// The provider activates it when the answer is fulfilled, as it always does.
    public func providerActivate() { generation.withLock { $0 += 1 } }

    /// How many times the session was activated.
    public var activations: Int { generation.withLock { $0 } }

    /// The microphone as the current activation opened it.
    public func microphone() -> any AudioSource {
        Endpoint(device: microphoneDevice, generation: generation, opened: generation.withLock { $0 })
    }

    /// The speaker as the current activation opened it.
    public func output() -> any AudioSink {
        Endpoint(device: speakerDevice, generation: generation, opened: generation.withLock { $0 })
    }

    /// An endpoint bound to the activation that opened it: once the session is activated again,
    /// its device is gone and it reads silence and plays nothing.
    private final class Endpoint: AudioSource, AudioSink {
        let device: ManualAudioEndpoint
        let generation: Locked<Int>
        let opened: Int
        var format: AudioFormat { device.format }

        init(device: ManualAudioEndpoint, generation: Locked<Int>, opened: Int) {
            self.device = device
            self.generation = generation
            self.opened = opened
        }

        private var isCurrent: Bool { generation.withLock { $0 == opened } }

        func start() throws(AudioDeviceError) {}
        func stop() {}

        func read(into frame: inout [Int16]) -> Bool {
            guard isCurrent else {
                for i in frame.indices { frame[i] = 0 }
                return true
            }
            return device.read(into: &frame)
        }

        func write(_ frame: [Int16]) {
            if isCurrent { device.write(frame) }
        }
    }
}
