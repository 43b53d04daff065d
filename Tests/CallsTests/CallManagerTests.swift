import AudioSession
import CallNodeTestKit
import CallNodeTestSupport
import Foundation
import Testing
@testable import Calls

@Suite struct CallManagerTests {
    @Test func outgoingCallLifecycleIsObservedAndRecorded() async throws {
        var h = try await Harness(withStore: true)
        let changes = h.manager.observer.changes()
        let uuid = UUID()
        let id = try await h.manager.controller.request(.start(call: uuid, handle: CallHandle(.generic, "bob")))
        #expect(h.manager.observer.calls.map(\.id) == [uuid])
        #expect(h.manager.observer.calls.first?.isOutgoing == true)
        #expect(h.manager.observer.calls.first?.hasStartedConnecting == false)
        _ = try await h.perform(.start)
        try await h.manager.fulfill(id)
        #expect(try await h.manager.outcome(of: id) == .fulfilled)
        try await h.manager.reportOutgoingCallStartedConnecting(uuid)
        #expect(h.manager.observer.calls.first?.hasStartedConnecting == true)
        try await h.manager.reportProgress(uuid, .offerReceived)
        try await h.manager.reportProgress(uuid, .answerSent)
        try await h.manager.reportMediaConnected(uuid)
        #expect(h.manager.observer.calls.first?.hasConnected == true)

        let end = try await h.manager.controller.request(.end(call: uuid))
        _ = try await h.perform(.end)
        try await h.manager.fulfill(end)
        #expect(h.manager.observer.calls.isEmpty)
        #expect(await h.manager.liveCallCount == 0)

        var seen: [ObservedCall] = []
        for await change in changes {
            seen.append(change)
            if change.hasEnded { break }
        }
        #expect(seen.map(\.phase) == [.waitingForCapabilities, .invitationSent, .offerReceived, .answerSent, .connected, .ended(.localEnded)])

        try await h.manager.store!.flush()
        let recents = try await h.manager.store!.recents()
        #expect(recents.count == 1)
        #expect(recents[0].id == uuid && recents[0].direction == .outgoing && recents[0].reason == .localEnded)
        #expect(recents[0].connected != nil && recents[0].ended != nil && recents[0].duration != nil)
        #expect(try await h.manager.store!.journalMode() == "wal")
        try await h.manager.store!.clearRecents()
        #expect(try await h.manager.store!.recents().isEmpty)
    }

    @Test func answerIsFulfilledOnlyWhenMediaConnects() async throws {
        var h = try await Harness()
        let uuid = try await h.incoming()
        let answer = try await h.manager.controller.request(.answer(call: uuid))
        _ = try await h.perform(.answer)
        // The performer cannot declare the answer done: only connected media can.
        await #expect(throws: ActionError.answerFulfilledOnConnect(answer)) { try await h.manager.fulfill(answer) }
        try await h.manager.reportProgress(uuid, .offerSent)
        try await h.manager.reportProgress(uuid, .answerReceived)
        let manager = h.manager
        let outcome = Task { try await manager.outcome(of: answer) }
        try await h.manager.reportMediaConnected(uuid)
        #expect(try await outcome.value == .fulfilled)
        #expect(await h.manager.state(of: uuid)?.phase == .connected)
        _ = try await firstEvent(h.events) { $0 == .session(uuid, .joined) }
    }

    @Test func answerThatCannotConnectInTimeFailsTheCall() async throws {
        var h = try await Harness(withStore: true)
        let uuid = try await h.incoming()
        let answer = try await h.manager.controller.request(.answer(call: uuid))
        _ = try await h.perform(.answer)
        try await h.manager.reportProgress(uuid, .offerSent)
        // Media never connects: the answer's 30 s run out.
        h.clock.advance(by: .seconds(29))
        #expect(await h.manager.state(of: uuid)?.phase == .offerSent)
        h.clock.advance(by: .seconds(1))
        #expect(try await h.manager.outcome(of: answer) == .timedOut)
        #expect(try await h.next() == .timedOut(ProviderAction(id: answer, action: .answer(call: uuid))))
        #expect(try await h.next() == .callEnded(uuid, .failed))
        #expect(await h.manager.state(of: uuid) == nil)
        // A timed-out action can be neither fulfilled nor failed.
        await #expect(throws: ActionError.timedOut(answer)) { try await h.manager.fail(answer, reason: "late") }
        await #expect(throws: CallReportError.unknownCall(uuid)) { try await h.manager.reportMediaConnected(uuid) }
        _ = try await firstEvent(h.events) { $0 == .session(uuid, .timedOut) }
        try await h.manager.store!.flush()
        #expect(try await h.manager.store!.recents().first?.reason == .failed)
    }

