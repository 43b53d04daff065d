import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import Locking
import Synchronization

/// Bounds that keep one connection from costing the node more than a little memory or time.
public struct SignalingLimits: Sendable, Equatable {
    /// The largest frame body accepted (an SDP with every candidate is a few KiB).
    public var maximumFrameSize = 64 * 1024
    /// How long a peer may take to finish the TLS handshake.
    public var handshakeTimeout: Duration = .seconds(10)
    /// Connections that have not finished their handshake, beyond which new ones are refused.
    public var maximumUnauthenticatedConnections = 64
    /// Malformed frames a connection may send before it is closed.
    public var maximumMalformedFrames = 8
    /// How long an accepted connection that carries no call may stay silent before it is
    /// closed (any message, keep-alives too, restarts the wait). Callers send their
    /// invitation at once, so this only cuts off connections that were opened and left.
    public var idleTimeout: Duration = .seconds(30)

    public init() {}
}

/// One authenticated signaling connection: TLS 1.3 with both certificates presented, the
/// peer's fingerprint known. Sendable: any task may ``send(_:)``; the task that received it
/// reads ``SignalMessages``. Closes when that task's scope ends or on ``close()``.
///
/// A connection can also run over another transport of whole frames (``SignalFrameTransport``:
/// the test kit's in-memory pipe): the same frames and envelopes, no socket, for whole nodes in
/// tests and simulations.
public struct SignalingConnection: Sendable {
    /// The peer's identity, proven by the TLS handshake (or given, in memory).
    public let peer: Fingerprint
    /// `HOST:PORT` of the peer as seen by this node.
    public let remoteAddress: String
    let transport: Transport
    /// A node over TLS, or a browser page over the web port's WebSocket.
    public internal(set) var origin: SignalingOrigin = .node

    enum Transport: Sendable {
        case channel(writer: NIOAsyncChannelOutboundWriter<ByteBuffer>, channel: any Channel)
        case frames(any SignalFrameTransport)
    }

    init(peer: Fingerprint, remoteAddress: String, writer: NIOAsyncChannelOutboundWriter<ByteBuffer>, channel: any Channel) {
        self.peer = peer
        self.remoteAddress = remoteAddress
        transport = .channel(writer: writer, channel: channel)
    }

    /// A connection over another transport of whole frames (the test kit's in-memory pipe):
    /// `peer` is the identity the transport vouches for, its frames are read as
    /// ``SignalMessages/init(frames:)``.
    public init(peer: Fingerprint, remoteAddress: String, transport: any SignalFrameTransport) {
        self.peer = peer
        self.remoteAddress = remoteAddress
        self.transport = .frames(transport)
    }

    /// A call page's connection over a transport of whole frames the embedder carries (its own
    /// web server's WebSocket, or the test kit's in-memory page): no certificate, so its peer is
    /// ``WebSignalingServer/pagePeer``, as on the node's own web port.
    public static func webPage(remoteAddress: String, transport: any SignalFrameTransport) -> SignalingConnection {
        var connection = SignalingConnection(peer: WebSignalingServer.pagePeer, remoteAddress: remoteAddress, transport: transport)
        connection.origin = .webPage
        return connection
    }

    /// Sends one message.
    /// - Throws: ``SignalingError/closed`` once the connection is gone.
    public func send(_ envelope: SignalEnvelope) async throws(SignalingError) {
        let body = envelope.encoded()
        switch transport {
        case let .channel(writer, channel):
            var buffer = channel.allocator.buffer(capacity: body.count + 4)
            buffer.writeInteger(UInt32(body.count))
            buffer.writeBytes(body)
            do { try await writer.write(buffer) } catch { throw .closed }
        case let .frames(end):
            try end.send(Array(body))
        }
    }

    /// Sends `message` for `call`.
    public func send(_ message: SignalMessage, call: UUID?) async throws(SignalingError) {
        try await send(SignalEnvelope(call: call, message))
    }

