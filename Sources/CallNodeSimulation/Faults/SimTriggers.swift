@_spi(Simulation) import CallCore
@_spi(Simulation) import CallNode
import Foundation

/// A fault that waits for a call to reach a phase, then comes: a phase a few frames long (a DTLS
/// handshake's round trips) that a step at a planned frame would miss as often as it hits.
struct SimTrigger: Sendable {
    var node: Int
    /// The simulation's call.
    var call: UUID
    var then: SimMove.SecuringFault
    /// The last frame it waits until.
    var until: Int
}

extension Simulation {
    /// Waits for `node`'s call at `pick` to secure its media, then moves its host (``SimMove/movesWhileSecuring(node:pick:then:)``).
    func moveWhenSecuring(_ node: Int, _ pick: Int, then: SimMove.SecuringFault) {
        guard let call = chosen(pick, among: calls(of: node), { $0 }) else { return log("  (no call at \(name(node)))") }
        triggers.append(SimTrigger(node: node, call: call, then: then, until: frame + 100))
    }

    /// Fires the triggers whose call has reached its phase; drops those whose call ended or that
    /// waited too long.
    func fireTriggers() {
        var waiting: [SimTrigger] = []
        for trigger in triggers {
            let leg = inspection(trigger.node)?.legs[local(trigger.call, trigger.node)]
            guard let leg, frame <= trigger.until else {
                log("host: \(name(trigger.node))'s call \(callName(trigger.call)) never secured its media: its host stays")
                continue
            }
            guard case .securing = leg.phase else {
                waiting.append(trigger)
                continue
            }
            log("host: \(name(trigger.node)) moves to another network as \(callName(trigger.call)) secures its media")
            moveHost(trigger.node)
            switch trigger.then {
            case .none: break
            case .mediaCut:
                log("network: partitioned")
                setPartitioned(true)
            case .offline:
                log("host: \(name(trigger.node)) loses its network")
                setOffline(trigger.node, true)
            }
            if trigger.then != .none { disruptedAt = disruptedAt ?? frame }
        }
        triggers = waiting
    }
}
