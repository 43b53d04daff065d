import MediaTiming
import CallNodeTestKit
import Media
import RTP
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Two calls' media over the in-memory link, on a manual media clock: every run is the same.
@Suite struct MediaActorTests {
    static func temporaryPath(_ name: String) -> String {
        "/tmp/callnode-media-\(getpid())-\(name)"
    }

    struct Call {
        let clock: MediaClock
        let link: InMemoryMediaLink
        let a: MediaActor
        let b: MediaActor
    }

    static func makeCall(source: any AudioSource, sink: any AudioSink,
                         conditions: LinkConditions = LinkConditions(), seed: UInt64 = 1,
                         configuration: MediaConfiguration = MediaConfiguration(),
                         frameKeys: (FrameEncryptionKey?, FrameEncryptionKey?) = (nil, nil),
                         encrypted: Bool = true) throws -> Call {
        let clock = MediaClock.manual()
        let link = InMemoryMediaLink(clock: clock, aToB: conditions, seed: seed)
        clock.add(link)
        let keyA = SRTPKey.random(), keyB = SRTPKey.random()
        // Unencrypted: plain RTP, as a SIP call without SRTP (a test can put its own packets on the link).
        let a = try MediaActor(configuration: configuration, transport: link.a,
                               keys: encrypted ? MediaKeys(outbound: keyA, inbound: keyB, frameEncryption: frameKeys.0.map { FrameKeys(shared: $0) }) : .unencrypted,
                               source: source, sink: NullSink(), clock: clock)
        let b = try MediaActor(configuration: configuration, transport: link.b,
                               keys: encrypted ? MediaKeys(outbound: keyB, inbound: keyA, frameEncryption: frameKeys.1.map { FrameKeys(shared: $0) }) : .unencrypted,
                               source: SilenceSource(), sink: sink, clock: clock)
        return Call(clock: clock, link: link, a: a, b: b)
    }

    /// The lag (in samples) at which `output` best matches `input`, and the normalised
    /// correlation there.
    /// The lag (in samples, up to `maxLag`) at which `output` best matches `input`, and the
    /// normalised correlation there: a coarse search on a sparse grid, refined around the best.
    static func align(_ input: [Int16], _ output: [Int16], maxLag: Int) -> (lag: Int, correlation: Double) {
        let length = min(input.count, output.count - maxLag - 8)
        func correlation(at lag: Int, step: Int) -> Double {
            var xy = 0.0, xx = 0.0, yy = 0.0
            var i = 0
            while i < length {
                let x = Double(input[i]), y = Double(output[i + lag])
                xy += x * y; xx += x * x; yy += y * y
                i += step
            }
            return xy / max(1, (xx * yy).squareRoot())
        }
        var best = (lag: 0, correlation: -1.0)
        for lag in stride(from: 0, to: maxLag, by: 4) {
            let c = correlation(at: lag, step: 16)
            if c > best.correlation { best = (lag, c) }
        }
        var refined = (lag: best.lag, correlation: -1.0)
        for lag in max(0, best.lag - 8)...(best.lag + 8) {
            let c = correlation(at: lag, step: 1)
            if c > refined.correlation { refined = (lag, c) }
        }
        return refined
    }

    @Test func speechThroughTwoCallsArrivesAlignedAndIntact() async throws {
        let inputPath = Self.temporaryPath("in.wav"), outputPath = Self.temporaryPath("out.wav")
        defer { unlink(inputPath); unlink(outputPath) }
        let speech = SyntheticSpeech.samples(seconds: 3)
        try WAV.write(speech, format: AudioFormat(), path: inputPath)

        let call = try Self.makeCall(source: try WAVFileSource(path: inputPath), sink: WAVFileSink(path: outputPath))
        try await call.a.start()
        try await call.b.start()
        await call.clock.advance(frames: 170)  // 3.4 s
        let stats = await call.b.statistics
        await call.a.stop()
        await call.b.stop()

        let (format, output) = try WAV.read(path: outputPath)
        #expect(format == AudioFormat())
        #expect(output.count == 170 * 960)
        let (lag, correlation) = Self.align(speech, output, maxLag: 4800)
        // Every half second aligns at the same lag: no frame was stretched, dropped or shifted.
        for k in 0..<6 {
            let part = Array(speech[(k * 24_000)..<((k + 1) * 24_000 - 4_800)])
            let (partLag, partCorrelation) = Self.align(part, Array(output[(k * 24_000)...]), maxLag: 4_800)
            #expect(abs(partLag - lag) <= 2 && partCorrelation >= 0.9, "part \(k): lag \(partLag), correlation \(partCorrelation)")
        }
        #expect(correlation >= 0.9, "normalised correlation \(correlation) at lag \(lag)")
        #expect(lag > 0 && lag < 4800, "delay \(lag) samples")
        #expect(stats.jitterBuffer.concealed == 0)
        #expect(stats.jitterBuffer.lost == 0)
        #expect(stats.authenticationFailures == 0)
        #expect(stats.packetsReceived >= 165)
        #expect(stats.fecExpectedLossPercent == 0, "no loss, so no redundancy spent")
    }

