import ArgumentParser
import CallNode
import Dispatch
import Foundation
import NodeControl

#if canImport(Glibc)
import Glibc
#endif

/// What a running `listen` or `call` reacts to.
enum RunnerInput: Sendable {
    case node(NodeEvent)
    /// Ctrl-C (SIGINT) or a stop (SIGTERM: systemctl stop, a container's stop).
    case interrupt(terminal: Bool)
    case durationElapsed(UUID)
    case key(UInt8)
    case nodeFinished
    /// A drain is over: no call is left (`hungUp` were hung up when its grace ran out).
    case drained(hungUp: Int)
    /// The control API asks for a drain (`POST /v1/drain`), with its grace if it gave one.
    case drainRequested(grace: Duration?)
    /// Time to redraw what the placed call's setup waits for.
    case setupTick
}

/// How a run ended, for the exit status.
enum RunOutcome {
    case completed
    case failed(String)

    var exitCode: Int32 {
        if case .completed = self { return 0 }
        return 1
    }
}

/// Drives one node from the terminal: prints events (human lines or JSON), hangs up after
/// `--duration`, on Ctrl-C or on `q`, and decides the exit status.
final class CallRunner {
    let node: CallNode
    let json: Bool
    let duration: Duration?
    /// Exit once this many calls have ended (nil: serve until stopped; a dialed call's end
    /// always ends the run).
    let exitAfterCalls: Int?
    private var endedCalls = 0
    let inputs: AsyncStream<RunnerInput>
    let continuation: AsyncStream<RunnerInput>.Continuation
    private var tasks: [Task<Void, Never>] = []
    private var servers: [Task<Void, Never>] = []
    private var signalSources: [any DispatchSourceSignal] = []
    private var connected: Set<UUID> = []
    /// The call this run placed (`call`, `join`, a rung page), whose failure is its exit status.
    private var dialedCall: UUID?
    /// What the placed call's setup waits for, until it connects or ends (see `followSetup`).
    var setup: (call: UUID, status: SetupStatus, began: ContinuousClock.Instant, ticker: Task<Void, Never>)?
    var lastPair: [UUID: SelectedPairInfo] = [:]
    var lastStats: [UUID: MediaStatistics] = [:]
    var current: UUID?
    /// Calls whose media runs before they are answered (early media).
    var earlyMedia: Set<UUID> = []
    /// The address being typed after `t` (whom to transfer the call to), until Enter or Esc;
    /// the status line waits meanwhile.
    var transferEntry: String?
    private var onSpeaker = false, bypassed = false
    /// Each call's hold and mute, as the node last reported them.
    var heldCalls: Set<UUID> = [], mutedCalls: Set<UUID> = []
    /// The hold and mute of the call the keys act on.
    var muted: Bool { current.map(mutedCalls.contains) ?? false }
    var held: Bool { current.map(heldCalls.contains) ?? false }
    /// Who is on each call, as the screen names them; the calls the peer holds.
    var peers: [UUID: String] = [:], heldByPeer: Set<UUID> = []
    /// Calls ringing here, oldest first; calls connected and not ended, in the order they
    /// connected; a VideoRoom group's feeds (each hears one member), never the call keys act on.
    var ringing: [UUID] = [], connectedCalls: [UUID] = [], roomFeeds: Set<UUID> = []
    let isTerminal = isatty(1) == 1
    var statusShown = false
    /// Each call's media protection, for the status line.
    var securities: [UUID: MediaSecurity] = [:]
    private var keyboard: RawKeyboard?
    /// Ring the first web page that connects (`callnode web --ring-page`).
    private var ringsWebPage: Bool
    /// SIGTERM drains for at most this long (`--drain-grace`) rather than hanging up at once.
    private let drainGrace: Duration?
    private var draining = false
    /// The drain is over; the run ends once the end events of its last calls are reported.
    private var drainedWaitingForEnds = false

    /// - Parameter duration: Each call is hung up this long after it connects.
    init(node: CallNode, json: Bool, duration: Double?, exitAfterCalls: Int?, ringsWebPage: Bool = false, drainGrace: Double? = nil) {
        self.ringsWebPage = ringsWebPage
        self.drainGrace = drainGrace.map { .milliseconds(Int64($0 * 1000)) }
        self.node = node
        self.json = json
        self.duration = duration.map { .milliseconds(Int64($0 * 1000)) }
        self.exitAfterCalls = exitAfterCalls
        (inputs, continuation) = AsyncStream.makeStream(of: RunnerInput.self)
    }

