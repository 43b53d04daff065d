@_spi(Simulation) import CallNode
import CallNodeTestKit
import Foundation

/// SIP in a run: the nodes' addresses on the in-memory SIP network, the SIP steps, and what the
/// trace says of the wire at the end (only in seeds whose mix has SIP calls).
extension Simulation {
    /// Whether the nodes listen for SIP (the seed's mix has SIP calls).
    var speaksSIP: Bool { plan.swarm?.sip != nil }

    /// How the in-memory SIP network carries the run's messages.
    var sipConditions: InMemorySIPNetwork.Conditions {
        var conditions = InMemorySIPNetwork.Conditions()
        if plan.swarm?.sip?.repeatedProvisionals == true { conditions.repeatedProvisionals = 0.5 }
        plan.swarm?.sip?.peer?.apply(to: &conditions)
        return conditions
    }

    /// A node's SIP address on the in-memory SIP network.
    func sipURI(_ node: Int) -> String { "sip:callnode@\(name(node)).sim:5060" }

    /// The node a SIP address names (nil: none of the nodes).
    func node(ofSIP uri: String) -> Int? {
        let host = uri.split(separator: "@").last.map { String($0.prefix { $0 != "." }) }
        return (0..<nodeCount).first { name($0) == host }
    }

    /// A SIP step: a call to another node's SIP address, a transfer, a lost session refresh.
    /// `pick` names a call of any kind (a transfer of a node without SIP calls is refused: that
    /// too is a case).
    func performSIP(_ move: SimMove, pick: (Int, Int) -> UUID?) async {
        switch move {
        case let .dialSIP(from, to):
            let node = nodes[from], uri = sipURI(to), at = frame
            spawn(from, "dials \(name(to)) over SIP") { self.dialled(try await node.call(.sip(uri)), at: at) }
        case let .dialPhone(from, to, phone):
            let node = nodes[from], uri = sipURI(to).replacingOccurrences(of: "sip:callnode@", with: "sip:\(phone)@"), at = frame
            spawn(from, "calls the phone \(phone) at \(name(to))'s host") {
                let uuid = try await node.call(.sip(uri))
                self.dialled(uuid, at: at)
                // Its answer cannot be taken: the call fails, and says why.
                if phone == InMemorySIPNetwork.Phone.answersAnotherCodec.rawValue { self.answeredUntakeably.insert(uuid) }
            }
        case let .abandonSIP(from, to):
            let node = nodes[from], uri = sipURI(to)
            spawn(from, "dials \(name(to)) over SIP and hangs up") { try await node.hangUp(try await node.call(.sip(uri))) }
        case let .transfer(at, index, to):
            let sip = await sipCalls(of: at)
            guard let uuid = sip.isEmpty ? pick(at, index) : chosen(index, among: sip, { self.canonical($0.0) })?.0 else {
                return log("  (no call at \(name(at)))")
            }
            if calls[canonical(uuid)]?.peer(of: at) == to { return log("  (\(name(to)) is the other party of that call)") }
            let node = nodes[at], uri = sipURI(to)
            spawn(at, "transfers \(callName(uuid)) to \(name(to))") { try await node.transfer(uuid, to: uri) }
        case let .sessionLost(at, index):
            guard let (uuid, dialog) = chosen(index, among: await sipCalls(of: at), { self.canonical($0.0) }) else {
                return log("  (no SIP call at \(name(at)))")
            }
            if !world.sip.expireSession(at: sipURI(at), call: dialog) { log("  (call \(callName(uuid))'s session is not up)") }
        case let .sipPeer(at, index, kind):
            guard let (uuid, dialog) = chosen(index, among: await sipCalls(of: at), { self.canonical($0.0) }) else {
                return log("  (no SIP call at \(name(at)))")
            }
            let request: InMemorySIPNetwork.PeerRequest = switch kind {
            case .digit: .info(digit: "5")
            case .refresh: .refresh
            case .fax: .reoffer(sdp: InMemorySIPNetwork.faxOffer)
            }
            if !world.sip.peerSends(request, to: sipURI(at), call: dialog) { log("  (call \(callName(uuid)) has no dialog with a peer)") }
        default:
            break
        }
    }

