import CallNode

/// What a seed lets happen at all, picked before its plan (swarm testing: Groce et al., ISSTA
/// 2012). A uniform mix of every action and fault buries rare orders under common ones: a
/// resume after a mute is rare among sixteen kinds of step, common among four. Each seed
/// therefore first picks which actions and faults its plan may hold and how often, how many
/// nodes act and whether the browser's page does, how often steps come at the same instant, and
/// how often the scheduler runs a ready job out of turn; then its plan, from those.
public struct SimSwarm: Sendable, Equatable, Codable, CustomStringConvertible {
    public enum Action: String, Sendable, Codable, CaseIterable {
        case dial, answer, hangUp = "hang-up", mute, hold, swap, merge, unmerge, dtmf, block, doNotDisturb = "dnd"
    }

    public enum Fault: String, Sendable, Codable, CaseIterable {
        case network, partition, resetSignaling = "reset-signaling", restartRelay = "restart-relay",
             addressChange = "address-change", microphoneFails = "microphone-fails", crash, unreachable
    }

    /// A kind of step and how often it comes, against the others of its list.
    public struct Weighted<Kind: Sendable & Codable & Equatable>: Sendable, Codable, Equatable {
        public var kind: Kind
        public var weight: Int
    }

    /// The actions a plan may hold (dialling and answering always among them: a run without
    /// calls shows nothing).
    public var actions: [Weighted<Action>]
    /// The faults it may hold; none, a run of actions only.
    public var faults: [Weighted<Fault>]
    /// The share of steps that are faults (when there are any).
    public var faultShare: Double
    /// How long a fault that heals lasts at most, in frames.
    public var faultFrames: Int
    /// The media's worst loss in a network fault.
    public var worstLoss: Double
    /// How many of the nodes act (the first ones); the others only answer what reaches them.
    public var actingNodes: Int
    /// Whether the browser with the first node's call page acts (dials, answers, hangs up).
    public var page: Bool
    /// The share of steps that come at the same frame as another (their messages cross).
    public var crossing: Double
    /// The share of actions that follow the one before on the same call, a moment later (a
    /// user working on one call: mute, then hold, then resume), rather than anywhere.
    public var focus: Double
    /// The frames the steps fall in (the activity's first part: the same steps, denser).
    public var span: Int
    /// How many steps the plan has (more, where fewer kinds share them, make longer orders of
    /// the same few).
    public var steps: Int
    /// How often a mute step mutes (else it unmutes), and a hold is resumed later.
    public var muting: Double
    public var resuming: Double
    /// How often the scheduler picks among the jobs ready together at random (else the oldest):
    /// 1, always.
    public var reordering: Double
    /// SIP calls between the nodes, and their races and faults (nil: none; mixes made before
    /// SIP was simulated have none).
    public var sip: SimSIPMix?
    /// The nodes' timers, short (nil: the node's defaults; mixes made before had those).
    public var timers: SimTimers?
    /// Whether the nodes key their calls with DTLS-SRTP (their default), so a call spends the
    /// handshake's round trips securing, where restarts, host moves and the peer's re-offers
    /// meet it (nil or false: SDES, which keys a call in the offer and answer; mixes made before
    /// had it).
    public var dtls: Bool?
    /// Milliseconds between the audio session's activation and a call's leg hearing of it (a
    /// phone's system activates it some hundreds of milliseconds after the answer), so hang-ups,
    /// holds, restarts and the peer's answer meet a call that waits for its audio (nil: at once;
    /// mixes made before had that).
    public var audioActivation: Int?
    /// Whether a connected path whose peer is out of reach for 2 s says it is disconnected
    /// before its consent runs out, as libnice's does with consent freshness on (nil or false:
    /// it goes from connected to failed; mixes made before had that).
    public var iceDisconnects: Bool?
    /// Jobs the scheduler holds back while others run, as a preempted thread's (nil: none;
    /// mixes made before had none).
    public var stragglers: SimScheduler.Stragglers?

