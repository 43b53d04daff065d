import CallNode
import Foundation
import Locking
import NIOCore
import NIOHTTP1
import NIOPosix

#if canImport(Glibc)
import Glibc
#endif

/// Where the control API listens: a Unix socket (the default, guarded by the file's
/// permissions) or TCP on loopback (guarded by a bearer token).
public enum ControlAddress: Sendable, Equatable, CustomStringConvertible {
    case unix(String)
    case tcp(host: String, port: Int)

    /// Reads `unix:PATH` or `tcp:HOST:PORT` (a bare path is a Unix socket).
    public init?(_ text: String) {
        if text.hasPrefix("unix:") {
            let path = String(text.dropFirst(5))
            guard !path.isEmpty else { return nil }
            self = .unix(path)
        } else if text.hasPrefix("tcp:") {
            guard let address = SignalAddress(String(text.dropFirst(4))) else { return nil }
            self = .tcp(host: address.host, port: address.port)
        } else if text.hasPrefix("/") || text.hasPrefix(".") {
            self = .unix(text)
        } else {
            return nil
        }
    }

    public var description: String {
        switch self {
        case let .unix(path): "unix:\(path)"
        case let .tcp(host, port): "tcp:\(SignalAddress(host: host, port: port))"
        }
    }

    /// Whether `host` is this machine's loopback.
    public static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host.hasPrefix("127.")
    }
}

/// Why the control API could not start.
public enum ControlError: Error, Sendable, Equatable, CustomStringConvertible {
    case cannotListen(String, reason: String)
    /// Another running node answers on this socket.
    case inUse(String)
    /// TCP is served on loopback only.
    case notLoopback(String)
    /// TCP needs a bearer token.
    case tokenRequired

    public var description: String {
        switch self {
        case let .cannotListen(address, reason): "cannot serve the control API at \(address): \(reason)"
        case let .inUse(path): "another node serves its control API at \(path) (give this one --control unix:OTHER_PATH, or --control none)"
        case let .notLoopback(host): "the control API is served over TCP on loopback only (127.0.0.1 or ::1), not \(host): use its Unix socket from other users' programs"
        case .tokenRequired: "the control API over TCP needs a token (control-token in config.yaml, CALLNODE_CONTROL_TOKEN or --control-token-file)"
        }
    }
}

/// The control API over HTTP/1.1: JSON requests answered by ``ControlAPI``, and `GET
/// /v1/events` streamed as server-sent events (`?call=ID` for one call's). One request per
/// connection (`Connection: close`); `curl --unix-socket PATH http://node/v1/calls` works.
///
/// Nothing here waits on a client: a reader of events that falls behind is dropped (see
/// ``ControlEvents``), one that disconnects costs its subscription only, and a request body
/// over ``Limits/bodyBytes`` is refused.
public final class ControlServer: Sendable {
    public struct Limits: Sendable {
        /// The largest request body taken.
        public var bodyBytes = 65_536
        /// Bytes NIO queues for one connection before writes wait (events then queue in the
        /// reader's bound, ``ControlEvents/readerLimit``).
        public var writeBufferHighWater = 65_536
        /// The kernel's send buffer per connection (nil: the system's).
        public var socketSendBuffer: Int?
        public init() {}
    }

    /// Where it listens (with TCP port 0: the port bound).
    public let address: ControlAddress
    public let api: ControlAPI
    private let server: NIOAsyncChannel<NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>, Never>
    /// Who may use it over TCP (nil on a Unix socket: its file's permissions decide).
    private let access: ConsoleAccess?
    private let limits: Limits
    /// The node's events for the API, if this server feeds them (see `ownsAPI`).
    private let nodeEvents: AsyncStream<NodeEvent>?
    /// Connections being answered now (not event streams): a request read or being read, an
    /// answer being written.
    private let answering = Locked(0)
    /// Finished by ``close()`` once the answers in progress are written: what ``run()`` still
    /// serves (event streams, a connection that never sent its request) is then cut.
    private let cut = AsyncStream<Never>.makeStream()

