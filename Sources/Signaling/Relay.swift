import Foundation
import NIOCore
import NIOPosix
import Locking

/// The relay's control messages: length-prefixed JSON frames exchanged before a splice.
/// After `connected` or `paired` the connection carries the nodes' own TLS, end to end.
public struct RelayMessage: Sendable, Equatable, Codable {
    /// `register`, `prove`, `ping`, `dial`, `accept`, `new-session`, `join`; replies
    /// `challenge`, `registered`, `pong`, `incoming`, `connected`, `session`, `waiting`,
    /// `paired`, `error`.
    public var op: String
    public var fingerprint: String?
    public var token: String?
    public var session: String?
    /// `client` or `server`: which side of TLS a paired joiner plays.
    public var role: String?
    /// Seconds a new session stays joinable.
    public var ttl: Int?
    public var reason: String?
    /// `register`: the node's certificate (base64 DER), proving the fingerprint's key.
    public var certificate: String?
    /// `prove`: the signature over the relay's `challenge` (base64 DER ECDSA).
    public var signature: String?

    public init(op: String, fingerprint: String? = nil, token: String? = nil, session: String? = nil,
                role: String? = nil, ttl: Int? = nil, reason: String? = nil,
                certificate: String? = nil, signature: String? = nil) {
        self.certificate = certificate
        self.signature = signature
        self.op = op
        self.fingerprint = fingerprint
        self.token = token
        self.session = session
        self.role = role
        self.ttl = ttl
        self.reason = reason
    }

    func framed(_ allocator: ByteBufferAllocator) -> ByteBuffer {
        let body = (try? JSONEncoder().encode(self)).map(Array.init) ?? []
        var buffer = allocator.buffer(capacity: body.count + 4)
        buffer.writeInteger(UInt32(body.count))
        buffer.writeBytes(body)
        return buffer
    }

    @_spi(Fuzzing) public static func decode(_ frame: ByteBuffer) -> RelayMessage? {
        try? JSONDecoder().decode(RelayMessage.self, from: Data(frame.readableBytesView))
    }
}

/// What the relay has seen, for operators and tests.
public struct RelayStatistics: Sendable, Equatable {
    /// Nodes registered now.
    public var registered = 0
    /// Byte streams joined so far (dials and session pairs).
    public var splices = 0
    /// Bytes carried through splices.
    public var splicedBytes = 0
    /// Complete TLS records seen in spliced streams (the relay parses only record headers).
    public var tlsRecords = 0
    /// Spliced streams whose bytes were not TLS records: always 0 between two nodes.
    public var nonTLSStreams = 0
    /// Sessions that can still be joined.
    public var openSessions = 0
    /// Sessions the relay remembers (waiting or in progress).
    public var sessions = 0
    /// Joins refused (unknown, expired or full session).
    public var refusedJoins = 0
    /// Registrations refused: no proof, a proof that did not verify, too many from one address.
    public var refusedRegistrations = 0
    /// Dials, session creations and joins refused for going over the per-address rate.
    public var rateLimited = 0
}

/// The rendezvous relay: nodes that cannot reach each other meet here.
///
/// A node keeps a control connection registered under its fingerprint. A caller dials a
/// fingerprint; the relay asks the callee (over its control connection) to open a data
/// connection, then splices the caller's and the callee's byte streams. Session joiners are
/// paired two per session ID. Spliced streams carry the nodes' own mutual TLS: the relay never
/// holds a key and never reads signaling.
///
/// A registration is accepted only with proof of the identity (``RelayProof``): a stranger
/// cannot take a node's place. Registered nodes send keep-alives; a silent one is dropped after
/// ``RelayLimits/registrationIdleTimeout``. Registrations and dials are limited per address.
public final class RelayServer: Sendable {
    public let port: Int
    public let host: String
    private let server: any Channel
    private let state: RelayState

    /// Binds `host:port` (0 picks a port).
    /// - Throws: ``SignalingError/cannotListen(_:reason:)``.
    public init(host: String, port: Int, dialTimeout: Duration = .seconds(10),
                limits: RelayLimits = RelayLimits()) async throws(SignalingError) {
        let state = RelayState(dialTimeout: dialTimeout, limits: limits)
        do {
            server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .serverChannelOption(.backlog, value: 256)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
                .childChannelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(FrameDecoder(maximum: 4096)), name: "relay-frames")
                        try channel.pipeline.syncOperations.addHandler(RelayControlHandler(state: state), name: "relay-control")
                    }
                }
                .bind(host: host, port: port).get()
        } catch {
            throw .cannotListen("\(host):\(port)", reason: SignalingClient.reason(error))
        }
        self.port = server.localAddress?.port ?? port
        self.host = host
        self.state = state
    }

    public var statistics: RelayStatistics { state.statistics }

    /// Stops accepting; splices in progress go on until their nodes close them.
    public func close() async {
        try? await server.close()
        state.closeAll()
    }

    /// Waits until the listening socket is closed.
    public func waitUntilClosed() async {
        try? await server.closeFuture.get()
    }
}

