internal import CNice
import Locking
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Everything libnice's callbacks touch: the public streams' continuations and the connection
/// state. Callbacks run on the agent's loop thread; the actor reads state from its own.
final class AgentSink: Sendable {
    let events: AsyncStream<IceEvent>.Continuation
    let datagrams: AsyncStream<IceDatagram>.Continuation
    private let state = Locked(State())
    private let failedSends = Atomic<Int>(0)

    /// The selected pair's socket, whose kernel receive stamps say when each datagram arrived
    /// (-1: none, a relayed pair).
    private let stampedSocket = Atomic<Int32>(-1)
    /// How long before it was handed over the datagram being handed over now arrived (ns).
    private let arrivalAge = Atomic<Int64>(0)

    var sendFailures: Int { failedSends.load(ordering: .relaxed) }

    /// When the datagram being received now reached this host, before now: read by the
    /// receiver during its call. A polled path reads a frame period's datagrams at once, and
    /// stamping them when read made every RTCP report up to a frame late on each side (an RTT
    /// of 16–37 ms on loopback).
    var lastArrivalAge: Duration { .nanoseconds(arrivalAge.load(ordering: .relaxed)) }

    /// The pair changed: its socket's stamps are the ones read from now on.
    func useStamps(of socket: Int32) { stampedSocket.store(socket, ordering: .relaxed) }
    func countSendFailure() { failedSends.add(1, ordering: .relaxed) }

    private struct State {
        var streamID: UInt32 = 0
        var connection: IceConnectionState = .new
        var everConnected = false
        var gathering: AsyncStream<IceCandidate>.Continuation?
        var selectedPair: IceCandidatePair?
    }

    init(events: AsyncStream<IceEvent>.Continuation, datagrams: AsyncStream<IceDatagram>.Continuation) {
        self.events = events
        self.datagrams = datagrams
    }

    var connection: IceConnectionState { state.withLock { $0.connection } }
    var selectedPair: IceCandidatePair? { state.withLock { $0.selectedPair } }

    /// A new stream replaces the old one (first start or ICE restart): callbacks for the old
    /// stream are ignored from here on.
    func beginStream(_ streamID: UInt32, gathering: AsyncStream<IceCandidate>.Continuation) {
        let previous = state.withLock { s -> AsyncStream<IceCandidate>.Continuation? in
            let previous = s.gathering
            s.streamID = streamID
            s.gathering = gathering
            s.selectedPair = nil
            s.everConnected = false
            return previous
        }
        previous?.finish()
    }

    func candidateFound(stream: UInt32, _ candidate: IceCandidate) {
        let continuation = state.withLock { $0.streamID == stream ? $0.gathering : nil }
        continuation?.yield(candidate)
    }

    func gatheringDone(stream: UInt32) {
        let continuation = state.withLock { s -> AsyncStream<IceCandidate>.Continuation? in
            guard s.streamID == stream else { return nil }
            defer { s.gathering = nil }
            return s.gathering
        }
        continuation?.finish()
    }

    func componentStateChanged(stream: UInt32, component: UInt32, niceState: UInt32) {
        guard component == 1 else { return }
        let next: IceConnectionState? = switch NiceComponentState(rawValue: niceState) {
        case NICE_COMPONENT_STATE_GATHERING: .gathering
        case NICE_COMPONENT_STATE_CONNECTING: .checking
        // CONNECTED: a pair is selected and sending works; READY only adds that every other
        // pair has finished its checks, which behind a NAT means waiting for host pairs to time
        // out (about 2 s). Media starts on the first.
        case NICE_COMPONENT_STATE_CONNECTED, NICE_COMPONENT_STATE_READY: .connected
        case NICE_COMPONENT_STATE_FAILED: .failed
        case NICE_COMPONENT_STATE_DISCONNECTED: .disconnected
        default: nil
        }
        guard let next else { return }
        transition(to: next, stream: stream)
    }

    func pairSelected(stream: UInt32, _ pair: IceCandidatePair) {
        let isCurrent = state.withLock { s -> Bool in
            guard s.streamID == stream, s.selectedPair != pair else { return false }
            s.selectedPair = pair
            return true
        }
        if isCurrent { events.yield(.selectedPair(pair)) }
    }

    /// The media path's direct receiver, when one is set (``DatagramPort``).
    let port = Locked<NiceDatagramPort?>(nil)