    /// A seed's own mix: each action besides dialling and answering in it seven times in ten,
    /// each weighted 1, 2, 4 or 8; faults in one mix of two (none without `faults`), each fault
    /// then in it one time in three; the rest from short lists of what matters.
    public static func pick(_ random: inout SimRandom, nodes: Int, faults allowed: Bool, frames: Int) -> SimSwarm {
        var actions: [Weighted<Action>] = []
        for action in Action.allCases {
            let always = action == .dial || action == .answer
            guard always || random.chance(0.7) else { continue }
            actions.append(.init(kind: action, weight: [1, 2, 4, 8][random.below(4)]))
        }
        var faults: [Weighted<Fault>] = []
        // Half the mixes have no faults at all: what needs a clean network to show (a muted
        // microphone heard) is judged only there.
        if allowed, random.chance(0.5) {
            for fault in Fault.allCases where random.chance(1.0 / 3) { faults.append(.init(kind: fault, weight: 1 + random.below(3))) }
        }
        let share = faults.isEmpty ? 0 : [0.1, 0.2, 0.35][random.below(3)]
        return SimSwarm(actions: actions, faults: faults, faultShare: share,
                        faultFrames: [40, 160, 600][random.below(3)], worstLoss: [0.1, 0.3, 0.5][random.below(3)],
                        actingNodes: 2 + random.below(max(1, nodes - 1)), page: random.chance(0.3),
                        crossing: [0, 0.15, 0.3, 0.6][random.below(4)], focus: [0.2, 0.5, 0.8][random.below(3)],
                        span: max(50, [frames / 3, frames * 2 / 3, frames][random.below(3)]),
                        steps: [24, 40, 56, 72][random.below(4)] + random.below(6), muting: [0.7, 1][random.below(2)], resuming: [0.7, 1][random.below(2)], reordering: [0.1, 0.5, 1][random.below(3)])
    }

    /// The plan's first lines in a trace: what this seed let happen.
    public var description: String {
        let acting = actions.map { "\($0.kind.rawValue)×\($0.weight)" }.joined(separator: " ")
        let breaking = faults.isEmpty ? "none" : faults.map { "\($0.kind.rawValue)×\($0.weight)" }.joined(separator: " ")
            + " (\(Int(faultShare * 100))% of steps, lasting up to \(faultFrames * 20) ms, loss up to \(Int(worstLoss * 100))%)"
        return "\(steps) steps; actions: \(acting)\nfaults: \(breaking)\nnodes acting: \(actingNodes)\(page ? " and the page" : ""); "
            + "steps in the first \(span * 20) ms, \(Int(crossing * 100))% at the same instant as another, "
            + "\(Int(focus * 100))% following up on the call before; mutes \(Int(muting * 100))% on, holds \(Int(resuming * 100))% resumed; "
            + "jobs run out of turn: \(Int(reordering * 100))%" + (sip.map { "\nsip: \($0)" } ?? "")
            + (timers.map { "\ntimers: \($0)" } ?? "") + (dtls == true ? "\nkeys: DTLS-SRTP" : "")
            + (audioActivation.map { "\naudio: a call hears its session is active \($0) ms after" } ?? "")
            + (iceDisconnects == true ? "\nice: a path out of reach for 2 s says it is disconnected" : "")
            + (stragglers.map { "\njobs held back: \(Int($0.chance * 100))%, each while up to \($0.upTo) others run" } ?? "")
    }
}

extension SimRandom {
    /// One of `weighted`'s kinds, as often as its weight says.
    mutating func pick<Kind>(_ weighted: [SimSwarm.Weighted<Kind>]) -> Kind {
        var roll = below(weighted.reduce(0) { $0 + $1.weight })
        for entry in weighted {
            if roll < entry.weight { return entry.kind }
            roll -= entry.weight
        }
        return weighted[weighted.count - 1].kind
    }
}

/// What a seed lets SIP do (one mix in two, from a stream of its own): calls between the nodes
/// at their SIP addresses, the races SIP's transactions are known for set up on purpose, and
/// transfers and lost session refreshes.
public struct SimSIPMix: Sendable, Equatable, Codable, CustomStringConvertible {
    public enum Race: String, Sendable, Codable, CaseIterable {
        /// Both sides hold (or resume) at once: their re-INVITEs cross (491).
        case glare
        /// The caller hangs up as the callee answers: the CANCEL crosses the 200.
        case cancelCrossingAnswer = "cancel-crossing-200"
        /// One side hangs up as the other holds: the BYE crosses the re-INVITE.
        case byeCrossingReinvite = "bye-crossing-reinvite"
        /// The callee holds, then transfers the call while it is held (a REFER during hold).
        case referDuringHold = "refer-during-hold"
    }