    @Test(arguments: CallActionKind.allCases)
    func everyActionKindTimesOutOnTheInjectedClock(_ kind: CallActionKind) async throws {
        var timeouts = ProviderConfiguration.defaultActionTimeouts
        timeouts[kind] = .seconds(3)
        var h = try await Harness(configuration: ProviderConfiguration(maximumCallGroups: 3, actionTimeouts: timeouts))
        let connected = try await h.connectedOutgoing()
        let ringing = try await h.incoming()
        let action: CallAction = switch kind {
        case .start: .start(call: UUID(), handle: CallHandle(.generic, "carol"))
        case .answer: .answer(call: ringing)
        case .end: .end(call: connected)
        case .setHeld: .setHeld(call: connected, onHold: true)
        case .setMuted: .setMuted(call: connected, muted: true)
        case .playDTMF: .playDTMF(call: connected, digits: "12#")
        case .setGroup: .setGroup(call: connected, groupWith: nil)
        }
        if kind == .setGroup {
            try await h.manager.reportCallUpdated(connected, update: CallUpdate(remoteHandle: CallHandle(.generic, "bob"), supportsUngrouping: true))
        }
        let id = try await h.manager.controller.request(action)
        let performed = try await h.perform(kind)
        #expect(performed.action == action)
        h.clock.advance(by: .milliseconds(2_999))
        await #expect(throws: ActionError.self) { try await h.manager.outcome(of: ActionID(rawValue: 999_999)) }
        h.clock.advance(by: .milliseconds(1))
        #expect(try await h.manager.outcome(of: id) == .timedOut)
        #expect(try await h.next() == .timedOut(performed))
        await #expect(throws: ActionError.timedOut(id)) { try await h.manager.fulfill(id) }
        await #expect(throws: ActionError.timedOut(id)) { try await h.manager.fail(id, reason: "late") }
        // Setup actions that time out take their call down; the others leave it alone.
        let ends = [.start, .answer, .end].contains(kind)
        #expect(await (h.manager.state(of: action.callUUID) == nil) == ends)
    }

    @Test func actionsCompleteExactlyOnce() async throws {
        var h = try await Harness()
        let uuid = try await h.connectedOutgoing()
        let mute = try await h.manager.controller.request(.setMuted(call: uuid, muted: true))
        _ = try await h.perform(.setMuted)
        try await h.manager.fulfill(mute)
        await #expect(throws: ActionError.alreadyCompleted(mute, .fulfilled)) { try await h.manager.fulfill(mute) }
        await #expect(throws: ActionError.alreadyCompleted(mute, .fulfilled)) { try await h.manager.fail(mute, reason: "x") }
        #expect(await h.manager.state(of: uuid)?.isMuted == true)
        let hold = try await h.manager.controller.request(.setHeld(call: uuid, onHold: true))
        _ = try await h.perform(.setHeld)
        try await h.manager.fail(hold, reason: "peer refused")
        #expect(try await h.manager.outcome(of: hold) == .failed("peer refused"))
        #expect(await h.manager.state(of: uuid)?.isOnHold == false)
        await #expect(throws: ActionError.unknownAction(ActionID(rawValue: 12_345))) { try await h.manager.fulfill(ActionID(rawValue: 12_345)) }
    }

