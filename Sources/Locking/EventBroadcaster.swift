/// Fans one event stream out to any number of subscribers, each with its own bounded buffer.
///
/// An `AsyncStream` has one consumer; an actor's events often have several (the app, the call
/// provider, a log). Each ``subscribe(bufferingNewest:)`` call returns an independent stream
/// that sees every event sent after it subscribed.
public final class EventBroadcaster<Event: Sendable>: Sendable {
    private let subscribers = Locked<(next: Int, continuations: [Int: AsyncStream<Event>.Continuation], finished: Bool)>((0, [:], false))

    public init() {}

    /// A new stream of the events sent from now on. It finishes when ``finish()`` is called.
    public func subscribe(bufferingNewest limit: Int = 256) -> AsyncStream<Event> {
        let (stream, continuation) = AsyncStream.makeStream(of: Event.self, bufferingPolicy: .bufferingNewest(limit))
        let accepted = subscribers.withLock { state -> Int? in
            guard !state.finished else { return nil }
            let id = state.next
            state.next += 1
            state.continuations[id] = continuation
            return id
        }
        guard let id = accepted else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.subscribers.withLock { $0.continuations.removeValue(forKey: id) }
        }
        return stream
    }

    public func send(_ event: Event) {
        let targets = subscribers.withLock { Array($0.continuations.values) }
        for continuation in targets { continuation.yield(event) }
    }

    /// Ends every stream; later subscribers get a finished stream.
    public func finish() {
        let targets = subscribers.withLock { state -> [AsyncStream<Event>.Continuation] in
            state.finished = true
            defer { state.continuations.removeAll() }
            return Array(state.continuations.values)
        }
        for continuation in targets { continuation.finish() }
    }
}
