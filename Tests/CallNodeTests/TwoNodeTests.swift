import CallNode
import CallNodeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Two real nodes in one process: TLS signaling over loopback TCP, libnice ICE on 127.0.0.1,
/// SRTP and Opus, WAV files as microphone and speaker. These check outcomes (what was heard,
/// what was recorded, why a call ended), never wall times.
extension RealTimeTests {
@Suite(.serialized) struct TwoNodeTests {
    /// A temporary directory for homes and WAV files, removed when the test is done with it.
    final class Fixture: Sendable {
        let directory: String
        func path(_ name: String) -> String { directory + "/" + name }

        init() throws {
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("callnode-nodes-\(UUID())").path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        }

        /// CALLNODE_KEEP_TEST_FILES=1 keeps the directory (logs, recordings) to read after a failure.
        deinit {
            if ProcessInfo.processInfo.environment["CALLNODE_KEEP_TEST_FILES"] == nil { try? FileManager.default.removeItem(atPath: directory) }
        }

        func node(_ name: String, input: NodeAudioInput = .silence, output: NodeAudioOutput = .null,
                  speaker: NodeAudioOutput? = nil, autoAnswer: Bool = true, acceptUnknown: Bool = false,
                  appOwned: Bool = false, provider: ProviderConfiguration? = nil, iceAgentPool: Int = 1,
                  voiceProcessing: Bool? = nil, prepared: Bool = false, signalingLimits: SignalingLimits? = nil,
                  keyExchange: KeyExchange = .dtls, maximumCalls: Int? = nil, opusComplexity: Int? = nil,
                  iceAddresses: [String] = ["127.0.0.1"], conference: Bool = false) async throws -> CallNode {
            var configuration = CallNodeConfiguration(home: path(name))
            configuration.displayName = name
            configuration.listenAddress = SignalAddress(host: "127.0.0.1", port: 0)
            configuration.ice.localAddresses = iceAddresses
            configuration.audio = NodeAudioBackend(input: input, output: output, speaker: speaker)
            configuration.autoAnswer = autoAnswer
            if conference { configuration.autoAnswerOthers = .merge }
            configuration.acceptUnknownCallers = acceptUnknown
            configuration.appOwnedAudio = appOwned
            configuration.iceAgentPool = iceAgentPool
            configuration.voiceProcessing = voiceProcessing
            configuration.recordingAlwaysPrepared = prepared
            configuration.keyExchange = keyExchange
            configuration.maximumCalls = maximumCalls
            if let opusComplexity { configuration.media.opus.complexity = opusComplexity }
            if let provider { configuration.provider = provider }
            if let signalingLimits { configuration.signalingLimits = signalingLimits }
            let node = try await CallNode(configuration: configuration)
            await node.start()
            return node
        }

        /// Alice, playing a 440 Hz tone, calls Bob, who records what he hears into
        /// `bob-out.wav`; each knows the other. Bob's events are followed from before the call.
        func toneCall() async throws -> (alice: CallNode, bob: CallNode, bobEvents: AsyncStream<NodeEvent>, call: UUID) {
            let alice = try await node("alice", input: .tone(440))
            let bob = try await node("bob", output: .wav(path("bob-out.wav")))
            try await trust(alice, as: "alice", bob, as: "bob")
            let bobEvents = bob.events()
            return (alice, bob, bobEvents, try await alice.call(.contact("bob")))
        }

        /// `a` knows `b` by name (with its address); `b` knows `a`.
        func trust(_ a: CallNode, as aName: String, _ b: CallNode, as bName: String) async throws {
            try await a.store.contacts.add(Contact(name: bName, fingerprint: b.identity.fingerprint.hex, address: b.listenAddress?.description))
            try await b.store.contacts.add(Contact(name: aName, fingerprint: a.identity.fingerprint.hex, address: a.listenAddress?.description))
        }

