import CallNode
import CallNodeTestKit
import CallNodeTestSupport
import Foundation
import Locking
@testable import NodeControl
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The control API's server on real sockets: curl over its Unix socket, its permissions, TCP
/// with a token, events streamed to readers (a stalled one dropped alone, a departed one
/// forgotten), and the OpenAPI document checked against the routes served.
@Suite struct ControlServerTests {
    /// A server for `node` at `address`, serving until the returned task is cancelled.
    static func serve(_ node: CallNode, at address: ControlAddress, token: String? = nil, events: ControlEvents = ControlEvents(),
                      limits: ControlServer.Limits = ControlServer.Limits()) async throws -> (ControlServer, Task<Void, Never>) {
        let server = try await ControlServer(api: ControlAPI(node: node, events: events), address: address, token: token, limits: limits)
        return (server, Task { await server.run() })
    }

    /// Polls `condition` every 20 ms for at most `seconds`.
    static func eventually(within seconds: Double = 5, _ condition: () -> Bool) async throws -> Bool {
        for _ in 0..<Int(seconds * 50) {
            if condition() { return true }
            try await Task.sleep(for: .milliseconds(20))
        }
        return condition()
    }

    @Test func curlReachesTheNodeOnItsSocketWhichOnlyItsUserMayOpen() async throws {
        let f = try InMemoryNodes()
        let bob = try await f.node("bob")
        let path = ControlRequests.socketPath()
        let (server, serving) = try await Self.serve(bob, at: .unix(path))
        let (status, output) = try await ControlRequests.curl(["--unix-socket", path, "http://node/v1/node"])
        #expect(status == 0)
        let object = try #require((try? JSONSerialization.jsonObject(with: Data(output.utf8))) as? [String: Any], "\(output)")
        #expect(object["fingerprint"] as? String == bob.identity.fingerprint.hex && object["calls"] as? Int == 0)
        var info = stat()
        #expect(stat(path, &info) == 0 && info.st_mode & 0o777 == 0o600)
        // A POST with a body, and a 4xx with its reason, as curl sees them.
        let refused = try await ControlRequests.curl(["--unix-socket", path, "-X", "POST", "-d", #"{"to": "nobody"}"#, "-w", "\n%{http_code}", "http://node/v1/calls"])
        #expect(refused.output.hasSuffix("\n400") && refused.output.contains("no contact named 'nobody'"), "\(refused.output)")

        // A second node on the same socket is refused, saying which; the first is unharmed.
        await #expect(throws: ControlError.inUse(path)) { _ = try await ControlServer(api: ControlAPI(node: bob), address: .unix(path)) }
        #expect(try await ControlRequests.curl(["--unix-socket", path, "http://node/v1/calls"]).output.contains("\"calls\""))
        serving.cancel()
        await server.close()
        #expect(access(path, F_OK) != 0, "the socket file outlived its server")
        await f.shutdown()
    }

    @Test func aStaleSocketFileIsReplaced() async throws {
        let f = try InMemoryNodes()
        let bob = try await f.node("bob")
        let path = ControlRequests.socketPath()
        // A socket file nobody listens on (a node killed with -9 leaves one).
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in for (i, byte) in path.utf8.enumerated() { raw[i] = byte } }
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
        close(fd)
        #expect(bound == 0 && access(path, F_OK) == 0)
        let (server, serving) = try await Self.serve(bob, at: .unix(path))
        #expect(try await ControlRequests.curl(["--unix-socket", path, "http://node/v1/node"]).output.contains(bob.identity.fingerprint.hex))
        serving.cancel()
        await server.close()
        await f.shutdown()
    }

    @Test func tcpIsServedOnLoopbackOnlyAndOnlyWithItsToken() async throws {
        let f = try InMemoryNodes()
        let bob = try await f.node("bob")
        await #expect(throws: ControlError.notLoopback("0.0.0.0")) {
            _ = try await ControlServer(api: ControlAPI(node: bob), address: .tcp(host: "0.0.0.0", port: 0), token: "t")
        }
        await #expect(throws: ControlError.tokenRequired) {
            _ = try await ControlServer(api: ControlAPI(node: bob), address: .tcp(host: "127.0.0.1", port: 0))
        }
        let token = "s3cret-\(UUID().uuidString)"
        let (server, serving) = try await Self.serve(bob, at: .tcp(host: "127.0.0.1", port: 0), token: token)
        guard case let .tcp(_, port) = server.address else { throw TestFailure("not TCP") }
        let url = "http://127.0.0.1:\(port)/v1/node"
        #expect(try await ControlRequests.curl(["-w", "\n%{http_code}", url]).output.hasSuffix("\n401"))
        #expect(try await ControlRequests.curl(["-w", "\n%{http_code}", "-H", "Authorization: Bearer wrong", url]).output.hasSuffix("\n401"))
        let allowed = try await ControlRequests.curl(["-w", "\n%{http_code}", "-H", "Authorization: Bearer \(token)", url])
        #expect(allowed.output.hasSuffix("\n200") && allowed.output.contains(bob.identity.fingerprint.hex))
        // The client takes the token too.
        let reply = try await ControlClient(address: server.address, token: token).send("GET", "/v1/calls")
        #expect(reply.status == 200 && reply.object["calls"] as? [Any] != nil)
        serving.cancel()
        await server.close()
        await f.shutdown()
    }

    @Test func aBodyTooLargeIsRefusedAndTheServerGoesOn() async throws {
        let f = try InMemoryNodes()
        let bob = try await f.node("bob")
        let path = ControlRequests.socketPath()
        var limits = ControlServer.Limits()
        limits.bodyBytes = 1_024
        let (server, serving) = try await Self.serve(bob, at: .unix(path), limits: limits)
        let client = ControlClient(address: .unix(path))
        let big = await client.sendResult("POST", "/v1/calls", body: ["to": String(repeating: "x", count: 4_000)])
        #expect(big?.status == 413)
        #expect(try await client.send("GET", "/v1/node").status == 200)
        serving.cancel()
        await server.close()
        await f.shutdown()
    }

    @Test func eachReaderGetsEveryEventAStalledOneIsDroppedAloneAndADepartedOneIsForgotten() async throws {
        let f = try InMemoryNodes()
        let bob = try await f.node("bob")
        let path = ControlRequests.socketPath()
        var limits = ControlServer.Limits()
        limits.writeBufferHighWater = 1_024
        limits.socketSendBuffer = 4_096
        let events = ControlEvents(readerLimit: 256)
        let (server, serving) = try await Self.serve(bob, at: .unix(path), events: events, limits: limits)
        let client = ControlClient(address: .unix(path))

        // A reader that asks for events and never reads them.
        let stalled = UnixSocket.connect(path, receiveBuffer: 1_024)
        defer { close(stalled) }
        #expect(stalled >= 0)
        let request = Array("GET /v1/events HTTP/1.1\r\nHost: node\r\n\r\n".utf8)
        #expect(write(stalled, request, request.count) == request.count)

        // A reader that keeps up, counting what it gets.
        let received = Locked<[Int]>([])
        let total = 2_000
        let reading = Task {
            try await client.events { object in
                guard let n = object["n"] as? Int else { return true }
                received.withLock { $0.append(n) }
                return n < total - 1
            }
        }
        #expect(try await Self.eventually { events.readers == 2 })

        // Events in bursts (a call's events come a few at a time), each a few hundred bytes; the
        // next burst once the reader that keeps up has had this one.
        let padding = String(repeating: "x", count: 300)
        for burst in 0..<(total / 50) {
            for i in 0..<50 { events.publish(["event": "test", "n": burst * 50 + i, "padding": padding]) }
            #expect(try await Self.eventually { received.withLock { $0.count } == (burst + 1) * 50 }, "burst \(burst)")
        }
        let dropped = try await reading.value
        #expect(dropped == nil)
        #expect(received.withLock { $0 } == Array(0..<total), "the reader that kept up missed events")
        #expect(events.droppedReaders == 1, "\(events.droppedReaders) readers dropped")

        // A reader that leaves mid-stream costs nothing after: its subscription goes with it.
        #expect(try await Self.eventually { events.readers == 0 })
        let leaving = Task { try await client.events { _ in false } }
        #expect(try await Self.eventually { events.readers == 1 })
        events.publish(["event": "test", "n": -1])
        _ = try await leaving.value
        #expect(try await Self.eventually { events.readers == 0 })
        #expect(try await client.send("GET", "/v1/node").object["event_readers_dropped"] as? Int == 1)
        serving.cancel()
        await server.close()
        await f.shutdown()
    }

    /// A drain that ends the node at once (the command line closes the server as soon as the
    /// node has drained) is still answered: the server's close lets the answer be written.
    @Test func aDrainThatClosesTheServerAtOnceIsStillAnswered() async throws {
        let f = try InMemoryNodes()
        let bob = try await f.node("bob")
        for round in 0..<10 {
            let path = ControlRequests.socketPath()
            let closing = Locked<ControlServer?>(nil)
            let api = ControlAPI(node: bob) { _ in
                // What the command does once drained: close the server (from its own task).
                let server = closing.withLock { $0 }
                Task { await server?.close() }
            }
            let server = try await ControlServer(api: api, address: .unix(path))
            closing.withLock { $0 = server }
            let serving = Task { await server.run() }
            let reply = await ControlClient(address: .unix(path)).sendResult("POST", "/v1/drain", body: [:])
            #expect(reply?.status == 202 && reply?.object["draining"] as? Bool == true,
                    "round \(round): \(reply.map { "\($0.status) \($0.object)" } ?? "no answer")")
            // Closed, the server stops serving of its own accord.
            await serving.value
            #expect(access(path, F_OK) != 0)
        }
        await f.shutdown()
    }

    @Test func theOpenAPIDocumentListsEveryRouteServedAndEveryRouteItListsIsServed() async throws {
        let document = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/control-api.openapi.json")
        let data = try Data(contentsOf: document)
        let root = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        #expect((root["openapi"] as? String)?.hasPrefix("3.") == true)
        let paths = try #require(root["paths"] as? [String: [String: Any]])
        var documented: [String] = []
        var operationIDs: [String] = []
        for (path, item) in paths {
            for (method, operation) in item where ["get", "post", "put", "delete", "patch"].contains(method) {
                documented.append("\(method.uppercased()) \(path)")
                let operation = try #require(operation as? [String: Any])
                operationIDs.append(try #require(operation["operationId"] as? String, "\(method) \(path) has no operationId"))
                #expect(operation["responses"] as? [String: Any] != nil, "\(method) \(path) has no responses")
            }
        }
        #expect(Set(documented) == Set(ControlAPI.routeNames),
                "undocumented: \(Set(ControlAPI.routeNames).subtracting(documented).sorted()); not served: \(Set(documented).subtracting(ControlAPI.routeNames).sorted())")
        #expect(Set(operationIDs).count == operationIDs.count, "operation IDs repeat")

        // Each documented route is served: none answers that it has no such route or method.
        let f = try InMemoryNodes()
        let bob = try await f.node("bob")
        let path = ControlRequests.socketPath()
        let (server, serving) = try await Self.serve(bob, at: .unix(path))
        let client = ControlClient(address: .unix(path))
        for route in documented.sorted() where route != "GET /v1/events" && route != "POST /v1/drain" {
            let parts = route.split(separator: " ", maxSplits: 1).map(String.init)
            let reply = try await client.send(parts[0], parts[1].replacingOccurrences(of: "{id}", with: UUID().uuidString), body: [:])
            #expect(reply.status != 405 && !(reply.error ?? "").contains("no such route"), "\(route): \(reply.status) \(reply.error ?? "")")
        }
        // The events stream is served too: a reader gets what is published.
        let first = Locked<String?>(nil)
        let reading = Task { try await client.events { object in first.withLock { $0 = object["event"] as? String }; return false } }
        #expect(try await Self.eventually { server.api.events.readers == 1 })
        server.api.events.publish(["event": "test"])
        _ = try await reading.value
        #expect(first.withLock { $0 } == "test")
        serving.cancel()
        await server.close()
        await f.shutdown()
    }
}

extension ControlClient {
    /// The reply, or nil if the server closed the connection before answering (a 413 may be
    /// answered while the body is still being sent).
    func sendResult(_ method: String, _ path: String, body: [String: Any]) async -> ControlReply? {
        try? await send(method, path, body: body)
    }
}
