import AudioSession
import CallCore
import Foundation

/// Who activates the audio session for a ``CallManager``.
public enum CallAudioOwnership: Sendable {
    /// CallKit mode: the manager activates this session after a start or answer action is
    /// fulfilled and deactivates it after the last call ends.
    case systemOwned(AudioSessionOwner<SystemOwned>)
    /// CallKit-free mode: the app activates its own ``AudioSessionOwner<AppOwned>``.
    case appOwned
}

/// What the manager asks of its performer: the part of the node that does the work of each
/// action (signaling, ICE, media) — CallKit's provider delegate, as one stream.
public enum ProviderRequest: Sendable, Equatable {
    /// Do the work of this action, then call ``CallManager/fulfill(_:)`` or
    /// ``CallManager/fail(_:reason:)`` (answers are fulfilled by ``CallManager/reportMediaConnected(_:)``).
    case perform(ProviderAction)
    /// The action's time ran out; undo what it started.
    case timedOut(ProviderAction)
    /// The manager ended this call itself (ring timeout, failed action): tear down its media
    /// and signaling.
    case callEnded(UUID, CallEndReason)
    /// System-owned mode: the session's devices are open; start media now (CallKit's
    /// `didActivate`). The only moment to start media; never activate anything yourself.
    case didActivate(ActiveAudioRoute)
    /// System-owned mode: the devices are closed (`didDeactivate`).
    case didDeactivate
}

/// What embedders and UIs follow.
public enum CallEvent: Sendable, Equatable {
    case incomingCall(UUID, CallUpdate)
    case actionCompleted(ProviderAction, ActionOutcome)
    case session(UUID, SessionStatus)
    case callEnded(UUID, CallEndReason)
    case audioActivated(ActiveAudioRoute)
    case audioDeactivated
    /// The audio session could not be activated; the calls that needed it ended as failed.
    case audioActivationFailed(String)
    case doNotDisturbChanged(Bool)
    /// The ringtone could not play (its output would not open); the call still rings.
    case ringtoneFailed(String)
}

/// A report from the performer that does not fit the call's state.
public enum CallReportError: Error, Sendable, Equatable, CustomStringConvertible {
    case unknownCall(UUID)
    case illegalTransition(IllegalCallTransition)
    public var description: String {
        switch self {
        case let .unknownCall(uuid): "no live call with UUID \(uuid)"
        case let .illegalTransition(transition): transition.description
        }
    }
}

/// Requests actions on calls (CallKit's `CXCallController`).
public struct CallController: Sendable {
    public let manager: CallManager

    /// See ``CallManager/request(_:)``.
    public func request(_ transaction: CallTransaction) async throws(CallRequestError) -> [ActionID] {
        try await manager.request(transaction)
    }

    /// Requests one action.
    public func request(_ action: CallAction) async throws(CallRequestError) -> ActionID {
        try await manager.request(CallTransaction(action))[0]  // one action in, one ID out
    }

    /// Requests a transaction and waits until every action in it is fulfilled, so the calls
    /// are in their new state when it returns (held, resumed, muted): ``request(_:)-(CallTransaction)``
    /// returns once the transaction is accepted, before the provider has performed it. Not for
    /// an answer, which is fulfilled only when media connects.
    ///
    /// - Throws: ``CallRequestError`` if the transaction is refused, or
    ///   ``CallRequestError/actionFailed(_:_:)`` for the first action that failed or timed out.
    public func perform(_ transaction: CallTransaction) async throws(CallRequestError) {
        let ids = try await manager.request(transaction)
        for (id, action) in zip(ids, transaction.actions) {
            switch try? await manager.outcome(of: id) {
            case .fulfilled: continue
            case let .failed(reason): throw .actionFailed(action, reason)
            case .timedOut: throw .actionFailed(action, "timed out")
            case nil: throw .actionFailed(action, "its outcome is unknown")  // only for an ID the manager never made
            }
        }
    }

    /// Requests one action and waits until it is fulfilled (see ``perform(_:)-(CallTransaction)``).
    public func perform(_ action: CallAction) async throws(CallRequestError) {
        try await perform(CallTransaction(action))
    }

    /// Calls that have not ended.
    public var calls: [ObservedCall] { manager.observer.calls }
}