    /// Subscribes to the node and to Ctrl-C. Call before the node starts.
    func attach() {
        let events = node.events()
        let continuation = self.continuation
        tasks.append(Task {
            for await event in events { continuation.yield(.node(event)) }
            continuation.yield(.nodeFinished)
        })
        // Ctrl-C, SIGTERM (systemctl stop, a container's stop) and SIGHUP (the terminal closed):
        // hang up (leaving a room: no participant left behind), then exit cleanly.
        for number in [SIGINT, SIGTERM, SIGHUP] {
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
            let fromTerminal = number != SIGTERM
            source.setEventHandler { continuation.yield(.interrupt(terminal: fromTerminal)) }
            source.resume()
            signalSources.append(source)
        }
        if isTerminal, !json, isatty(0) == 1 {
            keyboard = RawKeyboard { continuation.yield(.key($0)) }
        }
    }

    /// Runs until the call (or the first call, for `listen --duration`) ends or Ctrl-C.
    func run(calling target: CallTarget?) async -> RunOutcome {
        var outcome: RunOutcome = .completed
        var dialed: UUID?
        if let target {
            do {
                dialed = try await node.call(target)
                dialedCall = dialed
                current = dialed
                if let dialed { beginSetupStatus(of: dialed) }
            } catch {
                return .failed("callnode: \(error)")
            }
        }
        var interrupted = false
        loop: for await input in inputs {
            switch input {
            case let .node(event):
                report(event)
                followSetup(event)
                switch event {
                case let .connected(uuid, _):
                    connected.insert(uuid)
                    ringing.removeAll { $0 == uuid }
                    connectedCalls.append(uuid)
                    if !roomFeeds.contains(uuid) || current == nil { current = uuid }
                    if let duration {
                        let continuation = self.continuation
                        tasks.append(Task {
                            try? await Task.sleep(for: duration)
                            continuation.yield(.durationElapsed(uuid))
                        })
                    }
                case let .incoming(uuid, _, _, _):
                    ringing.append(uuid)
                    if current == nil { current = uuid }
                case .webPage(connected: true, _) where ringsWebPage && current == nil:
                    ringsWebPage = false
                    await ringWebPage()
                case let .rejected(uuid, reason) where uuid == dialed:
                    outcome = .failed("callnode: the call was rejected: \(reason)")
                case let .dialing(uuid, .session) where dialed == nil && target == nil:
                    // A session join places its own call (a call the control API places on a
                    // listening node is one of its calls, not the run's).
                    dialed = uuid
                    dialedCall = uuid
                    current = uuid
                case let .sessionFailed(reason):
                    outcome = .failed("callnode: cannot join the session: \(reason)")
                    break loop
                case let .ended(uuid, reason, detail, _):
                    ringing.removeAll { $0 == uuid }
                    connectedCalls.removeAll { $0 == uuid }
                    heldByPeer.remove(uuid)
                    heldCalls.remove(uuid)
                    mutedCalls.remove(uuid)
                    if current == uuid {
                        // The next call left (if any) becomes the one the keys act on.
                        current = connectedCalls.last { !roomFeeds.contains($0) } ?? connectedCalls.last ?? ringing.last
                    }
                    endedCalls += 1
                    if uuid == dialed || (target == nil && exitAfterCalls.map { endedCalls >= $0 } == true) {
                        if case .failed = outcome {} else if !connected.contains(uuid) && (!interrupted || uuid == dialed) {
                            // Hung up here before it was answered is not a call that connected
                            // and ended normally (exit 0 says that).
                            let why = interrupted ? "hung up before it was answered" : detail.map(Self.hinted) ?? reason.rawValue
                            outcome = .failed("callnode: the call did not connect: \(why)")
                        } else if reason == .failed, !interrupted {
                            outcome = .failed("callnode: the call failed: \(detail.map(Self.hinted) ?? "unknown reason")")
                        }
                        break loop
                    }
                default:
                    break
                }
            case .setupTick:
                showSetup()
            case let .durationElapsed(uuid):
                try? await node.hangUp(uuid)
            case let .interrupt(fromTerminal):
                if interrupted { break loop }  // a second Ctrl-C: stop at once
                interrupted = true
                clearStatus()
                if !fromTerminal, target == nil, let grace = drainGrace {
                    // A rolling restart: finish what is in progress, take nothing new.
                    startDrain(grace: grace, by: "SIGTERM", now: "SIGTERM again")
                    continue
                }
                // A service's stop is not a person at a keyboard: no Ctrl-C hint in its journal.
                printError(fromTerminal ? "callnode: hanging up (Ctrl-C again to force)" : "callnode: stopping (SIGTERM): hanging up")
                if let call = current ?? dialed { try? await node.hangUp(call) }
                let listening = target == nil && exitAfterCalls == nil
                if listening ? ringing.isEmpty && connectedCalls.isEmpty : current == nil && dialed == nil { break loop }
                // The other calls end as the node shuts down; the run ends with its events, every end reported.
                if listening { tasks.append(Task { [node] in await node.shutdown() }) }
            case let .key(key):
                await handleKey(key)
            case .nodeFinished:
                break loop
            case let .drainRequested(grace):
                clearStatus()
                startDrain(grace: grace ?? drainGrace, by: "control API", now: "Ctrl-C")
            case let .drained(hungUp):
                printError(hungUp == 0 ? "callnode: drained: every call has ended"
                                       : "callnode: drained: the grace period ran out; \(hungUp) calls hung up")
                if json { emit(["event": "drained", "hung_up": hungUp]) }
                // The last calls' end events may still be on their way here: report them first.
                if connectedCalls.isEmpty && ringing.isEmpty { break loop }
                drainedWaitingForEnds = true
            }
            if drainedWaitingForEnds && connectedCalls.isEmpty && ringing.isEmpty { break loop }
        }
        clearStatus()
        keyboard = nil
        for source in signalSources { source.cancel() }
        for task in tasks { task.cancel() }
        setup?.ticker.cancel()
        return outcome
    }

