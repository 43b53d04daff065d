import Foundation
import Testing
@testable import Calls

/// Every (state, event) pair: legal ones land where the call protocol says, illegal ones throw
/// and leave the state as it was.
@Suite struct CallStateMachineTests {
    /// Reaches each state through legal events only.
    static func reach(_ path: [CallStateEvent], from start: CallState) -> CallState {
        var state = start
        for event in path { _ = try! state.apply(event) }  // the paths below are legal by construction
        return state
    }

    static let outgoingPath: [CallStateEvent] = [.progress(.invitationSent), .progress(.offerReceived), .progress(.answerSent), .mediaConnected]
    static let incomingPath: [CallStateEvent] = [.answered, .progress(.offerSent), .progress(.answerReceived), .mediaConnected]
    /// The caller offering with its invitation (SIP): the answer is the callee taking the call.
    static let callerOffersOutgoingPath: [CallStateEvent] = [.progress(.invitationSent), .progress(.answerReceived), .mediaConnected]
    static let callerOffersIncomingPath: [CallStateEvent] = [.answered, .progress(.answerSent), .mediaConnected]

    /// Every state worth distinguishing, with a name for failure messages.
    static var allStates: [(String, CallState)] {
        var states: [(String, CallState)] = []
        for (name, start, path) in [("out", CallState.outgoing(), outgoingPath), ("in", CallState.incoming(), incomingPath)] {
            for length in 0...path.count {
                let state = reach(Array(path.prefix(length)), from: start)
                states.append(("\(name):\(state.phase)", state))
            }
            let connected = reach(path, from: start)
            states.append(("\(name):held", reach([.held(true)], from: connected)))
            states.append(("\(name):reconnecting", reach([.connectionLost], from: connected)))
            states.append(("\(name):ended", reach([.ended(.remoteEnded)], from: start)))
        }
        for (name, start, path) in [("out-offering", CallState.outgoing(), callerOffersOutgoingPath),
                                    ("in-answering", CallState.incoming(), callerOffersIncomingPath)] {
            for length in 2...path.count {
                let state = reach(Array(path.prefix(length)), from: start)
                states.append(("\(name):\(state.phase)", state))
            }
        }
        return states
    }

    static let group = UUID()
    static let allEvents: [CallStateEvent] = [
        .progress(.invitationSent), .progress(.offerReceived), .progress(.answerSent), .progress(.offerSent),
        .progress(.answerReceived), .answered, .mediaConnected, .held(true), .held(false), .muted(true), .muted(false),
        .connectionLost, .connectionRestored, .grouped(group), .grouped(nil), .ended(.localEnded),
    ]

    /// The specification, written independently of the implementation: the phase an event leads
    /// to, or nil if the event is illegal there.
    static func expected(_ state: CallState, _ event: CallStateEvent) -> CallPhase? {
        if state.hasEnded { return nil }
        let phase = state.phase
        switch event {
        case .progress(.invitationSent): return state.isOutgoing && phase == .waitingForCapabilities ? .invitationSent : nil
        case .progress(.offerReceived): return state.isOutgoing && phase == .invitationSent ? .offerReceived : nil
        case .progress(.answerSent):
            // Outgoing: the answer to the callee's offer; incoming: to the caller's, taking the call.
            return (state.isOutgoing ? phase == .offerReceived : phase == .accepted) ? .answerSent : nil
        case .progress(.offerSent): return !state.isOutgoing && phase == .accepted ? .offerSent : nil
        case .progress(.answerReceived):
            // Incoming: the answer to the callee's offer; outgoing: the callee's to the caller's.
            return (state.isOutgoing ? phase == .invitationSent : phase == .offerSent) ? .answerReceived : nil
        case .answered: return !state.isOutgoing && phase == .invitationReceived ? .accepted : nil
        case .mediaConnected: return phase == .answerSent || phase == .answerReceived ? .connected : nil
        case .held(true): return phase == .connected && !state.isOnHold ? phase : nil
        case .held(false): return phase == .connected && state.isOnHold ? phase : nil
        case .muted, .grouped: return phase
        case .connectionLost: return phase == .connected && !state.isReconnecting ? phase : nil
        case .connectionRestored: return state.isReconnecting ? phase : nil
        case let .ended(reason): return .ended(reason)
        }
    }

    @Test func everyTransitionLegalAndIllegal() {
        var legal = 0, illegal = 0
        for (name, state) in Self.allStates {
            for event in Self.allEvents {
                var next = state
                let expectation = Self.expected(state, event)
                do {
                    _ = try next.apply(event)
                    #expect(expectation != nil, "\(name) accepted \(event)")
                    #expect(next.phase == expectation, "\(name) + \(event) → \(next.phase)")
                    legal += 1
                } catch {
                    #expect(expectation == nil, "\(name) refused \(event): \(error)")
                    #expect(next == state, "a refused event changed \(name)")
                    #expect(error.phase == state.phase)
                    illegal += 1
                }
            }
        }
        #expect(legal + illegal == Self.allStates.count * Self.allEvents.count)
        #expect(legal > 40 && illegal > 100)
    }

    @Test func effectsTellTheOwnerWhatHappened() throws {
        var call = CallState.outgoing()
        #expect(try call.apply(.progress(.invitationSent)) == .startedConnecting)
        #expect(call.hasStartedConnecting && call.isRinging && !call.isConnecting)
        #expect(try call.apply(.progress(.offerReceived)) == CallStateEffect.none)
        #expect(call.isConnecting && !call.isRinging)
        _ = try call.apply(.progress(.answerSent))
        #expect(try call.apply(.mediaConnected) == .connected)
        #expect(call.hasConnected && !call.isConnecting)
        #expect(try call.apply(.held(true)) == .holdChanged(true))
        #expect(call.isOnHold)
        #expect(try call.apply(.muted(true)) == .muteChanged(true))
        #expect(try call.apply(.muted(true)) == CallStateEffect.none)
        #expect(try call.apply(.connectionLost) == .connectionLost)
        #expect(try call.apply(.connectionRestored) == .connectionRestored)
        #expect(try call.apply(.ended(.remoteEnded)) == .ended(.remoteEnded, wasConnected: true))
        #expect(call.hasEnded && call.endReason == .remoteEnded)

        var ringing = CallState.incoming()
        #expect(!ringing.hasStartedConnecting && ringing.isRinging)
        #expect(try ringing.apply(.ended(.unanswered)) == .ended(.unanswered, wasConnected: false))
    }
}
