import JanusRoom
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket

/// Janus's WebSocket API (its websockets transport, port 8188 by default, subprotocol
/// `janus-protocol`): requests, their replies and the session's events on one connection, with
/// no long poll. Requests name their session and handle in the body (`session_id`,
/// `handle_id`) rather than in a path.
public enum JanusWebSocket {
    /// The subprotocol Janus's websockets transport speaks.
    public static let subprotocol = "janus-protocol"

    private enum Upgrade {
        case upgraded(NIOAsyncChannel<WebSocketFrame, WebSocketFrame>)
        case refused
    }

    /// Connects to `host:port` at `path`, sends each message of `outgoing` in order and hands
    /// every message Janus sends to `incoming`, until the connection closes (returns) or cannot
    /// be made or breaks (throws). Cancelling the calling task closes it.
    public static func run(host: String, port: Int, path: String, outgoing: AsyncStream<JanusJSON>,
                           incoming: @escaping @Sendable (JanusJSON) async -> Void) async throws(JanusHTTPError) {
        let upgrade: EventLoopFuture<Upgrade>
        do {
            upgrade = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connectTimeout(.seconds(5))
                .connect(host: host, port: port) { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let upgrader = NIOTypedWebSocketClientUpgrader<Upgrade>(upgradePipelineHandler: { channel, _ in
                            channel.eventLoop.makeCompletedFuture {
                                .upgraded(try NIOAsyncChannel<WebSocketFrame, WebSocketFrame>(wrappingChannelSynchronously: channel))
                            }
                        })
                        var headers = HTTPHeaders()
                        headers.add(name: "Host", value: host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)")
                        headers.add(name: "Sec-WebSocket-Protocol", value: subprotocol)
                        headers.add(name: "Content-Length", value: "0")
                        let configuration = NIOTypedHTTPClientUpgradeConfiguration(
                            upgradeRequestHead: HTTPRequestHead(version: .http1_1, method: .GET, uri: path, headers: headers),
                            upgraders: [upgrader],
                            notUpgradingCompletionHandler: { channel in channel.eventLoop.makeCompletedFuture { .refused } })
                        return try channel.pipeline.syncOperations.configureUpgradableHTTPClientPipeline(
                            configuration: .init(upgradeConfiguration: configuration))
                    }
                }
        } catch {
            throw JanusHTTPError(String(describing: error).contains("connectionRefused") || String(describing: error).contains("refused")
                                 ? "connection refused" : String(describing: error))
        }
        let channel: NIOAsyncChannel<WebSocketFrame, WebSocketFrame>
        do {
            guard case let .upgraded(upgraded) = try await upgrade.get() else {
                throw JanusHTTPError("no WebSocket at ws://\(host):\(port)\(path) (the server did not upgrade the connection)")
            }
            channel = upgraded
        } catch let error as JanusHTTPError {
            throw error
        } catch {
            throw JanusHTTPError("the WebSocket handshake failed: \(error)")
        }
        do {
            try await channel.executeThenClose { inbound, outbound in
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        for await message in outgoing {
                            let frame = WebSocketFrame(fin: true, opcode: .text, maskKey: .random(), data: ByteBuffer(bytes: message.serialized))
                            try await outbound.write(frame)
                        }
                        outbound.finish()
                    }
                    group.addTask {
                        var pending: [UInt8] = []
                        for try await frame in inbound {
                            switch frame.opcode {
                            case .text, .binary, .continuation:
                                var data = frame.unmaskedData
                                pending += data.readBytes(length: data.readableBytes) ?? []
                                guard pending.count <= 4 << 20 else { throw JanusHTTPError("a Janus message over 4 MiB") }
                                guard frame.fin else { continue }
                                if let json = JanusJSON.parse(pending) {
                                    await incoming(json)
                                } else {
                                    await incoming(["janus": "unreadable", "text": .string(String(decoding: pending.prefix(120), as: UTF8.self))])
                                }
                                pending.removeAll(keepingCapacity: true)
                            case .ping:
                                try await outbound.write(WebSocketFrame(fin: true, opcode: .pong, maskKey: .random(), data: frame.unmaskedData))
                            case .connectionClose:
                                return
                            default:
                                continue
                            }
                        }
                    }
                    // Either side ending ends the connection.
                    try await group.next()
                    group.cancelAll()
                }
            }
        } catch let error as JanusHTTPError {
            throw error
        } catch is CancellationError {
            return
        } catch {
            throw JanusHTTPError("the WebSocket to Janus broke: \(error)")
        }
    }
}