    /// The node's live SIP calls (its ID and its stack's for each), oldest first.
    private func sipCalls(of node: Int) async -> [(UUID, Int)] {
        var found: [(UUID, Int)] = []
        for call in calls(of: node) {
            let uuid = local(call, node)
            if let dialog = await nodes[node].sipDialog(of: uuid) { found.append((uuid, dialog)) }
        }
        return found
    }

    /// Waits for the peer's BYE or CANCEL of the action's call to reach its node (``SimMove/asPeerEnds(_:held:)``).
    func watchForPeerEnd(_ action: SimMove, held: Bool) async {
        guard let node = action.actingNode, let index = action.pick,
              let call = chosen(index, among: calls(of: node), { $0 }) else { return log("  (no call to act on)") }
        guard let dialog = await nodes[node].sipDialog(of: local(call, node)),
              let probe = await nodes[node].inputProbe(of: local(call, node)) else { return log("  (\(callName(call)) is not a SIP call)") }
        peerEndWatches.append(SimPeerEndWatch(action: action, node: node, call: call, dialog: dialog, probe: probe, held: held, until: frame + 150))
    }

    /// Before a tick that brings a watched call's node its peer's end: performs the action and
    /// runs everything it starts until the run is quiet (held: all but the leg's turn for it,
    /// which the frame lets go once the end has come in). Drops the watches whose call ended
    /// otherwise, or that waited 3 s.
    func actAsPeerEnds() async {
        guard !peerEndWatches.isEmpty else { return }
        var waiting: [SimPeerEndWatch] = []
        for watch in peerEndWatches {
            guard frame <= watch.until, !down.contains(watch.node), calls(of: watch.node).contains(watch.call) else {
                log("\(watch.action)  (no peer's end reached \(name(watch.node)) while its call stood)")
                continue
            }
            guard world.sip.endArrives(at: sipURI(watch.node), call: watch.dialog) else {
                waiting.append(watch)
                continue
            }
            log("SIP: the peer's end of \(callName(watch.call)) reaches \(name(watch.node)) now")
            // Held: the leg's turn for the action waits from the moment the action is queued (a
            // thread preempted there) until the end has come in. A transfer queues nothing for
            // the leg (the node hands it to the dialect): its own task waits instead, until the
            // dialog hands the end to the leg, whose turn then waits for it.
            let scheduler = self.scheduler
            let transfer = if case .transfer = watch.action { true } else { false }
            if watch.held {
                pinNextAction = transfer
                watch.probe.beforeNextInput {
                    if transfer { scheduler.releasePinned() }
                    scheduler.pinNextJob()
                }
            }
            await perform(watch.action)
            await scheduler.quiescence()
            pinNextAction = false
            // The action's input is queued by now; a transfer's hook waits for the end's.
            if !transfer {
                watch.probe.beforeNextInput {}
                scheduler.pinNextJob(false)
            }
        }
        peerEndWatches = waiting
    }

    /// The wire's story in one line at the end of a SIP seed's trace.
    func logSIPSummary() {
        guard speaksSIP else { return }
        let sip = world.sip.counts
        log("sip: \(sip.dialogs) dialogs, \(sip.invites) INVITE transactions, \(sip.crossings) crossed one of the peer's")
    }
}

/// An action waiting for the peer's end of its call (``SimMove/asPeerEnds(_:held:)``).
struct SimPeerEndWatch: Sendable {
    var action: SimMove
    var node: Int
    /// The simulation's call, and its dialog on the node's stack.
    var call: UUID
    var dialog: Int
    /// The queue of the call's leg, and whether its turn for the action is held back.
    var probe: InputProbe
    var held: Bool
    /// The last frame it waits until.
    var until: Int
}
