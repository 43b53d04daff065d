import AudioSession
import CallNodeTestKit
import CallNodeTestSupport
import Clocks
import Locking
import Media
import Testing

/// Devices that fail mid-call (a USB headset unplugged, a sound server's sink removed): the
/// session notices, falls back, and says what happened.
@Suite struct DeviceFailureTests {
    /// A device that records what it is given and fails when told to.
    final class Device: AudioSource, AudioSink {
        let name: String
        let format = AudioFormat()
        let broken = Locked<String?>(nil)
        let refusesToOpen: Bool
        let written = Locked(0)
        let started = Locked(0)
        init(_ name: String, refusesToOpen: Bool = false) {
            self.name = name
            self.refusesToOpen = refusesToOpen
        }
        func start() throws(AudioDeviceError) {
            if refusesToOpen { throw .notFound("\(name) is not there") }
            started.withLock { $0 += 1 }
        }
        func stop() {}
        func read(into frame: inout [Int16]) -> Bool {
            for i in frame.indices { frame[i] = broken.withLock { $0 } == nil ? 500 : 0 }
            return true
        }
        func write(_ frame: [Int16]) { written.withLock { $0 += frame.count } }
        var failure: String? { broken.withLock { $0 } }
        var canFail: Bool { true }
    }

    /// Devices by name, a capture and a playback endpoint each; `usb` is the default input and
    /// output, `builtin` the fallback.
    final class Backend: AudioDeviceBackend, @unchecked Sendable {  // the device tables are set in init only
        let inputs: [String: Device]
        let devices: [String: Device]
        let fallback: String?
        init(devices: [Device], fallback: String?) {
            self.devices = Dictionary(uniqueKeysWithValues: devices.map { ($0.name, $0) })
            inputs = Dictionary(uniqueKeysWithValues: devices.map { ($0.name, Device($0.name, refusesToOpen: $0.refusesToOpen)) })
            self.fallback = fallback
        }
        var deviceNamespace: String { "test.failing.\(ObjectIdentifier(self).hashValue)" }
        func availableRoutes() -> [AudioRoute] {
            devices.keys.sorted().map { AudioRoute(name: $0, label: $0, isInput: true, isOutput: true) }
        }
        var defaultInput: String { "usb" }
        var defaultOutput: String { "usb" }
        var speakerOutput: String { "usb" }
        var fallbackInput: String? { fallback }
        var fallbackOutput: String? { fallback }
        func makeCapture(device: String, format: AudioFormat, mode: AudioSessionMode) -> any AudioSource { inputs[device]! }
        func makePlayback(device: String, format: AudioFormat, mode: AudioSessionMode) -> any AudioSink { devices[device]! }
    }

    static func until(_ events: AsyncStream<AudioSessionEvent>, _ match: (AudioSessionEvent) -> Bool) async throws -> [AudioSessionEvent] {
        try await AudioSessionOwnerTests.until(events, match)
    }

    @Test func anOutputThatFailsMidCallIsReplacedByTheFallbackWithinTheCheckInterval() async throws {
        let usb = Device("usb"), builtin = Device("builtin")
        let clock = ManualClock()
        let session = AudioSessionOwner<AppOwned>(name: "headset", backend: Backend(devices: [usb, builtin], fallback: "builtin"),
                                                  clock: TimerClock(clock))
        let events = session.events()
        try await session.activate()
        let port = try await session.port()
        try port.sink.start()
        port.sink.write([Int16](repeating: 1, count: 960))
        #expect(usb.written.withLock { $0 } == 960)

        usb.broken.withLock { $0 = "ALSA device 'usb' failed: No such device" }
        // The watch runs on the session's clock: the next check finds it.
        for _ in 0..<50 where await session.activeRoute?.output == "usb" {
            clock.advance(by: .milliseconds(100))
            for _ in 0..<10 { await Task.yield() }
            try await Task.sleep(for: .milliseconds(1))
        }
        let seen = try await Self.until(events) { if case .routeChanged = $0 { true } else { false } }
        #expect(seen.last == .routeChanged(.oldDeviceUnavailable(AudioRoute(name: "usb", label: "usb", isInput: true, isOutput: true))))
        #expect(await session.activeRoute == ActiveAudioRoute(input: "usb", output: "builtin"))
        // The call plays on the fallback now, through the same port.
        port.sink.write([Int16](repeating: 1, count: 960))
        #expect(builtin.written.withLock { $0 } == 960)
        #expect(usb.written.withLock { $0 } == 960)
        port.sink.stop()
        try await session.deactivate()
    }

