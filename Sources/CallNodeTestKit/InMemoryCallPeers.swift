import Calls
import Foundation

/// Two call managers joined by an in-memory performer that plays both nodes' signaling, so
/// calls flow end to end with no network and no media: a start at one rings the other;
/// answering exchanges offer and answer and connects both; an end on one side is a remote end
/// on the other. Every other action is fulfilled at once.
///
/// For tests of code built on ``CallManager`` and for measuring call control alone. Requests are
/// performed concurrently, each in its own child task, as a node's signaling would.
public final class InMemoryCallPeers: Sendable {
    public let a: CallManager
    public let b: CallManager
    private let workers: Task<Void, Never>

    /// Starts serving both managers' requests until they shut down.
    public init(a: CallManager, b: CallManager) {
        self.a = a
        self.b = b
        workers = Task {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await Self.serve(a, peer: b) }
                group.addTask { await Self.serve(b, peer: a) }
            }
        }
    }

    private static func serve(_ manager: CallManager, peer: CallManager) async {
        await withTaskGroup(of: Void.self) { group in
            for await request in manager.requests {
                guard case let .perform(action) = request else { continue }
                group.addTask { await perform(action, at: manager, peer: peer) }
            }
        }
    }

    private static func perform(_ provided: ProviderAction, at manager: CallManager, peer: CallManager) async {
        let uuid = provided.action.callUUID
        do {
            switch provided.action {
            case let .start(_, handle):
                try await peer.reportNewIncomingCall(uuid, update: CallUpdate(remoteHandle: CallHandle(.generic, "peer of \(handle.value)")))
                try await manager.fulfill(provided.id)
                try await manager.reportOutgoingCallStartedConnecting(uuid)
            case .answer:
                try await manager.reportProgress(uuid, .offerSent)
                try await peer.reportProgress(uuid, .offerReceived)
                try await peer.reportProgress(uuid, .answerSent)
                try await manager.reportProgress(uuid, .answerReceived)
                try await peer.reportMediaConnected(uuid)
                try await manager.reportMediaConnected(uuid)  // fulfils the answer
            case .end:
                try await manager.fulfill(provided.id)
                try? await peer.reportCallEnded(uuid, reason: .remoteEnded)
            default:
                try await manager.fulfill(provided.id)
            }
        } catch {
            try? await manager.fail(provided.id, reason: "\(error)")
        }
    }

    /// Shuts both managers down and waits for the performers to finish.
    public func stop() async {
        await a.shutdown()
        await b.shutdown()
        await workers.value
    }
}
