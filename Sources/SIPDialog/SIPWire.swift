import CallCore
import Foundation
import SDP

/// How the call's terms read and are written on SIP's wire: statuses for refusals and ends,
/// a CANCEL's Reason, DTMF in INFO bodies, ICE candidates in the SDP. Plain functions of text.
public enum SIPWire {
    /// The Retry-After (seconds) of a draining node's 503s: long enough for a dispatcher to
    /// leave it out for the rest of a rolling restart.
    public static let drainingRetryAfter = 60
    /// The Retry-After of a full node's 503 to OPTIONS: a call may end any moment.
    public static let fullRetryAfter = 5

    /// The SIP status a refusal is told with. A full node is busy (486) to the caller; a
    /// draining one is unavailable (503 with Retry-After): a dispatcher moves on from both.
    public static func status(for reason: RejectReason) -> (Int, String) {
        switch reason {
        case .busy: (486, "Busy Here")
        case .draining: (503, "Service Unavailable (draining)")
        case .declined: (603, "Decline")
        case .doNotDisturb: (480, "Temporarily Unavailable (do not disturb)")
        case .blocked: (403, "Forbidden (blocked)")
        case .unknownCaller: (403, "Forbidden (unknown caller)")
        }
    }

    /// The final status an unanswered incoming call's end is told with.
    public static func status(for reason: HangupReason) -> (Int, String) {
        switch reason {
        case .hangup: (487, "Request Terminated")
        case .failed: (488, "Not Acceptable Here")
        case .timeout: (480, "Temporarily Unavailable")
        case .shutdown: (503, "Service Unavailable")
        case .answeredElsewhere, .declinedElsewhere: (487, "Request Terminated")
        }
    }

    /// The final status an unanswered incoming call that failed here is told with (`detail`:
    /// the failure as the call said it): 488 when the caller's offer could not be taken (its
    /// SDP did not parse or could not be agreed), 500 for a failure of this node's own (ICE,
    /// media, a device). A 488 tells a caller that offered SRTP to offer plain RTP instead: a
    /// failure of ours must not make it drop its encryption.
    public static func status(forFailure detail: String?) -> (Int, String) {
        guard let detail, detail.hasPrefix(NegotiationError.prefix) || detail.hasPrefix(SDPParseError.prefix) else {
            return (500, "Server Internal Error (the call failed here)")
        }
        return status(for: .failed)
    }

    /// Why a caller cancelled (RFC 3326 `Reason: SIP;cause=…`): 200, another device answered;
    /// 600 or 603, another device declined; anything else (or none), the caller gave up.
    public static func cancelReason(_ reason: String?) -> HangupReason {
        guard let reason else { return .hangup }
        let parts = reason.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
        guard parts.first?.uppercased() == "SIP" else { return .hangup }
        let cause = parts.dropFirst().first { $0.lowercased().hasPrefix("cause=") }?.dropFirst("cause=".count)
        switch cause.flatMap({ Int($0) }) {
        case 200: return .answeredElsewhere
        case 600, 603: return .declinedElsewhere
        default: return .hangup
        }
    }

    /// The digit of a DTMF INFO: `application/dtmf-relay` (`Signal=5`, `Duration=160`) or
    /// `application/dtmf` (`5`); `nil` for anything else.
    public static func dtmfDigit(contentType: String?, body: String?) -> Character? {
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

    /// `sdp` with `candidates` added to its audio section (SIP carries them there, RFC 8839),
    /// the end of candidates said, and the default candidate on the `c=` and `m=` lines.
    public static func adding(_ candidates: [String], to sdp: String) -> String {
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
