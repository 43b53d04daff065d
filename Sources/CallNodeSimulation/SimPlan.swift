import Foundation

/// What happens in one simulated run besides the nodes' own work: the users' actions and the
/// faults, each at a frame (20 ms of simulated time). Made from a seed by ``generate(seed:options:)``;
/// a shrunk plan is the same seed with fewer steps.
public struct SimPlan: Sendable, Equatable, Codable {
    public var seed: UInt64
    /// Frames of activity; a quiet end follows (faults healed, every call hung up).
    public var frames: Int
    public var steps: [SimStep]
    /// What the seed let happen (nil: the uniform mix of plans made before seeds picked one,
    /// and of `--no-swarm`): the scheduler's reordering comes from it too.
    public var swarm: SimSwarm?

    public init(seed: UInt64, frames: Int, steps: [SimStep], swarm: SimSwarm? = nil) {
        self.seed = seed
        self.frames = frames
        self.steps = steps.sorted { $0.frame < $1.frame }
        self.swarm = swarm
    }

    /// This plan with other steps (or another end): the same seed and mix.
    public func with(steps: [SimStep]? = nil, frames: Int? = nil) -> SimPlan {
        SimPlan(seed: seed, frames: frames ?? self.frames, steps: steps ?? self.steps, swarm: swarm)
    }
}

extension SimPlan {
    /// The plan as JSON (what `--save-plan` writes and `--plan-file` reads): a plan kept this
    /// way replays the same steps whatever later changes make of the seed's own plan.
    public func json() -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return String(decoding: (try? encoder.encode(self)) ?? Data(), as: UTF8.self)
    }

    public init(json: String) throws {
        self = try JSONDecoder().decode(SimPlan.self, from: Data(json.utf8))
    }

    /// Only the steps at these places of this plan (a shrunk plan, written down as its seed and
    /// the places it kept), and the activity cut at `frames` if given.
    public func keeping(_ places: [Int], frames: Int? = nil) -> SimPlan {
        let kept = places.filter { steps.indices.contains($0) }.map { steps[$0] }
        return with(steps: kept, frames: frames)
    }

    /// The places of `shrunk`'s steps in this plan (it is this plan with steps left out).
    public func places(of shrunk: SimPlan) -> [Int] {
        var places: [Int] = []
        var next = 0
        for step in shrunk.steps {
            while next < steps.count, steps[next] != step { next += 1 }
            guard next < steps.count else { break }
            places.append(next)
            next += 1
        }
        return places
    }
}

/// One action or fault at a frame.
public struct SimStep: Sendable, Equatable, Codable, CustomStringConvertible {
    public var frame: Int
    public var move: SimMove

    public init(frame: Int, move: SimMove) {
        self.frame = frame
        self.move = move
    }

    public var description: String { "@\(frame) \(move)" }
}

