// The one rule CallNode protects: audio activation has exactly one owner. This program walks
// through the classic bug and the two correct flows, printing what each step may do.
// Run: swift run ownership-study
import CallNode
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

// 2. System-owned (CallKit mode): only the call manager activates, after the action is fulfilled.
let backend = ManualRenderingBackend()
let systemSession = AudioSessionOwner<SystemOwned>(backend: backend)
let manager = try await CallManager(audio: .systemOwned(systemSession))
let requests = Task {
    for await request in manager.requests {
        switch request {
        case let .perform(action):
            print("   performer: \(action.action.kind) — may do signaling, may not activate audio")
            if case .start = action.action {
                try? await manager.fulfill(action.id)
                try? await manager.reportOutgoingCallStartedConnecting(action.action.callUUID)
            } else {
                try? await manager.fulfill(action.id)
            }
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
