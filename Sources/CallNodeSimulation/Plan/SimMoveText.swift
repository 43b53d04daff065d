/// How a step reads in a trace: the plan's moves in words.
extension SimMove {
    public var description: String {
        func n(_ i: Int) -> String { i == Self.holder ? "whoever has a call" : Self.names[i] }
        func call(_ pick: Int) -> String {
            if let frame = Self.dialFrame(of: pick) { return "the call dialled @\(frame)" }
            return pick == -1 ? "its newest call" : "its call (pick \(pick))"
        }
        switch self {
        case let .dial(from, to): return "\(n(from)) dials \(n(to))"
        case let .answer(node, pick): return "\(n(node)) answers \(call(pick))"
        case let .greet(node, pick): return "\(n(node)) plays early media to \(call(pick)) before answering"
        case let .hangUp(node, pick): return "\(n(node)) hangs up \(call(pick))"
        case let .mute(node, pick, on): return "\(n(node)) \(on ? "mutes" : "unmutes") its call (pick \(pick))"
        case let .hold(node, pick, on): return "\(n(node)) \(on ? "holds" : "resumes") \(call(pick))"
        case let .swap(node, pick): return "\(n(node)) swaps to its call (pick \(pick))"
        case let .merge(node, pick, other): return "\(n(node)) merges its calls (picks \(pick), \(other))"
        case let .unmerge(node, pick): return "\(n(node)) takes its call (pick \(pick)) out of the conference"
        case let .dtmf(node, pick, digits): return "\(n(node)) sends DTMF \(digits) on its call (pick \(pick))"
        case let .block(node, other, on): return "\(n(node)) \(on ? "blocks" : "unblocks") \(n(other))"
        case let .doNotDisturb(node, on): return "\(n(node)) turns do-not-disturb \(on ? "on" : "off")"
        case let .network(loss, delay, reordering, duplication):
            return "network: loss \(Int(loss * 100))%, delay \(delay * 20) ms, reordering \(Int(reordering * 100))%, duplication \(Int(duplication * 100))%"
        case let .partition(on): return on ? "network: partitioned" : "network: partition healed"
        case let .oneWayBreak(towardCallers): return "network: nothing reaches the \(towardCallers ? "callers" : "callees") on their paths until they restart ICE"
        case .resetSignaling: return "signaling: every connection reset"
        case let .unreachable(node, on): return on ? "signaling: \(n(node)) unreachable" : "signaling: \(n(node)) reachable again"
        case .restartRelay: return "relay: restarted"
        case let .addressChange(node): return "host: \(n(node)) moves to another network"
        case let .offline(node, on): return on ? "host: \(n(node)) loses its network" : "host: \(n(node)) joins a network"
        case let .signalingCut(node, on): return on ? "signaling: \(n(node)) cut off (its media goes on)" : "signaling: \(n(node)) back"
        case let .movesWhileSecuring(node, pick, then):
            let more = switch then {
            case .none: ""
            case .mediaCut: ", and the media is cut"
            case .offline: ", and then loses its network"
            }
            return "host: \(n(node)) moves to another network as \(call(pick)) secures its media" + more
        case let .dialThen(from, to, sip, then, yields):
            let next = switch then {
            case .mute: "mutes the call"
            case .cutSignaling: "every signaling connection resets"
            case .moveHost: "its host moves to another network"
            }
            if then == .cutSignaling && !sip { return "\(n(from)) dials \(n(to)), and as its invitation leaves " + next }
            return "\(n(from)) dials \(n(to))\(sip ? " over SIP" : ""), and \(yields) jobs later " + next
        case let .asPeerEnds(move, held):
            return "\(move) as the peer's BYE or CANCEL reaches \(move.actingNode.map(n) ?? "it")" + (held ? ", its leg's turn held back meanwhile" : ", first")
        case let .crash(node): return "\(n(node)) crashes"
        case let .restart(node): return "\(n(node)) starts again from its database"
        case let .microphoneFails(node): return "\(n(node))'s microphone fails"
        case let .dialSIP(from, to): return "\(n(from)) dials \(n(to)) over SIP"
        case let .transfer(node, pick, to): return "\(n(node)) transfers \(call(pick)) to \(n(to))"
        case let .sessionLost(node, pick): return "SIP: the session refresh of \(n(node))'s call (pick \(pick)) is lost"
        case let .restartICE(node, pick): return "\(n(node)) asks for a fresh round of ICE on \(call(pick))"
        case let .abandonSIP(from, to): return "\(n(from)) dials \(n(to)) over SIP and hangs up at once"
        case let .dialPhone(from, to, phone): return "\(n(from)) calls the phone \(phone) at \(n(to))'s host over SIP"
        case let .hangUpAsPeerRetries(node, pick):
            return "\(n(node)) hangs up \(call(pick)) as the peer's glare retry fires"
        case let .holdGathering(node, pick):
            return "ICE: the end of the gathering of \(n(node))'s \(call(pick)) waits (a STUN server slow to answer)"
        case let .endGathering(node, pick, late):
            return "ICE: the gathering of \(n(node))'s \(call(pick)) ends" + (late > 0 ? " (its leg's turn for it \(late * 20) ms late)" : "")
        case let .sipPeer(node, pick, request):
            return "SIP: the peer of \(n(node))'s \(pick == -1 ? "newest call" : "call (pick \(pick))") sends \(request.description)"
        }
    }
}

/// What the peer of a SIP call sends into its dialog (``SimMove/sipPeer(node:pick:request:)``).
public enum SimPeerRequest: String, Codable, Sendable, CustomStringConvertible {
    case digit, refresh, fax

    public var description: String {
        switch self {
        case .digit: "a digit as INFO"
        case .refresh: "a session refresh (UPDATE)"
        case .fax: "an offer to switch to fax (UPDATE, T.38 only)"
        }
    }
}
