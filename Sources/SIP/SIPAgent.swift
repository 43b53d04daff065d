import CSofiaShim
import Foundation
import Locking
import POSIX

/// What a SIP agent hears, in Swift's terms (copied out of the stack's thread).
public struct SIPEvent: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// An INVITE: a new call (an id the agent has not named before) or a re-INVITE.
        case invite
        /// A response to an INVITE this agent sent.
        case response
        /// The caller cancelled its INVITE.
        case cancel
        /// The peer ended the call.
        case bye
        /// The ACK to this agent's final response.
        case ack
        /// The call is over; its id names nothing any more.
        case terminated
        /// An INFO within the call.
        case info
        /// The response to this agent's BYE.
        case byeResponse
        /// Something in the stack failed.
        case error
        /// The agent has stopped.
        case shutdown
        /// A registration's outcome: 2xx registered for ``SIPEvent/expires`` seconds (0:
        /// unregistered), anything else failed. Challenges are answered, not reported.
        case registration
        /// An UPDATE in the call (RFC 3311), with its offer as the body if it has one: answered
        /// with ``SIPAgent/respondToUpdate(_:status:phrase:sdp:)``.
        case update
        /// The stack ended the session itself: its session timer ran out (RFC 4028), or the
        /// peer refused or never answered a refresh. ``SIPEvent/phrase`` says so.
        case sessionExpired
        /// The response to ``SIPAgent/options(_:)``; ``SIPEvent/local`` when this side's stack
        /// made it (the request could not be delivered, or nothing answered).
        case optionsResponse
        /// A REFER in the call (RFC 3515: a transfer): ``SIPEvent/body`` its Refer-To (a URI,
        /// with `?Replaces=…` if it names a dialog), ``SIPEvent/fromURI`` who referred. Answered
        /// with ``SIPAgent/respondToRefer(_:status:phrase:)``.
        case refer
        /// The final response to this side's ``SIPAgent/refer(_:to:)``.
        case referResponse
        /// A NOTIFY of this side's REFER: the transferee's new call's progress, its body a
        /// `message/sipfrag` status line (`SIP/2.0 200 OK`). The stack answers it.
        case notify
    }

    public var kind: Kind
    public var status: Int
    public var phrase: String
    public var call: Int
    public var fromURI: String?
    public var fromDisplay: String?
    public var toURI: String?
    public var callID: String?
    public var contentType: String?
    public var body: String?
    /// The Reason header (`SIP;cause=200;text=…`), when there was one.
    public var reason: String?
    /// A registration's granted lifetime in seconds (0 when it was removed or failed).
    public var expires = 0
    /// A response this side's stack made itself rather than one received (a transport error,
    /// a timeout).
    public var local = false
    /// A new INVITE with Replaces (RFC 3891: an attended transfer's): the id of the call here
    /// it replaces (one naming no call here was refused with 481 by the agent).
    public var replaces: Int?

    public init(kind: Kind, status: Int = 0, phrase: String = "", call: Int = 0, fromURI: String? = nil, fromDisplay: String? = nil,
                toURI: String? = nil, callID: String? = nil, contentType: String? = nil, body: String? = nil, reason: String? = nil) {
        self.kind = kind
        self.status = status
        self.phrase = phrase
        self.call = call
        self.fromURI = fromURI
        self.fromDisplay = fromDisplay
        self.toURI = toURI
        self.callID = callID
        self.contentType = contentType
        self.body = body
        self.reason = reason
    }

    /// The body, if it is SDP.
    public var sdp: String? {
        guard let body, contentType?.lowercased().hasPrefix("application/sdp") ?? false else { return nil }
        return body
    }
}

/// Why a SIP agent could not start.
public struct SIPError: Error, Sendable, Equatable, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// A SIP user agent: sofia-sip's stack on a thread of its own, behind the C shim. Requests go
/// to that thread and return at once; what happens comes back as ``events``. SDP passes through
/// as text: the node negotiates media itself.
///
/// Calls are named by ids: ``newCall()`` for an outgoing one, the agent's own for incoming
/// INVITEs. OPTIONS, and the answers to CANCEL and BYE, the stack gives itself.
public final class SIPAgent: Sendable {
    /// Everything the agent hears, in order, until it has stopped.
    public let events: AsyncStream<SIPEvent>
    private let handle: Handle
    private let stopped = Locked(false)

