@_spi(Simulation) import CallCore
@_spi(Simulation) import CallNode
import Calls
import Foundation

/// The rules every run keeps, checked after every step (20 ms of simulated time, once every
/// message and reaction of that instant has run) and at the end.
public enum Invariant: String, CaseIterable, Sendable {
    /// Every call ends exactly once on each side it reached; once everyone has hung up, every
    /// call ends within the run's tail.
    case endsOnce = "ends-once"
    /// The two sides' reasons for an ending agree: one hung up and the other was hung up on, or
    /// a refusal, or both failed.
    case reasonsAgree = "reasons-agree"
    /// Nobody hears a side that is muted or held (after the frames already on their way have
    /// played out).
    case silenceWhenMutedOrHeld = "muted-or-held-is-silent"
    /// A connected call, neither side held nor the speaker muted, over a network fit for
    /// speech, carries each side's microphone to the other within two seconds.
    case audioBothWays = "audio-both-ways"
    /// A call fails only when something in the run could fail it: a partition, a signaling reset
    /// or an unreachable node, a relay restart, a crash. Loss, delay, reordering, duplication, a
    /// microphone that fails while another is there, a host that moves: none of these may.
    case failsOnlyForAFault = "fails-only-for-a-fault"
    /// The call manager's view of a call (connected, held, muted, ended) and its leg's agree.
    case stateAgrees = "state-agrees"
    /// One Recents row per call on each side, and none for calls that never were.
    case recents = "one-recents-row"
    /// After the calls end, nothing of them remains: legs, their tasks, bridge ports, media
    /// endpoints, the manager's calls, ICE paths.
    case nothingLeft = "nothing-left"
    /// The audio session is active exactly when the call manager (its one owner) says it is,
    /// and active while a call's media runs.
    case oneAudioOwner = "one-audio-owner"
    /// A transfer that succeeded ends the transferred call, on each side told so, at once (both
    /// ends are local decisions: no fault can hold them up).
    case transferEnds = "a-transfer-ends-the-call"
    /// SIP's wire: no side starts an INVITE while its last is unanswered, every INVITE
    /// transaction gets its final response, and every dialog ends on both sides.
    case sipDialogs = "sip-dialogs-end"
    /// A call is answered by its callee's user: it is connected at its caller only once the
    /// callee has taken it (never while it still rings there, or its early media runs).
    case answeredByItsUser = "answered-by-its-user"
    /// The nodes could not even start (not an invariant of calls: the run is void).
    case setUp = "set-up"

    /// What the rule means, for `--invariants` and the README.
    public var meaning: String {
        switch self {
        case .endsOnce: "every call ends exactly once on each side it reached, and ends at all once everyone hangs up"
        case .reasonsAgree: "the two sides' end reasons fit together (hung up / hung up on, declined, refused, failed); after a fault, one side may fail where its end could not reach the other, but not be told only that the call 'has ended' by a node that never crashed"
        case .silenceWhenMutedOrHeld: "no frame of a muted or held side's microphone is heard once what was in flight has played (0.8 s; on a network fit for speech, where nothing is concealed)"
        case .audioBothWays: "a connected call, not held, not muted, on a network fit for speech, carries each side's tone to the other within 2 s"
        case .failsOnlyForAFault: "no call ends as failed before the run has had a fault that can fail one (a partition, a reset, an unreachable node, a relay restart, a crash)"
        case .stateAgrees: "the call manager's state (connected, held, muted, ended) matches the leg's phase"
        case .recents: "one Recents row per call on each side, none for calls that never were"
        case .nothingLeft: "after the calls end: no legs, leg tasks, bridge ports, media endpoints, manager calls or ICE paths remain"
        case .oneAudioOwner: "the audio session is active exactly when its owner (the call manager) has activated it, and while media runs"
        case .transferEnds: "a side told that its call's transfer succeeded (the target answered) ends that call within 2 s"
        case .sipDialogs: "no SIP side starts an INVITE while its last is unanswered; once the calls end, every INVITE transaction has had its final response and every dialog has ended on both sides (but a side whose process crashed)"
        case .answeredByItsUser: "a call is connected at its caller only once its callee's user took it: never while it still rings at the callee or its early media runs there"
        case .setUp: "the nodes start"
        }
    }
}

