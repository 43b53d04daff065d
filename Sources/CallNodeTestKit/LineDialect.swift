import CallNode
import Foundation
import Locking

/// A tiny signaling dialect of the test kit: a call's signals as text lines on an in-memory
/// pipe. It proves the call core's dialect seam — a third wire beside node envelopes and the
/// call page — and is a model for an embedder's own (a serial line, a message bus).
///
/// Each line is a verb and a base64 payload (an invitation: its name and title, `-` for none):
/// `INVITE`, `RINGING`, `OFFER`, `ANSWER`, `EARLY` (an answer before the call is taken: early
/// media), `ACCEPTED` (the call whose answer came early is taken),
/// `CANDIDATES` (`+` before the payload: the last of them), `END`, `REJECT`, `ERROR`, `KEEPALIVE`.
/// A line that does not parse is answered with `ERROR` and changes nothing. Its calls cannot be
/// resumed: when the pipe closes, the call ends.
public actor LineDialect: CallDialect {
    public nonisolated let traits: DialectTraits
    private let end: LinePipe.End
    private var call: DialectCall?

    /// A dialect for one call on `end` (the caller's, or the callee's after ``LineListener``
    /// read its invitation). `firstOffer`: who offers first on this line (both ends must agree,
    /// as a wire's specification would say): the callee once it answers, or the caller right
    /// after its invitation, as SIP does.
    public init(_ end: LinePipe.End, firstOffer: FirstOffer = .byCallee, early: [CallSignal] = []) {
        self.end = end
        self.early = early
        traits = DialectTraits(peer: .other, resumable: false, firstOffer: firstOffer)
    }

    /// What the listener read before the call existed (the caller's offer after its invitation).
    private let early: [CallSignal]

    public func start(_ call: DialectCall) {
        self.call = call
        for signal in early { call.received(signal) }
        let end = self.end
        call.run {
            while let line = await end.receive() {
                switch LineDialect.decode(line) {
                case let .some(signal): call.received(signal)
                case .none: end.send(LineDialect.encode(.error("cannot read the line '\(line.prefix(40))'")))
                }
            }
            call.signalingLost("the line closed", resumable: false)
        }
    }

    public func dial() {
        call?.signalingUp(peer: nil)
    }

    public func send(_ signal: CallSignal) {
        end.send(Self.encode(signal))
    }

    public func close() {
        end.close()
    }

    /// A signal as one line.
    public static func encode(_ signal: CallSignal) -> String {
        func b64(_ text: String) -> String { Data(text.utf8).base64EncodedString() }
        return switch signal {
        case let .invite(invitation): "INVITE " + [invitation.displayName, invitation.title].map { $0.map(b64) ?? "-" }.joined(separator: " ")
        case .ringing: "RINGING"
        case let .offer(sdp): "OFFER " + b64(sdp)
        case let .answer(sdp): "ANSWER " + b64(sdp)
        case let .earlyAnswer(sdp): "EARLY " + b64(sdp)
        case .accepted: "ACCEPTED"
        case let .candidates(lines, last): "CANDIDATES " + (last ? "+" : "") + b64(lines.joined(separator: "\n"))
        case let .pathFound(path): "PATH \(path.ufrag) \(path.local.address) \(path.local.port) \(path.remote.address) \(path.remote.port)"
        case let .end(reason): "END " + reason.rawValue
        case let .reject(reason): "REJECT " + reason.rawValue
        case let .error(text): "ERROR " + b64(text)
        case .keepAlive: "KEEPALIVE"
        }
    }

    /// A line as a signal; nil for a line that does not parse.
    public static func decode(_ line: String) -> CallSignal? {
        let parts = line.split(separator: " ", maxSplits: 1).map(String.init)
        guard let verb = parts.first else { return nil }
        let payload = parts.count > 1 ? parts[1] : ""
        func text(_ b64: String) -> String? { Data(base64Encoded: b64).flatMap { String(data: $0, encoding: .utf8) } }
        switch verb {
        case "INVITE":
            let fields = payload.split(separator: " ").map(String.init)
            guard fields.count == 2 else { return nil }
            var values: [String?] = []
            for field in fields {
                if field == "-" { values.append(nil); continue }
                guard let value = text(field) else { return nil }
                values.append(value)
            }
            return .invite(CallInvitation(displayName: values[0], title: values[1]))
        case "RINGING": return .ringing
        case "OFFER": return text(payload).map { .offer(sdp: $0) }
        case "ANSWER": return text(payload).map { .answer(sdp: $0) }
        case "EARLY": return text(payload).map { .earlyAnswer(sdp: $0) }
        case "ACCEPTED": return .accepted
        case "CANDIDATES":
            let last = payload.hasPrefix("+")
            guard let body = text(last ? String(payload.dropFirst()) : payload) else { return nil }
            return .candidates(body.isEmpty ? [] : body.split(separator: "\n").map(String.init), end: last)
        case "PATH":
            let fields = payload.split(separator: " ").map(String.init)
            guard fields.count == 5, let localPort = Int(fields[2]), let remotePort = Int(fields[4]) else { return nil }
            return .pathFound(FoundPath(ufrag: fields[0], local: TransportAddress(address: fields[1], port: localPort),
                                        remote: TransportAddress(address: fields[3], port: remotePort)))
        case "END": return HangupReason(rawValue: payload).map { .end($0) }
        case "REJECT": return RejectReason(rawValue: payload).map { .reject($0) }
        case "ERROR": return text(payload).map { .error($0) }
        case "KEEPALIVE": return .keepAlive
        default: return nil
        }
    }
}