    /// The C agent's pointer, used from any thread through the shim's thread-safe calls.
    private struct Handle: @unchecked Sendable {  // the shim's calls only queue work for its own thread (csip.h)
        let pointer: OpaquePointer
    }

    /// The sink's address as the C side holds it (it is released only after the last event).
    private struct Context: @unchecked Sendable {  // an address the C side holds; read only on the agent's thread
        let pointer: UnsafeMutableRawPointer
    }

    /// The continuation events go to, kept alive for the C side until the agent stops.
    private final class Sink: Sendable {
        let continuation: AsyncStream<SIPEvent>.Continuation
        init(_ continuation: AsyncStream<SIPEvent>.Continuation) { self.continuation = continuation }
    }

    private init(handle: Handle, events: AsyncStream<SIPEvent>) {
        self.handle = handle
        self.events = events
    }

    /// Starts an agent that listens at `url` (`sip:127.0.0.1:5062`; UDP and TCP) and, with
    /// `tls` (`sips:127.0.0.1:5063` and a directory holding `agent.pem` and `cafile.pem`),
    /// over TLS. Calls go out from `from` (`"name" <sip:user@host>`).
    ///
    /// - Throws: ``SIPError`` when it cannot listen there.
    public static func start(listening url: String, tls: (url: String, certificateDirectory: String)? = nil,
                             from: String, userAgent: String = "CallNode") async throws(SIPError) -> SIPAgent {
        let (events, continuation) = AsyncStream.makeStream(of: SIPEvent.self)
        let sink = Unmanaged.passRetained(Sink(continuation))
        let context = Context(pointer: UnsafeMutableRawPointer(sink.toOpaque()))
        // Binding the transports waits for the stack's thread: not on the cooperative pool.
        let started = try? await SystemThread.run(name: "callnode-sip-start") { () -> Result<Handle, SIPError> in
                var error = [CChar](repeating: 0, count: 512)
                let pointer = csip_start(url, tls?.url, tls?.certificateDirectory, from, userAgent, { context, event in
                    guard let context, let event else { return }
                    let sink = Unmanaged<Sink>.fromOpaque(context).takeUnretainedValue()
                    let copied = SIPAgent.copy(event.pointee)
                    sink.continuation.yield(copied)
                    if copied.kind == .shutdown {
                        sink.continuation.finish()
                        Unmanaged<Sink>.fromOpaque(context).release()
                    }
                }, context.pointer, &error, error.count)
                if let pointer { return .success(Handle(pointer: pointer)) }
                let text = error.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
                return .failure(SIPError(String(decoding: text, as: UTF8.self)))
        }
        switch started ?? .failure(SIPError("no thread to start the SIP stack on")) {
        case let .success(handle):
            return SIPAgent(handle: handle, events: events)
        case let .failure(error):
            sink.release()
            continuation.finish()
            throw error
        }
    }

    private static func copy(_ event: csip_event) -> SIPEvent {
        func text(_ pointer: UnsafePointer<CChar>?) -> String? { pointer.map { String(cString: $0) } }
        let kind: SIPEvent.Kind = switch event.kind {
        case CSIP_EVENT_INVITE: .invite
        case CSIP_EVENT_RESPONSE: .response
        case CSIP_EVENT_CANCEL: .cancel
        case CSIP_EVENT_BYE: .bye
        case CSIP_EVENT_ACK: .ack
        case CSIP_EVENT_TERMINATED: .terminated
        case CSIP_EVENT_INFO: .info
        case CSIP_EVENT_BYE_RESPONSE: .byeResponse
        case CSIP_EVENT_SHUTDOWN: .shutdown
        case CSIP_EVENT_REGISTRATION: .registration
        case CSIP_EVENT_UPDATE: .update
        case CSIP_EVENT_SESSION_EXPIRED: .sessionExpired
        case CSIP_EVENT_OPTIONS_RESPONSE: .optionsResponse
        case CSIP_EVENT_REFER: .refer
        case CSIP_EVENT_REFER_RESPONSE: .referResponse
        case CSIP_EVENT_NOTIFY: .notify
        default: .error
        }
        var copied = SIPEvent(kind: kind, status: Int(event.status), phrase: text(event.phrase) ?? "", call: event.call,
                              fromURI: text(event.from_uri), fromDisplay: text(event.from_display), toURI: text(event.to_uri),
                              callID: text(event.call_id), contentType: text(event.content_type), body: text(event.body),
                              reason: text(event.reason))
        copied.expires = Int(event.expires)
        copied.local = event.local != 0
        copied.replaces = event.replaces > 0 ? Int(event.replaces) : nil
        return copied
    }