    @Test func tenPercentLossKeepsPlayingWithConcealmentAndFEC() async throws {
        let sink = ManualAudioEndpoint()
        let call = try Self.makeCall(source: WAVFileSource(samples: SyntheticSpeech.samples(seconds: 4), format: AudioFormat(), loops: true),
                                     sink: sink, conditions: LinkConditions(loss: 0.1), seed: 42)
        try await call.a.start()
        try await call.b.start()
        var quietFrames = 0
        for _ in 0..<250 {
            await call.clock.advance()
            let played = sink.pullPlayback(maximum: 960)
            if played.allSatisfy({ abs(Int($0)) < 50 }) { quietFrames += 1 }
        }
        let stats = await call.b.statistics
        let senderFEC = await call.a.statistics.fecExpectedLossPercent
        await call.a.stop()
        await call.b.stop()
        let (sent, dropped) = call.link.counts
        // The receiver's reports told the sender about the loss; FEC now plans for it.
        #expect(senderFEC >= 5, "FEC plans for \(senderFEC) % loss")
        #expect(dropped[0] > 10 && Double(dropped[0]) / Double(sent[0]) < 0.2, "dropped \(dropped[0]) of \(sent[0])")
        #expect(stats.jitterBuffer.lost > 10)
        #expect(stats.jitterBuffer.fecRecovered > 0)
        #expect(stats.jitterBuffer.concealed + stats.jitterBuffer.fecRecovered == stats.jitterBuffer.lost)
        #expect(stats.packetsLost > 10)
        // Speech has pauses (the syllable envelope), but most frames carry sound.
        #expect(quietFrames < 120, "\(quietFrames) of 250 frames were silent")
    }

    @Test func aCutPathIsReportedAsAStallAfterTheTimeoutAndItsEndWhenPacketsReturn() async throws {
        let call = try Self.makeCall(source: ToneSource(frequency: 440), sink: NullSink())
        try await call.a.start()
        try await call.b.start()
        await call.clock.advance(frames: 100)  // 2 s of a healthy call: no stall
        #expect(await call.b.statistics.inboundStalls == 0)
        call.link.setConditions(LinkConditions(loss: 1), fromA: true)
        await call.clock.advance(frames: 48)  // A → B cut, just under the 1 s timeout
        #expect(await call.b.statistics.inboundStalls == 0)
        await call.clock.advance(frames: 4)  // past it
        var stats = await call.b.statistics
        #expect(stats.inboundStalls == 1 && stats.inboundStalled)
        await call.clock.advance(frames: 50)  // still cut: one stall, not one per tick
        #expect(await call.b.statistics.inboundStalls == 1)
        call.link.setConditions(LinkConditions(), fromA: true)
        await call.clock.advance(frames: 2)
        stats = await call.b.statistics
        #expect(!stats.inboundStalled && stats.inboundStalls == 1)
        // A heard B throughout: no stall there.
        #expect(await call.a.statistics.inboundStalls == 0)
        await call.a.stop()
        await call.b.stop()
        // The events say the same, in order.
        var seen: [MediaEvent] = []
        for await event in call.b.events where event == .inboundStalled || event == .inboundResumed { seen.append(event) }
        #expect(seen == [.inboundStalled, .inboundResumed])
    }

    @Test func rtcpReportsGiveRoundTripTimeLossAndJitter() async throws {
        // Reports on their interval only: an early one moves the interval the last report covers.
        var configuration = MediaConfiguration()
        configuration.earlyReportAfterPackets = nil
        let call = try Self.makeCall(source: ToneSource(), sink: NullSink(),
                                     conditions: LinkConditions(loss: 0.05, delay: .milliseconds(40)), seed: 9,
                                     configuration: configuration)
        try await call.a.start()
        try await call.b.start()
        await call.clock.advance(frames: 300)  // 6 s: several report intervals
        let a = await call.a.statistics
        let b = await call.b.statistics
        await call.a.stop()
        await call.b.stop()
        // 40 ms each way on the media clock; reports are sent on ticks (20 ms granularity).
        let rtt = try #require(a.roundTripTime)
        #expect(rtt >= .milliseconds(60) && rtt <= .milliseconds(120), "RTT \(rtt)")
        #expect(a.remoteFractionLost > 0, "the peer reported loss")
        #expect(b.packetsLost > 0)
        #expect(a.sendBitrate > 8_000 && a.sendBitrate < 64_000, "send bitrate \(a.sendBitrate)")
    }

    @Test func muteSendsSilenceAndUnmuteRestoresTheMicrophone() async throws {
        for mode in MuteMode.allCases {
            var configuration = MediaConfiguration()
            configuration.muteMode = mode
            let call = try Self.makeCall(source: ToneSource(amplitude: 0.5), sink: NullSink(), configuration: configuration)
            try await call.a.start()
            try await call.b.start()
            await call.clock.advance(frames: 20)
            let before = await call.b.statistics.receiveLevel
            try await call.a.setMuted(true)
            await call.clock.advance(frames: 20)
            let muted = await call.b.statistics.receiveLevel
            try await call.a.setMuted(false)
            await call.clock.advance(frames: 20)
            let after = await call.b.statistics.receiveLevel
            await call.a.stop()
            await call.b.stop()
            #expect(before > -12, "\(mode): level before mute \(before)")
            #expect(muted < -60, "\(mode): level while muted \(muted)")
            #expect(after > -12, "\(mode): level after unmute \(after)")
        }
    }