    /// `bytes` are libnice's, valid during the call only: the direct receiver copies what it
    /// keeps; the datagram sequence gets a copy.
    func received(stream: UInt32, _ bytes: UnsafeRawBufferPointer) {
        if let receiver = port.withLock({ $0 })?.currentReceiver {
            let socket = stampedSocket.load(ordering: .relaxed)
            // A stamp older than half a second is not this datagram's (it came on another of
            // the agent's sockets, during a change of pair).
            let age = socket >= 0 ? cnice_last_datagram_age_ns(socket) : -1
            arrivalAge.store((0..<500_000_000).contains(age) ? age : 0, ordering: .relaxed)
            receiver(bytes)
        } else {
            datagrams.yield(IceDatagram(bytes: [UInt8](bytes)))
        }
    }

    /// The connect timeout for `stream` passed: fail unless a pair works by now.
    func checksTimedOut(stream: UInt32) {
        transition(to: .failed, stream: stream, onlyIfNotConnected: true)
    }

    /// Sets the state and emits one event per real change. `closed` is final; `failed` lasts
    /// until the next stream (ICE restart); `disconnected` only follows a connection.
    func transition(to next: IceConnectionState, stream: UInt32? = nil, onlyIfNotConnected: Bool = false) {
        let changed = state.withLock { s -> Bool in
            if let stream, stream != s.streamID { return false }
            let current = s.connection
            if current == next || current == .closed { return false }
            if current == .failed && next != .closed && next != .gathering && next != .new { return false }
            if onlyIfNotConnected && current == .connected { return false }
            if next == .disconnected && !s.everConnected { return false }
            // libnice reports CONNECTING again while re-checking a working pair.
            if next == .checking && (current == .connected || current == .disconnected) && s.everConnected {
                return false
            }
            if next == .connected { s.everConnected = true }
            s.connection = next
            return true
        }
        if changed { events.yield(.stateChanged(next)) }
    }

    /// Emits `closed` and ends every stream.
    func finish() {
        transition(to: .closed)
        let gathering = state.withLock { s -> AsyncStream<IceCandidate>.Continuation? in
            defer { s.gathering = nil }
            return s.gathering
        }
        gathering?.finish()
        events.finish()
        datagrams.finish()
    }
}

/// The owner of one `NiceAgent*`.
///
/// Every libnice call runs where the agent's ``GLibLoop`` runs its context (create, streams,
/// gather, send, close): its thread, or while the loop is lent the one borrower iterating it;
/// the actor only hands work to the loop.
final class NiceHandle: @unchecked Sendable {  // confined: its pointer is used only by whoever holds the loop's context
    let agent: OpaquePointer
    let loop: GLibLoop
    let sink: AgentSink
    /// Sends and receives for the media path from any thread (``DatagramPort``).
    let port: NiceDatagramPort
    private(set) var streamID: UInt32 = 0
    /// How long libnice's check timer idles on before it stops (ms): its default while checking
    /// (also the grace period before it marks a pairless component failed), and a short one
    /// once a pair is connected.
    static let checkingIdleTimeout: UInt32 = 5_000
    static let connectedIdleTimeout: UInt32 = 200
    private var signalsConnected = false

