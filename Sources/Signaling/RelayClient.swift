import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import Clocks
import Locking

/// Why the relay could not connect this node.
public struct RelayError: Error, Sendable, Equatable, CustomStringConvertible {
    public let reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { "relay: \(reason)" }
}

/// Reads relay control frames until the connection is spliced, then turns the connection into
/// this node's TLS (client or server side) without losing bytes that arrived with the last
/// control frame.
final class RelayPreambleHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    /// Adds the TLS handlers after the preamble; called once, on the event loop.
    typealias Upgrade = @Sendable (ChannelHandlerContext, RelayMessage) throws -> Void

    private let messages: AsyncStream<RelayMessage>.Continuation
    private let upgrade: Upgrade?
    private var buffer: ByteBuffer?
    private var upgraded = false
    private let maximum = 4096

    init(messages: AsyncStream<RelayMessage>.Continuation, upgrade: Upgrade?) {
        self.messages = messages
        self.upgrade = upgrade
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var incoming = unwrapInboundIn(data)
        if buffer == nil { buffer = incoming } else { buffer!.writeBuffer(&incoming) }
        while var current = buffer, let length = current.getInteger(at: current.readerIndex, as: UInt32.self) {
            guard length <= maximum else {
                messages.yield(RelayMessage(op: "error", reason: "the relay sent an oversized control frame"))
                context.close(promise: nil)
                return
            }
            guard current.readableBytes >= 4 + Int(length) else { return }
            current.moveReaderIndex(forwardBy: 4)
            // Checked above: the frame is complete.
            let frame = current.readSlice(length: Int(length))!
            buffer = current
            guard let message = RelayMessage.decode(frame) else {
                messages.yield(RelayMessage(op: "error", reason: "the relay sent a malformed control frame"))
                context.close(promise: nil)
                return
            }
            if let upgrade, message.op == "connected" || message.op == "paired" {
                do {
                    try upgrade(context, message)
                } catch {
                    messages.yield(RelayMessage(op: "error", reason: "cannot start TLS: \(error)"))
                    context.close(promise: nil)
                    return
                }
                messages.yield(message)
                messages.finish()
                // Bytes after the last control frame (a peer's TLS hello that came in the same
                // read) go on to TLS from `handlerRemoved`: once removal returns, this context
                // no longer links to the next handler and anything fired from it is dropped.
                upgraded = true
                context.pipeline.syncOperations.removeHandler(self, promise: nil)
                return
            }
            messages.yield(message)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        guard upgraded, let leftover = buffer else { return }
        buffer = nil
        if leftover.readableBytes > 0 { context.fireChannelRead(wrapInboundOut(leftover)) }
    }

    func channelInactive(context: ChannelHandlerContext) {
        messages.finish()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        messages.finish()
        context.close(promise: nil)
    }
}

/// The TLS channel the preamble handler built, handed from the event loop to the task that
/// waits for the splice (set before the `connected`/`paired` message is delivered). Dropped
/// untaken (the relay's reply never came, or another one did), it runs the channel empty and
/// closes it, as ``AcceptedChannel`` does: an `NIOAsyncChannel` no one runs stays open.
final class UpgradeBox: Sendable {
    let value = Locked<(FramedChannel, EventLoopFuture<Fingerprint>)?>(nil)

    func take() throws -> (FramedChannel, EventLoopFuture<Fingerprint>) {
        guard let upgraded = value.withLock({ $0.take() }) else { throw SignalingError.closed }
        return upgraded
    }

    deinit {
        guard let (left, _) = value.withLock({ $0.take() }) else { return }
        // As ``AcceptedChannel``'s: closed at once, then run empty.
        left.channel.close(promise: nil)
        Task { try? await left.executeThenClose { _, _ in } }
    }
}

