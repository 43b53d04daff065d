/// How a leg ends: once, with what it sends the peer, reports to the manager and records.
extension LegState {
    /// Where a call that failed without a recorded reason had got to: the step that did not
    /// finish in time (nil once media ran).
    public var unfinished: String? {
        switch phase {
        case .dialing: "the other node could not be reached in time: the signaling connection never came up"
        case .inviting, .ringing, .offering: "the other node did not finish the offer and answer in time"
        case .checking: "no network path was found in time: ICE did not connect"
        case .securing: "the media's keys were not agreed in time: the DTLS handshake did not finish"
        case .awaitingAudio: "the audio session was not activated in time"
        case .earlyMedia: "the call was not answered in time (its early media ran)"
        case .connected, .reconnecting, .ended: nil
        }
    }

    mutating func end(_ ending: LegEnding) -> [LegAction] {
        // Unanswered here, its early media running or not.
        let ringingHere = !outgoing && (phase == .ringing || earlyMedia)
        var actions: [LegAction] = armed.sorted { "\($0)" < "\($1)" }.map { .cancel($0) }
        armed.removeAll()
        let end: LegEnd
        var report: CallEndReason?
        switch ending {
        case .hangUp:
            // Ending a call that still rings here declines it.
            actions.append(.send(ringingHere ? .reject(.declined) : .end(.hangup)))
            end = LegEnd(reason: ringingHere ? .declined : .localEnded, detail: nil)
        case let .peerEnded(reason) where ringingHere && (reason == .answeredElsewhere || reason == .declinedElsewhere):
            // Another device of this account took the call, or turned it down: nothing was missed.
            end = LegEnd(reason: reason == .answeredElsewhere ? .answeredElsewhere : .declinedElsewhere,
                         detail: reason == .answeredElsewhere ? "answered on another device" : "declined on another device")
            report = end.reason
        case let .peerEnded(reason) where ringingHere:
            // The caller gave up while it rang here: a missed call (CallKit's unanswered).
            end = LegEnd(reason: .unanswered, detail: reason == .hangup ? "missed: the caller hung up before it was answered"
                                                                        : "missed: the caller's call ended before it was answered (\(reason.rawValue))")
            report = .unanswered
        case let .peerEnded(reason):
            // The peer's own reason, when it is not a plain hang-up, is what the user here
            // needs to hear: the call did not end by anything on this side.
            let detail: String? = switch reason {
            case .hangup: nil
            case .failed: "the other node ended the call after a failure on its side (its log says which)"
            case .timeout: "the other node gave up waiting"
            case .shutdown: "the other node shut down"
            case .answeredElsewhere: "answered on another device"
            case .declinedElsewhere: "declined on another device"
            }
            end = LegEnd(reason: .remoteEnded, detail: detail)
            report = .remoteEnded
        case let .peerRejected(reason):
            // Every refusal is the other side's decision, whatever its reason: one family
            // (busy, declined, do-not-disturb, blocked, unknown caller alike), the reason in the detail.
            end = LegEnd(reason: .remoteEnded, detail: "rejected: \(reason.rawValue)")
            report = end.reason
        case let .failed(detail):
            actions.append(.send(.end(.failed)))
            end = LegEnd(reason: .failed, detail: detail)
            report = .failed
        case let .actionTimedOut(detail):
            actions.append(.send(.end(.timeout)))
            end = LegEnd(reason: .failed, detail: detail)
        case let .endedByManager(reason):
            let message: CallSignal = switch reason {
            case .unanswered: .end(.timeout)
            case .failed: .end(.failed)
            case .declined: .reject(.declined)
            case .localEnded, .remoteEnded, .answeredElsewhere, .declinedElsewhere: .end(.hangup)
            }
            actions.append(.send(message))
            end = LegEnd(reason: reason, detail: reason == .failed ? unfinished : nil)
        case let .signalingClosed(detail):
            end = LegEnd(reason: .failed, detail: detail)
            report = .failed
        case let .transferred(detail):
            actions.append(.send(.end(.hangup)))
            end = LegEnd(reason: .localEnded, detail: detail)
            report = .localEnded
        case .shutdown:
            actions.append(.send(.end(.shutdown)))
            end = LegEnd(reason: .localEnded, detail: nil)
            report = .localEnded
        }
        phase = .ended(end)
        actions.append(.tearDown)
        if let report { actions.append(.reportEnded(report)) }
        return actions
    }
}