extension Simulation {
    /// Frames a mute or hold gets before the peer may no longer hear the microphone: what is on
    /// the network (up to 6 frames) and in the jitter buffer plays out meanwhile.
    static let silenceGrace = 40
    /// Frames within which a call fit to carry audio must carry it.
    static let audioBound = 100
    static let debugHeard = ProcessInfo.processInfo.environment["CALLNODE_SIM_DEBUG_HEARD"] != nil

    func checkStep() async {
        if let problem = world.sip.problems.first { return fail(.sipDialogs, problem) }
        checkTransfers()
        if failure != nil { return }
        await checkStates()
        if failure == nil { checkAnswers() }
        checkAudio()
        checkReasons()
    }

    /// The manager and the leg agree on each call, and the session on whether audio is active.
    private func checkStates() async {
        for (index, node) in nodesInOrder() {
            guard let inside = inspection(index) else { continue }  // down
            for simulated in callOrderFor(index) {
                let uuid = local(simulated, index)
                guard let leg = inside.legs[uuid] else { continue }
                let state = await node.manager.state(of: uuid)
                let call = callName(simulated)
                let who = name(index)
                if case .awaitingAudio = leg.phase {} else { awaitingAudioSince[uuid] = nil }
                switch leg.phase {
                case .connected, .reconnecting:
                    guard let state, !state.hasEnded else {
                        return fail(.stateAgrees, "\(who)'s leg of call \(call) is \(phaseName(leg.phase)), but the manager has \(state == nil ? "no such call" : "ended it")")
                    }
                    guard state.phase == .connected else {
                        return fail(.stateAgrees, "\(who)'s leg of call \(call) is \(phaseName(leg.phase)), but the manager says \(state.phase)")
                    }
                case .ended:
                    break
                case .awaitingAudio where plan.swarm?.audioActivation != nil:
                    // The manager counts the call connected once its media is; the leg hears of
                    // the audio session the activation's time later — and not much more.
                    guard let state, state.phase == .connected, let delay = plan.swarm?.audioActivation else {
                        awaitingAudioSince[uuid] = nil
                        break
                    }
                    let since = awaitingAudioSince[uuid] ?? frame
                    awaitingAudioSince[uuid] = since
                    if frame - since > delay / 20 + 10 {
                        return fail(.stateAgrees, "the manager says call \(call) on \(who) is connected, but its leg has waited for its audio \((frame - since) * 20) ms (the session's activation takes \(delay) ms)")
                    }
                default:
                    if let state, state.phase == .connected {
                        return fail(.stateAgrees, "the manager says call \(call) on \(who) is connected, but its leg is \(phaseName(leg.phase))")
                    }
                }
                if let state, !state.hasEnded, !leg.requestPending, leg.phase.hasMedia {
                    if state.isMuted != leg.muted {
                        return fail(.stateAgrees, "the manager says call \(call) on \(who) is \(state.isMuted ? "" : "not ")muted, its leg that it is \(leg.muted ? "" : "not ")")
                    }
                    if state.isOnHold != leg.held {
                        return fail(.stateAgrees, "the manager says call \(call) on \(who) is \(state.isOnHold ? "" : "not ")held, its leg that it is \(leg.held ? "" : "not ")")
                    }
                }
            }
            let managerActive = await node.manager.isAudioActive
            if let session = inside.sessionActive, session != managerActive || inside.audioActive != managerActive {
                return fail(.oneAudioOwner, "\(name(index))'s audio: the manager says \(managerActive ? "active" : "inactive"), the node \(inside.audioActive ? "active" : "inactive"), the session \(session ? "open" : "closed")")
            }
            if let running = inside.legs.first(where: { if case .connected = $0.value.phase { true } else { false } }), inside.sessionActive == false {
                return fail(.oneAudioOwner, "call \(callName(running.key)) on \(name(index)) runs media, but its audio session is closed")
            }
        }
    }

