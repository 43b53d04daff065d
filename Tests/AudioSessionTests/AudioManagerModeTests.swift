import AudioSession
import CallNodeTestKit
import CallNodeTestSupport
import Clocks
import Foundation
import Locking
import Media
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A room as a device backend: what the speaker plays comes back into the microphone 30 ms
/// later at half amplitude, over a near-end talker. Devices count how often they are opened.
final class EchoRoomBackend: AudioDeviceBackend {
    struct Room {
        var played: [Int16] = []
        var captured = 0
        var captureStarts = 0
        var captureStops = 0
        var discards: [Int] = []
    }
    let room = Locked(Room())
    let echoDelay = 1_440
    let near: @Sendable (Int) -> Int16

    init(near: @escaping @Sendable (Int) -> Int16 = { _ in 0 }) { self.near = near }

    var deviceNamespace: String { "echo-room-\(UInt(bitPattern: ObjectIdentifier(self).hashValue))" }
    var prefersVoiceProcessing: Bool { true }
    func availableRoutes() -> [AudioRoute] { [AudioRoute(name: "room", isInput: true, isOutput: true)] }
    var defaultInput: String { "room" }
    var defaultOutput: String { "room" }
    var speakerOutput: String { "room" }
    func makeCapture(device: String, format: AudioFormat, mode: AudioSessionMode) -> any AudioSource { Microphone(self, format) }
    func makePlayback(device: String, format: AudioFormat, mode: AudioSessionMode) -> any AudioSink { Speaker(self, format) }

    final class Microphone: AudioSource {
        let backend: EchoRoomBackend
        let format: AudioFormat
        init(_ backend: EchoRoomBackend, _ format: AudioFormat) { self.backend = backend; self.format = format }
        func start() throws(AudioDeviceError) { backend.room.withLock { $0.captureStarts += 1 } }
        func stop() { backend.room.withLock { $0.captureStops += 1 } }
        func discardBuffered(keepingLatest samples: Int) { backend.room.withLock { $0.discards.append(samples) } }
        func read(into frame: inout [Int16]) -> Bool {
            backend.room.withLock { room in
                for i in frame.indices {
                    let n = room.captured + i
                    let echo = n >= backend.echoDelay && n - backend.echoDelay < room.played.count ? Double(room.played[n - backend.echoDelay]) / 2 : 0
                    frame[i] = Int16(max(-32_768, min(32_767, echo + Double(backend.near(n)))))
                }
                room.captured += frame.count
            }
            return true
        }
    }

    final class Speaker: AudioSink {
        let backend: EchoRoomBackend
        let format: AudioFormat
        init(_ backend: EchoRoomBackend, _ format: AudioFormat) { self.backend = backend; self.format = format }
        func start() throws(AudioDeviceError) {}
        func stop() {}
        func write(_ frame: [Int16]) { backend.room.withLock { $0.played += frame } }
    }
}

@Suite struct AudioManagerModeTests {
    static func session(_ backend: any AudioDeviceBackend) -> AudioSessionOwner<AppOwned> {
        AudioSessionOwner<AppOwned>(name: "modes", backend: backend, clock: TimerClock(ManualClock()))
    }

    static func energy(_ samples: ArraySlice<Int16>) -> Double { samples.reduce(0) { $0 + Double($1) * Double($1) } }

