import Foundation
@testable import Media
import Testing
import TestingPrimitives

/// The G.711 call's resampler (48 kHz devices, 8 kHz on the wire): the telephone band passes,
/// and what 8 kHz cannot carry neither folds back into it going down nor shows up as images
/// going up, far below G.711's own noise.
@Suite struct ResamplerTests {
    static func tone(_ frequency: Double, rate: Double, seconds: Double, amplitude: Double = 10_000) -> [Int16] {
        (0..<Int(rate * seconds)).map { Int16(amplitude * sin(2 * Double.pi * frequency * Double($0) / rate)) }
    }

    /// Runs `input` through `resampler` a 20 ms frame at a time, as a call does.
    static func run(_ resampler: Resampler, _ input: [Int16]) -> [Int16] {
        let inFrame = resampler.inputRate / 50, outFrame = resampler.outputRate / 50
        var output: [Int16] = [], frame = [Int16](repeating: 0, count: outFrame)
        for start in stride(from: 0, to: input.count - inFrame + 1, by: inFrame) {
            resampler.process(Array(input[start..<start + inFrame]), into: &frame)
            output += frame
        }
        return output
    }

    static func rms(_ samples: ArraySlice<Int16>) -> Double {
        (samples.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(max(1, samples.count))).squareRoot()
    }

    static func decibels(_ ratio: Double) -> Double { 20 * log10(max(ratio, 1e-12)) }

    @Test func goingDownTheTelephoneBandPassesAndWhatItCannotCarryIsStopped() throws {
        // Flat through 3 kHz; the band's last 400 Hz may fall off a little (1.0 dB at 3.4 kHz).
        for (frequency, tolerance) in [(300.0, 0.5), (1_000, 0.5), (3_000, 0.5), (3_400, 1.5)] {
            let down = try #require(Resampler(from: 48_000, to: 8_000))
            let out = Self.run(down, Self.tone(frequency, rate: 48_000, seconds: 1))
            let level = Self.decibels(Self.rms(out[800...]) / (10_000 / 2.squareRoot()))
            #expect(abs(level) < tolerance, "\(frequency) Hz came out at \(level) dB")
            #expect(Goertzel.share(of: frequency, in: out[800...], rate: 8_000) > 0.95)
        }
        // 6 kHz would fold to 2 kHz at 8 kHz: it must be filtered out before.
        let down = try #require(Resampler(from: 48_000, to: 8_000))
        let out = Self.run(down, Self.tone(6_000, rate: 48_000, seconds: 1))
        let folded = Self.decibels(Self.rms(out[800...]) / (10_000 / 2.squareRoot()))
        #expect(folded < -60, "6 kHz folded into the band at \(folded) dB")
    }

    @Test func goingUpATonesImagesStayFarBelowIt() throws {
        let up = try #require(Resampler(from: 8_000, to: 48_000))
        let out = Array(Self.run(up, Self.tone(1_000, rate: 8_000, seconds: 1))[4_800...])
        let tone = Goertzel.power(of: 1_000, in: out, rate: 48_000)
        // 8 kHz's images of a 1 kHz tone: 7, 9, 15 and 17 kHz.
        for image in [7_000.0, 9_000, 15_000, 17_000] {
            let relative = 10 * log10(max(Goertzel.power(of: image, in: out, rate: 48_000), 1e-12) / tone)
            #expect(relative < -60, "the image at \(image) Hz is \(relative) dB below the tone")
        }
        let level = Self.decibels(Self.rms(out[...]) / (10_000 / 2.squareRoot()))
        #expect(abs(level) < 0.5, "the tone came out at \(level) dB")
    }

    /// Silence skipped (a frame of zeros after a frame of zeros comes out as zeros without the
    /// filter) changes nothing: the same samples, bit for bit, as the filter run on every frame,
    /// before the silence, through it and after it, both ways.
    @Test func digitalSilenceIsSkippedWithoutChangingASample() throws {
        for (from, to) in [(48_000, 8_000), (8_000, 48_000)] {
            let speech = Self.tone(440, rate: Double(from), seconds: 0.3) + Self.tone(1_700, rate: Double(from), seconds: 0.2, amplitude: 3_000)
            let silence = [Int16](repeating: 0, count: from / 50 * 4)
            let short = [Int16](repeating: 0, count: from / 50) + [5] + [Int16](repeating: 0, count: from / 50 * 3 - 1)
            let input = speech + silence + speech + short + speech + silence
            let skipping = try #require(Resampler(from: from, to: to))
            let filtered = Self.run(skipping, input)
            // The reference: the same filter with the skip turned off, run on every frame.
            let reference = try #require(Resampler(from: from, to: to, skippingSilence: false))
            #expect(filtered == Self.run(reference, input), "\(from) → \(to) Hz")
            #expect(filtered.count == input.count * to / from)
            // The skip did happen, on every silent frame but the first of each run of four
            // (the run with a lone sample in its second frame skips nothing until its third):
            // 3 + 1 + 3.
            #expect(skipping.skippedFrames == 7, "\(skipping.skippedFrames) frames skipped")
            #expect(reference.skippedFrames == 0)
            let outFrame = to / 50
            let silentStart = speech.count * to / from + outFrame
            #expect(filtered[silentStart..<silentStart + 3 * outFrame].allSatisfy { $0 == 0 })
        }
    }
}
