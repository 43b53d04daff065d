import Locking
import SIP
import TestingPrimitives

/// SIP between nodes in memory: each node's ``SIPStack`` does what sofia-sip's user agent does
/// for it on the wire (the ACK, the answers to CANCEL, BYE and in-dialog OPTIONS, 487 to a
/// cancelled INVITE, 481 in a dialog it does not know, 500 to a second re-INVITE, 491 to a
/// second REFER, the NOTIFYs of a transfer it follows, a local 503 when the peer's port is
/// closed, a local 408 when a transaction gets no answer in 32 s), and every decision stays
/// with the node's dialog value.
///
/// Messages take a seeded 0–2 ticks each way (in order on each direction), so requests cross:
/// a re-INVITE crosses the peer's (glare), a CANCEL crosses the 200, a BYE crosses a re-INVITE.
/// Time moves by ``advance()``, a tick (one frame period) at a time. A dialog the peer's BYE or
/// CANCEL ended is reported ended a tick after the request, and every report may come later
/// still (``Conditions/reportLag``), as sofia-sip's events reach its node from its own thread.
///
/// The network also checks the wire's own rules as it carries them (``problems``): every INVITE
/// transaction gets one final response, no side starts an INVITE while its last is unanswered;
/// and ``openDialogs()`` names every dialog still up on a side whose stack runs.
public final class InMemorySIPNetwork: SIPNetwork {
    /// How long a message waits before it arrives, in ticks (20 ms each).
    public struct Conditions: Sendable, Equatable {
        public var delay: ClosedRange<Int> = 0...2
        /// Ticks before a transaction with no answer fails with a local 408 (Timer B and F: 32 s).
        public var timeout = 1_600
        /// How often a provisional response (180, 183) arrives twice: sent again before its
        /// PRACK came (RFC 3262), or repeated by the callee.
        public var repeatedProvisionals = 0.0
        /// How a peer answers an in-dialog OPTIONS (a node's stack: 200; a phone may say 405
        /// or 501, a proxy on the way 403, 404 or 503).
        public var optionsAnswer = 200
        /// Whether a re-INVITE is answered 100 Trying first, as sofia-sip's stack does.
        public var trying = false
        /// Ticks between a stack taking a message (or ending a transaction) and its node hearing
        /// of it, in order: sofia-sip does its part on its own thread and reports through a
        /// queue, so a node can decide (send a 200, refuse the call) after its stack has
        /// already taken the peer's CANCEL, and hear of it after.
        public var reportLag = 0
        public init() {}
    }

    /// What a SIP peer other than a node sends into a dialog: a phone's DTMF digit as INFO
    /// (`application/dtmf-relay`), a session refresh (an UPDATE without a body, which the
    /// refresher's stack sends at half the session interval).
    public enum PeerRequest: Sendable, Equatable {
        case info(digit: Character)
        case refresh
        /// An UPDATE with a new offer for the running call (RFC 3311): a phone that switches
        /// to fax offers T.38 and no audio (``faxOffer``), which a call node cannot take.
        case reoffer(sdp: String)
    }

    /// A phone's offer to switch the call to fax (T.38 over UDPTL, no audio): what a call
    /// node has to refuse while the call goes on.
    public static let faxOffer = [
        "v=0", "o=- 4 5 IN IP4 192.0.2.40", "s=-", "c=IN IP4 192.0.2.40", "t=0 0",
        "m=image 40000 udptl t38", "a=T38FaxVersion:0", "a=T38FaxRateManagement:transferredTCF", "",
    ].joined(separator: "\r\n")

    /// A SIP phone at a node's address, where the network plays the phone's part on the wire
    /// (the node behind it still decides the rest): named by the user part of the address a
    /// caller calls (`sip:answers-at-once@b.sim:5060`), so each call says its own. Any other
    /// user part reaches the node as it is.
    public enum Phone: String, Sendable, CaseIterable {
        /// Answers without ringing first: no 180 (an auto-answering phone, a voicemail).
        case answersAtOnce = "answers-at-once"
        /// Takes no SRTP: an encrypted offer is refused with 488 at once; a plain one reaches
        /// the node.
        case refusesSRTP = "no-srtp"
        /// Takes no SRTP, and says so after ringing (180, then 488).
        case refusesSRTPAfterRinging = "no-srtp-after-ringing"
        /// Rings, then answers in a 183 with a codec the caller did not offer (G.729), as a
        /// broken gateway does, and waits: the caller cannot take the answer and cancels.
        case answersAnotherCodec = "another-codec"

        /// The 183's answer of ``answersAnotherCodec``.
        static let anotherCodecAnswer = [
            "v=0", "o=- 7 7 IN IP4 192.0.2.41", "s=-", "c=IN IP4 192.0.2.41", "t=0 0",
            "m=audio 41000 RTP/AVP 18", "a=rtpmap:18 G729/8000", "a=sendrecv", "",
        ].joined(separator: "\r\n")

