internal import CNice
import Locking
import Synchronization

/// A path's datagrams without the actor or the loop in between: the media path sends from its
/// own tick and receives on the path's thread, so a packet wakes no task and no other thread.
///
/// Sending from any thread is what libnice allows (its agent has its own lock); this port keeps
/// the one rule that matters, that no send ever touches an agent being closed: a send holds the
/// port's lock for the call, and closing takes the same lock to end the port before libnice
/// lets go of the agent.
public protocol DatagramPort: AnyObject, Sendable {
    /// Sends one datagram on the selected pair, from any thread. Returns false (and counts a
    /// send failure) when the path is not connected, is closed, or libnice refused it.
    @discardableResult
    func send(_ bytes: [UInt8]) -> Bool
    /// Where datagrams go as they arrive, called on the path's own thread (keep it short: hand
    /// the bytes over and return); nil: back to the path's `datagrams` sequence.
    func setReceiver(_ receiver: (@Sendable (UnsafeRawBufferPointer) -> Void)?)
    /// Polled (true): while the path is connected, datagrams wait in the socket until
    /// ``poll()`` reads them on its caller's thread, instead of waking the path's thread for
    /// each; the path's timers and queued work run in ``poll()`` too, so call it every frame
    /// period. While the path is not connected (checks, a restart) its own thread runs it as
    /// before. False (the default): the path's thread reads datagrams as they arrive.
    func setPolled(_ polled: Bool)
    /// When polled: reads what arrived (the receiver is called on this thread) and runs the
    /// path's due work, without blocking. Otherwise nothing.
    func poll()
    /// During the receiver's call: how long before it the datagram reached this host (the
    /// kernel's stamp), zero when unknown.
    var lastArrivalAge: Duration { get }
}

extension DatagramPort {
    public func setPolled(_ polled: Bool) {}
    public func poll() {}
    public var lastArrivalAge: Duration { .zero }
}

extension IcePath {
    /// No direct port: the media path uses ``send(_:)`` and ``datagrams``.
    public var datagramPort: (any DatagramPort)? { nil }
}

/// The agent and stream a port sends on, while it may.
struct PortTarget: @unchecked Sendable {  // the pointer is used only under the port's lock, and only until the port ends
    let agent: OpaquePointer
    var streamID: UInt32
}

final class NiceDatagramPort: DatagramPort {
    private let target: Locked<PortTarget?>
    /// Boxed: a closure kept directly as a generic value (`Locked<Value>`) is re-wrapped in a
    /// reabstraction thunk on every access through `withLock`'s `inout`, so one read per packet
    /// grew a chain of thunks each datagram had to run through (and the thread's stack with it).
    private let receiver = Locked<DatagramReceiver?>(nil)
    private let sink: AgentSink
    private let loop: GLibLoop
    /// Whether the media path asked to poll (whether the loop is lent is the loop's own state).
    private let polled = Atomic<Bool>(false)

    init(agent: OpaquePointer, sink: AgentSink, loop: GLibLoop) {
        target = Locked(PortTarget(agent: agent, streamID: 0))
        self.sink = sink
        self.loop = loop
    }

    func setPolled(_ polled: Bool) {
        self.polled.store(polled, ordering: .relaxed)
        if !polled { loop.reclaim() }
    }

    func poll() {
        // Lent only while connected: checks and restarts keep libnice's own pacing (a few ms)
        // on its thread, not the frame period's. Lending and reclaiming wake the loop thread
        // only when they change something.
        if polled.load(ordering: .relaxed) && sink.connection == .connected {
            loop.lend()
            loop.iterateLent()
        } else {
            loop.reclaim()
        }
    }

    @discardableResult
    func send(_ bytes: [UInt8]) -> Bool {
        guard !bytes.isEmpty, bytes.count <= 65_507, sink.connection == .connected else {
            sink.countSendFailure()
            return false
        }
        let sent = target.withLock { target -> Bool in
            guard let target, target.streamID != 0 else { return false }
            let count = bytes.withUnsafeBufferPointer { buffer in
                nice_agent_send(target.agent, target.streamID, 1, UInt32(buffer.count),
                                UnsafeRawPointer(buffer.baseAddress!).assumingMemoryBound(to: gchar.self))  // non-empty, checked above
            }
            return count == Int32(bytes.count)
        }
        if !sent { sink.countSendFailure() }
        return sent
    }

    func setReceiver(_ receiver: (@Sendable (UnsafeRawBufferPointer) -> Void)?) {
        self.receiver.withLock { $0 = receiver.map(DatagramReceiver.init) }
    }

    var lastArrivalAge: Duration { sink.lastArrivalAge }

    /// The receiver, if one is set (the sink's receive callback asks on every datagram).
    var currentReceiver: (@Sendable (UnsafeRawBufferPointer) -> Void)? { receiver.withLock { $0 }?.call }

    /// A new stream (first start or ICE restart). Runs on the loop thread.
    func use(stream: UInt32) {
        target.withLock { $0?.streamID = stream }
    }

    /// No send reaches the agent after this returns. Runs on the loop thread before the agent is
    /// closed or released.
    func end() {
        target.withLock { $0 = nil }
        receiver.withLock { $0 = nil }
    }
}

/// A datagram receiver held by reference, so reading it under a lock copies a pointer, never
/// the closure (see ``NiceDatagramPort``).
final class DatagramReceiver: Sendable {
    let call: @Sendable (UnsafeRawBufferPointer) -> Void
    init(_ call: @escaping @Sendable (UnsafeRawBufferPointer) -> Void) { self.call = call }
}