        /// How well each recording holds the other side's speech (Alice's `alice-in.wav` in
        /// `bob-out.wav` and back) between `from` and `to` seconds, window by window
        /// (``AudioAlignment/piecewise(sent:received:from:to:)``): early in a call the jitter
        /// buffer still settles its delay, and a frame it stretches or drops shifts what follows
        /// by 20 ms, which a person does not hear but a single alignment over the span would
        /// score as lost speech.
        func speechAlignment(from: Double = 1, to: Double = 2) throws -> (forward: Double, backward: Double, aliceSent: [Int16], bobSent: [Int16], bobHeard: [Int16]) {
            let aliceSent = try WAV.read(path: path("alice-in.wav")).samples, bobSent = try WAV.read(path: path("bob-in.wav")).samples
            let bobHeard = try WAV.read(path: path("bob-out.wav")).samples, aliceHeard = try WAV.read(path: path("alice-out.wav")).samples
            let range = (Int(from * 48_000), Int(to * 48_000))
            return (AudioAlignment.piecewise(sent: aliceSent, received: bobHeard, from: range.0, to: range.1),
                    AudioAlignment.piecewise(sent: bobSent, received: aliceHeard, from: range.0, to: range.1), aliceSent, bobSent, bobHeard)
        }

        /// Speech-like audio; `reversed` makes a second voice whose waveform does not match the first.
        func speech(_ name: String, seed: UInt64, reversed: Bool = false) throws -> String {
            let file = path(name)
            let samples = SyntheticSpeech.samples(seconds: 3, seed: seed)
            try WAV.write(reversed ? samples.reversed() : samples, format: AudioFormat(), path: file)
            return file
        }
    }

