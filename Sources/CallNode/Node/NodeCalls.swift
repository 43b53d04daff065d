import AudioSession
import Calls
import Foundation

/// What happens to the calls already in progress when another is answered (CallKit's
/// hold-and-accept, end-and-accept, and merging the new call in).
public enum OtherCallsOnAnswer: String, Sendable, CaseIterable {
    /// They stay as they are: every active call hears the microphone, the speaker plays them
    /// all, but they do not hear each other.
    case keep
    /// They are held (RFC 3264) while the new call is on.
    case hold
    /// They are ended.
    case end
    /// The new call joins them in a conference.
    case merge
}

/// Several calls at once: answering with the others held, ended or merged; swapping between
/// held and active calls; conferences (CallKit's groups) on the audio session's bridge.
extension CallNode {
    /// Connected calls (not ringing, not ended), as the call manager sees them.
    nonisolated var connectedCalls: [ObservedCall] {
        manager.controller.calls.filter { $0.hasConnected && !$0.hasEnded }
    }

    /// Answers a ringing call and does `others` to the calls already connected, in one
    /// transaction: it is refused whole if any part is (a call that cannot be held, the
    /// maximum of calls in a conference).
    public func answer(_ call: UUID, others: OtherCallsOnAnswer) async throws(CallRequestError) {
        let connected = connectedCalls.filter { $0.id != call }
        var actions: [CallAction] = []
        switch others {
        case .keep:
            break
        case .hold:
            actions += connected.filter { !$0.isOnHold }.map { .setHeld(call: $0.id, onHold: true) }
        case .end:
            actions += connected.map { .end(call: $0.id) }
        case .merge:
            // The new call joins the active call's conference (or the active call).
            if let active = connected.first(where: { !$0.isOnHold }) ?? connected.first {
                if active.isOnHold { actions.append(.setHeld(call: active.id, onHold: false)) }
                actions.append(.answer(call: call))
                actions.append(.setGroup(call: call, groupWith: active.id))
                _ = try await manager.controller.request(CallTransaction(actions))
                return
            }
        }
        actions.append(.answer(call: call))
        _ = try await manager.controller.request(CallTransaction(actions))
    }

    /// Makes `call` (and its conference) the active one: every other connected call is held,
    /// and `call`'s group resumed.
    public func swap(to call: UUID) async throws(CallRequestError) {
        // Built from the calls' state: holds and groupings on their way first.
        await manager.settleHoldsAndGroups()
        let connected = connectedCalls
        guard let target = connected.first(where: { $0.id == call }) else { throw .unknownCall(call) }
        let members = Set(connected.filter { $0.id == call || (target.group != nil && $0.group == target.group) }.map(\.id))
        var actions: [CallAction] = connected.filter { !members.contains($0.id) && !$0.isOnHold }.map { .setHeld(call: $0.id, onHold: true) }
        actions += connected.filter { members.contains($0.id) && $0.isOnHold }.map { .setHeld(call: $0.id, onHold: false) }
        guard !actions.isEmpty else { return }
        try await manager.controller.perform(CallTransaction(actions))
    }

    /// Merges `call` into `other`'s conference (or makes one of the two): every member hears
    /// the microphone and every other member; the speaker plays them all. Held members are
    /// resumed first.
    public func merge(_ call: UUID, with other: UUID) async throws(CallRequestError) {
        // Built from the calls' state: holds and groupings on their way first.
        await manager.settleHoldsAndGroups()
        let connected = connectedCalls
        guard let first = connected.first(where: { $0.id == call }) else { throw .unknownCall(call) }
        guard let second = connected.first(where: { $0.id == other }) else { throw .unknownCall(other) }
        let group = connected.filter { $0.id == other || (second.group != nil && $0.group == second.group) }
        var actions: [CallAction] = (group + [first]).filter(\.isOnHold).map { .setHeld(call: $0.id, onHold: false) }
        actions.append(.setGroup(call: call, groupWith: other))
        try await manager.controller.perform(CallTransaction(actions))
    }

    /// Takes `call` out of its conference and keeps talking to it alone: the rest of the
    /// conference is held (a private talk, as a phone's "split").
    public func unmerge(_ call: UUID) async throws(CallRequestError) {
        // Built from the calls' state: holds and groupings on their way first.
        await manager.settleHoldsAndGroups()
        let connected = connectedCalls
        guard let target = connected.first(where: { $0.id == call }) else { throw .unknownCall(call) }
        guard let group = target.group else { throw .invalidAction("the call is not in a conference") }
        var actions: [CallAction] = [.setGroup(call: call, groupWith: nil)]
        actions += connected.filter { $0.id != call && $0.group == group && !$0.isOnHold }.map { .setHeld(call: $0.id, onHold: true) }
        try await manager.controller.perform(CallTransaction(actions))
    }

    /// The calls in `call`'s conference (itself included), none when it is in none (a group
    /// left with one call is no conference).
    public nonisolated func conference(of call: UUID) -> [UUID] {
        let connected = manager.controller.calls
        guard let group = connected.first(where: { $0.id == call })?.group else { return [] }
        let members = connected.filter { $0.group == group }.map(\.id)
        return members.count >= 2 ? members : []
    }

    /// Sends early media on a call ringing here, before answering or declining it: the caller's
    /// offer is answered early (SIP's 183), so the caller hears this node's audio — a greeting,
    /// an announcement — while the call still rings; ``answer(_:)`` then takes it (a 200 with the
    /// same answer), or ``hangUp(_:)`` declines it. Follow ``events()`` (`earlyMedia`, then
    /// `connected` once answered).
    ///
    /// - Throws: ``CallNodeError/earlyMedia(_:)`` for a call that is not ringing here, whose
    ///   caller made no offer with its invitation (node envelopes and the page: their callee
    ///   offers once it answers), or when the system owns the audio session: CallKit activates
    ///   audio for an incoming call only once it is answered (``CallNodeConfiguration/appOwnedAudio``).
    public func progress(_ call: UUID) async throws(CallNodeError) {
        guard let leg = legs[call] else { throw .noSuchCall(call) }
        guard appSession != nil else {
            throw .earlyMedia("the system owns the audio session (CallKit mode), which it activates for an incoming call only once it is answered: early media needs the node to own it (app-owned audio)")
        }
        if let error = await leg.ask(fallback: CallNodeError.noSuchCall(call), { .progress($0) }) { throw error }
    }
}