    /// What the control API's drain request does: the same drain as `D` (the run ends once the
    /// calls in progress have ended).
    var drainRequester: @Sendable (Duration?) async -> Void {
        let continuation = self.continuation
        return { grace in continuation.yield(.drainRequested(grace: grace)) }
    }

    /// Runs `work` (the control API's server), which ends on its own once closed; the run
    /// does not cancel it (see `startControl`).
    func keepUncancelled(_ work: @escaping @Sendable () async -> Void) {
        servers.append(Task { await work() })
    }

    /// Waits for what ``keepUncancelled(_:)`` started, once it has been closed.
    func waitForServers() async {
        for server in servers { await server.value }
    }

    /// Takes no new calls from now on; the run ends once the calls in progress have (or, after
    /// `grace`, were hung up).
    private func startDrain(grace: Duration?, by: String, now: String) {
        guard !draining else { return }
        draining = true
        let calls = connectedCalls.count + ringing.count
        let seconds = grace.map { Double($0.components.seconds) + Double($0.components.attoseconds) / 1e18 }
        let limit = seconds.map { "hanging up what is left after \(String(format: "%g", $0)) s" } ?? "exiting when the last one ends"
        printError("callnode: draining (\(by)): taking no new calls; \(calls) in progress, \(limit) (\(now): now)")
        if json { emit(["event": "draining", "calls": calls, "grace_s": seconds.map { $0 as Any } ?? NSNull()]) }
        let node = self.node, continuation = self.continuation
        tasks.append(Task {
            let hungUp = await node.drain(grace: grace)
            continuation.yield(.drained(hungUp: hungUp))
        })
    }

    private func ringWebPage() async {
        do {
            current = try await node.call(.webPage)
        } catch {
            line("cannot ring the page: \(error)")
        }
    }