/// A user's action on a node, or a fault of the world. Calls are picked by their place among the
/// node's calls at that moment (oldest first, wrapping; a negative pick counts from the newest),
/// so a step means something whatever calls exist when it comes; with none, it does nothing.
public enum SimMove: Sendable, Equatable, Codable, CustomStringConvertible {
    case dial(from: Int, to: Int)
    case answer(node: Int, pick: Int)
    /// A node plays early media to a call that rings here before it answers or declines it
    /// (its greeting: ``CallNode/progress(_:)``).
    case greet(node: Int, pick: Int)
    /// Hangs up, or declines a call that rings here.
    case hangUp(node: Int, pick: Int)
    case mute(node: Int, pick: Int, on: Bool)
    case hold(node: Int, pick: Int, on: Bool)
    case swap(node: Int, pick: Int)
    case merge(node: Int, pick: Int, with: Int)
    case unmerge(node: Int, pick: Int)
    case dtmf(node: Int, pick: Int, digits: String)
    case block(node: Int, other: Int, on: Bool)
    case doNotDisturb(node: Int, on: Bool)
    /// The media network's loss, delay (frames), reordering and duplication from now on.
    case network(loss: Double, delay: Int, reordering: Double, duplication: Double)
    /// Nothing of the media gets through (or, off, it does again).
    case partition(on: Bool)
    /// The network breaks one way: nothing reaches the callers' paths (or the callees') on
    /// their current round of ICE, while the other way works; a restart's new round gets
    /// through, as a new NAT mapping would. The side that still hears its peer keeps its call
    /// connected until its consent checks run out.
    case oneWayBreak(towardCallers: Bool)
    /// Every open signaling connection is reset.
    case resetSignaling
    /// A node's signaling address cannot be reached (or, off, can again); its open
    /// connections are reset when it goes.
    case unreachable(node: Int, on: Bool)
    /// The relay restarts: every registration and every call's connection through it drops.
    case restartRelay
    /// A node's host moves to another network: a new address and default route.
    case addressChange(node: Int)
    /// A node's host loses its network, or (off) joins one with a new address: meanwhile its
    /// ICE paths carry nothing and cannot gather a new round, and its signaling is out of reach.
    case offline(node: Int, on: Bool)
    /// A node's process dies: connections reset, media stops, nothing more gets out.
    case crash(node: Int)
    /// A crashed node starts again from its database.
    case restart(node: Int)
    /// A node's microphone fails for good (a headset unplugged); the node has another to
    /// fall back to.
    case microphoneFails(node: Int)
    /// A node calls another at its SIP address (the in-memory SIP network; ICE and SRTP as any
    /// SIP call between nodes that offer ICE).
    case dialSIP(from: Int, to: Int)
    /// A node transfers its call to another node's SIP address (a REFER; only SIP calls can be).
    case transfer(node: Int, pick: Int, to: Int)
    /// The session refresh of a node's SIP call is lost: its stack ends the session (a BYE).
    case sessionLost(node: Int, pick: Int)
    /// The embedding app asks for a fresh round of ICE on a node's call
    /// (``CallNode/restartICE(_:)``: a path it knows is bad), whatever the call is doing.
    case restartICE(node: Int, pick: Int)
    /// The peer of a node's SIP call sends into its dialog what only a peer other than a node
    /// does: a session refresh (an UPDATE without a body), a DTMF digit as INFO, or an offer to
    /// switch to fax (an UPDATE with T.38 and no audio, which the node refuses with 488).
    case sipPeer(node: Int, pick: Int, request: SimPeerRequest)
    /// A node dials another's SIP address and hangs up as soon as the call is placed, while
    /// its INVITE still waits for the call's candidates.
    case abandonSIP(from: Int, to: Int)
    /// A node calls a SIP phone at another node's host: the in-memory network plays the
    /// phone's part on the wire (``InMemorySIPNetwork/Phone``: it answers without ringing, or
    /// takes no SRTP), the node behind it the rest.
    case dialPhone(from: Int, to: Int, phone: String)
    /// A node dials (a node's address, or its SIP address), and a seeded number of jobs after
    /// the call is placed — while it dials, or invites — its user mutes it, its signaling
    /// connections reset, or its host moves to another network.
    case dialThen(from: Int, to: Int, sip: Bool, then: FollowUp, yields: Int)
    /// A node's signaling is cut off (or, off, is not any more): it reaches nothing and nothing
    /// reaches it, its connections and its relay's drop; its media goes on.
    case signalingCut(node: Int, on: Bool)
    /// Once a node's call (the pick) secures its media (a DTLS handshake), its host moves to
    /// another network, and then the media is cut or the host loses its network too (each healed
    /// by a later step); nothing if the call ends first.
    case movesWhileSecuring(node: Int, pick: Int, then: SecuringFault)
    /// A user's action on a SIP call (a hang-up, a hold, an answer, a transfer) that waits, up to
    /// 3 s, for the peer's BYE or CANCEL of that call to reach its node, and comes just before:
    /// the action reaches the call's dialog first, or (`held`) the leg's turn is held back as the
    /// action is queued for it, as a thread preempted there, while the end comes in: the leg
    /// then takes the action with its dialog ended. Nothing if the call ends otherwise first.
    indirect case asPeerEnds(SimMove, held: Bool)
    /// A node hangs up its call (the pick) so that the BYE reaches the peer as the peer's glare
    /// retry fires (up to 3 s from the step: a retry must be waiting; the peer's messages wait
    /// the last frames before it, and the retry's delivery waits for the BYE).
    case hangUpAsPeerRetries(node: Int, pick: Int)
    /// The end of the ICE gatherings of a node's call (the pick) waits until let go, as with a
    /// STUN or TURN server slow to answer: its candidates are in its SDP, and its SIP offer or
    /// answer waits for their end.
    case holdGathering(node: Int, pick: Int)
    /// The gatherings a ``holdGathering(node:pick:)`` held end. Performed as the peer's end
    /// comes (``asPeerEnds(_:held:)``, held), the leg's turn for the end of its candidates waits
    /// `turnsLate` more frames after the end came in (a stack reports the dialog's end a tick
    /// after the CANCEL).
    case endGathering(node: Int, pick: Int, turnsLate: Int)

