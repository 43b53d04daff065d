import CallCore
import Foundation

/// Where a call is in its setup, following the call protocol's messages (SimpleX's states)
/// with CallKit's view derived from it (see ``CallState``).
///
/// Outgoing: waitingForCapabilities → invitationSent → offerReceived → answerSent → connected.
/// Incoming: invitationReceived → accepted → offerSent → answerReceived → connected.
/// Where the caller offers with its invitation (SIP), the answer is the callee taking the call:
/// outgoing invitationSent → answerReceived, incoming accepted → answerSent.
/// Any phase → ended.
public enum CallPhase: Sendable, Equatable, CustomStringConvertible {
    /// Outgoing: the start action is being performed; no invitation sent yet.
    case waitingForCapabilities
    /// Outgoing: the callee was invited and is ringing.
    case invitationSent
    /// Outgoing: the callee answered and sent its offer.
    case offerReceived
    /// Our answer is sent (outgoing: to the callee's offer; incoming, the caller offering: to
    /// the caller's, taking the call); connectivity checks run.
    case answerSent
    /// Incoming: ringing here.
    case invitationReceived
    /// Incoming: the user answered; the offer is being prepared.
    case accepted
    /// Incoming: our offer is sent.
    case offerSent
    /// The peer's answer arrived (incoming: the caller's; outgoing, the caller offering: the
    /// callee's, which took the call); connectivity checks run.
    case answerReceived
    /// Media flows.
    case connected
    case ended(CallEndReason)

    public var description: String {
        switch self {
        case .waitingForCapabilities: "waitingForCapabilities"
        case .invitationSent: "invitationSent"
        case .offerReceived: "offerReceived"
        case .answerSent: "answerSent"
        case .invitationReceived: "invitationReceived"
        case .accepted: "accepted"
        case .offerSent: "offerSent"
        case .answerReceived: "answerReceived"
        case .connected: "connected"
        case let .ended(reason): "ended(\(reason.rawValue))"
        }
    }
}

/// Something that happens to a call.
public enum CallStateEvent: Sendable, Equatable {
    case progress(CallProgress)
    /// The local user answered (incoming only, while ringing).
    case answered
    case mediaConnected
    case held(Bool)
    case muted(Bool)
    case connectionLost
    case connectionRestored
    case grouped(UUID?)
    case ended(CallEndReason)
}

/// What the owner of a state machine must do after a transition.
public enum CallStateEffect: Sendable, Equatable {
    case none
    /// Outgoing call started connecting (CallKit's `reportOutgoingCall(startedConnectingAt:)`).
    case startedConnecting
    /// Media connected for the first time.
    case connected
    case holdChanged(Bool)
    case muteChanged(Bool)
    case connectionLost
    case connectionRestored
    case groupChanged(UUID?)
    /// The call ended; `wasConnected` tells whether media had ever flowed.
    case ended(CallEndReason, wasConnected: Bool)
}

/// A transition the state machine refused.
public struct IllegalCallTransition: Error, Sendable, Equatable, CustomStringConvertible {
    public let phase: CallPhase
    public let event: CallStateEvent
    public let reason: String
    public var description: String { "cannot apply \(event) to a call in \(phase): \(reason)" }
}

/// One call's state, as a plain value: events are mutating methods that return what to do.
///
/// No concurrency here; ``CallManager`` owns one per call and performs the effects.
public struct CallState: Sendable, Equatable {
    public let direction: CallDirection
    public private(set) var phase: CallPhase
    public private(set) var isOnHold = false
    public private(set) var isMuted = false
    /// Media stopped arriving after the call connected and has not come back yet.
    public private(set) var isReconnecting = false
    public private(set) var group: UUID?
    /// Media connected at least once.
    public private(set) var hasConnected = false

    /// A call this node places: starts waiting for the start action to be performed.
    public static func outgoing() -> CallState { CallState(direction: .outgoing, phase: .waitingForCapabilities) }
    /// A call reported by the peer: starts ringing.
    public static func incoming() -> CallState { CallState(direction: .incoming, phase: .invitationReceived) }

