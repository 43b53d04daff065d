import CallNodeTestKit

/// What SIP brings that two nodes never send each other, and the near misses the SIP races
/// leave out (in a SIP seed in two, from a stream of its own):
///
/// - the peer's stack and phone: an in-dialog OPTIONS answered 403, 404, 405, 501 or 503 (a
///   phone that does not do OPTIONS, a proxy on the way), a re-INVITE answered 100 Trying
///   first (sofia-sip's own), a transaction's timeout short enough to fall inside a run (in
///   mixes with faults: the 32 s of Timer B and F become 2–6 s), and requests into a call's
///   dialog: a DTMF digit as INFO, a session refresh (an UPDATE without a body), while the call
///   rings, runs, or ends (sent in the frame its node hangs up, they meet the BYE);
/// - near misses: a caller that gives up a frame or three before the callee answers or
///   declines (the CANCEL lands as the answer is decided), a hold just after the peer hung up,
///   a hang-up just after a hold, both sides hanging up a frame or three apart, a transfer just
///   after a hang-up, a hang-up while a glare's retry waits, a session refresh lost as its node
///   hangs up, a hold while the peer is out of reach for longer than a transaction waits, a host
///   without a network for as long (the other side's probe goes unanswered), and (one seed of
///   these in three) a caller that hangs up as soon as it has dialled.
public struct SimSIPPeer: Sendable, Equatable, Codable, CustomStringConvertible {
    /// How an in-dialog OPTIONS is answered.
    public var optionsAnswer: Int
    /// Whether a re-INVITE is answered 100 Trying first.
    public var trying: Bool
    /// Ticks before a transaction without an answer gives up (nil: 32 s).
    public var timeout: Int?
    /// Requests of the peer into calls' dialogs (INFO and UPDATE).
    public var requests: Int
    /// The near misses, one call each.
    public var nearMisses: [NearMiss]
    /// Ticks the stacks take to report what they took (nil: at once; peers made before had
    /// that): a node's 200 or refusal then crosses a CANCEL its own stack has already answered.
    public var reportLag: Int? = nil

    public enum NearMiss: String, Sendable, Codable, CaseIterable {
        /// The caller hangs up a frame or three before the callee answers.
        case cancelBeforeAnswer = "cancel-before-answer"
        /// The caller hangs up a frame or three before the callee declines.
        case cancelBeforeDecline = "cancel-before-decline"
        /// One side hangs up; the other holds a moment later.
        case holdAfterBye = "hold-after-bye"
        /// One side holds and hangs up a frame later: the other answers the re-INVITE after the BYE.
        case byeAfterHold = "bye-after-hold"
        /// Both sides hang up, a frame or three apart.
        case byeCrossingBye = "bye-crossing-bye"
        /// One side hangs up; the other transfers the call a moment later.
        case transferAfterBye = "transfer-after-bye"
        /// Both hold at once (491 for both), and one hangs up while its retry waits.
        case byeDuringGlare = "bye-during-glare"
        /// The session refresh is lost as its node hangs up: the stack's BYE and the node's cross.
        case sessionLostAtBye = "session-lost-at-bye"
        /// A side is out of reach for longer than a transaction waits while the other holds
        /// (a local 408 to the re-INVITE) — in mixes whose transactions give up inside a run.
        case holdIntoSilence = "hold-into-silence"
        /// A side's host loses its network for longer than a transaction waits: the other side's
        /// media stops, and its probe (an OPTIONS into the dialog) gets a local 408 while the
        /// call still stands — in mixes whose transactions give up inside a run.
        case probeIntoSilence = "probe-into-silence"
        /// The callee answers while the end of its ICE gathering waits (a STUN server slow to
        /// answer: its 200 waits for it); the caller gives up meanwhile, and the gathering ends
        /// just as the CANCEL comes: the leg hands the end of its candidates to a dialog the
        /// CANCEL ended (its turn a tick late, one half of the time: a dialog the stack closed).
        case cancelAsCandidatesEnd = "cancel-as-candidates-end"
        /// Both hold at once (491 for both); the caller hangs up so that its BYE reaches the
        /// callee as the callee's retry fires.
        case byeAsGlareRetries = "bye-as-glare-retries"
        /// A side's process dies during the call and is back a moment later, its new stack
        /// knowing nothing of the dialog: the other side's probe (its media stopped) gets 481.
        case peerRestarts = "peer-restarts"
    }

    static func pick(_ random: inout SimRandom, faults: Bool) -> SimSIPPeer? {
        guard random.chance(0.5) else { return nil }
        let optionsAnswer = [200, 200, 403, 404, 405, 501, 503][random.below(7)], trying = random.chance(0.5)
        let timeout = faults && random.chance(0.5) ? [100, 200, 300][random.below(3)] : nil
        let requests = random.below(5)
        let intoSilence: [NearMiss] = [.holdIntoSilence, .probeIntoSilence]
        var misses = NearMiss.allCases.filter { !intoSilence.contains($0) && random.chance(0.5) }
        if timeout != nil, random.chance(0.5) { misses.append(.holdIntoSilence) }
        if timeout != nil, random.chance(0.5) { misses.append(.probeIntoSilence) }
        return SimSIPPeer(optionsAnswer: optionsAnswer, trying: trying, timeout: timeout, requests: requests, nearMisses: misses)
    }