    /// What comes with a host's move while its call secures (``movesWhileSecuring(node:pick:then:)``).
    public enum SecuringFault: String, Sendable, Codable {
        case none
        case mediaCut = "media-cut"
        case offline = "no-network"
    }

    /// What follows a dial a moment later (``dialThen(from:to:sip:then:yields:)``).
    public enum FollowUp: String, Sendable, Codable {
        case mute
        case cutSignaling = "reset-signaling"
        case moveHost = "move-host"
    }

    /// The node whose user acts (nil for faults).
    public var actingNode: Int? {
        switch self {
        case let .dial(node, _), let .answer(node, _), let .greet(node, _), let .hangUp(node, _), let .mute(node, _, _),
             let .hold(node, _, _), let .swap(node, _), let .merge(node, _, _), let .unmerge(node, _), let .dtmf(node, _, _), let .block(node, _, _),
             let .doNotDisturb(node, _), let .dialSIP(node, _), let .transfer(node, _, _), let .restartICE(node, _), let .abandonSIP(node, _),
             let .dialPhone(node, _, _), let .dialThen(node, _, _, _, _), let .holdGathering(node, _), let .endGathering(node, _, _),
             let .hangUpAsPeerRetries(node, _):
            node
        case let .asPeerEnds(move, _):
            move.actingNode
        default:
            nil
        }
    }

    public static let names = ["a", "b", "c", "d", "e"]

    /// A pick that names the call a dial at `frame` placed (by its node, or the node it
    /// called), whatever other calls come and go: what a planned race or near miss acts on.
    public static func dialled(at frame: Int) -> Int { -1_000 - frame }

    /// The dial's frame a pick names, if it names one.
    public static func dialFrame(of pick: Int) -> Int? { pick <= -1_000 ? -1_000 - pick : nil }

    /// In an action on a call, for its node: whichever node has a call when the step comes
    /// (among those with one, the step's pick chooses; the step does nothing if none has).
    public static let holder = -1

    /// The pick of an action on a call.
    public var pick: Int? {
        switch self {
        case let .answer(_, pick), let .greet(_, pick), let .hangUp(_, pick), let .mute(_, pick, _), let .hold(_, pick, _),
             let .swap(_, pick), let .merge(_, pick, _), let .unmerge(_, pick), let .dtmf(_, pick, _), let .transfer(_, pick, _), let .sessionLost(_, pick),
             let .restartICE(_, pick), let .sipPeer(_, pick, _), let .holdGathering(_, pick), let .endGathering(_, pick, _),
             let .hangUpAsPeerRetries(_, pick):
            pick
        case let .asPeerEnds(move, _):
            move.pick
        default:
            nil
        }
    }

    /// This action on a call, by `node`.
    public func acting(by node: Int) -> SimMove {
        switch self {
        case let .answer(_, pick): .answer(node: node, pick: pick)
        case let .hangUp(_, pick): .hangUp(node: node, pick: pick)
        case let .mute(_, pick, on): .mute(node: node, pick: pick, on: on)
        case let .hold(_, pick, on): .hold(node: node, pick: pick, on: on)
        case let .swap(_, pick): .swap(node: node, pick: pick)
        case let .merge(_, pick, with): .merge(node: node, pick: pick, with: with)
        case let .unmerge(_, pick): .unmerge(node: node, pick: pick)
        case let .dtmf(_, pick, digits): .dtmf(node: node, pick: pick, digits: digits)
        case let .transfer(_, pick, to): .transfer(node: node, pick: pick, to: to)
        case let .restartICE(_, pick): .restartICE(node: node, pick: pick)
        case let .asPeerEnds(move, held): .asPeerEnds(move.acting(by: node), held: held)
        default: self
        }
    }

    public var isFault: Bool {
        switch self {
        case .network, .partition, .resetSignaling, .unreachable, .restartRelay, .addressChange, .crash, .restart, .microphoneFails,
             .sessionLost, .oneWayBreak, .offline, .signalingCut, .movesWhileSecuring: true
        default: false
        }
    }
}