    /// Creates and configures the agent. Must run on the loop thread.
    init(loop: GLibLoop, sink: AgentSink, configuration: IceConfiguration, stunAddress: String?) throws(IceError) {
        var options = NICE_AGENT_OPTION_ICE_TRICKLE.rawValue
        if configuration.consentFreshness { options |= NICE_AGENT_OPTION_CONSENT_FRESHNESS.rawValue }
        guard let agent = nice_agent_new_full(loop.context, NICE_COMPATIBILITY_RFC5245, NiceAgentOption(rawValue: options)) else {
            throw .libnice(function: "nice_agent_new_full", detail: "returned NULL")
        }
        self.agent = agent
        self.loop = loop
        self.sink = sink
        port = NiceDatagramPort(agent: agent, sink: sink, loop: loop)
        sink.port.withLock { $0 = port }

        cnice_set_bool(agent, "controlling-mode", configuration.role == .controlling ? 1 : 0)
        cnice_set_bool(agent, "ice-udp", 1)
        cnice_set_bool(agent, "ice-tcp", configuration.iceTCP ? 1 : 0)
        cnice_set_bool(agent, "upnp", configuration.upnp ? 1 : 0)
        cnice_set_bool(agent, "force-relay", configuration.relayOnly ? 1 : 0)
        if let retransmissions = configuration.checkRetransmissions {
            cnice_set_uint(agent, "stun-max-retransmissions", UInt32(max(0, retransmissions)))
        }
        let pacing = configuration.checkPacing.components
        cnice_set_uint(agent, "stun-pacing-timer", UInt32(pacing.seconds * 1000 + pacing.attoseconds / 1_000_000_000_000_000))
        if let stunAddress, let stun = configuration.stunServer {
            cnice_set_string(agent, "stun-server", stunAddress)
            cnice_set_uint(agent, "stun-server-port", UInt32(stun.port))
        }
        for address in configuration.localAddresses {
            var niceAddress = NiceAddress()
            nice_address_init(&niceAddress)
            guard nice_address_set_from_string(&niceAddress, address) != 0,
                  nice_agent_add_local_address(agent, &niceAddress) != 0
            else {
                g_object_unref(UnsafeMutableRawPointer(agent))
                throw .invalidConfiguration("cannot bind local address '\(address)'")
            }
        }

        let context = Unmanaged.passUnretained(sink).toOpaque()
        cnice_connect_state_changed(agent, { agent, stream, component, niceState, data in
            // Once a pair works, libnice's check timer need not idle on for its default 5 s
            // (a wakeup every pacing interval, 200 a second at 5 ms); it restarts by itself if
            // the peer's checks or new candidates call for it, and a new stream sets it back.
            let state = NiceComponentState(rawValue: niceState)
            if let agent, state == NICE_COMPONENT_STATE_CONNECTED || state == NICE_COMPONENT_STATE_READY {
                cnice_set_uint(agent, "idle-timeout", NiceHandle.connectedIdleTimeout)
            }
            AgentSink.from(data).componentStateChanged(stream: stream, component: component, niceState: niceState)
        }, context)
        cnice_connect_new_candidate(agent, { _, candidate, data in
            guard let candidate else { return }
            AgentSink.from(data).candidateFound(stream: candidate.pointee.stream_id, IceCandidate(nice: candidate))
        }, context)
        cnice_connect_gathering_done(agent, { _, stream, data in
            AgentSink.from(data).gatheringDone(stream: stream)
        }, context)
        cnice_connect_selected_pair(agent, { agent, stream, component, local, remote, data in
            guard component == 1, let local, let remote else { return }
            let sink = AgentSink.from(data)
            sink.pairSelected(stream: stream, IceCandidatePair(local: IceCandidate(nice: local), remote: IceCandidate(nice: remote)))
            sink.useStamps(of: agent.map { cnice_selected_socket_timestamped($0, stream) } ?? -1)
        }, context)
        signalsConnected = true
    }

    /// Adds a fresh stream (removing the old one), configures TURN and ports, attaches the
    /// receive callback and returns the stream's credentials. Must run on the loop thread.
    /// `turnAddresses`: each TURN server's address, `nil` for one that did not resolve (left out).
    func newStream(configuration: IceConfiguration, turnAddresses: [String?]) throws(IceError) -> IceCredentials {
        if streamID != 0 {
            port.use(stream: 0)
            nice_agent_attach_recv(agent, streamID, 1, loop.context, nil, nil)
            nice_agent_remove_stream(agent, streamID)
            streamID = 0
        }
        cnice_set_uint(agent, "idle-timeout", Self.checkingIdleTimeout)
        let stream = nice_agent_add_stream(agent, 1)
        guard stream != 0 else { throw .libnice(function: "nice_agent_add_stream", detail: "returned 0") }
        streamID = stream
        _ = nice_agent_set_stream_name(agent, stream, "audio")
        if let range = configuration.portRange {
            nice_agent_set_port_range(agent, stream, 1, UInt32(range.lowerBound), UInt32(range.upperBound))
        }
        for (server, address) in zip(configuration.turnServers, turnAddresses) {
            guard let address else { continue }
            let type = server.transport == .udp ? NICE_RELAY_TYPE_TURN_UDP : NICE_RELAY_TYPE_TURN_TCP
            guard nice_agent_set_relay_info(agent, stream, 1, address, UInt32(server.address.port),
                                            server.username, server.password, type) != 0 else {
                throw .libnice(function: "nice_agent_set_relay_info", detail: "rejected TURN server \(server.address)")
            }
        }
        let attached = nice_agent_attach_recv(agent, stream, 1, loop.context, { _, stream, _, length, buffer, data in
            // The socket's source (libnice calls this from its dispatch on the thread that owns
            // the context) may recurse: GLib then leaves its descriptor in the poll set while it
            // dispatches, instead of taking it out and putting it back, each of which wrote the
            // context's wakeup descriptor and cost the next poll an extra pass and a read — four
            // system calls a datagram. Nothing dispatched from this context iterates it again.
            if let source = g_main_current_source(), g_source_get_can_recurse(source) == 0 {
                g_source_set_can_recurse(source, 1)
            }
            guard let buffer, length > 0 else { return }
            // The buffer is valid only during this callback: whoever keeps it copies it.
            AgentSink.from(data).received(stream: stream, UnsafeRawBufferPointer(start: buffer, count: Int(length)))
        }, Unmanaged.passUnretained(sink).toOpaque())
        guard attached != 0 else { throw .libnice(function: "nice_agent_attach_recv", detail: "stream \(stream)") }
        port.use(stream: stream)
        return try credentials()
    }