    private func handleKey(_ key: UInt8) async {
        if transferEntry != nil {
            await transferKey(key)
            return
        }
        if key == UInt8(ascii: "r"), current == nil {
            await ringWebPage()
            return
        }
        let character = Character(UnicodeScalar(key))
        if character == "n" {
            // Do-not-disturb: callers are refused (they hear why) until it is off again.
            let on = await !node.manager.isDoNotDisturbOn
            await node.manager.setDoNotDisturb(on)
            line(on ? "do not disturb: on (callers are refused)" : "do not disturb: off")
            return
        }
        if character == "D", dialedCall == nil {
            // Drain by hand: take no new calls, exit once those in progress have ended.
            clearStatus()
            startDrain(grace: drainGrace, by: "D", now: "Ctrl-C")
            return
        }
        if character == "d", let ringing = ringing.last {
            // Decline the newest ringing call (q would hang up the call in progress, if any).
            do { try await node.hangUp(ringing) } catch { line("cannot decline: \(error)") }
            return
        }
        if character == "p", let ringing = ringing.last {
            // Early media: the caller hears this node (its input) while the call still rings.
            do { try await node.progress(ringing) } catch { line("cannot send early media: \(error)") }
            return
        }
        if character == "a" || character == "e", let ringing = ringing.last {
            // Answer the newest ringing call: the others are held (a) or ended (e).
            do {
                try await node.answer(ringing, others: character == "a" ? .hold : .end)
                current = ringing
            } catch {
                line("cannot answer: \(error)")
            }
            return
        }
        guard let call = current else { return }
        switch character {
        case "s":
            // The next connected call becomes the active one; the others are held.
            let calls = connectedCalls
            guard let index = calls.firstIndex(of: call), calls.count > 1 else {
                line("no other call to swap to")
                break
            }
            let next = calls[(index + 1) % calls.count]
            do {
                try await node.swap(to: next)
                current = next
                line("now with \(peers[next] ?? "the other call")")
            } catch {
                line("cannot swap: \(error)")
            }
        case "c":
            let others = connectedCalls.filter { $0 != call && !node.conference(of: call).contains($0) }
            guard !others.isEmpty else {
                line("no other call to merge")
                break
            }
            var merged = [call] + node.conference(of: call)
            for other in others {
                do {
                    try await node.merge(other, with: call)
                    merged.append(other)
                } catch {
                    line("cannot merge \(peers[other] ?? "the call"): \(error)")
                }
            }
            line("conference with \(Set(merged.compactMap { peers[$0] }).sorted().joined(separator: ", "))")
        case "u":
            do {
                try await node.unmerge(call)
                line("now with \(peers[call] ?? "the call") alone; the others are held")
            } catch {
                line("cannot unmerge: \(error)")
            }
        case "0"..."9", "*", "#":
            do { try await node.playDTMF(call, String(character)) } catch { line("cannot send DTMF: \(error)") }
        // Mute and hold show what the node reports (its `state` events), not what was asked:
        // a refused request says why and changes nothing on screen.
        case "m":
            do { try await node.setMuted(call, !muted) } catch {
                line("cannot \(muted ? "unmute" : "mute"): \(error)")
            }
        case "t":
            // A transfer: the SIP address is typed on the next line.
            clearStatus()
            transferEntry = ""
            FileHandle.standardOutput.write(Data("transfer to (sip:user@host, Enter; Esc cancels): ".utf8))
        case "h":
            do { try await node.setHeld(call, !held) } catch {
                line("cannot \(held ? "resume" : "hold"): \(error)")
            }
        case "o":
            do {
                try await node.setSpeaker(!onSpeaker)
                onSpeaker.toggle()
                line(onSpeaker ? "output: speaker" : "output: default")
            } catch {
                line("cannot switch the output: \(error)")
            }
        case "v":
            guard await node.isVoiceProcessingEnabled else {
                line("voice processing is off (--voice-processing on turns it on)")
                break
            }
            bypassed.toggle()
            await node.setVoiceProcessingBypassed(bypassed)
            line(bypassed ? "voice processing bypassed" : "voice processing on")
        case "+", "=", "-", "]", "[":
            // ±3 dB on the output (+ -) or the microphone (] [), 0 to 4 (+12 dB).
            let output = character == "+" || character == "=" || character == "-"
            let step = character == "+" || character == "=" || character == "]" ? 1.4125 : 1 / 1.4125
            do {
                let now = try await node.setVolumes(call)
                let current = output ? now.output : now.microphone
                let wanted = current < 0.01 && step > 1 ? 0.0631 : current * step  // from silence: -24 dB
                let set = try await node.setVolumes(call, microphone: output ? nil : wanted, output: output ? wanted : nil)
                let gain = output ? set.output : set.microphone
                let decibels = gain < 0.01 ? "off" : String(format: "%+.0f dB", CallVolumes.decibels(gain))
                line("\(output ? "output" : "microphone") volume \(decibels)")
            } catch {
                line("cannot change the volume: \(error)")
            }
        case "q":
            try? await node.hangUp(call)
        default:
            break
        }
    }