    @Test func aMuteSetBeforeStartHoldsFromTheFirstFrameInEveryMode() async throws {
        for mode in MuteMode.allCases {
            var configuration = MediaConfiguration()
            configuration.muteMode = mode
            let path = Self.temporaryPath("muted-before-start-\(mode).wav")
            defer { unlink(path) }
            let call = try Self.makeCall(source: ToneSource(amplitude: 0.5), sink: WAVFileSink(path: path), configuration: configuration)
            try await call.a.setMuted(true)
            try await call.a.start()
            try await call.b.start()
            await call.clock.advance(frames: 50)
            let received = await call.b.statistics.packetsReceived
            try await call.a.setMuted(false)
            await call.clock.advance(frames: 20)
            let after = await call.b.statistics.receiveLevel
            await call.a.stop()
            await call.b.stop()
            let samples = try WAV.read(path: path).samples
            let mutedPart = samples.prefix(50 * 960).map { abs(Int($0)) }.max() ?? 0
            #expect(received >= 40, "\(mode): \(received) packets while muted")
            #expect(mutedPart <= 33, "\(mode): the muted microphone was heard (peak \(mutedPart))")  // −60 dBFS
            #expect(after > -12, "\(mode): level after unmute \(after)")
        }
    }

    @Test func appAudioIsMixedIntoWhatIsSentEvenWithTheInputMixerMuted() async throws {
        var configuration = MediaConfiguration()
        configuration.muteMode = .inputMixer
        let call = try Self.makeCall(source: SilenceSource(), sink: NullSink(), configuration: configuration)
        try await call.a.start()
        try await call.b.start()
        try await call.a.setMuted(true)
        try await call.a.setAppAudio(ToneSource(frequency: 600, amplitude: 0.5), volume: 1)
        await call.clock.advance(frames: 20)
        let level = await call.b.statistics.receiveLevel
        await call.a.stop()
        await call.b.stop()
        #expect(level > -12, "app audio level \(level)")
    }

    @Test func forgedAndGarbageDatagramsAreCountedNeverPlayed() async throws {
        let sink = ManualAudioEndpoint()
        let call = try Self.makeCall(source: SilenceSource(), sink: sink)
        try await call.a.start()
        try await call.b.start()
        // Someone on the path without the key: well-formed RTP with a fake tag, RTCP, junk.
        let forged = RTPPacket(payloadType: 111, sequenceNumber: 1, timestamp: 960, ssrc: 5, payload: [0xFC] + [UInt8](repeating: 0x55, count: 60)).serialized()
            + [UInt8](repeating: 0, count: 10)
        await call.link.a.send(forged)
        await call.link.a.send([0x80, 200, 0, 1, 0, 0, 0, 1] + [UInt8](repeating: 0, count: 14))
        await call.link.a.send([0xFF, 0xFF, 0xFF])
        await call.link.a.send([])
        await call.clock.advance(frames: 10)
        let stats = await call.b.statistics
        await call.a.stop()
        await call.b.stop()
        // The forged RTP fails authentication; the rest fail authentication or parsing.
        #expect(stats.authenticationFailures >= 1)
        #expect(stats.authenticationFailures + stats.malformedDropped == 4)
        #expect(stats.receiveLevel == -100)
    }

    @Test func aSourceThatEndsIsReportedAndSilenceFollows() async throws {
        let call = try Self.makeCall(source: WAVFileSource(samples: [Int16](repeating: 1000, count: 4800), format: AudioFormat()),
                                     sink: NullSink())
        try await call.a.start()
        try await call.b.start()
        var events = call.a.events.makeAsyncIterator()
        await call.clock.advance(frames: 10)
        await call.a.stop()
        await call.b.stop()
        var sawEnd = false
        while let event = await events.next() { if event == .sourceEnded { sawEnd = true } }
        #expect(sawEnd)
    }