        /// The phone an address names (nil: a node's own address).
        init?(calling uri: String) {
            let user = InMemorySIPNetwork.bare(uri).drop { $0 != ":" }.dropFirst().split(separator: "@", maxSplits: 1)
            guard user.count == 2 else { return nil }
            self.init(rawValue: String(user[0]))
        }

        var refusesSRTP: Bool { self == .refusesSRTP || self == .refusesSRTPAfterRinging }

        /// Whether an SDP offers its audio encrypted (SRTP's profiles, SDES's or DTLS's).
        static func offersSRTP(_ sdp: String) -> Bool {
            sdp.split(whereSeparator: \.isNewline).contains { $0.hasPrefix("m=audio") && $0.contains("SAVP") }
        }
    }

    let state: Locked<State>

    public init(seed: UInt64 = 1, conditions: Conditions = .init()) {
        state = Locked(State(random: SplitMix64(seed: seed | 1), conditions: conditions))
    }

    public func start(address: String, from: String) async throws(SIPError) -> any SIPStack {
        let key = Self.hostPort(address)
        let (events, continuation) = AsyncStream.makeStream(of: SIPEvent.self)
        let stack = InMemorySIPStack(network: self, key: key, events: events)
        let refused = state.withLock { s -> Bool in
            if let running = s.endpoints[key], !running.stopped, !running.crashed { return true }
            s.generation += 1
            s.endpoints[key] = Endpoint(generation: s.generation, uri: Self.bare(from), continuation: continuation)
            stack.generation = s.generation
            return false
        }
        if refused { throw SIPError("\(address) is taken on this in-memory SIP network") }
        return stack
    }

    /// One tick: what is due arrives, transactions past their time fail.
    public func advance() {
        let yields = state.withLock { s -> [Yield] in
            s.tick += 1
            var out: [Yield] = []
            let ended = s.endings.filter { $0.due <= s.tick }
            s.endings.removeAll { $0.due <= s.tick }
            for ending in ended { s.terminate(ending.side, into: &out) }
            var kept: [Message] = []
            let due = s.queue.filter { $0.due <= s.tick }.sorted { ($0.due, $0.order) < ($1.due, $1.order) }
            kept = s.queue.filter { $0.due > s.tick }
            s.queue = []
            for message in due {
                if s.unreachable.contains(message.from.key) || s.unreachable.contains(message.toKey) {
                    // Retransmitted until it gets through or its transaction gives up.
                    if s.tick - message.sent < s.conditions.timeout {
                        var again = message
                        again.due = s.tick + 1
                        kept.append(again)
                    }
                    continue
                }
                s.deliver(message, into: &out)
            }
            s.queue += kept
            s.expire(into: &out)
            return s.report(out)
        }
        Self.flush(yields)
    }

    /// Makes the stack at `address` unreachable (its messages, and messages to it, wait and are
    /// retransmitted until their transactions give up) or reachable again.
    public func setReachable(_ address: String, _ reachable: Bool) {
        let key = Self.hostPort(address)
        state.withLock { if reachable { $0.unreachable.remove(key) } else { $0.unreachable.insert(key) } }
    }

    /// The stack at `address` dies with its process: it sends nothing more, and its port is
    /// closed (requests to it fail at once with a local 503, as an ICMP error makes them).
    public func crash(_ address: String) {
        let key = Self.hostPort(address)
        state.withLock { s in
            s.endpoints[key]?.crashed = true
            s.queue.removeAll { $0.from.key == key }
        }
    }

    /// The session refresh of `call` at `address` is lost: its stack ends the session (a BYE it
    /// sends itself, reported as ``SIPEvent/Kind/sessionExpired``). False if the call is not up.
    @discardableResult
    public func expireSession(at address: String, call: Int) -> Bool {
        let key = Self.hostPort(address)
        let (done, yields) = state.withLock { s -> (Bool, [Yield]) in
            var out: [Yield] = []
            guard let leg = s.leg(key, call), leg.confirmed, !leg.byeSent, !leg.terminated else { return (false, out) }
            s.emit(key, call, SIPEvent(kind: .sessionExpired, status: 408, phrase: "the session refresh was lost (its timer ran out)"), into: &out)
            s.sendBye(key, call)
            return (true, s.report(out))
        }
        Self.flush(yields)
        return done
    }

