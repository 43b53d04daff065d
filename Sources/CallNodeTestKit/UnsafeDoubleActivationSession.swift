import CallNode
import Locking

/// A deliberately unsafe audio session, to replay the bug CallNode's ownership rule prevents.
///
/// Both the app and the provider may activate it, as with CallKit when an app activates its
/// audio session itself and the system activates it again once the answer is fulfilled. Each
/// activation re-opens the devices, and endpoints opened under an earlier activation stay on
/// the devices a later one closed: the call connects, packets flow, and the microphone
/// delivers nothing. ``AudioSessionOwner`` cannot be driven into this (its system-owned sessions
/// have no public activation at all); this type exists only in the test kit, for the study and
/// its tests.
///
/// On whole nodes (``InMemoryNodes``) it stands in for the node's session through the node's
/// package-only `audioStandIn`: with ``Flow/appAndProvider`` the node's answer action activates
/// it (the careless app) before the provider does; with ``Flow/providerOnly`` only the provider
/// does — the same session, the same endpoints, one activation fewer.
public final class UnsafeDoubleActivationSession: Sendable {
    /// Who activates the session when it stands in for a node's.
    public enum Flow: Sendable {
        /// The classic bug: the app activates in its answer action, and the provider again
        /// when the answer is fulfilled.
        case appAndProvider
        /// Only the provider activates: what ``AudioSessionOwner`` enforces.
        case providerOnly
    }

    private let microphoneDevice: any AudioSource
    private let speakerDevice: any AudioSink
    private let flow: Flow
    /// How many activations ran; which one the devices are open for now.
    private let generation = Locked(0)

    /// - Parameters:
    ///   - microphone, speaker: the devices behind the session (a ``ManualAudioEndpoint`` lets
    ///     the test push microphone audio and pull what is played; a ``ToneSource`` plays a tone).
    ///   - flow: who activates it when it stands in for a node's session.
    public init(microphone: any AudioSource, speaker: any AudioSink, flow: Flow = .appAndProvider) {
        microphoneDevice = microphone
        speakerDevice = speaker
        self.flow = flow
    }

    /// The app activates the session itself (in its answer action): the mistake.
    public func appActivate() { generation.withLock { $0 += 1 } }

    /// The provider activates it when the answer is fulfilled, as it always does.
    public func providerActivate() { generation.withLock { $0 += 1 } }

    /// How many times the session was activated.
    public var activations: Int { generation.withLock { $0 } }

    /// The activation an endpoint handed out now belongs to: the current one, or the first one
    /// to come when the session was not activated yet (media is built before it starts).
    private var openingGeneration: Int { generation.withLock { max(1, $0) } }

    /// The microphone as the current activation opened it.
    public func microphone() -> any AudioSource {
        SourceEndpoint(device: microphoneDevice, generation: generation, opened: openingGeneration)
    }

    /// The speaker as the current activation opened it.
    public func output() -> any AudioSink {
        SinkEndpoint(device: speakerDevice, generation: generation, opened: openingGeneration)
    }

    /// A microphone bound to the activation that opened it: once the session is activated
    /// again, its device is gone and it reads silence.
    private final class SourceEndpoint: AudioSource {
        let device: any AudioSource
        let generation: Locked<Int>
        let opened: Int
        var format: AudioFormat { device.format }

        init(device: any AudioSource, generation: Locked<Int>, opened: Int) {
            self.device = device
            self.generation = generation
            self.opened = opened
        }

        func start() throws(AudioDeviceError) { try device.start() }
        func stop() { device.stop() }

        func read(into frame: inout [Int16]) -> Bool {
            guard generation.withLock({ $0 == opened }) else {
                for i in frame.indices { frame[i] = 0 }
                return true
            }
            return device.read(into: &frame)
        }
    }

    /// A speaker bound to the activation that opened it: later, it plays nothing.
    private final class SinkEndpoint: AudioSink {
        let device: any AudioSink
        let generation: Locked<Int>
        let opened: Int
        var format: AudioFormat { device.format }

        init(device: any AudioSink, generation: Locked<Int>, opened: Int) {
            self.device = device
            self.generation = generation
            self.opened = opened
        }

        func start() throws(AudioDeviceError) { try device.start() }
        func stop() { device.stop() }

        func write(_ frame: [Int16]) {
            if generation.withLock({ $0 == opened }) { device.write(frame) }
        }
    }
}

extension UnsafeDoubleActivationSession: AudioOwnerStandIn {
    package func answerActionPerformed() async {
        if flow == .appAndProvider { appActivate() }
    }

    package func providerDidActivate() async { providerActivate() }

    package func callEndpoints() async throws -> (microphone: any AudioSource, output: any AudioSink) {
        (microphone(), output())
    }
}
