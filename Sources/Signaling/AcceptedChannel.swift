import Locking
import NIOCore

/// An accepted connection until the accept loop takes it. NIO requires every
/// `NIOAsyncChannel` to be run (its writer finished) before it goes away; one the listener
/// never hands over (it closed with connections still queued, or while one was being set up)
/// would trap in NIO's deinit. Dropped untaken, this runs it empty and closes it instead.
final class AcceptedChannel: Sendable {
    private let framed: Locked<FramedChannel?>

    init(_ framed: FramedChannel) { self.framed = Locked(framed) }

    /// The channel, once; later calls return nil.
    func take() -> FramedChannel? {
        framed.withLock { framed in
            defer { framed = nil }
            return framed
        }
    }

    deinit {
        guard let left = take() else { return }
        // Closed at once on its event loop (a task may wait for the cooperative pool a long
        // time on a busy node), then run empty so its writer is finished.
        left.channel.close(promise: nil)
        Task { try? await left.executeThenClose { _, _ in } }
    }
}
