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

/// Audio activation has one owner. These tests write the classic CallKit double-activation
/// sequence against the API and show what it does now, then the correct sequence in both
/// policies with the microphone's frames reaching the far end.
@Suite struct AudioOwnershipTests {
    /// The far end of a call: a media actor on an in-memory link, recording what it hears.
    struct FarEnd {
        let clock = MediaClock.manual()
        let link: InMemoryMediaLink
        let keys = (SRTPKey.random(), SRTPKey.random())
        let speaker = ManualAudioEndpoint()
        let remote: MediaActor

        init() throws {
            link = InMemoryMediaLink(clock: clock)
            clock.add(link)
            remote = try MediaActor(transport: link.b, keys: MediaKeys(outbound: keys.1, inbound: keys.0),
                                    source: ToneSource(frequency: 600), sink: speaker, clock: clock)
        }

        /// Media for the local side on the session's endpoints.
        func localMedia(source: any AudioSource, sink: any AudioSink) throws -> MediaActor {
            try MediaActor(transport: link.a, keys: MediaKeys(outbound: keys.0, inbound: keys.1),
                           source: source, sink: sink, clock: clock)
        }

        /// Runs `frames` frames, feeding `microphone` with a 1 kHz tone; returns the RMS the far
        /// end played in the last half.
        func run(frames: Int, microphone: ManualAudioEndpoint) async -> Double {
            var phase = 0.0
            for _ in 0..<frames {
                let tone = (0..<960).map { _ -> Int16 in
                    phase += 2 * Double.pi * 1000 / 48_000
                    return Int16(8000 * sin(phase))
                }
                microphone.pushCapture(tone)
                await clock.advance()
            }
            let heard = speaker.pullPlayback(maximum: speaker.playbackAvailable)
            let tail = heard.suffix(heard.count / 2)
            return (tail.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(max(1, tail.count))).squareRoot()
        }
    }

    @Test func systemOwnedSessionActivatesOnceAfterAnswerConnectsAndTheMicrophoneIsHeard() async throws {
        let backend = ManualRenderingBackend()
        let clock = ManualClock()
        let session = AudioSessionOwner<SystemOwned>(backend: backend, clock: TimerClock(clock))
        let sessionEvents = session.events()
        var h = try await Harness(audio: .systemOwned(session))
        let uuid = try await h.incoming()
        let answer = try await h.manager.controller.request(.answer(call: uuid))
        _ = try await h.perform(.answer)
        // Inside its answer action the app only configures (it has no way to activate).
        try await session.configure(AudioSessionConfiguration(category: .playAndRecord, mode: .voiceChat))
        #expect(await session.isActive == false)
        try await h.connectAnswered(uuid)
        #expect(try await h.manager.outcome(of: answer) == .fulfilled)

        // didActivate: the one moment to start media, on the session's endpoints.
        guard case let .didActivate(route) = try await h.next() else { throw TestFailure("expected didActivate") }
        #expect(route == ActiveAudioRoute(input: "manual", output: "manual"))
        let far = try FarEnd()
        let media = try far.localMedia(source: try await session.microphone(), sink: try await session.output())
        try await media.start()
        try await far.remote.start()
        #expect(await session.runningEndpoints == 2)
        let rms = await far.run(frames: 60, microphone: backend.endpoint("manual"))
        #expect(rms > 1000, "the far end heard the microphone (RMS \(rms))")
        #expect(backend.endpoint("manual").playbackAvailable > 0, "the far end's audio reached the session's output")

        // Hang up: the provider deactivates after the last call.
        let end = try await h.manager.controller.request(.end(call: uuid))
        _ = try await h.perform(.end)
        await media.stop()
        await far.remote.stop()
        try await h.manager.fulfill(end)
        #expect(try await h.next() == .didDeactivate)
        #expect(await session.isActive == false)

        var activations = 0, deactivations = 0
        for await event in sessionEvents {
            if case .didActivate = event { activations += 1 }
            if event == .didDeactivate { deactivations += 1; break }
        }
        #expect(activations == 1 && deactivations == 1)
    }