    @Test func aMicrophoneThatFailsFallsBackToo() async throws {
        let backend = Backend(devices: [Device("usb"), Device("builtin")], fallback: "builtin")
        let session = AudioSessionOwner<AppOwned>(name: "headset", backend: backend, clock: TimerClock(ManualClock()))
        try await session.activate()
        let microphone = try await session.microphone()
        try microphone.start()
        backend.inputs["usb"]!.broken.withLock { $0 = "ALSA device 'usb' failed: No such device" }
        await session.checkDevices()
        #expect(await session.activeRoute?.input == "builtin")
        var frame = [Int16](repeating: 0, count: 960)
        _ = microphone.read(into: &frame)
        #expect(frame.allSatisfy { $0 == 500 }, "the microphone reads the fallback")
        microphone.stop()
        try await session.deactivate()
    }

    @Test func withNothingToFallBackToTheFailureIsReportedOnceNamingTheDevice() async throws {
        for (devices, fallback, why) in [([Device("usb")], nil as String?, "and there is no other output to fall back to"),
                                         ([Device("usb"), Device("builtin", refusesToOpen: true)], "builtin",
                                          "no fallback would open (builtin: \(AudioDeviceError.notFound("builtin is not there")))")] {
            let session = AudioSessionOwner<AppOwned>(name: "headset", backend: Backend(devices: devices, fallback: fallback),
                                                      clock: TimerClock(ManualClock()))
            let events = session.events()
            try await session.activate()
            devices[0].broken.withLock { $0 = "ALSA device 'usb' failed: No such device" }
            await session.checkDevices()
            let seen = try await Self.until(events) { if case .deviceFailed = $0 { true } else { false } }
            guard case let .deviceFailed(message) = seen.last else { continue }
            #expect(message.hasPrefix("the audio output 'usb' failed (ALSA device 'usb' failed: No such device)"), "\(message)")
            #expect(message.hasSuffix(why), "\(message)")
            #expect(await session.activeRoute?.output == nil)
            // Checked again: nothing more to say.
            await session.checkDevices()
            try await session.deactivate()
            let rest = try await Self.until(events) { $0 == .didDeactivate }
            #expect(!rest.contains { if case .deviceFailed = $0 { true } else { false } })
        }
    }

    /// A headset unplugged between calls: the next activation finds its devices will not open
    /// and opens the fallback instead, saying so in the route (it failed the call before).
    @Test func devicesThatWillNotOpenAtActivationAreReplacedByTheFallback() async throws {
        let usb = Device("usb", refusesToOpen: true), builtin = Device("builtin")
        let session = AudioSessionOwner<AppOwned>(name: "headset", backend: Backend(devices: [usb, builtin], fallback: "builtin"),
                                                  clock: TimerClock(ManualClock()))
        let route = try await session.activate()
        #expect(route == ActiveAudioRoute(input: "builtin", output: "builtin"))
        #expect(await session.activeRoute == route)
        let port = try await session.port()
        try port.sink.start()
        port.sink.write([Int16](repeating: 1, count: 960))
        #expect(builtin.written.withLock { $0 } == 960)
        port.sink.stop()
        try await session.deactivate()

        // With no fallback that opens, the activation fails naming the device, as before.
        let alone = AudioSessionOwner<AppOwned>(name: "headset", backend: Backend(devices: [Device("usb", refusesToOpen: true)], fallback: nil),
                                                clock: TimerClock(ManualClock()))
        await #expect(throws: AudioSessionError.device(.notFound("usb is not there"))) { try await alone.activate() }
    }
}