    @Test func frameEncryptionCarriesAudioWithASharedKeyAndNothingPlayableWithout() async throws {
        let shared = FrameEncryptionKey.random()
        let cases: [(String, FrameEncryptionKey?, FrameEncryptionKey?, Bool)] = [
            ("shared key", shared, shared, true),
            ("different keys", shared, .random(), false),
            ("only the sender encrypts", shared, nil, false),
        ]
        for (name, senderKey, receiverKey, audible) in cases {
            let call = try Self.makeCall(source: ToneSource(amplitude: 0.5), sink: NullSink(), frameKeys: (senderKey, receiverKey))
            try await call.a.start()
            try await call.b.start()
            await call.clock.advance(frames: 30)
            let stats = await call.b.statistics
            await call.a.stop()
            await call.b.stop()
            if audible {
                #expect(stats.receiveLevel > -12, "\(name): level \(stats.receiveLevel)")
                #expect(stats.frameDecryptionFailures == 0, "\(name)")
            } else if receiverKey != nil {
                #expect(stats.frameDecryptionFailures >= 25, "\(name): \(stats.frameDecryptionFailures) failures")
                #expect(stats.receiveLevel == -100, "\(name): nothing may play")
            } else {
                // A receiver without the key cannot tell sealed Opus from Opus: it decodes
                // noise-like garbage or rejects it, but the tone never comes through.
                #expect(stats.receiveLevel < -12 || stats.malformedDropped > 0, "\(name): level \(stats.receiveLevel)")
            }
        }
    }

    @Test func frameKeysTravelAsBase64AndBadOnesAreTypedErrors() throws {
        let key = FrameEncryptionKey.random()
        #expect(try FrameEncryptionKey(base64: key.base64) == key)
        #expect(!key.description.contains(key.base64))
        #expect(throws: SRTPKeyError.wrongLength(expected: 32, got: 3)) { try FrameEncryptionKey(base64: "AAAA") }
        #expect(throws: SRTPKeyError.malformed("frame key is not valid base64")) { try FrameEncryptionKey(base64: "!!") }
    }