    /// SIP calls placed besides one for each race.
    public var dials: Int
    /// The races set up after the calls' answers.
    public var races: [Race]
    /// Transfers anywhere in the plan (by whoever has a call).
    public var transfers: Int
    /// Lost session refreshes (in mixes with faults only).
    public var sessionLosses: Int
    /// Whether provisional responses (180, 183) often arrive twice, as a reliable one sent again
    /// before its PRACK does.
    public var repeatedProvisionals: Bool
    /// A SIP peer other than a node, and the near misses (nil: none; mixes made before had none).
    public var peer: SimSIPPeer?
    /// Phones that are not nodes, early media at its edges, a mute as a call is placed (nil:
    /// none; mixes made before had none).
    public var edges: SimSIPEdges?

    /// A seed's SIP mix, or nil (half the seeds): up to two calls, each race in it one time in
    /// two (on a call of its own), up to two transfers and, where the mix has faults, up to two lost refreshes.
    static func pick(_ random: inout SimRandom, faults: Bool) -> SimSIPMix? {
        guard random.chance(0.5) else { return nil }
        let races = Race.allCases.filter { _ in random.chance(0.5) }
        return SimSIPMix(dials: max(races.isEmpty ? 1 : 0, random.below(3)), races: races, transfers: random.below(3),
                         sessionLosses: faults ? random.below(3) : 0, repeatedProvisionals: random.chance(0.5))
    }

    /// The plan's SIP steps: a call of its own for each race (dialled, answered, then the race
    /// on "the newest call" of each side), the other calls dialled and answered, the transfers
    /// and lost refreshes anywhere.
    func steps(_ random: inout SimRandom, actors: [Int], nodes: Int, span: Int) -> [SimStep] {
        var steps: [SimStep] = []
        func other(than node: Int) -> Int { (node + 1 + random.below(nodes - 1)) % nodes }
        func dial() -> (answered: Int, caller: Int, callee: Int, pick: Int) {
            let frame = random.below(span), caller = actors[random.below(actors.count)], callee = other(than: caller)
            let answer = frame + 10 + random.below(40)
            steps.append(SimStep(frame: frame, move: .dialSIP(from: caller, to: callee)))
            steps.append(SimStep(frame: answer, move: .answer(node: callee, pick: SimMove.dialled(at: frame))))
            return (answer, caller, callee, SimMove.dialled(at: frame))
        }
        for race in races {
            let call = dial()
            let later = call.answered + 30 + random.below(60)
            switch race {
            case .glare:
                steps.append(SimStep(frame: later, move: .hold(node: call.caller, pick: call.pick, on: true)))
                steps.append(SimStep(frame: later, move: .hold(node: call.callee, pick: call.pick, on: true)))
                let resume = later + 20 + random.below(120)
                steps.append(SimStep(frame: resume, move: .hold(node: call.caller, pick: call.pick, on: false)))
                steps.append(SimStep(frame: resume, move: .hold(node: call.callee, pick: call.pick, on: false)))
            case .cancelCrossingAnswer:
                steps.append(SimStep(frame: call.answered, move: .hangUp(node: call.caller, pick: call.pick)))
            case .byeCrossingReinvite:
                let (holding, leaving) = random.chance(0.5) ? (call.caller, call.callee) : (call.callee, call.caller)
                steps.append(SimStep(frame: later, move: .hold(node: holding, pick: call.pick, on: true)))
                steps.append(SimStep(frame: later, move: .hangUp(node: leaving, pick: call.pick)))
            case .referDuringHold:
                steps.append(SimStep(frame: later, move: .hold(node: call.callee, pick: call.pick, on: true)))
                let target = (0..<nodes).first { $0 != call.caller && $0 != call.callee } ?? call.caller
                steps.append(SimStep(frame: later + 5 + random.below(40), move: .transfer(node: call.callee, pick: call.pick, to: target)))
            }
        }
        for _ in 0..<dials { _ = dial() }
        for _ in 0..<transfers {
            steps.append(SimStep(frame: random.below(span), move: .transfer(node: SimMove.holder, pick: random.below(3), to: random.below(nodes))))
        }
        for _ in 0..<sessionLosses {
            steps.append(SimStep(frame: random.below(span), move: .sessionLost(node: actors[random.below(actors.count)], pick: random.below(3))))
        }
        return steps
    }

