import CallNodeTestKit

/// The edges of a SIP call's start that the other SIP steps leave out (in a SIP seed in two,
/// from a stream of its own), each a call of its own:
///
/// - calls to phones that are not nodes (``InMemorySIPNetwork/Phone``): one that answers
///   without ringing (the caller's 200 comes while it still waits for a sign of life), one
///   that takes no SRTP and refuses the encrypted offer with 488 at once, or after ringing
///   (the caller offers plain RTP in a new INVITE);
/// - early media at its edges: the callee asks for it again while it runs, either side mutes
///   while it runs, the callee answers a moment after its greeting starts (while the caller's
///   audio session may still be waking), the callee answers as the caller's CANCEL reaches it,
///   and, in mixes with faults, the media stops a second before the answer (the stall comes
///   while the answered call waits for its audio);
/// - what follows a dial at once, while the call dials or invites: its user mutes it, every
///   signaling connection resets (mixes with faults), its host moves to another network;
/// - in DTLS seeds, a host that moves once its answered call secures its media (in mixes with
///   faults, two times in three, with the media cut, or the host without a network, for three
///   or four seconds from then).
public struct SimSIPEdges: Sendable, Equatable, Codable, CustomStringConvertible {
    public enum EarlyMedia: String, Sendable, Codable, CaseIterable {
        /// The callee asks for early media again while its greeting runs (refused: it runs).
        case greetAgain = "greet-again"
        /// Both sides mute while the greeting runs, and unmute before the answer.
        case muteDuringGreeting = "mute-during-greeting"
        /// The callee answers a moment after its greeting starts.
        case answerAsAudioWakes = "answer-as-audio-wakes"
        /// The media stops a second before the answer, for a second or two (mixes with faults).
        case stallAtAnswer = "stall-at-answer"
        /// The caller hangs up while the greeting runs, and the callee answers as the CANCEL
        /// reaches it, its leg's turn held back meanwhile: the leg takes the answer with the
        /// dialog ended.
        case answerAsCallerHangsUp = "answer-as-caller-hangs-up"
    }

    /// The phones called (``InMemorySIPNetwork/Phone``'s names).
    public var phones: [String]
    public var earlyMedia: [EarlyMedia]
    /// What follows a dial at once (each on a node's call and a SIP one).
    public var afterDialling: [SimMove.FollowUp]
    /// Whether a host moves as its answered call secures its media (DTLS seeds).
    public var moveWhileSecuring: Bool

    /// `audioActivation`: the seed's wait for an audio session (a stall at the answer falls in
    /// it only when it is long); `dtls`: whether its calls secure with a handshake.
    static func pick(_ random: inout SimRandom, faults: Bool, audioActivation: Int, dtls: Bool) -> SimSIPEdges? {
        guard random.chance(0.5) else { return nil }
        let phones = InMemorySIPNetwork.Phone.allCases.filter { _ in random.chance(0.4) }.map(\.rawValue)
        let early = EarlyMedia.allCases.filter { random.chance(0.4) && ($0 != .stallAtAnswer || faults && audioActivation >= 200) }
        let follow: [SimMove.FollowUp] = [.mute, .cutSignaling, .moveHost].filter { random.chance(0.4) && ($0 != .cutSignaling || faults) }
        return SimSIPEdges(phones: phones, earlyMedia: early, afterDialling: follow, moveWhileSecuring: dtls && random.chance(0.5))
    }