    /// The first event matching `predicate`, or a failure after `timeout`.
    static func next(_ events: AsyncStream<NodeEvent>, within timeout: Duration = .seconds(20), line: Int = #line,
                     where predicate: @escaping @Sendable (NodeEvent) -> Bool) async throws -> NodeEvent {
        try await withThrowingTaskGroup(of: NodeEvent?.self) { group in
            group.addTask {
                for await event in events where predicate(event) { return event }
                return nil
            }
            group.addTask {
                try await Task.sleep(for: timeout)
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let event = first else {
                throw TestFailure("no matching event within \(timeout) (waited at line \(line))")
            }
            return event
        }
    }

    /// The loudest 20 ms frame of a recording, in dBFS.
    static func loudestFrame(_ path: String) throws -> Double {
        let samples = try WAV.read(path: path).samples
        var loudest = -100.0
        for start in stride(from: 0, to: samples.count - 959, by: 960) {
            var sum = 0.0
            for s in samples[start..<(start + 960)] { sum += Double(s) * Double(s) }
            let rms = (sum / 960).squareRoot() / 32_768
            if rms > 0 { loudest = max(loudest, 20 * log10(rms)) }
        }
        return loudest
    }

    @Test func twoNodesTalkBothWaysHoldMuteAndHangUp() async throws {
        let f = try Fixture()
        let alice = try await f.node("alice", input: .wav(try f.speech("alice-in.wav", seed: 11)), output: .wav(f.path("alice-out.wav")), autoAnswer: false)
        let bob = try await f.node("bob", input: .wav(try f.speech("bob-in.wav", seed: 29, reversed: true)), output: .wav(f.path("bob-out.wav")), autoAnswer: false)
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let aliceEvents = alice.events(), bobEvents = bob.events()

        let call = try await alice.call(.contact("bob"))
        guard case let .incoming(bobCall, from, name, known) = try await Self.next(bobEvents, where: { if case .incoming = $0 { true } else { false } }) else { return }
        #expect(from == alice.identity.fingerprint && name == "alice" && known)
        _ = try await Self.next(aliceEvents) { if case .ringing = $0 { true } else { false } }
        try await bob.answer(bobCall)
        _ = try await Self.next(aliceEvents) { if case .connected(call, _) = $0 { true } else { false } }
        _ = try await Self.next(bobEvents) { if case .connected(bobCall, _) = $0 { true } else { false } }

        // Audio flows both ways: each side receives a few seconds of packets.
        _ = try await Self.next(aliceEvents) { if case let .statistics(_, s) = $0 { s.packetsReceived >= 120 } else { false } }
        _ = try await Self.next(bobEvents) { if case let .statistics(_, s) = $0 { s.packetsReceived >= 120 } else { false } }

        try await alice.setHeld(call, true)
        _ = try await Self.next(bobEvents) { $0 == .remoteHold(bobCall, true) }
        try await alice.setHeld(call, false)
        _ = try await Self.next(bobEvents) { $0 == .remoteHold(bobCall, false) }

        // Muted, Alice sends silence: Bob's received level drops; unmuted, it comes back.
        try await alice.setMuted(call, true)
        _ = try await Self.next(bobEvents) { if case let .statistics(_, s) = $0 { s.receiveLevel < -60 } else { false } }
        try await alice.setMuted(call, false)
        _ = try await Self.next(bobEvents) { if case let .statistics(_, s) = $0 { s.receiveLevel > -40 } else { false } }

        // Bob hangs up: Alice hears why.
        try await bob.hangUp(bobCall)
        guard case let .ended(_, reason, _, duration) = try await Self.next(aliceEvents, where: { if case .ended(call, _, _, _) = $0 { true } else { false } }) else { return }
        #expect(reason == .remoteEnded)
        #expect((duration ?? .zero) > .seconds(1))
        await alice.shutdown()
        await bob.shutdown()

        // Each recording holds the other side's speech, aligned by cross-correlation. The
        // window is taken from the first seconds, before hold and mute silenced Alice.
        let (forward, backward, aliceSent, bobSent, bobHeard) = try f.speechAlignment()
        #expect(forward > 0.7, "alice → bob correlation \(forward)")
        #expect(backward > 0.7, "bob → alice correlation \(backward)")
        // Bob heard Alice, not his own voice (synthetic voices share structure, so the wrong
        // voice still correlates somewhat; seen: 0.97 against 0.64). Each voice's best of three
        // 0.5 s windows: the jitter buffer may stretch a frame inside one window while it settles
        // (one window then correlated 0.50 with Alice's voice, once in 20 runs).
        let windows = [48_000, 72_000, 96_000]
        let ownVoice = windows.map { AudioAlignment.best(sent: bobSent, received: bobHeard, start: $0).correlation }.max() ?? 0
        let aliceVoice = windows.map { AudioAlignment.best(sent: aliceSent, received: bobHeard, start: $0).correlation }.max() ?? 0
        print("two nodes: Bob's recording against Alice's voice \(aliceVoice), his own \(ownVoice)")
        #expect(ownVoice < aliceVoice - 0.2, "own voice \(ownVoice), alice \(aliceVoice)")

        // Recents on both sides.
        try await alice.store.flush()
        try await bob.store.flush()
        let aliceRow = try #require(try await alice.store.recents().first { $0.id == call })
        let bobRow = try #require(try await bob.store.recents().first { $0.id == bobCall })
        #expect(aliceRow.direction == .outgoing && aliceRow.reason == .remoteEnded && aliceRow.handle == bob.identity.fingerprint.hex)
        #expect(bobRow.direction == .incoming && bobRow.reason == .localEnded && bobRow.handle == alice.identity.fingerprint.hex)
        #expect(call == bobCall)
    }

    @Test func speechCrossesACallWithVoiceProcessingAndAPreparedMicrophone() async throws {
        let f = try Fixture()
        let alice = try await f.node("alice", input: .wav(try f.speech("alice-in.wav", seed: 11)), output: .wav(f.path("alice-out.wav")),
                                     voiceProcessing: true, prepared: true)
        let bob = try await f.node("bob", input: .wav(try f.speech("bob-in.wav", seed: 29, reversed: true)), output: .wav(f.path("bob-out.wav")),
                                   appOwned: true, voiceProcessing: true, prepared: true)
        let processing = (await alice.isVoiceProcessingEnabled, await bob.isVoiceProcessingEnabled)
        #expect(processing == (true, true))
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let aliceEvents = alice.events(), bobEvents = bob.events()
        let call = try await alice.call(.contact("bob"))
        _ = try await Self.next(bobEvents) { if case let .statistics(_, s) = $0 { s.packetsReceived >= 150 } else { false } }
        _ = try await Self.next(aliceEvents) { if case let .statistics(_, s) = $0 { s.packetsReceived >= 150 } else { false } }
        // Bypass and back mid-call: the call goes on.
        await alice.setVoiceProcessingBypassed(true)
        _ = try await Self.next(bobEvents) { if case let .statistics(_, s) = $0 { s.packetsReceived >= 200 } else { false } }
        await alice.setVoiceProcessingBypassed(false)
        _ = try await Self.next(bobEvents) { if case let .statistics(_, s) = $0 { s.packetsReceived >= 250 } else { false } }
        let heardByAlice = await alice.statistics(call), heardByBob = await bob.statistics(call)
        try await alice.hangUp(call)
        _ = try await Self.next(bobEvents) { if case .ended = $0 { true } else { false } }
        await alice.shutdown()
        await bob.shutdown()
        // Nothing echoes here (files, no room), so processing must leave the speech intact:
        // Alice's voice from the first second until her processing is bypassed (after three),
        // Bob's (processed all along) from the first second to the fourth. Only windows where
        // the sender spoke count: in its pauses noise suppression leaves near silence, which
        // matches nothing (a fifth of the windows of these voices).
        let read = { (name: String) in try WAV.read(path: f.path(name)).samples }
        let forward = AudioAlignment.windows(sent: try read("alice-in.wav"), received: try read("bob-out.wav"), from: 48_000, to: 3 * 48_000)
        let backward = AudioAlignment.windows(sent: try read("bob-in.wav"), received: try read("alice-out.wav"), from: 48_000, to: 4 * 48_000)
        let scores = (AudioAlignment.piecewiseSpeech(forward), AudioAlignment.piecewiseSpeech(backward))
        func heard(_ s: MediaStatistics?) -> String {
            guard let s else { return "no statistics" }
            let j = s.jitterBuffer
            return "complexity \(s.opusComplexity), delay \(j.currentDelay), late \(j.late), concealed \(j.concealed), stretched \(j.stretched), shrunk \(j.shrunk)"
        }
        print("voice processing: alice → bob \(scores.0) over \(forward.count) windows, bob → alice \(scores.1) over \(backward.count)")
        #expect(scores.0 > 0.7, "alice → bob correlation \(scores.0); Bob heard: \(heard(heardByBob)); windows: \(forward)")
        #expect(scores.1 > 0.7, "bob → alice correlation \(scores.1); Alice heard: \(heard(heardByAlice)); windows: \(backward)")
    }

    /// A port on 127.0.0.1 that nothing listens on now, and whether one can be bound.
    static func bindLoopback(port: UInt16 = 0) -> UInt16? {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw -> Bool in
                bind(descriptor, raw, length) == 0 && getsockname(descriptor, raw, &length) == 0
            }
        }
        return bound ? UInt16(bigEndian: address.sin_port) : nil
    }

