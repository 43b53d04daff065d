// Two call managers in one program, in CallKit mode: each node's audio session is system-owned,
// so only the provider activates it, and media starts on didActivate. The nodes' "signaling"
// is a direct function call; their media is real (Opus + SRTP) over an in-memory link, paced
// in real time. Alice calls Bob, Bob answers, Alice dials 42#, holds, resumes, hangs up.
// Run: swift run two-phones
import CallNode
import CallNodeTestKit
import Foundation

/// The part of a node that does the work of each action: CallKit's provider delegate.
actor Performer {
    let name: String
    let manager: CallManager
    let session: AudioSessionOwner<SystemOwned>
    let clock: MediaClock
    private var peer: Performer?
    private var media: [UUID: MediaActor] = [:]
    private var audioActive = false

    init(name: String, session: AudioSessionOwner<SystemOwned>, clock: MediaClock) async throws {
        self.name = name
        self.session = session
        self.clock = clock
        manager = try await CallManager(configuration: ProviderConfiguration(localizedName: name), audio: .systemOwned(session))
    }

    func connect(to peer: Performer) { self.peer = peer }

    /// Serves the manager's requests until it shuts down.
    func run() async {
        for await request in manager.requests {
            do { try await handle(request) } catch { print("[\(name)] \(request) failed: \(error)") }
        }
    }

    private func handle(_ request: ProviderRequest) async throws {
        switch request {
        case let .perform(action):
            let uuid = action.action.callUUID
            switch action.action {
            case .start:
                try await peer?.invited(uuid, by: name)
                try await manager.fulfill(action.id)
                try await manager.reportOutgoingCallStartedConnecting(uuid)
            case .answer:
                // Our offer carries a fresh SRTP key and, here, the media link itself.
                let link = InMemoryMediaLink(clock: clock)
                clock.add(link)
                let (mine, theirs) = (SRTPKey.random(), SRTPKey.random())
                try await manager.reportProgress(uuid, .offerSent)
                try await peer?.offered(uuid, link: link, keys: MediaKeys(outbound: theirs, inbound: mine))
                try await manager.reportProgress(uuid, .answerReceived)
                try await prepareMedia(uuid, transport: link.a, keys: MediaKeys(outbound: mine, inbound: theirs))
                try await manager.reportMediaConnected(uuid)  // fulfils the answer; then didActivate
            case .end:
                await media.removeValue(forKey: uuid)?.stop()
                try await manager.fulfill(action.id)
                await peer?.remoteEnded(uuid)
            case let .playDTMF(_, digits):
                try await media[uuid]?.sendDTMF(digits)
                try await manager.fulfill(action.id)
            case let .setHeld(_, onHold):
                try await media[uuid]?.setMuted(onHold)
                try await manager.fulfill(action.id)
            case let .setMuted(_, muted):
                try await media[uuid]?.setMuted(muted)
                try await manager.fulfill(action.id)
            case .setGroup:
                try await manager.fulfill(action.id)
            }
        case let .didActivate(route):
            print("[\(name)] didActivate: microphone \(route.input ?? "-"), output \(route.output ?? "-"): starting media")
            audioActive = true
            for (_, call) in media { try await call.start() }
        case .didDeactivate:
            print("[\(name)] didDeactivate")
            audioActive = false
        case let .timedOut(action):
            print("[\(name)] \(action.action) timed out")
        case let .callEnded(uuid, reason):
            print("[\(name)] call ended by the provider: \(reason)")
            await media.removeValue(forKey: uuid)?.stop()
        }
    }

    /// Media is created when the call connects and started on didActivate, never before.
    private func prepareMedia(_ uuid: UUID, transport: any MediaTransport, keys: MediaKeys) async throws {
        let call = try MediaActor(transport: transport, keys: keys, source: try await session.microphone(),
                                  sink: try await session.output(), clock: clock)
        media[uuid] = call
        if audioActive { try await call.start() }
        Task { [name] in
            for await event in call.events {
                if case let .dtmf(digit) = event { print("[\(name)] heard DTMF \(digit)") }
            }
        }
    }

    // Messages from the peer node.
    func invited(_ uuid: UUID, by caller: String) async throws {
        try await manager.reportNewIncomingCall(uuid, update: CallUpdate(remoteHandle: CallHandle(.generic, caller)))
    }

    func offered(_ uuid: UUID, link: InMemoryMediaLink, keys: MediaKeys) async throws {
        try await manager.reportProgress(uuid, .offerReceived)
        try await manager.reportProgress(uuid, .answerSent)
        try await prepareMedia(uuid, transport: link.b, keys: keys)
        try await manager.reportMediaConnected(uuid)
    }

    func remoteEnded(_ uuid: UUID) async {
        await media.removeValue(forKey: uuid)?.stop()
        try? await manager.reportCallEnded(uuid, reason: .remoteEnded)
    }
}