/// How this node uses a rendezvous relay: stay registered, dial through it, accept what it
/// splices, and meet in sessions.
public enum RelayClient {
    /// A raw TCP connection to the relay with the preamble handler installed.
    static func open(_ relay: String, port: Int, upgrade: RelayPreambleHandler.Upgrade?) async throws -> (any Channel, AsyncStream<RelayMessage>) {
        let (messages, continuation) = AsyncStream.makeStream(of: RelayMessage.self)
        let address = relay.contains(":") ? "[\(relay)]:\(port)" : "\(relay):\(port)"
        do {
            let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connectTimeout(.seconds(10))
                .channelOption(.socketOption(.tcp_nodelay), value: 1)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(RelayPreambleHandler(messages: continuation, upgrade: upgrade))
                    }
                }
                .connect(host: relay, port: port).get()
            return (channel, messages)
        } catch {
            continuation.finish()
            throw SignalingError.unreachable("relay \(address)", reason: SignalingClient.reason(error))
        }
    }

    static func send(_ message: RelayMessage, on channel: any Channel) async throws {
        try await channel.writeAndFlush(message.framed(channel.allocator))
    }

    /// Keeps this node registered under its fingerprint, calling `incoming` with a fresh TLS
    /// server connection for every caller the relay splices to it. Proves the identity (the
    /// relay's challenge, signed with the identity key), then sends a keep-alive every
    /// `keepAlive`; a relay that answers none for three intervals (and at least five seconds, so a
    /// busy moment on either host is not taken for a dead relay) counts as gone. Returns when
    /// the relay connection closes or goes silent (reconnecting is the caller's choice); throws
    /// if it cannot connect or the relay refuses the registration.
    public static func register(relay: String, port: Int, identity: NodeIdentity, limits: SignalingLimits = SignalingLimits(),
                                keepAlive: Duration = .seconds(20), clock: TimerClock = .continuous,
                                registered: @Sendable () -> Void = {},
                                incoming: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void) async throws {
        let (channel, messages) = try await open(relay, port: port, upgrade: nil)
        try await send(RelayMessage(op: "register", fingerprint: identity.fingerprint.hex,
                                    certificate: Data(identity.certificateDER).base64EncodedString()), on: channel)
        let heard = Locked(clock.now)
        let refusal = Locked<String?>(nil)
        await withDiscardingTaskGroup { group in
            group.addTask {
                // Keep-alives; the relay's silence for three intervals (five seconds at least)
                // closes the connection.
                let gone = max(keepAlive * 3, .seconds(5))
                while !Task.isCancelled {
                    guard (try? await clock.sleep(for: keepAlive)) != nil else { return }
                    if clock.now - heard.withLock({ $0 }) > gone {
                        try? await channel.close()
                        return
                    }
                    try? await send(RelayMessage(op: "ping"), on: channel)
                }
            }
            for await message in messages {
                heard.withLock { $0 = clock.now }
                switch message.op {
                case "challenge":
                    guard let challenge = message.token,
                          let signature = try? RelayProof.sign(identity: identity, challenge: challenge) else { continue }
                    try? await send(RelayMessage(op: "prove", signature: signature), on: channel)
                case "registered":
                    registered()
                case "error":
                    refusal.withLock { $0 = message.reason ?? "refused" }
                case "incoming":
                    guard let token = message.token else { continue }
                    group.addTask {
                        try? await accept(relay: relay, port: port, token: token, identity: identity, limits: limits, incoming)
                    }
                default:
                    continue
                }
            }
            group.cancelAll()
        }
        try? await channel.close()
        if let reason = refusal.withLock({ $0 }) { throw RelayError(reason) }
    }

    /// Opens the data connection the relay asked for and serves it as a TLS server.
    static func accept(relay: String, port: Int, token: String, identity: NodeIdentity, limits: SignalingLimits,
                       _ handler: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void) async throws {
        let tls = try SignalingTLS.cached(identity: identity, server: true)
        let ready = UpgradeBox()
        let (channel, messages) = try await open(relay, port: port) { context, _ in
            let ssl = NIOSSLServerHandler(context: tls.context, customVerificationCallback: SignalingTLS.verifier(pin: nil, presented: PresentedIdentity()))
            try Self.addTLS(ssl, after: context, limits: limits, ready: ready)
        }
        try await send(RelayMessage(op: "accept", token: token), on: channel)
        guard let reply = await messages.first(where: { _ in true }), reply.op == "connected" else {
            try? await channel.close()
            return
        }
        let (framed, handshake) = try ready.take()
        try await SignalingListener.serveAccepted(framed, handshake: handshake, handler: handler)
    }

    /// Installs TLS, the handshake watcher and the frame decoder after the preamble and
    /// wraps the channel for async use.
    static func addTLS(_ ssl: some ChannelHandler, after context: ChannelHandlerContext, limits: SignalingLimits,
                       ready: UpgradeBox) throws {
        let channel = context.channel
        let promise = channel.eventLoop.makePromise(of: Fingerprint.self)
        let pipeline = channel.pipeline.syncOperations
        try pipeline.addHandler(ByteToMessageHandler(FrameDecoder(maximum: limits.maximumFrameSize)), position: .after(context.handler))
        try pipeline.addHandler(HandshakeWatcher(promise: promise, timeout: limits.handshakeTimeout), position: .after(context.handler))
        try pipeline.addHandler(ssl, position: .after(context.handler))
        let framed = try FramedChannel(wrappingChannelSynchronously: channel)
        ready.value.withLock { $0 = (framed, promise.futureResult) }
    }

    /// Calls the node registered at the relay under `fingerprint`; the TLS inside the splice
    /// must present exactly that fingerprint. Runs `body` like ``SignalingClient/connect(host:port:identity:pin:limits:connectTimeout:_:)``.
    public static func dial<Result: Sendable>(relay: String, port: Int, fingerprint: Fingerprint, identity: NodeIdentity,
                                              limits: SignalingLimits = SignalingLimits(),
                                              _ body: (SignalingConnection, SignalMessages) async throws -> Result) async throws -> Result {
        try await splicedClient(relay: relay, port: port, request: RelayMessage(op: "dial", fingerprint: fingerprint.hex),
                                pin: fingerprint, identity: identity, limits: limits, body)
    }

    /// Asks the relay for a new session ID, joinable for `ttl` seconds.
    public static func newSession(relay: String, port: Int, ttl: Int = 3600) async throws -> String {
        let (channel, messages) = try await open(relay, port: port, upgrade: nil)
        defer { channel.close(promise: nil) }
        try await send(RelayMessage(op: "new-session", ttl: ttl), on: channel)
        guard let reply = await messages.first(where: { _ in true }) else { throw RelayError("the relay closed the connection") }
        guard reply.op == "session", let id = reply.session else { throw RelayError(reply.reason ?? "unexpected reply '\(reply.op)'") }
        return id
    }

    /// Joins a session: waits (up to the session's expiry) for the other participant, then
    /// runs TLS through the splice with identities shown, not pinned. `waiting` is called
    /// when this node is the first to arrive.
    public static func join<Result: Sendable>(relay: String, port: Int, session: String, identity: NodeIdentity,
                                              limits: SignalingLimits = SignalingLimits(), waiting: @Sendable () -> Void = {},
                                              _ body: (SignalingConnection, SignalMessages, _ isClient: Bool) async throws -> Result) async throws -> Result {
        let client = try SignalingTLS.cached(identity: identity, server: false), server = try SignalingTLS.cached(identity: identity, server: true)
        let ready = UpgradeBox()
        let (channel, messages) = try await open(relay, port: port) { context, message in
            let verifier = SignalingTLS.verifier(pin: nil, presented: PresentedIdentity())
            if message.role == "client" {
                try Self.addTLS(try NIOSSLClientHandler(context: client.context, serverHostname: nil, customVerificationCallback: verifier),
                                after: context, limits: limits, ready: ready)
            } else {
                try Self.addTLS(NIOSSLServerHandler(context: server.context, customVerificationCallback: verifier),
                                after: context, limits: limits, ready: ready)
            }
        }
        try await send(RelayMessage(op: "join", session: session), on: channel)
        var paired: RelayMessage?
        for await message in messages {
            if message.op == "waiting" { waiting(); continue }
            if message.op == "paired" { paired = message }
            if message.op == "error" {
                try? await channel.close()
                throw RelayError(message.reason ?? "refused")
            }
            break
        }
        guard let paired else {
            // Also when the wait was cancelled: the connection is ours to close.
            try? await channel.close()
            throw RelayError("the relay closed the connection before the session was paired")
        }
        let (framed, handshake) = try ready.take()
        let isClient = paired.role == "client"
        return try await SignalingClient.run(framed, handshake: handshake, pin: nil, presented: PresentedIdentity(),
                                             address: "session \(session) via \(relay):\(port)") { connection, messages in
            try await body(connection, messages, isClient)
        }
    }

    static func splicedClient<Result: Sendable>(relay: String, port: Int, request: RelayMessage, pin: Fingerprint?,
                                                identity: NodeIdentity, limits: SignalingLimits,
                                                _ body: (SignalingConnection, SignalMessages) async throws -> Result) async throws -> Result {
        let tls = try SignalingTLS.cached(identity: identity, server: false)
        let presented = PresentedIdentity()
        let ready = UpgradeBox()
        let (channel, messages) = try await open(relay, port: port) { context, _ in
            let ssl = try NIOSSLClientHandler(context: tls.context, serverHostname: nil,
                                              customVerificationCallback: SignalingTLS.verifier(pin: pin, presented: presented))
            try Self.addTLS(ssl, after: context, limits: limits, ready: ready)
        }
        try await send(request, on: channel)
        let reply = await messages.first(where: { _ in true })
        guard let reply, reply.op == "connected" else {
            try? await channel.close()
            throw SignalingError.unreachable("\(pin.map { $0.short } ?? "peer") via relay \(relay):\(port)",
                                             reason: "the relay refused: \(reply?.reason ?? "connection closed")")
        }
        let (framed, handshake) = try ready.take()
        return try await SignalingClient.run(framed, handshake: handshake, pin: pin, presented: presented,
                                             address: "\(pin.map { $0.short } ?? "peer") via relay \(relay):\(port)", body)
    }
}