    @Test func aNodeThatHasShutDownServesNoCallPage() async throws {
        let fixture = try Fixture()
        let node = try await fixture.node("solo")
        await node.shutdown()
        let port = try #require(Self.bindLoopback())
        await #expect(throws: SignalingError.self, "a shut-down node refuses to serve the page") {
            _ = try await node.serveWeb(host: "127.0.0.1", port: Int(port), secret: "secret")
        }
        // Nothing was left listening there (before, the server ran on with nothing to close it).
        #expect(Self.bindLoopback(port: port) == port, "the page's port is still taken after the refusal")
    }

    @Test func aStartedNodeReleasedWithoutShutDownStopsListening() async throws {
        let fixture = try Fixture()
        var port: UInt16 = 0
        do {
            let node = try await fixture.node("dropped")
            port = UInt16(try #require(node.listenAddress?.port))
            #expect(Self.bindLoopback(port: port) == nil, "the node listens there")
        }  // released here, never shut down
        // Its tasks are cancelled as it goes: the listener's closes the socket (waited for, bounded).
        let deadline = ContinuousClock.now + .seconds(10)
        while Self.bindLoopback(port: port) == nil && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(Self.bindLoopback(port: port) == port, "a released node's listener ran on")
    }

    @Test func garbageAtTheSignalingPortIsAnsweredAndTheNodeKeepsServing() async throws {
        let f = try Fixture()
        let alice = try await f.node("alice", input: .tone(440))
        let bob = try await f.node("bob", acceptUnknown: true)
        let bobAddress = try #require(bob.listenAddress)
        let stranger = try NodeIdentity.generate()
        let replies = try await SignalingClient.connect(host: bobAddress.host, port: bobAddress.port, identity: stranger, pin: nil) { connection, messages in
            try await connection.send(.answer(sdp: "v=0"), call: UUID())  // a call this connection does not carry
            try await connection.send(.offer(sdp: "not sdp at all"), call: UUID())
            var replies: [SignalEnvelope] = []
            for await reply in messages {
                if case let .success(envelope) = reply { replies.append(envelope) }
                if replies.count == 2 { break }
            }
            return replies
        }
        #expect(replies.allSatisfy { if case .error = $0.message { true } else { false } })

        // The node then takes a real call.
        let events = alice.events()
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        _ = try await Self.next(events) { if case let .statistics(uuid, s) = $0 { uuid == call && s.packetsReceived > 10 } else { false } }
        try await alice.hangUp(call)
        await alice.shutdown()
        await bob.shutdown()
    }
}
}