    /// `request` returns once a transaction is accepted; `perform` only when the provider has
    /// done it. A resume requested the moment a hold was accepted (the peer can hear of the hold
    /// first) found the call "not on hold".
    @Test func performReturnsOnlyWhenTheActionIsFulfilledAndThrowsWhenItFails() async throws {
        var h = try await Harness()
        let uuid = try await h.connectedOutgoing()
        let manager = h.manager
        let hold = Task { try await manager.controller.perform(.setHeld(call: uuid, onHold: true)) }
        let performed = try await h.perform(.setHeld)
        // Accepted and handed to the provider, not yet fulfilled: not held, and perform still waits.
        #expect(await h.manager.state(of: uuid)?.isOnHold == false)
        await #expect(throws: CallRequestError.invalidAction("the call is not on hold")) {
            try await manager.controller.request(.setHeld(call: uuid, onHold: false))
        }
        try await h.manager.fulfill(performed.id)
        try await hold.value
        #expect(await h.manager.state(of: uuid)?.isOnHold == true)
        // A resume after perform returned is valid at once; one the provider fails is thrown.
        let resume = Task { try await manager.controller.perform(.setHeld(call: uuid, onHold: false)) }
        let resumeAction = try await h.perform(.setHeld)
        try await h.manager.fail(resumeAction.id, reason: "peer refused")
        await #expect(throws: CallRequestError.actionFailed(.setHeld(call: uuid, onHold: false), "peer refused")) { try await resume.value }
        #expect(await h.manager.state(of: uuid)?.isOnHold == true)
    }

    @Test func holdAndAnswerInOneTransaction() async throws {
        var h = try await Harness()
        let first = try await h.connectedOutgoing()
        let second = try await h.incoming(from: "carol")
        let ids = try await h.manager.request(CallTransaction([.setHeld(call: first, onHold: true), .answer(call: second)]))
        #expect(ids.count == 2)
        let hold = try await h.perform(.setHeld)
        let answer = try await h.perform(.answer)
        #expect(hold.id == ids[0] && answer.id == ids[1])
        try await h.manager.fulfill(hold.id)
        try await h.connectAnswered(second)
        #expect(try await h.manager.outcome(of: ids[1]) == .fulfilled)
        #expect(await h.manager.state(of: first)?.isOnHold == true)
        #expect(await h.manager.state(of: second)?.phase == .connected)
        #expect(h.manager.observer.calls.count == 2)
    }

    @Test func endAndAnswerInOneTransaction() async throws {
        var h = try await Harness(withStore: true)
        let first = try await h.connectedOutgoing()
        let second = try await h.incoming(from: "carol")
        let ids = try await h.manager.request(CallTransaction([.end(call: first), .answer(call: second)]))
        let end = try await h.perform(.end)
        _ = try await h.perform(.answer)
        try await h.manager.fulfill(end.id)
        try await h.connectAnswered(second)
        #expect(try await h.manager.outcome(of: ids[1]) == .fulfilled)
        #expect(await h.manager.state(of: first) == nil)
        #expect(h.manager.observer.calls.map(\.id) == [second])
        try await h.manager.store!.flush()
        let recents = try await h.manager.store!.recents()
        #expect(recents.first { $0.id == first }?.reason == .localEnded)
        #expect(recents.first { $0.id == second }?.isInProgress == true)
    }

    @Test func maximumCallsAreEnforcedForBothDirections() async throws {
        var h = try await Harness(configuration: ProviderConfiguration(maximumCallGroups: 1, maximumCallsPerCallGroup: 2))
        let first = try await h.connectedOutgoing()
        await #expect(throws: CallRequestError.maximumCallsReached(limit: 1)) {
            try await h.manager.controller.request(.start(call: UUID(), handle: CallHandle(.generic, "carol")))
        }
        await #expect(throws: IncomingCallError.maximumCallsReached) {
            try await h.manager.reportNewIncomingCall(UUID(), update: CallUpdate(remoteHandle: CallHandle(.generic, "dave")))
        }
        // Ending the first call in the same transaction makes room.
        let third = UUID()
        let ids = try await h.manager.request(CallTransaction([.end(call: first), .start(call: third, handle: CallHandle(.generic, "carol"))]))
        #expect(ids.count == 2)
        #expect(h.manager.observer.calls.count == 2)
    }

    @Test func duplicateUUIDsAreRefused() async throws {
        var h = try await Harness()
        let uuid = try await h.connectedOutgoing()
        await #expect(throws: CallRequestError.callAlreadyExists(uuid)) {
            try await h.manager.controller.request(.start(call: uuid, handle: CallHandle(.generic, "x")))
        }
        await #expect(throws: IncomingCallError.callUUIDAlreadyExists) {
            try await h.manager.reportNewIncomingCall(uuid, update: CallUpdate(remoteHandle: CallHandle(.generic, "x")))
        }
        try await h.manager.reportCallEnded(uuid, reason: .remoteEnded)
        // An ended call's UUID stays taken.
        await #expect(throws: IncomingCallError.callUUIDAlreadyExists) {
            try await h.manager.reportNewIncomingCall(uuid, update: CallUpdate(remoteHandle: CallHandle(.generic, "x")))
        }
    }

    @Test func blockedCallersAndDoNotDisturbAreFiltered() async throws {
        let h = try await Harness(withStore: true)
        let directory = h.manager.store!.directory
        try await directory.block(CallHandle(.generic, "spammer"))
        try await directory.setLabel("Alice Example", for: CallHandle(.generic, "alice"))
        await #expect(throws: IncomingCallError.filteredByBlockList) {
            try await h.manager.reportNewIncomingCall(UUID(), update: CallUpdate(remoteHandle: CallHandle(.generic, "spammer")))
        }
        let uuid = try await h.incoming(from: "alice")
        #expect(h.manager.observer.calls.first?.callerName == "Alice Example")
        await h.manager.setDoNotDisturb(true)
        await #expect(throws: IncomingCallError.filteredByDoNotDisturb) {
            try await h.manager.reportNewIncomingCall(UUID(), update: CallUpdate(remoteHandle: CallHandle(.generic, "bob")))
        }
        await h.manager.setDoNotDisturb(false)
        _ = try await h.incoming(from: "bob")
        #expect(h.manager.observer.calls.count == 2)
        #expect(h.manager.observer.calls.first?.id == uuid)

        // The directory is in SQLite: a new store on the same file sees it.
        let reopened = try CallStore(path: h.directory! + "/node.sqlite")
        #expect(reopened.directory.isBlocked(CallHandle(.generic, "spammer")))
        #expect(reopened.directory.label(for: CallHandle(.generic, "alice")) == "Alice Example")
        try await reopened.directory.unblock(CallHandle(.generic, "spammer"))
        #expect(!reopened.directory.isBlocked(CallHandle(.generic, "spammer")))
    }

    @Test func ringTimeoutEndsCallsAsUnanswered() async throws {
        var h = try await Harness(configuration: ProviderConfiguration(ringTimeout: .seconds(20)), withStore: true)
        let incoming = try await h.incoming()
        let outgoing = UUID()
        let start = try await h.manager.controller.request(.start(call: outgoing, handle: CallHandle(.generic, "bob")))
        _ = try await h.perform(.start)
        try await h.manager.fulfill(start)
        h.clock.advance(by: .seconds(10))
        try await h.manager.reportOutgoingCallStartedConnecting(outgoing)  // rings from t = 10 s
        h.clock.advance(by: .seconds(10))
        #expect(try await h.next() == .callEnded(incoming, .unanswered))
        #expect(await h.manager.state(of: outgoing)?.phase == .invitationSent)
        h.clock.advance(by: .seconds(10))
        #expect(try await h.next() == .callEnded(outgoing, .unanswered))
        _ = try await firstEvent(h.events) { $0 == .session(incoming, .timedOut) }
        try await h.manager.store!.flush()
        #expect(try await h.manager.store!.recents().allSatisfy { $0.reason == .unanswered })
    }

    @Test func answeredCallsDoNotRingOut() async throws {
        var h = try await Harness(configuration: ProviderConfiguration(ringTimeout: .seconds(20)))
        let uuid = try await h.incoming()
        _ = try await h.answerAndConnect(uuid)
        h.clock.advance(by: .seconds(60))
        #expect(await h.manager.state(of: uuid)?.phase == .connected)
    }

    @Test func invalidTransactionsAreRefusedWhole() async throws {
        var h = try await Harness()
        let connected = try await h.connectedOutgoing()
        let ringing = try await h.incoming()
        await #expect(throws: CallRequestError.emptyTransaction) { try await h.manager.request(CallTransaction([])) }
        let stranger = UUID()
        await #expect(throws: CallRequestError.unknownCall(stranger)) { try await h.manager.controller.request(.end(call: stranger)) }
        await #expect(throws: CallRequestError.self) { try await h.manager.controller.request(.answer(call: connected)) }
        await #expect(throws: CallRequestError.self) { try await h.manager.controller.request(.setHeld(call: ringing, onHold: true)) }
        await #expect(throws: CallRequestError.self) { try await h.manager.controller.request(.playDTMF(call: connected, digits: "12x")) }
        await #expect(throws: CallRequestError.self) { try await h.manager.controller.request(.setGroup(call: connected, groupWith: ringing)) }
        await #expect(throws: CallRequestError.unsupportedHandle(.phoneNumber)) {
            try await h.manager.controller.request(.start(call: UUID(), handle: CallHandle(.phoneNumber, "+15551234")))
        }
        // One bad action refuses the whole transaction: the valid end did not happen.
        await #expect(throws: CallRequestError.self) {
            try await h.manager.request(CallTransaction([.end(call: connected), .answer(call: connected)]))
        }
        #expect(await h.manager.state(of: connected)?.phase == .connected)
        // Answering twice is refused while the first answer is pending.
        _ = try await h.manager.controller.request(.answer(call: ringing))
        await #expect(throws: CallRequestError.self) { try await h.manager.controller.request(.answer(call: ringing)) }
        #expect(try await h.perform(.answer).action == .answer(call: ringing))
    }

    @Test func dtmfAndGroupingAreHandedToThePerformer() async throws {
        var h = try await Harness()
        let first = try await h.connectedOutgoing()
        let second = try await h.connectedOutgoing(to: "carol")
        for uuid in [first, second] {
            try await h.manager.reportCallUpdated(uuid, update: CallUpdate(remoteHandle: CallHandle(.generic, "x"), supportsGrouping: true, supportsUngrouping: true))
        }
        let dtmf = try await h.manager.controller.request(.playDTMF(call: first, digits: "123#"))
        #expect(try await h.perform(.playDTMF).action == .playDTMF(call: first, digits: "123#"))
        try await h.manager.fulfill(dtmf)
        let group = try await h.manager.controller.request(.setGroup(call: second, groupWith: first))
        _ = try await h.perform(.setGroup)
        try await h.manager.fulfill(group)
        let groups = Set(h.manager.observer.calls.map(\.group))
        #expect(groups.count == 1 && groups.first! != nil)
    }

    @Test func remoteEndsAndConnectionStatusReachTheEventStream() async throws {
        var h = try await Harness()
        let uuid = try await h.connectedOutgoing()
        try await h.manager.reportConnectionLost(uuid)
        try await h.manager.reportConnectionRestored(uuid)
        await #expect(throws: CallReportError.self) { try await h.manager.reportConnectionRestored(uuid) }
        try await h.manager.reportCallEnded(uuid, reason: .remoteEnded)
        var statuses: [SessionStatus] = []
        for await event in h.events {
            if case let .session(id, status) = event, id == uuid { statuses.append(status) }
            if case .callEnded = event { break }
        }
        #expect(statuses == [.joined, .connectionLost, .connectionRestored, .connectionClosed])
    }

    @Test func shutdownEndsCallsAndFailsPendingActions() async throws {
        var h = try await Harness()
        let uuid = try await h.connectedOutgoing()
        let hold = try await h.manager.controller.request(.setHeld(call: uuid, onHold: true))
        await h.manager.shutdown()
        #expect(try await h.manager.outcome(of: hold) != .fulfilled)
        #expect(h.manager.observer.calls.isEmpty)
        await #expect(throws: CallRequestError.shutDown) { try await h.manager.controller.request(.start(call: UUID(), handle: CallHandle(.generic, "x"))) }
        // The stream ends after the last requests.
        var rest: [ProviderRequest] = []
        while let request = await h.requests.next() { rest.append(request) }
        #expect(rest.contains(.callEnded(uuid, .failed)))
    }

    @Test func callsStayOutOfRecentsWhenTheProviderSaysSo() async throws {
        var h = try await Harness(configuration: ProviderConfiguration(includesCallsInRecents: false), withStore: true)
        let uuid = try await h.connectedOutgoing()
        let ringing = try await h.incoming()
        try await h.manager.reportCallEnded(ringing, reason: .answeredElsewhere)
        try await h.manager.reportCallEnded(uuid, reason: .declinedElsewhere)
        try await h.manager.store!.flush()
        #expect(try await h.manager.store!.recents().isEmpty)
        var statuses: [UUID: SessionStatus] = [:]
        for await event in h.events {
            if case let .session(id, status) = event, status != .joined { statuses[id] = status }
            if statuses.count == 2 { break }
        }
        #expect(statuses == [ringing: .connectionClosed, uuid: .connectionClosed])
    }
}