    @Test func theSessionsMicrophoneCancelsTheEchoOfItsOwnSpeaker() async throws {
        let backend = EchoRoomBackend()
        let session = Self.session(backend)
        #expect(await session.isVoiceProcessingEnabled, "voice processing is on by default for devices")
        try await session.activate()
        let microphone = try await session.microphone(), speaker = try await session.output()
        try microphone.start()
        try speaker.start()
        let far = SyntheticSpeech.samples(seconds: 6)
        var heard: [Int16] = []
        for start in stride(from: 0, to: far.count, by: 960) {  // one media tick: play, then read
            speaker.write(Array(far[start..<start + 960]))
            var frame = [Int16](repeating: 0, count: 960)
            _ = microphone.read(into: &frame)
            heard += frame
        }
        // What the microphone would have heard without processing: the echo itself.
        let echo = (0..<far.count).map { $0 >= backend.echoDelay ? Double(far[$0 - backend.echoDelay]) / 2 : 0 }
        let window = (3 * 48_000)..<(6 * 48_000)
        let erle = 10 * log10(window.reduce(0) { $0 + echo[$1] * echo[$1] } / max(1, Self.energy(heard[window])))
        print("session path: ERLE \(erle) dB")
        #expect(erle >= 20, "the session's echo canceller reached only \(erle) dB")
        let statistics = try #require(await session.voiceProcessor?.statistics)
        #expect(statistics.blocksWithoutReference == 0, "the speaker's frames did not reach the canceller")

        // Turning processing off needs the media stopped first.
        await #expect(throws: AudioSessionError.mediaRunning(endpoints: 2)) { try await session.setVoiceProcessingEnabled(false) }
        microphone.stop()
        speaker.stop()
        try await session.setVoiceProcessingEnabled(false)
        #expect(await session.voiceProcessor == nil)
        try await session.deactivate()
    }

    @Test func bypassAppliesMidCallAndPersistsAcrossCalls() async throws {
        let backend = EchoRoomBackend(near: { n in Int16(truncatingIfNeeded: (n * 37) % 2_001 - 1_000) })
        let session = Self.session(backend)
        try await session.activate()
        let processor = try #require(await session.voiceProcessor)
        #expect(!processor.isBypassed)
        await session.setVoiceProcessingBypassed(true)
        #expect(processor.isBypassed)
        try await session.deactivate()
        try await session.activate()
        let next = try #require(await session.voiceProcessor)
        #expect(next !== processor, "each activation gets a fresh chain")
        #expect(next.isBypassed, "the bypass persists into the next call")
        try await session.deactivate()
    }

    @Test func alwaysPreparedRecordingKeepsTheMicrophoneRunningBetweenCalls() async throws {
        let backend = EchoRoomBackend()
        let cold = Self.session(backend)
        for _ in 0..<2 {
            try await cold.activate()
            try await cold.deactivate()
        }
        #expect(backend.room.withLock { ($0.captureStarts, $0.captureStops) } == (2, 2), "cold start opens the device for every call")

        let warmRoom = EchoRoomBackend()
        let warm = Self.session(warmRoom)
        try await warm.setRecordingAlwaysPrepared(true)
        #expect(await warm.preparedInput == "room")
        #expect(warmRoom.room.withLock { $0.captureStarts } == 1, "preparing opens the microphone before any call")
        for _ in 0..<3 {
            try await warm.activate()
            #expect(await warm.preparedInput == nil)
            try await warm.deactivate()
            #expect(await warm.preparedInput == "room")
        }
        let (starts, stops, discards) = warmRoom.room.withLock { ($0.captureStarts, $0.captureStops, $0.discards) }
        #expect(starts == 1 && stops == 0, "three calls on one open microphone, got \(starts) opens and \(stops) closes")
        #expect(discards == [960, 960, 960], "each activation drops the backlog but the newest 20 ms")

        try await warm.setRecordingAlwaysPrepared(false)
        #expect(await warm.preparedInput == nil)
        #expect(warmRoom.room.withLock { $0.captureStops } == 1)

        let playbackOnly = AudioSessionOwner<AppOwned>(configuration: AudioSessionConfiguration(category: .playback), backend: EchoRoomBackend(),
                                                       clock: TimerClock(ManualClock()))
        await #expect(throws: AudioSessionError.noMicrophone(.playback)) { try await playbackOnly.setRecordingAlwaysPrepared(true) }
    }