/// The relay's registry: registered nodes, dials waiting for the callee, sessions.
final class RelayState: Sendable {
    struct Session {
        var expires: NIODeadline
        var waiting: (any Channel)?
        var paired = false
    }

    struct Registry {
        var registered: [String: any Channel] = [:]
        var dials: [String: any Channel] = [:]
        var sessions: [String: Session] = [:]
        var statistics = RelayStatistics()
        var registrationsByAddress: [String: Int] = [:]
        var dialRate = RelayRateWindow()
    }

    let registry = Locked(Registry())
    let dialTimeout: Duration
    let limits: RelayLimits

    init(dialTimeout: Duration, limits: RelayLimits) {
        self.dialTimeout = dialTimeout
        self.limits = limits
    }

    var statistics: RelayStatistics {
        registry.withLock { r in
            var s = r.statistics
            s.registered = r.registered.count
            s.openSessions = r.sessions.values.filter { !$0.paired }.count
            s.sessions = r.sessions.count
            return s
        }
    }

    func closeAll() {
        let channels = registry.withLock { r in Array(r.registered.values) + Array(r.dials.values) + r.sessions.values.compactMap(\.waiting) }
        for channel in channels { channel.close(promise: nil) }
    }

    static func token() -> String {
        var rng = SystemRandomNumberGenerator()
        return (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &rng)) }.joined()
    }
}