    func credentials() throws(IceError) -> IceCredentials {
        var ufrag: UnsafeMutablePointer<gchar>?
        var pwd: UnsafeMutablePointer<gchar>?
        guard nice_agent_get_local_credentials(agent, streamID, &ufrag, &pwd) != 0, let ufrag, let pwd else {
            throw .libnice(function: "nice_agent_get_local_credentials", detail: "stream \(streamID)")
        }
        defer { g_free(ufrag); g_free(pwd) }
        return IceCredentials(ufrag: String(cString: ufrag), pwd: String(cString: pwd))
    }

    func gather() throws(IceError) {
        guard nice_agent_gather_candidates(agent, streamID) != 0 else {
            throw .libnice(function: "nice_agent_gather_candidates",
                           detail: "no usable local address (check the bind addresses and port range)")
        }
    }

    func setRemoteCredentials(_ credentials: IceCredentials) throws(IceError) {
        guard nice_agent_set_remote_credentials(agent, streamID, credentials.ufrag, credentials.pwd) != 0 else {
            throw .libnice(function: "nice_agent_set_remote_credentials", detail: "rejected")
        }
    }

    /// Hands candidates to libnice (which starts or extends the checks). Returns how many it took.
    func addRemote(_ candidates: [IceCandidate]) throws(IceError) -> Int {
        var list: UnsafeMutablePointer<GSList>?
        for candidate in candidates {
            guard let nice = candidate.makeNiceCandidate(streamID: streamID) else { continue }
            list = cnice_slist_append(list, nice)
        }
        guard let list else { return 0 }
        defer { cnice_candidate_list_free(list) }
        let added = nice_agent_set_remote_candidates(agent, streamID, 1, list)
        guard added >= 0 else {
            throw .libnice(function: "nice_agent_set_remote_candidates", detail: "rejected the candidates")
        }
        return Int(added)
    }

    /// Selects the pair of this stream's local candidate at `local` and its remote one at
    /// `remote` (libnice stops the stream's checks and reports the pair and the state as for a
    /// pair its checks found). False when a pair is selected already or either candidate is
    /// not this stream's.
    func select(local: IceEndpoint, remote: IceEndpoint) -> Bool {
        var selectedLocal: UnsafeMutablePointer<NiceCandidate>?, selectedRemote: UnsafeMutablePointer<NiceCandidate>?
        guard nice_agent_get_selected_pair(agent, streamID, 1, &selectedLocal, &selectedRemote) == 0 else { return false }
        guard let localFoundation = localCandidates().first(where: { IceEndpoint($0) == local })?.foundation,
              let remoteFoundation = remoteCandidates().first(where: { IceEndpoint($0) == remote })?.foundation
        else { return false }
        return nice_agent_set_selected_pair(agent, streamID, 1, localFoundation, remoteFoundation) != 0
    }

    /// The peer's candidates this stream knows, those its checks discovered included.
    func remoteCandidates() -> [IceCandidate] { Self.taking(nice_agent_get_remote_candidates(agent, streamID, 1)) }

    func setControlling(_ controlling: Bool) {
        cnice_set_bool(agent, "controlling-mode", controlling ? 1 : 0)
    }

