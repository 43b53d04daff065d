import CallNodeTestKit
import Media
import MediaTiming
import RTP
import Testing
import TestingPrimitives

#if canImport(Glibc)
import Glibc
#endif

/// A G.711 call whose own source runs at the codec's 8 kHz: what it reads is coded as it is
/// (no resampler in the send path), and what is mixed into it at 48 kHz — app audio, hold
/// audio, the sent side of a recording tap — is brought to the rate it needs.
@Suite struct CodecRateSourceTests {
    static let narrow = AudioFormat(sampleRate: 8_000, channels: 1)

    /// Two calls' media over the in-memory link: `a` sends `source` and plays into `aSink`,
    /// `b` sends `bSource` and plays into `bSink`.
    static func call(source: any AudioSource, aSink: any AudioSink = NullSink(), bSource: any AudioSource = SilenceSource(),
                     bSink: any AudioSink, encoding: AudioEncoding = .pcmu) throws -> MediaActorTests.Call {
        let clock = MediaClock.manual()
        let link = InMemoryMediaLink(clock: clock, aToB: LinkConditions(), seed: 1)
        clock.add(link)
        let configuration = G711Tests.configuration(encoding)
        let a = try MediaActor(configuration: configuration, transport: link.a, keys: .unencrypted, source: source, sink: aSink, clock: clock)
        let b = try MediaActor(configuration: configuration, transport: link.b, keys: .unencrypted, source: bSource, sink: bSink, clock: clock)
        return MediaActorTests.Call(clock: clock, link: link, a: a, b: b)
    }

    /// Runs `frames` ticks and returns what `endpoint` played.
    static func run(_ call: MediaActorTests.Call, frames: Int, collecting endpoint: ManualAudioEndpoint) async throws -> [Int16] {
        try await call.a.start()
        try await call.b.start()
        var played: [Int16] = []
        for _ in 0..<frames {
            await call.clock.advance()
            played += endpoint.pullPlayback(maximum: 48_000)
        }
        await call.a.stop()
        await call.b.stop()
        return played
    }

