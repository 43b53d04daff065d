@_spi(Simulation) import CallCore
@_spi(Simulation) import CallNode
import AudioDevices
import CallNodeTestKit
import Calls
import Foundation
import Locking

/// Whole nodes on one manual clock over in-memory signaling and media, driven by a plan, with
/// every invariant checked after every step.
///
/// Everything of a run — the nodes' actors, the simulation's own tasks — runs on the one thread of
/// its ``SimScheduler``, so this class's state is only ever touched by one job at a time.
final class Simulation: @unchecked Sendable {  // see above: one job at a time, on one thread
    /// Frames after the last user action before a run ends anyway, saying calls are still up.
    static let tailLimit = 1_500
    /// Frames that the nodes get, once every call has ended everywhere, to let go of everything.
    static let settleFrames = 25

    let plan: SimPlan
    let options: SimOptions
    let scheduler: SimScheduler
    /// Sets the wall clock libraries read for their own timers to the run's time (see ``SimulationRunner/setHostTime``).
    let setHostTime: @Sendable (Duration) -> Void
    let frequencies: [Double] = [440, 660, 880, 1_100, 1_320]

    private(set) var trace: [String] = []
    private(set) var failure: SimFailure?
    private(set) var frame = 0
    var world: InMemoryNodes!
    var nodes: [CallNode] = []
    /// The relay every node registers at; the last node is reached only through it.
    let relay = InMemoryRelay()
    static let relayAddress = SignalAddress(host: "relay", port: 7700)
    /// Each node's host network, as the node reads it.
    var hosts: [SimHost] = []
    var cursors: [Int] = []
    var faults = Faults()
    var calls: [UUID: SimCall] = [:]
    var callOrder: [UUID] = []
    private var blocked: Set<[Int]> = []
    var moves = 0
    /// Runs made by this process.
    private static let runs = Locked(0)
    /// When the run first had a fault that can fail a call (nil: none yet).
    var disruptedAt: Int?
    /// Host moves waiting for their call to secure its media (``SimSecuringMove``).
    var securingMoves: [SimSecuringMove] = []
    /// Actions waiting for the peer's end of their call to reach their node (``SimMove/asPeerEnds(_:held:)``).
    var peerEndWatches: [SimPeerEndWatch] = []
    /// The next action's task waits, pinned, until the scheduler lets it go (``actAsPeerEnds()``).
    var pinNextAction = false
    /// Nodes whose next signaling frame resets every connection, this frame (``dialThen(_:)``).
    var resetsAsInvited: [Fingerprint] = []
    /// Calls (the caller's IDs) to a phone whose answer cannot be taken (``InMemorySIPNetwork/Phone/answersAnotherCodec``).
    var answeredUntakeably: Set<UUID> = []
    /// Hang-ups waiting for the peer's glare retry (``landByesAsGlareRetries()``).
    var glareWatches: [SimGlareWatch] = []
    /// Nodes whose gatherings' ends wait (``holdGathering(_:)``).
    var gatheringHeld: Set<Int> = []
    /// Frames the leg's turn held back as the peer's end came in stays held after that frame
    /// (``endGathering(_:turnsLate:)``).
    var pinnedFrames = 0
    /// Calls on a loop of conferences at the last step (``callsOnConferenceLoops()``).
    var conferenceLoops: Set<UUID> = []
    /// Nodes that crashed at some point of the run.
    var everCrashed: Set<Int> = []
    /// Each node's microphone's failure switch (a restarted node has a new microphone).
    private var microphones: [DeviceFailureSwitch] = []
    /// How many jobs each action lets run before it (seeded).
    private lazy var actionDelays = SimRandom(seed: plan.seed ^ 0xAC71_0D)
    /// Nodes whose process crashed and has not started again.
    var down: Set<Int> = []
    /// The ICE paths each node made (closed when it crashes).
    var paths: [Locked<[InMemoryIcePath]>] = []
    struct SetUpError: Error, CustomStringConvertible { let message: String; var description: String { message } }
    var inspections: [NodeInspection?] = []

