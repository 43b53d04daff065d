import CallNode
import CallNodeTestSupport
import Foundation
import SIP
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Transfers over SIP between real nodes (RFC 3515: REFER, the transferee's new call, NOTIFYs
/// of its progress): Alice talks to Bob and transfers him to Carol; Bob follows, his call with
/// Alice ends once Carol answers, and the tones say who hears whom.
extension RealTimeTests {
@Suite(.serialized) struct SIPTransferTests {
    typealias Fixture = TwoNodeTests.Fixture

    /// Alice (440 Hz), Bob (660 Hz) and Carol (880 Hz), each listening for SIP on loopback and
    /// recording what it hears; Bob and Carol answer by themselves.
    static func nodes(_ f: Fixture) async throws -> (alice: CallNode, bob: CallNode, carol: CallNode, bobURI: String, carolURI: String) {
        let alice = try await f.node("alice", input: .tone(440), output: .wav(f.path("alice-out.wav")), keyExchange: .sdes)
        let bob = try await f.node("bob", input: .tone(660), output: .wav(f.path("bob-out.wav")), keyExchange: .sdes)
        let carol = try await f.node("carol", input: .tone(880), output: .wav(f.path("carol-out.wav")), keyExchange: .sdes)
        _ = try await alice.listenSIP(SIPListenSettings(host: "127.0.0.1", port: SIPCallTests.freePort(), user: "alice"))
        let bobURI = try await bob.listenSIP(SIPListenSettings(host: "127.0.0.1", port: SIPCallTests.freePort(), user: "bob"))
        let carolURI = try await carol.listenSIP(SIPListenSettings(host: "127.0.0.1", port: SIPCallTests.freePort(), user: "carol"))
        return (alice, bob, carol, bobURI, carolURI)
    }

    /// A recording's length and, over its last second, the power at each of `frequencies`.
    static func describe(_ path: String, _ frequencies: [Double]) throws -> String {
        let heard = try WAV.read(path: path)
        let rate = heard.format.sampleRate
        let tail = Array(heard.samples.suffix(rate))
        let powers = frequencies.map { "\(Int($0)) Hz: \(Goertzel.power(of: $0, in: tail, rate: Double(rate)))" }
        return "\(heard.samples.count) samples at \(rate) Hz; " + powers.joined(separator: ", ")
    }

    /// The last `seconds` of a recording hold `frequency` far more than `other`.
    static func ends(with path: String, _ frequency: Double, over other: Double, seconds: Int = 1) throws -> Bool {
        let heard = try WAV.read(path: path)
        let rate = heard.format.sampleRate
        guard heard.samples.count > (seconds + 1) * rate else { return false }
        let tail = Array(heard.samples[(heard.samples.count - seconds * rate)...])
        return Goertzel.power(of: frequency, in: tail, rate: Double(rate)) > 20 * Goertzel.power(of: other, in: tail, rate: Double(rate))
    }

    @Test func aBlindTransferMovesTheCallAndTheTonesSayWhoHearsWhom() async throws {
        let f = try Fixture()
        let (alice, bob, carol, bobURI, carolURI) = try await Self.nodes(f)
        let aliceEvents = alice.events(), bobEvents = bob.events(), carolEvents = carol.events()
        let call = try await alice.call(.sip(bobURI))
        _ = try await SIPCallTests.hearing(aliceEvents)
        let bobOld = try #require(await bob.liveCalls.first)

        try await alice.transfer(call, to: carolURI)
        // Alice hears how it goes, and her call ends once Carol answered.
        _ = try await TwoNodeTests.next(aliceEvents) { if case .transfer(call, 200, _) = $0 { true } else { false } }
        let aliceEnded = try await TwoNodeTests.next(aliceEvents) { if case .ended(call, _, _, _) = $0 { true } else { false } }
        guard case let .ended(_, aliceReason, aliceDetail, _) = aliceEnded else { return }
        #expect(aliceReason == .localEnded && aliceDetail == "transferred to \(carolURI)", "\(aliceEnded)")
        // Bob followed: his new call to Carol connected, his old one ended.
        let following = try await TwoNodeTests.next(bobEvents) { if case .transfer(bobOld, 202, _) = $0 { true } else { false } }
        // Bob is told who asks (the REFER's Referred-By, else its From: Alice's address).
        guard case let .transfer(_, _, followingDetail) = following else { return }
        #expect(followingDetail.contains("to \(carolURI) (asked by sip:alice@"), "\(followingDetail)")
        let bobEnded = try await TwoNodeTests.next(bobEvents) { if case .ended(bobOld, _, _, _) = $0 { true } else { false } }
        // Ended by Bob once Carol answered, or by Alice's BYE once she heard so: whichever came first.
        guard case let .ended(_, bobReason, detail, _) = bobEnded else { return }
        #expect(detail == "transferred to \(carolURI) at the peer's request" || bobReason == .remoteEnded, "\(bobEnded)")
        _ = try await TwoNodeTests.next(carolEvents) { if case .connected = $0 { true } else { false } }
        let bobNew = try #require(await bob.liveCalls.first)
        #expect(bobNew != bobOld)
        #expect(bob.handle(of: bobNew) == carolURI)
        _ = try await SIPCallTests.hearing(carolEvents)
        try await Task.sleep(for: .seconds(2))
        #expect(await alice.liveCalls.isEmpty)
        let carolCall = try #require(await carol.liveCalls.first)
        try await carol.hangUp(carolCall)
        _ = try await TwoNodeTests.next(bobEvents) { if case .ended(bobNew, _, _, _) = $0 { true } else { false } }
        for node in [alice, bob, carol] { await node.shutdown() }
        // Bob heard Carol last, and Carol heard Bob.
        #expect(try Self.ends(with: f.path("bob-out.wav"), 880, over: 440), "Bob did not end up hearing Carol")
        #expect(try Self.ends(with: f.path("carol-out.wav"), 660, over: 440), "Carol did not hear Bob")
    }

    @Test func aTransferToABlockedOrUnreachableTargetLeavesTheCallRunning() async throws {
        let f = try Fixture()
        let (alice, bob, _, bobURI, carolURI) = try await Self.nodes(f)
        let aliceEvents = alice.events()
        try await bob.store.directory.block(CallHandle(.generic, carolURI))
        let call = try await alice.call(.sip(bobURI))
        _ = try await SIPCallTests.hearing(aliceEvents)
        try await alice.transfer(call, to: carolURI)
        let refused = try await TwoNodeTests.next(aliceEvents) { if case let .transfer(call2, status, _) = $0 { call2 == call && status >= 300 } else { false } }
        guard case let .transfer(_, status, detail) = refused else { return }
        #expect(status == 403, "\(detail)")
        #expect(detail.contains("refused"), "\(detail)")
        // The call goes on: both still hear each other.
        _ = try await SIPCallTests.hearing(aliceEvents, beyond: 200)
        #expect(await alice.liveCalls == [call])
        // A transfer the node cannot ask for is refused at once, saying why.
        await #expect(throws: CallNodeError.self) { try await alice.transfer(call, to: "mailto:carol@example.org") }
        try await alice.hangUp(call)
        for node in [alice, bob] { await node.shutdown() }
    }

    /// Alice talks to Bob, consults Carol (who answers by hand), and joins them: Bob's new call
    /// replaces Alice's with Carol at Carol's end without ringing (RFC 3891), both of Alice's
    /// calls end, and Bob and Carol hear each other.
    @Test func anAttendedTransferJoinsBothPeersAndCarolDoesNotRingAgain() async throws {
        let f = try Fixture()
        let alice = try await f.node("alice", input: .tone(440), output: .wav(f.path("alice-out.wav")), keyExchange: .sdes)
        let bob = try await f.node("bob", input: .tone(660), output: .wav(f.path("bob-out.wav")), keyExchange: .sdes)
        let carol = try await f.node("carol", input: .tone(880), output: .wav(f.path("carol-out.wav")), autoAnswer: false, keyExchange: .sdes)
        _ = try await alice.listenSIP(SIPListenSettings(host: "127.0.0.1", port: SIPCallTests.freePort(), user: "alice"))
        let bobURI = try await bob.listenSIP(SIPListenSettings(host: "127.0.0.1", port: SIPCallTests.freePort(), user: "bob"))
        let carolURI = try await carol.listenSIP(SIPListenSettings(host: "127.0.0.1", port: SIPCallTests.freePort(), user: "carol"))
        let aliceEvents = alice.events(), bobEvents = bob.events(), carolEvents = carol.events()
        let toBob = try await alice.call(.sip(bobURI))
        _ = try await TwoNodeTests.next(aliceEvents) { if case .connected(toBob, _) = $0 { true } else { false } }
        // The consultation: Carol answers it by hand.
        let toCarol = try await alice.call(.sip(carolURI))
        guard case let .incoming(carolConsulted, _, _, _) = try await TwoNodeTests.next(carolEvents, where: { if case .incoming = $0 { true } else { false } })
        else { return }
        try await carol.answer(carolConsulted)
        _ = try await TwoNodeTests.next(aliceEvents) { if case .connected(toCarol, _) = $0 { true } else { false } }
        let bobOld = try #require(await bob.liveCalls.first)

        try await alice.transfer(toBob, replacing: toCarol)
        // Carol's new call (Bob's) connects with nobody answering it; her consultation ends.
        let (carolNew, _) = try await Self.connectedOther(than: carolConsulted, carolEvents)
        _ = try await TwoNodeTests.next(carolEvents) { if case .ended(carolConsulted, _, _, _) = $0 { true } else { false } }
        #expect(carol.handle(of: carolNew) == bobURI, "\(carol.handle(of: carolNew) ?? "-")")
        // Both of Alice's calls end, in either order: Bob's once the transfer is done, Carol's by Carol.
        var aliceEnded: Set<UUID> = []
        while aliceEnded != [toBob, toCarol] {
            let event = try await TwoNodeTests.next(aliceEvents) { if case .ended = $0 { true } else { false } }
            if case let .ended(ended, _, _, _) = event { aliceEnded.insert(ended) }
        }
        _ = try await TwoNodeTests.next(bobEvents) { if case .ended(bobOld, _, _, _) = $0 { true } else { false } }
        _ = try await SIPCallTests.hearing(carolEvents)
        try await Task.sleep(for: .seconds(2))
        #expect(await alice.liveCalls.isEmpty)
        #expect(await carol.liveCalls == [carolNew])
        try await carol.hangUp(carolNew)
        for node in [alice, bob, carol] { await node.shutdown() }
        #expect(try Self.ends(with: f.path("bob-out.wav"), 880, over: 440), "Bob did not end up hearing Carol")
        #expect(try Self.ends(with: f.path("carol-out.wav"), 660, over: 440), "Carol did not end up hearing Bob")
    }

    /// The first call other than `call` to connect, from `events`.
    static func connectedOther(than call: UUID, _ events: AsyncStream<NodeEvent>) async throws -> (UUID, NodeEvent) {
        let event = try await TwoNodeTests.next(events) { if case let .connected(other, _) = $0 { other != call } else { false } }
        guard case let .connected(other, _) = event else { throw TestFailure("not connected") }
        return (other, event)
    }

    static var hasBaresip: Bool { FileManager.default.isExecutableFile(atPath: "/usr/bin/baresip") }

    /// baresip (its `/transfer`, typed through its console) transfers its call with Bob to
    /// Carol: Bob follows, and ends up hearing Carol's 880 Hz, Carol Bob's 660 Hz.
    @Test(.enabled(if: Self.hasBaresip, "needs baresip (scripts/bootstrap installs it)"))
    func baresipTransfersItsCallWithANodeToAnotherNode() async throws {
        let f = try Fixture()
        let (_, bob, carol, bobURI, carolURI) = try await Self.nodes(f)
        let phone = f.path("baresip"), phonePort = FreePort.udpAndTCPWithTLSNext(), console = SIPCallTests.freePort()
        try SIPInteropTests.baresip(in: phone, port: phonePort, console: console)
        let bobEvents = bob.events(), carolEvents = carol.events()
        let baresip = try ChildProcess("/usr/bin/baresip", ["-f", phone, "-4", "-e", "/dial \(bobURI)", "-t", "25"], output: f.path("baresip.log"),
                                       nullStdin: true)
        defer { baresip.stop() }
        guard case let .incoming(old, _, _, _) = try await TwoNodeTests.next(bobEvents, where: { if case .incoming = $0 { true } else { false } })
        else { return }
        _ = try await SIPCallTests.hearing(bobEvents)
        SIPInteropTests.baresipCommand("/transfer \(carolURI)", port: console)
        _ = try await TwoNodeTests.next(bobEvents, within: .seconds(10)) { if case .transfer(old, 202, _) = $0 { true } else { false } }
        _ = try await TwoNodeTests.next(bobEvents) { if case .ended(old, _, _, _) = $0 { true } else { false } }
        _ = try await TwoNodeTests.next(carolEvents) { if case .connected = $0 { true } else { false } }
        _ = try await SIPCallTests.hearing(carolEvents)
        try await Task.sleep(for: .seconds(2))
        let bobNew = try #require(await bob.liveCalls.first)
        #expect(bob.handle(of: bobNew) == carolURI)
        try await bob.hangUp(bobNew)
        for node in [bob, carol] { await node.shutdown() }
        #expect(try Self.ends(with: f.path("bob-out.wav"), 880, over: 550), "Bob did not end up hearing Carol")
        #expect(try Self.ends(with: f.path("carol-out.wav"), 660, over: 550), "Carol did not hear Bob")
    }

    /// The node transfers its call with baresip (700 Hz) to linphone (1.2 kHz): baresip follows
    /// the REFER, the node's call ends once linphone answered, and linphone hears baresip.
    @Test(.enabled(if: Self.hasBaresip && LinphonePhone.isInstalled, "needs baresip and linphone-cli (scripts/bootstrap installs them)"))
    func theNodeTransfersBaresipToLinphone() async throws {
        let f = try Fixture()
        let alice = try await f.node("alice", input: .tone(440), output: .wav(f.path("alice-out.wav")), keyExchange: .sdes)
        _ = try await alice.listenSIP(SIPListenSettings(host: "127.0.0.1", port: SIPCallTests.freePort(), user: "alice"))
        let phone = f.path("baresip"), phonePort = FreePort.udpAndTCPWithTLSNext()
        try SIPInteropTests.baresip(in: phone, port: phonePort, mediaEncryption: "", codec: "PCMU/8000", srtpModules: false, tone: 700)
        let baresip = try ChildProcess("/usr/bin/baresip", ["-f", phone, "-4", "-t", "30"], output: f.path("baresip.log"),
                                       nullStdin: true)
        defer { baresip.stop() }
        var samples: [Int16] = []
        for i in 0..<(30 * 8_000) { samples.append(Int16(8_000 * sin(2 * Double.pi * 1_200 * Double(i) / 8_000))) }
        try WAV.write(samples, format: AudioFormat(sampleRate: 8_000, channels: 1), path: f.path("linphone-tone.wav"))
        let linphone = try await LinphonePhone(directory: f.path("linphone"), port: SIPCallTests.freePort(), rtpPort: SIPCallTests.freePort(),
                                               codec: .pcmu, tone: f.path("linphone-tone.wav"))
        defer { linphone.stop() }
        linphone.send("record \(f.path("linphone-heard.wav"))")
        try await SIPp.waitUntilListening(port: phonePort)
        let events = alice.events()
        let call = try await alice.call(.sip("sip:b@127.0.0.1:\(phonePort)"))
        _ = try await SIPCallTests.hearing(events)
        try await alice.transfer(call, to: linphone.uri)
        let ended = try await TwoNodeTests.next(events, within: .seconds(15)) { if case .ended(call, _, _, _) = $0 { true } else { false } }
        guard case let .ended(_, _, detail, _) = ended else { return }
        #expect(detail == "transferred to \(linphone.uri)", "\(ended)")
        #expect(await linphone.waitFor("Media streams established"), "\(linphone.output.suffix(400))")
        try await Task.sleep(for: .seconds(3))
        linphone.send("terminate")
        #expect(await linphone.waitFor("ended"), "\(linphone.output.suffix(400))")
        await alice.shutdown()
        #expect(try Self.ends(with: f.path("linphone-heard.wav"), 700, over: 440),
                "linphone did not hear baresip after the transfer: \((try? Self.describe(f.path("linphone-heard.wav"), [700, 440, 550, 1_200])) ?? "")")
    }

    @Test func callsBetweenNodesSayWhyTheyCannotBeTransferred() async throws {
        let f = try Fixture()
        let alice = try await f.node("alice", input: .tone(440))
        let bob = try await f.node("bob", input: .tone(660))
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let events = alice.events()
        let call = try await alice.call(.contact("bob"))
        _ = try await TwoNodeTests.next(events) { if case .connected = $0 { true } else { false } }
        await #expect(throws: CallNodeError.transfer("this call's wire has no transfer (only SIP calls can be transferred)")) {
            try await alice.transfer(call, to: "sip:carol@127.0.0.1:5999")
        }
        #expect(await alice.liveCalls == [call])
        for node in [alice, bob] { await node.shutdown() }
    }
}
}
