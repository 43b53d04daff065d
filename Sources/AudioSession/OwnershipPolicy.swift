import AudioDevices
import Clocks

// Who may activate the session, in its type: the two policies and the activation path each
// opens (the app's ``AudioSessionOwner/activate()``, the provider's package API).

/// Who may activate an audio session. The policy is part of the owner's type, so the
/// activation API exists only where the policy allows it.
public protocol AudioOwnershipPolicy: Sendable {
    static var label: String { get }
}

/// CallKit mode (the default for a call node): only the call provider activates the session,
/// after a start or answer action is fulfilled, and deactivates it after the last call ends.
/// `AudioSessionOwner<SystemOwned>` has no public `activate()`: the app configures the session
/// and starts media when it sees `didActivate`.
public enum SystemOwned: AudioOwnershipPolicy {
    public static var label: String { "system-owned" }
}

/// CallKit-free mode: the app activates and deactivates the session itself.
public enum AppOwned: AudioOwnershipPolicy {
    public static var label: String { "app-owned" }
}

extension AudioSessionOwner where Policy == AppOwned {
    /// An app-owned session: the app calls ``activate()`` and ``deactivate()`` itself.
    ///
    /// - Parameters:
    ///   - backend: Where devices come from (ALSA by default; ``ManualRenderingBackend`` for
    ///     manual rendering).
    ///   - clock: Clock for route polling.
    public init(name: String = "app audio session", configuration: AudioSessionConfiguration = AudioSessionConfiguration(),
                backend: any AudioDeviceBackend = ALSADeviceBackend(), clock: TimerClock = .continuous) {
        self.init(sessionName: name, configuration: configuration, backend: backend, clock: clock)
    }

    /// Opens the configured devices.
    ///
    /// - Throws: ``AudioSessionError/alreadyActive``, ``AudioSessionError/interrupted(by:)``, or
    ///   ``AudioSessionError/device(_:)`` when a device cannot be opened (nothing stays open).
    @discardableResult
    public func activate() async throws(AudioSessionError) -> ActiveAudioRoute {
        try await performActivate()
    }

    /// Closes the devices.
    ///
    /// - Throws: ``AudioSessionError/mediaRunning(endpoints:)`` while media still uses the
    ///   session's endpoints (stop the media first), ``AudioSessionError/notActive``.
    public func deactivate() async throws(AudioSessionError) {
        try await performDeactivate(force: false)
    }
}

extension AudioSessionOwner where Policy == SystemOwned {
    /// A system-owned session, to hand to a ``CallManager``: the provider activates it after a
    /// start or answer action is fulfilled and deactivates it after the last call ends. The app
    /// configures it and starts media on `didActivate`; there is no activation API for the app.
    public init(name: String = "call audio session", configuration: AudioSessionConfiguration = AudioSessionConfiguration(),
                backend: any AudioDeviceBackend = ALSADeviceBackend(), clock: TimerClock = .continuous) {
        self.init(sessionName: name, configuration: configuration, backend: backend, clock: clock)
    }

    /// The provider's path: claims the session for one call provider.
    package func attachToProvider() throws(AudioSessionError) { try attachProvider() }

    /// The provider's path: opens the devices.
    package func providerActivate() async throws(AudioSessionError) -> ActiveAudioRoute {
        try await performActivate()
    }

    /// The provider's path: closes the devices, even under running media (the system ends the
    /// call's audio, as CallKit does; media endpoints then read silence).
    package func providerDeactivate() async throws(AudioSessionError) {
        try await performDeactivate(force: true)
    }
}
