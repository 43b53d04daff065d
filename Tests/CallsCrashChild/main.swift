// Child process for the Recents crash test: one finished call and one call in progress, then
// it waits to be killed. Usage: calls-crash-child DATABASE FINISHED-UUID LIVE-UUID
import AudioSession
import Calls
import Foundation

let arguments = CommandLine.arguments
guard arguments.count == 4, let finished = UUID(uuidString: arguments[2]), let live = UUID(uuidString: arguments[3]) else {
    FileHandle.standardError.write(Data("usage: calls-crash-child DATABASE FINISHED-UUID LIVE-UUID\n".utf8))
    exit(2)
}
func run(database: String, finished: UUID, live: UUID) async throws {
    let store = try CallStore(path: database)
    var configuration = ProviderConfiguration()
    configuration.recentsHeartbeat = .milliseconds(200)
    let manager = try await CallManager(configuration: configuration, audio: .appOwned, store: store)
    var requests = manager.requests.makeAsyncIterator()

    let start = try await manager.controller.request(.start(call: finished, handle: CallHandle(.generic, "bob")))
    _ = await requests.next()
    try await manager.fulfill(start)
    try await manager.reportOutgoingCallStartedConnecting(finished)
    try await manager.reportProgress(finished, .offerReceived)
    try await manager.reportProgress(finished, .answerSent)
    try await manager.reportMediaConnected(finished)
    try await manager.reportCallEnded(finished, reason: .remoteEnded)

    try await manager.reportNewIncomingCall(live, update: CallUpdate(remoteHandle: CallHandle(.generic, "alice")))
    _ = try await manager.controller.request(.answer(call: live))
    _ = await requests.next()
    try await manager.reportProgress(live, .offerSent)
    try await manager.reportProgress(live, .answerReceived)
    try await manager.reportMediaConnected(live)
    // A second and a half on the call: its row says so (to within a heartbeat) after the kill.
    try await Task.sleep(for: .milliseconds(1_500))
    try await store.flush()
    FileHandle.standardOutput.write(Data("READY\n".utf8))
    try await Task.sleep(for: .seconds(3600))
}

try await run(database: arguments[1], finished: finished, live: live)