    /// A SIP request as the agent's transports would read it off the wire (sofia-sip's parser),
    /// with what the agent would report of it; `nil` for a response or bytes that do not parse.
    /// No agent is needed: it is how the path from the wire to a call is fuzzed.
    public static func parse(_ bytes: [UInt8]) -> (method: String, event: SIPEvent)? {
        guard !bytes.isEmpty else { return nil }
        final class Box { var event: SIPEvent? }
        let box = Unmanaged.passRetained(Box())
        defer { box.release() }
        let result = bytes.withUnsafeBufferPointer { buffer in
            buffer.withMemoryRebound(to: CChar.self) { text in
                csip_parse(text.baseAddress, text.count, { context, event in
                    guard let context, let event else { return }
                    Unmanaged<Box>.fromOpaque(context).takeUnretainedValue().event = SIPAgent.copy(event.pointee)
                }, box.toOpaque())
            }
        }
        guard result == 1, let event = box.takeUnretainedValue().event else { return nil }
        return (event.phrase, event)
    }

    /// An id for a new outgoing call.
    public func newCall() -> Int { csip_new_call(handle.pointer) }

    /// Sends an INVITE: a new call to `uri` (a `sip:` or `sips:` URI) from `displayName`, or,
    /// for a call that exists, a re-INVITE. `sdp` nil: an INVITE without an offer.
    public func invite(_ call: Int, to uri: String? = nil, displayName: String? = nil, sdp: String?) {
        guard !isStopped else { return }
        csip_invite(handle.pointer, call, uri, displayName ?? (uri == nil ? nil : ""), sdp)
    }

    /// Sends the INVITE of a new call placed because the peer of `referring` asked for it (a
    /// REFER answered 202): the stack reports the call's progress to that peer by NOTIFY.
    /// `replaces`: the Replaces header the Refer-To named (an attended transfer, RFC 3891).
    public func invite(_ call: Int, to uri: String, displayName: String?, sdp: String?, referring: Int, replaces: String?) {
        guard !isStopped else { return }
        csip_invite_referred(handle.pointer, call, uri, displayName ?? "", sdp, referring, replaces)
    }

    /// Responds to the call's pending REFER: `202` follows the transfer, `400` or `403` refuse it.
    public func respondToRefer(_ call: Int, status: Int, phrase: String? = nil) {
        guard !isStopped else { return }
        csip_respond_refer(handle.pointer, call, Int32(status), phrase)
    }

    /// Asks the call's peer to call `target` (a REFER: a blind transfer); the answer comes as a
    /// ``SIPEvent/Kind/referResponse`` event, the transfer's progress as ``SIPEvent/Kind/notify``.
    public func refer(_ call: Int, to target: String) {
        guard !isStopped else { return }
        csip_refer(handle.pointer, call, target)
    }

    /// An attended transfer: asks the call's peer to call `target` and replace `replacing` (this
    /// agent's call with the target) there, its Refer-To naming that dialog (RFC 3891).
    public func refer(_ call: Int, to target: String, replacing: Int) {
        guard !isStopped else { return }
        csip_refer_replacing(handle.pointer, call, target, replacing)
    }

    /// Responds to the call's INVITE: `180` rings, `200` answers (with `sdp`), `486`, `603`…;
    /// `retryAfter` adds a Retry-After header (a 503's "not now, in so many seconds").
    public func respond(_ call: Int, status: Int, phrase: String? = nil, sdp: String? = nil, retryAfter: Int? = nil) {
        guard !isStopped else { return }
        if let retryAfter {
            csip_respond_with_headers(handle.pointer, call, Int32(status), phrase, sdp, "Retry-After: \(max(0, retryAfter))")
        } else {
            csip_respond(handle.pointer, call, Int32(status), phrase, sdp)
        }
    }

