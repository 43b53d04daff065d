import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket

/// Where a signaling connection comes from.
public enum SignalingOrigin: Sendable, Equatable {
    /// Another node, over mutual TLS: the peer's fingerprint is proven.
    case node
    /// A browser page over a WebSocket, admitted by the web secret: no certificate, so the
    /// peer's fingerprint is a fixed placeholder (``WebSignalingServer/pagePeer``).
    case webPage
}

/// Serves the call page and a WebSocket signaling endpoint for browsers.
///
/// `GET /` returns the page; `GET /ws?secret=…` upgrades to a WebSocket when the secret
/// matches (403 otherwise). Each WebSocket text message is one signaling envelope, the same
/// JSON nodes exchange (`{"v":1,"type":"offer","call":…,"sdp":…}`), so a page is served by the
/// same code as a node: ``run(_:)`` hands each page's connection to the handler.
public final class WebSignalingServer: Sendable {
    public let port: Int
    public let host: String
    private let server: NIOAsyncChannel<EventLoopFuture<Upgrade>, Never>

    /// The peer every page connection carries: pages have no certificate; the secret admitted them.
    public static let pagePeer = Fingerprint(certificateDER: Array("callnode web page".utf8))

    enum Upgrade: Sendable {
        case page(FramedChannel, address: String)
        case http
    }

    /// Binds `host:port` (port 0 picks a free one).
    /// - Parameters:
    ///   - secret: what a page must present to open the WebSocket.
    ///   - page: the HTML served at `/`.
    /// - Throws: ``SignalingError/cannotListen(_:reason:)``.
    ///   - https: serve over TLS with this certificate (browsers allow the microphone only on
    ///     https or localhost); nil: plain HTTP.
    public init(host: String, port: Int, secret: String, page: String, https: WebPageCertificate? = nil,
                limits: SignalingLimits = SignalingLimits()) async throws(SignalingError) {
        let pageBytes = ByteBuffer(string: page)
        let expected = Array(SHA256.hash(data: Array(secret.utf8)))
        do {
            server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .serverChannelOption(.backlog, value: 64)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
                .bind(host: host, port: port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        if let https {
                            try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: https.context))
                        }
                        let upgrader = NIOTypedWebSocketServerUpgrader<Upgrade>(
                            maxFrameSize: limits.maximumFrameSize,
                            shouldUpgrade: { channel, head in
                                let admitted = Self.path(of: head.uri) == "/ws" && Self.matches(Self.secret(in: head.uri), expected)
                                return channel.eventLoop.makeSucceededFuture(admitted ? HTTPHeaders() : nil)
                            },
                            upgradePipelineHandler: { channel, _ in
                                channel.eventLoop.makeCompletedFuture {
                                    try channel.pipeline.syncOperations.addHandler(WebSocketEnvelopeCodec(maximum: limits.maximumFrameSize))
                                    let address = channel.remoteAddress.map(SignalingListener.describe) ?? "?"
                                    return Upgrade.page(try FramedChannel(wrappingChannelSynchronously: channel), address: address)
                                }
                            })
                        let configuration = NIOTypedHTTPServerUpgradeConfiguration<Upgrade>(
                            upgraders: [upgrader],
                            notUpgradingCompletionHandler: { channel in
                                channel.eventLoop.makeCompletedFuture {
                                    try channel.pipeline.syncOperations.addHandler(PageHandler(page: pageBytes))
                                    return Upgrade.http
                                }
                            })
                        return try channel.pipeline.syncOperations.configureUpgradableHTTPServerPipeline(
                            configuration: .init(upgradeConfiguration: configuration))
                    }
                }
        } catch {
            throw .cannotListen("\(host):\(port)", reason: SignalingClient.reason(error))
        }
        self.port = server.channel.localAddress?.port ?? port
        self.host = host
        self.isHTTPS = https != nil
    }

    /// Whether the page is served over TLS.
    public let isHTTPS: Bool

    /// Serves until closed: each page's WebSocket runs `handler` in its own child task and is
    /// closed when the handler returns.
    public func run(_ handler: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void) async {
        try? await withThrowingDiscardingTaskGroup { group in
            try await server.executeThenClose { inbound in
                for try await upgrade in inbound {
                    group.addTask {
                        guard case let .page(channel, address) = try? await upgrade.get() else { return }
                        try? await channel.executeThenClose { inbound, outbound in
                            var connection = SignalingConnection(peer: Self.pagePeer, remoteAddress: address, writer: outbound,
                                                                 channel: channel.channel)
                            connection.origin = .webPage
                            await handler(connection, SignalMessages(inbound: inbound))
                        }
                    }
                }
            }
        }
    }

    public func close() async {
        try? await server.channel.close()
    }

    static func path(of uri: String) -> String {
        String(uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first ?? "")
    }

    static func secret(in uri: String) -> String? {
        guard let query = uri.split(separator: "?", maxSplits: 1).dropFirst().first else { return nil }
        for pair in query.split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            if parts.count == 2, parts[0] == "secret" { return String(parts[1]).removingPercentEncoding }
        }
        return nil
    }

    /// Compares digests, so the time taken says nothing about how much of a guess was right.
    static func matches(_ secret: String?, _ expected: [UInt8]) -> Bool {
        guard let secret else { return false }
        let digest = Array(SHA256.hash(data: Array(secret.utf8)))
        return zip(digest, expected).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }

    /// A fresh secret: 16 random bytes as 32 hex digits.
    public static func makeSecret() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    }
}