/// Serves one relay connection's control frames until it is spliced or closed.
final class RelayControlHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    let state: RelayState
    private var registeredAs: String?
    /// A `register` waiting for its `prove`: the fingerprint, certificate and challenge sent.
    private var pending: (fingerprint: String, certificate: String?, challenge: String)?
    private var idleCheck: RepeatedTask?
    private var lastHeard = NIODeadline.now()
    private var dialToken: String?
    private var sessionID: String?
    private var spliced = false

    init(state: RelayState) { self.state = state }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        let channel = context.channel
        guard let message = RelayMessage.decode(frame) else {
            refuse(channel, "malformed relay message")
            return
        }
        lastHeard = .now()
        let address = Self.address(of: channel)
        if ["dial", "new-session", "join"].contains(message.op) {
            let limit = state.limits.dialsPerAddressPerMinute
            let admitted = state.registry.withLock { r in
                let admitted = r.dialRate.admit(address, now: .now(), limit: limit)
                if !admitted { r.statistics.rateLimited += 1 }
                return admitted
            }
            guard admitted else {
                refuse(channel, "too many requests from \(address): at most \(limit) a minute")
                return
            }
        }
        switch message.op {
        case "register":
            guard registeredAs == nil, pending == nil, let fingerprint = message.fingerprint.flatMap(Fingerprint.init)?.hex else {
                refuse(channel, "register needs a fingerprint (once per connection)")
                return
            }
            let challenge = RelayState.token() + RelayState.token()
            pending = (fingerprint, message.certificate, challenge)
            reply(channel, RelayMessage(op: "challenge", token: challenge))
        case "prove":
            guard let (fingerprint, certificate, challenge) = pending else {
                refuse(channel, "prove comes after register")
                return
            }
            pending = nil
            if let failure = RelayProof.check(fingerprint: fingerprint, certificate: certificate,
                                              signature: message.signature, challenge: challenge) {
                state.registry.withLock { $0.statistics.refusedRegistrations += 1 }
                refuse(channel, failure)
                return
            }
            let limit = state.limits.registrationsPerAddress
            let previous = state.registry.withLock { r -> (any Channel)?? in
                let previous = r.registered[fingerprint]
                let sameAddress = previous.map { Self.address(of: $0) == address } ?? false
                guard (r.registrationsByAddress[address] ?? 0) - (sameAddress ? 1 : 0) < limit else {
                    r.statistics.refusedRegistrations += 1
                    return .none
                }
                r.registered[fingerprint] = channel
                r.registrationsByAddress[address, default: 0] += 1
                return .some(previous)
            }
            guard case let .some(replaced) = previous else {
                refuse(channel, "too many nodes registered from \(address) (at most \(limit))")
                return
            }
            // The node itself, registering again (a restart, a new address): the old one goes.
            if let replaced, replaced !== channel { replaced.close(promise: nil) }
            registeredAs = fingerprint
            watchIdle(context)
            reply(channel, RelayMessage(op: "registered", fingerprint: fingerprint))
        case "ping":
            reply(channel, RelayMessage(op: "pong"))
        case "dial":
            guard let fingerprint = message.fingerprint.flatMap(Fingerprint.init)?.hex,
                  let callee = state.registry.withLock({ $0.registered[fingerprint] }) else {
                refuse(channel, "no node with that fingerprint is registered at this relay")
                return
            }
            let token = RelayState.token()
            state.registry.withLock { $0.dials[token] = channel }
            dialToken = token
            callee.writeAndFlush(RelayMessage(op: "incoming", token: token).framed(callee.allocator), promise: nil)
            let state = self.state
            let timeout = TimeAmount.nanoseconds(Int64(state.dialTimeout.components.seconds) * 1_000_000_000)
            context.eventLoop.scheduleTask(in: timeout) {
                if state.registry.withLock({ $0.dials.removeValue(forKey: token) }) != nil {
                    channel.writeAndFlush(RelayMessage(op: "error", reason: "the callee did not pick up the relayed connection").framed(channel.allocator))
                        .whenComplete { _ in channel.close(promise: nil) }
                }
            }
        case "accept":
            guard let token = message.token, let caller = state.registry.withLock({ $0.dials.removeValue(forKey: token) }) else {
                refuse(channel, "unknown or expired dial token")
                return
            }
            // The callee's data connection is the TLS server.
            splice(context: context, channel, caller, replies: (RelayMessage(op: "connected"), RelayMessage(op: "connected"), true))
        case "new-session":
            let id = RelayState.token()
            let ttl = max(1, min(message.ttl ?? 3600, 86_400))
            let expires = NIODeadline.now() + .seconds(Int64(ttl))
            state.registry.withLock { $0.sessions[id] = RelayState.Session(expires: expires) }
            let state = self.state
            context.eventLoop.scheduleTask(deadline: expires) {
                // An unpaired session is forgotten when it expires; its waiting joiner hears why.
                let waiting = state.registry.withLock { r -> (any Channel)? in
                    guard let session = r.sessions[id], !session.paired else { return nil }
                    r.sessions[id] = nil
                    return session.waiting
                }
                if let waiting {
                    waiting.writeAndFlush(RelayMessage(op: "error", reason: "the session expired before anyone else joined").framed(waiting.allocator))
                        .whenComplete { _ in waiting.close(promise: nil) }
                }
            }
            reply(channel, RelayMessage(op: "session", session: id, ttl: ttl))
        case "join":
            guard let id = message.session else {
                refuse(channel, "join needs a session ID")
                return
            }
            enum Outcome { case refused(String), wait, pair(any Channel) }
            let outcome = state.registry.withLock { r -> Outcome in
                guard var session = r.sessions[id], session.expires > .now() else {
                    r.sessions[id] = nil
                    r.statistics.refusedJoins += 1
                    return .refused("unknown or expired session")
                }
                if session.paired {
                    r.statistics.refusedJoins += 1
                    return .refused("the session already has two participants")
                }
                if let waiting = session.waiting, waiting.isActive {
                    session.paired = true
                    session.waiting = nil
                    r.sessions[id] = session
                    return .pair(waiting)
                }
                session.waiting = channel
                r.sessions[id] = session
                return .wait
            }
            switch outcome {
            case let .refused(reason): refuse(channel, reason)
            case .wait:
                sessionID = id
                reply(channel, RelayMessage(op: "waiting", session: id))
            case let .pair(partner):
                sessionID = id
                splice(context: context, channel, partner, replies: (RelayMessage(op: "paired", session: id, role: "client"),
                                                                      RelayMessage(op: "paired", session: id, role: "server"), false))
            }
        default:
            refuse(channel, "unknown relay operation '\(message.op)'")
        }
    }

    /// Drops the registration once its node has been silent for the idle timeout.
    private func watchIdle(_ context: ChannelHandlerContext) {
        let idle = state.limits.registrationIdleTimeout
        let timeout = TimeAmount.nanoseconds(Int64(idle.components.seconds) * 1_000_000_000 + idle.components.attoseconds / 1_000_000_000)
        let channel = context.channel
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        idleCheck = context.eventLoop.scheduleRepeatedTask(initialDelay: timeout, delay: .nanoseconds(max(1_000_000, timeout.nanoseconds / 4))) { task in
            if NIODeadline.now() - handler.value.lastHeard >= timeout {
                task.cancel()
                channel.close(promise: nil)
            }
        }
    }

    static func address(of channel: any Channel) -> String {
        channel.remoteAddress?.ipAddress ?? "?"
    }

    func channelInactive(context: ChannelHandlerContext) {
        let channel = context.channel
        idleCheck?.cancel()
        let address = Self.address(of: channel)
        state.registry.withLock { r in
            if registeredAs != nil {
                r.registrationsByAddress[address, default: 1] -= 1
                if r.registrationsByAddress[address] == 0 { r.registrationsByAddress[address] = nil }
            }
            if let fingerprint = registeredAs, r.registered[fingerprint] === channel { r.registered[fingerprint] = nil }
            if let token = dialToken { r.dials[token] = nil }
            if let id = sessionID, !spliced, r.sessions[id]?.waiting === channel { r.sessions[id]?.waiting = nil }
        }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }

    private func reply(_ channel: any Channel, _ message: RelayMessage) {
        channel.writeAndFlush(message.framed(channel.allocator), promise: nil)
    }

    private func refuse(_ channel: any Channel, _ reason: String) {
        channel.writeAndFlush(RelayMessage(op: "error", reason: reason).framed(channel.allocator))
            .whenComplete { _ in channel.close(promise: nil) }
    }

    /// Tells both sides, then joins their byte streams: from here on the relay only copies.
    private func splice(context: ChannelHandlerContext, _ mine: any Channel, _ theirs: any Channel,
                        replies: (mine: RelayMessage, theirs: RelayMessage, serverIsMine: Bool)) {
        spliced = true
        let state = self.state
        state.registry.withLock { $0.statistics.splices += 1 }
        let sessionID = self.sessionID
        let forget: @Sendable () -> Void = {
            // A session ends for good when either side of its splice closes.
            if let sessionID { state.registry.withLock { $0.sessions[sessionID] = nil } }
        }
        mine.closeFuture.whenComplete { _ in forget() }
        theirs.closeFuture.whenComplete { _ in forget() }
        // Both pipelines become splices first; only then does each side hear its reply, the
        // TLS server's first. Nodes send nothing until their reply arrives and the TLS client
        // speaks first, so no node byte can overtake the server's reply or meet a control
        // handler.
        let rewire: @Sendable (any Channel, any Channel) -> EventLoopFuture<Void> = { channel, partner in
            channel.eventLoop.submit {
                let pipeline = channel.pipeline.syncOperations
                let decoder = try pipeline.handler(type: ByteToMessageHandler<FrameDecoder>.self)
                let control = try pipeline.handler(type: RelayControlHandler.self)
                pipeline.removeHandler(control, promise: nil)
                pipeline.removeHandler(decoder, promise: nil)
                try pipeline.addHandler(SpliceHandler(partner: partner, state: state))
            }
        }
        let server = replies.serverIsMine ? (mine, replies.mine) : (theirs, replies.theirs)
        let client = replies.serverIsMine ? (theirs, replies.theirs) : (mine, replies.mine)
        rewire(mine, theirs).and(rewire(theirs, mine)).whenComplete { result in
            switch result {
            case .success:
                server.0.writeAndFlush(server.1.framed(server.0.allocator)).whenComplete { _ in
                    client.0.writeAndFlush(client.1.framed(client.0.allocator), promise: nil)
                }
            case .failure:
                mine.close(promise: nil)
                theirs.close(promise: nil)
            }
        }
    }
}