    /// No caller's call is connected while its callee's still rings or plays early media:
    /// only the callee's user answers a call.
    private func checkAnswers() {
        for uuid in callOrder {
            guard let caller = calls[uuid]!.caller, let callee = calls[uuid]!.callee,
                  let calling = inspection(caller)?.legs[local(uuid, caller)], let called = inspection(callee)?.legs[local(uuid, callee)] else { continue }
            let connected = switch calling.phase { case .connected, .reconnecting: !calling.earlyMedia; default: false }
            guard connected, called.phase == .ringing || called.earlyMedia else { continue }
            return fail(.answeredByItsUser, "call \(callName(uuid)) is connected at \(name(caller)), but at \(name(callee)) "
                        + (called.earlyMedia ? "its early media still runs" : "it still rings") + ": nobody answered it there")
        }
    }

    /// What each side hears against who may be heard.
    private func checkAudio() {
        let loops = noteConferenceLoops()
        for uuid in callOrder {
            for node in calls[uuid]!.sides.keys.sorted() {
                guard let peer = calls[uuid]!.peer(of: node), calls[uuid]!.sides[peer] != nil else { continue }
                var side = calls[uuid]!.sides[node]!
                defer { calls[uuid]!.sides[node] = side }
                let here = inspection(node)?.legs[local(uuid, node)], there = inspection(peer)?.legs[local(uuid, peer)]
                let peerBit: UInt8 = 1 << UInt8(peer)
                let heardPeer = side.pending.contains { $0 & peerBit != 0 }
                if Self.debugHeard, !side.pending.isEmpty {
                    log("  heard on \(name(node))'s side of \(callName(uuid)): \(side.pending.map { String($0, radix: 2) }.joined(separator: " "))")
                }
                side.pending = []
                if heardPeer { side.lastHeardPeer = frame }
                guard let here, let there, side.endCount == 0 else {
                    side.silencedSince = nil
                    side.eligibleSince = nil
                    continue
                }
                // Silenced: the peer muted or held, or this side holds.
                let silenced = there.muted || there.held || here.held
                if silenced {
                    side.silencedSince = side.silencedSince ?? frame
                    if Self.debugHeard {
                        log("  \(name(peer))'s leg of \(callName(uuid)): muted \(there.muted), held \(there.held), held by peer \(there.heldByPeer), offer pending \(there.offerPending), request pending \(there.requestPending)")
                    }
                    // While the network cuts or loses packets, what plays is concealment of the
                    // last audio that arrived, not the microphone: judged once it is fit again.
                    if heardPeer, frame - side.silencedSince! > Self.silenceGrace, let clean = cleanSince, frame - clean > Self.silenceGrace {
                        let why = there.muted ? "\(name(peer)) muted it" : there.held ? "\(name(peer)) holds it" : "\(name(node)) holds it"
                        return fail(.silenceWhenMutedOrHeld,
                                    "\(name(node)) hears \(name(peer))'s microphone on call \(callName(uuid)) \(frame - side.silencedSince!) frames after \(why)")
                    }
                } else {
                    side.silencedSince = nil
                }
                // Eligible: both connected, nothing held or muted, a network fit for speech.
                let connected = { (phase: LegPhase) -> Bool in if case .connected = phase { true } else { false } }
                let eligible = connected(here.phase) && connected(there.phase) && !silenced && !here.heldByPeer && !there.heldByPeer
                    && side.probe != nil && cleanSince != nil && !loops.contains(uuid)
                if eligible {
                    let since = max(side.eligibleSince ?? frame, cleanSince ?? frame)
                    side.eligibleSince = side.eligibleSince ?? frame
                    if frame - since > Self.audioBound, (side.lastHeardPeer ?? -1) < since {
                        return fail(.audioBothWays,
                                    "\(name(node)) has heard nothing of \(name(peer)) on call \(callName(uuid)) for \(frame - since) frames, though it is connected, not held or muted, on a network fit for speech")
                    }
                } else {
                    side.eligibleSince = nil
                }
            }
        }
    }