    /// Whether the next tick (``advance()``) tells the node at `address` of its peer's BYE or
    /// CANCEL of `call`: the message arrives then (and its stack reports it at once), or it
    /// arrived ``Conditions/reportLag`` ticks before. What a step that acts as the peer's end
    /// reaches the node waits for.
    public func endArrives(at address: String, call: Int) -> Bool {
        let key = Self.hostPort(address)
        return state.withLock { s in
            func isEnd(_ kind: SIPEvent.Kind) -> Bool { kind == .bye || kind == .cancel }
            if s.conditions.reportLag > 0 {
                // (The stack may have ended the dialog already: the node hears of it later.)
                return s.reports.contains { $0.due <= s.tick + 1 && $0.yield.key == key && $0.yield.event.call == call && isEnd($0.yield.event.kind) }
            }
            guard let leg = s.leg(key, call), !leg.terminated else { return false }
            return s.queue.contains { message in
                guard message.due <= s.tick + 1, message.toKey == key, message.dialog == leg.dialog,
                      !s.unreachable.contains(key), !s.unreachable.contains(message.from.key) else { return false }
                switch message.payload {
                case .bye: return true
                case let .cancel(transaction): return leg.serverInvite == transaction && !leg.confirmed
                default: return false
                }
            }
        }
    }

    /// The peer of `call` at `address` sends `request` in their dialog, over the wire: it takes
    /// the wire's time and meets the dialog as it is by then (ringing, up, or ending). Its answer
    /// stays with the peer's stack. False if the call has no dialog with a peer.
    @discardableResult
    public func peerSends(_ request: PeerRequest, to address: String, call: Int) -> Bool {
        let key = Self.hostPort(address)
        return state.withLock { s -> Bool in
            guard let leg = s.leg(key, call), !leg.terminated, let peer = s.peer(leg) else { return false }
            let payload: Payload = switch request {
            case let .info(digit): .info(body: "Signal=\(digit)\r\nDuration=160\r\n")
            case .refresh: .update(sdp: nil)
            case let .reoffer(sdp): .update(sdp: sdp)
            }
            s.send(from: peer, to: s.side(key, call), toKey: key, dialog: leg.dialog, payload)
            return true
        }
    }

    /// How a node answered an UPDATE of its peer's (``PeerRequest/refresh``, ``PeerRequest/reoffer(sdp:)``).
    public struct UpdateAnswer: Sendable, Equatable {
        /// The answering node's stack and its id for the call.
        public let address: String
        public let call: Int
        public let status: Int
    }

    /// The answers to the peers' UPDATEs so far, oldest first.
    public var updateAnswers: [UpdateAnswer] { state.withLock { $0.updateAnswers } }

    /// Breaches of the wire's rules seen so far (a second final response to an INVITE, an INVITE
    /// sent while the side's last one was unanswered).
    public var problems: [String] { state.withLock { $0.problems } }

    /// Dialogs still up on a side whose stack runs, and INVITE transactions without a final
    /// response at a running client.
    public func openDialogs() -> [String] {
        state.withLock { s in
            var open: [String] = []
            for (key, endpoint) in s.endpoints.sorted(by: { $0.key < $1.key }) where !endpoint.crashed && !endpoint.stopped {
                for (call, leg) in endpoint.legs.sorted(by: { $0.key < $1.key }) where !leg.terminated {
                    open.append("dialog \(leg.dialog) (call \(call) at \(key)) is still up")
                }
            }
            for (id, transaction) in s.transactions.sorted(by: { $0.key < $1.key }) where transaction.finals == 0 {
                guard let endpoint = s.endpoints[transaction.client.key], endpoint.generation == transaction.client.generation,
                      !endpoint.crashed, !endpoint.stopped, let leg = endpoint.legs[transaction.client.call], !leg.terminated else { continue }
                open.append("INVITE transaction \(id) of dialog \(transaction.dialog) has no final response")
            }
            return open
        }
    }

    /// The other side of `call` at `address`: its stack's address and its id for the call
    /// (nil while the INVITE has not arrived).
    public func peer(of address: String, call: Int) -> (address: String, call: Int)? {
        let key = Self.hostPort(address)
        return state.withLock { s in
            guard let leg = s.leg(key, call), let dialog = s.dialogs[leg.dialog] else { return nil }
            let other = leg.caller ? dialog.callee : dialog.caller
            return other.map { (s.endpoints[$0.key]?.uri ?? $0.key, $0.call) }
        }
    }

    /// INVITE transactions (first and re-INVITEs), dialogs begun, and requests that crossed
    /// one of the peer's in flight, so far.
    public var counts: (invites: Int, dialogs: Int, crossings: Int) {
        state.withLock { ($0.transactions.count, $0.dialogs.count, $0.crossings) }
    }

    // MARK: The stacks' requests

