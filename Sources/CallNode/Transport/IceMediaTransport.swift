import ICE
import Media
import Locking

/// Carries a call's media over an ICE path (an ``IceAgent``, or an in-memory path in tests): RTP and RTCP go out on the selected pair and
/// what arrives is handed to the media actor; DTLS records (first byte 20–63, RFC 7983) go
/// to the DTLS handler instead. libnice keeps STUN (first byte 0–3) to itself.
///
/// Owns one task that reads the agent's datagrams (an agent's datagram sequence can be
/// iterated once, so give each agent one transport). The task ends when the agent closes or
/// the transport is released.
public final class IceMediaTransport: MediaTransport {
    public let agent: any IcePath
    private let handler: Handler
    private let pump: Task<Void, Never>
    /// The path's direct port, when it has one: sends go straight to libnice from the media
    /// tick, and datagrams come straight from libnice's thread to the handler (no task, no
    /// actor and no second thread per packet).
    private let port: (any DatagramPort)?

    /// The receiver, and what arrived before there was one: the peer's media often starts a
    /// few milliseconds before ours, and its first packets are the call's first audio.
    private final class Handler: Sendable {
        struct State {
            var current: (@Sendable (UnsafeRawBufferPointer) -> Void)?
            var early: [[UInt8]] = []
            var delivered = false
        }
        static let earlyLimit = 50
        let state = Locked(State())

        /// Hands the bytes (lent for this call) to the receiver, or keeps a copy until there is one.
        func deliver(_ bytes: UnsafeRawBufferPointer) {
            let current = state.withLock { s -> (@Sendable (UnsafeRawBufferPointer) -> Void)? in
                if s.current == nil && !s.delivered {
                    // Keep the newest: playout starts from the latest audio, not a stale start.
                    if s.early.count == Self.earlyLimit { s.early.removeFirst() }
                    s.early.append([UInt8](bytes))
                }
                return s.current
            }
            current?(bytes)
        }

        func set(_ handler: (@Sendable (UnsafeRawBufferPointer) -> Void)?) {
            let early = state.withLock { s -> [[UInt8]] in
                s.current = handler
                guard handler != nil else { return [] }
                s.delivered = true
                defer { s.early = [] }
                return s.early
            }
            if let handler { for bytes in early { bytes.withUnsafeBytes(handler) } }
        }
    }

    private let dtls = Handler()

    public init(agent: any IcePath) {
        self.agent = agent
        let handler = Handler(), dtls = self.dtls
        self.handler = handler
        port = agent.datagramPort
        port?.setReceiver { bytes in
            if let first = bytes.first, (20...63).contains(first) {
                dtls.deliver(bytes)
            } else {
                handler.deliver(bytes)
            }
        }
        // Without a port (in-memory paths), or for what arrived before the port's receiver was set.
        pump = Task {
            for await datagram in agent.datagrams {
                datagram.bytes.withUnsafeBytes { bytes in
                    if let first = bytes.first, (20...63).contains(first) {
                        dtls.deliver(bytes)
                    } else {
                        handler.deliver(bytes)
                    }
                }
            }
        }
    }

    deinit {
        port?.setPolled(false)
        port?.setReceiver(nil)
        pump.cancel()
    }

    nonisolated(nonsending) public func send(_ datagram: [UInt8]) async {
        // Before READY or after close libnice cannot send; media keeps its pace and the
        // agent counts what failed.
        if let port {
            port.send(datagram)
        } else {
            try? await agent.send(datagram)
        }
    }

    public func setReceiveHandler(_ handler: (@Sendable (UnsafeRawBufferPointer) -> Void)?) {
        self.handler.set(handler)
    }

    /// Through the direct port: libnice's thread sleeps while the path is connected, and
    /// each tick reads what arrived (``DatagramPort/setPolled(_:)``).
    public func receiveOnTicks(_ on: Bool) {
        port?.setPolled(on)
    }

    public func pollReceived() {
        port?.poll()
    }

    public var arrivalAge: Duration { port?.lastArrivalAge ?? .zero }

    /// Sets where DTLS records go; those that arrived before are handed over first (the
    /// peer's ClientHello may come before this side has seen ICE connect).
    public func setDTLSHandler(_ handler: (@Sendable ([UInt8]) -> Void)?) {
        // Records are few (the handshake, alerts): each is copied for the DTLS endpoint.
        guard let handler else {
            dtls.set(nil)
            return
        }
        dtls.set { @Sendable (bytes: UnsafeRawBufferPointer) in handler([UInt8](bytes)) }
    }
}