/// Copies one side's bytes to its partner, checking that they are TLS records.
final class SpliceHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    let partner: any Channel
    let state: RelayState
    private var records = TLSRecordCounter()

    init(partner: any Channel, state: RelayState) {
        self.partner = partner
        self.state = state
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        let before = (records.records, records.isTLS)
        records.consume(buffer.readableBytesView)
        let count = buffer.readableBytes
        let newRecords = records.records - before.0
        let broke = before.1 && !records.isTLS
        state.registry.withLock { r in
            r.statistics.splicedBytes += count
            r.statistics.tlsRecords += newRecords
            if broke { r.statistics.nonTLSStreams += 1 }
        }
        partner.writeAndFlush(buffer, promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        partner.close(promise: nil)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

/// Walks TLS record headers (type 20–23, version 3.x, length ≤ 2^14 + 256) without reading
/// the contents.
struct TLSRecordCounter {
    private(set) var records = 0
    private(set) var isTLS = true
    private var header: [UInt8] = []
    private var remaining = 0

    mutating func consume(_ bytes: ByteBufferView) {
        guard isTLS else { return }
        var index = bytes.startIndex
        while index < bytes.endIndex {
            if remaining > 0 {
                let take = min(remaining, bytes.endIndex - index)
                remaining -= take
                index += take
                if remaining == 0 { records += 1 }
                continue
            }
            header.append(bytes[index])
            index += 1
            if header.count == 5 {
                let type = header[0], major = header[1], length = Int(header[3]) << 8 | Int(header[4])
                guard (20...23).contains(type), major == 3, length <= 16_384 + 256 else {
                    isTLS = false
                    return
                }
                remaining = length
                header.removeAll(keepingCapacity: true)
                if remaining == 0 { records += 1 }
            }
        }
    }
}