    @Test func manualRenderingModeOpensNoDeviceAndTheEmbedderMovesThePCM() async throws {
        let backend = EchoRoomBackend()
        let session = Self.session(backend)
        try await session.setManualRenderingMode(true)
        #expect(await session.isManualRenderingMode)
        #expect(await !session.isVoiceProcessingEnabled, "nothing to cancel without a device")
        let route = try await session.activate()
        #expect(route == ActiveAudioRoute(input: "manual", output: "manual"))
        #expect(backend.room.withLock { $0.captureStarts } == 0, "manual rendering touched the device")
        await #expect(throws: AudioSessionError.alreadyActive) { try await session.setManualRenderingMode(false) }

        let endpoint = try #require(await session.manualRenderingEndpoint)
        let microphone = try await session.microphone(), speaker = try await session.output()
        try microphone.start()
        try speaker.start()
        endpoint.pushCapture([Int16](repeating: 321, count: 960))
        var frame = [Int16](repeating: 0, count: 960)
        _ = microphone.read(into: &frame)
        #expect(frame.allSatisfy { $0 == 321 })
        speaker.write([Int16](repeating: -55, count: 960))
        #expect(endpoint.pullPlayback(maximum: 2_000) == [Int16](repeating: -55, count: 960))
        microphone.stop()
        speaker.stop()
        try await session.deactivate()

        try await session.setManualRenderingMode(false)
        #expect(await session.manualRenderingEndpoint == nil)
        try await session.activate()
        #expect(backend.room.withLock { $0.captureStarts } == 1, "back on the device")
        try await session.deactivate()
    }

    @Test func customCaptureReplacesOrMixesWithTheMicrophone() async throws {
        let session = Self.session(ManualRenderingBackend())
        try await session.activate()
        let microphone = try await session.microphone()
        try microphone.start()
        let device = try #require(await session.activeRoute?.input)
        #expect(device == "manual")

        final class Constant: AudioSource {
            let format = AudioFormat()
            let value: Int16
            let started = Atomic(0), stopped = Atomic(0)
            init(_ value: Int16) { self.value = value }
            func start() throws(AudioDeviceError) { started.add(1, ordering: .relaxed) }
            func stop() { stopped.add(1, ordering: .relaxed) }
            func read(into frame: inout [Int16]) -> Bool {
                for i in frame.indices { frame[i] = value }
                return true
            }
        }
        let backendEndpoint = try #require(session.backend as? ManualRenderingBackend).endpoint("manual")
        func readFrame(microphoneValue: Int16) -> [Int16] {
            backendEndpoint.pushCapture([Int16](repeating: microphoneValue, count: 960))
            var frame = [Int16](repeating: 0, count: 960)
            _ = microphone.read(into: &frame)
            return frame
        }
        let prompt = Constant(1_000)
        try await session.setCustomCapture(prompt, mixing: .replace)
        #expect(prompt.started.load(ordering: .relaxed) == 1)
        #expect(readFrame(microphoneValue: 200).allSatisfy { $0 == 1_000 })
        #expect(backendEndpoint.pullPlayback(maximum: 10).isEmpty)
        var drained = [Int16](repeating: 9, count: 960)
        _ = backendEndpoint.read(into: &drained)
        #expect(drained.allSatisfy { $0 == 0 }, "the replaced microphone was still read, so it does not back up")

        try await session.setCustomCapture(prompt, mixing: .mix(microphoneGain: 1, customGain: 0.5))
        #expect(readFrame(microphoneValue: 200).allSatisfy { $0 == 700 })
        try await session.setCustomCapture(Constant(32_000), mixing: .mix())
        #expect(prompt.stopped.load(ordering: .relaxed) == 1, "the replaced source is stopped")
        #expect(readFrame(microphoneValue: 32_000).allSatisfy { $0 == 32_767 }, "the sum saturates")
        try await session.setCustomCapture(nil)
        #expect(readFrame(microphoneValue: 200).allSatisfy { $0 == 200 })
        microphone.stop()
        try await session.deactivate()
    }
}