    // MARK: - Output

    private func report(_ event: NodeEvent) {
        if json {
            if let object = EventJSON.object(event) { emitJSON(object) }
            return
        }
        switch event {
        case let .listening(address):
            line("listening on \(address) — identity \(node.identity.fingerprint)")
            if node.configuration.playbackOnly { line("playback only: no microphone is opened; calls send silence") }
        case let .dialing(uuid, target):
            peers[uuid] = target.description
            if Self.isRoomFeed(target) { roomFeeds.insert(uuid) }
            line("calling \(target)…")
        case let .incoming(uuid, from, name, known):
            if let handle = node.handle(of: uuid) {
                // Another dialect's caller (SIP): its address is who it is.
                peers[uuid] = name ?? handle
                line("incoming call from \(name.map { "\($0) <\(handle)>" } ?? handle)")
            } else {
                peers[uuid] = name ?? from.short
                line("incoming call from \(name ?? "unknown caller") \(known ? "" : "(not a contact) ")— \(from)")
            }
            if keyboard != nil, !node.configuration.autoAnswer {
                // Early media where it can be given: a SIP caller, audio this node owns.
                let early = node.handle(of: uuid) != nil && node.configuration.appOwnedAudio ? ", p early media (the caller hears this node first)" : ""
                line(connectedCalls.isEmpty ? "  a answer, d decline\(early)"
                     : "  a answer (holding the call in progress), e answer (ending it), d decline\(early)")
            }
        case .ringing:
            line("ringing…")
        case let .state(uuid, _, isHeld, isMuted):
            // The call the keys act on is "the call"; another is named.
            let which = uuid == current || peers.count < 2 ? "" : " (\(peers[uuid] ?? "another call"))"
            if isMuted != mutedCalls.contains(uuid) {
                if isMuted { mutedCalls.insert(uuid) } else { mutedCalls.remove(uuid) }
                line((isMuted ? "muted" : "unmuted") + which)
            }
            if isHeld != heldCalls.contains(uuid) {
                if isHeld { heldCalls.insert(uuid) } else { heldCalls.remove(uuid) }
                line((isHeld ? "on hold" : "resumed") + which)
            }
        case let .selectedPair(uuid, pair):
            lastPair[uuid] = pair
            if pair.usesICE {
                line("ICE pair: \(pair.localType.rawValue) \(pair.local) ↔ \(pair.remoteType.rawValue) \(pair.remote) (\(pair.transport.rawValue))")
            } else {
                line("RTP without ICE: \(pair.local) ↔ \(pair.remote) (UDP; the peer speaks no ICE)")
            }
        case let .connected(uuid, setup):
            earlyMedia.remove(uuid)
            line("connected in \(EventJSON.milliseconds(setup)) ms")
        case let .transfer(_, _, detail):
            line("transfer: \(detail)")
        case let .earlyMedia(uuid):
            earlyMedia.insert(uuid)
            line(uuid == dialedCall ? "early media: hearing the callee before it answers (its announcement or ringback; your microphone is not sent)"
                                    : "early media: the caller hears this node before the call is answered")
        case let .secured(uuid, security):
            securities[uuid] = security
            line(security.unencrypted ? "media \(security)" : "media secured: \(security)")
            if let code = security.securityCode {
                line("security code: \(code)  (the other side sees the same digits: compare them aloud)")
            }
        case let .webPage(connected, from):
            line(connected ? "a web page connected from \(from)" : "the web page at \(from) left")
        case let .firstAudio(_, after):
            line("hearing the peer (first audio \(EventJSON.milliseconds(after)) ms after the dial)")
        case let .statistics(uuid, stats):
            lastStats[uuid] = stats
            if isTerminal { status(uuid, stats) }
        case let .remoteHold(uuid, on):
            if on { heldByPeer.insert(uuid) } else { heldByPeer.remove(uuid) }
            let who = peers[uuid] ?? "the peer"
            line(on ? "on hold by \(who)" : "\(who) resumed the call")
        case let .dtmf(_, digit):
            line("DTMF \(digit)")
        case .connectionLost:
            line("connection lost — trying to recover")
        case .connectionRestored:
            line("connection restored")
        case let .recordingFailed(_, path, reason):
            line("recording failed: \(reason) (\(path) is valid up to there; the call goes on)")
        case .signalingLost:
            line("signaling connection lost — resuming the call on a new one (audio goes on)")
        case .signalingResumed:
            line("signaling resumed on a new connection")
        case let .audioRouteChanged(reason, route):
            let now = route.map { "now \($0.input ?? "no input") → \($0.output ?? "no output")" } ?? "inactive"
            switch reason {
            case let .oldDeviceUnavailable(device): line("audio device \(device.name) went away; \(now)")
            case let .newDeviceAvailable(device): line("audio device \(device.name) appeared")
            case .override, .categoryChange: line("audio route changed; \(now)")
            }
        case let .audioInterrupted(by):
            line("audio interrupted by \(by): the calls are silent until it lets go")
        case .audioInterruptionEnded:
            line("audio interruption ended")
        case let .audioDeviceFailed(message):
            line("audio device failed: \(message)")
        case let .hostNetworkChanged(added, removed, routeChanged):
            var parts: [String] = []
            if !added.isEmpty { parts.append("new \(added.joined(separator: ", "))") }
            if !removed.isEmpty { parts.append("gone \(removed.joined(separator: ", "))") }
            if routeChanged { parts.append("default route changed") }
            line("this host's network changed: \(parts.joined(separator: "; "))")
        case let .playoutReset(_, reset):
            line("playout moved \(EventJSON.milliseconds(reset.jump)) ms on the peer's stream (\(reset.reason.rawValue))")
        case let .iceRestarted(uuid, byPeer) where connected.contains(uuid):
            line(byPeer ? "the peer restarted ICE; looking for a new path" : "restarting ICE to look for a new path")
        case let .iceRestarted(_, byPeer):  // before the call connected: a round of checks found no path
            line(byPeer ? "no path yet: the peer started a fresh round of connectivity checks"
                        : "no path yet: the connectivity checks found none; starting a fresh round")
        case let .rejected(_, reason):
            line("rejected: \(reason)")
        case let .refused(_, from, reason):
            line("refused a call from \(from.short): \(reason)")
        case .setup:
            break  // in --json: the terminal says "connected in … ms"
        case let .ended(uuid, reason, detail, duration):
            var text = "call ended: \(reason.rawValue)"
            // The placed call's failure is said once, by the line the run ends with (stderr).
            let failsTheRun = uuid == dialedCall && (reason == .failed || !connected.contains(uuid))
            if let detail, !failsTheRun { text += " (\(Self.hinted(detail)))" }
            if let duration { text += " after \(String(format: "%.1f", EventJSON.seconds(duration))) s" }
            if let stats = lastStats[uuid] {
                text += "; sent \(stats.packetsSent) packets, received \(stats.packetsReceived), lost \(stats.packetsLost)"
            }
            line(text)
        case let .peerError(text):
            line("peer error: \(text)")
        case let .sipRegistration(state):
            line("SIP: \(state)")
        case let .registered(relay):
            line("registered at relay \(relay) — reachable by fingerprint \(node.identity.fingerprint)")
        case let .relayLost(reason):
            line("relay connection lost (\(reason)); retrying")
        case let .sessionWaiting(id):
            line("joined session \(id); waiting for the other participant…")
        case let .sessionFailed(reason):
            line("session failed: \(reason)")
        case let .session(uuid, status):
            switch status {
            // The `call ended` line that follows says it (hung up here, declined).
            case .left: break
            // Only once a call was up: a dial that fails has its reason on the `call ended` line.
            case .connectionClosed where lastPair[uuid] != nil: line("session: the other side left or the connection closed")
            case .timedOut: line("session: timed out waiting for the other side to connect")
            case .connectionClosed: break
            case .joined, .connectionLost, .connectionRestored: break
            }
        case let .conferenceRoom(address, status):
            if let text = Self.describe(address, status) { line(text) }
        case let .room(_, event):
            line(Self.describe(event))
        }
    }

    func line(_ text: String) {
        clearStatus()
        print(text)
        fflush(nil)
    }

    /// One JSON line on stdout (for `--json` output that is not a node event).
    func emit(_ object: [String: Any]) { emitJSON(object) }

    private func emitJSON(_ object: [String: Any]) {
        var object = object
        object["time"] = Date().timeIntervalSince1970
        guard let data = JSONLine.data(object) else { return }
        FileHandle.standardOutput.write(data)
    }
}
