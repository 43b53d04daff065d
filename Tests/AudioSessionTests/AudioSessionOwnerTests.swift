import AudioSession
import CallNodeTestKit
import CallNodeTestSupport
import Clocks
import Media
import Testing

@Suite struct AudioSessionOwnerTests {
    static func appSession(_ backend: ManualRenderingBackend, _ configuration: AudioSessionConfiguration = AudioSessionConfiguration(),
                           clock: ManualClock = ManualClock(), name: String = "app") -> AudioSessionOwner<AppOwned> {
        AudioSessionOwner<AppOwned>(name: name, configuration: configuration, backend: backend, clock: TimerClock(clock))
    }

    /// Collects events until `match`, failing after `limit`.
    static func until(_ events: AsyncStream<AudioSessionEvent>, limit: Int = 50,
                      _ match: (AudioSessionEvent) -> Bool) async throws -> [AudioSessionEvent] {
        var seen: [AudioSessionEvent] = []
        for await event in events {
            seen.append(event)
            if match(event) { return seen }
            if seen.count >= limit { break }
        }
        throw TestFailure("no matching event in \(seen)")
    }

    @Test func playbackCategoryHasNoMicrophoneAndSaysSo() async throws {
        let session = Self.appSession(ManualRenderingBackend(), AudioSessionConfiguration(category: .playback))
        await session.setAutomaticConfiguration(false)
        await #expect(throws: AudioSessionError.noMicrophone(.playback)) { _ = try await session.microphone() }
        #expect(AudioSessionError.noMicrophone(.playback).description.contains("has no microphone"))
        let route = try await session.activate()
        #expect(route == ActiveAudioRoute(input: nil, output: "manual"))
        _ = try await session.output()
        try await session.deactivate()

        let record = Self.appSession(ManualRenderingBackend(), AudioSessionConfiguration(category: .record))
        await #expect(throws: AudioSessionError.noOutput(.record)) { _ = try await record.output() }
    }

    @Test func automaticConfigurationSwitchesToPlayAndRecordWhenTheMicrophoneStarts() async throws {
        let backend = ManualRenderingBackend()
        let session = Self.appSession(backend, AudioSessionConfiguration(category: .playback))
        let events = session.events()
        try await session.activate()
        let microphone = try await session.microphone()
        #expect(await session.configuration.category == .playAndRecord)
        #expect(await session.activeRoute == ActiveAudioRoute(input: "manual", output: "manual"))
        let seen = try await Self.until(events) { $0 == .routeChanged(.categoryChange) }
        #expect(seen.contains { if case .configurationChanged = $0 { true } else { false } })
        // The microphone now delivers what the device captures.
        try microphone.start()
        backend.endpoint("manual").pushCapture([Int16](repeating: 1234, count: 960))
        var frame = [Int16](repeating: 0, count: 960)
        _ = microphone.read(into: &frame)
        #expect(frame.allSatisfy { $0 == 1234 })
        microphone.stop()
        try await session.deactivate()
    }

    @Test func outputOverrideAndSpeakerOptionPickTheSpeakerRoute() async throws {
        let session = Self.appSession(ManualRenderingBackend(), AudioSessionConfiguration(options: [.defaultToSpeaker]))
        let events = session.events()
        #expect(try await session.activate().output == "speaker")
        try await session.configure(AudioSessionConfiguration())
        #expect(await session.activeRoute?.output == "manual")
        try await session.configure(AudioSessionConfiguration(outputOverride: .speaker))
        #expect(await session.activeRoute?.output == "speaker")
        let seen = try await Self.until(events) { if case .routeChanged = $0 { true } else { false } }
        #expect(seen.last == .routeChanged(.override))
        try await session.deactivate()
    }

    @Test func anotherSessionOnTheSameDeviceInterruptsAndThenLetsGo() async throws {
        let backend = ManualRenderingBackend()
        let first = Self.appSession(backend, name: "answering service")
        let second = Self.appSession(backend, name: "intercom")
        let firstEvents = first.events()
        try await first.activate()
        try await second.activate()
        _ = try await Self.until(firstEvents) { $0 == .interruptionBegan(by: "intercom") }
        #expect(await first.isActive == false)
        #expect(await first.isInterrupted)
        await #expect(throws: AudioSessionError.interrupted(by: "intercom")) { try await first.activate() }
        #expect(AudioSessionError.interrupted(by: "intercom").description.contains("wait for interruptionEnded"))
        try await second.deactivate()
        _ = try await Self.until(firstEvents) { $0 == .interruptionEnded(shouldResume: true) }
        try await first.activate()
        try await first.deactivate()
    }

