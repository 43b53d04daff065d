import ICE
import Media
import Synchronization

/// Carries a call's media over an ``IceAgent``: RTP and RTCP go out on the selected pair and
/// what arrives is handed to the media actor.
///
/// Owns one task that reads the agent's datagrams (an agent's datagram sequence can be
/// iterated once, so give each agent one transport). The task ends when the agent closes or
/// the transport is released.
public final class IceMediaTransport: MediaTransport {
    public let agent: IceAgent
    private let handler: Handler
    private let pump: Task<Void, Never>

    private final class Handler: Sendable {
        let current = Mutex<(@Sendable ([UInt8]) -> Void)?>(nil)
    }

    public init(agent: IceAgent) {
        self.agent = agent
        let handler = Handler()
        self.handler = handler
        pump = Task {
            for await datagram in agent.datagrams {
                handler.current.withLock { $0 }?(datagram.bytes)
            }
        }
    }

    deinit { pump.cancel() }

    public func send(_ datagram: [UInt8]) async {
        // Before READY or after close libnice cannot send; media keeps its pace and the
        // agent counts what failed.
        try? await agent.send(datagram)
    }

    public func setReceiveHandler(_ handler: (@Sendable ([UInt8]) -> Void)?) {
        self.handler.current.withLock { $0 = handler }
    }
}
