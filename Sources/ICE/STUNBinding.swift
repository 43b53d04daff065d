internal import CNice
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// STUN Binding (RFC 5389) from one socket without ICE, made and read by libnice's STUN usage
/// (`stun/usages/bind.h`): requests asking a STUN server where the socket's packets come from,
/// indications that open a NAT's way towards a peer, and the answers to the requests. Its agent
/// remembers the transactions it sent: an answer is taken only for one of them.
///
/// Not thread-safe: its owner holds it under a lock (``PlainRTPPath`` keeps it in its state).
final class STUNBinding: @unchecked Sendable {  // used only under its owner's lock (PlainRTPPath's state)
    private let agent: UnsafeMutablePointer<cnice_stun_binding>

    init() { agent = cnice_stun_binding_new() }
    deinit { cnice_stun_binding_free(agent) }

    /// A Binding request (its transaction remembered).
    func request() -> [UInt8] { make(cnice_stun_binding_request) }

    /// A Binding Indication: nothing answers it.
    func indication() -> [UInt8] { make(cnice_stun_binding_indication) }

    /// The address and port a success response to one of this agent's requests says the request
    /// came from; nil for anything else (another transaction's answer, an error response, a
    /// datagram that is not STUN).
    func mapped(_ bytes: UnsafeRawBufferPointer) -> (address: String, port: UInt16)? {
        guard let base = bytes.baseAddress, bytes.count >= 20 else { return nil }
        var address = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        guard cnice_stun_binding_mapped(agent, base.assumingMemoryBound(to: UInt8.self), bytes.count, &address, &length) == 1 else { return nil }
        return PlainRTPPath.endpoint(address)
    }

    private func make(_ maker: (UnsafeMutablePointer<cnice_stun_binding>?, UnsafeMutablePointer<UInt8>?, Int) -> Int) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: 576)  // STUN_MAX_MESSAGE_SIZE_IPV4
        let length = buffer.withUnsafeMutableBufferPointer { maker(agent, $0.baseAddress, $0.count) }
        return Array(buffer.prefix(length))
    }
}
