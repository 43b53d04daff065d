@_spi(Simulation) import CallCore
@_spi(Simulation) import CallNode
import CallNodeTestKit
import Foundation
import Locking

/// A node's host network as the node reads it, and the notices of its changes (the kernel's
/// routing messages, in a real node), each given as the simulation makes the change.
final class SimHost: Sendable {
    private let state: Locked<(snapshot: HostNetworkSnapshot, watchers: [AsyncStream<Void>.Continuation])>

    init(_ snapshot: HostNetworkSnapshot) { state = Locked((snapshot, [])) }

    var snapshot: HostNetworkSnapshot { state.withLock { $0.snapshot } }

    /// A stream of notices for a node (started again after a crash, a node asks again).
    func changes() -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream.makeStream(of: Void.self)
        state.withLock { $0.watchers.append(continuation) }
        return stream
    }

    func set(_ snapshot: HostNetworkSnapshot) {
        let watchers = state.withLock { s in
            s.snapshot = snapshot
            return s.watchers
        }
        for watcher in watchers { watcher.yield() }
    }
}

/// A node's host without a network for a while (a laptop's Wi-Fi gone, then back on another
/// network): it has no address, so its calls' paths carry nothing and a fresh round of ICE
/// cannot gather; its signaling is out of reach. Back, it has a new address.
extension Simulation {
    /// The node's host moves to another network: a new address and default route.
    func moveHost(_ node: Int) {
        moves += 1
        hosts[node].set(HostNetworkSnapshot(addresses: ["198.51.\(100 + moves % 100).\(10 + node)"], defaultRoutes: ["eth0 via 198.51.\(100 + moves % 100).1"]))
    }

    func setOffline(_ node: Int, _ on: Bool) {
        guard on != faults.offline.contains(node) else { return }
        if on { faults.offline.insert(node) } else { faults.offline.remove(node) }
        if on { hosts[node].set(HostNetworkSnapshot(addresses: [], defaultRoutes: [])) } else { moveHost(node) }
        world.network.setOffline(paths[node].withLock { $0.map(\.address) }, on)
        if on || !faults.signalingCut.contains(node) { setSignalingCut(node, on) }
    }

    /// The node's signaling alone cut off, or back (its media goes on).
    func cutSignaling(_ node: Int, _ on: Bool) {
        guard on != faults.signalingCut.contains(node) else { return }
        if on { faults.signalingCut.insert(node) } else { faults.signalingCut.remove(node) }
        // Cut off while its host has no network either: it comes back with the network.
        if !on, faults.offline.contains(node) { return }
        setSignalingCut(node, on)
    }

    /// Whether the node's signaling can be reached: its address is not out of reach
    /// (``SimMove/unreachable(node:on:)``), its host has a network, and its signaling is not cut.
    func signalingReachable(_ node: Int) -> Bool {
        !faults.unreachable.contains(node) && !faults.offline.contains(node) && !faults.signalingCut.contains(node)
    }

    /// Nothing reaches the node and it reaches nothing: its connections (and its relay's) drop.
    /// A crashed node stays cut off until it starts again.
    private func setSignalingCut(_ node: Int, _ on: Bool) {
        let reachable = signalingReachable(node)
        if speaksSIP { world.sip.setReachable(sipURI(node), reachable) }
        guard !down.contains(node) else { return }
        let fingerprint = nodes[node].identity.fingerprint
        if let address = nodes[node].listenAddress { world.signaling.setReachable(address, reachable) }
        world.signaling.setSilenced(fingerprint, on)
        relay.setSilenced(fingerprint, on)
        if on { world.signaling.dropConnections(of: fingerprint) }
    }

    /// A dial, and what follows it a seeded number of jobs after the call is placed.
    func dialThen(_ move: SimMove) {
        guard case let .dialThen(from, to, sip, then, yields) = move else { return }
        let node = nodes[from], target: CallTarget = sip ? .sip(sipURI(to)) : .contact(name(to)), at = frame
        // A node's call: the reset as its invitation leaves (it invites only for the few jobs
        // the callee takes to say it rings: a count of jobs misses that as often as not).
        let asInvited = then == .cutSignaling && !sip, identity = node.identity.fingerprint
        if asInvited {
            world.signaling.resetAfterNextFrame(of: identity)
            resetsAsInvited.append(identity)
        }
        spawn(from, "dials \(name(to))\(sip ? " over SIP" : "")") {
            let uuid = try await node.call(target)
            self.dialled(uuid, at: at)
            // A task of its own, as every action's (a yield in this one, back from the node's
            // actor, would come back to the scheduler from another thread).
            Task {
                for _ in 0..<yields { await Task.yield() }
                if asInvited { return }  // the frame's end takes it back if nothing went
                switch then {
                case .mute:
                    do { try await node.setMuted(uuid, true) } catch {
                        self.log("\(self.name(from)) mutes \(self.callName(uuid)): refused (\(self.scrubbed("\(error)")))")
                    }
                case .cutSignaling: self.world.signaling.dropConnections()
                case .moveHost: self.moveHost(from)
                }
            }
        }
    }
}

/// A host move that waits for a call to secure its media, then comes: a phase a few frames long
/// (a DTLS handshake's round trips) that a step at a planned frame would miss as often as it hits.
struct SimSecuringMove: Sendable {
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
        securingMoves.append(SimSecuringMove(node: node, call: call, then: then, until: frame + 100))
    }

    /// Moves the hosts whose call now secures its media; drops the moves whose call ended or that
    /// waited too long.
    func moveHostsOfCallsSecuring() {
        var waiting: [SimSecuringMove] = []
        for move in securingMoves {
            let leg = inspection(move.node)?.legs[local(move.call, move.node)]
            guard let leg, frame <= move.until else {
                log("host: \(name(move.node))'s call \(callName(move.call)) never secured its media: its host stays")
                continue
            }
            guard case .securing = leg.phase else {
                waiting.append(move)
                continue
            }
            log("host: \(name(move.node)) moves to another network as \(callName(move.call)) secures its media")
            moveHost(move.node)
            switch move.then {
            case .none: break
            case .mediaCut:
                log("network: partitioned")
                setPartitioned(true)
            case .offline:
                log("host: \(name(move.node)) loses its network")
                setOffline(move.node, true)
            }
            if move.then != .none { disruptedAt = disruptedAt ?? frame }
        }
        securingMoves = waiting
    }
}