    @Test func mixingSessionsDoNotInterruptEachOther() async throws {
        let backend = ManualRenderingBackend()
        let first = Self.appSession(backend, name: "first")
        let second = Self.appSession(backend, AudioSessionConfiguration(options: [.mixWithOthers]), name: "second")
        try await first.activate()
        try await second.activate()
        #expect(await first.isActive)
        #expect(await second.isActive)
        try await second.deactivate()
        try await first.deactivate()
        // Separate backends are separate devices.
        let other = Self.appSession(ManualRenderingBackend(), name: "elsewhere")
        try await first.activate()
        try await other.activate()
        #expect(await first.isActive)
    }

    @Test func routeChangesAreReportedWhenDevicesComeAndGo() async throws {
        let backend = ManualRenderingBackend()
        let clock = ManualClock()
        let session = Self.appSession(backend, clock: clock)
        let events = session.events()
        await session.startMonitoringRoutes(every: .seconds(2))
        let headset = AudioRoute(name: "headset", label: "USB headset", isInput: true, isOutput: true)
        backend.add(headset)
        await clock.waitForSleepers(1)
        clock.advance(by: .seconds(2))
        _ = try await Self.until(events) { $0 == .routeChanged(.newDeviceAvailable(headset)) }
        #expect(await session.availableInputs.contains(headset))
        backend.remove(named: "headset")
        await clock.waitForSleepers(1)
        clock.advance(by: .seconds(2))
        _ = try await Self.until(events) { $0 == .routeChanged(.oldDeviceUnavailable(headset)) }
        #expect(await !session.availableOutputs.contains(headset))
        await session.shutdown()
    }

    @Test func aShutDownSessionDoesNotStartWatchingRoutesAgain() async {
        let session = Self.appSession(ManualRenderingBackend())
        await session.startMonitoringRoutes(every: .seconds(2))
        #expect(await session.isMonitoringRoutes)
        await session.shutdown()
        #expect(await !session.isMonitoringRoutes)
        // A start that comes late (a task of the node's that ran after its shut-down) is refused:
        // nothing would ever stop that monitor.
        await session.startMonitoringRoutes(every: .seconds(2))
        #expect(await !session.isMonitoringRoutes)
    }

    @Test func aMissingDeviceIsAClearErrorAndNothingStaysOpen() async {
        await ALSATestLock.withLock {
            let session = AudioSessionOwner<AppOwned>(
                configuration: AudioSessionConfiguration(preferredInput: "hw:CARD=NoSuchCard,DEV=0", preferredOutput: "null"),
                backend: ALSADeviceBackend())
            await #expect {
                try await session.activate()
            } throws: { error in
                guard case let .device(device) = error as? AudioSessionError else { return false }
                return "\(device)".contains("NoSuchCard")
            }
            #expect(await session.isActive == false)
        }
    }

    @Test func alsaDeviceHintsListRoutes() async throws {
        try await ALSATestLock.withLock {
            let routes = ALSADeviceBackend.deviceHints()
            #expect(routes.contains { $0.name == "null" && $0.isInput && $0.isOutput }, "\(routes.map(\.name))")
            // A real ALSA device opens through the session: the null PCM, output only.
            let session = AudioSessionOwner<AppOwned>(
                configuration: AudioSessionConfiguration(category: .playback, preferredOutput: "null"), backend: ALSADeviceBackend())
            #expect(try await session.activate() == ActiveAudioRoute(input: nil, output: "null"))
            let output = try await session.output()
            try output.start()
            output.write([Int16](repeating: 0, count: 960))
            await #expect(throws: AudioSessionError.mediaRunning(endpoints: 1)) { try await session.deactivate() }
            output.stop()
            try await session.deactivate()
        }
    }
}
