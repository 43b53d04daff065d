import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// Why a control request got no answer.
public enum ControlClientError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Nothing listens there (no node runs with this home, or it serves elsewhere).
    case cannotConnect(String, reason: String)
    /// The connection broke, or the answer was not the API's.
    case failed(String)

    public var description: String {
        switch self {
        case let .cannotConnect(address, reason): "cannot reach the node's control API at \(address): \(reason)"
        case let .failed(reason): "the control API did not answer: \(reason)"
        }
    }
}

/// The control API's answer: its HTTP status and JSON object.
public struct ControlReply: @unchecked Sendable {  // `object` holds only JSONSerialization's immutable values
    public let status: Int
    public let object: [String: Any]

    /// Whether the request was done (2xx).
    public var succeeded: Bool { (200..<300).contains(status) }
    /// The reason an error gave.
    public var error: String? { object["error"] as? String }
}

/// A client of a running node's control API (what `callnode ctl` uses): one connection per
/// request, and the events stream read until the handler has had enough.
public struct ControlClient: Sendable {
    public let address: ControlAddress
    public let token: String?

    public init(address: ControlAddress, token: String? = nil) {
        self.address = address
        self.token = token
    }

    private typealias Connection = NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>

    private func connect() async throws(ControlClientError) -> Connection {
        let bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.seconds(5))
        let initializer: @Sendable (any Channel) -> EventLoopFuture<Connection> = { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHTTPClientHandlers()
                return try Connection(wrappingChannelSynchronously: channel)
            }
        }
        do {
            switch address {
            case let .unix(path):
                return try await bootstrap.connect(unixDomainSocketPath: path, channelInitializer: initializer)
            case let .tcp(host, port):
                return try await bootstrap.connect(host: host, port: port, channelInitializer: initializer)
            }
        } catch {
            throw .cannotConnect(address.description, reason: Self.reason(error))
        }
    }

    static func reason(_ error: any Error) -> String {
        if let io = error as? IOError {
            switch io.errnoCode {
            case ENOENT: return "no such socket (is a node running with this home? `callnode listen` serves the API)"
            case ECONNREFUSED: return "connection refused (no node is running there)"
            case EACCES: return "permission denied (the socket belongs to another user)"
            default: return io.description
            }
        }
        return "\(error)"
    }

    private func head(_ method: HTTPMethod, _ path: String, bodyLength: Int) -> HTTPRequestHead {
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: "callnode")
        headers.add(name: "Content-Length", value: String(bodyLength))
        if bodyLength > 0 { headers.add(name: "Content-Type", value: "application/json") }
        if let token { headers.add(name: "Authorization", value: "Bearer \(token)") }
        return HTTPRequestHead(version: .http1_1, method: method, uri: path, headers: headers)
    }

    /// Sends one request and reads its answer.
    ///
    /// A request the node never began to answer (the connection broke before the answer's
    /// first byte: a node busy enough to be slow to accept, or one going away) is sent once
    /// more on a new connection when it is idempotent (GET, PUT, DELETE: sending it twice does
    /// what sending it once does, RFC 9110 §9.2.2), as HTTP clients do; a POST is not, since
    /// the node may have acted on it.
    /// - Parameter body: A JSON object to send, or nil.
    public func send(_ method: String, _ path: String, body: [String: Any]? = nil) async throws(ControlClientError) -> ControlReply {
        let bytes: [UInt8] = body.flatMap { try? JSONSerialization.data(withJSONObject: $0) }.map(Array.init) ?? []
        let idempotent = ["GET", "HEAD", "PUT", "DELETE"].contains(method)
        for tries in 1...2 {
            do {
                return try await attempt(method, path, bytes)
            } catch {
                switch error {
                case let .other(failure):
                    throw failure
                case let .unanswered(reason):
                    guard idempotent, tries == 1 else { throw .failed(reason) }
                    try? await Task.sleep(for: .milliseconds(50))
                }
            }
        }
        throw .failed("no answer")  // not reached: the second try returns or throws
    }

    /// How one attempt at a request failed: before any of the answer came, or otherwise.
    private enum AttemptError: Error {
        case unanswered(String)
        case other(ControlClientError)
    }

    private func attempt(_ method: String, _ path: String, _ bytes: [UInt8]) async throws(AttemptError) -> ControlReply {
        let connection: Connection
        do { connection = try await connect() } catch { throw .other(error) }
        let head = self.head(HTTPMethod(rawValue: method), path, bodyLength: bytes.count)
        var answering = false  // the answer's head has come
        do {
            return try await connection.executeThenClose { inbound, outbound in
                // A node may answer and close before the request's end has gone out (it had
                // all it needed): its answer, already read, is taken all the same.
                var unsent: (any Error)?
                do {
                    try await outbound.write(.head(head))
                    if !bytes.isEmpty { try await outbound.write(.body(.byteBuffer(ByteBuffer(bytes: bytes)))) }
                    try await outbound.write(.end(nil))
                } catch {
                    unsent = error
                }
                var status = 0
                var received: [UInt8] = []
                for try await part in inbound {
                    switch part {
                    case let .head(response):
                        status = Int(response.status.code)
                        answering = true
                    case let .body(buffer): received.append(contentsOf: buffer.readableBytesView)
                    case .end:
                        let object = (try? JSONSerialization.jsonObject(with: Data(received))) as? [String: Any]
                        return ControlReply(status: status, object: object ?? ["error": String(decoding: received, as: UTF8.self)])
                    }
                }
                if let unsent { throw unsent }
                throw ControlClientError.failed("the connection closed before the answer ended")
            }
        } catch let error as ControlClientError where answering {
            throw .other(error)
        } catch let error as ControlClientError {
            guard case let .failed(reason) = error else { throw .other(error) }
            throw .unanswered(reason)
        } catch {
            throw answering ? .other(.failed(Self.reason(error))) : .unanswered(Self.reason(error))
        }
    }

    /// Reads `GET /v1/events` (one call's with `call`), handing each event to `handle` until it
    /// returns false or the stream ends. Returns the stream's end: nil when the handler stopped
    /// or the node closed it, the reason when the node dropped this reader.
    public func events(call: String? = nil, _ handle: ([String: Any]) async -> Bool) async throws(ControlClientError) -> String? {
        let connection = try await connect()
        var path = "/v1/events"
        if let call { path += "?call=\(call.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed) ?? call)" }
        let head = self.head(.GET, path, bodyLength: 0)
        do {
            return try await connection.executeThenClose { inbound, outbound in
                try await outbound.write(.head(head))
                try await outbound.write(.end(nil))
                var buffered: [UInt8] = []
                var status = 0
                var errorBody: [UInt8] = []
                for try await part in inbound {
                    switch part {
                    case let .head(response): status = Int(response.status.code)
                    case let .body(buffer):
                        guard status == 200 else {
                            errorBody.append(contentsOf: buffer.readableBytesView)
                            continue
                        }
                        buffered.append(contentsOf: buffer.readableBytesView)
                        // Events end with a blank line.
                        while let end = Self.eventEnd(in: buffered) {
                            let event = Array(buffered[..<end.start])
                            buffered.removeFirst(end.next)
                            guard let object = Self.parseEvent(event) else { continue }
                            if object["event"] as? String == "dropped", let reason = object["reason"] as? String { return reason }
                            if await !handle(object) { return nil }
                        }
                    case .end:
                        if status != 200 {
                            let object = (try? JSONSerialization.jsonObject(with: Data(errorBody))) as? [String: Any]
                            throw ControlClientError.failed((object?["error"] as? String) ?? "HTTP \(status)")
                        }
                        return nil
                    }
                }
                return nil
            }
        } catch let error as ControlClientError {
            throw error
        } catch {
            throw .failed(Self.reason(error))
        }
    }

    static func eventEnd(in bytes: [UInt8]) -> (start: Int, next: Int)? {
        guard bytes.count >= 2 else { return nil }
        for i in 0..<(bytes.count - 1) where bytes[i] == 0x0A && bytes[i + 1] == 0x0A {
            return (i, i + 2)
        }
        return nil
    }

    /// The JSON of an event's `data:` lines (nil for a comment or an event without data).
    static func parseEvent(_ bytes: [UInt8]) -> [String: Any]? {
        var data: [UInt8] = []
        for line in bytes.split(separator: 0x0A) where line.starts(with: Array("data:".utf8)) {
            var value = Array(line.dropFirst(5))
            if value.first == 0x20 { value.removeFirst() }
            data.append(contentsOf: value)
        }
        guard !data.isEmpty else { return nil }
        return (try? JSONSerialization.jsonObject(with: Data(data))) as? [String: Any]
    }
}
