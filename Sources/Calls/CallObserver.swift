import AudioSession
import Foundation
import Locking

/// A call as the observer sees it (CallKit's `CXCall`).
public struct ObservedCall: Sendable, Equatable, Identifiable {
    public var id: UUID
    public var handle: CallHandle
    public var callerName: String?
    public var isOutgoing: Bool
    public var isOnHold: Bool
    public var isMuted: Bool
    public var hasStartedConnecting: Bool
    public var hasConnected: Bool
    public var hasEnded: Bool
    public var phase: CallPhase
    public var group: UUID?
}

/// The live list of calls and a stream of their changes (CallKit's `CXCallObserver`).
///
/// ``calls`` holds every call that has not ended, in the order they appeared. Every change,
/// including the final one with `hasEnded`, is sent to each ``changes()`` stream.
public final class CallObserver: Sendable {
    private let state = Locked<[ObservedCall]>([])
    private let broadcaster = EventBroadcaster<ObservedCall>()

    init() {}

    /// Calls that have not ended.
    public var calls: [ObservedCall] { state.withLock { $0 } }

    /// A stream of every later change.
    public func changes() -> AsyncStream<ObservedCall> { broadcaster.subscribe(bufferingNewest: 4096) }

    func update(_ call: ObservedCall) {
        state.withLock { calls in
            if let index = calls.firstIndex(where: { $0.id == call.id }) {
                if call.hasEnded { calls.remove(at: index) } else { calls[index] = call }
            } else if !call.hasEnded {
                calls.append(call)
            }
        }
        broadcaster.send(call)
    }

    func finish() { broadcaster.finish() }
}
