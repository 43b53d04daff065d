@_spi(Simulation) import CallCore
@_spi(Simulation) import CallNode
import CallNodeTestKit
import Calls
import Foundation

/// What the nodes report and hold, read after every step: each node's events (the trace and the
/// calls' sides, page calls paired by their wire ID), what each side heard, each node's inside.
extension Simulation {
    // MARK: Observing

    /// Reads what each node reported since the last step, then checks every invariant.
    func observe() async {
        for index in 0..<nodes.count {
            let events = world.events(name(index))
            while cursors[index] < events.count {
                let event = events[cursors[index]]
                cursors[index] += 1
                await handle(event, at: index)
            }
        }
        inspections = []
        for (index, node) in nodes.enumerated() { inspections.append(down.contains(index) ? nil : await node.inspect()) }
        readProbes()
        await checkStep()
    }

    /// A dial of the plan's, at `frame`, placed the call its node knows as `local`: a later step
    /// can name it (``SimMove/dialled(at:)``).
    func dialled(_ local: UUID, at frame: Int) {
        dials[frame, default: []].append(local)
    }

    /// The item a step's pick names: a place among them (oldest first, wrapping; negative from
    /// the newest), or (``SimMove/dialled(at:)``) the one whose call a dial at that frame placed.
    func chosen<Item>(_ pick: Int, among items: [Item], _ call: (Item) -> UUID) -> Item? {
        guard !items.isEmpty else { return nil }
        guard let frame = SimMove.dialFrame(of: pick) else { return items[Self.place(pick, items.count)] }
        let placed = Set((dials[frame] ?? []).map(canonical))
        return items.first { placed.contains(canonical(call($0))) }
    }

    /// `text` with every call ID a node quotes (the first eight hex digits of its own ID for the
    /// call, as refusals name a call) put as the simulation's name for the call: the nodes' IDs
    /// are random, and a seed's trace replays byte for byte.
    func scrubbed(_ text: String) -> String {
        var text = text
        for local in aliases.keys {
            for quoted in [local.uuidString, String(local.uuidString.prefix(8))] where text.contains(quoted) {
                text = text.replacingOccurrences(of: quoted, with: callName(local))
            }
        }
        return text
    }

    /// A side of a call: `local` is the node's ID for it; a page call's two sides have two
    /// IDs, paired here (one page call at a time: the page carries one).
    /// A side of a call: `local` is the node's ID for it. The browser's calls have IDs of their
    /// own: each is the call the node knows by its wire ID.
    /// A SIP call's callee side is the caller's call (`as`).
    private func register(_ local: UUID, at node: Int, caller: Bool, as paired: UUID? = nil) -> UUID {
        let call = paired ?? (node == pageIndex ? (page?.wire(of: local) ?? local) : local)
        if calls[call] == nil {
            calls[call] = SimCall(uuid: call, number: callOrder.count + 1)
            callOrder.append(call)
        }
        if caller { calls[call]!.caller = node } else { calls[call]!.callee = node }
        if calls[call]!.sides[node] == nil { calls[call]!.sides[node] = SimCall.Side(uuid: local) }
        aliases[local] = call
        return call
    }