/// Always-prepared recording on a real, real-time paced ALSA device (a private PulseAudio
/// server's null sink, recorded from its monitor while a tone plays into it).
@Suite(.serialized) struct PreparedRecordingALSATests {
    /// One attempt: returns the first frame read right after a prepared activation, or `nil`
    /// when the monitor delivered nothing (seen rarely on a loaded machine; see ALSAPulseTests).
    static func firstFrameOfAPreparedCall() async throws -> (frame: [Int16], buffered: Int)? {
        let server = try PulseAudioServer()
        defer { server.stop() }
        server.useForALSA()
        let speaker = ALSAPlaybackSink(device: "pulse")
        try speaker.start()
        defer { speaker.stop() }
        // The tone is fed on a thread of its own, a frame every 20 ms (two after an underrun),
        // through the activation too: fed from the test's task, a loaded machine let the
        // speaker run dry while the session activated, and the monitor then captured the
        // silence that played (not padding, but not the tone either).
        let feeding = Locked(true)
        let feeder = Thread {
            let tone = ToneSource(frequency: 1_000, amplitude: 0.3)
            var chunk = [Int16](repeating: 0, count: 960)
            var next = ContinuousClock.now, underran = -1  // two frames at first: one ahead
            while feeding.withLock({ $0 }) {
                let silence = speaker.statistics.silenceSamples
                for _ in 0..<(silence > underran ? 2 : 1) {
                    _ = tone.read(into: &chunk)
                    speaker.write(chunk)
                }
                underran = silence
                next += .milliseconds(20)
                let wait = next - ContinuousClock.now
                if wait > .zero { usleep(UInt32(wait / .microseconds(1))) } else { next = ContinuousClock.now }
            }
        }
        feeder.start()
        defer { feeding.withLock { $0 = false } }

        var configuration = AudioSessionConfiguration(category: .record)
        configuration.preferredInput = "pulse"
        let session = AudioSessionOwner<AppOwned>(name: "prepared", configuration: configuration,
                                                  backend: ALSADeviceBackend(defaultInput: "pulse", defaultOutput: "pulse"))
        try await session.setVoiceProcessingEnabled(false)  // the raw device audio is what is measured
        try await session.setRecordingAlwaysPrepared(true)
        // Bounded wait until the prepared microphone has delivered 40 ms.
        let deadline = ContinuousClock.now + .seconds(5)
        var buffered = 0
        while buffered < 1_920 {
            guard ContinuousClock.now < deadline else {
                await session.shutdown()
                return nil
            }
            try await Task.sleep(for: .milliseconds(10))
            buffered = await session.preparedSamplesBuffered
        }
        try await session.activate()
        let microphone = try await session.microphone()
        try microphone.start()
        var frame = [Int16](repeating: 0, count: 960)
        _ = microphone.read(into: &frame)
        microphone.stop()
        try await session.deactivate()
        #expect(await session.preparedInput == "pulse", "the microphone stays prepared after the call")
        await session.shutdown()
        return (frame, buffered)
    }

    @Test func aPreparedMicrophoneHasAudioInTheFirstFrameOfACall() async throws {
        try await ALSATestLock.withLock {
            for attempt in 1...3 {
                // A machine starved by the rest of a parallel run can deliver the device's audio
                // late (a frame partly padded): measured again, up to three times.
                guard let (frame, buffered) = try await Self.firstFrameOfAPreparedCall(),
                      frame.filter({ $0 == 0 }).count <= 48 || attempt == 3 else { continue }
                // The first read after activation is captured audio, all of it: the device was
                // running, and the backlog was cut to the newest 20 ms, not handed out.
                let silent = frame.filter { $0 == 0 }.count
                #expect(silent <= 48, "\(silent) of 960 samples are padding (buffered before: \(buffered))")
                #expect(Goertzel.power(of: 1_000, in: frame) > 1e6, "the first frame does not hold the tone")
                return
            }
            Issue.record("the prepared microphone delivered nothing in three attempts")
        }
    }
}