    public var description: String {
        "\(dials + races.count) calls; races: \(races.isEmpty ? "none" : races.map(\.rawValue).joined(separator: " ")); "
            + "transfers: \(transfers); session refreshes lost: \(sessionLosses)\(repeatedProvisionals ? "; 1xx repeated" : "")"
            + (peer.map { "\nsip peer: \($0)" } ?? "") + (edges.map { "\nsip edges: \($0)" } ?? "")
    }
}

/// The nodes' own timers, short (a seed in three, from a stream of its own): a run's activity
/// is 8 s, and at their defaults (keep-alive 15 s, connection lost and resume window 30 s)
/// those timers never fire in it, so what follows them — a keep-alive on a live call, a call
/// given up while reconnecting, a resume window running out — was never in a sweep. Some mixes
/// also restart ICE late or never, so that a pair's consent (8 s on the in-memory network) runs
/// out on a connected call before a restart would have replaced it. Where the seed has faults,
/// outages that outlast the timers come with them (``outages(_:after:of:)``).
public struct SimTimers: Sendable, Equatable, Codable, CustomStringConvertible {
    /// Milliseconds each: ``CallNodeConfiguration/keepAliveInterval``, `connectionLostTimeout`,
    /// `resumeWindow`, `peerGoneAfter`, and `iceRestartInterval` (nil: never restart).
    public var keepAlive: Int
    public var connectionLost: Int
    public var resumeWindow: Int
    public var peerGone: Int
    public var iceRestart: Int?

    static func pick(_ random: inout SimRandom) -> SimTimers? {
        guard random.chance(1.0 / 3) else { return nil }
        return SimTimers(keepAlive: [1_000, 2_000, 4_000][random.below(3)], connectionLost: [3_000, 6_000, 12_000][random.below(3)],
                         resumeWindow: [2_000, 5_000, 10_000][random.below(3)], peerGone: [1_000, 3_000][random.below(2)],
                         iceRestart: [nil, 2_000, 5_000, 10_000][random.below(4)])
    }

    /// Outages that outlast these timers, after the first call's answer may have come (each
    /// one time in two): the media cut for longer than a connection may be lost (the call gives
    /// up while reconnecting), and one of the first call's parties out of signaling's reach,
    /// its connections cut, for longer than the resume window.
    func outages(_ random: inout SimRandom, after answered: Int, of parties: (Int, Int)) -> [SimStep] {
        var steps: [SimStep] = []
        if random.chance(0.5) {
            let from = answered + 20 + random.below(60), lasting = connectionLost / 20 + 25 + random.below(75)
            steps += [SimStep(frame: from, move: .partition(on: true)), SimStep(frame: from + lasting, move: .partition(on: false))]
        }
        if random.chance(0.5) {
            let from = answered + 20 + random.below(60), lasting = resumeWindow / 20 + 25 + random.below(75)
            let node = random.chance(0.5) ? parties.0 : parties.1
            // Out of reach, and its connections cut a moment later: the calls cannot resume.
            steps += [SimStep(frame: from, move: .unreachable(node: node, on: true)), SimStep(frame: from + 1, move: .resetSignaling),
                      SimStep(frame: from + lasting, move: .unreachable(node: node, on: false))]
        }
        return steps
    }

    /// These timers on a node's configuration.
    func apply(to configuration: inout CallNodeConfiguration) {
        configuration.keepAliveInterval = .milliseconds(keepAlive)
        configuration.connectionLostTimeout = .milliseconds(connectionLost)
        configuration.resumeWindow = .milliseconds(resumeWindow)
        configuration.peerGoneAfter = .milliseconds(peerGone)
        configuration.iceRestartInterval = iceRestart.map { .milliseconds($0) }
    }

    public var description: String {
        "keep-alive \(keepAlive) ms, connection lost after \(connectionLost) ms, resume window \(resumeWindow) ms, "
            + "peer gone after \(peerGone) ms, ICE restarts " + (iceRestart.map { "every \($0) ms" } ?? "never")
    }
}