    /// Samples no filter leaves as they are (a noise whose every sample differs), at 8 kHz:
    /// the peer, also at 8 kHz, plays exactly their G.711 coding and decoding, frame for frame.
    /// A resampler anywhere between (48 kHz and back, as a source at the session's rate had)
    /// changes every one of them.
    @Test(arguments: [AudioEncoding.pcmu, .pcma])
    func aSourceAtTheCodecRateIsCodedAsItIsRead(encoding: AudioEncoding) async throws {
        var state: UInt64 = 7
        let noise = (0..<16_000).map { _ in Int16(truncatingIfNeeded: Int(Self.splitMix(&state) % 20_000) - 10_000) }
        let heard = ManualAudioEndpoint(format: Self.narrow)
        let call = try Self.call(source: WAVFileSource(samples: noise, format: Self.narrow, loops: true), bSink: heard, encoding: encoding)
        #expect(call.a.captureFormat == Self.narrow)
        let played = try await Self.run(call, frames: 60, collecting: heard)
        var coded: [UInt8] = [], expected: [Int16] = []
        let law: G711.Law = encoding == .pcmu ? .mu : .a
        G711.encode(noise, law: law, into: &coded)
        G711.decode(coded, law: law, into: &expected)
        // Where the first frame of the source starts in what was played.
        let firstFrame = Array(expected.prefix(160))
        let start = try #require((0...(played.count - 160)).first { Array(played[$0..<($0 + 160)]) == firstFrame },
                                 "the source's first frame, coded and decoded, is nowhere in what was played")
        let run = played[start...].prefix(40 * 160)
        #expect(run.count == 40 * 160)
        #expect(Array(run) == Array(expected.prefix(run.count)), "40 frames played sample for sample as coded")
    }

    /// App audio an embedder made at 48 kHz, played into a call whose source runs at 8 kHz,
    /// is heard as the same tone (it was refused: "app audio must be mono at 8000 Hz").
    @Test func appAudioAtAnotherRateIsResampledToTheCallsRate() async throws {
        let heard = ManualAudioEndpoint(format: Self.narrow)
        let call = try Self.call(source: WAVFileSource(samples: [Int16](repeating: 0, count: 8_000), format: Self.narrow, loops: true),
                                 bSink: heard)
        try await call.a.setAppAudio(ToneSource(frequency: 1_000, amplitude: 0.3), volume: 1)
        let played = try await Self.run(call, frames: 50, collecting: heard)
        let last = Array(played.suffix(4_000))
        #expect(Goertzel.share(of: 1_000, in: last, rate: 8_000) > 0.9, "the 48 kHz tone is heard at 8 kHz")
        #expect(Goertzel.power(of: 1_000, in: last, rate: 8_000) > 100_000, "not faint")
    }

    /// Hold audio at 48 kHz on a call sending at 8 kHz: the held party hears the tone.
    @Test func holdAudioAtAnotherRateIsResampledToTheCallsRate() async throws {
        let heard = ManualAudioEndpoint(format: Self.narrow)
        let call = try Self.call(source: ToneSource(frequency: 2_000, amplitude: 0.3, format: Self.narrow), bSink: heard)
        try await call.a.setDirection(sending: true, receiving: false, holdAudio: ToneSource(frequency: 425, amplitude: 0.3))
        let played = try await Self.run(call, frames: 50, collecting: heard)
        let last = Array(played.suffix(4_000))
        #expect(Goertzel.share(of: 425, in: last, rate: 8_000) > 0.9, "the hold tone, not the microphone's 2 kHz")
    }

    /// A tap recording both sides of a call that sends at 8 kHz and plays at 48 kHz has both:
    /// the sent side is brought to the played rate before it is mixed (it was dropped).
    @Test func aTapRecordsWhatIsSentAtAnotherRateThanWhatIsPlayed() async throws {
        let played = ManualAudioEndpoint()  // a's speaker, at 48 kHz
        let call = try Self.call(source: ToneSource(frequency: 1_000, amplitude: 0.2, format: Self.narrow), aSink: played,
                                 bSource: ToneSource(frequency: 2_500, amplitude: 0.2), bSink: NullSink())
        let tap = ManualAudioEndpoint()
        try await call.a.start()
        try await call.a.setTap(tap, mixingSent: true)
        try await call.b.start()
        var recorded: [Int16] = []
        for _ in 0..<60 {
            await call.clock.advance()
            recorded += tap.pullPlayback(maximum: 48_000)
            _ = played.pullPlayback(maximum: 48_000)
        }
        await call.a.stop()
        await call.b.stop()
        let last = Array(recorded.suffix(24_000))
        #expect(last.count == 24_000)
        let sent = Goertzel.share(of: 1_000, in: last), heard = Goertzel.share(of: 2_500, in: last)
        #expect(sent > 0.3, "what a sent (1 kHz at 8 kHz) is in the recording: \(sent)")
        #expect(heard > 0.3, "what a heard (2.5 kHz) is in the recording: \(heard)")
    }

    /// The whole-buffer conversion keeps a tone a tone, at the length the rates say.
    @Test func aBufferIsResampledOnceToTheRateAsked() throws {
        let tone = ToneSource(frequency: 1_000, amplitude: 0.3)
        var wide = [Int16](repeating: 0, count: 48_000)
        _ = tone.read(into: &wide)
        let narrow = try #require(resampled(wide, from: 48_000, to: 8_000))
        #expect(narrow.count == 8_000)
        #expect(Goertzel.share(of: 1_000, in: narrow.suffix(4_000), rate: 8_000) > 0.95)
        #expect(resampled(wide, from: 48_000, to: 48_000) == wide, "the same rate is the same samples")
    }

    /// A looped input converted as a loop: 100 ms of a 1 kHz tone at 48 kHz becomes 100 ms of
    /// the same tone at 8 kHz with no seam — its first and last samples are the tone's too (cut
    /// at the end, the filter's delay held the last sample flat and began from silence).
    @Test func aLoopIsResampledWithoutASeam() throws {
        let wide = (0..<4_800).map { Int16((8_000 * sin(2 * Double.pi * 1_000 * Double($0) / 48_000)).rounded()) }
        let looped = try #require(resampled(wide, from: 48_000, to: 8_000, looping: true))
        #expect(looped.count == 800)
        let ideal = (0..<800).map { 8_000 * sin(2 * Double.pi * 1_000 * Double($0) / 8_000) }
        let worst = zip(looped, ideal).map { abs(Double($0) - $1) }.max() ?? .infinity
        #expect(worst < 240, "a sample off the tone by \(worst)")
        let cut = try #require(resampled(wide, from: 48_000, to: 8_000))
        let cutWorst = zip(cut, ideal).map { abs(Double($0) - $1) }.max() ?? 0
        #expect(cutWorst > 1_000, "converted as a cut file, its ends are off the tone (\(cutWorst))")
    }

    private static func splitMix(_ s: inout UInt64) -> UInt64 {
        s &+= 0x9E37_79B9_7F4A_7C15
        var z = s
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