    /// Identifies the underlying connection (two connections from one peer differ).
    public var id: ObjectIdentifier {
        switch transport {
        case let .channel(_, channel): ObjectIdentifier(channel)
        case let .frames(end): ObjectIdentifier(end)
        }
    }

    /// The local IP address the connection leaves from (nil in memory, or once it is closed):
    /// a connection whose address left the host is dead, whatever TCP still thinks.
    public var localHost: String? {
        switch transport {
        case let .channel(_, channel): channel.localAddress?.ipAddress
        case .frames: nil
        }
    }

    /// Closes the connection; the reader's sequence ends.
    public func close() {
        switch transport {
        case let .channel(_, channel): channel.close(promise: nil)
        case let .frames(end): end.close()
        }
    }

    /// Writes bytes as they are, outside any frame: for tests that play a misbehaving peer.
    @_spi(Testing) public func sendRaw(_ bytes: [UInt8]) async throws(SignalingError) {
        switch transport {
        case let .channel(writer, _):
            do { try await writer.write(ByteBuffer(bytes: bytes)) } catch { throw .closed }
        case let .frames(end):
            try end.send(bytes)
        }
    }
}

/// A transport of whole signaling frames other than a socket: what a ``SignalingConnection``
/// sends goes to ``send(_:)``; the frames that arrive are read as ``SignalMessages``.
public protocol SignalFrameTransport: AnyObject, Sendable {
    /// Sends one frame. - Throws: ``SignalingError/closed`` once closed.
    func send(_ frame: [UInt8]) throws(SignalingError)
    /// Closes both directions; the reader's sequence ends.
    func close()
}

/// The messages arriving on a connection, in order. A malformed frame yields a failure and the
/// sequence goes on; a framing error (oversized or truncated frame) yields a failure and ends
/// it, as does the connection closing.
public struct SignalMessages: AsyncSequence {
    public typealias Element = Result<SignalEnvelope, SignalingError>
    let source: Source

    enum Source {
        case channel(NIOAsyncChannelInboundStream<ByteBuffer>)
        case memory(AsyncStream<[UInt8]>)
    }

    init(inbound: NIOAsyncChannelInboundStream<ByteBuffer>) { source = .channel(inbound) }
    /// The messages in frames another transport delivers, in order.
    public init(frames: AsyncStream<[UInt8]>) { source = .memory(frames) }

    public struct AsyncIterator: AsyncIteratorProtocol {
        enum Base {
            case channel(NIOAsyncChannelInboundStream<ByteBuffer>.AsyncIterator)
            case memory(AsyncStream<[UInt8]>.AsyncIterator)
        }
        var base: Base
        var finished = false

        public mutating func next() async -> Result<SignalEnvelope, SignalingError>? {
            guard !finished else { return nil }
            switch base {
            case var .channel(iterator):
                defer { base = .channel(iterator) }
                do {
                    guard let frame = try await iterator.next() else { return nil }
                    return Result { () throws(SignalingError) in try SignalEnvelope.decode(frame.readableBytesView) }
                } catch let error as SignalingError {
                    finished = true
                    return .failure(error)
                } catch {
                    finished = true
                    return nil
                }
            case var .memory(iterator):
                defer { base = .memory(iterator) }
                guard let frame = await iterator.next() else { return nil }
                return Result { () throws(SignalingError) in try SignalEnvelope.decode(frame) }
            }
        }
    }

    public func makeAsyncIterator() -> AsyncIterator {
        switch source {
        case let .channel(inbound): AsyncIterator(base: .channel(inbound.makeAsyncIterator()))
        case let .memory(frames): AsyncIterator(base: .memory(frames.makeAsyncIterator()))
        }
    }
}

/// Length-prefixed frames: a 4-byte big-endian length, then that many bytes.
@_spi(Fuzzing) public struct FrameDecoder: ByteToMessageDecoder {
    public typealias InboundOut = ByteBuffer
    let maximum: Int

    public init(maximum: Int) { self.maximum = maximum }