    @Test func invalidSettingsAreRejectedBeforeAnythingOpens() throws {
        let clock = MediaClock.manual()
        let link = InMemoryMediaLink(clock: clock)
        let keys = MediaKeys(outbound: .random(), inbound: .random())
        #expect(throws: MediaError.invalidConfiguration("Opus sample rate must be 8000, 12000, 16000, 24000 or 48000 Hz (got 44100)")) {
            try MediaActor(transport: link.a, keys: keys, source: ToneSource(format: AudioFormat(sampleRate: 44_100)),
                           sink: NullSink(), clock: clock)
        }
        #expect(throws: MediaError.self) {
            try MediaActor(configuration: MediaConfiguration(payloadType: 0), transport: link.a, keys: keys,
                           source: ToneSource(), sink: NullSink(), clock: clock)
        }
        #expect(throws: MediaError.self) {
            try MediaActor(transport: link.a, keys: keys, source: ToneSource(), sink: NullSink(),
                           clock: MediaClock.manual(frameDuration: .milliseconds(10)))
        }
        for red: UInt8 in [111, 101, 8, 72] {  // Opus's, DTMF's, a static type, one RTCP would shadow
            var configuration = MediaConfiguration()
            configuration.redundancyPayloadType = red
            #expect(throws: MediaError.invalidConfiguration("redundant audio needs its own dynamic payload type (35–63 or 96–127), got \(red)")) {
                try MediaActor(configuration: configuration, transport: link.a, keys: keys, source: ToneSource(), sink: NullSink(), clock: clock)
            }
        }
    }

    // MARK: - Redundant audio (RFC 2198)

    static func redundant(_ policy: RedundancyPolicy) -> MediaConfiguration {
        var configuration = MediaConfiguration()
        configuration.redundancyPayloadType = 63
        configuration.redundancy = policy
        return configuration
    }

    @Test func redundancyDepthFollowsReportedLossUpAndBackDown() async throws {
        let sink = ManualAudioEndpoint()
        let call = try Self.makeCall(source: WAVFileSource(samples: SyntheticSpeech.samples(seconds: 4), format: AudioFormat(), loops: true),
                                     sink: sink, conditions: LinkConditions(loss: 0.01), seed: 9, configuration: Self.redundant(.adaptive))
        try await call.a.start()
        try await call.b.start()
        // Light loss: one copy per packet.
        await call.clock.advance(frames: 300)
        let light = await call.a.statistics
        // Heavy loss: three.
        call.link.setConditions(LinkConditions(loss: 0.3), fromA: true)
        await call.clock.advance(frames: 300)
        let heavy = await call.a.statistics
        let rebuiltHeavy = await call.b.statistics.jitterBuffer
        // Clean again: back to none once the reports have been clean for the hold.
        call.link.setConditions(LinkConditions(), fromA: true)
        await call.clock.advance(frames: 700)
        let clean = await call.a.statistics
        await call.a.stop()
        await call.b.stop()
        #expect(light.sendingRedundancy && light.redundancyDepth == 1, "light loss: \(light.redundancyDepth)")
        #expect(heavy.redundancyDepth == 3, "heavy loss: \(heavy.redundancyDepth)")
        #expect(!clean.sendingRedundancy && clean.redundancyDepth == 0, "clean: \(clean.redundancyDepth)")
        // At depth three most of the lost frames come back whole, and the counters add up.
        #expect(rebuiltHeavy.redundancyRecovered > 2 * rebuiltHeavy.concealed, "\(rebuiltHeavy)")
        #expect(rebuiltHeavy.lost == rebuiltHeavy.redundancyRecovered + rebuiltHeavy.fecRecovered + rebuiltHeavy.concealed)
    }

    /// Half the packets lost at random: five copies per packet (a frame is then lost only when
    /// six packets in a row are), each frame coded at a share of the call's bitrate so that the
    /// call sends about what a frame and three copies took; nearly every lost frame comes back
    /// whole. Loss that eases takes the copies and the bitrate back down.
    @Test func halfThePacketsLostTakesFiveCopiesAtAboutTheSameBitrate() async throws {
        let call = try Self.makeCall(source: WAVFileSource(samples: SyntheticSpeech.samples(seconds: 4), format: AudioFormat(), loops: true),
                                     sink: NullSink(), conditions: LinkConditions(loss: 0.5), seed: 4,
                                     configuration: Self.redundant(.adaptive))
        try await call.a.start()
        try await call.b.start()
        await call.clock.advance(frames: 250)
        let early = await call.b.statistics.jitterBuffer
        await call.clock.advance(frames: 500)
        let sender = await call.a.statistics
        let receiver = await call.b.statistics.jitterBuffer
        call.link.setConditions(LinkConditions(loss: 0.2), fromA: true)
        await call.clock.advance(frames: 1_000)
        let eased = await call.a.statistics
        await call.a.stop()
        await call.b.stop()
        #expect(sender.redundancyDepth == 5 && !sender.redundancySpread, "depth \(sender.redundancyDepth)")
        #expect(sender.opusBitrate == 40_000 * 4 / 6, "bitrate \(sender.opusBitrate)")
        // Once five copies flow (after the first 5 s), at most 3 % of the frames are concealed.
        let lost = receiver.lost - early.lost, concealed = receiver.concealed - early.concealed
        #expect(lost > 200 && concealed * 100 <= 3 * 500, "lost \(lost), concealed \(concealed)")
        #expect(receiver.lost == receiver.redundancyRecovered + receiver.fecRecovered + receiver.concealed)
        #expect(eased.redundancyDepth == 3 && eased.opusBitrate == 40_000, "eased: depth \(eased.redundancyDepth), \(eased.opusBitrate) bit/s")
    }

    /// Losses in bursts (10 %, bursts of 3 on average) spread the copies (1, 3 and 6 frames
    /// back), and the receiver holds the delay they need; random loss at a higher rate keeps
    /// them close (1, 2, 3 back), where the runs are as short as randomness makes them.
    @Test(arguments: [(0.1, 3.0), (0.3, 1.0)])
    func burstyLossSpreadsTheCopiesRandomLossKeepsThemClose(loss: Double, burst: Double) async throws {
        let call = try Self.makeCall(source: WAVFileSource(samples: SyntheticSpeech.samples(seconds: 4), format: AudioFormat(), loops: true),
                                     sink: NullSink(), conditions: LinkConditions(loss: loss, meanBurst: burst), seed: 4,
                                     configuration: Self.redundant(.adaptive))
        try await call.a.start()
        try await call.b.start()
        await call.clock.advance(frames: 500)
        let sender = await call.a.statistics
        let receiver = await call.b.statistics
        await call.a.stop()
        await call.b.stop()
        #expect(sender.redundancyDepth == 3)
        let jb = receiver.jitterBuffer
        #expect(jb.lost == jb.redundancyRecovered + jb.fecRecovered + jb.concealed)
        if burst > 1 {
            #expect(sender.redundancySpread, "bursts: copies spread")
            // The deepest copy is six frames back: the buffer holds that delay while losses happen.
            #expect(jb.targetDelay >= .milliseconds(130), "target \(jb.targetDelay)")
        } else {
            #expect(!sender.redundancySpread, "random loss: copies close")
            #expect(jb.targetDelay < .milliseconds(100), "target \(jb.targetDelay)")
        }
    }

    @Test func onALossyPathRedundancyStartsAndRebuildsMostLostFramesWhole() async throws {
        let sink = ManualAudioEndpoint()
        let call = try Self.makeCall(source: WAVFileSource(samples: SyntheticSpeech.samples(seconds: 4), format: AudioFormat(), loops: true),
                                     sink: sink, conditions: LinkConditions(loss: 0.1), seed: 42, configuration: Self.redundant(.adaptive))
        try await call.a.start()
        try await call.b.start()
        await call.clock.advance(frames: 250)
        let received = await call.b.statistics
        let sender = await call.a.statistics
        await call.a.stop()
        await call.b.stop()
        let jb = received.jitterBuffer
        // Redundancy ran from the first frame and the reports of loss kept it on: every packet
        // carries the frame before it, and in-band FEC stands down.
        #expect(sender.sendingRedundancy)
        #expect(sender.fecExpectedLossPercent == 0)
        #expect(received.packetsLost > 15, "the link dropped \(received.packetsLost)")
        #expect(jb.redundancyRecovered > 10, "rebuilt \(jb.redundancyRecovered) of \(received.packetsLost)")
        // Left for FEC or concealment: losses before redundancy began, and back-to-back ones.
        let leftOver = jb.lost - jb.redundancyRecovered
        #expect(leftOver * 3 < received.packetsLost, "left for FEC or concealment \(leftOver) of \(received.packetsLost): \(jb)")
        // Every lost frame is counted once: rebuilt from a copy, rebuilt from FEC, or concealed.
        #expect(jb.redundancyRecovered + jb.concealed + jb.fecRecovered == jb.lost)
        #expect(received.malformedDropped == 0 && received.authenticationFailures == 0)
    }

    @Test func adaptiveRedundancyStopsOnACleanPathAndReturnsWithLoss() async throws {
        let call = try Self.makeCall(source: ToneSource(amplitude: 0.3), sink: NullSink(), configuration: Self.redundant(.adaptive))
        try await call.a.start()
        try await call.b.start()
        func sent(frames: Int) async -> (bytesPerPacket: Double, redundancy: Bool) {
            let before = await call.a.statistics
            await call.clock.advance(frames: frames)
            let after = await call.a.statistics
            return (Double(after.bytesSent - before.bytesSent) / Double(after.packetsSent - before.packetsSent), after.sendingRedundancy)
        }
        // On from the first frame: three copies until the first report (a quarter second in),
        // one after it.
        let first = await sent(frames: 10)
        let start = await sent(frames: 50)
        #expect(first.redundancy && start.redundancy)
        #expect(MediaConfiguration.redundancyHold == .seconds(8))
        await call.clock.advance(frames: 365)  // the report at 8.25 s has seen no loss for 8 s
        let clean = await sent(frames: 50)
        #expect(!clean.redundancy)
        // About twice the frame (plus 5 header bytes; the encoder's first second runs a little larger).
        #expect(start.bytesPerPacket > 1.8 * clean.bytesPerPacket && start.bytesPerPacket < 2.2 * clean.bytesPerPacket,
                "\(start.bytesPerPacket) against \(clean.bytesPerPacket) bytes per packet")
        #expect(first.bytesPerPacket > 3.4 * clean.bytesPerPacket, "the first frames: \(first.bytesPerPacket) against \(clean.bytesPerPacket)")
        // The path turns lossy: the next report brings redundancy back.
        call.link.setConditions(LinkConditions(loss: 0.3), fromA: true)
        let lossy = await sent(frames: 75)
        #expect(lossy.redundancy)
        let received = await call.b.statistics
        await call.a.stop()
        await call.b.stop()
        #expect(received.jitterBuffer.redundancyRecovered > 3)
        #expect(received.receiveLevel > -20, "level \(received.receiveLevel)")
    }

    @Test func redundancyOffSendsPlainOpusAndAlwaysNeverStops() async throws {
        var sent: [RedundancyPolicy: MediaStatistics] = [:]
        for policy in [RedundancyPolicy.always, .off] {
            let call = try Self.makeCall(source: ToneSource(amplitude: 0.3), sink: NullSink(), configuration: Self.redundant(policy))
            try await call.a.start()
            try await call.b.start()
            await call.clock.advance(frames: 150)
            sent[policy] = await call.a.statistics
            let received = await call.b.statistics
            await call.a.stop()
            await call.b.stop()
            #expect(received.jitterBuffer.lost == 0 && received.jitterBuffer.redundancyRecovered == 0, "\(policy)")
            #expect(received.receiveLevel > -20, "\(policy): level \(received.receiveLevel)")
        }
        let always = try #require(sent[.always]), off = try #require(sent[.off])
        #expect(always.sendingRedundancy && !off.sendingRedundancy)
        #expect(Double(always.bytesSent) > 1.8 * Double(off.bytesSent))
    }

    @Test func redundantCopiesOfEncryptedFramesOpenLikeTheirOriginals() async throws {
        let shared = FrameEncryptionKey.random()
        let call = try Self.makeCall(source: ToneSource(amplitude: 0.5), sink: NullSink(), conditions: LinkConditions(loss: 0.2),
                                     seed: 9, configuration: Self.redundant(.always), frameKeys: (shared, shared))
        try await call.a.start()
        try await call.b.start()
        await call.clock.advance(frames: 150)
        let received = await call.b.statistics
        await call.a.stop()
        await call.b.stop()
        #expect(received.frameDecryptionFailures == 0)
        #expect(received.jitterBuffer.redundancyRecovered > 10, "rebuilt \(received.jitterBuffer.redundancyRecovered)")
        #expect(received.receiveLevel > -12)
    }
}

