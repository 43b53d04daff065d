import Foundation

/// The tasks a node owns: those that run as long as it does, and those that end on their own.
/// ``CallNode/shutdown()`` cancels and waits for both kinds; a node released without it cancels
/// them in `deinit`.
extension CallNode {
    /// Keeps a task that runs as long as the node does. Once the node is shutting down it is
    /// cancelled at once (``shutdown()`` still waits for it). Tasks are created before they
    /// are stored: a task created inside a modify access of actor state would start inside it.
    func keep(_ task: Task<Void, Never>) {
        if isShutDown { task.cancel() }
        tasks.append(task)
    }

    /// Runs `work` in a task the node keeps until it ends (then forgets it), cancels at
    /// ``shutdown()`` and waits for.
    @discardableResult
    func keepUntilDone(_ work: @escaping @Sendable () async -> Void) -> Task<Void, Never> {
        let id = UUID(), weak = WeakNode(self)
        // Forgetting hops to the node, so it always comes after the task is stored below.
        let task = Task {
            await work()
            await weak.node?.forgetTask(id)
        }
        if isShutDown { task.cancel() }
        transientTasks[id] = task
        return task
    }

    func forgetTask(_ id: UUID) { transientTasks[id] = nil }

    /// Replaces the one-time work ``start()`` does on a thread of its own (tests make it slow).
    func replaceWarmUp(_ work: @escaping @Sendable () -> Void) { warmUp = work }

    func finishWarmUp() { isWarmedUp = true }

    /// Tasks kept now, of both kinds (for tests of a long-running node).
    var keptTaskCount: Int { tasks.count + transientTasks.count }

    /// Cancels every kept task and waits for each, until none is left: a task kept while these
    /// waited (``keep(_:)`` cancels it at once then) is waited for too, not dropped.
    func endTasks() async {
        while !tasks.isEmpty || !transientTasks.isEmpty {
            let current = tasks + transientTasks.values
            tasks.removeAll()
            transientTasks.removeAll()
            for task in current { task.cancel() }
            for task in current { await task.value }
        }
    }
}

/// A weak reference to a node for the tasks it owns, so they do not keep it alive.
final class WeakNode: Sendable {
    weak let node: CallNode?
    init(_ node: CallNode?) { self.node = node }
}