    private func handle(_ event: NodeEvent, at node: Int) async {
        let who = name(node)
        // A page has no identity of its own: the node names every page by one fingerprint.
        let isPage = { (from: Fingerprint) in from == WebSignalingServer.pagePeer || from == self.nodes[self.pageIndex].identity.fingerprint }
        // A SIP caller is named by its address, as the node names it: a fingerprint of the handle.
        let sipNode = { (from: Fingerprint) in
            self.speaksSIP ? (0..<self.nodeCount).first { Fingerprint(certificateDER: Array(self.sipURI($0).utf8)) == from } : nil
        }
        switch event {
        case let .dialing(uuid, target):
            let callee: Int? = switch target {
            case let .contact(contact): SimMove.names.firstIndex(of: contact)
            case .webPage: pageIndex
            case let .sip(uri), let .handle(uri): self.node(ofSIP: uri)
            default: node == pageIndex ? 0 : nil
            }
            let call = register(uuid, at: node, caller: true)
            calls[call]!.intendedCallee = callee
            log("\(who): call \(callName(call)) dialing \(callee.map(name) ?? "?")")
        case let .incoming(uuid, from, _, _):
            var caller = node == pageIndex ? 0 : isPage(from) ? pageIndex : nodes.firstIndex { $0.identity.fingerprint == from }
            var paired: UUID?
            if caller == nil, let (index, call) = await sipCaller(of: uuid, at: node) {
                caller = index
                paired = register(call, at: index, caller: true)
            }
            caller = caller ?? sipNode(from)
            let call = register(uuid, at: node, caller: false, as: paired)
            log("\(who): call \(callName(call)) incoming from \(caller.map(name) ?? "?")")
        case let .connected(uuid, _):
            let call = canonical(uuid)
            guard calls[call]?.sides[node] != nil else { return log("\(who): connected, a call it never announced") }
            calls[call]!.sides[node]!.connectedAt = frame
            log("\(who): call \(callName(call)) connected")
            let probe = ToneProbe(frequencies: Array(frequencies.prefix(nodes.count)))
            calls[call]!.sides[node]!.probe = probe
            let target = nodes[node]
            Task {
                do { try await target.record(uuid, into: probe, mixingSent: false) } catch { self.log("\(who): cannot listen to call \(self.callName(call)): \(error)") }
            }
        case let .ended(uuid, reason, detail, _):
            let call = canonical(uuid)
            guard calls[call]?.sides[node] != nil else { return log("\(who): an unknown call ended (\(reason.rawValue))") }
            calls[call]!.sides[node]!.endCount += 1
            let count = calls[call]!.sides[node]!.endCount
            if count > 1 {
                fail(.endsOnce, "call \(callName(call)) ended \(count) times on \(who): first \(calls[call]!.sides[node]!.ended!.rawValue), then \(reason.rawValue)")
            } else {
                calls[call]!.sides[node]!.ended = reason
                calls[call]!.sides[node]!.endedAt = frame
                calls[call]!.sides[node]!.endDetail = detail
            }
            log("\(who): call \(callName(call)) ended (\(reason.rawValue)\(detail.map { ": \($0)" } ?? ""))")
            let untakeable = answeredUntakeably.contains(uuid) && detail?.hasPrefix("SDP negotiation failed") == true
            if reason == .failed, disruptedAt == nil, !untakeable {
                fail(.failsOnlyForAFault, "call \(callName(call)) failed on \(who) though nothing in the run could fail it: \(detail ?? "no detail")")
            }
        case let .rejected(uuid, reason): log("\(who): call \(callName(uuid)) rejected (\(reason.rawValue))")
        case let .refused(_, from, reason):
            let caller = isPage(from) ? pageIndex : nodes.firstIndex { $0.identity.fingerprint == from } ?? sipNode(from)
            log("\(who): refused a call from \(caller.map(name) ?? "?") (\(reason.rawValue))")
        case let .ringing(uuid, _): log("\(who): call \(callName(uuid)) rings at the callee")
        case let .remoteHold(uuid, on): log("\(who): call \(callName(uuid)) \(on ? "held" : "resumed") by the peer")
        case let .dtmf(uuid, digit): log("\(who): call \(callName(uuid)) DTMF \(digit)")
        case let .connectionLost(uuid): log("\(who): call \(callName(uuid)) connection lost")
        case let .connectionRestored(uuid): log("\(who): call \(callName(uuid)) connection restored")
        case let .signalingLost(uuid): log("\(who): call \(callName(uuid)) signaling lost")
        case let .signalingResumed(uuid): log("\(who): call \(callName(uuid)) signaling resumed")
        case let .iceRestarted(uuid, byPeer): log("\(who): call \(callName(uuid)) ICE restarted\(byPeer ? " by the peer" : "")")
        case let .playoutReset(uuid, reset): log("\(who): call \(callName(uuid)) playout reset (\(reset.reason.rawValue))")
        case let .firstAudio(uuid, _): log("\(who): call \(callName(uuid)) first audio")
        case let .earlyMedia(uuid): log("\(who): call \(callName(uuid)) early media")
        case let .transfer(uuid, status, detail):
            log("\(who): call \(callName(uuid)) transfer \(status): \(detail)")
            let call = canonical(uuid)
            if status == 200, calls[call]?.sides[node] != nil, calls[call]!.sides[node]!.transferredAt == nil {
                calls[call]!.sides[node]!.transferredAt = frame
            }
        case let .peerError(message): log("\(who): peer error: \(message)")
        case let .recordingFailed(uuid, _, reason): log("\(who): call \(callName(uuid)) recording failed: \(reason)")
        case let .webPage(connected, _): log("\(who): its call page \(connected ? "opened" : "closed")")
        case let .audioRouteChanged(reason, _): log("\(who): audio route changed (\(reason))")
        case .audioDeviceFailed, .audioInterrupted, .audioInterruptionEnded:
            log("\(who): \(InMemoryNodes.kind(event))")
        default:
            break  // snapshots, statistics and setup details: not part of the story
        }
    }

    /// The caller's side of a SIP call that came in at `node`: which node, and its ID for the
    /// call (from the SIP network's dialog between them).
    private func sipCaller(of uuid: UUID, at node: Int) async -> (Int, UUID)? {
        guard speaksSIP, let dialog = await nodes[node].sipDialog(of: uuid), let peer = world.sip.peer(of: sipURI(node), call: dialog),
              let caller = self.node(ofSIP: peer.address), !down.contains(caller),
              let call = await nodes[caller].call(ofSIPDialog: peer.call) else { return nil }
        return (caller, call)
    }

    private func readProbes() {
        for uuid in callOrder {
            for node in calls[uuid]!.sides.keys.sorted() {
                guard let probe = calls[uuid]!.sides[node]!.probe else { continue }
                let read = calls[uuid]!.sides[node]!.probeRead
                let frames = probe.frames(from: read)
                calls[uuid]!.sides[node]!.probeRead = read + frames.count
                calls[uuid]!.sides[node]!.pending = Array(frames)
            }
        }
    }
}