@Suite struct EndpointTests {
    @Test func wavFilesRoundTripAndBadFilesAreTypedErrors() throws {
        let samples: [Int16] = [0, 1, -1, 32767, -32768, 1234]
        let bytes = WAV.encode(samples, format: AudioFormat(sampleRate: 16_000, channels: 2))
        let parsed = try WAV.parse(bytes)
        #expect(parsed.format == AudioFormat(sampleRate: 16_000, channels: 2))
        #expect(parsed.samples == samples)
        #expect(throws: AudioDeviceError.self) { try WAV.parse([UInt8]("not a wav file at all".utf8)) }
        var twelveBit = bytes
        twelveBit[34] = 12
        #expect(throws: AudioDeviceError.self) { try WAV.parse(twelveBit) }
        #expect(throws: AudioDeviceError.notFound("/nonexistent/callnode.wav")) { try WAV.read(path: "/nonexistent/callnode.wav") }
    }

    /// A WAV file with any sample encoding: `tag` 1 (PCM) or 3 (float), or extensible with it as
    /// the sub-format.
    static func wav(tag: UInt16, bits: UInt16, extensible: Bool, data: [UInt8]) -> [UInt8] {
        func le16(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xFF), UInt8(v >> 8)] }
        func le32(_ v: UInt32) -> [UInt8] { (0..<4).map { UInt8((v >> (8 * $0)) & 0xFF) } }
        var fmt = le16(extensible ? 0xFFFE : tag) + le16(1) + le32(48_000) + le32(48_000 * UInt32(bits / 8)) + le16(bits / 8) + le16(bits)
        if extensible {
            fmt += le16(22) + le16(bits) + le32(4) + le16(tag)
                + [0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71]
        }
        let chunks = Array("fmt ".utf8) + le32(UInt32(fmt.count)) + fmt + Array("data".utf8) + le32(UInt32(data.count)) + data
        return Array("RIFF".utf8) + le32(UInt32(4 + chunks.count)) + Array("WAVE".utf8) + chunks
    }

    @Test func floatTwentyFourAndEightBitFilesAreReadAsSixteenBit() throws {
        func float32(_ values: [Float]) -> [UInt8] { values.flatMap { v in (0..<4).map { UInt8((v.bitPattern >> (8 * $0)) & 0xFF) } } }
        // sox's default for a synthesized file: extensible, 32-bit float.
        let floats = try WAV.parse(Self.wav(tag: 3, bits: 32, extensible: true, data: float32([0, 0.5, -0.5, 1, -1, 2, .nan])))
        #expect(floats.format == AudioFormat(sampleRate: 48_000, channels: 1))
        #expect(floats.samples == [0, 16_384, -16_384, 32_767, -32_767, 32_767, 0])
        let plainFloat = try WAV.parse(Self.wav(tag: 3, bits: 32, extensible: false, data: float32([0.25])))
        #expect(plainFloat.samples == [8_192])
        // 24-bit little-endian: 0x123456 keeps its top 16 bits; -1 stays just below zero.
        let twentyFour = try WAV.parse(Self.wav(tag: 1, bits: 24, extensible: true, data: [0x56, 0x34, 0x12, 0xFF, 0xFF, 0xFF]))
        #expect(twentyFour.samples == [0x1234, -1])
        // 8-bit PCM is unsigned around 128.
        let eight = try WAV.parse(Self.wav(tag: 1, bits: 8, extensible: false, data: [128, 255, 0]))
        #expect(eight.samples == [0, 127 << 8, -128 << 8])
        // A float sub-format of an unsupported width is refused with the reason.
        #expect(throws: AudioDeviceError.self) { try WAV.parse(Self.wav(tag: 3, bits: 16, extensible: true, data: [0, 0])) }
    }

    @Test func aStereoFileIsMixedDownAndLoopsWhenAsked() {
        let source = WAVFileSource(samples: [100, 300, 100, 300], format: AudioFormat(channels: 2), loops: true)
        var frame = [Int16](repeating: 0, count: 5)
        #expect(source.read(into: &frame))
        #expect(frame == [200, 200, 200, 200, 200])
        let once = WAVFileSource(samples: [7, 7, 7], format: AudioFormat())
        var two = [Int16](repeating: 0, count: 2)
        #expect(once.read(into: &two) && two == [7, 7])
        #expect(once.read(into: &two) && two == [7, 0])
        #expect(!once.read(into: &two) && two == [0, 0])
    }

    @Test func theToneHasItsFrequency() {
        let tone = ToneSource(frequency: 1000, amplitude: 0.5)
        var frame = [Int16](repeating: 0, count: 48_000)
        _ = tone.read(into: &frame)
        var crossings = 0
        for i in 1..<frame.count where (frame[i - 1] < 0) != (frame[i] < 0) { crossings += 1 }
        #expect(abs(crossings - 2000) <= 2)
        #expect(frame.max()! >= 16_000 && frame.max()! <= 16_384)
    }

    @Test func theSampleRingDropsTheOldestAndPadsWithSilence() {
        let ring = SampleRing(capacity: 4)
        [1, 2, 3, 4, 5, 6].map { Int16($0) }.withUnsafeBufferPointer { ring.write($0) }
        var out = [Int16](repeating: 9, count: 6)
        let real = out.withUnsafeMutableBufferPointer { ring.read(into: $0) }
        #expect(real == 4)
        #expect(out == [3, 4, 5, 6, 0, 0])
        #expect(ring.overflowed == 2)
        #expect(ring.underflowed == 2)
    }
}