/// How a run is shaped.
public struct SimOptions: Sendable, Equatable {
    /// Whole nodes (2–4); a browser with the first node's call page open comes after them.
    public var nodes = 3
    /// Frames of activity (20 ms each).
    public var frames = 400
    /// Steps in a generated plan: between these.
    public var steps = 6...24
    /// Whether plans carry faults.
    public var faults = true
    /// A fixed defect put back, to show a sweep finds it.
    public var reintroducedBug: String?
    /// Whether each seed picks its own mix of actions and faults first (``SimSwarm``); off, every
    /// seed draws from the same uniform mix, as plans were made before.
    public var swarm = true
    /// Node b takes its calls' audio from the test kit's deliberately unsafe session, which the
    /// app activates in its answer action and the provider again (``UnsafeDoubleActivationSession``):
    /// what the sweep shows of the bug the node's audio ownership rule prevents.
    public var unsafeSession = false
    /// Whether seeds may pick SIP calls between the nodes too (``SimSIPMix``; swarm plans only).
    public var sip = true
    /// Microseconds each job of a run waits before it runs, as on a loaded host. It changes no
    /// plan and must change no trace: a run that differs with it follows the wall clock somewhere.
    public var slowHost: UInt32 = 0

    public init() {}
}

extension SimPlan {
    /// The plan a seed makes: actions weighted toward calls that connect and then change
    /// (mute, hold, merge), faults that come and heal.
    public static func generate(seed: UInt64, options: SimOptions) -> SimPlan {
        options.swarm ? swarm(seed: seed, options: options) : uniform(seed: seed, options: options)
    }