let clock = MediaClock()
let pacing = Task { await clock.run() }
// Manual rendering: each phone's "microphone" is fed by the program, its "speaker" drained.
let aliceAudio = ManualRenderingBackend(), bobAudio = ManualRenderingBackend()
let alice = try await Performer(name: "alice", session: AudioSessionOwner<SystemOwned>(backend: aliceAudio), clock: clock)
let bob = try await Performer(name: "bob", session: AudioSessionOwner<SystemOwned>(backend: bobAudio), clock: clock)
await alice.connect(to: bob)
await bob.connect(to: alice)
let servers = [Task { await alice.run() }, Task { await bob.run() }]
let feeder = Task {
    // Alice speaks a 440 Hz tone into her microphone, in real time.
    let tone = ToneSource(frequency: 440, amplitude: 0.3)
    var frame = [Int16](repeating: 0, count: 960)
    while !Task.isCancelled {
        _ = tone.read(into: &frame)
        aliceAudio.endpoint("manual").pushCapture(frame)
        try? await Task.sleep(for: .milliseconds(20))
    }
}

let bobEvents = bob.manager.events(), aliceEvents = alice.manager.events()
let call = UUID()
let start = try await alice.manager.controller.request(.start(call: call, handle: CallHandle(.generic, "bob")))
print("[alice] start: \(try await alice.manager.outcome(of: start))")
for await event in bobEvents {
    if case let .incomingCall(uuid, update) = event {
        print("[bob] incoming call from \(update.remoteHandle?.value ?? "?")")
        let answer = try await bob.manager.controller.request(.answer(call: uuid))
        print("[bob] answer: \(try await bob.manager.outcome(of: answer)) (fulfilled when media connected)")
        break
    }
}
// Alice's side joins once her media is up (her performer reports it after bob's answer): only
// then may she send digits. A second of audio after it, bob's speaker has heard her.
for await event in aliceEvents {
    if case .session(call, .joined) = event {
        print("[alice] joined")
        break
    }
}
try await Task.sleep(for: .seconds(1))
let heard = bobAudio.endpoint("manual").pullPlayback(maximum: 48_000)
let rms = (heard.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(max(1, heard.count))).squareRoot()
print("[bob] heard \(heard.count) samples of alice's microphone, RMS \(Int(rms))")

let dtmf = try await alice.manager.controller.request(.playDTMF(call: call, digits: "42#"))
print("[alice] DTMF 42#: \(try await alice.manager.outcome(of: dtmf))")
try await Task.sleep(for: .seconds(1))
let hold = try await alice.manager.controller.request(.setHeld(call: call, onHold: true))
print("[alice] hold: \(try await alice.manager.outcome(of: hold)); session still active: \(await alice.session.isActive)")
let resume = try await alice.manager.controller.request(.setHeld(call: call, onHold: false))
print("[alice] resume: \(try await alice.manager.outcome(of: resume)) (no second activation)")
let end = try await alice.manager.controller.request(.end(call: call))
print("[alice] end: \(try await alice.manager.outcome(of: end))")
try await Task.sleep(for: .milliseconds(200))
await alice.manager.shutdown()
await bob.manager.shutdown()
for server in servers { await server.value }
feeder.cancel()
pacing.cancel()
