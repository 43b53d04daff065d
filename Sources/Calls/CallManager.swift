import Locking
import AudioSession
import CallCore
import Clocks
import Foundation
import RTP  // DTMF digits are checked against RFC 4733's events

/// CallKit's provider and call controller as one actor: the call registry, actions in
/// transactions with per-kind timeouts, the call directory, Recents, the observer, and the
/// audio session's activation in system-owned mode.
///
/// The app requests actions through ``controller``; the performer (signaling + media) reads
/// ``requests`` and fulfils or fails each action exactly once. Every timer runs on the
/// injected clock.
public actor CallManager {
    public nonisolated let configuration: ProviderConfiguration
    /// The live list of calls and their changes.
    public nonisolated let observer = CallObserver()
    /// Work for the performer. One consumer; nothing is dropped.
    public nonisolated let requests: AsyncStream<ProviderRequest>
    /// Recents and the call directory, when the manager was given a store.
    public nonisolated let store: CallStore?
    public nonisolated let audioOwnership: CallAudioOwnership
    /// Plays the ringtone while incoming calls ring.
    public nonisolated let ringer: Ringer?

    let requestsContinuation: AsyncStream<ProviderRequest>.Continuation
    let broadcaster = EventBroadcaster<CallEvent>()
    private let clock: TimerClock
    private let wallClock: @Sendable () -> Date

    struct Call {
        var state: CallState
        var handle: CallHandle
        var update: CallUpdate
        var recent: RecentCall
        /// A start or answer action was fulfilled: the call needs the audio session.
        var needsAudio = false
    }

    private struct Pending {
        let action: ProviderAction
        var waiters: [CheckedContinuation<ActionOutcome, Never>] = []
    }

    var calls: [UUID: Call] = [:]
    var order: [UUID] = []
    /// UUIDs of ended calls, refused if reused; the oldest are forgotten past `endedMemory`.
    private var endedCalls: Set<UUID> = []
    private var endedOrder: [UUID] = []
    private let endedMemory = 100_000
    private var pending: [ActionID: Pending] = [:]
    private var outcomes: [ActionID: ActionOutcome] = [:]
    private var nextAction: UInt64 = 0
    private var doNotDisturb = false
    private var isShutDown = false
    var audioActive = false
    var activating = false
    private var audioMonitor: Task<Void, Never>?
    private var timers: [TimerKey: Duration] = [:]
    private var timerTask: Task<Void, Never>?
    private var timerDeadline: Duration?
    private var timerGeneration: UInt64 = 0
    /// Deactivation after the last call ended (started from synchronous paths; awaited at shutdown).
    var deactivation: Task<Void, Never>?

    /// - Parameters:
    ///   - audio: Who activates the audio session. System-owned (CallKit mode) hands the session
    ///     to this manager; one session belongs to one manager.
    ///   - store: Recents and the call directory; `nil` keeps nothing.
    ///   - ringer: Plays the ringtone (``ProviderConfiguration/ringtoneSound``) while an incoming
    ///     call rings; `nil` rings silently.
    ///   - clock: Clock for ring and action timeouts (a manual one in tests).
    ///   - wallClock: Dates written to Recents.
    /// - Throws: ``AudioSessionError/providerAlreadyAttached`` when the session already has a provider.
    public init(configuration: ProviderConfiguration = ProviderConfiguration(), audio: CallAudioOwnership,
                store: CallStore? = nil, ringer: Ringer? = nil, clock: TimerClock = .continuous,
                wallClock: @escaping @Sendable () -> Date = { Date() }) async throws(AudioSessionError) {
        self.configuration = configuration
        self.audioOwnership = audio
        self.store = store
        self.ringer = ringer
        self.clock = clock
        self.wallClock = wallClock
        (requests, requestsContinuation) = AsyncStream.makeStream(of: ProviderRequest.self)
        if case let .systemOwned(owner) = audio {
            try await owner.attachToProvider()
            let sessionEvents = owner.events()
            audioMonitor = Task { [weak self] in
                for await event in sessionEvents {
                    await self?.audioSessionDidReport(event)
                }
            }
        }
    }

    /// Requests actions on calls (CallKit's `CXCallController`).
    public nonisolated var controller: CallController { CallController(manager: self) }

    /// A new stream of call events.
    public nonisolated func events() -> AsyncStream<CallEvent> { broadcaster.subscribe(bufferingNewest: 4096) }

    public var isDoNotDisturbOn: Bool { doNotDisturb }

    /// Turns do-not-disturb on or off: while on, incoming calls fail with
    /// ``IncomingCallError/filteredByDoNotDisturb``.
    public func setDoNotDisturb(_ on: Bool) {
        guard on != doNotDisturb else { return }
        doNotDisturb = on
        broadcaster.send(.doNotDisturbChanged(on))
    }

    /// The state of a live call, or `nil` once it ended.
    public func state(of call: UUID) -> CallState? { calls[call]?.state }

    /// How many calls have not ended.
    public var liveCallCount: Int { calls.count }

    /// Whether a call started now would fit (else ``CallRequestError/maximumCallsReached(limit:)``).
    public var hasRoomForAnotherCall: Bool {
        calls.count < configuration.maximumCalls && Set(calls.map { $0.value.state.group ?? $0.key }).count < configuration.maximumCallGroups
    }

    /// Whether the manager holds the audio session active (system-owned mode).
    public var isAudioActive: Bool { audioActive }

    // MARK: Controller side

    /// Validates the transaction as a whole, then hands its actions to the performer in order.
    ///
    /// - Returns: One ID per action, to follow with ``outcome(of:)``.
    /// - Throws: ``CallRequestError`` when any action cannot be performed; then none is.
    public func request(_ transaction: CallTransaction) throws(CallRequestError) -> [ActionID] {
        guard !isShutDown else { throw .shutDown }
        try validate(transaction)
        return transaction.actions.map(begin)
    }

    /// Waits until the hold and grouping actions being performed now have their outcomes, so a
    /// request built next from the calls' state sees what they did: a merge that resumes the
    /// held members must see a hold still on its way (an answer's "hold the others") as a hold,
    /// or it leaves that member held in the conference.
    public func settleHoldsAndGroups() async {
        let performing = pending.filter { [.setHeld, .setGroup].contains($0.value.action.action.kind) }.map(\.key)
        for id in performing { _ = try? await outcome(of: id) }
    }

    /// Waits for an action's outcome (returns at once if it already finished).
    public func outcome(of id: ActionID) async throws(ActionError) -> ActionOutcome {
        if let done = outcomes[id] { return done }
        guard pending[id] != nil else { throw .unknownAction(id) }
        return await withCheckedContinuation { continuation in
            pending[id]?.waiters.append(continuation)
        }
    }

    private func validate(_ transaction: CallTransaction) throws(CallRequestError) {
        guard !transaction.actions.isEmpty else { throw .emptyTransaction }
        var live = Set(calls.keys)
        var groups: [UUID: UUID?] = calls.mapValues { $0.state.group }
        var answering = Set(pending.values.filter { $0.action.action.kind == .answer }.map { $0.action.action.callUUID })
        func groupCount() -> Int { Set(live.map { (groups[$0] ?? nil) ?? $0 }).count }
        for action in transaction.actions {
            let uuid = action.callUUID
            if case let .start(_, handle) = action {
                guard !live.contains(uuid), !endedCalls.contains(uuid) else { throw .callAlreadyExists(uuid) }
                guard configuration.supportedHandleTypes.contains(handle.kind) else { throw .unsupportedHandle(handle.kind) }
                guard live.count < configuration.maximumCalls, groupCount() < configuration.maximumCallGroups else {
                    throw .maximumCallsReached(limit: min(configuration.maximumCalls, configuration.maximumCallGroups))
                }
                live.insert(uuid)
                groups[uuid] = .some(nil)
                continue
            }
            guard live.contains(uuid) else { throw .unknownCall(uuid) }
            let call = calls[uuid]  // nil for a call started earlier in this transaction
            switch action {
            case .start: break
            case .answer:
                guard let call, call.state.direction == .incoming else { throw .invalidAction("only incoming calls can be answered (\(action))") }
                guard call.state.phase == .invitationReceived, !answering.contains(uuid) else {
                    throw .invalidAction("the call is not ringing, so it cannot be answered (\(action))")
                }
                answering.insert(uuid)
            case .end:
                live.remove(uuid)
            case let .setHeld(_, onHold):
                guard let call else { throw .invalidAction("a call must connect before it can be held (\(action))") }
                guard call.update.supportsHolding else { throw .invalidAction("the call does not support holding (\(action))") }
                guard call.state.phase == .connected else { throw .invalidAction("only a connected call can be held or resumed (\(action))") }
                guard call.state.isOnHold != onHold else {
                    throw .invalidAction(onHold ? "the call is already on hold" : "the call is not on hold")
                }
            case .setMuted:
                break
            case let .playDTMF(_, digits):
                guard let call, call.update.supportsDTMF else { throw .invalidAction("the call does not support DTMF (\(action))") }
                guard call.state.phase == .connected else { throw .invalidAction("DTMF needs a connected call (\(action))") }
                guard !digits.isEmpty, digits.allSatisfy({ TelephoneEvent.code(for: $0) != nil }) else {
                    throw .invalidAction("DTMF digits must be 0–9, *, # or A–D, got '\(digits)'")
                }
            case let .setGroup(_, other):
                guard let call, call.update.supportsGrouping || (other == nil && call.update.supportsUngrouping) else {
                    throw .invalidAction("the call does not support \(other == nil ? "ungrouping" : "grouping") (\(action))")
                }
                if let other {
                    guard other != uuid, live.contains(other) else { throw .unknownCall(other) }
                    let target = (groups[other] ?? nil) ?? other
                    let members = live.filter { ((groups[$0] ?? nil) ?? $0) == target && $0 != uuid }.count
                    guard members + 1 <= configuration.maximumCallsPerCallGroup else {
                        throw .maximumCallsReached(limit: configuration.maximumCallsPerCallGroup)
                    }
                    groups[uuid] = .some(target)
                } else {
                    groups[uuid] = .some(nil)
                }
            }
        }
    }

    private func begin(_ action: CallAction) -> ActionID {
        nextAction += 1
        let id = ActionID(rawValue: nextAction)
        let provided = ProviderAction(id: id, action: action)
        switch action {
        case let .start(uuid, handle):
            let now = wallClock()
            let recent = RecentCall(id: uuid, handle: handle.value, handleKind: handle.kind.rawValue, direction: .outgoing,
                                    state: CallPhase.waitingForCapabilities.description, started: now)
            calls[uuid] = Call(state: .outgoing(), handle: handle, update: CallUpdate(remoteHandle: handle), recent: recent)
            order.append(uuid)
            persist(uuid)
            publish(uuid)
        case let .answer(uuid):
            apply(.answered, to: uuid)
            disarm(.ring(uuid))
        default:
            break
        }
        arm(.action(id), after: configuration.timeout(for: action.kind))
        pending[id] = Pending(action: provided)
        requestsContinuation.yield(.perform(provided))
        return id
    }

    // MARK: Performer side

    /// Marks an action done. Its effect on the call applies now (an end ends the call, a
    /// fulfilled start or answer lets the system activate the audio session).
    ///
    /// - Throws: ``ActionError/timedOut(_:)`` after the action timed out,
    ///   ``ActionError/alreadyCompleted(_:_:)`` the second time,
    ///   ``ActionError/answerFulfilledOnConnect(_:)`` for answers (fulfilled on media connect).
    public func fulfill(_ id: ActionID) async throws(ActionError) {
        let entry = try pendingEntry(id)
        if entry.action.action.kind == .answer { throw .answerFulfilledOnConnect(id) }
        complete(id, .fulfilled)
        let uuid = entry.action.action.callUUID
        switch entry.action.action {
        case .start:
            calls[uuid]?.needsAudio = true
            await activateAudioIfNeeded()
        case .end:
            let ringing = calls[uuid].map { $0.state.direction == .incoming && !$0.state.hasConnected && $0.state.phase == .invitationReceived } ?? false
            endCall(uuid, reason: ringing ? .declined : .localEnded, status: .left, notify: false)
        case let .setHeld(_, onHold):
            apply(.held(onHold), to: uuid)
        case let .setMuted(_, muted):
            apply(.muted(muted), to: uuid)
        case let .setGroup(_, other):
            let group = other.map { calls[$0]?.state.group ?? $0 }
            apply(.grouped(group), to: uuid)
            if let other, calls[other]?.state.group == nil { apply(.grouped(group), to: other) }
        case .answer, .playDTMF:
            break
        }
    }

    /// Marks an action failed. A failed start, answer or end ends its call as failed.
    /// - Throws: as ``fulfill(_:)`` (answers may be failed by hand).
    public func fail(_ id: ActionID, reason: String) async throws(ActionError) {
        let entry = try pendingEntry(id)
        complete(id, .failed(reason))
        afterUnfulfilled(entry.action, status: .connectionClosed)
    }

    private func pendingEntry(_ id: ActionID) throws(ActionError) -> Pending {
        if let entry = pending[id] { return entry }
        switch outcomes[id] {
        case .timedOut: throw .timedOut(id)
        case let outcome?: throw .alreadyCompleted(id, outcome)
        case nil: throw .unknownAction(id)
        }
    }

    private func actionTimedOut(_ id: ActionID) {
        guard let entry = pending[id] else { return }
        complete(id, .timedOut)
        requestsContinuation.yield(.timedOut(entry.action))
        afterUnfulfilled(entry.action, status: .timedOut)
    }

    private func afterUnfulfilled(_ action: ProviderAction, status: SessionStatus) {
        switch action.action.kind {
        case .start, .answer, .end:
            endCall(action.action.callUUID, reason: .failed, status: status, notify: true)
        default:
            break
        }
    }

    private func complete(_ id: ActionID, _ outcome: ActionOutcome) {
        guard let entry = pending.removeValue(forKey: id) else { return }
        disarm(.action(id))
        outcomes[id] = outcome
        if outcomes.count > 100_000 {  // bound the history in long-running nodes
            outcomes.removeAll()
            outcomes[id] = outcome
        }
        for waiter in entry.waiters { waiter.resume(returning: outcome) }
        broadcaster.send(.actionCompleted(entry.action, outcome))
    }

    /// Reports a call the peer placed to this node (CallKit's `reportNewIncomingCall`). The call
    /// rings until answered, ended, or the ring timeout (then it ends as unanswered).
    ///
    /// - Throws: ``IncomingCallError`` — duplicate UUID, blocked caller, do-not-disturb, maximum
    ///   calls, unsupported handle. A refused call leaves no trace but the error.
    public func reportNewIncomingCall(_ uuid: UUID, update: CallUpdate) throws(IncomingCallError) {
        guard !isShutDown else { throw .shutDown }
        guard calls[uuid] == nil, !endedCalls.contains(uuid) else { throw .callUUIDAlreadyExists }
        let handle = update.remoteHandle ?? CallHandle(.generic, "unknown")
        guard configuration.supportedHandleTypes.contains(handle.kind) else { throw .unsupportedHandle }
        if store?.directory.isBlocked(handle) == true { throw .filteredByBlockList }
        if doNotDisturb { throw .filteredByDoNotDisturb }
        let groups = Set(calls.map { $0.value.state.group ?? $0.key }).count
        guard calls.count < configuration.maximumCalls, groups < configuration.maximumCallGroups else {
            throw .maximumCallsReached
        }
        var update = update
        update.remoteHandle = handle
        if update.localizedCallerName == nil { update.localizedCallerName = store?.directory.label(for: handle) }
        let recent = RecentCall(id: uuid, handle: handle.value, handleKind: handle.kind.rawValue, direction: .incoming,
                                state: CallPhase.invitationReceived.description, started: wallClock())
        calls[uuid] = Call(state: .incoming(), handle: handle, update: update, recent: recent)
        order.append(uuid)
        arm(.ring(uuid), after: configuration.ringTimeout)
        persist(uuid)
        publish(uuid)
        broadcaster.send(.incomingCall(uuid, update))
    }

    /// Updates what is known about a call's remote side.
    public func reportCallUpdated(_ uuid: UUID, update: CallUpdate) throws(CallReportError) {
        guard calls[uuid] != nil else { throw .unknownCall(uuid) }
        calls[uuid]?.update = update
        publish(uuid)
    }

    /// The outgoing call's invitation went out (CallKit's `startedConnectingAt`); it rings at the
    /// callee until the ring timeout.
    public func reportOutgoingCallStartedConnecting(_ uuid: UUID) throws(CallReportError) {
        try reportProgress(uuid, .invitationSent)
    }

    /// Signaling progress (offer and answer exchanged) for the call's state.
    public func reportProgress(_ uuid: UUID, _ progress: CallProgress) throws(CallReportError) {
        try applyReported(.progress(progress), to: uuid)
        switch progress {
        case .invitationSent:
            arm(.ring(uuid), after: configuration.ringTimeout)
        case .offerReceived:
            disarm(.ring(uuid))
        case .answerReceived where calls[uuid]?.state.isOutgoing == true:
            // The callee answered the caller's offer (SIP): it took the call.
            disarm(.ring(uuid))
        default:
            break
        }
    }

    /// Media connected (ICE ready, keys in place). Fulfils the call's pending answer action —
    /// the only way an answer is fulfilled — and, in system-owned mode, activates audio.
    public func reportMediaConnected(_ uuid: UUID) async throws(CallReportError) {
        try applyReported(.mediaConnected, to: uuid)
        calls[uuid]?.recent.connected = wallClock()
        persist(uuid)
        broadcaster.send(.session(uuid, .joined))
        if let answer = pending.values.first(where: { $0.action.action == .answer(call: uuid) }) {
            complete(answer.action.id, .fulfilled)
            calls[uuid]?.needsAudio = true
            await activateAudioIfNeeded()
        }
    }

    /// Media stopped arriving; the call stays up while it tries to recover.
    public func reportConnectionLost(_ uuid: UUID) throws(CallReportError) {
        try applyReported(.connectionLost, to: uuid)
        broadcaster.send(.session(uuid, .connectionLost))
    }

    public func reportConnectionRestored(_ uuid: UUID) throws(CallReportError) {
        try applyReported(.connectionRestored, to: uuid)
        broadcaster.send(.session(uuid, .connectionRestored))
    }

    /// The call ended for a reason outside the app's actions (remote hang-up, failure, answered
    /// or declined on another device).
    public func reportCallEnded(_ uuid: UUID, reason: CallEndReason) throws(CallReportError) {
        guard calls[uuid] != nil else { throw .unknownCall(uuid) }
        let status: SessionStatus = switch reason {
        case .unanswered: .timedOut
        case .localEnded, .declined: .left
        default: .connectionClosed
        }
        endCall(uuid, reason: reason, status: status, notify: false)
    }

    /// Ends every call, fails every pending action, releases the audio session and finishes the
    /// streams. Waits until Recents are written.
    public func shutdown() async {
        guard !isShutDown else { return }
        isShutDown = true
        for uuid in order { endCall(uuid, reason: .failed, status: .connectionClosed, notify: true) }
        for id in Array(pending.keys) { complete(id, .failed("the call manager shut down")) }
        await deactivation?.value
        await deactivateAudioIfIdle()
        ringer?.stop()
        timerTask?.cancel()
        timers.removeAll()
        audioMonitor?.cancel()
        requestsContinuation.finish()
        broadcaster.finish()
        observer.finish()
        try? await store?.flush()
    }

    // MARK: Internals

    /// Ring and action timeouts share one sleeping task that waits for the earliest deadline.
    /// Deadlines are fixed when armed, so a manual clock advanced before the task sleeps still
    /// fires them; disarming only forgets the deadline (the task wakes, finds nothing, sleeps on).
    private enum TimerKey: Hashable {
        case action(ActionID)
        case ring(UUID)
        /// Connected calls' Recents rows note that they are still on.
        case heartbeat
    }

    private func arm(_ key: TimerKey, after delay: Duration) {
        let deadline = clock.now + delay
        timers[key] = deadline
        if timerDeadline.map({ deadline < $0 }) ?? true { scheduleTimerTask(at: deadline) }
    }

    private func disarm(_ key: TimerKey) {
        timers[key] = nil
    }

    private func scheduleTimerTask(at deadline: Duration) {
        timerTask?.cancel()
        timerGeneration += 1
        let generation = timerGeneration, clock = self.clock
        timerDeadline = deadline
        timerTask = Task { [weak self] in
            do { try await clock.sleep(until: deadline) } catch { return }
            await self?.timersDue(generation: generation)
        }
    }

    private func timersDue(generation: UInt64) {
        guard generation == timerGeneration, !isShutDown else { return }  // a newer task took over
        timerTask = nil
        timerDeadline = nil
        let now = clock.now
        let due = timers.filter { $0.value <= now }.sorted { $0.value < $1.value }
        for (key, _) in due {
            timers[key] = nil
            switch key {
            case let .action(id): actionTimedOut(id)
            case let .ring(uuid): ringTimedOut(uuid)
            case .heartbeat: heartbeat()
            }
        }
        if timerDeadline == nil, let next = timers.values.min() { scheduleTimerTask(at: next) }
    }

    /// Writes each connected call's row (its `lastSeen` now), and comes again while any is.
    private func heartbeat() {
        let connected = calls.filter { $0.value.state.hasConnected && !$0.value.state.hasEnded }.map(\.key)
        for uuid in connected { persist(uuid) }
        if !connected.isEmpty { arm(.heartbeat, after: configuration.recentsHeartbeat) }
    }

    private func ringTimedOut(_ uuid: UUID) {
        guard let call = calls[uuid], call.state.isRinging else { return }
        endCall(uuid, reason: .unanswered, status: .timedOut, notify: true)
    }

    private func applyReported(_ event: CallStateEvent, to uuid: UUID) throws(CallReportError) {
        guard var call = calls[uuid] else { throw .unknownCall(uuid) }
        do throws(IllegalCallTransition) {
            _ = try call.state.apply(event)
        } catch {
            throw .illegalTransition(error)
        }
        call.recent.state = call.state.phase.description
        calls[uuid] = call
        publish(uuid)
    }

    /// Applies an event the manager itself decided; a call that changed meanwhile (ended while
    /// the action ran) keeps its state.
    private func apply(_ event: CallStateEvent, to uuid: UUID) {
        try? applyReported(event, to: uuid)
    }

    func endCall(_ uuid: UUID, reason: CallEndReason, status: SessionStatus, notify: Bool) {
        guard var call = calls[uuid], !call.state.hasEnded else { return }
        _ = try? call.state.apply(.ended(reason))
        disarm(.ring(uuid))
        let now = wallClock()
        call.recent.state = call.state.phase.description
        call.recent.ended = now
        call.recent.reason = reason
        call.recent.duration = call.recent.connected.map { max(0, now.timeIntervalSince($0)) } ?? 0
        calls[uuid] = call
        persist(uuid)
        publish(uuid)
        calls[uuid] = nil
        order.removeAll { $0 == uuid }
        endedCalls.insert(uuid)
        endedOrder.append(uuid)
        if endedOrder.count > endedMemory {
            let forgotten = endedOrder.prefix(endedMemory / 10)
            endedCalls.subtract(forgotten)
            endedOrder.removeFirst(forgotten.count)
        }
        updateRinger()
        for entry in pending.values where entry.action.action.callUUID == uuid {
            complete(entry.action.id, .failed("the call ended (\(reason.rawValue))"))
        }
        if notify { requestsContinuation.yield(.callEnded(uuid, reason)) }
        broadcaster.send(.session(uuid, status))
        broadcaster.send(.callEnded(uuid, reason))
        if calls.isEmpty, case .systemOwned = audioOwnership, deactivation == nil {
            deactivation = Task {
                await self.deactivateAudioIfIdle()
                self.deactivationFinished()
            }
        }
    }

    /// Notes where a call is recorded (its Recents row shows it).
    public func setRecording(_ path: String?, of call: UUID) {
        guard calls[call] != nil else { return }
        calls[call]?.recent.recording = path
        persist(call)
    }

    /// The call's recording stopped early, for `reason`: Recents says it is incomplete.
    public func setRecordingProblem(_ reason: String, of call: UUID) {
        guard calls[call] != nil else { return }
        calls[call]?.recent.recordingProblem = reason
        persist(call)
    }

    private func persist(_ uuid: UUID) {
        guard configuration.includesCallsInRecents, let store, var call = calls[uuid] else { return }
        if call.recent.ended == nil {
            call.recent.lastSeen = wallClock()
            calls[uuid] = call
            if call.state.hasConnected, timers[.heartbeat] == nil { arm(.heartbeat, after: configuration.recentsHeartbeat) }
        }
        store.save(call.recent)
    }

    /// Rings while any incoming call rings. A ringtone that cannot play is reported, never fatal.
    private func updateRinger() {
        guard let ringer else { return }
        let ringing = calls.values.contains { $0.state.direction == .incoming && $0.state.phase == .invitationReceived }
        if ringing && !ringer.isRinging {
            do { try ringer.start() } catch {
                broadcaster.send(.ringtoneFailed("\(error)"))
            }
        } else if !ringing && ringer.isRinging {
            ringer.stop()
        }
    }

    private func publish(_ uuid: UUID) {
        defer { updateRinger() }
        guard let call = calls[uuid] else { return }
        observer.update(ObservedCall(
            id: uuid, handle: call.handle, callerName: call.update.localizedCallerName,
            isOutgoing: call.state.isOutgoing, isOnHold: call.state.isOnHold, isMuted: call.state.isMuted,
            hasStartedConnecting: call.state.hasStartedConnecting, hasConnected: call.state.hasConnected,
            hasEnded: call.state.hasEnded, phase: call.state.phase, group: call.state.group))
    }
}
