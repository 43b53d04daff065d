import CallNode
import Locking

/// One end of an in-memory signaling connection (``InMemorySignalPipe/pair(_:_:)``).
public struct InMemorySignalEnd: Sendable {
    public init(connection: SignalingConnection, frames: AsyncStream<[UInt8]>, transport: any SignalFrameTransport) {
        self.connection = connection
        self.frames = frames
        self.transport = transport
    }

    /// Sends to the other end.
    public let connection: SignalingConnection
    /// The frames this end sends to the other, beneath ``connection``.
    public let transport: any SignalFrameTransport
    public let frames: AsyncStream<[UInt8]>
    /// What the other end sends, in order; iterate it once, from one task.
    public var messages: SignalMessages { SignalMessages(frames: frames) }
}

/// Two ends of an in-memory signaling connection: each end's frames arrive, whole and in order,
/// at the other. Closing either end finishes both.
public final class InMemorySignalPipe: Sendable {
    /// One end: sends to the other, reads what the other sent.
    public final class End: SignalFrameTransport {
        let inbound: AsyncStream<[UInt8]>
        fileprivate let continuation: AsyncStream<[UInt8]>.Continuation
        fileprivate let pipe: Locked<InMemorySignalPipe?>

        fileprivate init() {
            (inbound, continuation) = AsyncStream.makeStream(of: [UInt8].self)
            pipe = Locked(nil)
        }

        /// Called just after each frame this end sends has been delivered (its network's watch).
        let afterSend = Locked<(@Sendable () -> Void)?>(nil)

        public func send(_ frame: [UInt8]) throws(SignalingError) {
            guard let pipe = pipe.withLock({ $0 }) else { throw .closed }
            try pipe.deliver(frame, from: self)
            afterSend.withLock { $0 }?()
        }

        public func close() { pipe.withLock { $0 }?.close() }
    }

    let a = End()
    let b = End()
    private let closed = Locked(false)

    /// Two connected ends in memory: `a` sees the peer `b.identity` at `b.address`, and back.
    /// Closing either end ends both sides' messages. Each end is read by one task
    /// (``InMemorySignalEnd/messages``).
    public static func pair(_ a: (identity: Fingerprint, address: String), _ b: (identity: Fingerprint, address: String))
        -> (a: InMemorySignalEnd, b: InMemorySignalEnd) {
        let pipe = InMemorySignalPipe()
        return (InMemorySignalEnd(connection: SignalingConnection(peer: b.identity, remoteAddress: b.address, transport: pipe.a),
                                  frames: pipe.a.inbound, transport: pipe.a),
                InMemorySignalEnd(connection: SignalingConnection(peer: a.identity, remoteAddress: a.address, transport: pipe.b),
                                  frames: pipe.b.inbound, transport: pipe.b))
    }

    /// Runs `served` on `far` (as a server runs a connection it accepted) beside `body` on
    /// `near`, each closing its end when done; returns when both have.
    public static func carry(_ near: InMemorySignalEnd, to far: InMemorySignalEnd,
                             served: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void,
                             _ body: @escaping @Sendable (SignalingConnection, SignalMessages) async -> Void) async {
        async let serving: Void = {
            await served(far.connection, far.messages)
            far.connection.close()
        }()
        await body(near.connection, near.messages)
        near.connection.close()
        await serving
    }

    init() {
        a.pipe.withLock { $0 = self }
        b.pipe.withLock { $0 = self }
    }

    fileprivate func deliver(_ frame: [UInt8], from end: End) throws(SignalingError) {
        guard !closed.withLock({ $0 }) else { throw .closed }
        (end === a ? b : a).continuation.yield(frame)
    }

    fileprivate func close() {
        guard !closed.withLock({ state in defer { state = true }; return state }) else { return }
        a.continuation.finish()
        b.continuation.finish()
        // Break the ends' references back to the pipe.
        a.pipe.withLock { $0 = nil }
        b.pipe.withLock { $0 = nil }
    }
}

