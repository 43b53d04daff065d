import Foundation

/// Draining: a node that stops without losing an answered call. It takes no new calls (they are
/// refused as ``RejectReason/draining``: SIP's 503 with Retry-After, so a proxy's dispatcher
/// sends them to another node; OPTIONS probes get 503 too), lets the calls in progress run to
/// their end, and after a grace period hangs up whatever is left.
extension CallNode {
    /// Whether the node takes calls now: not when draining, shutting down or at
    /// ``CallNodeConfiguration/maximumCalls``.
    public var isTakingCalls: Bool {
        guard isStarted, !isShutDown, !isDraining else { return false }
        if let limit = configuration.maximumCalls, legs.count >= limit { return false }
        return true
    }

    /// Whether ``drain(grace:)`` has begun.
    public var draining: Bool { isDraining }

    /// Stops taking calls and waits for the calls in progress to end, at most `grace` (nil: for
    /// as long as they last); then hangs up those left and returns how many it hung up. The node
    /// still runs: call ``shutdown()`` after, or keep it serving nobody new. Calling it again
    /// while a drain runs waits as well. Cancelling the task that drains stops its waiting: it
    /// returns 0 and hangs up nothing (the node goes on draining: no new calls).
    @discardableResult
    public func drain(grace: Duration?) async -> Int {
        if !isDraining {
            isDraining = true
            logger.info("draining: taking no new calls; \(legs.count) in progress")
            await availabilityChanged()
        }
        guard !legs.isEmpty else { return 0 }
        let timerClock = configuration.clock
        let deadline = grace.map { timerClock.now + $0 }
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask { [weak self] in
                await self?.waitForNoCalls()
                return false
            }
            if let deadline {
                group.addTask {
                    do { try await timerClock.sleep(until: deadline) } catch { return false }  // the drain was cancelled
                    return true
                }
            }
            let graceOver = await group.next() ?? false
            group.cancelAll()
            guard graceOver, !Task.isCancelled else { return 0 }
            // The grace is over: the rest are hung up, and the group returns once they have ended.
            let left = legs.count
            await hangUpAll()
            return left
        }
    }

    /// Returns once no call is left (at once if none is), or once the task is cancelled.
    func waitForNoCalls() async {
        guard !legs.isEmpty else { return }
        let (lastEnded, waiter) = AsyncStream.makeStream(of: Void.self)
        noCallsWaiters.append(waiter)
        for await _ in lastEnded {}  // finished by the last call's end; a cancelled task stops iterating
    }

    /// Hangs up every call (draining's grace is over), as the user here would: through the call
    /// manager, so each ends as any hang-up does (and is told to the events and Recents).
    private func hangUpAll() async {
        logger.info("draining: the grace period is over; hanging up \(legs.count) calls")
        for (uuid, leg) in legs {
            do {
                _ = try await manager.controller.request(.end(call: uuid))
            } catch {
                leg.post(.event(.end(.hangUp), done: nil))
            }
        }
    }

    /// Tells those who probe this node whether it takes calls (SIP's OPTIONS answers).
    func availabilityChanged() async {
        await sipRouter?.setAvailability(takingCalls: isTakingCalls, draining: isDraining)
    }
}