/// A call whose process is paused (SIGSTOP, a debugger, a starved VM) goes on when it resumes.
@Suite struct MediaStallTests {
    /// RMS of each 20 ms frame of `samples`, in dBFS.
    static func frameLevels(_ samples: [Int16]) -> [Double] {
        stride(from: 0, to: samples.count - 959, by: 960).map { start in
            var sum = 0.0
            for s in samples[start..<(start + 960)] { sum += Double(s) * Double(s) }
            let rms = (sum / 960).squareRoot() / 32_768
            return rms > 0 ? 20 * log10(rms) : -100
        }
    }

    @Test(arguments: [300, 1_000, 5_000])
    func audioIsBackWithinAHundredMillisecondsOfAStallAndTheRecordingKeepsRealTime(milliseconds: Int) async throws {
        let path = MediaActorTests.temporaryPath("stall-\(milliseconds).wav")
        defer { unlink(path) }
        let call = try MediaActorTests.makeCall(source: ToneSource(frequency: 1_000), sink: WAVFileSink(path: path))
        try await call.a.start()
        try await call.b.start()
        await call.clock.advance(frames: 100)
        call.clock.stall(for: .milliseconds(milliseconds))
        await call.clock.advance(frames: 100)
        let statistics = await call.b.statistics
        await call.a.stop()
        await call.b.stop()
        var events: [MediaEvent] = []
        for await event in call.b.events { events.append(event) }

        let (_, recorded) = try WAV.read(path: path)
        let levels = Self.frameLevels(recorded)
        let stalled = milliseconds / 20
        // Every tick wrote a frame, and the stall wrote silence: the file is on real time.
        #expect(levels.count == 200 + stalled)
        // Audible within 100 ms (five frames) of resuming, and every frame after that.
        let resumed = 100 + stalled
        let firstAudible = levels[resumed...].firstIndex { $0 > -30 }
        #expect(firstAudible.map { $0 - resumed } ?? .max <= 5, "first audible frame \(String(describing: firstAudible)) after \(resumed)")
        #expect(levels[(resumed + 5)...].allSatisfy { $0 > -30 }, "silent frames after recovery")
        #expect(events.contains(.playoutReset(PlayoutReset(reason: .stall, jump: .milliseconds(milliseconds)))))
        // Our own pause is not the peer's silence.
        #expect(!events.contains(.inboundStalled))
        #expect(statistics.jitterBuffer.skipped == stalled)
        #expect(statistics.jitterBuffer.late == 0)
    }