    /// A node's inside at the last step (nil while it is down).
    func inspection(_ node: Int) -> NodeInspection? { inspections[node] }
    func callOrderFor(_ node: Int) -> [UUID] { callOrder.filter { calls[$0]!.sides[node] != nil } }
    var cleanSince: Int? { faults.cleanSince }
    var nodesList: [CallNode] { nodes }

    struct Faults {
        var network = InMemoryIceNetwork.Conditions()
        var unreachable: Set<Int> = []
        /// Nodes whose host has no address.
        var offline: Set<Int> = []
        /// Nodes whose signaling is cut off.
        var signalingCut: Set<Int> = []
        /// The frame the media network last became fit to carry speech (nil: it is not).
        var cleanSince: Int? = 0
    }

    init(plan: SimPlan, options: SimOptions, scheduler: SimScheduler, setHostTime: @escaping @Sendable (Duration) -> Void) {
        self.plan = plan
        self.options = options
        self.scheduler = scheduler
        self.setHostTime = setHostTime
    }

    /// Whole nodes (a, b, …); the browser behind the call page comes after them.
    var nodeCount: Int { max(2, min(options.nodes, SimMove.names.count - 1)) }
    /// The browser that has node a's call page open (a node of its own playing the page's WebRTC).
    var pageIndex: Int { nodeCount }
    /// The call page, open on node a.
    var page: InMemoryPage?
    /// Node-local call IDs (a page call has one on each side) to the simulation's.
    var aliases: [UUID: UUID] = [:]
    /// The calls each frame's dials placed (their caller's IDs), for steps that name them.
    var dials: [Int: [UUID]] = [:]
    /// Since which frame each leg (by its node's ID) has waited for its audio while its manager
    /// counts the call connected (seeds whose audio session is slow to activate).
    var awaitingAudioSince: [UUID: Int] = [:]

    func canonical(_ uuid: UUID) -> UUID { aliases[uuid] ?? uuid }
    /// The ID `node` knows the call by.
    func local(_ call: UUID, _ node: Int) -> UUID { calls[call]?.sides[node]?.uuid ?? call }
    func name(_ node: Int) -> String { SimMove.names[node] }

    func log(_ line: String) {
        trace.append("[\(SimTrace.time(frame))] \(scrub(line))")
    }

    func fail(_ invariant: Invariant, _ message: String) {
        guard failure == nil else { return }
        failure = SimFailure(invariant: invariant.rawValue, message: scrub(message), frame: frame)
        trace.append(failure!.description)
    }

    // MARK: The run

    func run() async {
        // What the seed let happen, first: a trace says what it could have held.
        for line in plan.swarm.map({ $0.description.split(separator: "\n") }) ?? [] { trace.append("mix: \(line)") }
        do {
            try await setUp()
        } catch {
            fail(.setUp, "the nodes could not start: \(error)")
            return
        }
        // Keyed with DTLS, the media's way takes 40–80 ms each way from the start (a distance,
        // not a fault): the handshake's round trips last long enough for restarts, host moves
        // and the peer's re-offers to meet a call while it secures.
        if plan.swarm?.dtls == true {
            faults.network.delayTicks = 2 + Int(plan.seed % 3)
            applyNetwork()
        }
        // Paths that say they are disconnected before they fail, as libnice's do with consent
        // freshness on: an outage of two seconds disconnects a connected call's path.
        if plan.swarm?.iceDisconnects == true {
            faults.network.disconnectedAfter = .seconds(2)
            applyNetwork()
        }
        var steps = plan.steps[...]
        var quietFrom: Int?
        let end = plan.frames
        while failure == nil {
            while let step = steps.first, step.frame <= frame {
                steps.removeFirst()
                // The activity ends at the plan's end: what comes later (a fault's healing) the
                // quiet end does anyway.
                if frame < end { await perform(step.move) }
            }
            if frame == end {
                await quietEnd()
            }
            if frame == end + 50 {
                log("everyone hangs up")
                for (node, call) in liveCalls() {
                    let target = nodes[node], uuid = local(call, node)
                    spawn(node, "hangs up call \(callName(call))") { try await target.hangUp(uuid) }
                }
            }
            if frame < end { await landByesAsGlareRetries() }
            world.timers.advance(by: world.media.frameDuration)
            setHostTime(world.timers.now.offset)
            if frame < end { await actAsPeerEnds() }
            world.sip.advance()
            await world.media.advance(frames: 1)
            await scheduler.quiescence()
            // A leg's turn held back as the peer's end came in (``SimMove/asPeerEnds(_:held:)``).
            if pinnedFrames > 0 {
                pinnedFrames -= 1
            } else if scheduler.releasePinned() {
                await scheduler.quiescence()
            }
            // A reset as an invitation leaves that found none this frame (the call was refused).
            for identity in resetsAsInvited { world.signaling.resetAfterNextFrame(of: identity, false) }
            resetsAsInvited = []
            frame += 1
            await observe()
            moveHostsOfCallsSecuring()
            if failure != nil { break }
            if frame > end + 50 {
                if allEnded() {
                    quietFrom = quietFrom ?? frame
                    if frame - quietFrom! >= Self.settleFrames { break }
                } else {
                    quietFrom = nil
                    if frame > end + Self.tailLimit {
                        let up = liveCalls().map { "\(callName($0.1)) on \(name($0.0))" }
                        fail(.endsOnce, "\(Self.tailLimit / 50) s after everyone hung up, calls are still up: \(up.joined(separator: ", "))")
                    }
                }
            }
        }
        if failure == nil { await checkTheEnd() }
        logSIPSummary()
        await closePage()
        await scheduler.exclusive { await world.shutdown() }
        if failure == nil { checkAfterShutdown() }
    }

