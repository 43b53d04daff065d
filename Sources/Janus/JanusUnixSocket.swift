import JanusRoom
import POSIX

#if canImport(Glibc)
import Glibc
#endif

/// Janus's Unix-socket API (its pfunix transport, `SOCK_SEQPACKET`): for a node on the same host
/// as Janus, the same JSON as over its WebSocket, one message per packet, with no port open to
/// anyone. Replies and events come on the connection, as over the WebSocket.
public enum JanusUnixSocket {
    /// The largest message read (an SDP with many candidates is a few kilobytes).
    static let largestMessage = 1 << 20

    /// Connects to the socket at `path`, sends each message of `outgoing` in order and hands every
    /// message Janus sends to `incoming`, until the connection closes (returns) or cannot be made
    /// (throws). Cancelling the calling task closes it. Reads block a thread of their own.
    public static func run(path: String, outgoing: AsyncStream<JanusJSON>,
                           incoming: @escaping @Sendable (JanusJSON) async -> Void) async throws(JanusHTTPError) {
        let fd: Int32
        do {
            fd = try syscall(where: "socket") { socket(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0) }
        } catch {
            throw JanusHTTPError("no Unix socket: \(error)")
        }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            close(fd)
            throw JanusHTTPError("the socket path is too long: \(path)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in bytes.enumerated() { raw[index] = byte }
        }
        do {
            try syscall(where: "connect \(path)") {
                withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
                }
            }
        } catch {
            close(fd)
            throw JanusHTTPError(error.errno == ENOENT || error.errno == ECONNREFUSED ? "nothing listens at \(path) (\(error.reason))" : "\(error)")
        }
        let (packets, delivered) = AsyncStream.makeStream(of: [UInt8].self)
        let (ended, readerEnded) = AsyncStream.makeStream(of: Never.self)
        do {
            // Detached: it ends when the socket is shut down below (or Janus closes it).
            _ = try SystemThread.start(name: "janus-unix", detached: true) {
                var buffer = [UInt8](repeating: 0, count: largestMessage)
                while let count = try? syscall(where: "recv", { buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) } }),
                      count > 0 {
                    delivered.yield(Array(buffer[0..<count]))
                }
                delivered.finish()
                readerEnded.finish()
            }
        } catch {
            close(fd)
            throw JanusHTTPError("no thread to read Janus's socket on: \(error)")
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await message in outgoing {
                    let body = message.serialized
                    // Janus reads at once: a full socket is rare and brief, waited out off the pool's threads' time.
                    var broken = false
                    while true {
                        guard let sent = try? syscall(blocking: false, where: "send", {
                            body.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT) | Int32(MSG_NOSIGNAL)) }
                        }) else {
                            broken = true
                            break
                        }
                        guard case .wouldBlock = sent, !Task.isCancelled else { break }
                        try? await Task.sleep(for: .milliseconds(5))
                    }
                    if broken { return }
                }
            }
            group.addTask {
                for await packet in packets {
                    await incoming(JanusJSON.parse(packet) ?? ["janus": "unreadable", "text": .string(String(decoding: packet.prefix(120), as: UTF8.self))])
                }
            }
            // Either side ending ends the connection.
            await group.next()
            group.cancelAll()
        }
        shutdown(fd, Int32(SHUT_RDWR))
        for await _ in ended {}
        close(fd)
    }
}
