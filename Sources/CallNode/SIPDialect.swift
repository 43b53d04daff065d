import Foundation
import Logging
import SIP

/// SIP as a dialect of the call core: one call's signals as a SIP dialog on the node's
/// ``SIPAgent`` (sofia-sip). The caller's offer goes in its INVITE, the callee's answer in its
/// 200 OK; 180 rings; holds and restarts are re-INVITEs; BYE and CANCEL end; refusals are
/// 486, 603, 480, 403; a final failure from the peer ends the call with its status.
///
/// SIP has no trickle: the SDP of the INVITE and of the 200 OK carries every candidate, so the
/// first offer or answer waits here until the call's gathering ends and goes out with the
/// candidates that came after it. An INVITE without SDP (a delayed offer) is answered with the
/// callee's offer in the 200 OK, and the caller's answer comes in the ACK.
actor SIPDialect: CallDialect {
    nonisolated let traits: DialectTraits
    private let agent: SIPAgent
    /// The call's id at the agent.
    nonisolated let sipCall: Int
    private let outgoing: Bool
    /// Outgoing: whom to call (a `sip:` URI).
    private let uri: String?
    private let logger: Logger
    private let closed: @Sendable (Int, Bool) async -> Void
    private var call: DialectCall?
    /// What arrived before the call started (an INVITE's offer).
    private var early: [CallSignal] = []
    private var displayName: String?
    /// The INVITE went out (outgoing).
    private var invited = false
    /// The dialog is established: a 2xx was sent or received.
    private var established = false
    /// The peer said it rings (outgoing): said to the call once.
    private var rang = false
    /// Over: nothing more goes out or in.
    private var ended = false
    /// An offer or answer waiting for the end of its candidates.
    private var pending: Pending?
    /// Outgoing: the last INVITE carried no offer (the answer goes in the ACK).
    private var offerInAnswer = false

    private struct Pending {
        enum Kind { case invite, ok, reinvite }
        var kind: Kind
        var sdp: String
        var candidates: [String] = []
    }

    init(agent: SIPAgent, call sipCall: Int, outgoing: Bool, uri: String?, traits: DialectTraits, logger: Logger,
         closed: @escaping @Sendable (Int, Bool) async -> Void) {
        self.traits = traits
        self.agent = agent
        self.sipCall = sipCall
        self.outgoing = outgoing
        self.uri = uri
        self.logger = logger
        self.closed = closed
    }

    // MARK: - The call's side

    func start(_ call: DialectCall) {
        self.call = call
        for signal in early { call.received(signal) }
        early = []
    }

    func dial() {
        // The dialog starts with the INVITE, which waits for the offer: the wire is "up".
        call?.signalingUp(peer: nil)
    }

    func send(_ signal: CallSignal) {
        guard !ended else { return }
        switch signal {
        case let .invite(invitation):
            displayName = invitation.displayName
        case let .offer(sdp):
            if outgoing && !invited {
                pending = Pending(kind: .invite, sdp: sdp)
            } else if established {
                // A hold or resume, or an ICE restart: its SDP has what the call has now.
                agent.invite(sipCall, sdp: Self.adding([], to: sdp))
            } else {
                // The INVITE came without an offer: the callee's goes in its 200 OK.
                pending = Pending(kind: .ok, sdp: sdp)
            }
        case let .answer(sdp):
            if established {
                agent.respond(sipCall, status: 200, sdp: Self.adding([], to: sdp))  // to a re-INVITE
            } else if !outgoing {
                pending = Pending(kind: .ok, sdp: sdp)
            } else {
                logger.info("SIP call \(sipCall): an answer with no offer to answer (dropped)")
            }
        case let .candidates(lines, end):
            guard var waiting = pending else { return }  // SIP has no trickle after the SDP
            waiting.candidates += lines
            pending = waiting
            if end { flush() }
        case .ringing:
            if !outgoing && !established { agent.respond(sipCall, status: 180, phrase: "Ringing") }
        case let .reject(reason):
            guard !outgoing, !established else { return }
            let (status, phrase) = Self.status(for: reason)
            agent.respond(sipCall, status: status, phrase: phrase, retryAfter: reason == .draining ? Self.drainingRetryAfter : nil)
            ended = true
        case let .end(reason):
            ended = true
            if established {
                agent.bye(sipCall)
            } else if outgoing {
                if invited { agent.cancel(sipCall) }
            } else {
                let (status, phrase) = Self.status(for: reason)
                agent.respond(sipCall, status: status, phrase: phrase)
            }
        case .error, .keepAlive:
            break  // SIP dialogs carry neither; failures end with their status
        }
    }

    /// The offer or answer goes out with its candidates, now the call's gathering has ended.
    private func flush() {
        guard let waiting = pending else { return }
        pending = nil
        let sdp = Self.adding(waiting.candidates, to: waiting.sdp)
        switch waiting.kind {
        case .invite:
            guard let uri else { return }
            invited = true
            agent.invite(sipCall, to: uri, displayName: displayName, sdp: sdp)
        case .ok:
            established = true
            agent.respond(sipCall, status: 200, sdp: sdp)
        case .reinvite:
            agent.invite(sipCall, sdp: sdp)
        }
    }

    func close() async {
        ended = true
        await closed(sipCall, !outgoing || invited)
    }

    // MARK: - The wire's side

    /// An event of this call's dialog, from the node's SIP router.
    func received(_ event: SIPEvent) {
        switch event.kind {
        case .invite:
            // A re-INVITE (the first one made the call): a new offer, or the peer asking for ours.
            guard let sdp = event.sdp else {
                agent.respond(sipCall, status: 488, phrase: "Not Acceptable Here (a re-INVITE needs an offer)")
                return
            }
            deliver(.offer(sdp: sdp))
        case .response:
            responded(event)
        case .cancel, .bye:
            guard !ended else { return }
            ended = true
            deliver(.end(event.kind == .cancel ? Self.cancelReason(event.reason) : .hangup))
        case .ack:
            if let sdp = event.sdp { deliver(.answer(sdp: sdp)) }  // a delayed offer's answer
        case .terminated:
            guard !ended else { return }
            ended = true
            call?.signalingLost("the SIP dialog ended", resumable: false)
        case .info:
            // DTMF some phones send as INFO instead of RFC 4733 events (the stack answers 200).
            if let digit = Self.dtmfDigit(contentType: event.contentType, body: event.body) { call?.receivedDTMF(digit) }
        case .byeResponse, .error, .shutdown, .registration:
            break
        }
    }

    /// Why a caller cancelled (RFC 3326 `Reason: SIP;cause=…`): 200, another device answered;
    /// 600 or 603, another device declined; anything else (or none), the caller gave up.
    static func cancelReason(_ reason: String?) -> HangupReason {
        guard let reason, reason.uppercased().hasPrefix("SIP;") else { return .hangup }
        let cause = reason.split(separator: ";").first { $0.lowercased().hasPrefix("cause=") }?.dropFirst("cause=".count)
        switch cause.flatMap({ Int($0) }) {
        case 200: return .answeredElsewhere
        case 600, 603: return .declinedElsewhere
        default: return .hangup
        }
    }

    /// The digit of a DTMF INFO: `application/dtmf-relay` (`Signal=5`, `Duration=160`) or
    /// `application/dtmf` (`5`); `nil` for anything else.
    static func dtmfDigit(contentType: String?, body: String?) -> Character? {
        guard let type = contentType?.lowercased(), let body else { return nil }
        var value: Substring?
        if type.hasPrefix("application/dtmf-relay") {
            for line in body.split(whereSeparator: \.isNewline) {
                let parts = line.split(separator: "=", maxSplits: 1)
                if parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces).lowercased() == "signal" {
                    value = parts[1].drop { $0 == " " || $0 == "\t" }
                }
            }
        } else if type.hasPrefix("application/dtmf") {
            value = Substring(body.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        guard let text = value?.trimmingCharacters(in: .whitespaces).uppercased(), text.count == 1, let digit = text.first,
              "0123456789*#ABCD".contains(digit) else { return nil }
        return digit
    }

    private func responded(_ event: SIPEvent) {
        guard !ended else { return }
        switch event.status {
        case 100..<200:
            if event.status == 180 || event.status == 183, !rang {
                rang = true
                deliver(.ringing)
            }
        case 200..<300:
            let first = !established
            established = true
            guard let sdp = event.sdp else {
                if first { fail("the SIP peer answered without SDP") }
                return
            }
            deliver(.answer(sdp: sdp))
        default:
            if established {
                // A re-INVITE refused (491 when both offered at once): the call goes on as it was.
                logger.info("SIP call \(sipCall): the peer refused a re-INVITE: \(event.status) \(event.phrase)")
                return
            }
            ended = true
            switch event.status {
            case 486, 600: deliver(.reject(.busy))
            case 603: deliver(.reject(.declined))
            case 408, 503:
                // Also what the stack answers itself when nothing answered at that address or
                // its transport failed (a refused port, no route).
                fail("the SIP peer did not take the call: \(event.status) \(event.phrase) (it refused, or nothing answers at that address)")
            default:
                fail("the SIP peer answered \(event.status) \(event.phrase)")
            }
        }
    }

    private func fail(_ detail: String) {
        ended = true
        deliver(.error(detail))
        deliver(.end(.failed))
    }

    private func deliver(_ signal: CallSignal) {
        if let call { call.received(signal) } else { early.append(signal) }
    }

    // MARK: - Wire shapes

    /// The Retry-After (seconds) of a draining node's 503s: long enough for a dispatcher to
    /// leave it out for the rest of a rolling restart.
    static let drainingRetryAfter = 60
    /// The Retry-After of a full node's 503 to OPTIONS: a call may end any moment.
    static let fullRetryAfter = 5

    /// The SIP status a refusal or an unanswered call's end is told with. A full node is busy
    /// (486) to the caller; a draining one is unavailable (503 with Retry-After): a dispatcher
    /// moves on from both.
    static func status(for reason: RejectReason) -> (Int, String) {
        switch reason {
        case .busy: (486, "Busy Here")
        case .draining: (503, "Service Unavailable (draining)")
        case .declined: (603, "Decline")
        case .doNotDisturb: (480, "Temporarily Unavailable (do not disturb)")
        case .blocked: (403, "Forbidden")
        case .unknownCaller: (403, "Forbidden (unknown caller)")
        }
    }

    static func status(for reason: HangupReason) -> (Int, String) {
        switch reason {
        case .hangup: (487, "Request Terminated")
        case .failed: (488, "Not Acceptable Here")
        case .timeout: (480, "Temporarily Unavailable")
        case .shutdown: (503, "Service Unavailable")
        case .answeredElsewhere, .declinedElsewhere: (487, "Request Terminated")
        }
    }

    /// `sdp` with `candidates` added to its audio section (SIP carries them there, RFC 8839),
    /// the end of candidates said, and the default candidate on the `c=` and `m=` lines.
    static func adding(_ candidates: [String], to sdp: String) -> String {
        guard !candidates.isEmpty || sdp.contains("a=candidate:") else { return sdp }
        var lines = sdp.components(separatedBy: "\r\n")
        while lines.last?.isEmpty == true { lines.removeLast() }
        // One audio section: the candidates go at its end (after any earlier ones).
        let added = candidates.map { $0.hasPrefix("a=") ? $0 : "a=" + $0 }.filter { !lines.contains($0) }
        lines += added
        if !lines.contains("a=end-of-candidates") { lines.append("a=end-of-candidates") }
        return withDefaultCandidate(lines).joined(separator: "\r\n") + "\r\n"
    }

    /// A candidate's address and port from its `a=candidate:` line, with its component and type.
    private struct CandidateLine {
        let component: Int, address: String, port: Int, type: String

        init?(_ line: String) {
            // candidate:FOUNDATION COMPONENT TRANSPORT PRIORITY ADDRESS PORT typ TYPE …
            let fields = line.dropFirst("a=candidate:".count).split(separator: " ").map(String.init)
            guard line.hasPrefix("a=candidate:"), fields.count >= 8, fields[2].lowercased() == "udp", fields[6] == "typ",
                  let component = Int(fields[1]), let port = Int(fields[5]), !fields[4].hasSuffix(".local") else { return nil }
            (self.component, address, self.port, type) = (component, fields[4], port, fields[7])
        }
    }

    /// The `c=` line and the `m=` line's port name the default candidate (RFC 8839 §4.2.1.2):
    /// a SIP peer's ICE takes the offer as ICE only when the default destination is among the
    /// candidates (baresip answers a `c=0.0.0.0` / port 9 offer as one without ICE), and a peer
    /// without ICE sends there. The relayed candidate reaches the most peers, then the
    /// server-reflexive one, then a host address; RTCP's (`a=rtcp:`) is its component 2, or the
    /// same port when muxed.
    static func withDefaultCandidate(_ lines: [String]) -> [String] {
        let candidates = lines.compactMap(CandidateLine.init)
        let rank = ["relay": 0, "srflx": 1, "prflx": 2, "host": 3]
        func best(_ component: Int) -> CandidateLine? {
            candidates.filter { $0.component == component }.min { (rank[$0.type] ?? 4) < (rank[$1.type] ?? 4) }
        }
        guard let rtp = best(1) else { return lines }
        let rtcp = candidates.first { $0.component == 2 && $0.type == rtp.type } ?? best(2)
        let family = rtp.address.contains(":") ? "IP6" : "IP4"
        return lines.map { line in
            if line.hasPrefix("c=IN ") { return "c=IN \(family) \(rtp.address)" }
            if line.hasPrefix("m=audio ") {
                var fields = line.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
                fields[1] = String(rtp.port)
                return fields.joined(separator: " ")
            }
            if line.hasPrefix("a=rtcp:") {
                let target = rtcp ?? rtp
                return "a=rtcp:\(target.port) IN \(family) \(target.address)"
            }
            return line
        }
    }
}
