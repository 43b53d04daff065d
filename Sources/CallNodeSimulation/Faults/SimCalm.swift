/// A stretch of a run kept calm for a targeted edge's call. The mix's own chaos (a partition, a
/// block, do-not-disturb, an unreachable node, a crash, a hang-up of whichever call) would
/// otherwise foil the few calls that aim at a rare order: a stall the moment an answered call
/// waits for its audio, a signaling cut that outlasts the resume window, a host move while a
/// call secures. At the window's start what was left on for its nodes is lifted; within it, the
/// steps that would foil its call are left out, the mix's and other edges' alike. The edge's own
/// steps (its own partition, its own cut) stay.
struct SimCalm: Sendable, Equatable {
    var nodes: Set<Int>
    var frames: ClosedRange<Int>

    /// The plan's steps: the mix's and each edge's, less what would foil each window's call (an
    /// edge's own steps are kept from its own window, not from the others'), with what lifts the
    /// faults left on at each window's start.
    static func merge(_ mix: [SimStep], _ edges: [SimEdge]) -> [SimStep] {
        let windows = edges.compactMap(\.calm)
        var steps = keep(windows, in: mix)
        for (index, edge) in edges.enumerated() {
            steps += keep(edges.enumerated().compactMap { $0.offset == index ? nil : $0.element.calm }, in: edge.steps)
        }
        for window in windows {
            let start = window.frames.lowerBound
            steps.append(SimStep(frame: start, move: .partition(on: false)))
            for node in window.nodes.sorted() {
                // A host still without its network gets one (joining a network is a host move:
                // only where it is off).
                let offline = steps.filter { $0.frame < start }.sorted { $0.frame < $1.frame }.reduce(false) { off, step in
                    if case let .offline(at, on) = step.move, at == node { on } else { off }
                }
                if offline { steps.append(SimStep(frame: start, move: .offline(node: node, on: false))) }
                steps.append(SimStep(frame: start, move: .doNotDisturb(node: node, on: false)))
                steps.append(SimStep(frame: start, move: .unreachable(node: node, on: false)))
                for other in window.nodes.sorted() where other != node {
                    steps.append(SimStep(frame: start, move: .block(node: node, other: other, on: false)))
                }
            }
        }
        return steps
    }

    private static func keep(_ windows: [SimCalm], in steps: [SimStep]) -> [SimStep] {
        steps.filter { step in !windows.contains { $0.frames.contains(step.frame) && $0.foiled(by: step.move) } }
    }

    /// Whether `move` (the mix's, or another edge's) within the window would keep its call from
    /// doing what it aims at.
    func foiled(by move: SimMove) -> Bool {
        switch move {
        case .partition(on: true), .resetSignaling, .restartRelay, .oneWayBreak: true
        case let .network(loss, _, _, _): loss > 0
        case let .block(node, other, on): on && nodes.contains(node) && nodes.contains(other)
        case let .doNotDisturb(node, on), let .unreachable(node, on), let .offline(node, on): on && nodes.contains(node)
        case let .crash(node), let .addressChange(node): nodes.contains(node)
        case let .dialThen(node, _, _, then, _): then != .mute && nodes.contains(node)
        // A conference of the mix's may take its call in, or leave it on hold.
        case let .merge(node, _, _), let .unmerge(node, _), let .swap(node, _): nodes.contains(node)
        // A hang-up (or a transfer, a lost session) of the mix's that picks its call by place
        // would as often pick this one.
        case let .hangUp(node, _), let .transfer(node, _, _), let .sessionLost(node, _): nodes.contains(node) || node == SimMove.holder
        default: false
        }
    }
}

/// The steps of one targeted edge, and the window the rest of the plan keeps calm for its call.
struct SimEdge: Sendable {
    var steps: [SimStep]
    var calm: SimCalm?
}