    /// Responds to the call's pending UPDATE: `200` with the answer in `sdp`, or a refusal.
    public func respondToUpdate(_ call: Int, status: Int, phrase: String? = nil, sdp: String? = nil) {
        guard !isStopped else { return }
        csip_respond_update(handle.pointer, call, Int32(status), phrase, sdp)
    }

    /// What OPTIONS requests (a proxy's probes) are answered with from now on: 200 while the
    /// node takes calls, or `status` (503) with a Retry-After of `retryAfter` seconds while it is
    /// full or draining, so that a dispatcher sends calls elsewhere.
    public func setAvailability(status: Int, retryAfter: Int? = nil) {
        guard !isStopped else { return }
        csip_set_availability(handle.pointer, Int32(status), Int32(retryAfter ?? 0))
    }

    /// Sends an OPTIONS in the call's dialog: is the peer still there? The answer comes as a
    /// ``SIPEvent/Kind/optionsResponse`` event.
    public func options(_ call: Int) {
        guard !isStopped else { return }
        csip_options(handle.pointer, call)
    }

    /// Ends an established call.
    public func bye(_ call: Int) {
        guard !isStopped else { return }
        csip_bye(handle.pointer, call)
    }

    /// Cancels an outgoing call that has not been answered.
    public func cancel(_ call: Int) {
        guard !isStopped else { return }
        csip_cancel(handle.pointer, call)
    }

    /// Sends an INFO in the call.
    public func info(_ call: Int, contentType: String, body: String) {
        guard !isStopped else { return }
        csip_info(handle.pointer, call, contentType, body)
    }

    /// Registers `addressOfRecord` (`sip:alice@example.org`) at `registrar` (`sip:host:port`),
    /// which becomes the outbound proxy of every call from then on, calls coming from the
    /// address of record. Digest challenges of the REGISTER and of INVITEs are answered with
    /// `user` and `password`; the stack refreshes the binding before it expires. The outcome
    /// comes as a ``SIPEvent/Kind/registration`` event (and again at each refresh).
    ///
    /// `keepAlive`: how often an OPTIONS goes to the registrar to hold a NAT's binding open
    /// (RFC 5626 §4.4); `nil` never. A Contact the registrar saw from another address and port
    /// (received, rport) is registered again as that.
    public func register(_ addressOfRecord: String, at registrar: String, user: String, password: String, expires: Int,
                         keepAlive: Duration? = nil) {
        guard !isStopped else { return }
        let milliseconds = keepAlive.map { Int32(clamping: $0.components.seconds * 1000 + $0.components.attoseconds / 1_000_000_000_000_000) } ?? 0
        csip_register(handle.pointer, addressOfRecord, registrar, user, password, Int32(clamping: expires), milliseconds)
    }

    /// Removes the registration (a REGISTER with expires 0).
    public func unregister() {
        guard !isStopped else { return }
        csip_unregister(handle.pointer)
    }

    private var isStopped: Bool { stopped.withLock { $0 } }

    /// Stops the agent: its calls end, its transports close, its thread ends; ``events``
    /// finishes after `shutdown`. Idempotent.
    public func stop() async {
        guard !stopped.withLock({ state in defer { state = true }; return state }) else { return }
        let handle = self.handle
        do {
            try await SystemThread.run(name: "callnode-sip-stop") { csip_stop(handle.pointer) }
        } catch {
            csip_stop(handle.pointer)  // no thread to be had: stopping here beats leaving the stack running
        }
    }

    deinit {
        // An agent dropped without stop(): stop it on a thread of its own, not waited for.
        guard !stopped.withLock({ $0 }) else { return }
        let handle = self.handle
        if (try? SystemThread.start(name: "callnode-sip-stop", detached: true) { csip_stop(handle.pointer) }) == nil {
            csip_stop(handle.pointer)
        }
    }
}