    /// A call whose transfer succeeded has ended where that was told.
    private func checkTransfers() {
        for uuid in callOrder {
            for (node, side) in calls[uuid]!.sides.sorted(by: { $0.key < $1.key }) {
                guard let told = side.transferredAt, side.endCount == 0, !side.crashed, frame - told > Self.audioBound else { continue }
                return fail(.transferEnds, "\(name(node)) was told the transfer of call \(callName(uuid)) succeeded \(frame - told) frames ago, and the call is still up there")
            }
        }
    }

    /// Once both sides of a call have ended, their reasons fit.
    private func checkReasons() {
        for uuid in callOrder {
            let call = calls[uuid]!
            guard let caller = call.caller, let callee = call.callee, !call.reasonsChecked else { continue }
            let callerCrashed = call.sides[caller]?.crashed == true, calleeCrashed = call.sides[callee]?.crashed == true
            if callerCrashed || calleeCrashed {
                // The crashed side tells no story of its own: whatever the survivor's user did
                // meanwhile (hung up, declined) or it saw (the other went away) stands; that it
                // ends at all is checked at the end.
                continue
            }
            guard let first = call.sides[caller]?.ended, let second = call.sides[callee]?.ended else { continue }
            calls[uuid]!.reasonsChecked = true
            if !Self.agree(caller: first, callee: second), let broken = disruptionExplaining(call, caller: caller, callee: callee) {
                return fail(.reasonsAgree, broken)
            }
        }
    }

    /// Why two end reasons that do not fit are wrong (nil: the run's faults explain them). Once a
    /// fault that can fail calls came (a reset, a partition, an unreachable node, a crash), an end
    /// that could not reach the other side may leave it failing ("went away", the resume window);
    /// but a side told on resuming that the call "has ended" there, when that node never crashed,
    /// should have been told how it ended.
    func disruptionExplaining(_ call: SimCall, caller: Int, callee: Int) -> String? {
        let first = call.sides[caller]!.ended!, second = call.sides[callee]!.ended!
        let lastEnd = max(call.sides[caller]?.endedAt ?? 0, call.sides[callee]?.endedAt ?? 0)
        let story = "call \(callName(call.uuid)) ended on \(name(caller)) (the caller) as \(first.rawValue) and on \(name(callee)) as \(second.rawValue)"
        guard let disrupted = disruptedAt, disrupted <= lastEnd else { return story }
        for (side, other) in [(caller, callee), (callee, caller)] where call.sides[side]?.ended == .failed {
            if call.sides[side]?.endDetail?.contains("it has ended") == true, !everCrashed.contains(other) {
                return story + ": \(name(other)) never crashed, yet \(name(side)) was told only that the call had ended there"
            }
        }
        guard first == .failed || second == .failed else { return story }
        return nil
    }

    /// The pairs of end reasons (caller's, callee's) that tell one story.
    static func agree(caller: CallEndReason, callee: CallEndReason) -> Bool {
        switch (caller, callee) {
        case (.localEnded, .remoteEnded), (.remoteEnded, .localEnded): true
        case (.localEnded, .localEnded): true  // both hung up at once: the ends crossed
        case (.localEnded, .unanswered): true  // the caller gave up while it rang
        case (.localEnded, .declined): true  // the caller gave up as the callee declined
        case (.remoteEnded, .declined), (.failed, .declined): true
        case (.unanswered, .unanswered), (.unanswered, .remoteEnded): true  // rang out
        case (.failed, .failed): true
        case (.failed, .remoteEnded), (.remoteEnded, .failed): true  // one side failed and told the other
        case (.failed, .unanswered): true  // the caller's call failed while it rang: a missed call
        default: false
        }
    }

    func nodesInOrder() -> [(Int, CallNode)] { Array(nodesList.enumerated()) }
}

extension Simulation {
    /// A leg's phase as the invariants' messages name it.
    func phaseName(_ phase: LegPhase) -> String {
        switch phase {
        case .dialing: "dialing"
        case .inviting: "inviting"
        case .ringing: "ringing"
        case .offering: "offering"
        case .checking: "checking"
        case .securing: "securing"
        case .awaitingAudio: "awaiting audio"
        case .earlyMedia: "early media"
        case .connected: "connected"
        case .reconnecting: "reconnecting"
        case .ended: "ended"
        }
    }
}
