// The one rule CallNode protects: audio activation has exactly one owner. This program walks
// through the classic bug and the two correct flows, printing what each step may do.
// Run: swift run ownership-study
import CallNode
import CallNodeTestKit
import Foundation

print("""
    1. The bug (CallKit apps): the app activates the audio session in its answer handler, and
       then the system activates it again when the answer is fulfilled. Two activations of one
       session, the second interrupting the first: the microphone silently dies.

       In CallNode the system-owned session has no public activate():

           let session = AudioSessionOwner<SystemOwned>(backend: backend)
           try await session.activate()   // error: requires the types 'SystemOwned' and 'AppOwned' be equivalent
           try await session.providerActivate()   // error: 'providerActivate' is inaccessible (package access)

       so the bug does not compile. (The test doubleActivationDoesNotCompileInSystemOwnedMode
       type-checks exactly this against the built modules.)

    """)

// 1b. The bug, replayed with the test kit's deliberately unsafe session (both the app and the
// provider may activate it): media on manual time over an in-memory link, a 1 kHz tone pushed
// into the microphone, the far end's speaker measured.
func farEndHears(activations: Int) async throws -> (rms: Double, packets: Int) {
    let clock = MediaClock.manual()
    let link = InMemoryMediaLink(clock: clock)
    clock.add(link)
    let keys = (SRTPKey.random(), SRTPKey.random())
    let microphone = ManualAudioEndpoint(), speaker = ManualAudioEndpoint(), farSpeaker = ManualAudioEndpoint()
    let session = UnsafeDoubleActivationSession(microphone: microphone, speaker: speaker)
    session.appActivate()  // the app, in its answer action
    let media = try MediaActor(transport: link.a, keys: MediaKeys(outbound: keys.0, inbound: keys.1),
                               source: session.microphone(), sink: session.output(), clock: clock)
    let far = try MediaActor(transport: link.b, keys: MediaKeys(outbound: keys.1, inbound: keys.0),
                             source: SilenceSource(), sink: farSpeaker, clock: clock)
    try await media.start()
    try await far.start()
    if activations == 2 { session.providerActivate() }  // the system, when the answer is fulfilled
    var phase = 0.0
    for _ in 0..<60 {
        microphone.pushCapture((0..<960).map { _ in
            phase += 2 * Double.pi * 1000 / 48_000
            return Int16(8000 * sin(phase))
        })
        await clock.advance()
    }
    let heard = farSpeaker.pullPlayback(maximum: farSpeaker.playbackAvailable).suffix(24_000)
    let rms = (heard.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(max(1, heard.count))).squareRoot()
    let packets = await far.statistics.packetsReceived
    await media.stop()
    await far.stop()
    return (rms, packets)
}
let once = try await farEndHears(activations: 1), twice = try await farEndHears(activations: 2)
print("""
    1b. The bug, replayed (an unsafe session from CallNodeTestKit; nothing in CallNode can be
        driven into it): the far end received \(twice.packets) packets and heard RMS \(Int(twice.rms))
        after the app and the provider both activated; with one activation, \(once.packets) packets
        and RMS \(Int(once.rms)). The call "works"; the microphone is dead.

    """)

// 1c. The same bug on two whole nodes (call managers, legs, media with real Opus and SRTP) on
// manual time over in-memory signaling and ICE: Bob's node takes its call's endpoints from the
// unsafe session, and his answer action activates it before the provider does.
func wholeNodes(_ flow: UnsafeDoubleActivationSession.Flow) async throws -> (packets: Int, level: Double, activations: Int) {
    let nodes = try InMemoryNodes()
    let unsafe = UnsafeDoubleActivationSession(microphone: ToneSource(frequency: 660), speaker: NullSink(), flow: flow)
    let alice = try await nodes.node("alice", input: .tone(440))
    let bob = try await nodes.node("bob", input: .tone(660), autoAnswer: false) { $0.audioStandIn = unsafe }
    try await nodes.trust(alice, as: "alice", bob, as: "bob")
    let call = try await alice.call(.contact("bob"))
    let incoming = try await nodes.waitFor("bob") { if case .incoming = $0 { true } else { false } }
    guard case let .incoming(bobCall, _, _, _) = incoming.event else { throw InMemoryNodes.Timeout(description: "no call") }
    try await bob.answer(bobCall)
    try await nodes.waitFor("alice") { if case .connected = $0 { true } else { false } }
    for _ in 0..<100 { await nodes.step() }  // two seconds of the call
    let heard = await alice.statistics(call)
    try await alice.hangUp(call)
    await nodes.shutdown()
    return (heard?.packetsReceived ?? 0, heard?.receiveLevel ?? -99, unsafe.activations)
}
let buggy = try await wholeNodes(.appAndProvider), correct = try await wholeNodes(.providerOnly)
func dB(_ level: Double) -> String { level.formatted(.number.precision(.fractionLength(1))) }
print("""
    1c. The same on two whole in-memory nodes (ManualTimeNodeTests.theSeedBugReplayedOnWholeNodes):
        app and provider both activate Bob's session (\(buggy.activations) activations): the call
        connects, Alice receives \(buggy.packets) packets in 2 s and hears Bob at \(dB(buggy.level)) dB — nothing.
        Only the provider activates (\(correct.activations) activation): \(correct.packets) packets, Bob at \(dB(correct.level)) dB.
        A node built on AudioSessionOwner<SystemOwned> has only the second flow.

    """)

// 2. System-owned (CallKit mode): only the call manager activates, after the action is fulfilled.
let backend = ManualRenderingBackend()
let systemSession = AudioSessionOwner<SystemOwned>(backend: backend)
let manager = try await CallManager(audio: .systemOwned(systemSession))
let requests = Task {
    for await request in manager.requests {
        switch request {
        case let .perform(action):
            print("   performer: \(action.action.kind) — may do signaling, may not activate audio")
            try? await manager.fulfill(action.id)
        case let .didActivate(route):
            print("   performer: didActivate (\(route.input ?? "-") → \(route.output ?? "-")) — the only moment media may start")
        case .didDeactivate:
            print("   performer: didDeactivate — media has stopped, devices are closed")
        default:
            break
        }
    }
}
print("2. System-owned: the call manager is the provider and the one owner of activation.")
let call = UUID()
let start = try await manager.controller.request(.start(call: call, handle: CallHandle(.generic, "bob")))
_ = try await manager.outcome(of: start)
try await manager.report(.progress(call, .invitationSent))  // the invitation went out
try await manager.reportProgress(call, .offerReceived)
try await manager.reportProgress(call, .answerSent)
try await manager.reportMediaConnected(call)
try await Task.sleep(for: .milliseconds(50))
print("   session active: \(await systemSession.isActive) — activated once, by the provider")
let end = try await manager.controller.request(.end(call: call))
_ = try await manager.outcome(of: end)
try await Task.sleep(for: .milliseconds(50))
print("   session active after end: \(await systemSession.isActive)\n")
await manager.shutdown()
await requests.value

// 3. App-owned (CallKit-free mode): the app activates, once; a second activation is refused.
print("3. App-owned: the app is the one owner; nobody else can activate this session.")
let appSession = AudioSessionOwner<AppOwned>(backend: ManualRenderingBackend())
let route = try await appSession.activate()
print("   app: activate() → \(route.input ?? "-") → \(route.output ?? "-")")
do {
    _ = try await appSession.activate()
} catch {
    print("   app: activate() again → refused: \(error)")
}
try await appSession.deactivate()
print("   app: deactivate() → active: \(await appSession.isActive)")
await appSession.shutdown()
