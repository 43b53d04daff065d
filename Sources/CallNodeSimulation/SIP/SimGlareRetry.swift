@_spi(Simulation) import CallNode
import Foundation
import SIPDialog

/// A hang-up whose BYE lands as the other side's glare retry fires
/// (``SimMove/hangUpAsPeerRetries(node:pick:)``): the retry's timer and the BYE reach that
/// side's dialog in one tick, the timer's thread a moment late — the order the dialog's guard is
/// there for (no re-INVITE once the dialog ends).
struct SimGlareWatch: Sendable {
    /// The side that hangs up, and the side whose retry waits.
    var node: Int
    var peer: Int
    /// The simulation's call.
    var call: UUID
    /// The frame in which the peer's retry fires, once known.
    var firesAt: Int?
    /// The last frame it waits until.
    var until: Int
}

extension Simulation {
    /// Frames before the retry that the hang-up comes (its BYE held at the peer meanwhile: the
    /// wire takes one to three ticks).
    static let glareLead = 4

    func watchGlare(_ node: Int, _ index: Int) {
        guard let call = chosen(index, among: calls(of: node), { $0 }), let peer = calls[call]?.peer(of: node) else {
            return log("  (no call at \(name(node)))")
        }
        glareWatches.append(SimGlareWatch(node: node, peer: peer, call: call, until: frame + 150))
    }

    /// Before a tick: hangs up the watched calls whose peer's glare retry fires in
    /// ``glareLead`` frames (the peer's messages wait until then), and in the tick it fires lets
    /// the BYE in and holds the retry's delivery back until the BYE has been taken.
    func landByesAsGlareRetries() async {
        guard !glareWatches.isEmpty else { return }
        var waiting: [SimGlareWatch] = []
        let tick = world.media.frameDuration
        for var watch in glareWatches {
            let hungUp = watch.firesAt.map { frame > $0 - Self.glareLead } ?? false
            guard !down.contains(watch.node), !down.contains(watch.peer), hungUp || calls(of: watch.node).contains(watch.call) else {
                log("SIP: \(callName(watch.call)) ended before \(name(watch.peer))'s glare retry")
                if hungUp { world.sip.setReachable(sipURI(watch.peer), signalingReachable(watch.peer)) }
                continue
            }
            guard let firesAt = watch.firesAt else {
                // Due when this frame's tick, or a later one, reaches it.
                let timer = await nodes[watch.peer].sipTimer(.glareRetry, of: local(watch.call, watch.peer))
                guard let due = timer?.due else {
                    if frame < watch.until { waiting.append(watch) } else { log("SIP: no glare retry waited at \(name(watch.peer)) on \(callName(watch.call))") }
                    continue
                }
                let ahead = Int(((due - world.timers.now.offset) / tick).rounded(.up))
                guard ahead > Self.glareLead, frame + ahead < plan.frames else {
                    log("SIP: \(name(watch.peer))'s glare retry on \(callName(watch.call)) is too close (or past the run's steps) to land a BYE on")
                    continue
                }
                watch.firesAt = frame + ahead - 1
                waiting.append(watch)
                continue
            }
            if frame == firesAt - Self.glareLead {
                log("SIP: \(name(watch.node)) hangs up \(callName(watch.call)); its BYE waits to reach \(name(watch.peer)) as its glare retry fires")
                world.sip.setReachable(sipURI(watch.peer), false)
                let node = nodes[watch.node], uuid = local(watch.call, watch.node)
                spawn(watch.node, "hangs up \(callName(watch.call))") { try await node.hangUp(uuid) }
                waiting.append(watch)
            } else if frame == firesAt {
                let scheduler = self.scheduler
                if let timer = await nodes[watch.peer].sipTimer(.glareRetry, of: local(watch.call, watch.peer)) {
                    timer.beforeFiring { scheduler.pinNextJob() }
                }
                world.sip.setReachable(sipURI(watch.peer), signalingReachable(watch.peer))
            } else {
                waiting.append(watch)
            }
        }
        glareWatches = waiting
    }

    /// The run's steps are over: a BYE still waiting for its peer's retry goes now.
    func endGlareWatches() {
        for watch in glareWatches where watch.firesAt.map({ frame > $0 - Self.glareLead }) == true {
            world.sip.setReachable(sipURI(watch.peer), signalingReachable(watch.peer))
        }
        glareWatches = []
    }
}
