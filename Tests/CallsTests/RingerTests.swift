import MediaTiming
import AudioSession
import CallNodeTestKit
import CallNodeTestSupport
@testable import Calls
import Clocks
import Foundation
import Media
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite struct RingerTests {
    @Test func theRingtonePlaysOnlyWhileAnIncomingCallRings() async throws {
        let path = "/tmp/callnode-ringtone-\(getpid()).wav"
        defer { unlink(path) }
        // A 16 kHz stereo file: the ringer mixes it down and resamples it to 48 kHz.
        let tone = (0..<16_000).flatMap { i -> [Int16] in
            let s = Int16(10_000 * sin(2 * Double.pi * 440 * Double(i) / 16_000))
            return [s, s]
        }
        try WAV.write(tone, format: AudioFormat(sampleRate: 16_000, channels: 2), path: path)
        let backend = ManualRenderingBackend()
        let mediaClock = MediaClock.manual()
        let ringer = try Ringer(soundPath: path, output: { backend.makePlayback(device: "speaker", format: AudioFormat()) }, clock: mediaClock)
        let manager = try await CallManager(configuration: ProviderConfiguration(ringtoneSound: path), audio: .appOwned,
                                            ringer: ringer, clock: TimerClock(ManualClock()))
        var requests = manager.requests.makeAsyncIterator()
        let speaker = backend.endpoint("speaker")
        #expect(!ringer.isRinging)

        let uuid = UUID()
        try await manager.reportNewIncomingCall(uuid, update: CallUpdate(remoteHandle: CallHandle(.generic, "alice")))
        #expect(ringer.isRinging)
        await mediaClock.advance(frames: 10)
        let rang = speaker.pullPlayback(maximum: 48_000)
        #expect(rang.count == 10 * 960)
        let rms = (rang.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(rang.count)).squareRoot()
        #expect(rms > 5_000, "the ringtone is audible (RMS \(rms))")

        // Answering silences it at once, before media connects.
        _ = try await manager.controller.request(.answer(call: uuid))
        _ = await requests.next()
        #expect(!ringer.isRinging)
        await mediaClock.advance(frames: 10)
        #expect(speaker.playbackAvailable == 0)
        await manager.shutdown()
    }

    @Test func aMissingRingtoneIsReportedAtStartUp() {
        #expect(throws: AudioDeviceError.self) {
            _ = try Ringer(soundPath: "/nonexistent/ring.wav", output: { NullSink() }, clock: MediaClock.manual())
        }
    }
}
