import NIOCore
import NIOHTTP1
import NIOPosix

/// A small HTTP server for a metrics scrape: `GET /metrics` answers with what `render`
/// returns (Prometheus text exposition), anything else with 404. One response per connection.
///
/// `render` runs on a NIO event loop for each scrape: it must be quick and must not block.
public final class MetricsEndpoint: Sendable {
    /// The bound port (useful with port 0).
    public let port: Int
    public let host: String
    private let channel: any Channel

    /// Binds `host:port`.
    /// - Throws: ``SignalingError/cannotListen(_:reason:)``.
    public init(host: String, port: Int, render: @escaping @Sendable () -> [UInt8]) async throws(SignalingError) {
        do {
            channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .serverChannelOption(.backlog, value: 16)
                .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                .childChannelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                        try channel.pipeline.syncOperations.addHandler(ScrapeHandler(render: render))
                    }
                }
                .bind(host: host, port: port).get()
        } catch {
            throw .cannotListen("\(host):\(port)", reason: SignalingClient.reason(error))
        }
        self.port = channel.localAddress?.port ?? port
        self.host = host
    }

    public func close() async {
        try? await channel.close()
    }
}

private final class ScrapeHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    let render: @Sendable () -> [UInt8]
    private var head: HTTPRequestHead?

    init(render: @escaping @Sendable () -> [UInt8]) { self.render = render }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case let .head(head): self.head = head
        case .body: break
        case .end:
            let path = head.map { WebSignalingServer.path(of: $0.uri) } ?? "/"
            let found = head?.method == .GET && path == "/metrics"
            var body = context.channel.allocator.buffer(capacity: 0)
            if found {
                body.writeBytes(render())
            } else {
                body.writeString("404: metrics are at /metrics\n")
            }
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: found ? "text/plain; version=0.0.4; charset=utf-8" : "text/plain; charset=utf-8")
            headers.add(name: "Content-Length", value: String(body.readableBytes))
            headers.add(name: "Connection", value: "close")
            let head = HTTPResponseHead(version: head?.version ?? .http1_1, status: found ? .ok : .notFound, headers: headers)
            context.write(wrapOutboundOut(.head(head)), promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
            self.head = nil
        }
    }
}
