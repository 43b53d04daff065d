import CallNodeTestSupport
import Media
import RTP
import Testing

/// G.711 coding and a whole G.711 call's media on the in-memory link (manual clock).
@Suite struct G711Tests {
    @Test(arguments: [G711.Law.mu, .a])
    func everyCodeDecodesToASampleThatCodesBackToIt(law: G711.Law) {
        for code in 0...255 {
            var decoded: [Int16] = [], recoded: [UInt8] = []
            G711.decode([UInt8(code)], law: law, into: &decoded)
            G711.encode(decoded, law: law, into: &recoded)
            // µ-law has two zeros (0x7F, 0xFF); zero codes as 0xFF.
            let expected = law == .mu && code == 0x7F ? 0xFF : code
            #expect(Int(recoded[0]) == expected, "code \(code) decodes to \(decoded[0]), which codes to \(recoded[0])")
        }
    }

    @Test func knownValuesOfBothLaws() {
        #expect(G711.muLaw(0) == 0xFF)
        #expect(G711.muLaw(Int16.max) == 0x80)
        #expect(G711.muLaw(Int16.min) == 0x00)
        #expect(G711.aLaw(0) == 0xD5)
        #expect(G711.aLaw(Int16.max) == 0xAA)
        #expect(G711.aLaw(Int16.min) == 0x2A)
        var samples: [Int16] = []
        G711.decode([0x80, 0x00], law: .mu, into: &samples)
        #expect(samples == [32_124, -32_124])
        G711.decode([0xAA, 0x2A], law: .a, into: &samples)
        #expect(samples == [32_256, -32_256])
    }

    /// Coding keeps a sample within half a step of its segment: relative error under 1/32
    /// above the smallest segments (about 38 dB signal to noise, G.711's design figure).
    @Test(arguments: [G711.Law.mu, .a])
    func theErrorStaysWithinHalfASegmentStep(law: G711.Law) {
        for value in stride(from: -32_000, through: 32_000, by: 37) {
            var coded: [UInt8] = [], decoded: [Int16] = []
            G711.encode([Int16(value)], law: law, into: &coded)
            G711.decode(coded, law: law, into: &decoded)
            let error = abs(Int(decoded[0]) - value)
            #expect(error <= max(16, (abs(value) + 132) / 32), "\(value) → \(decoded[0])")
        }
    }

    static func configuration(_ encoding: AudioEncoding) -> MediaConfiguration {
        var configuration = MediaConfiguration(payloadType: UInt8(encoding.staticPayloadType ?? 111))
        configuration.encoding = encoding
        return configuration
    }

    /// A 1 kHz tone at 48 kHz goes through 8 kHz G.711 and comes out a 1 kHz tone at 48 kHz,
    /// 160 bytes a packet, nothing lost or concealed.
    @Test(arguments: [AudioEncoding.pcmu, .pcma])
    func aToneCrossesAG711Call(encoding: AudioEncoding) async throws {
        let sink = ManualAudioEndpoint()
        let call = try MediaActorTests.makeCall(source: ToneSource(frequency: 1_000, amplitude: 0.3), sink: sink,
                                                configuration: Self.configuration(encoding))
        try await call.a.start()
        try await call.b.start()
        var played: [Int16] = []
        for _ in 0..<100 {
            await call.clock.advance()
            played += sink.pullPlayback(maximum: 960)
        }
        let stats = await call.b.statistics
        await call.a.stop()
        await call.b.stop()
        let last = Array(played.suffix(48_000))
        #expect(last.count == 48_000)
        #expect(Goertzel.power(of: 1_000, in: last) > 100 * Goertzel.power(of: 3_000, in: last), "no clean 1 kHz tone")
        #expect(Goertzel.power(of: 1_000, in: last) > 1_000_000, "the tone is too quiet")
        #expect(stats.jitterBuffer.concealed == 0)
        #expect(stats.malformedDropped == 0)
        #expect(stats.packetsReceived >= 95)
        #expect(stats.bytesReceived == stats.packetsReceived * 160, "one byte a sample, 160 a frame")
        // Both ends on G.711's 8 kHz RTP clock: no timeline jumps, no jitter measured.
        #expect(stats.jitterBuffer.playoutResets == 0)
        #expect(stats.jitter < .milliseconds(1), "\(stats.jitter)")
    }

    /// Digits on G.711's 8 kHz clock: each lasts 100 ms = 800 timestamp units.
    @Test func digitsCrossAG711Call() async throws {
        var configuration = Self.configuration(.pcmu)
        configuration.telephoneEventPayloadType = 100
        let call = try MediaActorTests.makeCall(source: ToneSource(), sink: NullSink(), configuration: configuration)
        try await call.a.start()
        try await call.b.start()
        let received = Task { await DTMFTests.digits(from: call.b.events, count: 3) }
        try await call.a.sendDTMF("42#")
        await call.clock.advance(frames: 11 * 3 + 10)
        await call.a.stop()
        await call.b.stop()
        #expect(await received.value == "42#")
    }

    /// A lost G.711 packet is concealed (the last frame fading), never a burst of noise.
    @Test func lossIsConcealed() async throws {
        let sink = ManualAudioEndpoint()
        let call = try MediaActorTests.makeCall(source: ToneSource(frequency: 1_000, amplitude: 0.3), sink: sink,
                                                conditions: LinkConditions(loss: 0.1), seed: 3,
                                                configuration: Self.configuration(.pcma))
        try await call.a.start()
        try await call.b.start()
        var loudest = 0
        for _ in 0..<150 {
            await call.clock.advance()
            for sample in sink.pullPlayback(maximum: 960) { loudest = max(loudest, abs(Int(sample))) }
        }
        let stats = await call.b.statistics
        await call.a.stop()
        await call.b.stop()
        #expect(stats.jitterBuffer.concealed > 0)
        #expect(loudest <= Int(0.3 * 32_767 * 1.1), "louder than the tone: \(loudest)")
    }
}