    public mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let length = buffer.getInteger(at: buffer.readerIndex, as: UInt32.self) else { return .needMoreData }
        guard length <= maximum else { throw SignalingError.frameTooLarge(Int(length), limit: maximum) }
        guard buffer.readableBytes >= 4 + Int(length) else { return .needMoreData }
        buffer.moveReaderIndex(forwardBy: 4)
        // Checked above: the buffer holds the whole frame.
        let frame = buffer.readSlice(length: Int(length))!
        context.fireChannelRead(wrapInboundOut(frame))
        return .continue
    }

    public mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        while try decode(context: context, buffer: &buffer) == .continue {}
        if buffer.readableBytes > 0 {
            buffer.moveReaderIndex(to: buffer.writerIndex)
            throw SignalingError.truncatedFrame
        }
        return .needMoreData
    }
}

/// Completes when the TLS handshake has finished with the peer's fingerprint, or fails
/// (timeout, handshake error, connection closed first).
final class HandshakeWatcher: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    let promise: EventLoopPromise<Fingerprint>
    let timeout: TimeAmount
    private var timer: Scheduled<Void>?
    private var done = false

    init(promise: EventLoopPromise<Fingerprint>, timeout: Duration) {
        self.promise = promise
        self.timeout = .nanoseconds(Int64(timeout.components.seconds) * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let channel = context.channel
        let promise = self.promise
        timer = context.eventLoop.scheduleTask(in: timeout) {
            promise.fail(SignalingError.handshakeTimeout)
            channel.close(promise: nil)
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? TLSUserEvent, case .handshakeCompleted = event, !done {
            done = true
            timer?.cancel()
            let certificate = try? context.pipeline.syncOperations.handler(type: NIOSSLHandler.self).peerCertificate
            if let der = try? certificate?.toDERBytes() {
                promise.succeed(Fingerprint(certificateDER: der))
            } else {
                promise.fail(SignalingError.unreachable("peer", reason: "the peer presented no certificate"))
                context.close(promise: nil)
            }
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if !done {
            done = true
            timer?.cancel()
            promise.fail(error)
        }
        context.fireErrorCaught(error)
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !done {
            done = true
            timer?.cancel()
            promise.fail(SignalingError.closed)
        }
        context.fireChannelInactive()
    }
}

/// The TLS settings for one node: its certificate and key, TLS 1.3 only, the peer's
/// certificate always requested and checked by fingerprint (no certificate authority).
struct SignalingTLS: Sendable {
    let context: NIOSSLContext

    /// The settings for `identity`, made once per identity and role: building a context parses
    /// the key and certificate, which cost about a millisecond of every call's setup.
    static func cached(identity: NodeIdentity, server: Bool) throws(SignalingError) -> SignalingTLS {
        let key = CacheKey(certificate: identity.certificateDER, server: server)
        if let known = cache.withLock({ $0[key] }) { return known }
        let made = try SignalingTLS(identity: identity, server: server)
        cache.withLock { entries in
            if entries.count >= 32 { entries.removeAll() }  // many identities: tests, not nodes
            entries[key] = made
        }
        return made
    }

    private struct CacheKey: Hashable {
        let certificate: [UInt8]
        let server: Bool
    }
    private static let cache = Locked<[CacheKey: SignalingTLS]>([:])

    init(identity: NodeIdentity, server: Bool) throws(SignalingError) {
        do {
            let certificate = try NIOSSLCertificate(bytes: identity.certificateDER, format: .der)
            let key = try NIOSSLPrivateKey(bytes: Array(identity.privateKeyPEM.utf8), format: .pem)
            var configuration = server
                ? TLSConfiguration.makeServerConfiguration(certificateChain: [.certificate(certificate)], privateKey: .privateKey(key))
                : TLSConfiguration.makeClientConfiguration()
            configuration.certificateChain = [.certificate(certificate)]
            configuration.privateKey = .privateKey(key)
            configuration.minimumTLSVersion = .tlsv13
            // Verification is on so that the server asks for the client's certificate; the
            // custom callback replaces chain validation with the fingerprint check.
            configuration.certificateVerification = .noHostnameVerification
            // No certificate authority is consulted, so load none: the system bundle (hundreds of
            // certificates) took tens of milliseconds per context, on every call.
            configuration.trustRoots = .certificates([])
            context = try NIOSSLContext(configuration: configuration)
        } catch {
            throw .cannotListen("TLS", reason: "cannot load the node's certificate: \(error)")
        }
    }

    /// Accepts any certificate when `pin` is nil, otherwise only the pinned one; records what
    /// was presented either way. The TLS handshake itself proves the peer holds the key.
    static func verifier(pin: Fingerprint?, presented: PresentedIdentity) -> NIOSSLCustomVerificationCallback {
        { certificates, promise in
            guard let leaf = certificates.first, let der = try? leaf.toDERBytes() else {
                promise.succeed(.failed)
                return
            }
            let fingerprint = Fingerprint(certificateDER: der)
            presented.value.withLock { $0 = fingerprint }
            promise.succeed(pin == nil || pin == fingerprint ? .certificateVerified : .failed)
        }
    }
}

extension SignalingConnection {
    /// Builds (and keeps) the TLS settings `identity` dials with, so that a node's first call
    /// does not parse its key and certificate on the way. Optional: a dial builds them too.
    public static func prepareToDial(as identity: NodeIdentity) {
        _ = try? SignalingTLS.cached(identity: identity, server: false)
    }
}

/// The fingerprint a peer presented, recorded by the verification callback so a refused
/// handshake can say what it saw.
final class PresentedIdentity: Sendable {
    let value = Locked<Fingerprint?>(nil)
}

typealias FramedChannel = NIOAsyncChannel<ByteBuffer, ByteBuffer>

extension Channel {
    /// Adds the frame decoder and wraps the channel for async use. Runs on the event loop.
    func makeFramed(limits: SignalingLimits) throws -> FramedChannel {
        try pipeline.syncOperations.addHandler(ByteToMessageHandler(FrameDecoder(maximum: limits.maximumFrameSize)))
        return try FramedChannel(wrappingChannelSynchronously: self)
    }
}

/// Accepts signaling connections on a TCP port. Any certificate is accepted at the TLS layer
/// (an unknown caller must hear *why* it is refused); the node decides on the fingerprint each
/// connection carries.
public final class SignalingListener: Sendable {
    /// The bound port (useful with port 0).
    public let port: Int
    /// The bound address.
    public let host: String
    private let server: NIOAsyncChannel<(AcceptedChannel, EventLoopFuture<Fingerprint>), Never>
    private let limits: SignalingLimits

    /// Binds `host:port` (port 0 picks a free one).
    /// - Throws: ``SignalingError/cannotListen(_:reason:)``.
    public init(host: String, port: Int, identity: NodeIdentity, limits: SignalingLimits = SignalingLimits()) async throws(SignalingError) {
        let tls = try SignalingTLS.cached(identity: identity, server: true)
        let counter = Counter()
        do {
            server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .serverChannelOption(.backlog, value: 256)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
                .bind(host: host, port: port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let presented = PresentedIdentity()
                        let ssl = NIOSSLServerHandler(context: tls.context,
                                                      customVerificationCallback: SignalingTLS.verifier(pin: nil, presented: presented))
                        let promise = channel.eventLoop.makePromise(of: Fingerprint.self)
                        // Pending handshakes are counted so a flood of idle connections is cut off.
                        if counter.pending.wrappingAdd(1, ordering: .relaxed).newValue > limits.maximumUnauthenticatedConnections {
                            counter.pending.wrappingSubtract(1, ordering: .relaxed)
                            counter.refused.wrappingAdd(1, ordering: .relaxed)
                            promise.fail(SignalingError.closed)
                            channel.close(promise: nil)
                        } else {
                            promise.futureResult.whenComplete { _ in counter.pending.wrappingSubtract(1, ordering: .relaxed) }
                        }
                        try channel.pipeline.syncOperations.addHandler(ssl)
                        try channel.pipeline.syncOperations.addHandler(HandshakeWatcher(promise: promise, timeout: limits.handshakeTimeout))
                        return (AcceptedChannel(try channel.makeFramed(limits: limits)), promise.futureResult)
                    }
                }
        } catch {
            throw .cannotListen("\(host):\(port)", reason: SignalingClient.reason(error))
        }
        self.port = server.channel.localAddress?.port ?? port
        self.host = host
        self.limits = limits
        self.counter = counter
    }

    private let counter: Counter
    private final class Counter: Sendable {
        let pending = Atomic<Int>(0)
        let refused = Atomic<Int>(0)
    }

    /// Connections refused because too many were still in their handshake.
    public var refusedDuringHandshake: Int { counter.refused.load(ordering: .relaxed) }

    /// Serves connections until the listener is closed or the task is cancelled: each
    /// authenticated connection runs `handler` in its own child task and is closed when the
    /// handler returns. Connections that fail their handshake never reach the handler.
    public func run(_ handler: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void) async {
        try? await withThrowingDiscardingTaskGroup { group in
            try await server.executeThenClose { inbound in
                for try await (accepted, handshake) in inbound {
                    guard let connection = accepted.take() else { continue }
                    group.addTask {
                        try? await Self.serveAccepted(connection, handshake: handshake, handler: handler)
                    }
                }
            }
        }
    }

    /// Waits for an accepted connection's handshake, then runs `handler` with it and closes it
    /// when the handler returns. A failed handshake closes the connection quietly.
    static func serveAccepted(_ connection: FramedChannel, handshake: EventLoopFuture<Fingerprint>,
                              handler: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void) async throws {
        guard let peer = try? await handshake.get() else {
            try? await connection.channel.close()
            return
        }
        let address = connection.channel.remoteAddress.map(Self.describe) ?? "?"
        try await connection.executeThenClose { inbound, outbound in
            let signaling = SignalingConnection(peer: peer, remoteAddress: address, writer: outbound, channel: connection.channel)
            await handler(signaling, SignalMessages(inbound: inbound))
        }
    }

    /// Stops accepting; connections already accepted keep going until their handlers return.
    public func close() async {
        try? await server.channel.close()
    }

    static func describe(_ address: SocketAddress) -> String {
        guard let ip = address.ipAddress, let port = address.port else { return "\(address)" }
        return ip.contains(":") ? "[\(ip)]:\(port)" : "\(ip):\(port)"
    }
}

/// Opens signaling connections to other nodes.
public enum SignalingClient {
    /// Connects to `host:port`, runs TLS 1.3 with this node's certificate, and checks the peer's
    /// certificate against `pin` (any certificate when `nil`: first contact, identity shown).
    /// Runs `body` with the connection and closes it when `body` returns.
    ///
    /// - Throws: ``SignalingError/unreachable(_:reason:)``, ``SignalingError/wrongIdentity(expected:presented:)``,
    ///   ``SignalingError/handshakeTimeout``, or what `body` throws.
    public static func connect<Result: Sendable>(
        host: String, port: Int, identity: NodeIdentity, pin: Fingerprint?,
        limits: SignalingLimits = SignalingLimits(), connectTimeout: Duration = .seconds(10),
        _ body: (SignalingConnection, SignalMessages) async throws -> Result
    ) async throws -> Result {
        let tls = try SignalingTLS.cached(identity: identity, server: false)
        let presented = PresentedIdentity()
        let address = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
        let connected: (FramedChannel, EventLoopFuture<Fingerprint>)
        do {
            let bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connectTimeout(.seconds(connectTimeout.components.seconds))
                .channelOption(.socketOption(.tcp_nodelay), value: 1)
            let initializer: @Sendable (any Channel) -> EventLoopFuture<(FramedChannel, EventLoopFuture<Fingerprint>)> = { channel in
                channel.eventLoop.makeCompletedFuture {
                    let ssl = try NIOSSLClientHandler(context: tls.context, serverHostname: nil,
                                                      customVerificationCallback: SignalingTLS.verifier(pin: pin, presented: presented))
                    let promise = channel.eventLoop.makePromise(of: Fingerprint.self)
                    try channel.pipeline.syncOperations.addHandler(ssl)
                    try channel.pipeline.syncOperations.addHandler(HandshakeWatcher(promise: promise, timeout: limits.handshakeTimeout))
                    return (try channel.makeFramed(limits: limits), promise.futureResult)
                }
            }
            if let literal = try? SocketAddress(ipAddress: host, port: port) {
                // An IP literal needs no resolver round (a few ms per call on loopback).
                connected = try await bootstrap.connect(to: literal, channelInitializer: initializer)
            } else {
                connected = try await bootstrap.connect(host: host, port: port, channelInitializer: initializer)
            }
        } catch {
            throw SignalingError.unreachable(address, reason: Self.reason(error))
        }
        let (channel, handshake) = connected
        return try await run(channel, handshake: handshake, pin: pin, presented: presented, address: address, body)
    }

    /// Waits for the handshake of a client connection, maps a refused identity to
    /// ``SignalingError/wrongIdentity(expected:presented:)``, then runs `body`.
    static func run<Result: Sendable>(_ channel: FramedChannel, handshake: EventLoopFuture<Fingerprint>, pin: Fingerprint?,
                                      presented: PresentedIdentity, address: String,
                                      _ body: (SignalingConnection, SignalMessages) async throws -> Result) async throws -> Result {
        let peer: Fingerprint
        do {
            peer = try await handshake.get()
        } catch {
            try? await channel.channel.close()
            let seen = presented.value.withLock { $0 }
            if let pin, seen != pin { throw SignalingError.wrongIdentity(expected: pin, presented: seen) }
            if let error = error as? SignalingError { throw error }
            throw SignalingError.unreachable(address, reason: "TLS handshake failed: \(reason(error))")
        }
        return try await channel.executeThenClose { inbound, outbound in
            try await body(SignalingConnection(peer: peer, remoteAddress: address, writer: outbound, channel: channel.channel),
                           SignalMessages(inbound: inbound))
        }
    }

    /// Why a connection could not be made, in words a user can act on.
    static func reason(_ error: any Error) -> String {
        if let error = error as? IOError { return explain(errno: error.errnoCode, fallback: error.description) }
        if let error = error as? ChannelError, case .connectTimeout = error {
            return "no answer in time (is the address right, and does a firewall let the port through?)"
        }
        if error is ChannelError { return "the connection failed: \(error)" }
        if let error = error as? NIOConnectionError {
            if let first = error.connectionErrors.first { return reason(first.error) }
            if error.dnsAError != nil || error.dnsAAAAError != nil {
                return "the host name does not resolve (check its spelling, or use an IP address)"
            }
            return "connection refused: nothing listens there (is the other node running `callnode listen`?)"
        }
        return "\(error)"
    }

    /// An errno from connect or bind, explained.
    static func explain(errno code: Int32, fallback: String) -> String {
        switch code {
        case ECONNREFUSED: "connection refused: nothing listens there (is the other node running `callnode listen` on that port?)"
        case ETIMEDOUT: "no answer in time (is the address right, and does a firewall let the port through?)"
        case EHOSTUNREACH, ENETUNREACH: "no route to that host from this machine (check the address and this machine's network)"
        case ECONNRESET: "the other side reset the connection"
        case EADDRINUSE: "the port is already in use (is another node running? choose another port)"
        case EADDRNOTAVAIL: "this machine has no such address (use one of its own addresses, or 0.0.0.0 for all)"
        case EACCES, EPERM: "not permitted (ports below 1024 need root; choose a higher port)"
        default: fallback
        }
    }
}