    func perform(_ key: String, _ body: (inout State, inout [Yield]) -> Void) {
        let yields = state.withLock { s -> [Yield] in
            var out: [Yield] = []
            guard let endpoint = s.endpoints[key], !endpoint.crashed, !endpoint.stopped else { return out }
            body(&s, &out)
            return s.report(out)
        }
        Self.flush(yields)
    }

    func stop(_ key: String, generation: Int) {
        let continuation = state.withLock { s -> AsyncStream<SIPEvent>.Continuation? in
            guard let endpoint = s.endpoints[key], endpoint.generation == generation, !endpoint.stopped else { return nil }
            s.endpoints[key]!.stopped = true
            return endpoint.continuation
        }
        guard let continuation else { return }
        continuation.yield(SIPEvent(kind: .shutdown, status: 200, phrase: "stopped"))
        continuation.finish()
    }

    struct Yield {
        /// The endpoint told.
        let key: String
        let continuation: AsyncStream<SIPEvent>.Continuation
        let event: SIPEvent
    }

    private static func flush(_ yields: [Yield]) {
        for yield in yields { yield.continuation.yield(yield.event) }
    }

    /// `host:port` of a SIP URI (`sip:user@host:port;params`, in angle brackets or not).
    static func hostPort(_ uri: String) -> String {
        let bare = bare(uri)
        let afterScheme = bare.drop { $0 != ":" }.dropFirst()
        let hostPart = afterScheme.split(separator: "@", maxSplits: 1).last ?? afterScheme
        return String(hostPart.prefix { $0 != ";" && $0 != "?" && $0 != ">" }).lowercased()
    }

    static func bare(_ uri: String) -> String {
        var text = Substring(uri)
        if let open = text.firstIndex(of: "<"), let close = text.firstIndex(of: ">") { text = text[text.index(after: open)..<close] }
        return String(text)
    }
}

/// One node's SIP stack on an ``InMemorySIPNetwork``.
final class InMemorySIPStack: SIPStack, @unchecked Sendable {  // `generation` is set once, before the stack is handed out
    let events: AsyncStream<SIPEvent>
    private let network: InMemorySIPNetwork
    private let key: String
    var generation = 0

    init(network: InMemorySIPNetwork, key: String, events: AsyncStream<SIPEvent>) {
        self.network = network
        self.key = key
        self.events = events
    }

    func newCall() -> Int {
        var id = 0
        network.perform(key) { s, _ in id = s.newCall(key) }
        return id
    }

    func invite(_ call: Int, to uri: String?, displayName: String?, sdp: String?) {
        network.perform(key) { s, out in s.invite(key, call, to: uri, displayName: displayName, sdp: sdp, referring: nil, replaces: nil, into: &out) }
    }

    func invite(_ call: Int, to uri: String, displayName: String?, sdp: String?, referring: Int, replaces: String?) {
        network.perform(key) { s, out in
            s.invite(key, call, to: uri, displayName: displayName, sdp: sdp, referring: referring, replaces: replaces, into: &out)
        }
    }

    func respondToRefer(_ call: Int, status: Int, phrase: String?) {
        network.perform(key) { s, _ in s.respondToRefer(key, call, status: status, phrase: phrase) }
    }

    func refer(_ call: Int, to target: String) {
        network.perform(key) { s, _ in s.refer(key, call, to: target) }
    }

    func refer(_ call: Int, to target: String, replacing: Int) {
        network.perform(key) { s, _ in
            guard let dialog = s.leg(key, replacing)?.dialog else { return }
            s.refer(key, call, to: "\(target)?Replaces=\(InMemorySIPNetwork.State.replacesPrefix)\(dialog)")
        }
    }

    func respond(_ call: Int, status: Int, phrase: String?, sdp: String?, retryAfter: Int?) {
        network.perform(key) { s, out in s.respond(key, call, status: status, phrase: phrase, sdp: sdp, into: &out) }
    }

    func respondToUpdate(_ call: Int, status: Int, phrase: String?, sdp: String?) {
        // Nodes send no UPDATE: the peer's stack only keeps the answer, for the tests to read.
        network.perform(key) { s, _ in s.updateAnswers.append(InMemorySIPNetwork.UpdateAnswer(address: key, call: call, status: status)) }
    }

    func setAvailability(status: Int, retryAfter: Int?) {}

    func options(_ call: Int) {
        network.perform(key) { s, _ in s.request(key, call, { .options(transaction: $0) }, .options) }
    }

    func bye(_ call: Int) {
        network.perform(key) { s, _ in s.sendBye(key, call) }
    }

    func cancel(_ call: Int) {
        network.perform(key) { s, _ in s.cancel(key, call) }
    }

    func register(_ addressOfRecord: String, at registrar: String, user: String, password: String, expires: Int, keepAlive: Duration?) {
        // No registrar on this network.
    }

    func stop() async {
        network.stop(key, generation: generation)
    }
}
