/// A node cut off for a while (in a mix with faults, from a stream of its own), each one time
/// in four:
///
/// - its host without a network (``SimMove/offline(node:on:)``): its calls' fresh rounds of ICE
///   cannot gather and its signaling goes; one time in two the media is cut a moment before,
///   so that the calls are reconnecting when their restarts fail;
/// - its signaling alone cut off (``SimMove/signalingCut(node:on:)``), for longer than the
///   resume window where the timers are short (the call gives up while its media runs), ending
///   before the activity does; one time in two with the media cut for longer still (the
///   signaling comes back while the call reconnects). The mix keeps calm around its call
///   (``SimCalm``) from its dial to the cut's end.
enum SimCutOffs {
    static func steps(_ random: inout SimRandom, acting: Int, nodes: Int, after firstDial: Int, span: Int, frames: Int,
                      resumeWindow: Int?) -> [SimEdge] {
        var edges: [SimEdge] = []
        var steps: [SimStep] = []
        if random.chance(0.25) {
            let node = random.below(acting), from = firstDial + 20 + random.below(span)
            steps.append(SimStep(frame: from, move: .offline(node: node, on: true)))
            steps.append(SimStep(frame: from + 20 + random.below(280), move: .offline(node: node, on: false)))
            if random.chance(0.5) {
                // Media lost for over a second (a stall) before the host goes.
                let cut = max(0, from - 60 - random.below(30))
                steps.append(SimStep(frame: cut, move: .partition(on: true)))
                steps.append(SimStep(frame: from + 10 + random.below(40), move: .partition(on: false)))
            }
            edges.append(SimEdge(steps: steps))
            steps = []
        }
        if random.chance(0.25) {
            let node = random.below(acting), other = (node + 1 + random.below(nodes - 1)) % nodes
            let lasting = (resumeWindow.map { $0 / 20 } ?? 30) + 10 + random.below(60)
            let from = firstDial + 60 + random.below(max(1, frames - firstDial - 70 - lasting))
            // A call of its own, up when the cut comes.
            let dial = from - 40 - random.below(20)
            let (caller, callee) = random.chance(0.5) ? (node, other) : (other, node)
            steps.append(SimStep(frame: dial, move: .dial(from: caller, to: callee)))
            steps.append(SimStep(frame: dial + 8 + random.below(10), move: .answer(node: callee, pick: SimMove.dialled(at: dial))))
            steps.append(SimStep(frame: from, move: .signalingCut(node: node, on: true)))
            steps.append(SimStep(frame: from + lasting, move: .signalingCut(node: node, on: false)))
            if random.chance(0.5) {
                steps.append(SimStep(frame: from + random.below(10), move: .partition(on: true)))
                steps.append(SimStep(frame: from + lasting + 30 + random.below(50), move: .partition(on: false)))
            }
            edges.append(SimEdge(steps: steps, calm: SimCalm(nodes: [caller, callee], frames: dial...(from + lasting))))
        }
        return edges
    }
}