    /// The network's ways with this peer.
    func apply(to conditions: inout InMemorySIPNetwork.Conditions) {
        conditions.optionsAnswer = optionsAnswer
        conditions.trying = trying
        if let timeout { conditions.timeout = timeout }
        if let reportLag { conditions.reportLag = reportLag }
    }

    /// The peer's requests and the near misses; the hold and the probe into silence as edges whose
    /// stretch is kept calm (``SimCalm``): over its seconds the mix's hang-ups and faults would otherwise end
    /// the call before its transaction gives up.
    func steps(_ random: inout SimRandom, actors: [Int], nodes: Int, span: Int, frames: Int) -> (mix: [SimStep], edges: [SimEdge]) {
        var steps: [SimStep] = [], edges: [SimEdge] = []
        func other(than node: Int) -> Int { (node + 1 + random.below(nodes - 1)) % nodes }
        func request(_ node: Int, at frame: Int, pick: Int = -1) {
            // A refresh in two; one of those in three an offer the call cannot take (fax).
            let kind: SimPeerRequest = random.chance(0.5) ? (random.chance(1.0 / 3) ? .fax : .refresh) : .digit
            steps.append(SimStep(frame: frame, move: .sipPeer(node: node, pick: pick, request: kind)))
        }
        // A caller that hangs up at once, in one seed of these in three.
        if random.chance(1.0 / 3) {
            let caller = actors[random.below(actors.count)]
            steps.append(SimStep(frame: random.below(span), move: .abandonSIP(from: caller, to: other(than: caller))))
        }
        for miss in nearMisses {
            // Into silence: its transaction's whole time inside the run's activity.
            let room = miss == .holdIntoSilence || miss == .probeIntoSilence ? max(1, frames - (timeout ?? 100) - 90) : span
            let frame = random.below(room), caller = actors[random.below(actors.count)], callee = other(than: caller)
            // Every step of the near miss acts on the call its dial placed.
            let pick = SimMove.dialled(at: frame)
            let answer = frame + 10 + random.below(40), later = answer + 30 + random.below(60)
            steps.append(SimStep(frame: frame, move: .dialSIP(from: caller, to: callee)))
            let (one, two) = random.chance(0.5) ? (caller, callee) : (callee, caller)
            if miss != .cancelBeforeAnswer && miss != .cancelBeforeDecline {
                steps.append(SimStep(frame: answer, move: .answer(node: callee, pick: pick)))
            }
            // The other side's action a frame or three after the end, or (one in two) just as
            // the end reaches it (``SimMove/asPeerEnds(_:held:)``).
            func afterTheEnd(_ move: SimMove, at frame: Int, endingAt end: Int) {
                // (A transfer the end meets whole, not held: its REFER leaves just before the BYE
                // arrives, and meets the other side's dialog ending.)
                let exact = random.chance(0.5), held = random.chance(0.5)
                steps.append(exact ? SimStep(frame: end, move: .asPeerEnds(move, held: held)) : SimStep(frame: frame, move: move))
            }
            switch miss {
            case .cancelBeforeAnswer, .cancelBeforeDecline:
                let cancel = answer - 1 - random.below(3)
                steps.append(SimStep(frame: cancel, move: .hangUp(node: caller, pick: pick)))
                afterTheEnd(miss == .cancelBeforeAnswer ? .answer(node: callee, pick: pick) : .hangUp(node: callee, pick: pick), at: answer, endingAt: cancel)
            case .holdAfterBye:
                steps.append(SimStep(frame: later, move: .hangUp(node: one, pick: pick)))
                afterTheEnd(.hold(node: two, pick: pick, on: true), at: later + random.below(4), endingAt: later)
            case .byeAfterHold:
                steps.append(SimStep(frame: later, move: .hold(node: one, pick: pick, on: true)))
                steps.append(SimStep(frame: later + random.below(2), move: .hangUp(node: one, pick: pick)))
            case .byeCrossingBye:
                steps.append(SimStep(frame: later, move: .hangUp(node: one, pick: pick)))
                afterTheEnd(.hangUp(node: two, pick: pick), at: later + 1 + random.below(3), endingAt: later)
                // The peer's request meets the BYE of the side that hangs up first.
                request(one, at: later, pick: pick)
            case .transferAfterBye:
                steps.append(SimStep(frame: later, move: .hangUp(node: one, pick: pick)))
                let target = (0..<nodes).first { $0 != caller && $0 != callee } ?? one
                afterTheEnd(.transfer(node: two, pick: pick, to: target), at: later + random.below(4), endingAt: later)
            case .sessionLostAtBye:
                steps.append(SimStep(frame: later, move: .hangUp(node: one, pick: pick)))
                steps.append(SimStep(frame: later, move: .sessionLost(node: one, pick: pick)))
            case .holdIntoSilence, .probeIntoSilence:
                // Soon after the answer, so that the transaction gives up within the run. The hold
                // goes to a side whose signaling is out of reach; the probe to a host without a
                // network (its media stops too, which makes the other side probe at once).
                let silence = (timeout ?? 100) + 32 + random.below(40), start = answer + 25
                var own = [SimStep(frame: frame, move: .dialSIP(from: caller, to: callee)),
                           SimStep(frame: answer, move: .answer(node: callee, pick: pick))]
                if miss == .holdIntoSilence {
                    own += [SimStep(frame: start, move: .unreachable(node: one, on: true)),
                            SimStep(frame: start + 2 + random.below(10), move: .hold(node: two, pick: pick, on: true)),
                            SimStep(frame: start + silence, move: .unreachable(node: one, on: false))]
                } else {
                    own += [SimStep(frame: start, move: .offline(node: one, on: true)),
                            SimStep(frame: start + silence, move: .offline(node: one, on: false))]
                }
                steps.removeLast(2)
                edges.append(SimEdge(steps: own, calm: SimCalm(nodes: [caller, callee], frames: frame...(start + silence + 25))))
            case .cancelAsCandidatesEnd:
                // Its steps kept calm (a hang-up of the mix's, a fault, would leave the callee's
                // gathering waiting with nobody to cancel); whatever came of it, the gathering
                // ends soon after, before the round of checks waiting for its answer gives up.
                let cancel = answer + 1 + random.below(3), late = random.below(2)
                let own = [SimStep(frame: frame, move: .dialSIP(from: caller, to: callee)),
                           SimStep(frame: answer - 1, move: .holdGathering(node: callee, pick: pick)),
                           SimStep(frame: answer, move: .answer(node: callee, pick: pick)),
                           SimStep(frame: cancel, move: .hangUp(node: caller, pick: pick)),
                           SimStep(frame: cancel, move: .asPeerEnds(.endGathering(node: callee, pick: pick, turnsLate: late), held: true)),
                           SimStep(frame: cancel + 25, move: .endGathering(node: callee, pick: pick, turnsLate: 0))]
                steps.removeLast(2)
                edges.append(SimEdge(steps: own, calm: SimCalm(nodes: [caller, callee], frames: frame...(cancel + 30))))
            case .peerRestarts:
                let crash = answer + 25 + random.below(40)
                steps.append(SimStep(frame: crash, move: .crash(node: one)))
                steps.append(SimStep(frame: crash + 2 + random.below(4), move: .restart(node: one)))
            case .byeAsGlareRetries:
                // Kept calm until the retry (up to 2 s after the 491s): the mix's hang-ups and
                // faults would otherwise end the call or the glare first.
                let own = [SimStep(frame: frame, move: .dialSIP(from: caller, to: callee)),
                           SimStep(frame: answer, move: .answer(node: callee, pick: pick)),
                           SimStep(frame: later, move: .hold(node: caller, pick: pick, on: true)),
                           SimStep(frame: later, move: .hold(node: callee, pick: pick, on: true)),
                           SimStep(frame: later + 3, move: .hangUpAsPeerRetries(node: caller, pick: pick))]
                steps.removeLast(2)
                edges.append(SimEdge(steps: own, calm: SimCalm(nodes: [caller, callee], frames: frame...(later + 110))))
            case .byeDuringGlare:
                steps.append(SimStep(frame: later, move: .hold(node: caller, pick: pick, on: true)))
                steps.append(SimStep(frame: later, move: .hold(node: callee, pick: pick, on: true)))
                steps.append(SimStep(frame: later + 5 + random.below(100), move: .hangUp(node: one, pick: pick)))
            }
            // While it rings: the peer's refresh (or digit) reaches the callee's early dialog.
            if random.chance(0.5) { request(callee, at: frame + 3 + random.below(5), pick: pick) }
        }
        for _ in 0..<requests { request(actors[random.below(actors.count)], at: random.below(span)) }
        return (steps, edges)
    }

    public var description: String {
        "the peer answers OPTIONS \(optionsAnswer)\(trying ? ", re-INVITEs 100 first" : "")"
            + (timeout.map { ", gives up a transaction after \($0 * 20) ms" } ?? "")
            + (reportLag.map { ", the stacks report \($0 * 20) ms late" } ?? "")
            + "; \(requests) INFO or UPDATE (a refresh or a fax offer); near misses: " + (nearMisses.isEmpty ? "none" : nearMisses.map(\.rawValue).joined(separator: " "))
    }
}
