import AudioSession
import CallNodeTestKit
import CallNodeTestSupport
@testable import Calls
import Clocks
import Foundation
import Testing

/// A manager on a manual clock, with the performer side driven by the test.
struct Harness {
    let manager: CallManager
    let clock: ManualClock
    var requests: AsyncStream<ProviderRequest>.Iterator
    let events: AsyncStream<CallEvent>
    let directory: String?

    init(configuration: ProviderConfiguration = ProviderConfiguration(), audio: CallAudioOwnership = .appOwned,
         withStore: Bool = false) async throws {
        clock = ManualClock()
        var store: CallStore?
        if withStore {
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("calls-\(UUID().uuidString)").path
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            store = try CallStore(path: dir + "/node.sqlite")
            directory = dir
        } else {
            directory = nil
        }
        manager = try await CallManager(configuration: configuration, audio: audio, store: store, clock: TimerClock(clock))
        requests = manager.requests.makeAsyncIterator()
        events = manager.events()
    }

    /// The next request for the performer.
    mutating func next() async throws -> ProviderRequest {
        guard let request = await requests.next() else { throw TestFailure("the request stream ended") }
        return request
    }

    /// The next request, which must be `perform` of an action of `kind`.
    mutating func perform(_ kind: CallActionKind) async throws -> ProviderAction {
        let request = try await next()
        guard case let .perform(action) = request, action.action.kind == kind else {
            throw TestFailure("expected perform(\(kind)), got \(request)")
        }
        return action
    }

    /// A connected outgoing call, as the performer reports it.
    mutating func connectedOutgoing(_ uuid: UUID = UUID(), to handle: String = "bob") async throws -> UUID {
        let id = try await manager.controller.request(.start(call: uuid, handle: CallHandle(.generic, handle)))
        let start = try await perform(.start)
        #expect(start.id == id)
        try await manager.fulfill(id)
        try await manager.reportOutgoingCallStartedConnecting(uuid)
        try await manager.reportProgress(uuid, .offerReceived)
        try await manager.reportProgress(uuid, .answerSent)
        try await manager.reportMediaConnected(uuid)
        return uuid
    }

    /// Reports a ringing incoming call.
    func incoming(_ uuid: UUID = UUID(), from handle: String = "alice") async throws -> UUID {
        try await manager.reportNewIncomingCall(uuid, update: CallUpdate(remoteHandle: CallHandle(.generic, handle)))
        return uuid
    }

    /// Answers `uuid` and connects its media, as the performer does after an answer.
    mutating func answerAndConnect(_ uuid: UUID) async throws -> ActionID {
        let id = try await manager.controller.request(.answer(call: uuid))
        _ = try await perform(.answer)
        try await connectAnswered(uuid)
        return id
    }

    func connectAnswered(_ uuid: UUID) async throws {
        try await manager.reportProgress(uuid, .offerSent)
        try await manager.reportProgress(uuid, .answerReceived)
        try await manager.reportMediaConnected(uuid)
    }
}

/// Reads events until one matches, failing after `limit` events.
func firstEvent(_ events: AsyncStream<CallEvent>, limit: Int = 200, where match: (CallEvent) -> Bool) async throws -> CallEvent {
    var count = 0
    for await event in events {
        if match(event) { return event }
        count += 1
        if count >= limit { break }
    }
    throw TestFailure("no matching event among \(count)")
}
