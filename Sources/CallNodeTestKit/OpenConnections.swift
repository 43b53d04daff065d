import CallNode
import Locking

/// The open ends of in-memory connections, in the order they opened: closing "every
/// connection" then closes them in the same order on every run (a dictionary keyed by object
/// identity would go by memory addresses), which a seeded simulation needs.
final class OpenConnections: Sendable {
    private struct State {
        var next = 0
        var open: [ObjectIdentifier: (order: Int, connection: SignalingConnection)] = [:]
    }

    private let state = Locked(State())

    func add(_ connections: SignalingConnection...) {
        state.withLock { state in
            for connection in connections {
                state.next += 1
                state.open[connection.id] = (state.next, connection)
            }
        }
    }

    func remove(_ connections: SignalingConnection...) {
        state.withLock { state in for connection in connections { state.open[connection.id] = nil } }
    }

    /// Every open end, oldest first.
    var all: [SignalingConnection] {
        state.withLock { $0.open.values.sorted { $0.order < $1.order }.map(\.connection) }
    }

    var count: Int { state.withLock { $0.open.count } }
}