    /// Each edge's steps, with the window the rest of the plan keeps calm for its call
    /// (``SimCalm``): a stall at the answer's, a move while securing's with its fault.
    func steps(_ random: inout SimRandom, actors: [Int], nodes: Int, span: Int, faults: Bool) -> [SimEdge] {
        var edges: [SimEdge] = []
        func parties() -> (caller: Int, callee: Int, frame: Int) {
            let caller = actors[random.below(actors.count)]
            return (caller, (caller + 1 + random.below(nodes - 1)) % nodes, random.below(span))
        }
        for phone in phones {
            let (caller, callee, frame) = parties()
            edges.append(SimEdge(steps: [
                SimStep(frame: frame, move: .dialPhone(from: caller, to: callee, phone: phone)),
                SimStep(frame: frame + 10 + random.below(40), move: .answer(node: callee, pick: SimMove.dialled(at: frame))),
            ]))
        }
        for edge in earlyMedia {
            let (caller, callee, frame) = parties()
            let greeting = frame + 5 + random.below(5), pick = SimMove.dialled(at: frame)
            var steps: [SimStep] = [], calm: SimCalm?
            steps.append(SimStep(frame: frame, move: .dialSIP(from: caller, to: callee)))
            steps.append(SimStep(frame: greeting, move: .greet(node: callee, pick: pick)))
            let answer: Int
            switch edge {
            case .greetAgain:
                answer = greeting + 90 + random.below(60)
                steps.append(SimStep(frame: greeting + 25 + random.below(40), move: .greet(node: callee, pick: pick)))
            case .muteDuringGreeting:
                answer = greeting + 90 + random.below(60)
                for node in [caller, callee] {
                    steps.append(SimStep(frame: greeting + 20 + random.below(40), move: .mute(node: node, pick: pick, on: true)))
                    steps.append(SimStep(frame: greeting + 70 + random.below(15), move: .mute(node: node, pick: pick, on: false)))
                }
            case .answerAsAudioWakes:
                answer = greeting + 2 + random.below(25)
            case .answerAsCallerHangsUp:
                let hangUp = greeting + 20 + random.below(40)
                steps.append(SimStep(frame: hangUp, move: .hangUp(node: caller, pick: pick)))
                steps.append(SimStep(frame: hangUp, move: .asPeerEnds(.answer(node: callee, pick: pick), held: true)))
                edges.append(SimEdge(steps: steps))
                continue
            case .stallAtAnswer:
                // Media is judged stalled after a second without it (50 frames): it stops so
                // that the stall comes in the frames after the answer.
                answer = greeting + 80 + random.below(40)
                let stop = answer - 48 + random.below(14)
                steps.append(SimStep(frame: stop, move: .partition(on: true)))
                steps.append(SimStep(frame: stop + 60 + random.below(40), move: .partition(on: false)))
                calm = SimCalm(nodes: [caller, callee], frames: frame...(answer + 20))
            }
            steps.append(SimStep(frame: answer, move: .answer(node: callee, pick: pick)))
            edges.append(SimEdge(steps: steps, calm: calm))
        }
        for then in afterDialling {
            for sip in [false, true] {
                let (caller, callee, frame) = parties()
                // A mute soon after, while the call still dials (its wire comes up within a few
                // jobs); a host move in the call's first moments (a node's call dials for 3
                // jobs, a SIP call's INVITE waits for the end of its candidates); a node's
                // call's signaling reset as its invitation leaves (the jobs: how long that may
                // take to come).
                let yields = then == .mute ? random.below(6) : sip ? random.below(40) : random.below(12)
                edges.append(SimEdge(steps: [
                    SimStep(frame: frame, move: .dialThen(from: caller, to: callee, sip: sip, then: then, yields: yields)),
                    SimStep(frame: frame + 10 + random.below(40), move: .answer(node: callee, pick: SimMove.dialled(at: frame))),
                ]))
            }
        }
        if moveWhileSecuring {
            let (caller, callee, frame) = parties()
            let answer = frame + 10 + random.below(40)
            var steps = [SimStep(frame: frame, move: .dial(from: caller, to: callee)),
                         SimStep(frame: answer, move: .answer(node: callee, pick: SimMove.dialled(at: frame)))]
            var calm: SimCalm?
            // The move waits for the call to secure (its handshake's round trips), then comes.
            let then: SimMove.SecuringFault = faults ? (random.chance(0.5) ? .mediaCut : .offline) : .none
            let mover = random.chance(0.5) ? caller : callee, pick = SimMove.dialled(at: frame)
            steps.append(SimStep(frame: answer, move: .movesWhileSecuring(node: mover, pick: pick, then: then)))
            if then != .none {
                // For longer than a round of checks: the fresh round finds no pair while the call
                // secures (its round's timer fires); with the host's signaling gone too, no fresh
                // round can follow and the one under way fails.
                let healed = answer + 150 + random.below(50)
                steps.append(SimStep(frame: healed, move: then == .mediaCut ? .partition(on: false) : .offline(node: mover, on: false)))
                calm = SimCalm(nodes: [caller, callee], frames: frame...healed)
            }
            edges.append(SimEdge(steps: steps, calm: calm))
        }
        return edges
    }

    public var description: String {
        "phones: " + (phones.isEmpty ? "none" : phones.joined(separator: " ")) + "; early media: "
            + (earlyMedia.isEmpty ? "none" : earlyMedia.map(\.rawValue).joined(separator: " "))
            + (afterDialling.isEmpty ? "" : "; after dialling: " + afterDialling.map(\.rawValue).joined(separator: " "))
            + (moveWhileSecuring ? "; a host moves as its call secures" : "")
    }
}