    /// The seed bug, replayed: with a session that both the app and the provider may activate
    /// (a test-kit double; nothing in CallNode can be driven into it), the app activates in its
    /// answer action, media starts, the provider activates again, and the call goes on with
    /// packets flowing and a microphone that delivers nothing. The same endpoints with one
    /// activation carry the microphone: the difference is the second activation alone.
    @Test func theSeedBugReplayedASecondActivationLeavesTheMicrophoneDead() async throws {
        for activations in [1, 2] {
            let microphone = ManualAudioEndpoint(), speaker = ManualAudioEndpoint()
            let unsafe = UnsafeDoubleActivationSession(microphone: microphone, speaker: speaker)
            let far = try FarEnd()
            unsafe.appActivate()  // in the answer action
            let media = try far.localMedia(source: unsafe.microphone(), sink: unsafe.output())
            try await media.start()
            try await far.remote.start()
            if activations == 2 { unsafe.providerActivate() }  // when the answer is fulfilled
            let rms = await far.run(frames: 60, microphone: microphone)
            let sent = await media.statistics.packetsSent
            await media.stop()
            await far.remote.stop()
            #expect(unsafe.activations == activations)
            #expect(sent >= 55, "packets flow either way (\(sent))")
            if activations == 2 {
                #expect(rms < 50, "after a second activation the far end hears nothing (RMS \(rms))")
            } else {
                #expect(rms > 1000, "with one activation the far end hears the microphone (RMS \(rms))")
            }
        }
    }

    /// The DESIGN.md sequence: the app activates in its answer action, again when its call
    /// session starts, while the system activates too. In system-owned mode the first two calls
    /// do not compile; this test compiles them against the built modules and reads the errors.
    @Test func doubleActivationDoesNotCompileInSystemOwnedMode() async throws {
        let modules = try Self.builtModulesDirectory()
        let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Sources").path
        let doubleActivation = """
            import AudioSession
            func answerAction(_ session: AudioSessionOwner<SystemOwned>) async throws {
                try await session.activate()          // the app activates in its answer action
            }
            func callSessionStarted(_ session: AudioSessionOwner<SystemOwned>) async throws {
                _ = try await session.providerActivate()   // …and again through the provider's path
            }
            """
        let appOwned = """
            import AudioSession
            func start(_ session: AudioSessionOwner<AppOwned>) async throws {
                try await session.activate()
                try await session.deactivate()
            }
            """
        let refused = try await Self.typecheck(doubleActivation, modules: modules, sources: sources)
        #expect(refused.status != 0)
        #expect(refused.output.contains("activate()"), "\(refused.output)")
        #expect(refused.output.contains("'SystemOwned' and 'AppOwned' be equivalent"), "\(refused.output)")
        #expect(refused.output.contains("providerActivate"), "the provider's path is not public: \(refused.output)")
        let accepted = try await Self.typecheck(appOwned, modules: modules, sources: sources)
        #expect(accepted.status == 0, "app-owned activation compiles: \(accepted.output)")
    }

    @Test func appOwnedDoubleActivationIsATypedErrorAndTheMicrophoneKeepsWorking() async throws {
        let backend = ManualRenderingBackend()
        let session = AudioSessionOwner<AppOwned>(backend: backend, clock: TimerClock(ManualClock()))
        var h = try await Harness(audio: .appOwned)
        let uuid = try await h.incoming()
        _ = try await h.answerAndConnect(uuid)
        // The app owns activation here: once after the answer…
        try await session.activate()
        // …and the classic second activation when its call session starts is refused, loudly.
        await #expect(throws: AudioSessionError.alreadyActive) { try await session.activate() }
        let far = try FarEnd()
        let media = try far.localMedia(source: try await session.microphone(), sink: try await session.output())
        try await media.start()
        try await far.remote.start()
        let rms = await far.run(frames: 60, microphone: backend.endpoint("manual"))
        #expect(rms > 1000, "the microphone still delivers frames (RMS \(rms))")
        // Deactivating under running media is refused with a message naming the fix.
        await #expect(throws: AudioSessionError.mediaRunning(endpoints: 2)) { try await session.deactivate() }
        #expect(AudioSessionError.mediaRunning(endpoints: 2).description.contains("stop the call's media first"))
        await media.stop()
        await far.remote.stop()
        try await session.deactivate()
        await #expect(throws: AudioSessionError.notActive) { try await session.deactivate() }
        #expect(await h.manager.isAudioActive == false, "the manager never touches an app-owned session")
    }