/// Two ends of an in-memory line: what one end sends, the other receives, in order.
public enum LinePipe {
    /// A pair of connected ends.
    public static func make() -> (End, End) {
        let a = End(), b = End()
        a.peer.withLock { $0 = b }
        b.peer.withLock { $0 = a }
        return (a, b)
    }

    /// One end of a line.
    public final class End: Sendable {
        struct State {
            var lines: [String] = []
            var waiter: CheckedContinuation<String?, Never>?
            var closed = false
        }

        private let state = Locked(State())
        fileprivate let peer = Locked<End?>(nil)

        /// Sends a line to the other end (nothing once either end closed).
        public func send(_ line: String) {
            guard let other = peer.withLock({ $0 }) else { return }
            other.deliver(line)
        }

        private func deliver(_ line: String) {
            let waiter = state.withLock { state -> CheckedContinuation<String?, Never>? in
                guard !state.closed else { return nil }
                if let waiter = state.waiter {
                    state.waiter = nil
                    return waiter
                }
                state.lines.append(line)
                return nil
            }
            waiter?.resume(returning: line)
        }

        /// The next line, or nil once the line closed (or the waiting task was cancelled).
        public func receive() async -> String? {
            await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<String?, Never>) in
                    let ready = state.withLock { state -> String?? in
                        if !state.lines.isEmpty { return .some(state.lines.removeFirst()) }
                        if state.closed || Task.isCancelled { return .some(nil) }
                        state.waiter = continuation
                        return .none
                    }
                    if let ready { continuation.resume(returning: ready) }
                }
            } onCancel: {
                shut()
            }
        }

        /// A line that has arrived, without waiting (nil: none yet).
        public func poll() -> String? {
            state.withLock { state in state.lines.isEmpty ? nil : state.lines.removeFirst() }
        }

        /// Closes the line: both ends' readers see its end.
        public func close() {
            let other = peer.withLock { peer -> End? in
                defer { peer = nil }
                return peer
            }
            shut()
            other?.shut()
        }

        private func shut() {
            let waiter = state.withLock { state -> CheckedContinuation<String?, Never>? in
                state.closed = true
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume(returning: nil)
        }
    }
}

/// The callee's side of ``LineDialect``: takes new lines, reads each one's invitation and hands
/// the call to the node's admission.
public enum LineListener {
    /// Reads `end`'s first line; an invitation becomes a call admitted by `node` from `handle`.
    /// Anything else is refused with `ERROR` and the line is closed. Returns the call's UUID,
    /// or nil when there was none.
    @discardableResult
    public static func accept(_ end: LinePipe.End, from handle: String, on node: CallNode,
                              firstOffer: FirstOffer = .byCallee) async -> UUID? {
        guard let first = await end.receive() else { return nil }
        guard case let .invite(invitation) = LineDialect.decode(first) else {
            end.send(LineDialect.encode(.error("the first line of a call must be its invitation")))
            end.close()
            return nil
        }
        // Where the caller offers, its offer is part of the invitation: read with it, so the
        // call has it before anyone answers.
        var early: [CallSignal] = []
        if firstOffer == .byCaller, let next = await end.receive() {
            if let signal = LineDialect.decode(next) { early.append(signal) }
        }
        return await node.admit(LineDialect(end, firstOffer: firstOffer, early: early), handle: handle, invitation: invitation)
    }
}
