import Foundation
import Locking
import Signaling
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The web port without a browser: raw HTTP and WebSocket bytes over a socket, so every
/// answer is checked as a browser would receive it.
@Suite struct WebSignalingTests {
    static let secret = "s3cret-for-tests"

    /// Connects to 127.0.0.1:`port`, sends `request`, then reads until `done` says the bytes so
    /// far are enough, the peer closes, or 30 s pass with nothing read (a loaded machine can be slow to serve). Runs on a thread of its own (blocking
    /// socket calls stay off the cooperative pool). `then` may send more once the first
    /// answer is complete.
    static func exchange(port: Int, _ request: [UInt8], then more: [UInt8] = [],
                         until done: @escaping @Sendable ([UInt8]) -> Bool) async -> [UInt8] {
        await withCheckedContinuation { continuation in
            Thread {
                let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
                defer { close(fd) }
                // A bound for a server that never answers, not a timing check: the suite's
                // CPU-heavy tests can hold both of the pool's threads for most of a minute at
                // its start, and the server answers from that pool.
                var timeout = timeval(tv_sec: 120, tv_usec: 0)
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                var address = sockaddr_in()
                address.sin_family = sa_family_t(AF_INET)
                address.sin_port = in_port_t(UInt16(port).bigEndian)
                address.sin_addr.s_addr = inet_addr("127.0.0.1")
                let connected = withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
                }
                guard connected == 0 else { continuation.resume(returning: []); return }
                var received: [UInt8] = []
                var pending = [request, more].filter { !$0.isEmpty }
                while let next = pending.first {
                    pending.removeFirst()
                    _ = next.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, 0) }
                    let target = pending.isEmpty ? done : { bytes in String(decoding: bytes, as: UTF8.self).contains("\r\n\r\n") }
                    var buffer = [UInt8](repeating: 0, count: 4096)
                    while !target(received) {
                        let n = recv(fd, &buffer, buffer.count, 0)
                        if n <= 0 { break }
                        received += buffer.prefix(n)
                    }
                }
                continuation.resume(returning: received)
            }.start()
        }
    }

    static func get(_ path: String, upgrade: Bool = false) -> [UInt8] {
        var text = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        if upgrade {
            text += "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        }
        return Array((text + "\r\n").utf8)
    }

    /// A masked client text frame.
    static func textFrame(_ text: String) -> [UInt8] {
        let payload = Array(text.utf8), mask: [UInt8] = [0x12, 0x34, 0x56, 0x78]
        var frame: [UInt8] = [0x81]
        if payload.count < 126 { frame.append(0x80 | UInt8(payload.count)) } else {
            frame += [0x80 | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        }
        frame += mask
        frame += payload.enumerated().map { $0.element ^ mask[$0.offset % 4] }
        return frame
    }

    /// The payloads of the server's (unmasked) text frames after the HTTP head.
    static func serverTexts(_ bytes: [UInt8]) -> [String] {
        let end: [UInt8] = [13, 10, 13, 10]
        guard let head = (0...max(0, bytes.count - 4)).first(where: { bytes.count >= $0 + 4 && Array(bytes[$0..<($0 + 4)]) == end }) else { return [] }
        var rest = Array(bytes[(head + 4)...])
        var texts: [String] = []
        while rest.count >= 2 {
            var length = Int(rest[1] & 0x7F), offset = 2
            if length == 126, rest.count >= 4 { length = Int(rest[2]) << 8 | Int(rest[3]); offset = 4 }
            guard rest.count >= offset + length else { break }
            if rest[0] & 0x0F == 1 { texts.append(String(decoding: rest[offset..<(offset + length)], as: UTF8.self)) }
            rest = Array(rest[(offset + length)...])
        }
        return texts
    }

    @Test func thePageIsServedAndTheWebSocketNeedsTheSecret() async throws {
        let server = try await WebSignalingServer(host: "127.0.0.1", port: 0, secret: Self.secret, page: "<title>CallNode</title>")
        let running = Task { await server.run { _, _ in Issue.record("no page should get through") } }
        defer { running.cancel() }
        let page = String(decoding: await Self.exchange(port: server.port, Self.get("/")) { _ in false }, as: UTF8.self)
        #expect(page.hasPrefix("HTTP/1.1 200 OK") && page.contains("text/html") && page.hasSuffix("<title>CallNode</title>"))
        let missing = String(decoding: await Self.exchange(port: server.port, Self.get("/favicon.ico")) { _ in false }, as: UTF8.self)
        #expect(missing.hasPrefix("HTTP/1.1 404"))
        for path in ["/ws", "/ws?secret=wrong", "/ws?secret=\(Self.secret)x", "/ws?other=\(Self.secret)"] {
            let refused = String(decoding: await Self.exchange(port: server.port, Self.get(path, upgrade: true)) { _ in false }, as: UTF8.self)
            #expect(refused.hasPrefix("HTTP/1.1 403") && refused.contains("secret"), "\(path): \(refused.prefix(60))")
        }
        await server.close()
    }

    @Test func aPageWithTheSecretSpeaksEnvelopesInTextMessages() async throws {
        let server = try await WebSignalingServer(host: "127.0.0.1", port: 0, secret: Self.secret, page: "")
        let seen = Locked<[String]>([])
        let running = Task {
            await server.run { connection, messages in
                #expect(connection.origin == .webPage && connection.peer == WebSignalingServer.pagePeer)
                for await message in messages {
                    switch message {
                    case let .success(envelope):
                        seen.withLock { $0.append(envelope.message.type) }
                        if case .invite = envelope.message { try? await connection.send(.ringing, call: envelope.call) }
                    case let .failure(error):
                        seen.withLock { $0.append("error: \(error)") }
                        try? await connection.send(.error(error.description), call: nil)
                    }
                }
            }
        }
        defer { running.cancel() }
        let call = UUID()
        let frames = Self.textFrame("{not json") + Self.textFrame(#"{"v":1,"type":"invite","call":"\#(call.uuidString)","invitation":{"displayName":"page"}}"#)
        let bytes = await Self.exchange(port: server.port, Self.get("/ws?secret=\(Self.secret)", upgrade: true), then: frames) {
            Self.serverTexts($0).count >= 2
        }
        let text = String(decoding: bytes, as: UTF8.self)
        #expect(text.hasPrefix("HTTP/1.1 101 Switching Protocols"))
        let replies = Self.serverTexts(bytes)
        // A malformed message is answered and the connection goes on; the invitation is answered
        // with a plain JSON envelope, no length prefix.
        #expect(replies.count == 2 && replies[0].contains(#""type":"error""#), "\(replies)")
        let ringing = try SignalEnvelope.decode(Array((replies.last ?? "").utf8))
        #expect(ringing == SignalEnvelope(call: call, .ringing))
        #expect(seen.withLock { $0 }.last == "invite")
        await server.close()
    }

    @Test func secretsAreLongAndFresh() {
        let a = WebSignalingServer.makeSecret(), b = WebSignalingServer.makeSecret()
        #expect(a.count == 32 && a != b && a.allSatisfy(\.isHexDigit))
    }
}
