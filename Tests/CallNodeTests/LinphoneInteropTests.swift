import CallNode
import CallNodeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A node and linphone (Debian's `linphone-cli` 5.1, its console phone) on this machine: SIP over
/// UDP, no ICE, plain RTP or SDES-SRTP, G.711 µ-law or Opus. Each side plays a tone and what each
/// heard is checked by frequency (the node records the call, linphone records what it receives);
/// DTMF both ways (RFC 4733), hold and resume.
extension RealTimeTests {
@Suite(.serialized, .enabled(if: LinphonePhone.isInstalled, "needs linphone-cli (scripts/bootstrap installs it)"))
struct LinphoneInteropTests {
    typealias Fixture = TwoNodeTests.Fixture

    /// linphone playing a 550 Hz tone at `rate`, listening on a port of its own.
    static func phone(_ f: Fixture, codec: LinphonePhone.Codec, encryption: String = "none", mandatory: Bool = false) async throws -> LinphonePhone {
        let rate = codec.rate
        var samples: [Int16] = []
        for i in 0..<(30 * rate) { samples.append(Int16(8_000 * sin(2 * Double.pi * 550 * Double(i) / Double(rate)))) }
        let tone = f.path("linphone-tone.wav")
        try WAV.write(samples, format: AudioFormat(sampleRate: rate, channels: 1), path: tone)
        return try await LinphonePhone(directory: f.path("linphone"), port: SIPCallTests.freePort(), rtpPort: SIPCallTests.freePort(),
                                       codec: codec, mediaEncryption: encryption, mandatory: mandatory, tone: tone)
    }

    /// What linphone recorded, and its rate.
    static func linphoneHeard(_ path: String) throws -> (samples: [Int16], rate: Int) {
        let (format, samples) = try WAV.read(path: path)
        return (samples, format.sampleRate)
    }

    /// linphone calls the node: plain PCMU, Opus under mandatory SDES-SRTP, or Opus under
    /// mandatory DTLS-SRTP (the handshake on the plain RTP path). Digits both ways with PCMU.
    @Test(arguments: [("PCMU", "none", false), ("opus", "srtp", true), ("opus", "dtls", true)])
    func linphoneCallsTheNodeAndEachHearsTheOther(codec: String, encryption: String, mandatory: Bool) async throws {
        let f = try Fixture()
        let phone = try await Self.phone(f, codec: codec == "PCMU" ? .pcmu : .opus, encryption: encryption, mandatory: mandatory)
        defer { phone.stop() }
        let node = try await f.node("bob", input: .tone(660), output: .wav(f.path("bob-out.wav")), acceptUnknown: true, keyExchange: .sdes)
        let uri = try await node.listenSIP(SIPListenSettings(host: "127.0.0.1", port: SIPCallTests.freePort(), user: "bob"))
        let events = node.events(), security = node.events()
        phone.send("record \(f.path("linphone-heard.wav"))")
        phone.send("call \(uri)")
        guard case let .incoming(call, _, _, _) = try await TwoNodeTests.next(events, where: { if case .incoming = $0 { true } else { false } })
        else { return }
        guard case let .secured(_, secured) = try await TwoNodeTests.next(security, where: { if case .secured(call, _) = $0 { true } else { false } })
        else { return }
        #expect(secured.unencrypted == (encryption == "none"), "\(secured)")
        if encryption == "dtls" { #expect(secured.keyExchange == .dtls, "\(secured)") }
        if encryption == "srtp" { #expect(secured.keyExchange == .sdes, "\(secured)") }
        let heard = try await SIPCallTests.hearing(events, beyond: 100)
        #expect(heard.encoding == (codec == "PCMU" ? .pcmu : .opus))
        #expect(heard.packetsLost == 0)
        if codec == "PCMU" {
            // RFC 4733 both ways (linphone offers telephone-event/8000 only with G.711).
            phone.send("7")
            _ = try await TwoNodeTests.next(events) { $0 == .dtmf(call, "7") }
            try await node.playDTMF(call, "5")
            #expect(await phone.waitFor("Receiving tone 5"), "linphone did not hear the digit: \(phone.output.suffix(400))")
        }
        try await node.hangUp(call)
        _ = try await TwoNodeTests.next(events) { if case .ended(call, .localEnded, _, _) = $0 { true } else { false } }
        #expect(await phone.waitFor("ended"), "\(phone.output.suffix(400))")
        await node.shutdown()
        phone.stop()
        #expect(SIPInteropTests.holds(try WAV.read(path: f.path("bob-out.wav")).samples, 550, over: 660), "the node did not hear linphone's 550 Hz")
        #expect(SIPInteropTests.holds(try Self.linphoneHeard(f.path("linphone-heard.wav")), 660, over: 550), "linphone did not hear the node's 660 Hz")
    }

    /// The node calls linphone (plain PCMU), holds it — linphone hears it is paused and the node
    /// hears nothing — and resumes: audio both ways again.
    @Test func theNodeCallsLinphoneHoldsAndResumes() async throws {
        let f = try Fixture()
        let phone = try await Self.phone(f, codec: .pcmu)
        defer { phone.stop() }
        let node = try await f.node("alice", input: .tone(660), output: .wav(f.path("alice-out.wav")), keyExchange: .sdes)
        _ = try await node.listenSIP(SIPListenSettings(host: "127.0.0.1", port: SIPCallTests.freePort(), user: "alice",
                                                       mediaEncryption: .off))
        let events = node.events()
        phone.send("record \(f.path("linphone-heard.wav"))")
        let call = try await node.call(.sip(phone.uri))
        _ = try await TwoNodeTests.next(events) { if case .connected(call, _) = $0 { true } else { false } }
        let before = try await SIPCallTests.hearing(events, beyond: 50)
        #expect(before.encoding == .pcmu)

        try await node.setHeld(call, true)
        #expect(await phone.waitFor("has been paused by"), "linphone was not told of the hold: \(phone.output.suffix(400))")
        // Held: nothing of linphone is played here (its packets, if any, are counted, not heard).
        let held = try #require(await node.statistics(call))
        try await Task.sleep(for: .seconds(1))
        let stillHeld = try #require(await node.statistics(call))
        #expect(stillHeld.receiveLevel < -60 || stillHeld.jitterBuffer.packetsPlayed == held.jitterBuffer.packetsPlayed,
                "audio played while held: \(stillHeld.receiveLevel) dB")

        try await node.setHeld(call, false)
        #expect(await phone.waitFor("Media streams established", count: 2), "linphone did not resume: \(phone.output.suffix(400))")
        let resumed = try #require(await node.statistics(call))
        _ = try await SIPCallTests.hearing(events, beyond: resumed.packetsReceived)
        try await node.hangUp(call)
        _ = try await TwoNodeTests.next(events) { if case .ended(call, .localEnded, _, _) = $0 { true } else { false } }
        await node.shutdown()
        phone.stop()
        #expect(SIPInteropTests.holds(try WAV.read(path: f.path("alice-out.wav")).samples, 550, over: 660), "the node did not hear linphone")
        #expect(SIPInteropTests.holds(try Self.linphoneHeard(f.path("linphone-heard.wav")), 660, over: 550), "linphone did not hear the node")
    }
}
}
