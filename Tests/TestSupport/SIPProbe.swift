import Foundation
import POSIX
#if canImport(Glibc)
import Glibc
#endif

/// SIP as a test writes it by hand: requests from a probe at 127.0.0.1:5999 to an agent on
/// loopback, sent over UDP, their answers read on a thread of their own (a reply waited for on
/// the cooperative pool would hold one of its two threads for up to seconds).
public enum SIPProbe {
    /// A request to `uri` (by default `sip:bob@127.0.0.1:PORT`) in a transaction of its own
    /// (Call-ID, branch and tag), with `headers` after the usual ones and a Content-Length
    /// (`contentLength`, or the body's).
    public static func request(_ method: String, port: Int, uri: String? = nil, headers: [String] = [], body: String = "",
                               contentLength: Int? = nil) -> String {
        let target = uri ?? "sip:bob@127.0.0.1:\(port)"
        var lines = [
            "\(method) \(target) SIP/2.0",
            "Via: SIP/2.0/UDP 127.0.0.1:5999;rport;branch=z9hG4bK\(UUID().uuidString.prefix(8))",
            "Max-Forwards: 70",
            "From: <sip:probe@127.0.0.1:5999>;tag=\(UUID().uuidString.prefix(6))",
            "To: <\(target)>",
            "Call-ID: \(UUID().uuidString)",
            "CSeq: 1 \(method)",
        ] + headers
        lines.append("Content-Length: \(contentLength ?? body.utf8.count)")
        return lines.joined(separator: "\r\n") + "\r\n\r\n" + body
    }

    /// An INVITE offering `sdp`.
    public static func invite(port: Int, sdp: String) -> String {
        request("INVITE", port: port, headers: ["Contact: <sip:probe@127.0.0.1:5999>", "Content-Type: application/sdp"], body: sdp)
    }

    /// Sends `datagram` to 127.0.0.1:`port` over UDP and returns the first reply `accept`
    /// takes, reading up to ten; nil when none comes within `timeout` of the last.
    public static func exchange(_ datagram: String, port: Int, timeout: Duration = .seconds(1),
                                accept: @escaping @Sendable (String) -> Bool = { _ in true }) async -> String? {
        let reply = try? await SystemThread.run(name: "test-sip-probe") { () -> String? in
            let descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
            guard descriptor >= 0 else { return nil }
            defer { close(descriptor) }
            let (seconds, attoseconds) = timeout.components
            var wait = timeval(tv_sec: Int(seconds), tv_usec: Int(attoseconds / 1_000_000_000_000))
            setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
            send(datagram, port: port, on: descriptor)
            var buffer = [UInt8](repeating: 0, count: 65_536)
            for _ in 0..<10 {
                let count = recv(descriptor, &buffer, buffer.count, 0)
                guard count > 0 else { return nil }
                let text = String(decoding: buffer[..<count], as: UTF8.self)
                if accept(text) { return text }
            }
            return nil
        }
        return reply ?? nil
    }

    /// The final response (a status of 200 or more) to `request`; nil when none comes within
    /// five seconds of the last reply.
    public static func finalResponse(to request: String, port: Int) async -> String? {
        await exchange(request, port: port, timeout: .seconds(5)) { text in
            (Int(text.dropFirst("SIP/2.0 ".count).prefix(3)) ?? 0) >= 200
        }
    }

    /// Sends `datagram` to 127.0.0.1:`port` over UDP, expecting no answer (a command to
    /// baresip's console).
    public static func send(_ datagram: String, port: Int) {
        let descriptor = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard descriptor >= 0 else { return }
        defer { close(descriptor) }
        send(datagram, port: port, on: descriptor)
    }

    private static func send(_ datagram: String, port: Int, on descriptor: Int32) {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bytes = Array(datagram.utf8)
        _ = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(descriptor, bytes, bytes.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
    }
}
