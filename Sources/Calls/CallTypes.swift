import CallCore
import Foundation

/// How a call's remote party is addressed (CallKit's `CXHandle`).
public struct CallHandle: Sendable, Hashable, Codable, CustomStringConvertible {
    public enum Kind: String, Sendable, Hashable, Codable, CaseIterable {
        /// Any identifier; a node's certificate fingerprint is one.
        case generic
        case phoneNumber
        case emailAddress
    }
    public var kind: Kind
    public var value: String
    public init(_ kind: Kind = .generic, _ value: String) {
        self.kind = kind
        self.value = value
    }
    public var description: String { value }
}

/// Whether this node placed or received a call.
public enum CallDirection: String, Sendable, Codable {
    case outgoing
    case incoming
}

/// What is known about a call's remote side (CallKit's `CXCallUpdate`).
public struct CallUpdate: Sendable, Equatable {
    public var remoteHandle: CallHandle?
    /// Caller name to show; filled from the call directory's identification labels when `nil`.
    public var localizedCallerName: String?
    public var supportsHolding: Bool
    public var supportsDTMF: Bool
    public var supportsGrouping: Bool
    public var supportsUngrouping: Bool

    public init(remoteHandle: CallHandle? = nil, localizedCallerName: String? = nil, supportsHolding: Bool = true,
                supportsDTMF: Bool = true, supportsGrouping: Bool = false, supportsUngrouping: Bool = false) {
        self.remoteHandle = remoteHandle
        self.localizedCallerName = localizedCallerName
        self.supportsHolding = supportsHolding
        self.supportsDTMF = supportsDTMF
        self.supportsGrouping = supportsGrouping
        self.supportsUngrouping = supportsUngrouping
    }
}

/// The status changes an embedder's session UI follows (as in calls SDKs).
public enum SessionStatus: String, Sendable, Codable {
    /// Media connected: both sides are in the call.
    case joined
    /// The local side ended the call.
    case left
    /// The remote side ended it, or it failed.
    case connectionClosed
    /// Nobody answered, or the call could not connect in time.
    case timedOut
    /// Media stopped arriving; the call is trying to recover.
    case connectionLost
    /// Media flows again after a loss.
    case connectionRestored
}

/// The kinds of action a transaction may carry; each has its own timeout.
public enum CallActionKind: String, Sendable, Hashable, CaseIterable {
    case start, answer, end, setHeld, setMuted, playDTMF, setGroup
}

/// One thing to do to a call (CallKit's `CXCallAction` subclasses).
public enum CallAction: Sendable, Equatable, CustomStringConvertible {
    /// Place a call to `handle` under the caller-chosen `call` UUID.
    case start(call: UUID, handle: CallHandle)
    /// Answer a ringing incoming call. Fulfilled by the provider only when media connects.
    case answer(call: UUID)
    /// Hang up, or reject a ringing call.
    case end(call: UUID)
    case setHeld(call: UUID, onHold: Bool)
    case setMuted(call: UUID, muted: Bool)
    /// Send DTMF digits (0–9, *, #, A–D) as RFC 4733 telephone events.
    case playDTMF(call: UUID, digits: String)
    /// Group `call` with `groupWith`'s group, or take it out of its group with `nil`.
    case setGroup(call: UUID, groupWith: UUID?)

    public var callUUID: UUID {
        switch self {
        case let .start(call, _), let .answer(call), let .end(call), let .setHeld(call, _),
             let .setMuted(call, _), let .playDTMF(call, _), let .setGroup(call, _):
            call
        }
    }

    public var kind: CallActionKind {
        switch self {
        case .start: .start
        case .answer: .answer
        case .end: .end
        case .setHeld: .setHeld
        case .setMuted: .setMuted
        case .playDTMF: .playDTMF
        case .setGroup: .setGroup
        }
    }

    public var description: String {
        switch self {
        case let .start(call, handle): "start \(call.short) to \(handle)"
        case let .answer(call): "answer \(call.short)"
        case let .end(call): "end \(call.short)"
        case let .setHeld(call, onHold): "\(onHold ? "hold" : "unhold") \(call.short)"
        case let .setMuted(call, muted): "\(muted ? "mute" : "unmute") \(call.short)"
        case let .playDTMF(call, digits): "DTMF '\(digits)' on \(call.short)"
        case let .setGroup(call, other): "group \(call.short) with \(other?.short ?? "none")"
        }
    }
}

extension UUID {
    var short: String { String(uuidString.prefix(8)) }
}

/// One or more actions requested together (CallKit's `CXTransaction`): validated as a whole,
/// then performed in order.
public struct CallTransaction: Sendable, Equatable {
    public var actions: [CallAction]
    public init(_ actions: [CallAction]) { self.actions = actions }
    public init(_ action: CallAction) { actions = [action] }
}

/// Identifies one requested action.
public struct ActionID: Sendable, Hashable, CustomStringConvertible {
    public let rawValue: UInt64
    public var description: String { "action#\(rawValue)" }
}

/// An action handed to the provider's performer.
public struct ProviderAction: Sendable, Equatable {
    public let id: ActionID
    public let action: CallAction
}

/// How an action finished. Exactly one per action.
public enum ActionOutcome: Sendable, Equatable {
    case fulfilled
    case failed(String)
    /// Nobody fulfilled or failed it within its kind's timeout.
    case timedOut
}

