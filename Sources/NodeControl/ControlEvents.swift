import CallNode
import Foundation
import Locking

/// The events the control API streams: the node's (the objects `--json` prints) and the API's
/// own (a prompt finished, a recording stopped), to every reader of `GET /v1/events`.
///
/// Each reader has a bounded queue. A reader that falls behind by more than the bound (it
/// stopped reading, or reads slower than events come) is dropped with a reason rather than
/// slowing anything: publishing never waits, never grows without bound, and the node's calls
/// never see the readers at all.
public final class ControlEvents: Sendable {
    private struct Reader {
        let continuation: AsyncStream<[UInt8]>.Continuation
        let call: UUID?
        let dropped: DropHandler
    }

    /// Holds a drop handler in a class (a closure stored directly in `Locked` is re-wrapped on
    /// every access; see ``Locked``).
    final class DropHandler: Sendable {
        let call: @Sendable (String) -> Void
        init(_ call: @escaping @Sendable (String) -> Void) { self.call = call }
    }

    private struct State {
        var next = 0
        var readers: [Int: Reader] = [:]
        var dropped = 0
        var sequence = 0
        var finished = false
    }
    private let state = Locked(State())
    /// Events a reader may fall behind by before it is dropped.
    public let readerLimit: Int

    public init(readerLimit: Int = 512) {
        self.readerLimit = readerLimit
    }

    /// A reader of events from now on, of one call or of all (`call` nil), as server-sent event
    /// lines (`data: {…}` and a blank line). `dropped` is called, once, with the reason when the
    /// reader fell behind and was dropped (its stream has ended then).
    func subscribe(call: UUID?, dropped: @escaping @Sendable (String) -> Void) -> (id: Int, lines: AsyncStream<[UInt8]>) {
        let (stream, continuation) = AsyncStream.makeStream(of: [UInt8].self, bufferingPolicy: .bufferingOldest(readerLimit))
        let id: Int? = state.withLock { state in
            guard !state.finished else { return nil }
            let id = state.next
            state.next += 1
            state.readers[id] = Reader(continuation: continuation, call: call, dropped: DropHandler(dropped))
            return id
        }
        guard let id else {
            continuation.finish()
            return (-1, stream)
        }
        continuation.onTermination = { [weak self] _ in self?.unsubscribe(id) }
        return (id, stream)
    }

    func unsubscribe(_ id: Int) {
        let reader = state.withLock { $0.readers.removeValue(forKey: id) }
        reader?.continuation.finish()
    }

    /// Readers dropped for falling behind, since the start.
    public var droppedReaders: Int { state.withLock { $0.dropped } }

    /// Readers now.
    public var readers: Int { state.withLock { $0.readers.count } }

    /// Sends the event (stamped with its `time`) to every reader of all events and of its call.
    /// With no reader the event is only numbered: `object` is not built, nor written as JSON
    /// (each call's statistics come every second), and the `id:` numbers of events read later
    /// still count it.
    public func publish(_ object: @autoclosure () -> [String: Any]?) {
        let unread = state.withLock { state -> Bool in
            guard state.readers.isEmpty else { return false }
            state.sequence += 1
            return true
        }
        guard !unread, var object = object() else { return }
        object["time"] = Date().timeIntervalSince1970
        guard let json = JSONLine.data(object) else { return }
        let call = (object["call"] as? String).flatMap(UUID.init(uuidString:))
        let sequence = state.withLock { state -> Int in
            state.sequence += 1
            return state.sequence
        }
        // `id:` numbers events, so a reader that was dropped can tell what it missed.
        var line = Array("id: \(sequence)\ndata: ".utf8)
        line.append(contentsOf: json)  // ends with its newline
        line.append(0x0A)
        let readers = state.withLock { $0.readers }
        var behind: [(Int, Reader)] = []
        for (id, reader) in readers where reader.call == nil || reader.call == call {
            if case .dropped = reader.continuation.yield(line) { behind.append((id, reader)) }
        }
        for (id, reader) in behind {
            let removed = state.withLock { state -> Bool in
                guard state.readers.removeValue(forKey: id) != nil else { return false }
                state.dropped += 1
                return true
            }
            guard removed else { continue }
            reader.dropped.call("the reader fell \(readerLimit) events behind")
            reader.continuation.finish()
        }
    }

    /// Ends every reader's stream; later subscriptions end at once.
    public func finish() {
        let readers = state.withLock { state in
            state.finished = true
            let readers = state.readers
            state.readers = [:]
            return readers
        }
        for reader in readers.values { reader.continuation.finish() }
    }
}
