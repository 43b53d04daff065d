internal import CNice  // (its GLib headers own the socket types' declarations in a clean build)
import Foundation
import Locking
import Synchronization
import POSIX

#if canImport(Glibc)
import Glibc
#endif

/// A media path without ICE, for peers that do not speak it (most SIP phones and PBXs): one
/// UDP socket carrying RTP and RTCP, sending to where the peer's SDP says (its `c=` and `m=`
/// lines, given as the one remote candidate) and, once the peer's first RTP, RTCP or DTLS packet
/// arrives from elsewhere (a peer behind NAT), to that address instead (symmetric RTP, RFC
/// 4961). It latches once: later packets from other addresses are dropped, so a stranger who
/// guesses the port cannot take the call's media over.
///
/// It is "connected" as soon as it knows where to send. It has no thread of its own: until the
/// media path polls it (``setPolled(_:)``) the process's one ``SocketWatcher`` reads its socket
/// as datagrams arrive; once polled, each tick of the media clock reads what arrived, the
/// kernel's stamp giving each datagram's arrival, and the watcher leaves the socket alone.
public final class PlainRTPPath: IcePath, DatagramPort {
    public let events: AsyncStream<IceEvent>
    public let datagrams: AsyncStream<IceDatagram>
    /// This side's address, as a host candidate (its address and port go in the SDP).
    public let local: IceCandidate
    private let eventsContinuation: AsyncStream<IceEvent>.Continuation
    private let datagramsContinuation: AsyncStream<IceDatagram>.Continuation
    private let descriptor: Int32
    private let family: Int32
    private let state: Locked<State>
    /// The socket's reads, sends and close, each under its lock.
    private let udp: UDPSocket
    /// The watcher's token while the watcher reads the socket (unpolled); taken under this
    /// lock, which also keeps ``setPolled(_:)`` and ``close()`` from crossing.
    private let watching = Locked<UInt64?>(nil)

    private struct State {
        var remote: sockaddr_storage?
        /// Where RTCP goes when the peer does not mux it with RTP (nil: with RTP).
        var rtcpRemote: sockaddr_storage?
        var remoteCandidate: IceCandidate?
        var latched = false
        var receiver: (@Sendable (UnsafeRawBufferPointer) -> Void)?
        var closed = false
        /// The media path reads on its ticks (``poll()``); the reader thread waits.
        var polled = false
        /// Packets dropped for coming from an address that is not the peer's.
        var strangers = 0
        /// STUN Binding from this socket (libnice's), whether a request is out, and what its
        /// answer said: where this socket's packets come from as the STUN server saw them (its
        /// NAT's address).
        let stun = STUNBinding()
        var stunAsking = false
        var mapped: IceCandidate?
    }