    var isControlling: Bool { cnice_get_bool(agent, "controlling-mode") != 0 }

    func endOfRemoteCandidates() {
        _ = nice_agent_peer_candidate_gathering_done(agent, streamID)
    }

    func localCandidates() -> [IceCandidate] { Self.taking(nice_agent_get_local_candidates(agent, streamID, 1)) }

    /// The candidates of a list libnice handed over (copies), which is freed.
    private static func taking(_ list: UnsafeMutablePointer<GSList>?) -> [IceCandidate] {
        guard let list else { return [] }
        defer { cnice_candidate_list_free(list) }
        var result: [IceCandidate] = []
        var node: UnsafeMutablePointer<GSList>? = list
        while let current = node {
            if let data = current.pointee.data {
                result.append(IceCandidate(nice: data.assumingMemoryBound(to: NiceCandidate.self)))
            }
            node = current.pointee.next
        }
        return result
    }

    /// Sends on the selected pair. Must run on the loop thread; a failure is counted.
    func send(_ bytes: [UInt8]) {
        guard signalsConnected else { return }  // closing: nothing more goes out
        let sent = bytes.withUnsafeBufferPointer { buffer in
            nice_agent_send(agent, streamID, 1, UInt32(buffer.count), UnsafeRawPointer(buffer.baseAddress!).assumingMemoryBound(to: gchar.self))  // non-empty, checked by caller
        }
        if sent != Int32(bytes.count) { sink.countSendFailure() }
    }

    /// Stops callbacks, closes TURN allocations and releases the agent. Must run on the loop
    /// thread; `done` runs there once libnice has let go.
    func close(done: @escaping @Sendable () -> Void) {
        detachCallbacks()
        let box = Unmanaged.passRetained(CloseBox(loop, done)).toOpaque()
        nice_agent_close_async(agent, { source, _, data in
            let box = Unmanaged<CloseBox>.fromOpaque(data!).takeRetainedValue()  // retained above
            // libnice is still inside its own dispatch here: release the agent in a job of its
            // own so that nothing of libnice's runs on a finalized agent.
            let agent = UnsafeMutableRawPointer(source)
            let done = box.done
            nonisolated(unsafe) let release = agent  // a GObject pointer, used on this thread only
            box.loop.post({
                g_object_unref(release)
                done()
            }, dropped: done)
        }, box)
    }

    /// Releases the agent at once without waiting for TURN deallocation (deinit path).
    func closeNow() {
        detachCallbacks()
        g_object_unref(UnsafeMutableRawPointer(agent))
    }

    private func detachCallbacks() {
        // First: no send from another thread may reach the agent from here on.
        port.end()
        // The sink and the port hold each other (the port counts send failures in the sink):
        // let go here, or both live on, and the port's loop (a context, an eventfd) with them.
        sink.port.withLock { $0 = nil }
        guard signalsConnected else { return }
        signalsConnected = false
        _ = cnice_disconnect_all(agent, Unmanaged.passUnretained(sink).toOpaque())
        if streamID != 0 { nice_agent_attach_recv(agent, streamID, 1, loop.context, nil, nil) }
    }

    private final class CloseBox {
        let done: @Sendable () -> Void
        let loop: GLibLoop
        init(_ loop: GLibLoop, _ done: @escaping @Sendable () -> Void) {
            self.loop = loop
            self.done = done
        }
    }
}

extension AgentSink {
    /// The sink behind a callback's user data; it outlives every callback because handlers are
    /// disconnected before the agent lets go of it.
    fileprivate static func from(_ data: UnsafeMutableRawPointer?) -> AgentSink {
        Unmanaged<AgentSink>.fromOpaque(data!).takeUnretainedValue()  // always the sink we registered
    }
}

