import Clocks
import Locking
import AudioDevices
import VoiceProcessing

/// The one owner of the node's audio session: its configuration and its activation (opening
/// the capture and playback devices).
///
/// Configure at any time. Activation is reachable only through the policy's path: the
/// provider's for ``SystemOwned`` (package API the ``CallManager`` uses), ``activate()`` for
/// ``AppOwned``. Misuse the types cannot rule out — activating twice, deactivating under running
/// media, activating during an interruption — throws ``AudioSessionError``.
///
/// Media gets its endpoints from ``microphone()`` and ``output()``: they read and write
/// whatever devices the session has open and never open or close a device themselves.
public actor AudioSessionOwner<Policy: AudioOwnershipPolicy>: InterruptibleSession {
    enum State: Equatable {
        case inactive
        case active(ActiveAudioRoute)
        case interrupted(by: String)
    }

    /// A name for messages and for the sessions this one interrupts.
    public nonisolated let name: String
    public nonisolated let backend: any AudioDeviceBackend
    let broadcaster = EventBroadcaster<AudioSessionEvent>()
    let devices = SessionDevices()
    let clock: TimerClock
    var state: State = .inactive
    var knownRoutes: [AudioRoute]
    private var monitor: Task<Void, Never>?
    /// After ``shutdown()``: nothing starts watching again (a late start had nobody to stop it).
    var isShutDown = false
    /// Whether routes are polled now (``startMonitoringRoutes(every:)``).
    public var isMonitoringRoutes: Bool { monitor != nil }
    /// Watches the open devices for failure while active.
    var healthWatch: Task<Void, Never>?
    /// How often the open devices are checked for failure while active.
    public var deviceCheckInterval: Duration = .milliseconds(100)
    private var providerAttached = false
    /// Set while in manual rendering mode: the backend used instead of ``backend``.
    private var manualBackend: ManualRenderingBackend?
    /// `nil` follows the backend (on for real devices); set by ``setVoiceProcessingEnabled(_:options:)``.
    private var voiceProcessingSetting: Bool?
    /// The capture device kept running between activations (always-prepared recording).
    private var preparedCapture: (device: String, source: any AudioSource)?
    /// The input the open capture device belongs to.
    var openInput: String?

    /// What voice processing does when it is on.
    public private(set) var voiceProcessingOptions = VoiceProcessingOptions()
    /// Whether voice processing is bypassed (see ``setVoiceProcessingBypassed(_:)``).
    public private(set) var isVoiceProcessingBypassed = false
    /// Whether the capture device stays open between calls (see ``setRecordingAlwaysPrepared(_:)``).
    public private(set) var isRecordingAlwaysPrepared = false

    /// The current configuration; change it with ``configure(_:)``.
    public private(set) var configuration: AudioSessionConfiguration
    /// When on (the default), asking for the microphone in a category without one switches the
    /// category to play-and-record; when off, it fails with ``AudioSessionError/noMicrophone(_:)``.
    public private(set) var automaticConfiguration = true

    init(sessionName name: String, configuration: AudioSessionConfiguration, backend: any AudioDeviceBackend, clock: TimerClock) {
        self.name = name
        self.configuration = configuration
        self.backend = backend
        self.clock = clock
        knownRoutes = backend.availableRoutes()
    }

    /// The backend devices come from: ``backend``, or the manual one in manual rendering mode.
    var currentBackend: any AudioDeviceBackend { manualBackend ?? backend }

    /// A new stream of this session's events (each subscriber sees every later event).
    public nonisolated func events() -> AsyncStream<AudioSessionEvent> { broadcaster.subscribe() }

    /// Whether devices are open.
    public var isActive: Bool { if case .active = state { true } else { false } }

    /// The devices in use while active.
    public var activeRoute: ActiveAudioRoute? { if case let .active(route) = state { route } else { nil } }

    /// Whether another session interrupted this one (and has not let go yet).
    public var isInterrupted: Bool { if case .interrupted = state { true } else { false } }

    /// Microphones the backend offers now.
    public var availableInputs: [AudioRoute] { knownRoutes.filter(\.isInput) }
    /// Outputs the backend offers now.
    public var availableOutputs: [AudioRoute] { knownRoutes.filter(\.isOutput) }

    /// How many media endpoints are attached to the open devices.
    public var runningEndpoints: Int { devices.running }

    /// Sets the configuration. Allowed at any time, in either policy. When active and the change
    /// selects other devices, the session reopens them and reports a route change.
    public func configure(_ configuration: AudioSessionConfiguration) async throws(AudioSessionError) {
        let old = self.configuration
        guard configuration != old else { return }
        self.configuration = configuration
        broadcaster.send(.configurationChanged(configuration))
        if case .active = state {
            let reason: AudioRouteChangeReason = old.category != configuration.category ? .categoryChange : .override
            try await reopenIfNeeded(reason: reason)
        }
    }

    /// Turns automatic configuration on or off (see ``automaticConfiguration``).
    public func setAutomaticConfiguration(_ enabled: Bool) {
        automaticConfiguration = enabled
    }

    /// The session's microphone for media. Its `start()` attaches to the open capture device.
    ///
    /// - Throws: ``AudioSessionError/noMicrophone(_:)`` when the category is `playback` and
    ///   automatic configuration is off (with it on, the category becomes `playAndRecord`,
    ///   opening the microphone at once if the session is active).
    public func microphone() async throws(AudioSessionError) -> SessionSource {
        if !configuration.category.hasMicrophone {
            guard automaticConfiguration else { throw .noMicrophone(configuration.category) }
            var changed = configuration
            changed.category = .playAndRecord
            try await configure(changed)
        }
        return SessionSource(port: devices.makePort(), format: configuration.format)
    }

    /// The session's output for media. Its `start()` attaches to the open playback device.
    /// - Throws: ``AudioSessionError/noOutput(_:)`` in the `record` category.
    public func output() throws(AudioSessionError) -> SessionSink {
        guard configuration.category.hasOutput else { throw .noOutput(configuration.category) }
        return SessionSink(port: devices.makePort(), format: configuration.format)
    }

    /// A call's port on the session's audio bridge: a microphone and an output that share it.
    /// Every port hears the whole microphone (it is copied, never split between calls), and
    /// what the ports play is summed on the output. The port goes when its source and sink do.
    ///
    /// - Throws: As ``microphone()`` and ``output()``.
    public func port() async throws(AudioSessionError) -> SessionPort {
        _ = try await microphone()  // the category checks (and automatic configuration)
        guard configuration.category.hasOutput else { throw .noOutput(configuration.category) }
        let handle = devices.makePort()
        return SessionPort(source: SessionSource(port: handle, format: configuration.format),
                           sink: SessionSink(port: handle, format: configuration.format))
    }

    /// Holds or resumes a call's port: a held port reads silence and its audio is not played.
    public func setMode(_ mode: BridgePortMode, of port: BridgePortID) {
        devices.state.withLock { open in SessionDevices.play(open.bridge.setMode(mode, of: port), in: open) }
    }

    /// The mode of a port (nil once it is gone).
    public func mode(of port: BridgePortID) -> BridgePortMode? {
        devices.state.withLock { $0.bridge.mode(of: port) }
    }

    /// Joins ports into a conference: each call hears the microphone and every other member;
    /// the output plays them all.
    public func join(_ ports: [BridgePortID]) {
        devices.state.withLock { $0.bridge.join(ports) }
    }

    /// Takes a port out of its conference (a conference left with one member ends).
    public func leaveConference(_ port: BridgePortID) {
        devices.state.withLock { $0.bridge.leaveConference(port) }
    }

    /// The members of the port's conference, none when it is in none.
    public func conference(of port: BridgePortID) -> [BridgePortID] {
        devices.state.withLock { $0.bridge.conference(of: port) }
    }

    /// The ports on the bridge.
    public var ports: [BridgePortID] { devices.state.withLock { $0.bridge.portIDs } }

    /// Polls the backend's routes every `interval` on the session's clock and reports devices
    /// that appear or disappear. Stopped by ``shutdown()``; does nothing after it.
    public func startMonitoringRoutes(every interval: Duration = .seconds(2)) {
        guard monitor == nil, !isShutDown else { return }
        let clock = self.clock
        monitor = Task { [weak self] in
            var next = clock.now + interval
            while !Task.isCancelled {
                do { try await clock.sleep(until: next) } catch { return }
                next += interval
                guard let self else { return }
                await self.pollRoutes()
            }
        }
    }

    /// Compares the backend's routes with the last known ones and reports the differences.
    public func pollRoutes() {
        let now = currentBackend.availableRoutes()
        let before = Set(knownRoutes.map(\.name))
        let after = Set(now.map(\.name))
        let lost = knownRoutes.filter { !after.contains($0.name) }
        let gained = now.filter { !before.contains($0.name) }
        knownRoutes = now
        for route in lost { broadcaster.send(.routeChanged(.oldDeviceUnavailable(route))) }
        for route in gained { broadcaster.send(.routeChanged(.newDeviceAvailable(route))) }
    }

    /// Stops route monitoring, closes any open devices and ends the event streams.
    public func shutdown() async {
        isShutDown = true
        monitor?.cancel()
        monitor = nil
        stopHealthWatch()
        isRecordingAlwaysPrepared = false
        releasePreparedCapture()
        if case .active = state {
            closeDevices(keepPrepared: false)
            state = .inactive
            broadcaster.send(.didDeactivate)
            await notifyReleased()
        }
        broadcaster.finish()
    }

    // MARK: Voice processing, prepared recording, manual rendering, custom capture

    /// Whether voice processing (echo cancellation, noise suppression, gain control) runs on
    /// the microphone. By default it follows the backend: on for real devices
    /// (``AudioDeviceBackend/prefersVoiceProcessing``), off for files, tones and manual rendering.
    public var isVoiceProcessingEnabled: Bool {
        voiceProcessingSetting ?? (manualBackend == nil && backend.prefersVoiceProcessing)
    }

    /// The processing chain in use while active, for its statistics.
    public var voiceProcessor: VoiceProcessor? { devices.state.withLock { $0.processor } }

    /// Turns voice processing on or off and optionally changes what it does. This recreates the
    /// processing chain, so set it before a call: while media runs it throws
    /// ``AudioSessionError/mediaRunning(endpoints:)``. When active with no media running, the
    /// new chain is in place at once. To switch processing off and on during a call, use
    /// ``setVoiceProcessingBypassed(_:)``.
    public func setVoiceProcessingEnabled(_ enabled: Bool, options: VoiceProcessingOptions? = nil) throws(AudioSessionError) {
        let running = devices.running
        guard running == 0 else { throw .mediaRunning(endpoints: running) }
        voiceProcessingSetting = enabled
        if let options { voiceProcessingOptions = options }
        guard case .active = state, devices.state.withLock({ $0.capture != nil }) else { return }
        let processor: VoiceProcessor?
        do throws(AudioDeviceError) { processor = try makeVoiceProcessor(format: configuration.format) } catch { throw .device(error) }
        devices.state.withLock { $0.processor = processor }
    }

    /// Bypasses voice processing (the microphone passes untouched) or ends the bypass. Allowed
    /// at any time, also mid-call: the chain keeps running while bypassed and the change is
    /// cross-faded over 10 ms, so it does not click. It persists across calls.
    public func setVoiceProcessingBypassed(_ bypassed: Bool) {
        isVoiceProcessingBypassed = bypassed
        devices.state.withLock { $0.processor }?.isBypassed = bypassed
    }

    /// Always-prepared recording: keeps the capture device open and running, unheard, between
    /// calls, so that media gets microphone audio at once when the session activates instead of
    /// waiting for the device to open and deliver its first period. Stays on across calls until
    /// turned off. Preparing opens no output and does not activate the session: in the
    /// system-owned policy the provider still decides when media may use it.
    ///
    /// Turning it on opens the configured input now (when inactive); turning it off closes a
    /// prepared device (the session's own capture, when active, stays until deactivation).
    ///
    /// - Throws: ``AudioSessionError/noMicrophone(_:)`` in a category without a microphone,
    ///   ``AudioSessionError/device(_:)`` when the input cannot be opened (the mode stays off).
    public func setRecordingAlwaysPrepared(_ enabled: Bool) throws(AudioSessionError) {
        guard enabled else {
            isRecordingAlwaysPrepared = false
            releasePreparedCapture()
            return
        }
        guard configuration.category.hasMicrophone else { throw .noMicrophone(configuration.category) }
        if case .active = state {
            isRecordingAlwaysPrepared = true  // the open capture is kept at deactivation
            return
        }
        guard let input = selectedRoute().input else { throw .noMicrophone(configuration.category) }
        if preparedCapture?.device != input {
            releasePreparedCapture()
            let source = currentBackend.makeCapture(device: input, format: configuration.format, mode: configuration.mode)
            do throws(AudioDeviceError) { try source.start() } catch { throw .device(error) }
            preparedCapture = (input, source)
        }
        isRecordingAlwaysPrepared = true
    }

    /// The input kept running while inactive (always-prepared recording), if any.
    public var preparedInput: String? { preparedCapture?.device }

    /// Samples the prepared input has captured since it was opened or last used (it holds at
    /// most its device buffer; older audio is dropped). Non-zero means the device delivers.
    public var preparedSamplesBuffered: Int { preparedCapture?.source.bufferedSamples ?? 0 }

    /// Manual rendering mode: the session opens no device at all. Media reads capture audio the
    /// embedder pushes and writes playback audio the embedder pulls, through
    /// ``manualRenderingEndpoint``. Voice processing is off by default there. Switch only while
    /// inactive.
    ///
    /// - Throws: ``AudioSessionError/alreadyActive`` while active.
    public func setManualRenderingMode(_ enabled: Bool) throws(AudioSessionError) {
        guard !isActive else { throw .alreadyActive }
        guard enabled != (manualBackend != nil) else { return }
        releasePreparedCapture()
        manualBackend = enabled ? ManualRenderingBackend() : nil
        knownRoutes = currentBackend.availableRoutes()
    }

    /// Whether the session is in manual rendering mode.
    public var isManualRenderingMode: Bool { manualBackend != nil }

    /// In manual rendering mode, where the embedder pushes capture audio and pulls playback.
    public var manualRenderingEndpoint: ManualAudioEndpoint? {
        guard let manualBackend else { return nil }
        return manualBackend.endpoint(manualBackend.defaultInput, format: configuration.format)
    }

    /// Supplies capture audio from the app (a prompt, a file, a generated signal), mixed with
    /// the microphone or instead of it; `nil` goes back to the microphone alone. Takes effect at
    /// the next frame media reads, also mid-call. The source is started here and stopped when
    /// replaced.
    ///
    /// - Throws: ``AudioSessionError/device(_:)`` when the source cannot start.
    public func setCustomCapture(_ source: (any AudioSource)?, mixing: CustomCaptureMixing = .replace) throws(AudioSessionError) {
        if let source {
            do throws(AudioDeviceError) { try source.start() } catch { throw .device(error) }
        }
        let old = devices.state.withLock { open in
            defer { open.custom = source.map { ($0, mixing) } }
            return open.custom?.source
        }
        if let old, old !== source { old.stop() }
    }

    // MARK: Activation (reachable only through the policy's path)

    /// The devices the configuration selects.
    private func selectedRoute() -> ActiveAudioRoute {
        let backend = currentBackend
        // In manual rendering mode the preferred devices name hardware that is not in use.
        let manual = manualBackend != nil
        let preferredInput = manual ? nil : configuration.preferredInput
        let preferredOutput = manual ? nil : configuration.preferredOutput
        let input = configuration.category.hasMicrophone ? (preferredInput ?? backend.defaultInput) : nil
        var output: String?
        if configuration.category.hasOutput {
            let speaker = configuration.outputOverride == .speaker
                || (configuration.options.contains(.defaultToSpeaker) && configuration.category == .playAndRecord
                    && preferredOutput == nil)
            output = speaker ? backend.speakerOutput : (preferredOutput ?? backend.defaultOutput)
        }
        return ActiveAudioRoute(input: input, output: output)
    }

    func performActivate() async throws(AudioSessionError) -> ActiveAudioRoute {
        switch state {
        case .active: throw .alreadyActive
        case let .interrupted(by): throw .interrupted(by: by)
        case .inactive: break
        }
        let route = selectedRoute()
        let namespace = currentBackend.deviceNamespace
        let claimed = Set([route.input, route.output].compactMap { $0 }.map { "\(namespace)/\($0)" })
        let victims = DeviceArbiter.shared.claim(claimed, by: self, mixing: configuration.options.contains(.mixWithOthers))
        for victim in victims { await victim.interrupt(by: name) }
        // Interrupting others suspended this actor: check nobody activated meanwhile.
        guard case .inactive = state else {
            if case let .interrupted(by) = state { throw .interrupted(by: by) }
            throw .alreadyActive
        }
        let opened: ActiveAudioRoute
        do throws(AudioDeviceError) {
            opened = try openDevices(route)
        } catch {
            await notifyReleased()
            throw .device(error)
        }
        state = .active(opened)
        startHealthWatch()
        broadcaster.send(.didActivate(opened))
        return opened
    }

    func performDeactivate(force: Bool) async throws(AudioSessionError) {
        guard case .active = state else { throw .notActive }
        let running = devices.running
        if running > 0 && !force { throw .mediaRunning(endpoints: running) }
        stopHealthWatch()
        closeDevices(keepPrepared: true)
        state = .inactive
        broadcaster.send(.didDeactivate)
        await notifyReleased()
    }

    func attachProvider() throws(AudioSessionError) {
        guard !providerAttached else { throw .providerAlreadyAttached }
        providerAttached = true
    }

    /// Opens the route's devices; one that will not open (a headset unplugged since the last
    /// call) is replaced by the backend's fallback when that opens. Returns the devices opened.
    private func openDevices(_ wanted: ActiveAudioRoute) throws(AudioDeviceError) -> ActiveAudioRoute {
        var route = wanted
        let format = configuration.format
        let backend = currentBackend
        var capture: (any AudioSource)?
        if let input = route.input {
            if let prepared = preparedCapture, prepared.device == input {
                // Always-prepared recording: the device is running already. Keep only the
                // newest frame of what it captured meanwhile, so media starts on fresh audio.
                preparedCapture = nil
                prepared.source.discardBuffered(keepingLatest: format.sampleRate / 50 * format.channels)
                capture = prepared.source
            } else {
                releasePreparedCapture()
                let source = backend.makeCapture(device: input, format: format, mode: configuration.mode)
                do throws(AudioDeviceError) {
                    try source.start()
                    capture = source
                } catch {
                    guard let fallback = backend.fallbackInput, fallback != input else { throw error }
                    let other = backend.makeCapture(device: fallback, format: format, mode: configuration.mode)
                    do throws(AudioDeviceError) { try other.start() } catch { throw error }
                    capture = other
                    route.input = fallback
                }
            }
        }
        var playback: (any AudioSink)?
        if let output = route.output {
            let sink = backend.makePlayback(device: output, format: format, mode: configuration.mode)
            do throws(AudioDeviceError) {
                try sink.start()
                playback = sink
            } catch {
                let other = backend.fallbackOutput.flatMap { $0 == output ? nil : backend.makePlayback(device: $0, format: format, mode: configuration.mode) }
                do throws(AudioDeviceError) {
                    guard let other else { throw error }
                    try other.start()
                    playback = other
                    route.output = backend.fallbackOutput
                } catch {
                    capture?.stop()
                    throw error
                }
            }
        }
        var processor: VoiceProcessor?
        if capture != nil {
            do throws(AudioDeviceError) { processor = try makeVoiceProcessor(format: format) } catch {
                capture?.stop()
                playback?.stop()
                throw error
            }
        }
        openInput = capture == nil ? nil : route.input
        devices.state.withLock {
            $0.capture = capture
            $0.playback = playback
            $0.processor = processor
        }
        return route
    }

    /// A new processing chain when voice processing is on. When it is on only by default (the
    /// backend's devices) and cannot handle the format, there is none; when the app turned it
    /// on, that is an error.
    private func makeVoiceProcessor(format: AudioFormat) throws(AudioDeviceError) -> VoiceProcessor? {
        guard isVoiceProcessingEnabled, voiceProcessingOptions.doesAnything else { return nil }
        do throws(AudioDeviceError) {
            let processor = try VoiceProcessor(format: format, options: voiceProcessingOptions)
            processor.isBypassed = isVoiceProcessingBypassed
            return processor
        } catch {
            if voiceProcessingSetting == true { throw error }
            return nil
        }
    }

    /// Closes the open devices. With `keepPrepared` and always-prepared recording on, the
    /// capture device keeps running (unread) for the next activation.
    private func closeDevices(keepPrepared: Bool) {
        let (capture, playback) = devices.state.withLock { open in
            defer { open.capture = nil; open.playback = nil; open.processor = nil }
            return (open.capture, open.playback)
        }
        if let capture, keepPrepared, isRecordingAlwaysPrepared, let input = openInput {
            releasePreparedCapture()
            preparedCapture = (input, capture)
        } else {
            capture?.stop()
        }
        openInput = nil
        playback?.stop()
    }

    private func releasePreparedCapture() {
        preparedCapture?.source.stop()
        preparedCapture = nil
    }

    private func reopenIfNeeded(reason: AudioRouteChangeReason) async throws(AudioSessionError) {
        guard case let .active(current) = state else { return }
        let wanted = selectedRoute()
        guard wanted != current else { return }
        closeDevices(keepPrepared: true)
        let opened: ActiveAudioRoute
        do throws(AudioDeviceError) {
            opened = try openDevices(wanted)
        } catch {
            // The old devices are closed and the new ones refused: the session is no longer active.
            state = .inactive
            stopHealthWatch()
            broadcaster.send(.didDeactivate)
            await notifyReleased()
            throw .device(error)
        }
        // The new devices may be ones that can fail where the old could not.
        startHealthWatch()
        state = .active(opened)
        broadcaster.send(.routeChanged(reason))
    }

    /// Lets go of the devices and ends the interruption of the sessions this one interrupted.
    private func notifyReleased() async {
        for session in DeviceArbiter.shared.release(self) { await session.endInterruption() }
    }

    // MARK: InterruptibleSession

    func interrupt(by other: String) async {
        guard case .active = state else { return }
        stopHealthWatch()
        closeDevices(keepPrepared: false)
        releasePreparedCapture()  // the other session holds the devices now
        state = .interrupted(by: other)
        // Sessions this one had interrupted wait on the new holder now.
        for session in DeviceArbiter.shared.drop(self) { await session.endInterruption() }
        broadcaster.send(.interruptionBegan(by: other))
    }

    func endInterruption() async {
        guard case .interrupted = state else { return }
        state = .inactive
        broadcaster.send(.interruptionEnded(shouldResume: true))
    }
}
