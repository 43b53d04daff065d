import CallNodeTestKit
import CallNodeTestSupport
import Foundation
import Media
import MediaTiming
import RTP
import Testing

/// Which stream a call plays when more than one arrives on its port: a second source leaves the
/// one being played alone and takes over once that one has gone quiet (a peer that restarted
/// its stream); the node's own stream coming back (a peer that reflects what it gets) plays only
/// while nothing else does. Plain G.711 on the in-memory link, manual clock.
@Suite struct SourceSelectionTests {
    typealias Call = MediaActorTests.Call

    /// `a` sends a 1 kHz tone to `b`, unencrypted µ-law, as a SIP call without SRTP does; `sink`
    /// is what `b` plays.
    static func makeCall(_ sink: ManualAudioEndpoint) throws -> Call {
        try MediaActorTests.makeCall(source: ToneSource(frequency: 1_000, amplitude: 0.3), sink: sink,
                                     configuration: G711Tests.configuration(.pcmu), encrypted: false)
    }

    /// Packets of another stream: a 1.6 kHz tone at 8 kHz, one 20 ms frame each.
    struct Stream {
        let ssrc: UInt32
        var sequence: UInt16 = 100
        var timestamp: UInt32 = 50_000
        var phase = 0

        mutating func next() -> [UInt8] {
            let samples = (0..<160).map { i in Int16(0.3 * 32_767 * sin(2 * Double.pi * 1_600 * Double(phase + i) / 8_000)) }
            phase += 160
            var payload: [UInt8] = []
            G711.encode(samples, law: .mu, into: &payload)
            defer { sequence &+= 1; timestamp &+= 160 }
            return RTPPacket(payloadType: 0, sequenceNumber: sequence, timestamp: timestamp, ssrc: ssrc, payload: payload).serialized()
        }
    }

    /// Runs `frames` ticks with one packet of `stream` sent to `b` each tick; returns what `b` played.
    static func run(_ call: Call, _ sink: ManualAudioEndpoint, frames: Int, with stream: inout Stream) async -> [Int16] {
        var played: [Int16] = []
        for _ in 0..<frames {
            await call.link.a.send(stream.next())
            await call.clock.advance()
            played += sink.pullPlayback(maximum: 960)
        }
        return played
    }

    /// `b`'s figures, once both ends have stopped.
    static func finish(_ call: Call) async -> MediaStatistics {
        let stats = await call.b.statistics
        await call.a.stop()
        await call.b.stop()
        return stats
    }

    static func heard(_ frequency: Double, over other: Double, in samples: [Int16]) -> Bool {
        Goertzel.power(of: frequency, in: samples) > 20 * Goertzel.power(of: other, in: samples)
            && Goertzel.power(of: frequency, in: samples) > 1_000_000
    }

    /// The receiver's own packets coming back interleaved with the peer's (each tick one of
    /// each, as SIPp's `-rtp_echo` beside its announcement) were taken for a new stream at every
    /// packet: the playout restarted a hundred times a second and played silence.
    @Test func itsOwnStreamReflectedBesideThePeersIsNotPlayed() async throws {
        let sink = ManualAudioEndpoint(), call = try Self.makeCall(sink)
        try await call.a.start()
        try await call.b.start()
        await call.clock.advance(frames: 5)
        var reflected = Stream(ssrc: call.b.ssrc)
        let played = await Self.run(call, sink, frames: 100, with: &reflected)
        let stats = await Self.finish(call)
        let peersTone = Self.heard(1_000, over: 1_600, in: Array(played.suffix(48_000)))
        #expect(peersTone, "the peer's tone is what plays")
        #expect(stats.jitterBuffer.playoutResets == 0, "\(stats.jitterBuffer.playoutResets) resets")
        #expect(stats.otherSourcesDropped >= 95, "\(stats.otherSourcesDropped)")
        #expect(stats.packetsReceived < 110, "only the peer's packets count as received: \(stats.packetsReceived)")
    }

    /// An echo test: the peer reflects the node's own stream and sends nothing else, so the
    /// reflection is what plays; the peer's own stream, once it comes, takes over at once.
    @Test func itsOwnStreamReflectedAlonePlaysUntilThePeerSpeaks() async throws {
        let sink = ManualAudioEndpoint(), call = try Self.makeCall(sink)
        try await call.b.start()
        var reflected = Stream(ssrc: call.b.ssrc)
        let echo = await Self.run(call, sink, frames: 60, with: &reflected)
        let echoed = Self.heard(1_600, over: 1_000, in: Array(echo.suffix(24_000)))
        #expect(echoed, "the reflection plays while nothing else comes")

        try await call.a.start()
        let both = await Self.run(call, sink, frames: 60, with: &reflected)
        let stats = await Self.finish(call)
        let peersTone = Self.heard(1_000, over: 1_600, in: Array(both.suffix(24_000)))
        #expect(peersTone, "the peer's stream took over from the reflection")
        #expect(stats.jitterBuffer.playoutResets == 1, "one restart, for the peer's stream: \(stats.jitterBuffer.playoutResets)")
    }

    /// A second source on the port while the one playing still sends does not take the playout; once
    /// the first stops, the second takes over within a few frames.
    @Test func aSecondSourceWaitsUntilTheFirstGoesQuiet() async throws {
        let sink = ManualAudioEndpoint(), call = try Self.makeCall(sink)
        try await call.a.start()
        try await call.b.start()
        await call.clock.advance(frames: 10)
        var other = Stream(ssrc: 0x5EC0_0D00)
        let both = await Self.run(call, sink, frames: 100, with: &other)
        let during = await call.b.statistics
        let firstKept = Self.heard(1_000, over: 1_600, in: Array(both.suffix(48_000)))
        #expect(firstKept, "the first stream keeps the playout")
        #expect(during.jitterBuffer.playoutResets == 0, "\(during.jitterBuffer.playoutResets) resets")
        #expect(during.otherSourcesDropped >= 95, "\(during.otherSourcesDropped)")

        await call.a.stop()
        let after = await Self.run(call, sink, frames: 100, with: &other)
        let stats = await call.b.statistics
        await call.b.stop()
        let secondTookOver = Self.heard(1_600, over: 1_000, in: Array(after.suffix(48_000)))
        #expect(secondTookOver, "the second stream plays once the first is quiet: \(stats.jitterBuffer.playoutResets) resets")
        #expect(stats.otherSourcesDropped - during.otherSourcesDropped <= 5, "taken over within \(MediaConfiguration.sourceTakeover)")
    }
}