extension IceCandidate {
    /// Reads a libnice candidate into a value.
    init(nice candidate: UnsafePointer<NiceCandidate>) {
        let c = candidate.pointee
        let type: IceCandidateType = switch c.type {
        case NICE_CANDIDATE_TYPE_SERVER_REFLEXIVE: .serverReflexive
        case NICE_CANDIDATE_TYPE_PEER_REFLEXIVE: .peerReflexive
        case NICE_CANDIDATE_TYPE_RELAYED: .relay
        default: .host
        }
        let (transport, tcpType): (IceTransport, IceTcpType?) = switch c.transport {
        case NICE_CANDIDATE_TRANSPORT_TCP_ACTIVE: (.tcp, .active)
        case NICE_CANDIDATE_TRANSPORT_TCP_PASSIVE: (.tcp, .passive)
        case NICE_CANDIDATE_TRANSPORT_TCP_SO: (.tcp, .simultaneousOpen)
        default: (.udp, nil)
        }
        var foundation = String(cString: cnice_candidate_foundation(candidate))
        if foundation.isEmpty || !foundation.allSatisfy(IceCandidate.isIceChar) { foundation = "1" }
        var base = c.base_addr
        let hasBase = type != .host && nice_address_is_valid(&base) != 0
        var addr = c.addr
        self.init(
            foundation: foundation, component: Int(c.component_id), transport: transport,
            priority: c.priority, address: Self.string(&addr), port: UInt16(nice_address_get_port(&addr)),
            type: type,
            relatedAddress: hasBase ? Self.string(&base) : nil,
            relatedPort: hasBase ? UInt16(nice_address_get_port(&base)) : nil,
            tcpType: tcpType)
    }

    private static func string(_ address: inout NiceAddress) -> String {
        withUnsafeTemporaryAllocation(of: CChar.self, capacity: 64) { buffer in
            buffer.initialize(repeating: 0)
            nice_address_to_string(&address, buffer.baseAddress!)  // capacity is non-zero
            return String(cString: buffer.baseAddress!)
        }
    }

    /// A libnice copy of this candidate for `streamID`, or `nil` when the address is not an IP
    /// literal. The caller frees it.
    func makeNiceCandidate(streamID: UInt32) -> UnsafeMutablePointer<NiceCandidate>? {
        guard hasIPAddress else { return nil }
        let niceType = switch type {
        case .host: NICE_CANDIDATE_TYPE_HOST
        case .serverReflexive: NICE_CANDIDATE_TYPE_SERVER_REFLEXIVE
        case .peerReflexive: NICE_CANDIDATE_TYPE_PEER_REFLEXIVE
        case .relay: NICE_CANDIDATE_TYPE_RELAYED
        }
        guard let nice = nice_candidate_new(niceType) else { return nil }
        nice.pointee.transport = switch (transport, tcpType) {
        case (.udp, _): NICE_CANDIDATE_TRANSPORT_UDP
        case (.tcp, .passive?): NICE_CANDIDATE_TRANSPORT_TCP_PASSIVE
        case (.tcp, .simultaneousOpen?): NICE_CANDIDATE_TRANSPORT_TCP_SO
        case (.tcp, _): NICE_CANDIDATE_TRANSPORT_TCP_ACTIVE
        }
        nice.pointee.priority = priority
        nice.pointee.stream_id = streamID
        nice.pointee.component_id = UInt32(component)
        cnice_candidate_set_foundation(nice, foundation)
        guard nice_address_set_from_string(&nice.pointee.addr, address) != 0 else {
            nice_candidate_free(nice)
            return nil
        }
        nice_address_set_port(&nice.pointee.addr, UInt32(port))
        if let relatedAddress, nice_address_set_from_string(&nice.pointee.base_addr, relatedAddress) != 0 {
            nice_address_set_port(&nice.pointee.base_addr, UInt32(relatedPort ?? 0))
        } else {
            nice.pointee.base_addr = nice.pointee.addr
        }
        return nice
    }
}

/// Resolves a host name to an IP literal. Blocking: call on the loop thread only.
func resolveToIPAddress(_ host: String) throws(IceError) -> String {
    if IPAddressSyntax.isIPv4(host) || IPAddressSyntax.isIPv6(host) { return host }
    var hints = addrinfo()
    hints.ai_family = AF_UNSPEC
    hints.ai_socktype = Int32(SOCK_DGRAM.rawValue)
    var result: UnsafeMutablePointer<addrinfo>?
    guard getaddrinfo(host, nil, &hints, &result) == 0, let first = result else {
        throw .unresolvableAddress(host)
    }
    defer { freeaddrinfo(result) }
    var buffer = [CChar](repeating: 0, count: Int(NI_MAXHOST))
    guard getnameinfo(first.pointee.ai_addr, first.pointee.ai_addrlen, &buffer, socklen_t(buffer.count),
                      nil, 0, NI_NUMERICHOST) == 0 else {
        throw .unresolvableAddress(host)
    }
    return buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }  // non-empty array
}