    @Test func bothSidesAgreeOnFrameKeysThatDifferByDirectionCallAndPeer() throws {
        let caller = FrameKeyAgreement(), callee = FrameKeyAgreement(), stranger = FrameKeyAgreement()
        let call = UUID(), a = String(repeating: "a", count: 64), b = String(repeating: "b", count: 64)
        let mine = try caller.keys(peerShare: callee.share, call: call, caller: a, callee: b, isCaller: true)
        let theirs = try callee.keys(peerShare: caller.share, call: call, caller: a, callee: b, isCaller: false)
        #expect(mine.outbound == theirs.inbound && mine.inbound == theirs.outbound)
        #expect(mine.outbound != mine.inbound)
        #expect(try caller.keys(peerShare: callee.share, call: UUID(), caller: a, callee: b, isCaller: true) != mine)
        #expect(try caller.keys(peerShare: callee.share, call: call, caller: a, callee: String(repeating: "c", count: 64), isCaller: true) != mine)
        // Someone who swapped in their own share ends up with other keys than either side.
        #expect(try stranger.keys(peerShare: caller.share, call: call, caller: a, callee: b, isCaller: false) != theirs)
        #expect(throws: SRTPKeyError.self) { try caller.keys(peerShare: "not a key", call: call, caller: a, callee: b, isCaller: true) }
    }
}

/// A stream that stops without a word — a peer whose hold could not reach us, a cut — is not
/// concealed for ever: a tone's last frames would otherwise ring on for a second.
@Suite struct ConcealmentFadeTests {
    @Test func aStreamThatStopsFadesToSilenceWithinAFifthOfASecond() async throws {
        let sink = ManualAudioEndpoint()
        let call = try MediaActorTests.makeCall(source: ToneSource(frequency: 440, amplitude: 0.3), sink: sink)
        try await call.a.start()
        try await call.b.start()
        for _ in 0..<60 {
            await call.clock.advance()
            _ = sink.pullPlayback(maximum: 4_800)
        }
        // The sender stops sending (inactive); the receiver is not told.
        try await call.a.setDirection(sending: false, receiving: true)
        var peaks: [Int] = []
        for _ in 0..<50 {
            await call.clock.advance()
            peaks.append(sink.pullPlayback(maximum: 4_800).map { abs(Int($0)) }.max() ?? 0)
        }
        let stats = await call.b.statistics
        await call.a.stop()
        await call.b.stop()
        #expect(stats.jitterBuffer.concealed > 20, "the receiver went on concealing: \(stats.jitterBuffer)")
        // The first frames after the last packet still carry the tone (concealed, then fading) …
        #expect(peaks.prefix(4).contains { $0 > 1_000 }, "\(peaks)")
        // … and from a fifth of a second after the last packet on, nothing.
        #expect(peaks.suffix(30).allSatisfy { $0 == 0 }, "\(peaks)")
    }
}