    /// Listens at `address`. A Unix socket is made readable and writable by this user only; a
    /// stale socket file (no node answers on it) is replaced.
    /// - Parameters:
    ///   - token: The bearer token TCP clients must present (required for TCP).
    ///   - ownsAPI: Whether this server feeds the API the node's events and closes it when it
    ///     closes. False for a second address serving the same API (the console's port beside
    ///     the Unix socket): one API, fed once.
    /// - Throws: ``ControlError``.
    public init(api: ControlAPI, address: ControlAddress, token: String? = nil, limits: Limits = Limits(),
                ownsAPI: Bool = true) async throws(ControlError) {
        self.api = api
        self.limits = limits
        access = token.flatMap { $0.isEmpty ? nil : ConsoleAccess(token: Array($0.utf8)) }
        nodeEvents = ownsAPI ? api.node.events() : nil
        let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 64)
            .childChannelOption(.writeBufferWaterMark, value: .init(low: limits.writeBufferHighWater / 2, high: limits.writeBufferHighWater))
        let child = limits.socketSendBuffer.map { bootstrap.childChannelOption(.socketOption(.so_sndbuf), value: SocketOptionValue($0)) } ?? bootstrap
        let initializer: @Sendable (any Channel) -> EventLoopFuture<NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>> = { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                return try NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>(wrappingChannelSynchronously: channel)
            }
        }
        switch address {
        case let .unix(path):
            if FileManager.default.fileExists(atPath: path) {
                guard !Self.answers(path) else { throw .inUse(path) }
            }
            do {
                server = try await child.bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true, childChannelInitializer: initializer)
            } catch {
                throw .cannotListen(path, reason: "\(error)")
            }
            chmod(path, 0o600)
            self.address = address
        case let .tcp(host, port):
            guard ControlAddress.isLoopback(host) else { throw .notLoopback(host) }
            guard token?.isEmpty == false else { throw .tokenRequired }
            do {
                server = try await child.serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
                    .bind(host: host, port: port, childChannelInitializer: initializer)
            } catch {
                throw .cannotListen("\(host):\(port)", reason: "\(error)")
            }
            self.address = .tcp(host: host, port: server.channel.localAddress?.port ?? port)
        }
    }

    /// Whether something accepts connections on the Unix socket at `path`.
    static func answers(_ path: String) -> Bool {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { Glibc.close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, byte) in bytes.enumerated() { raw[i] = byte }
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        return result == 0
    }

    /// Serves until ``close()`` or cancellation: each connection in a child task, and the
    /// node's events to the API (for readers, and to end a finished call's prompt and recording).
    /// Closing does not cancel a connection being answered: its answer is written first.
    public func run() async {
        let api = self.api, nodeEvents = self.nodeEvents, cut = self.cut.stream
        try? await withThrowingDiscardingTaskGroup { group in
            if let nodeEvents {
                group.addTask {
                    for await event in nodeEvents { await api.nodeEvent(event) }
                }
            }
            group.addTask {
                // Ends when ``close()`` has let the answers in progress finish (or on
                // cancellation): throwing cancels what is left.
                for await _ in cut {}
                throw CancellationError()
            }
            try? await server.executeThenClose { inbound in
                for try await connection in inbound {
                    group.addTask { await self.serve(connection) }
                }
            }
        }
    }

    /// Stops listening, removes the socket file, closes the event streams and lets the
    /// requests being answered finish (for at most two seconds): a drain request's answer is
    /// written before the node it drained exits. Then ``run()`` returns.
    public func close() async {
        try? await server.channel.close()
        if case let .unix(path) = address { unlink(path) }
        if nodeEvents != nil { await api.close() }
        for _ in 0..<200 where answering.withLock({ $0 }) > 0 {
            try? await Task.sleep(for: .milliseconds(10))
        }
        cut.continuation.finish()
    }

    private func serve(_ connection: NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>) async {
        // Counted until the connection is closed (its answer handed to the socket), except
        // while it streams events.
        answering.withLock { $0 += 1 }
        defer { answering.withLock { $0 -= 1 } }
        try? await connection.executeThenClose { inbound, outbound in
            var head: HTTPRequestHead?
            var body: [UInt8] = []
            var tooLarge = false
            for try await part in inbound {
                switch part {
                case let .head(received):
                    head = received
                case let .body(buffer):
                    if body.count + buffer.readableBytes > limits.bodyBytes {
                        tooLarge = true
                    } else {
                        body.append(contentsOf: buffer.readableBytesView)
                    }
                case .end:
                    guard let head else { return }
                    let request = ControlRequest(method: head.method.rawValue, uri: head.uri, body: tooLarge ? [] : body)
                    if let page = ConsolePage.answer(request) {
                        try await Self.write(page, to: connection.channel)
                        return
                    }
                    if request.path == ConsoleAccess.sessionPath, !tooLarge {
                        try await Self.write(access?.session(request) ?? ConsoleAccess.signedOut, to: connection.channel)
                        return
                    }
                    if let access, !access.allows(head) {
                        try await Self.write(.error(401, "give the control token: Authorization: Bearer TOKEN (or sign in to the console at /console/)"),
                                             to: connection.channel)
                        return
                    }
                    if tooLarge {
                        try await Self.write(.error(413, "the body is larger than \(limits.bodyBytes) bytes"), to: connection.channel)
                        return
                    }
                    if request.method == "GET", request.path == "/v1/events" {
                        answering.withLock { $0 -= 1 }
                        defer { answering.withLock { $0 += 1 } }
                        try await streamEvents(request, outbound: outbound, channel: connection.channel)
                    } else {
                        try await Self.write(await api.respond(to: request), to: connection.channel)
                    }
                    return
                }
            }
        }
    }

    /// Writes a whole answer and returns once the socket has taken all of it (at most 10 s).
    /// The connection closes right after: an answer still queued in the channel then would be
    /// cut short — what a large answer through a small send buffer to a reader that has not
    /// read yet got ("stream ended at an unexpected time" in the client).
    static func write(_ response: ControlResponse, to channel: any Channel) async throws {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: response.contentType)
        headers.add(name: "Content-Length", value: String(response.body.count))
        for header in response.headers { headers.add(name: header.name, value: header.value) }
        headers.add(name: "Connection", value: "close")
        channel.write(HTTPServerResponsePart.head(HTTPResponseHead(version: .http1_1, status: .init(statusCode: response.status), headers: headers)),
                      promise: nil)
        channel.write(HTTPServerResponsePart.body(.byteBuffer(ByteBuffer(bytes: response.body))), promise: nil)
        let written = channel.eventLoop.makePromise(of: Void.self)
        channel.writeAndFlush(HTTPServerResponsePart.end(nil), promise: written)
        // A reader that never reads does not hold the connection (and a drain) for good.
        let limit = channel.eventLoop.scheduleTask(in: .seconds(10)) { channel.close(promise: nil) }
        defer { limit.cancel() }
        try await written.futureResult.get()
    }

    /// `GET /v1/events`: every event from now on (or one call's), until the client goes, the
    /// server closes, or the reader falls behind (then a last `dropped` event says why, and
    /// the connection closes).
    private func streamEvents(_ request: ControlRequest, outbound: NIOAsyncChannelOutboundWriter<HTTPServerResponsePart>,
                              channel: any Channel) async throws {
        var call: UUID?
        if let id = request.query["call"] {
            switch api.resolve(id) {
            case let .success(found): call = found.id
            case let .failure(problem):
                guard let uuid = UUID(uuidString: id) else {
                    try await Self.write(.error(problem.status, problem.reason), to: channel)
                    return
                }
                call = uuid  // a call that has not started yet, or has just ended
            }
        }
        let (_, lines) = api.events.subscribe(call: call) { reason in
            // The reader is behind: the notice is queued after what it has not read, and the
            // connection closes once it is written or in a second, whichever is first.
            var notice = Array("event: dropped\ndata: ".utf8)
            notice.append(contentsOf: JSONLine.data(["event": "dropped", "reason": reason, "time": Date().timeIntervalSince1970]) ?? Data())
            notice.append(0x0A)
            let bytes = notice
            channel.eventLoop.execute {
                let written = channel.writeAndFlush(HTTPServerResponsePart.body(.byteBuffer(ByteBuffer(bytes: bytes))))
                written.whenComplete { _ in channel.close(promise: nil) }
                channel.eventLoop.scheduleTask(in: .seconds(1)) { channel.close(promise: nil) }
            }
        }
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "text/event-stream")
        headers.add(name: "Cache-Control", value: "no-cache")
        headers.add(name: "Connection", value: "close")
        try await outbound.write(.head(HTTPResponseHead(version: .http1_1, status: .ok, headers: headers)))
        // A comment first, so the client sees the stream open before the first event.
        try await outbound.write(.body(.byteBuffer(ByteBuffer(string: ": events of \(call.map { "call \($0.uuidString)" } ?? "every call")\n\n"))))
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                // The client went away (or the connection was closed here).
                _ = try? await channel.closeFuture.get()
            }
            group.addTask {
                for await line in lines {
                    do { try await outbound.write(.body(.byteBuffer(ByteBuffer(bytes: line)))) } catch { return }
                }
            }
            _ = await group.next()
            group.cancelAll()
            channel.close(promise: nil)  // ends the other task if it is the close watcher
        }
    }
}