    @Test func aSystemOwnedSessionServesOneProvider() async throws {
        let session = AudioSessionOwner<SystemOwned>(backend: ManualRenderingBackend())
        _ = try await CallManager(audio: .systemOwned(session))
        await #expect(throws: AudioSessionError.providerAlreadyAttached) {
            _ = try await CallManager(audio: .systemOwned(session))
        }
    }

    @Test func holdKeepsTheSessionAndUnholdDoesNotActivateAgain() async throws {
        let session = AudioSessionOwner<SystemOwned>(backend: ManualRenderingBackend())
        let sessionEvents = session.events()
        var h = try await Harness(audio: .systemOwned(session))
        let first = try await h.connectedOutgoing()
        guard case .didActivate = try await h.next() else { throw TestFailure("expected didActivate after start") }
        let second = try await h.incoming(from: "carol")
        let ids = try await h.manager.request(CallTransaction([.setHeld(call: first, onHold: true), .answer(call: second)]))
        try await h.manager.fulfill(try await h.perform(.setHeld).id)
        _ = try await h.perform(.answer)
        try await h.connectAnswered(second)
        #expect(try await h.manager.outcome(of: ids[1]) == .fulfilled)
        // End the second call, resume the first: the session stayed active throughout.
        try await h.manager.reportCallEnded(second, reason: .remoteEnded)
        let unhold = try await h.manager.controller.request(.setHeld(call: first, onHold: false))
        try await h.manager.fulfill(try await h.perform(.setHeld).id)
        #expect(try await h.manager.outcome(of: unhold) == .fulfilled)
        #expect(await session.isActive)
        try await h.manager.reportCallEnded(first, reason: .remoteEnded)
        #expect(try await h.next() == .didDeactivate)
        var activations = 0
        for await event in sessionEvents {
            if case .didActivate = event { activations += 1 }
            if event == .didDeactivate { break }
        }
        #expect(activations == 1)
    }

    @Test func aSessionThatCannotOpenItsMicrophoneEndsTheCallInsteadOfAnsweringWithDeadAudio() async throws {
        // The backend offers no input: the default microphone cannot open.
        let backend = ManualRenderingBackend(routes: [AudioRoute(name: "speaker", isInput: false, isOutput: true)])
        let session = AudioSessionOwner<SystemOwned>(backend: backend)
        var h = try await Harness(audio: .systemOwned(session))
        let uuid = try await h.incoming()
        _ = try await h.manager.controller.request(.answer(call: uuid))
        _ = try await h.perform(.answer)
        try await h.connectAnswered(uuid)
        #expect(try await h.next() == .callEnded(uuid, .failed))
        let failure = try await firstEvent(h.events) { if case .audioActivationFailed = $0 { true } else { false } }
        guard case let .audioActivationFailed(message) = failure else { return }
        #expect(message.contains("manual route 'manual' is not offered"), "\(message)")
        #expect(await h.manager.liveCallCount == 0)
    }

    // MARK: Compiling snippets against the built modules

    static func builtModulesDirectory() throws -> String {
        try BuildProducts.directory() + "/Modules"
    }

    static func typecheck(_ source: String, modules: String, sources: String) async throws -> (status: Int32, output: String) {
        let base = "/tmp/callnode-typecheck-\(getpid())-\(UUID().uuidString.prefix(8))"
        let file = base + ".swift", log = base + ".log"
        defer { unlink(file); unlink(log) }
        try source.write(toFile: file, atomically: true, encoding: .utf8)
        var arguments = ["-typecheck", "-swift-version", "6", "-I", modules]
        for library in ["CALSA", "COpus", "CSRTP", "CNice", "CSpeexDSP", "CSSL"] {
            arguments += ["-Xcc", "-fmodule-map-file=\(sources)/\(library)/module.modulemap"]
        }
        // C targets of the package: their module maps are generated into the build directory.
        for target in ["CSRTPOpenSSL"] {
            arguments += ["-Xcc", "-fmodule-map-file=\(try BuildProducts.directory())/\(target).build/module.modulemap"]
        }
        let swiftc = ["/opt/swift/usr/bin/swiftc", "/usr/bin/swiftc", "/usr/local/bin/swiftc"]
            .first { FileManager.default.isExecutableFile(atPath: $0) } ?? "swiftc"
        let status = try await ChildProcess.running(swiftc, arguments + [file], output: log)
        return (status, (try? String(contentsOfFile: log, encoding: .utf8)) ?? "")
    }
}