    // MARK: CallKit's view

    public var isOutgoing: Bool { direction == .outgoing }
    public var hasEnded: Bool { if case .ended = phase { true } else { false } }
    /// CallKit's "connecting": past ringing, media not connected yet.
    public var isConnecting: Bool {
        switch phase {
        case .offerReceived, .answerSent, .accepted, .offerSent, .answerReceived: true
        default: false
        }
    }
    /// Outgoing calls have started connecting once the invitation is out.
    public var hasStartedConnecting: Bool {
        direction == .outgoing && phase != .waitingForCapabilities
    }
    /// Ringing (either side), not yet answered.
    public var isRinging: Bool { phase == .invitationSent || phase == .invitationReceived }
    public var endReason: CallEndReason? { if case let .ended(reason) = phase { reason } else { nil } }

    /// Applies `event`.
    /// - Throws: ``IllegalCallTransition`` when the event cannot happen in this state; the
    ///   state is then unchanged.
    public mutating func apply(_ event: CallStateEvent) throws(IllegalCallTransition) -> CallStateEffect {
        func illegal(_ reason: String) -> IllegalCallTransition {
            IllegalCallTransition(phase: phase, event: event, reason: reason)
        }
        if hasEnded { throw illegal("the call has ended") }
        switch event {
        case let .progress(progress):
            let expected: (from: CallPhase, to: CallPhase, direction: CallDirection) = switch (progress, direction) {
            case (.invitationSent, _): (.waitingForCapabilities, .invitationSent, .outgoing)
            case (.offerReceived, _): (.invitationSent, .offerReceived, .outgoing)
            // The caller offered with its invitation: answering it takes the call.
            case (.answerSent, .incoming): (.accepted, .answerSent, .incoming)
            case (.answerSent, .outgoing): (.offerReceived, .answerSent, .outgoing)
            case (.offerSent, _): (.accepted, .offerSent, .incoming)
            // The callee's answer to the caller's offer says it took the call.
            case (.answerReceived, .outgoing): (.invitationSent, .answerReceived, .outgoing)
            case (.answerReceived, .incoming): (.offerSent, .answerReceived, .incoming)
            }
            guard direction == expected.direction else { throw illegal("\(progress) happens only in \(expected.direction) calls") }
            guard phase == expected.from else { throw illegal("\(progress) follows \(expected.from)") }
            phase = expected.to
            return progress == .invitationSent ? .startedConnecting : .none

        case .answered:
            guard direction == .incoming else { throw illegal("only incoming calls are answered") }
            guard phase == .invitationReceived else { throw illegal("only a ringing call can be answered") }
            phase = .accepted
            return .none

        case .mediaConnected:
            guard phase == .answerSent || phase == .answerReceived else {
                throw illegal("media connects only after the offer and answer are exchanged")
            }
            phase = .connected
            hasConnected = true
            return .connected

        case let .held(onHold):
            guard phase == .connected else { throw illegal("only a connected call can be held or resumed") }
            guard onHold != isOnHold else { throw illegal(onHold ? "the call is already on hold" : "the call is not on hold") }
            isOnHold = onHold
            return .holdChanged(onHold)

        case let .muted(muted):
            guard muted != isMuted else { return .none }
            isMuted = muted
            return .muteChanged(muted)

        case .connectionLost:
            guard phase == .connected else { throw illegal("only a connected call can lose its connection") }
            guard !isReconnecting else { throw illegal("the connection is already lost") }
            isReconnecting = true
            return .connectionLost

        case .connectionRestored:
            guard isReconnecting else { throw illegal("the connection was not lost") }
            isReconnecting = false
            return .connectionRestored

        case let .grouped(group):
            self.group = group
            return .groupChanged(group)

        case let .ended(reason):
            let wasConnected = hasConnected
            phase = .ended(reason)
            isReconnecting = false
            return .ended(reason, wasConnected: wasConnected)
        }
    }
}