    private func setUp() async throws {
        // A directory of this process's own: with the host's randomness from the seed, a UUID
        // names the same directory in every process running this seed.
        let run = Self.runs.withLock { $0 += 1; return $0 }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("callnode-sim-\(getpid())-\(plan.seed)-\(run)").path
        world = try InMemoryNodes(conditions: .init(), seed: plan.seed | 1, directory: directory, sipConditions: sipConditions)
        try await scheduler.exclusive {
            for index in 0..<nodeCount {
                hosts.append(SimHost(HostNetworkSnapshot(addresses: ["192.0.2.\(10 + index)"], defaultRoutes: ["eth0 via 192.0.2.1"])))
                paths.append(Locked([]))
                nodes.append(try await makeNode(index))
                cursors.append(0)
            }
            // The last node has no address the others know: they reach it through the relay.
            let relayed = nodeCount - 1
            for a in 0..<nodeCount {
                for b in (a + 1)..<nodeCount {
                    if b == relayed {
                        try await nodes[a].store.contacts.add(Contact(name: name(b), fingerprint: nodes[b].identity.fingerprint.hex))
                        try await nodes[b].store.contacts.add(Contact(name: name(a), fingerprint: nodes[a].identity.fingerprint.hex))
                    } else {
                        try await world.trust(nodes[a], as: name(a), nodes[b], as: name(b))
                    }
                }
            }
            try await waitForRegistration(of: Array(0..<nodeCount))
            hosts.append(SimHost(HostNetworkSnapshot(addresses: ["192.0.2.99"], defaultRoutes: ["eth0 via 192.0.2.1"])))
            paths.append(Locked([]))
            nodes.append(try await makeNode(pageIndex))
            cursors.append(0)
            try await openPage()
        }
        log("\(nodeCount) nodes: " + (0..<nodeCount).map { "\(name($0)) (tone \(Int(frequencies[$0])) Hz)" }.joined(separator: ", ")
            + "; \(name(nodeCount - 1)) is reached through the relay; \(name(pageIndex)) is a browser with \(name(0))'s call page open"
            + " (tone \(Int(frequencies[pageIndex])) Hz)" + (appOwnedAudio ? "; the nodes own their audio (no CallKit: early media)" : ""))
    }

    /// Whether the nodes own their audio sessions (CallKit-free mode): in the plans where a
    /// callee greets its callers with early media, which only a node that owns its audio can.
    var appOwnedAudio: Bool { plan.steps.contains { if case .greet = $0.move { true } else { false } } }