    /// Opens a UDP socket on `address` (an IPv4 or IPv6 address of this host; port 0: any).
    ///
    /// - Throws: ``IceError/invalidConfiguration(_:)`` when the address is not an IP address or
    ///   cannot be bound.
    public init(bindingTo address: String, port: UInt16 = 0) throws(IceError) {
        var storage = sockaddr_storage()
        guard let length = Self.fill(&storage, address: address, port: port) else {
            throw .invalidConfiguration("'\(address)' is not an IP address of this host to send RTP from")
        }
        let family = Int32(storage.ss_family)
        let descriptor: Int32
        do {
            descriptor = try syscall(where: "socket") { socket(family, Int32(SOCK_DGRAM.rawValue), 0) }
        } catch {
            throw .invalidConfiguration("cannot open a UDP socket: \(error)")
        }
        var bound = storage
        let failure = withUnsafeMutablePointer(to: &bound) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw -> SystemError? in
                var size = socklen_t(MemoryLayout<sockaddr_storage>.size)
                do throws(SystemError) {
                    try syscall(where: "bind") { bind(descriptor, raw, length) }
                    try syscall(where: "getsockname") { getsockname(descriptor, raw, &size) }
                    return nil
                } catch {
                    return error
                }
            }
        }
        guard failure == nil, let endpoint = Self.endpoint(bound) else {
            Glibc.close(descriptor)
            throw .invalidConfiguration("cannot bind a UDP socket on \(address): \(failure?.description ?? "no address")")
        }
        // The kernel's receive stamps on (the first ask turns them on and answers that there is none yet).
        _ = cnice_last_datagram_age_ns(descriptor)
        self.family = family
        self.descriptor = descriptor
        local = IceCandidate(foundation: "rtp", priority: 1, address: endpoint.address, port: endpoint.port, type: .host)
        (events, eventsContinuation) = AsyncStream.makeStream(of: IceEvent.self)
        (datagrams, datagramsContinuation) = AsyncStream.makeStream(of: IceDatagram.self)
        let state = Locked(State())
        self.state = state
        udp = UDPSocket(descriptor: descriptor, state: state, datagrams: datagramsContinuation)
        do {
            let token = try SocketWatcher.shared.watch(descriptor) { [udp] in udp.drain(stamped: false) }
            watching.withLock { $0 = token }
        } catch {
            udp.close()
            throw error
        }
    }

    deinit {
        endReading()
        eventsContinuation.finish()
    }

    /// Marks the path closed, stops the watcher reading its socket, and closes it (once).
    private func endReading() {
        watching.withLock { token in
            state.withLock { $0.closed = true }
            if let watched = token.take() { SocketWatcher.shared.unwatch(descriptor, token: watched) }
            udp.close()
        }
        datagramsContinuation.finish()
    }

    // MARK: - IcePath

    public var localCredentials: IceCredentials { get async { IceCredentials(ufrag: "", pwd: "") } }

    public func gather() async throws(IceError) -> IceGathering {
        let (candidates, continuation) = AsyncStream.makeStream(of: IceCandidate.self)
        continuation.yield(local)
        continuation.finish()
        return IceGathering(credentials: IceCredentials(ufrag: "", pwd: ""), candidates: candidates)
    }

    public func localCandidates() async throws(IceError) -> [IceCandidate] { [local] }

    public func setRole(_ role: IceRole) async throws(IceError) {}

    /// The first component-1 candidate with an IP address is where RTP goes (the peer's `c=` and
    /// `m=`); a component-2 one, where RTCP goes when the peer does not mux it.
    public func setRemote(_ remote: IceCredentials, candidates: [IceCandidate], endOfCandidates: Bool) async throws(IceError) -> [IceError] {
        var rtcp: sockaddr_storage?
        if let rtcpTarget = candidates.first(where: { $0.component == 2 && $0.hasIPAddress }) {
            var storage = sockaddr_storage()
            if Self.fill(&storage, address: rtcpTarget.address, port: rtcpTarget.port) != nil { rtcp = storage }
        }
        guard let target = candidates.first(where: { $0.component == 1 && $0.hasIPAddress }) else {
            return candidates.map { .unusableRemoteCandidate($0, reason: "not an IP address to send RTP to") }
        }
        var storage = sockaddr_storage()
        guard Self.fill(&storage, address: target.address, port: target.port) != nil, Int32(storage.ss_family) == family else {
            return [.unusableRemoteCandidate(target, reason: "not reachable from this path's \(family == AF_INET6 ? "IPv6" : "IPv4") socket")]
        }
        let wasSet = state.withLock { state -> Bool in
            defer {
                state.remote = storage
                state.rtcpRemote = rtcp
                state.remoteCandidate = target
            }
            return state.remote != nil
        }
        eventsContinuation.yield(.selectedPair(IceCandidatePair(local: local, remote: target)))
        if !wasSet {
            // Behind a NAT (a STUN server saw another address), the peer's first packets are
            // dropped until this side sent it one: a DTLS peer's handshake (this side waiting as
            // its server) would never arrive. A STUN Binding Indication opens the way (RFC 6263
            // §4.2: peers ignore it); media then keeps it open.
            if state.withLock({ $0.mapped }) != nil {
                let indication = state.withLock { $0.stun.indication() }
                if !indication.isEmpty { let _: Bool = send(indication) }
            }
            eventsContinuation.yield(.stateChanged(.connected))
        }
        return []
    }

    public func addRemoteCandidates(_ candidates: [IceCandidate]) async throws(IceError) -> [IceError] { [] }

    public func endOfRemoteCandidates() async throws(IceError) {}

    public func send(_ bytes: [UInt8]) async throws(IceError) {
        guard send(bytes) else { throw .notConnected(state.withLock { $0.remote == nil } ? .checking : .closed) }
    }

    /// No ICE to restart: the same address, and this path goes on.
    public func restart() async throws(IceError) -> IceGathering {
        try await gather()
    }

    public func close() async {
        let closed = state.withLock { $0.closed }
        guard !closed else { return }
        endReading()
        eventsContinuation.yield(.stateChanged(.closed))
        eventsContinuation.finish()
    }

    public var datagramPort: (any DatagramPort)? { self }

    // MARK: - The address a NAT gives it

    /// Where the peer is to send: the address and port a STUN server saw this socket's packets
    /// come from (its NAT's, once ``map(through:)`` found them), else the socket's own.
    public var advertised: IceCandidate { state.withLock { $0.mapped } ?? local }

    /// Asks `server` (a STUN server: an RFC 5389 Binding request from this socket) where this
    /// socket's packets come from — a NAT's address and port — so that an offer or answer
    /// without ICE names an address the peer can reach. Up to three requests, 300 ms apart;
    /// nil when none was answered (the socket's own address is named then).
    @discardableResult
    public func map(through server: IceServerAddress) async -> IceCandidate? {
        guard let target = Self.resolve(server.host, port: server.port, family: family) else { return nil }
        state.withLock { $0.stunAsking = true }
        defer { state.withLock { $0.stunAsking = false } }
        for _ in 0..<3 {
            let request = state.withLock { $0.stun.request() }
            guard !request.isEmpty else { return nil }
            _ = udp.send(request, to: target)
            for _ in 0..<15 {
                if let mapped = state.withLock({ $0.mapped }) { return mapped }
                try? await Task.sleep(for: .milliseconds(20))
            }
        }
        return state.withLock { $0.mapped }
    }

    /// `host` (an IP address, or a name looked up for `family`) and `port` as a socket address.
    static func resolve(_ host: String, port: UInt16, family: Int32) -> sockaddr_storage? {
        var storage = sockaddr_storage()
        if fill(&storage, address: host, port: port) != nil { return Int32(storage.ss_family) == family ? storage : nil }
        var hints = addrinfo()
        hints.ai_family = family
        hints.ai_socktype = Int32(SOCK_DGRAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, String(port), &hints, &result) == 0, let first = result else { return nil }
        defer { freeaddrinfo(result) }
        withUnsafeMutableBytes(of: &storage) { target in
            target.copyMemory(from: UnsafeRawBufferPointer(start: first.pointee.ai_addr, count: Int(first.pointee.ai_addrlen)))
        }
        return storage
    }

    /// Packets dropped so far for coming from another address than the peer's.
    public var droppedFromStrangers: Int { state.withLock { $0.strangers } }

    // MARK: - DatagramPort

    @discardableResult
    public func send(_ bytes: [UInt8]) -> Bool {
        let rtcp = Self.isRTCP(bytes)
        guard let remote = state.withLock({ $0.closed ? nil : rtcp ? ($0.rtcpRemote ?? $0.remote) : $0.remote }) else { return false }
        return udp.send(bytes, to: remote)
    }

    public func setReceiver(_ receiver: (@Sendable (UnsafeRawBufferPointer) -> Void)?) {
        state.withLock { $0.receiver = receiver }
    }

    /// Polled: the watcher lets the socket be and ``poll()`` reads it; unpolled: the watcher reads
    /// it again as datagrams arrive.
    public func setPolled(_ polled: Bool) {
        watching.withLock { token in
            let closed = state.withLock { state in
                defer { if !state.closed { state.polled = polled } }
                return state.closed
            }
            guard !closed else { return }
            if polled {
                if let watched = token.take() { SocketWatcher.shared.unwatch(descriptor, token: watched) }
            } else if token == nil {
                do {
                    token = try SocketWatcher.shared.watch(descriptor) { [udp] in udp.drain(stamped: false) }
                } catch {
                    // Nothing would read the peer's media: say the path failed rather than go deaf.
                    eventsContinuation.yield(.stateChanged(.failed))
                }
            }
        }
    }

    /// Reads every datagram waiting in the socket, without blocking, and hands each over (the
    /// receiver called on this thread).
    public func poll() {
        guard state.withLock({ $0.polled && !$0.closed }) else { return }
        udp.drain(stamped: true)
    }

    public var lastArrivalAge: Duration { .nanoseconds(udp.arrivalAge.load(ordering: .relaxed)) }

    /// The path's socket: every read, send and the close hold its lock, so that no call ever
    /// reaches a descriptor closed (and perhaps already another file's) behind its back. What
    /// the watcher's handler keeps: not the path, which can end while watched.
    private final class UDPSocket: Sendable {
        let descriptor: Int32
        let state: Locked<State>
        let datagrams: AsyncStream<IceDatagram>.Continuation
        /// During the receiver's call from a stamped drain: how long ago the datagram arrived (ns).
        let arrivalAge = Atomic<Int64>(0)
        private let io = Locked(IO())

        private struct IO: Sendable {
            var buffer = [UInt8](repeating: 0, count: 2_048)
            var open = true
        }

        init(descriptor: Int32, state: Locked<State>, datagrams: AsyncStream<IceDatagram>.Continuation) {
            self.descriptor = descriptor
            self.state = state
            self.datagrams = datagrams
        }

        /// Reads until the socket would block, handing each datagram over; `stamped`, each with
        /// the kernel's arrival stamp (the socket's own, however late the tick: its true arrival).
        func drain(stamped: Bool) {
            let descriptor = self.descriptor
            io.withLock { io in
                guard io.open else { return }
                var source = sockaddr_storage()
                while true {
                    var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
                    let count = io.buffer.withUnsafeMutableBytes { bytes in
                        withUnsafeMutablePointer(to: &source) { pointer in
                            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                                recvfrom(descriptor, bytes.baseAddress, bytes.count, Int32(MSG_DONTWAIT), raw, &length)
                            }
                        }
                    }
                    guard count > 0 else { return }  // nothing more (EAGAIN), or an ICMP error
                    if stamped {
                        let age = cnice_last_datagram_age_ns(descriptor)
                        arrivalAge.store((0..<60_000_000_000).contains(age) ? age : 0, ordering: .relaxed)
                    }
                    PlainRTPPath.handle(io.buffer, count: count, from: source, state: state, datagrams: datagrams)
                }
            }
            if stamped { arrivalAge.store(0, ordering: .relaxed) }
        }

        func send(_ bytes: [UInt8], to target: sockaddr_storage) -> Bool {
            var target = target
            let length = socklen_t(target.ss_family == sa_family_t(AF_INET6) ? MemoryLayout<sockaddr_in6>.size : MemoryLayout<sockaddr_in>.size)
            let descriptor = self.descriptor
            return io.withLock { io in
                guard io.open else { return false }
                let sent = bytes.withUnsafeBytes { buffer in
                    withUnsafePointer(to: &target) { pointer in
                        pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                            sendto(descriptor, buffer.baseAddress, buffer.count, 0, raw, length)
                        }
                    }
                }
                return sent == bytes.count
            }
        }

        /// Closes the descriptor, once.
        func close() {
            io.withLock { io in
                guard io.open else { return }
                io.open = false
                Glibc.close(descriptor)
            }
        }
    }

    /// One datagram read from the socket (by the watcher or a poll): STUN's answer, the
    /// peer's media (latching to its address once), or a stranger's, dropped.
    private static func handle(_ buffer: [UInt8], count: Int, from source: sockaddr_storage, state: Locked<State>,
                               datagrams: AsyncStream<IceDatagram>.Continuation) {
        // A STUN server's answer to this path's Binding request (map(through:)): not media.
        // (STUN's first two bits are zero, its magic cookie in bytes 4–7: RFC 5389 §6.)
        if count >= 20, buffer[0] >> 6 == 0, buffer[4] == 0x21, buffer[5] == 0x12, buffer[6] == 0xA4, buffer[7] == 0x42 {
            state.withLock { state in
                guard state.stunAsking, state.mapped == nil,
                      let (address, port) = buffer.withUnsafeBytes({ state.stun.mapped(UnsafeRawBufferPointer(rebasing: $0[..<count])) })
                else { return }
                state.mapped = IceCandidate(foundation: "rtp", priority: 1, address: address, port: port, type: .serverReflexive)
            }
            return
        }
        // RTP and RTCP both start with version 2 (the top two bits); RTCP's packet types
        // sit where RTP's marker and payload type do not go (RFC 5761 §4).
        // DTLS records start with a content type in 20–63 (RFC 7983): a DTLS-SRTP peer's
        // handshake may be its first packet, from an address its SDP did not name.
        let looksLikeRTP = count >= 8 && buffer[0] >> 6 == 2 && !(192...223).contains(buffer[1])
        let looksLikeDTLS = count >= 13 && (20...63).contains(buffer[0])
        let receiver = state.withLock { state -> (@Sendable (UnsafeRawBufferPointer) -> Void)?? in
            guard let remote = state.remote else { return .some(state.receiver) }  // nowhere to send yet: still take it
            if Self.same(source, remote) { return .some(state.receiver) }
            // The peer's RTCP from its own port, when it does not mux.
            if let rtcp = state.rtcpRemote, Self.same(source, rtcp) { return .some(state.receiver) }
            // The peer's first RTP or DTLS packet from another address (its NAT's): latch to
            // it, once.
            if !state.latched && (looksLikeRTP || looksLikeDTLS) {
                state.latched = true
                state.remote = source
                return .some(state.receiver)
            }
            state.strangers += 1
            return .none
        }
        guard let receiver else { return }
        if let receiver {
            buffer.withUnsafeBytes { receiver(UnsafeRawBufferPointer(rebasing: $0[..<count])) }
        } else {
            datagrams.yield(IceDatagram(bytes: Array(buffer[..<count])))
        }
        // A packet from the address the SDP named: the peer is where it said; no latching later.
        state.withLock { if !$0.latched, let remote = $0.remote, Self.same(source, remote) { $0.latched = true } }
    }

    /// Whether a packet is RTCP (RFC 5761's demultiplexing: its second byte in 192–223).
    static func isRTCP(_ bytes: [UInt8]) -> Bool {
        bytes.count >= 2 && (192...223).contains(bytes[1])
    }

    // MARK: - Addresses

    /// The address of this host that packets to `host` leave from (the route's source), or nil
    /// when `host` is not an IP address or there is no route to it.
    public static func localAddress(toward host: String) -> String? {
        var storage = sockaddr_storage()
        guard let length = fill(&storage, address: host, port: 9) else { return nil }
        let probe = socket(Int32(storage.ss_family), Int32(SOCK_DGRAM.rawValue), 0)
        guard probe >= 0 else { return nil }
        defer { Glibc.close(probe) }
        var source = sockaddr_storage()
        let found = withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in connect(probe, raw, length) == 0 }
        } && withUnsafeMutablePointer(to: &source) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                var size = socklen_t(MemoryLayout<sockaddr_storage>.size)
                return getsockname(probe, raw, &size) == 0
            }
        }
        return found ? endpoint(source)?.address : nil
    }

    /// A port on `host` (an IP address of this host) the kernel picks for UDP that TCP can bind
    /// too — what a SIP agent takes — or nil. Free when chosen: another program may take it
    /// before it is bound again.
    public static func portFreeForUDPAndTCP(on host: String) -> Int? {
        for _ in 0..<50 {
            guard let port = boundPort(SOCK_DGRAM, host: host, port: 0), boundPort(SOCK_STREAM, host: host, port: port) != nil else { continue }
            return port
        }
        return nil
    }

    /// Binds a socket of `type` to `host`:`port` (0: any), closes it, and returns the port.
    private static func boundPort(_ type: __socket_type, host: String, port: Int) -> Int? {
        var storage = sockaddr_storage()
        guard var length = fill(&storage, address: host, port: UInt16(port)) else { return nil }
        let descriptor = socket(Int32(storage.ss_family), Int32(type.rawValue), 0)
        guard descriptor >= 0 else { return nil }
        defer { Glibc.close(descriptor) }
        let ok = withUnsafeMutablePointer(to: &storage) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { raw in
                bind(descriptor, raw, length) == 0 && getsockname(descriptor, raw, &length) == 0
            }
        }
        return ok ? endpoint(storage).map { Int($0.port) } : nil
    }

    /// Fills `storage` with `address`:`port`; returns its length, or nil if it is not an IP address.
    static func fill(_ storage: inout sockaddr_storage, address: String, port: UInt16) -> socklen_t? {
        let bare = address.hasPrefix("[") && address.hasSuffix("]") ? String(address.dropFirst().dropLast()) : address
        return withUnsafeMutablePointer(to: &storage) { pointer -> socklen_t? in
            var v4 = in_addr()
            if inet_pton(AF_INET, bare, &v4) == 1 {
                return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
                    sin.pointee = sockaddr_in()
                    sin.pointee.sin_family = sa_family_t(AF_INET)
                    sin.pointee.sin_port = port.bigEndian
                    sin.pointee.sin_addr = v4
                    return socklen_t(MemoryLayout<sockaddr_in>.size)
                }
            }
            var v6 = in6_addr()
            if inet_pton(AF_INET6, bare, &v6) == 1 {
                return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sin6 in
                    sin6.pointee = sockaddr_in6()
                    sin6.pointee.sin6_family = sa_family_t(AF_INET6)
                    sin6.pointee.sin6_port = port.bigEndian
                    sin6.pointee.sin6_addr = v6
                    return socklen_t(MemoryLayout<sockaddr_in6>.size)
                }
            }
            return nil
        }
    }

    /// The address and port in `storage`.
    static func endpoint(_ storage: sockaddr_storage) -> (address: String, port: UInt16)? {
        var storage = storage
        let family = Int32(storage.ss_family)
        return withUnsafePointer(to: &storage) { pointer -> (String, UInt16)? in
            var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
            switch family {
            case AF_INET:
                return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { sin in
                    var address = sin.pointee.sin_addr
                    guard inet_ntop(AF_INET, &address, &text, socklen_t(text.count)) != nil else { return nil }
                    return (String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self), UInt16(bigEndian: sin.pointee.sin_port))
                }
            case AF_INET6:
                return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { sin6 in
                    var address = sin6.pointee.sin6_addr
                    guard inet_ntop(AF_INET6, &address, &text, socklen_t(text.count)) != nil else { return nil }
                    return (String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self), UInt16(bigEndian: sin6.pointee.sin6_port))
                }
            default:
                return nil
            }
        }
    }

    /// Whether two socket addresses are the same address and port (an IPv6 address's flow
    /// label and scope aside). Compared as they lie, field by field: every datagram asks, and
    /// writing both out as text (`endpoint`) had cost a plain RTP call more than its G.711 coding.
    static func same(_ a: sockaddr_storage, _ b: sockaddr_storage) -> Bool {
        guard a.ss_family == b.ss_family else { return false }
        var (a, b) = (a, b)
        return withUnsafePointer(to: &a) { left in
            withUnsafePointer(to: &b) { right in
                switch Int32(left.pointee.ss_family) {
                case AF_INET:
                    return left.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { l in
                        right.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { r in
                            l.pointee.sin_port == r.pointee.sin_port && l.pointee.sin_addr.s_addr == r.pointee.sin_addr.s_addr
                        }
                    }
                case AF_INET6:
                    return left.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { l in
                        right.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { r in
                            guard l.pointee.sin6_port == r.pointee.sin6_port else { return false }
                            var (x, y) = (l.pointee.sin6_addr, r.pointee.sin6_addr)
                            return memcmp(&x, &y, MemoryLayout<in6_addr>.size) == 0
                        }
                    }
                default:
                    return false
                }
            }
        }
    }
}
