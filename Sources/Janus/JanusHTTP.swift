import JanusRoom
import NIOCore
import NIOHTTP1
import NIOPosix

/// Why Janus's HTTP API gave no usable reply.
public struct JanusHTTPError: Error, Sendable, CustomStringConvertible {
    public let description: String
    /// The HTTP status Janus answered with, when it answered.
    public let status: Int?
    public init(_ description: String, status: Int? = nil) {
        self.description = description
        self.status = status
    }
}

/// Janus's HTTP API (its REST transport, port 8088 at `/janus` by default): requests posted as
/// JSON and the session's events read by long poll. One connection per request, as Janus's
/// HTTP transport closes them freely; nothing blocks a thread (swift-nio's event loops).
public struct JanusHTTP: Sendable {
    public let host: String
    public let port: Int
    /// Longest wait for a request's reply (a long poll waits up to ``pollWait`` more).
    public var timeout: Duration = .seconds(10)
    /// Janus holds a long poll up to 30 s before it answers with a keep-alive.
    public static let pollWait: Duration = .seconds(30)

    public init(host: String, port: Int) {
        self.host = host
        self.port = port
    }

    public init(_ address: JanusRoomAddress) {
        self.init(host: address.host, port: address.port)
    }

    /// Posts `body` to `path`; returns the reply's JSON.
    public func post(_ path: String, _ body: JanusJSON) async throws(JanusHTTPError) -> JanusJSON {
        try await exchange(.POST, path, body: body.serialized, wait: timeout)
    }

    /// Reads the events of a session (`/janus/SESSION`), up to `maximum` at once: an array
    /// (empty when Janus had nothing for the poll's length).
    /// A poll of a session Janus does not know (it restarted, or timed the session out) gets
    /// 404 and nothing else: it is told as Janus's own error for it (458, no such session).
    public func poll(session path: String, maximum: Int = 16) async throws(JanusHTTPError) -> [JanusJSON] {
        let reply: JanusJSON
        do {
            reply = try await exchange(.GET, "\(path)?maxev=\(maximum)", body: nil, wait: timeout + Self.pollWait)
        } catch where error.status == 404 {
            return [["janus": "error", "error": ["code": 458, "reason": "No such session (HTTP 404 to its poll)"]]]
        }
        if let events = reply.array { return events }
        return reply["janus"]?.string == "keepalive" ? [] : [reply]
    }

    private typealias Connection = NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>

    private func exchange(_ method: HTTPMethod, _ path: String, body: [UInt8]?, wait: Duration) async throws(JanusHTTPError) -> JanusJSON {
        let host = self.host, port = self.port
        let reply: Result<(HTTPResponseStatus, [UInt8]), JanusHTTPError> = await withTaskGroup(of: Result<(HTTPResponseStatus, [UInt8]), JanusHTTPError>?.self) { group in
            group.addTask {
                do {
                    return .success(try await Self.send(method, path, body: body, host: host, port: port))
                } catch let error as JanusHTTPError {
                    return .failure(error)
                } catch is CancellationError {
                    return nil
                } catch {
                    return .failure(JanusHTTPError(Self.describe(error)))
                }
            }
            group.addTask {
                try? await Task.sleep(for: wait)
                return Task.isCancelled ? nil : .failure(JanusHTTPError("no reply within \(wait)"))
            }
            var outcome: Result<(HTTPResponseStatus, [UInt8]), JanusHTTPError> = .failure(JanusHTTPError("cancelled"))
            for await result in group {
                if let result {
                    outcome = result
                    break
                }
            }
            group.cancelAll()
            return outcome
        }
        let (status, bytes) = try reply.get()
        // Janus answers some failures with an error status and its own error object (a session
        // it does not know: 404 with error 458): that object is the reply.
        if status != .ok, let json = JanusJSON.parse(bytes), json["janus"]?.string == "error" { return json }
        guard status == .ok else {
            let text = String(decoding: bytes.prefix(200), as: UTF8.self)
            throw JanusHTTPError("HTTP \(status.code) from Janus\(text.isEmpty ? "" : ": \(text)")", status: Int(status.code))
        }
        guard let json = JanusJSON.parse(bytes) else {
            throw JanusHTTPError("Janus's reply is not JSON: \(String(decoding: bytes.prefix(120), as: UTF8.self))")
        }
        return json
    }

    private static func send(_ method: HTTPMethod, _ path: String, body: [UInt8]?, host: String, port: Int) async throws -> (HTTPResponseStatus, [UInt8]) {
        let connection = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.seconds(5))
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    return try Connection(wrappingChannelSynchronously: channel)
                }
            }
        return try await connection.executeThenClose { inbound, outbound in
            var head = HTTPRequestHead(version: .http1_1, method: method, uri: path)
            head.headers.add(name: "Host", value: host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)")
            head.headers.add(name: "Connection", value: "close")
            if let body {
                head.headers.add(name: "Content-Type", value: "application/json")
                head.headers.add(name: "Content-Length", value: String(body.count))
            }
            // One write: Janus may answer and close as soon as the body is in, and a later write
            // on the closed channel would fail a request Janus has done.
            var parts: [HTTPClientRequestPart] = [.head(head)]
            if let body { parts.append(.body(.byteBuffer(ByteBuffer(bytes: body)))) }
            parts.append(.end(nil))
            var unsent: (any Error)?
            do { try await outbound.write(contentsOf: parts) } catch { unsent = error }
            var status = HTTPResponseStatus.ok
            var bytes: [UInt8] = []
            for try await part in inbound {
                switch part {
                case let .head(response): status = response.status
                case var .body(buffer):
                    bytes += buffer.readBytes(length: buffer.readableBytes) ?? []
                    guard bytes.count <= 4 << 20 else { throw JanusHTTPError("Janus's reply is over 4 MiB") }
                case .end: return (status, bytes)
                }
            }
            throw unsent ?? JanusHTTPError("Janus closed the connection before its reply ended")
        }
    }

    private static func describe(_ error: any Error) -> String {
        if let error = error as? IOError { return error.description }
        let text = String(describing: error)
        if text.contains("connectTimeout") { return "no answer to the connection within 5 s" }
        if text.contains("connectionRefused") || text.contains("Connection refused") { return "connection refused" }
        return text
    }
}