    /// A node, as set up at the start or started again after a crash from the same home (its
    /// database, its identity). Call from ``SimScheduler/exclusive(_:)``.
    func makeNode(_ index: Int) async throws -> CallNode {
        let bug = options.reintroducedBug.flatMap(ReintroducedBug.init(rawValue:))
        let relay = self.relay, host = hosts[index], made = paths[index], network = world.network
        let home = world.path(name(index))
        if !FileManager.default.fileExists(atPath: home + "/identity.key") {
            try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            let identity = SimIdentities.all[index]
            try Data(identity.key.utf8).write(to: URL(fileURLWithPath: home + "/identity.key"))
            try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: home + "/identity.key")
            try Data(identity.certificate.utf8).write(to: URL(fileURLWithPath: home + "/identity.crt"))
        }
        let browser = index == pageIndex
        let unsafe = options.unsafeSession && index == 1
        let failure = DeviceFailureSwitch()
        if microphones.count > index { microphones[index] = failure } else { microphones.append(failure) }
        let fallback = NodeAudioInput.tone(frequencies[index] + 0.5)
        let node = try await world.node(name(index), input: .tone(frequencies[index]), output: .null, autoAnswer: false,
                                        keyExchange: browser || plan.swarm?.dtls == true ? .dtls : .sdes) {
            $0.legActionRewrite = bug?.legActionRewrite
            $0.warmsUpInline = true
            $0.randomSeed = plan.seed &* 0x100 &+ UInt64(index)  // a glare's wait replays too
            if let delay = plan.swarm?.audioActivation { $0.audioActivationDelay = .milliseconds(delay) }
            // The runs study the order of the calls' events; their audio only carries each
            // node's tone, which Opus codes as well at its least complexity for a fraction of the
            // work (Opus at 8 took over half of a sweep's time).
            $0.media.opus.complexity = 0
            // SIP calls come on top of the plan's others: room for them, or most would be busy.
            // (six where the SIP edges add their calls of their own).
            if speaksSIP { $0.provider.maximumCallGroups = plan.swarm?.sip?.edges == nil ? 4 : 6 }
            if appOwnedAudio && !unsafe && !browser { $0.appOwnedAudio = true }
            plan.swarm?.timers?.apply(to: &$0)
            if unsafe {
                // The careless app: b's answers activate the session before the provider does.
                $0.audioStandIn = UnsafeDoubleActivationSession(microphone: ToneSource(frequency: frequencies[index]), speaker: NullSink())
            }
            // The microphone can fail; another one (the same tone, a device of its own) takes over.
            if var backend = $0.audio as? NodeAudioBackend {
                backend.inputFailure = failure
                backend.fallbackInputDevice = fallback
                $0.audio = backend
            }
            guard !browser else { return }  // a page's browser: no relay, no listening
            $0.relay = Self.relayAddress
            $0.relayNetwork = relay
            $0.hostNetwork = { host.snapshot }
            $0.hostNetworkChanges = { host.changes() }  // told at once, as the kernel's routing messages tell
            $0.makeIcePath = { ice in
                let path = network.makePath(role: ice.role)
                made.withLock { $0.append(path) }
                if host.snapshot.addresses.isEmpty { network.setOffline([path.address], true) }
                return path
            }
        }
        // The node's one-time work on a thread of its own ends before anything happens.
        while !(await node.hasWarmedUp) { await Task.yield() }
        if speaksSIP, !browser {
            try await node.listenSIP(SIPListenSettings(host: "\(name(index)).sim", port: 5060, offersICE: true))
        }
        return node
    }

    /// Opens a's call page in the browser and waits (in an exclusive section) until a has it.
    func openPage() async throws {
        let served = nodes[0], browser = nodes[pageIndex]
        page = InMemoryPage(browser: browser, servedBy: served)
        let before = world.events(name(0)).count
        // Bounded by the wall clock, not by a count of yields: the page's opening crosses a
        // thread of the node's own, which a loaded machine (a sweep beside other work) may
        // leave waiting for longer than any fixed number of yields takes.
        let deadline = ContinuousClock.now + .seconds(30)
        while !world.events(name(0)).dropFirst(before).contains(where: { if case .webPage(true, _) = $0 { true } else { false } }) {
            if ContinuousClock.now > deadline { throw SetUpError(message: "\(name(0)) never saw its call page open (30 s)") }
            await Task.yield()
        }
    }

    /// Closes the call page (the tab goes away, or the side serving it died): its calls end.
    func closePage() async {
        guard let page else { return }
        self.page = nil
        await scheduler.exclusive { await page.close() }
    }

    /// Waits (in an exclusive section) until these nodes are registered at the relay.
    ///
    /// Bounded by the wall clock, as ``openPage()`` is: a node's start crosses threads outside
    /// the scheduler (its database's among them), which a loaded machine may leave waiting for
    /// longer than a fixed number of yields takes (100 000 were once not enough, in a sweep
    /// beside the test suite).
    /// The yields happen inside an exclusive section, so how many there are changes no trace.
    func waitForRegistration(of indices: [Int]) async throws {
        let deadline = ContinuousClock.now + .seconds(30)
        while !Set(indices.map { nodes[$0].identity.fingerprint }).isSubset(of: relay.registered) {
            if ContinuousClock.now > deadline {
                throw SetUpError(message: "only \(relay.registered.count) of the nodes registered at the relay (30 s)")
            }
            await Task.yield()
        }
    }

    /// The faults heal, blocks and do-not-disturb are lifted: what follows must end cleanly.
    private func quietEnd() async {
        log("quiet end: faults healed, blocks and do-not-disturb lifted, crashed nodes started again")
        for index in down.sorted() { await restart(index) }
        faults.network = .init()
        world.network.setConditions(faults.network)
        for node in faults.unreachable {
            world.signaling.setReachable(nodes[node].listenAddress!, true)
            world.sip.setReachable(sipURI(node), true)
        }
        faults.unreachable.removeAll()
        for node in faults.signalingCut.sorted() { cutSignaling(node, false) }
        for node in faults.offline.sorted() { setOffline(node, false) }
        for node in gatheringHeld.sorted() { endGathering(node, turnsLate: 0) }
        endGlareWatches()
        faults.cleanSince = faults.cleanSince ?? frame
        for pair in blocked.sorted(by: { $0.lexicographicallyPrecedes($1) }) {
            await setBlocked(pair[0], pair[1], false)
        }
        for node in nodes { await node.manager.setDoNotDisturb(false) }
    }

    // MARK: Steps

    /// The node's live calls, oldest first.
    func calls(of node: Int) -> [UUID] {
        callOrder.filter { uuid in calls[uuid]!.sides[node].map { $0.endCount == 0 && !$0.crashed } ?? false }
    }

    func liveCalls() -> [(Int, UUID)] {
        callOrder.flatMap { uuid in (0..<nodes.count).filter { calls[uuid]!.sides[$0].map { $0.endCount == 0 && !$0.crashed } ?? false }.map { ($0, uuid) } }
    }

    func allEnded() -> Bool {
        calls.values.allSatisfy { $0.sides.values.allSatisfy { $0.endCount > 0 || $0.crashed } }
    }

    func callName(_ uuid: UUID) -> String { calls[canonical(uuid)].map { "#\($0.number)" } ?? "#?" }

    /// Runs an action as its own task: it lands wherever the schedule puts it, between any two
    /// messages (it first lets a seeded number of other jobs run, so it also lands inside the
    /// exchanges that other steps of the same instant started); its outcome is traced when it
    /// comes.
    func spawn(_ node: Int, _ what: String, _ body: @escaping @Sendable () async throws -> Void) {
        let delay = actionDelays.below(4) == 0 ? 0 : actionDelays.below(60)
        if pinNextAction {
            pinNextAction = false
            scheduler.pinNextJob()
        }
        Task {
            for _ in 0..<delay { await Task.yield() }
            do {
                try await body()
                self.log("\(self.name(node)) \(what): done")
            } catch {
                self.log("\(self.name(node)) \(what): refused (\(self.scrubbed("\(error)")))")
            }
        }
    }

    func perform(_ planned: SimMove) async {
        // An action by whoever has a call: the node the pick names among those with one.
        var move = planned
        if planned.actingNode == SimMove.holder {
            let holders = (0...pageIndex).filter { !down.contains($0) && !calls(of: $0).isEmpty }
            guard !holders.isEmpty else { return log("\(planned.description)  (nobody has a call)") }
            move = planned.acting(by: holders[Self.place(planned.pick ?? 0, holders.count)])
        }
        log(move.description)
        switch move {
        case .partition(true), .resetSignaling, .unreachable(_, true), .restartRelay, .crash, .sessionLost, .oneWayBreak, .offline(_, true),
             .signalingCut(_, true), .dialThen(_, _, _, .cutSignaling, _):
            disruptedAt = disruptedAt ?? frame
        default: break
        }
        if let actor = move.actingNode, down.contains(actor) { return log("  (\(name(actor)) is down)") }
        /// The node's own ID of the call at that place (the trace names it by the simulation's).
        func pick(_ node: Int, _ index: Int) -> UUID? {
            chosen(index, among: calls(of: node)) { $0 }.map { local($0, node) }
        }
        switch move {
        case let .dial(from, _) where from == pageIndex:
            guard let page else { return log("  (the page is closed)") }
            spawn(from, "calls \(name(0)) from the page") { _ = try await page.call() }
        case let .dial(from, to) where to == pageIndex:
            guard from == 0 else { return log("  (only \(name(0)) serves the page)") }
            let node = nodes[from]
            spawn(from, "calls its page") { _ = try await node.call(.webPage) }
        case let .dial(from, to):
            let node = nodes[from], at = frame
            spawn(from, "dials \(name(to))") { self.dialled(try await node.call(.contact(self.name(to))), at: at) }
        case let .answer(at, index), let .greet(at, index):
            // Only a call that rings here can be answered, or greeted with early media: pick among those.
            let ringing = calls(of: at).filter { calls[$0]!.callee == at && calls[$0]!.sides[at]?.connectedAt == nil }
            guard let call = chosen(index, among: ringing, { $0 }) else { return log("  (nothing rings at \(name(at)))") }
            let uuid = local(call, at)
            let node = nodes[at]
            if case .answer = move {
                spawn(at, "answers \(callName(call))") { try await node.answer(uuid) }
            } else {
                spawn(at, "plays early media on \(callName(call))") { try await node.progress(uuid) }
            }
        case let .hangUp(at, index):
            guard let uuid = pick(at, index) else { return log("  (no call at \(name(at)))") }
            let node = nodes[at]
            spawn(at, "hangs up \(callName(uuid))") { try await node.hangUp(uuid) }
        case let .mute(at, index, on):
            guard let uuid = pick(at, index) else { return log("  (no call at \(name(at)))") }
            let node = nodes[at]
            spawn(at, "\(on ? "mutes" : "unmutes") \(callName(uuid))") { try await node.setMuted(uuid, on) }
        case let .hold(at, index, on):
            guard let uuid = pick(at, index) else { return log("  (no call at \(name(at)))") }
            let node = nodes[at]
            spawn(at, "\(on ? "holds" : "resumes") \(callName(uuid))") { try await node.setHeld(uuid, on) }
        case let .swap(at, index):
            guard let uuid = pick(at, index) else { return log("  (no call at \(name(at)))") }
            let node = nodes[at]
            spawn(at, "swaps to \(callName(uuid))") { try await node.swap(to: uuid) }
        case let .merge(at, index, otherIndex):
            let live = calls(of: at)
            guard live.count >= 2 else { return log("  (fewer than two calls at \(name(at)))") }
            let first = local(live[index % live.count], at), second = local(live[(index + 1 + otherIndex % (live.count - 1)) % live.count], at)
            let node = nodes[at]
            spawn(at, "merges \(callName(first)) and \(callName(second))") { try await node.merge(first, with: second) }
        case let .unmerge(at, index):
            guard let uuid = pick(at, index) else { return log("  (no call at \(name(at)))") }
            let node = nodes[at]
            spawn(at, "unmerges \(callName(uuid))") { try await node.unmerge(uuid) }
        case let .restartICE(at, index):
            guard let uuid = pick(at, index) else { return log("  (no call at \(name(at)))") }
            let node = nodes[at]
            spawn(at, "restarts ICE on \(callName(uuid))") { try await node.restartICE(uuid) }
        case let .dtmf(at, index, digits):
            guard let uuid = pick(at, index) else { return log("  (no call at \(name(at)))") }
            let node = nodes[at]
            spawn(at, "sends DTMF on \(callName(uuid))") { try await node.playDTMF(uuid, digits) }
        case let .block(at, other, on):
            await setBlocked(at, other, on)
        case let .doNotDisturb(at, on):
            let manager = nodes[at].manager
            Task { await manager.setDoNotDisturb(on) }
        case let .network(loss, delay, reordering, duplication):
            faults.network.loss = loss
            faults.network.delayTicks = delay
            faults.network.reordering = reordering
            faults.network.duplication = duplication
            applyNetwork()
        case let .oneWayBreak(towardCallers):
            world.network.breakPaths(toward: towardCallers ? .controlled : .controlling)
            // Consent runs out in 3 s rather than libnice's 8 (a run's activity is 8 s), as the
            // nodes' own timers are made short: the side that still hears its peer loses its
            // path while its call is connected.
            faults.network.consentTimeout = .seconds(3)
            applyNetwork()
        case let .partition(on):
            setPartitioned(on)
        case .resetSignaling:
            world.signaling.dropConnections()
        case .restartRelay:
            relay.restart()
        case let .microphoneFails(at):
            guard !down.contains(at) else { return log("  (\(name(at)) is down)") }
            microphones[at].fail("unplugged")
        case let .crash(at):
            await crash(at)
        case let .restart(at):
            await restart(at)
        case let .offline(at, on):
            setOffline(at, on)
        case let .signalingCut(at, on):
            cutSignaling(at, on)
        case .dialThen:
            dialThen(move)
        case let .addressChange(at):
            moveHost(at)
        case let .movesWhileSecuring(at, index, then):
            moveWhenSecuring(at, index, then: then)
        case let .asPeerEnds(action, held):
            await watchForPeerEnd(action, held: held)
        case let .hangUpAsPeerRetries(at, index):
            watchGlare(at, index)
        case let .holdGathering(at, _):
            holdGathering(at)
        case let .endGathering(at, _, late):
            endGathering(at, turnsLate: late)
        case .dialSIP, .transfer, .sessionLost, .sipPeer, .abandonSIP, .dialPhone:
            await performSIP(move, pick: pick)
        case let .unreachable(at, on):
            if on { faults.unreachable.insert(at) } else { faults.unreachable.remove(at) }
            // A host without a network, or with its signaling cut, stays out of reach.
            let reachable = signalingReachable(at)
            if speaksSIP { world.sip.setReachable(sipURI(at), reachable) }
            world.signaling.setReachable(nodes[at].listenAddress!, reachable)
            if on { world.signaling.dropConnections() }
        }
    }

    /// The place a step's pick names among `count` calls, oldest first, wrapping; a negative
    /// pick counts from the newest (-1: the newest).
    static func place(_ pick: Int, _ count: Int) -> Int { ((pick % count) + count) % count }

    func setPartitioned(_ on: Bool) {
        faults.network.partitioned = on
        applyNetwork()
    }

    private func applyNetwork() {
        world.network.setConditions(faults.network)
        let fit = !faults.network.partitioned && faults.network.loss <= 0.1
        if fit { faults.cleanSince = faults.cleanSince ?? frame } else { faults.cleanSince = nil }
    }

    /// Blocks (or unblocks) `other` at `node`: a database write, done alone so its answer
    /// from the database's thread comes at the same point every run.
    private func setBlocked(_ node: Int, _ other: Int, _ on: Bool) async {
        let handle = CallHandle(.generic, nodes[other].identity.fingerprint.hex)
        let directory = nodes[node].store.directory
        do {
            try await scheduler.exclusive {
                if on { try await directory.block(handle) } else { try await directory.unblock(handle) }
            }
            if on { blocked.insert([node, other]) } else { blocked.remove([node, other]) }
        } catch {
            log("\(name(node)) could not \(on ? "block" : "unblock") \(name(other)): \(error)")
        }
    }
}