    /// The plan of a seed that picked its mix first (``SimSwarm``): its actions and faults, drawn
    /// by their weights, among the nodes that act.
    static func swarm(seed: UInt64, options: SimOptions) -> SimPlan {
        var random = SimRandom(seed: seed)
        let nodeCount = max(2, min(options.nodes, SimMove.names.count - 1))
        let swarm = SimSwarm.pick(&random, nodes: nodeCount, faults: options.faults, frames: options.frames)
        let count = swarm.steps
        // Who acts: the first nodes, and the browser (after the nodes) if its page does.
        let actors = Array(0..<swarm.actingNodes) + (swarm.page ? [nodeCount] : [])
        var steps: [SimStep] = []
        func actor() -> Int { actors[random.below(actors.count)] }
        func other(than first: Int) -> Int {
            let others = actors.filter { $0 != first }
            return others[random.below(others.count)]
        }
        let firstDial = random.below(40)
        let caller = actor(), callee = other(than: caller)
        steps.append(SimStep(frame: firstDial, move: .dial(from: caller, to: callee)))
        steps.append(SimStep(frame: firstDial + 5 + random.below(60), move: .answer(node: callee, pick: 0)))
        // The last action's call, for the next to follow up on; what acts on a call.
        var last = (frame: firstDial + 5, node: callee, pick: 0)
        let onCalls = swarm.actions.filter { [.hangUp, .mute, .hold, .swap, .merge, .unmerge, .dtmf].contains($0.kind) }
        var parties = [caller, callee]
        while steps.count < count {
            var frame = random.chance(swarm.crossing) ? steps[random.below(steps.count)].frame : random.below(swarm.span)
            var pick = random.below(3)
            var at = actor()
            if !swarm.faults.isEmpty, random.chance(swarm.faultShare) {
                let lasting = 10 + random.below(swarm.faultFrames)
                let healing: SimMove?
                let move: SimMove
                switch random.pick(swarm.faults) {
                case .network:
                    let losses = [0, 0.05, 0.1, 0.2, 0.3, 0.5].filter { $0 <= swarm.worstLoss }
                    move = .network(loss: losses[random.below(losses.count)], delay: 1 + random.below(5),
                                    reordering: [0, 0.05, 0.2][random.below(3)], duplication: [0, 0.02, 0.1][random.below(3)])
                    healing = .network(loss: 0, delay: 1, reordering: 0, duplication: 0)
                case .partition: (move, healing) = (.partition(on: true), .partition(on: false))
                case .resetSignaling: (move, healing) = (.resetSignaling, nil)
                case .restartRelay: (move, healing) = (.restartRelay, nil)
                case .addressChange: (move, healing) = (.addressChange(node: at), nil)
                case .microphoneFails: (move, healing) = (.microphoneFails(node: at), nil)
                case .crash: (move, healing) = (.crash(node: at), .restart(node: at))
                case .unreachable: (move, healing) = (.unreachable(node: at, on: true), .unreachable(node: at, on: false))
                }
                steps.append(SimStep(frame: frame, move: move))
                if let healing { steps.append(SimStep(frame: frame + lasting, move: healing)) }
                continue
            }
            // A follow-up acts on the call the last action did, with what acts on a call; other
            // actions on calls come from a node that has one (a party to a dial before).
            let followUp = !onCalls.isEmpty && random.chance(swarm.focus)
            let kind = random.pick(followUp ? onCalls : swarm.actions)
            if followUp {
                (frame, at, pick) = (last.frame + 1 + random.below(40), last.node, last.pick)
            } else if kind == .answer {
                at = parties[random.below(parties.count)]
            } else if kind != .dial, kind != .block, kind != .doNotDisturb {
                // Mostly whoever has a call when the step comes: a plan does not know who will.
                at = random.chance(0.7) ? SimMove.holder : parties[random.below(parties.count)]
            }
            last = (frame, at, pick)
            let move: SimMove
            switch kind {
            case .dial:
                let callee = other(than: at)
                parties += [at, callee]
                move = .dial(from: at, to: callee)
            case .answer: move = .answer(node: at, pick: pick)
            case .hangUp: move = .hangUp(node: at, pick: pick)
            case .mute: move = .mute(node: at, pick: pick, on: random.chance(swarm.muting))
            case .hold:
                move = .hold(node: at, pick: pick, on: true)
                if random.chance(swarm.resuming) {
                    steps.append(SimStep(frame: frame + 5 + random.below(100), move: .hold(node: at, pick: pick, on: false)))
                }
            case .swap: move = .swap(node: at, pick: pick)
            case .merge: move = .merge(node: at, pick: pick, with: random.below(3))
            case .unmerge: move = .unmerge(node: at, pick: pick)
            case .dtmf: move = .dtmf(node: at, pick: pick, digits: String("0123456789*#".randomElement(using: &random)!))
            case .block: move = .block(node: at, other: other(than: at), on: random.chance(0.6))
            case .doNotDisturb: move = .doNotDisturb(node: at, on: random.chance(0.6))
            }
            steps.append(SimStep(frame: frame, move: move))
        }
        var mix = swarm
        // SIP from a stream of its own: a seed that picks none plans and runs as before it could.
        var sipRandom = SimRandom(seed: seed ^ 0x5349_5053_494D)
        if options.sip, let sip = SimSIPMix.pick(&sipRandom, faults: !swarm.faults.isEmpty) {
            mix.sip = sip
            steps += sip.steps(&sipRandom, actors: Array(0..<swarm.actingNodes), nodes: nodeCount, span: swarm.span)
        }
        // Early media from a stream of its own too: in a seed in four, a callee greets some of
        // the calls it will answer a moment before it does — or, one time in three, with an
        // announcement of 2–4 s, during which (in seeds with faults, one time in two) its host
        // moves: a restart of ICE falls due while the call's media runs early.
        var greetingRandom = SimRandom(seed: seed ^ 0x4752_4545_5449_4E47)
        if greetingRandom.chance(0.25) {
            for step in steps {
                guard case let .answer(node, pick) = step.move, node != SimMove.holder, greetingRandom.chance(0.6) else { continue }
                let announcement = greetingRandom.chance(1.0 / 3)
                let greeting = max(0, step.frame - (announcement ? 100 + greetingRandom.below(100) : 3 + greetingRandom.below(25)))
                steps.append(SimStep(frame: greeting, move: .greet(node: node, pick: pick)))
                if announcement, options.faults, greetingRandom.chance(0.5) {
                    steps.append(SimStep(frame: greeting + 10 + greetingRandom.below(50), move: .addressChange(node: node)))
                }
            }
        }
        // Restarts of ICE the embedding app asks for, from a stream of their own: in a seed in
        // four, up to three, on whoever has a call, often at the moment of another step.
        var restartRandom = SimRandom(seed: seed ^ 0x5245_5354_4152_54)
        if restartRandom.chance(0.25) {
            for _ in 0...restartRandom.below(3) {
                let frame = restartRandom.chance(0.5) ? steps[restartRandom.below(steps.count)].frame + restartRandom.below(3) : restartRandom.below(swarm.span)
                steps.append(SimStep(frame: frame, move: .restartICE(node: SimMove.holder, pick: restartRandom.below(3))))
            }
        }
        // Short timers from a stream of their own as well, with outages that outlast them.
        var timerRandom = SimRandom(seed: seed ^ 0x5449_4D45_5253)
        if let timers = SimTimers.pick(&timerRandom) {
            mix.timers = timers
            if options.faults { steps += timers.outages(&timerRandom, after: firstDial + 5, of: (caller, callee)) }
        }
        // A SIP peer other than a node, and the near misses, from a stream of their own.
        var peerRandom = SimRandom(seed: seed ^ 0x5045_4552)
        var edges: [SimEdge] = []
        if mix.sip != nil, let peer = SimSIPPeer.pick(&peerRandom, faults: !swarm.faults.isEmpty) {
            mix.sip?.peer = peer
            let made = peer.steps(&peerRandom, actors: Array(0..<swarm.actingNodes), nodes: nodeCount, span: swarm.span, frames: options.frames)
            steps += made.mix
            edges += made.edges
            // Stacks that report late, from a stream of their own, in a peer in two.
            var lagRandom = SimRandom(seed: seed ^ 0x4C41_4747)
            if lagRandom.chance(0.5) { mix.sip?.peer?.reportLag = 1 + lagRandom.below(3) }
        }
        // DTLS-SRTP from a stream of its own, in a seed in three.
        var keyRandom = SimRandom(seed: seed ^ 0x4454_4C53)
        if keyRandom.chance(1.0 / 3) { mix.dtls = true }
        // An audio session slow to activate, from a stream of its own, in a seed in three.
        var audioRandom = SimRandom(seed: seed ^ 0x4155_4449_4F)
        if audioRandom.chance(1.0 / 3) { mix.audioActivation = [60, 200, 400][audioRandom.below(3)] }
        // A break of one way, from a stream of its own, in a mix with faults in four: the side
        // that still hears its peer loses its path by consent while its call is connected.
        var breakRandom = SimRandom(seed: seed ^ 0x4252_4541_4B)
        if options.faults, !swarm.faults.isEmpty, breakRandom.chance(0.25) {
            let frame = firstDial + 60 + breakRandom.below(max(1, swarm.span / 2))
            steps.append(SimStep(frame: frame, move: .oneWayBreak(towardCallers: breakRandom.chance(0.5))))
        }
        // Paths that say they are disconnected, from a stream of their own, in a mix with faults in three.
        var disconnectRandom = SimRandom(seed: seed ^ 0x4449_5343_4F4E)
        if options.faults, !swarm.faults.isEmpty, disconnectRandom.chance(1.0 / 3) { mix.iceDisconnects = true }
        // Jobs held back as a preempted thread's, from a stream of their own, in a mix in two.
        var stragglerRandom = SimRandom(seed: seed ^ 0x5354_5241_47)
        if stragglerRandom.chance(0.5) {
            mix.stragglers = SimScheduler.Stragglers(chance: [0.02, 0.05, 0.15][stragglerRandom.below(3)], upTo: [8, 24, 64][stragglerRandom.below(3)])
        }
        // A node cut off for a while, from a stream of its own (mixes with faults).
        var cutRandom = SimRandom(seed: seed ^ 0x4F46_464C_494E)
        // Their steps join the plan last, with the mix kept calm around the calls that aim at a
        // rare order (``SimCalm``).
        if options.faults, !swarm.faults.isEmpty {
            edges += SimCutOffs.steps(&cutRandom, acting: swarm.actingNodes, nodes: nodeCount, after: firstDial, span: swarm.span, frames: options.frames,
                                      resumeWindow: mix.timers?.resumeWindow)
        }
        // The edges of a SIP call's start, from a stream of their own.
        var edgeRandom = SimRandom(seed: seed ^ 0x4544_4745_53)
        if mix.sip != nil, let sipEdges = SimSIPEdges.pick(&edgeRandom, faults: options.faults && !swarm.faults.isEmpty,
                                                          audioActivation: mix.audioActivation ?? 0, dtls: mix.dtls == true) {
            mix.sip?.edges = sipEdges
            edges += sipEdges.steps(&edgeRandom, actors: Array(0..<swarm.actingNodes), nodes: nodeCount, span: swarm.span,
                                    faults: options.faults && !swarm.faults.isEmpty)
        }
        steps = SimCalm.merge(steps, edges)
        return SimPlan(seed: seed, frames: options.frames, steps: steps, swarm: mix)
    }

