import MediaTiming
import CallNodeTestKit
import CallNodeTestSupport
import Media
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite(.serialized) struct ALSAPulseTests {
    struct Attempt {
        var signal = 0.0
        var other = 0.0
        var diagnostics = ""
    }

    /// Plays a 1 kHz tone through ALSA `pulse` into a fresh server's null sink while recording
    /// its monitor, in real time, until the last half second of the recording holds the tone
    /// and nothing comparable at 700 Hz (bounded: 8 s).
    static func playAndRecord() async throws -> Attempt {
        let server = try PulseAudioServer()
        defer { server.stop() }
        server.useForALSA()
        let playback = ALSAPlaybackSink(device: "pulse")
        let capture = ALSACaptureSource(device: "pulse")
        try capture.start()
        try playback.start()
        let tone = ToneSource(frequency: 1000, amplitude: 0.5)
        var frame = [Int16](repeating: 0, count: 960)
        var recorded: [Int16] = []
        let clock = ContinuousClock()
        var deadline = clock.now
        var attempt = Attempt()
        for iteration in 0..<400 {
            _ = tone.read(into: &frame)
            playback.write(frame)
            _ = capture.read(into: &frame)
            recorded += frame
            deadline += .milliseconds(20)
            try await clock.sleep(until: deadline)
            if iteration >= 50 && iteration % 10 == 0 {
                let tail = recorded.suffix(24_000)
                attempt.signal = Goertzel.power(of: 1000, in: tail)
                attempt.other = Goertzel.power(of: 700, in: tail)
                // A clean half second of tone; on a busy machine a glitch (an under-run's
                // click) can spread energy to 700 Hz, and a later half second is clean again.
                if attempt.signal > 1e6 && attempt.signal > 100 * attempt.other { break }
            }
        }
        playback.stop()
        capture.stop()
        let nonzero = recorded.filter { $0 != 0 }.count
        attempt.diagnostics = "\(nonzero) of \(recorded.count) samples non-zero; capture \(capture.statistics), "
            + "playback \(playback.statistics); server log \(server.directory)/log"
        if capture.statistics.failure != nil || playback.statistics.failure != nil { attempt.signal = 0 }
        return attempt
    }

    @Test func aTonePlayedThroughALSAIsFoundInTheSinksMonitorRecording() async throws {
        try await ALSATestLock.withLock {
            // Seen about once in ten full-suite runs on a loaded machine: both streams open, yet
            // the monitor records only zeros. A fresh server and fresh streams (what a user would
            // do) has always worked, so up to three attempts; every failed one is reported.
            var failures: [String] = []
            var found: Attempt?
            for _ in 0..<3 {
                let attempt = try await Self.playAndRecord()
                if attempt.signal > 1e6 {
                    found = attempt
                    break
                }
                failures.append("1 kHz power \(attempt.signal); \(attempt.diagnostics)")
            }
            let attempt = try #require(found, "no attempt recorded the tone: \(failures)")
            // The recording holds the tone: strong at 1 kHz, nothing comparable at 700 Hz.
            #expect(attempt.signal > 100 * attempt.other, "1 kHz \(attempt.signal) vs 700 Hz \(attempt.other)")
            if !failures.isEmpty { print("ALSA test: \(failures.count) attempt(s) before success: \(failures)") }
        }
    }

    /// A call that hands playback audio faster than the device plays it (here a burst of
    /// half a second, as when frames were written before the device started) must not keep
    /// that as delay: what waits for the device stays within two frames and two periods.
    @Test func playbackWrittenAheadOfTheDeviceIsNotKeptAsDelay() async throws {
        try await ALSATestLock.withLock {
            let server = try PulseAudioServer()
            defer { server.stop() }
            server.useForALSA()
            let playback = ALSAPlaybackSink(device: "pulse")
            try playback.start()
            defer { playback.stop() }
            let tone = ToneSource(frequency: 1000, amplitude: 0.5)
            var frame = [Int16](repeating: 0, count: 960)
            var most = 0
            for _ in 0..<25 {
                _ = tone.read(into: &frame)
                playback.write(frame)
                most = max(most, playback.bufferedSamples)
            }
            // Before a write at most a frame and two periods wait; the write adds a frame.
            #expect(most <= 2 * 960 + 2 * 480, "\(most) samples queued at most")
            // Kept: the queue, the device's buffer (four periods) and a period being written;
            // the rest of the half second was dropped rather than played late.
            #expect(playback.statistics.droppedSamples >= 25 * 960 - (3 * 960 + 5 * 480 + 960),
                    "\(playback.statistics)")
        }
    }

    @Test func missingDevicesAreTypedErrors() async {
        await ALSATestLock.withLock {
            let missing = ALSAPlaybackSink(device: "hw:7,7")
            #expect(throws: AudioDeviceError.self) { try missing.start() }
            let unknown = ALSACaptureSource(device: "callnode_no_such_pcm")
            do {
                try unknown.start()
                Issue.record("opened a device that does not exist")
            } catch {
                guard case .notFound? = error as? AudioDeviceError else { Issue.record("expected notFound, got \(error)"); return }
            }
        }
    }

    // Here, in this serialized suite, rather than with the media actor tests: when another
    // test opened an ALSA device while the PulseAudio test started, that test's first capture
    // stream often recorded nothing (4 runs in 4; 0 in 3 once moved here).
    @Test func aMediaActorWithAMissingDeviceFailsToStartAndLeavesTheClock() async throws {
        try await ALSATestLock.withLock {
            let capture = ALSACaptureSource(device: "callnode_no_such_device")
            #expect(throws: AudioDeviceError.self) { try capture.start() }
            do {
                try capture.start()
            } catch {
                guard case .notFound? = error as? AudioDeviceError else { Issue.record("expected notFound, got \(error)"); return }
            }
            let clock = MediaClock.manual()
            let link = InMemoryMediaLink(clock: clock)
            let media = try MediaActor(transport: link.a, keys: MediaKeys(outbound: .random(), inbound: .random()),
                                       source: ToneSource(), sink: ALSAPlaybackSink(device: "callnode_no_such_device"), clock: clock)
            await #expect(throws: MediaError.self) { try await media.start() }
            #expect(clock.clientCount == 0)
        }
    }
}
