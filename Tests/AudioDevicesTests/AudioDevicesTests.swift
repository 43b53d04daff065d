import AudioDevices
import Foundation
import Testing
import TestingPrimitives

/// Sound without devices: WAV files both ways, a file as a microphone, the ring between a
/// device thread and media, tones and synthetic speech. (ALSA itself is `ALSAPulseTests`'.)
@Suite struct AudioDevicesTests {
    static func path(_ name: String) -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("callnode-devices-\(UUID().uuidString.prefix(8))-\(name)").path
    }

    @Test func aWAVFileReadsBackAsWritten() throws {
        let mono = (0..<4_800).map { Int16(truncatingIfNeeded: $0 &* 37) }
        let stereo = AudioFormat(sampleRate: 16_000, channels: 2)
        for (format, samples) in [(AudioFormat(), mono), (stereo, mono + mono)] {
            let path = Self.path("roundtrip.wav")
            defer { unlink(path) }
            try WAV.write(samples, format: format, path: path)
            let (read, back) = try WAV.read(path: path)
            #expect(read == format && back == samples, "\(format)")
            #expect(try WAV.parse(WAV.encode(samples, format: format)).samples == samples)
        }
    }

    @Test func whatIsNotA16BitWAVGetsAClearErrorNotACrash() {
        #expect(throws: AudioDeviceError.notFound("/nonexistent/callnode.wav")) { try WAV.read(path: "/nonexistent/callnode.wav") }
        #expect(throws: AudioDeviceError.self) { try WAV.parse(Array("RIFF....WAVEnope".utf8)) }
        #expect(throws: AudioDeviceError.self) { try WAV.parse(Array("not a wav file at all".utf8)) }
        #expect(throws: AudioDeviceError.self) { try WAV.parse([]) }
        // A chunk whose size runs past the end of the file.
        var overrun = WAV.encode([1, 2, 3], format: AudioFormat())
        overrun.replaceSubrange(16..<20, with: [0xFF, 0xFF, 0xFF, 0x7F])
        #expect(throws: AudioDeviceError.self) { try WAV.parse(overrun) }
        // Every prefix of a valid file is refused or read, never a crash.
        let valid = WAV.encode((0..<64).map { Int16($0) }, format: AudioFormat())
        for length in 0..<valid.count { _ = try? WAV.parse(Array(valid.prefix(length))) }
    }

    /// A file as a microphone: stereo mixed down to mono, read in frames across its end, then
    /// silence and false (or its start again, looping).
    @Test func aFileSourcePlaysItsSamplesThenSilenceOrLoops() {
        let stereo: [Int16] = [100, 300, -100, -300, 10, 30]
        let once = WAVFileSource(samples: stereo, format: AudioFormat(sampleRate: 48_000, channels: 2))
        #expect(once.format.channels == 1)
        var frame = [Int16](repeating: 7, count: 2)
        #expect(once.read(into: &frame) && frame == [200, -200])
        #expect(once.read(into: &frame) && frame == [20, 0], "the end padded with silence")
        #expect(!once.read(into: &frame) && frame == [0, 0], "then nothing more")

        let looping = WAVFileSource(samples: [1, 2, 3], format: AudioFormat(), loops: true)
        var five = [Int16](repeating: 0, count: 5)
        #expect(looping.read(into: &five) && five == [1, 2, 3, 1, 2])
        looping.skip(samples: 4)
        var one = [Int16](repeating: 0, count: 1)
        #expect(looping.read(into: &one) && one == [1], "a skip wraps as reading does")
    }

    /// The ring between a device's thread and media: full, it drops the oldest and counts them;
    /// empty, it pads with silence and counts that.
    @Test func theRingDropsTheOldestWhenFullAndPadsWhenEmpty() {
        let ring = SampleRing(capacity: 4)
        [1, 2, 3, 4, 5, 6].withUnsafeBufferPointer { ring.write($0) }
        #expect(ring.count == 4 && ring.overflowed == 2)
        var out = [Int16](repeating: 9, count: 6)
        let real = out.withUnsafeMutableBufferPointer { ring.read(into: $0) }
        #expect(real == 4 && out == [3, 4, 5, 6, 0, 0] && ring.underflowed == 2)
        [7, 8, 9].withUnsafeBufferPointer { ring.write($0) }
        #expect(ring.keepLatest(1) == 2 && ring.count == 1 && ring.overflowed == 2)
    }

    @Test func aToneIsItsFrequencyAndSpeechIsTheSameForItsSeed() {
        let tone = ToneSource(frequency: 1_000)
        var frame = [Int16](repeating: 0, count: 4_800)
        _ = tone.read(into: &frame)
        #expect(Goertzel.share(of: 1_000, in: frame) > 0.95)
        #expect(Goertzel.share(of: 1_500, in: frame) < 0.01)
        #expect(frame.map { abs(Int($0)) }.max()! <= Int(0.3 * 32_767) + 1, "at its amplitude")

        // Read in frames that do not divide the tone's repeat (800 samples for 660 Hz at 48 kHz),
        // with a skip between: the same as the sine computed sample by sample at those times.
        let repeating = ToneSource(frequency: 660, amplitude: 0.5)
        var read: [Int16] = []
        var chunk = [Int16](repeating: 0, count: 333)
        for _ in 0..<7 {
            _ = repeating.read(into: &chunk)
            read += chunk
        }
        repeating.skip(samples: 1_001)
        _ = repeating.read(into: &chunk)
        let at = Array(0..<(7 * 333)) + Array((7 * 333 + 1_001)..<(8 * 333 + 1_001))
        let expected = at.map { Int16((sin(2 * Double.pi * 660 * Double($0) / 48_000) * 0.5 * 32_767).rounded()) }
        #expect(zip(read + chunk, expected).allSatisfy { abs(Int($0) - Int($1)) <= 1 })
        // A frequency that is not a whole number of hertz is computed as it goes, just as well.
        let fractional = ToneSource(frequency: 660.5)
        _ = fractional.read(into: &frame)
        #expect(Goertzel.share(of: 660.5, in: frame) > 0.95)

        let speech = SyntheticSpeech.samples(seconds: 1, seed: 4)
        #expect(speech == SyntheticSpeech.samples(seconds: 1, seed: 4))
        #expect(speech != SyntheticSpeech.samples(seconds: 1, seed: 5))
        #expect(speech.count == 48_000 && speech.contains { abs(Int($0)) > 1_000 }, "audible")
    }
}
