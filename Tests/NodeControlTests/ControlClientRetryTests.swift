import CallNodeTestSupport
import Foundation
import Locking
@testable import NodeControl
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The control client against a server that closes connections before answering: an
/// idempotent request is sent once more on a new connection, a POST is not.
@Suite struct ControlClientRetryTests {
    /// A Unix-socket server on a thread of its own that closes the first `dropped` connections
    /// it accepts without a word and answers the others `{"ok": true}`, counting them all.
    final class DroppingServer: Sendable {
        let path = ControlRequests.socketPath()
        let accepted = Locked(0)
        private let listener: Int32

        /// `early`: each connection answered is answered as soon as its request's head is in,
        /// before its body is read (a node answering early, as HTTP lets a server), and closed.
        init(dropped: Int, early: Bool = false) throws {
            listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                for (i, byte) in path.utf8.enumerated() { raw[i] = byte }
            }
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
            }
            guard bound == 0, listen(listener, 8) == 0 else { throw TestFailure("cannot listen at \(path): errno \(errno)") }
            let fd = listener, accepted = self.accepted
            Thread {
                while true {
                    let connection = accept(fd, nil, nil)
                    guard connection >= 0 else { return }  // the listener was shut down
                    let count = accepted.withLock { $0 += 1; return $0 }
                    if count > dropped { Self.answer(connection, early: early) }
                    close(connection)
                }
            }.start()
        }

        /// Reads the request (its head and its Content-Length of body) and answers it.
        static func answer(_ connection: Int32, early: Bool = false) {
            var request: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 4_096)
            while true {
                let n = read(connection, &chunk, chunk.count)
                guard n > 0 else { return }
                request += chunk[0..<n]
                let text = String(decoding: request, as: UTF8.self)
                guard let end = text.range(of: "\r\n\r\n") else { continue }
                if early { break }
                let length = text.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                    .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
                if text.utf8.distance(from: end.upperBound, to: text.endIndex) >= length { break }
            }
            respond(connection)
        }

        static func respond(_ connection: Int32) {
            let body = #"{"ok": true}"#
            let response = Array("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)".utf8)
            _ = write(connection, response, response.count)
        }

        func stop() {
            shutdown(listener, Int32(SHUT_RDWR))
            close(listener)
            unlink(path)
        }
    }

    @Test(arguments: ["GET", "PUT"])
    func anIdempotentRequestTheNodeNeverBeganToAnswerIsSentOnceMore(method: String) async throws {
        let server = try DroppingServer(dropped: 1)
        defer { server.stop() }
        let reply = try await ControlClient(address: .unix(server.path)).send(method, "/v1/node", body: method == "PUT" ? ["on": false] : nil)
        #expect(reply.status == 200 && reply.object["ok"] as? Bool == true)
        #expect(server.accepted.withLock { $0 } == 2, "one connection dropped, the request sent again on a second")
    }

    @Test func aPostTheNodeNeverAnsweredIsNotSentAgain() async throws {
        let server = try DroppingServer(dropped: 1)
        defer { server.stop() }
        await #expect(throws: ControlClientError.self) {
            try await ControlClient(address: .unix(server.path)).send("POST", "/v1/calls", body: ["to": "bob"])
        }
        // A second connection would have come within the retry's 50 ms; none does in 300.
        try await Task.sleep(for: .milliseconds(300))
        #expect(server.accepted.withLock { $0 } == 1, "the call would have been placed twice")
    }

    /// A node that answers and closes before the request has all gone out (its end, its body):
    /// the answer is taken, and nothing is sent again (a POST would be acted on twice).
    @Test(arguments: ["GET", "POST"])
    func anAnswerThatComesBeforeTheRequestEndsIsTaken(method: String) async throws {
        let server = try DroppingServer(dropped: 0, early: true)
        defer { server.stop() }
        let body: [String: Any]? = method == "POST" ? ["to": String(repeating: "b", count: 5_000_000)] : nil
        let reply = try await ControlClient(address: .unix(server.path)).send(method, "/v1/calls", body: body)
        #expect(reply.status == 200 && reply.object["ok"] as? Bool == true)
        #expect(server.accepted.withLock { $0 } == 1)
    }

    @Test func twoConnectionsBrokenInARowFailWithTheReason() async throws {
        let server = try DroppingServer(dropped: 2)
        defer { server.stop() }
        do {
            _ = try await ControlClient(address: .unix(server.path)).send("GET", "/v1/node")
            Issue.record("an answer from a server that answers nothing")
        } catch {
            #expect(error.description.hasPrefix("the control API did not answer"), "\(error)")
        }
        #expect(server.accepted.withLock { $0 } == 2)
    }
}