/// The certificate the call page is served with over HTTPS: the node's own identity (browsers
/// warn that it is self-signed; its fingerprint is the node's) or a certificate and key from files
/// (PEM), such as a LAN CA's or Let's Encrypt's.
public struct WebPageCertificate: Sendable {
    let context: NIOSSLContext
    /// The SHA-256 fingerprint of the certificate served.
    public let fingerprint: Fingerprint

    /// The node's identity certificate.
    public init(identity: NodeIdentity) throws(SignalingError) {
        do {
            let certificate = try NIOSSLCertificate(bytes: identity.certificateDER, format: .der)
            let key = try NIOSSLPrivateKey(bytes: Array(identity.privateKeyPEM.utf8), format: .pem)
            context = try Self.context(chain: [certificate], key: key)
        } catch {
            throw .cannotListen("https", reason: "the identity cannot serve TLS: \(error)")
        }
        fingerprint = identity.fingerprint
    }

    /// A certificate chain and its private key from PEM files.
    public init(certificatePath: String, keyPath: String) throws(SignalingError) {
        let chain: [NIOSSLCertificate]
        let key: NIOSSLPrivateKey
        do { chain = try NIOSSLCertificate.fromPEMFile(certificatePath) } catch {
            throw .cannotListen("https", reason: "cannot read the certificate \(certificatePath): \(error)")
        }
        do { key = try NIOSSLPrivateKey(file: keyPath, format: .pem) } catch {
            throw .cannotListen("https", reason: "cannot read the private key \(keyPath): \(error)")
        }
        guard let first = chain.first, let der = try? first.toDERBytes() else {
            throw .cannotListen("https", reason: "\(certificatePath) holds no certificate")
        }
        do { context = try Self.context(chain: chain, key: key) } catch {
            throw .cannotListen("https", reason: "the certificate and key do not make a TLS server (do they match?): \(error)")
        }
        fingerprint = Fingerprint(certificateDER: der)
    }

    private static func context(chain: [NIOSSLCertificate], key: NIOSSLPrivateKey) throws -> NIOSSLContext {
        var configuration = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) },
                                                                     privateKey: .privateKey(key))
        configuration.minimumTLSVersion = .tlsv12
        return try NIOSSLContext(configuration: configuration)
    }
}

/// Plain HTTP on the web port: the page at `/`, 403 for a WebSocket request without the
/// right secret, 404 for anything else. One response per connection.
private final class PageHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    let page: ByteBuffer
    private var head: HTTPRequestHead?

    init(page: ByteBuffer) { self.page = page }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case let .head(head): self.head = head
        case .body: break
        case .end:
            // A WebSocket upgrade the secret did not admit reaches here without its head (the
            // upgrade handler keeps it), so no head means: refused.
            let path = head.map { WebSignalingServer.path(of: $0.uri) } ?? "/ws"
            let version = head?.version ?? .http1_1
            let (status, type, body): (HTTPResponseStatus, String, ByteBuffer) = switch (head?.method ?? .GET, path) {
            case (.GET, "/"), (.GET, "/index.html"): (.ok, "text/html; charset=utf-8", page)
            case (_, "/ws"): (.forbidden, "text/plain; charset=utf-8",
                              ByteBuffer(string: "403: this WebSocket needs the secret the node printed at start (open the page with #secret=…)\n"))
            default: (.notFound, "text/plain; charset=utf-8", ByteBuffer(string: "404: the node serves its call page at /\n"))
            }
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: type)
            headers.add(name: "Content-Length", value: String(body.readableBytes))
            headers.add(name: "Cache-Control", value: "no-store")
            headers.add(name: "Connection", value: "close")
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: version, status: status, headers: headers))), promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
            self.head = nil
        }
    }
}

/// Turns WebSocket text messages into signaling frame bodies and back: inbound, each whole
/// message is one envelope; outbound, the 4-byte length prefix the framed path writes is
/// dropped and the body goes out as one text message. Answers pings and close frames.
final class WebSocketEnvelopeCodec: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = WebSocketFrame
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = WebSocketFrame

    let maximum: Int
    private var partial: ByteBuffer?
    private var closing = false

    init(maximum: Int) { self.maximum = maximum }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .text, .binary:
            partial = frame.unmaskedData
            if frame.fin { deliver(context) }
        case .continuation:
            guard var buffer = partial else { return }
            var more = frame.unmaskedData
            buffer.writeBuffer(&more)
            guard buffer.readableBytes <= maximum else {
                partial = nil
                close(context, code: .messageTooLarge)
                return
            }
            partial = buffer
            if frame.fin { deliver(context) }
        case .ping:
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData)), promise: nil)
        case .connectionClose:
            close(context, code: .normalClosure)
        default:
            break
        }
    }

    private func deliver(_ context: ChannelHandlerContext) {
        guard let message = partial else { return }
        partial = nil
        context.fireChannelRead(wrapInboundOut(message))
    }

    private func close(_ context: ChannelHandlerContext, code: WebSocketErrorCode) {
        guard !closing else { return }
        closing = true
        var data = context.channel.allocator.buffer(capacity: 2)
        data.write(webSocketErrorCode: code)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: data))).whenComplete { _ in
            channel.close(promise: nil)
        }
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        var buffer = unwrapOutboundIn(data)
        // The framed writer prefixes each envelope with its length; a WebSocket message has its own.
        if buffer.readableBytes >= 4 { buffer.moveReaderIndex(forwardBy: 4) }
        context.write(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .text, data: buffer)), promise: promise)
    }
}
