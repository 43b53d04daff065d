@_spi(Simulation) import CallCore
@_spi(Simulation) import CallNode
import Foundation

/// Calls that close a loop of conferences: a and b with two calls, each side merging both,
/// or any ring of conferences joined by calls that carry audio.
///
/// Such a loop is a feedback path of gain one: what a conference plays goes round and comes
/// back to it a round trip later, added to the microphones again. It builds up until it clips;
/// which tone then stands above the others in each direction is decided by the loop's delay (a
/// comb's peaks), so a side may hear its own tone back and the peer's under it. That is what a
/// person would hear too (a howl, as two conference bridges dialled into each other twice),
/// not a one-way call: `audio-both-ways` does not judge a call while it is on such a loop.
/// Taking a call out of the conference, holding it or ending it breaks the loop, and the calls
/// are judged again from then on.
extension Simulation {
    /// Where a side's audio meets others': a node's conference, or the call alone on its node.
    private struct Room: Hashable {
        let node: Int
        let id: UUID
    }

    /// The calls (simulated ids) that are on a loop of conferences now.
    func callsOnConferenceLoops() -> Set<UUID> {
        var edges: [(call: UUID, ends: [Room])] = []
        for uuid in callOrder {
            let sides = calls[uuid]!.sides.keys.sorted()
            guard sides.count == 2 else { continue }
            let ends = sides.compactMap { node -> Room? in
                let here = local(uuid, node)
                guard let leg = inspection(node)?.legs[here], !leg.held, !leg.heldByPeer else { return nil }
                switch leg.phase {
                case .connected, .reconnecting: break
                default: return nil
                }
                let members = nodes[node].conference(of: here)
                return Room(node: node, id: members.min { $0.uuidString < $1.uuidString } ?? here)
            }
            if ends.count == 2 { edges.append((uuid, ends)) }
        }
        // A call is on a loop when its two rooms are still joined without it.
        var onLoop: Set<UUID> = []
        for (index, edge) in edges.enumerated() {
            var reached: Set<Room> = [edge.ends[0]]
            var frontier = [edge.ends[0]]
            while let room = frontier.popLast() {
                for (other, next) in edges.enumerated() where other != index && next.ends.contains(room) {
                    for end in next.ends where !reached.contains(end) {
                        reached.insert(end)
                        frontier.append(end)
                    }
                }
            }
            if reached.contains(edge.ends[1]) { onLoop.insert(edge.call) }
        }
        return onLoop
    }

    /// Notes in the trace when calls join or leave a loop of conferences.
    func noteConferenceLoops() -> Set<UUID> {
        let now = callsOnConferenceLoops()
        if now != conferenceLoops {
            let names = { (calls: Set<UUID>) in calls.map(self.callName).sorted().joined(separator: ", ") }
            if !now.isEmpty {
                log("audio: \(names(now)) form a loop of conferences (feedback: what they play is not judged)")
            } else {
                log("audio: the loop of conferences (\(names(conferenceLoops))) is broken")
            }
            conferenceLoops = now
        }
        return now
    }
}