/// Why a transaction was refused before any of its actions ran (CallKit's
/// `CXErrorCodeRequestTransactionError`).
public enum CallRequestError: Error, Sendable, Equatable, CustomStringConvertible {
    case emptyTransaction
    case unknownCall(UUID)
    case callAlreadyExists(UUID)
    case maximumCallsReached(limit: Int)
    case unsupportedHandle(CallHandle.Kind)
    /// The action does not fit the call's state (answering an outgoing call, holding a call
    /// that does not support it, …); the message says which.
    case invalidAction(String)
    /// The manager has shut down.
    case shutDown
    /// The transaction was accepted, but the provider failed this action or let it time out
    /// (only from ``CallController/perform(_:)``, which waits for the outcomes).
    indirect case actionFailed(CallAction, String)  // boxed: a larger inline payload made typed throws crash in debug builds (Swift 6.3.1)

    public var description: String {
        switch self {
        case .emptyTransaction: "the transaction has no actions"
        case let .unknownCall(uuid): "no call with UUID \(uuid)"
        case let .callAlreadyExists(uuid): "a call with UUID \(uuid) already exists"
        case let .maximumCallsReached(limit): "the maximum number of calls (\(limit)) is reached: end a call first"
        case let .unsupportedHandle(kind): "handles of kind \(kind.rawValue) are not supported by this provider"
        case let .invalidAction(message): message
        case .shutDown: "the call manager has shut down"
        case let .actionFailed(action, reason): "\(action) failed: \(reason)"
        }
    }
}

/// Why fulfilling or failing an action was refused (CallKit raises for these).
public enum ActionError: Error, Sendable, Equatable, CustomStringConvertible {
    case unknownAction(ActionID)
    /// The action already finished; the outcome is the one it kept.
    case alreadyCompleted(ActionID, ActionOutcome)
    /// The action timed out: it can be neither fulfilled nor failed any more.
    case timedOut(ActionID)
    /// Answer actions are fulfilled by the provider when media connects
    /// (``CallManager/reportMediaConnected(_:)``), never by hand.
    case answerFulfilledOnConnect(ActionID)

    public var description: String {
        switch self {
        case let .unknownAction(id): "\(id) is not an action of this provider"
        case let .alreadyCompleted(id, outcome): "\(id) already completed (\(outcome))"
        case let .timedOut(id): "\(id) timed out: it can no longer be fulfilled or failed"
        case let .answerFulfilledOnConnect(id):
            "\(id) answers a call: it is fulfilled when media connects (report that with reportMediaConnected), so an answered call always has audio"
        }
    }
}

/// Why ``CallManager/reportNewIncomingCall(_:update:)`` refused a call (CallKit's
/// `CXErrorCodeIncomingCallError`).
public enum IncomingCallError: Error, Sendable, Equatable, CustomStringConvertible {
    case callUUIDAlreadyExists
    case filteredByBlockList
    case filteredByDoNotDisturb
    case maximumCallsReached
    case unsupportedHandle
    case shutDown

    public var description: String {
        switch self {
        case .callUUIDAlreadyExists: "a call with this UUID already exists"
        case .filteredByBlockList: "the caller is on the block list"
        case .filteredByDoNotDisturb: "do-not-disturb is on"
        case .maximumCallsReached: "the maximum number of calls is reached"
        case .unsupportedHandle: "the caller's handle kind is not supported"
        case .shutDown: "the call manager has shut down"
        }
    }
}

/// Provider settings (CallKit's `CXProviderConfiguration`).
public struct ProviderConfiguration: Sendable, Equatable {
    /// Shown to users and in logs.
    public var localizedName: String
    public var maximumCallGroups: Int
    public var maximumCallsPerCallGroup: Int
    /// Whether ended calls are written to Recents.
    public var includesCallsInRecents: Bool
    public var supportedHandleTypes: Set<CallHandle.Kind>
    /// Path of a WAV file to play while an incoming call rings; `nil` for none.
    public var ringtoneSound: String?
    /// How long a call may ring (either direction) before it ends as unanswered.
    public var ringTimeout: Duration
    /// How long each kind of action may stay unfulfilled. The answer timeout bounds how long an
    /// answered call may take to connect its media.
    public var actionTimeouts: [CallActionKind: Duration]
    /// How often a connected call's Recents row notes that the call is still on
    /// (``RecentCall/lastSeen``): a node that dies mid-call leaves a row that says how long the
    /// call lasted to within this much.
    public var recentsHeartbeat: Duration = .seconds(10)

    public static let defaultActionTimeouts: [CallActionKind: Duration] = [
        .start: .seconds(10), .answer: .seconds(30), .end: .seconds(5), .setHeld: .seconds(5),
        .setMuted: .seconds(2), .playDTMF: .seconds(10), .setGroup: .seconds(5),
    ]

    public init(localizedName: String = "CallNode", maximumCallGroups: Int = 2, maximumCallsPerCallGroup: Int = 5,
                includesCallsInRecents: Bool = true, supportedHandleTypes: Set<CallHandle.Kind> = [.generic],
                ringtoneSound: String? = nil, ringTimeout: Duration = .seconds(45),
                actionTimeouts: [CallActionKind: Duration] = ProviderConfiguration.defaultActionTimeouts) {
        self.localizedName = localizedName
        self.maximumCallGroups = maximumCallGroups
        self.maximumCallsPerCallGroup = maximumCallsPerCallGroup
        self.includesCallsInRecents = includesCallsInRecents
        self.supportedHandleTypes = supportedHandleTypes
        self.ringtoneSound = ringtoneSound
        self.ringTimeout = ringTimeout
        self.actionTimeouts = actionTimeouts
    }

    /// Calls that may exist at once: groups × calls per group.
    public var maximumCalls: Int { maximumCallGroups * maximumCallsPerCallGroup }

    func timeout(for kind: CallActionKind) -> Duration {
        actionTimeouts[kind] ?? Self.defaultActionTimeouts[kind] ?? .seconds(10)
    }
}