    /// The plan a seed made before seeds picked their own mix (`--no-swarm`): every action and
    /// fault from one uniform mix.
    static func uniform(seed: UInt64, options: SimOptions) -> SimPlan {
        var random = SimRandom(seed: seed)
        let count = options.steps.lowerBound + random.below(options.steps.count)
        // The nodes, and the browser with the first node's call page open.
        let nodes = max(2, min(options.nodes, SimMove.names.count - 1)) + 1
        var steps: [SimStep] = []
        func node() -> Int { random.below(nodes) }
        func other(than first: Int) -> Int { (first + 1 + random.below(nodes - 1)) % nodes }
        // Calls first: a run that never dials shows nothing.
        let firstDial = random.below(40)
        let caller = node()
        steps.append(SimStep(frame: firstDial, move: .dial(from: caller, to: other(than: caller))))
        steps.append(SimStep(frame: firstDial + 5 + random.below(60), move: .answer(node: other(than: caller), pick: 0)))
        while steps.count < count {
            // A third of the steps come at the same instant as another: their messages cross.
            let frame = random.chance(0.3) ? steps[random.below(steps.count)].frame : random.below(options.frames)
            let pick = random.below(3)
            let roll = random.below(100)
            let at = node()
            let move: SimMove
            switch roll {
            case 0..<16: move = .dial(from: at, to: other(than: at))
            case 16..<32: move = .answer(node: at, pick: pick)
            case 32..<40: move = .hangUp(node: at, pick: pick)
            case 40..<48:
                move = .mute(node: at, pick: pick, on: random.chance(0.7))
            case 48..<56:
                // A hold is mostly resumed later: what a resume does with the rest of the
                // call's state (a mute, a conference) is where its bugs are.
                move = .hold(node: at, pick: pick, on: true)
                if random.chance(0.7) {
                    steps.append(SimStep(frame: frame + 5 + random.below(100), move: .hold(node: at, pick: pick, on: false)))
                }
            case 56..<60: move = .swap(node: at, pick: pick)
            case 60..<65: move = .merge(node: at, pick: pick, with: random.below(3))
            case 65..<68: move = .unmerge(node: at, pick: pick)
            case 68..<72: move = .dtmf(node: at, pick: pick, digits: String("0123456789*#".randomElement(using: &random)!))
            case 72..<75: move = .block(node: at, other: other(than: at), on: random.chance(0.6))
            case 75..<78: move = .doNotDisturb(node: at, on: random.chance(0.6))
            default:
                guard options.faults else { continue }
                let lasting = 10 + random.below(150)
                switch random.below(8) {
                case 0:
                    move = .network(loss: [0, 0.05, 0.1, 0.2, 0.3].randomElement(using: &random)!, delay: 1 + random.below(5),
                                    reordering: [0, 0.05, 0.2].randomElement(using: &random)!,
                                    duplication: [0, 0.02, 0.1].randomElement(using: &random)!)
                    steps.append(SimStep(frame: frame + lasting, move: .network(loss: 0, delay: 1, reordering: 0, duplication: 0)))
                case 1:
                    move = .partition(on: true)
                    steps.append(SimStep(frame: frame + lasting, move: .partition(on: false)))
                case 2:
                    move = .resetSignaling
                case 3:
                    move = .restartRelay
                case 4:
                    move = .addressChange(node: at)
                case 6:
                    move = .microphoneFails(node: at)
                case 5:
                    move = .crash(node: at)
                    steps.append(SimStep(frame: frame + lasting, move: .restart(node: at)))
                default:
                    move = .unreachable(node: at, on: true)
                    steps.append(SimStep(frame: frame + lasting, move: .unreachable(node: at, on: false)))
                }
            }
            steps.append(SimStep(frame: frame, move: move))
        }
        return SimPlan(seed: seed, frames: options.frames, steps: steps)
    }
}

/// The fixed defects a run can put back (``SimOptions/reintroducedBug``), to show that a sweep
/// finds each.
public enum SimulationBugs {
    public static let names = ["resume-unmutes", "mute-lost-before-media"]
}
