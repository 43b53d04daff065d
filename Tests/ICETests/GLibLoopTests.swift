@testable import ICE
import Locking
import Synchronization
import Testing

/// The loop thread's contract: jobs run in order on one thread, never inline, and once the loop
/// has stopped every job is refused (its `dropped` side runs) instead of being lost.
@Suite struct GLibLoopTests {
    @Test func jobsRunInPostingOrderAndRunReturnsTheirResults() async throws {
        let loop = try GLibLoop(name: "callnode-test")
        let seen = Locked<[Int]>([])
        for i in 0..<200 { loop.post { seen.withLock { $0.append(i) } } }
        let count = try await loop.run { seen.withLock { $0.count } }
        #expect(count == 200)
        #expect(seen.withLock { $0 } == Array(0..<200))
        await loop.stop()
    }

    @Test func aJobPostedFromTheLoopThreadRunsAfterTheCurrentOne() async throws {
        let loop = try GLibLoop(name: "callnode-test")
        let order = Locked<[String]>([])
        try await loop.run {
            loop.post { order.withLock { $0.append("posted") } }
            order.withLock { $0.append("current") }
        }
        _ = try await loop.run { }  // everything posted before this has run
        #expect(order.withLock { $0 } == ["current", "posted"])
        await loop.stop()
    }

    @Test func afterStopJobsAreRefusedAndRunThrowsClosed() async throws {
        let loop = try GLibLoop(name: "callnode-test")
        let ran = Atomic<Int>(0)
        let dropped = Atomic<Int>(0)
        loop.post { ran.add(1, ordering: .relaxed) }
        await loop.stop()
        #expect(ran.load(ordering: .relaxed) == 1, "a job posted before stop() runs")

        loop.post({ ran.add(1, ordering: .relaxed) }, dropped: { dropped.add(1, ordering: .relaxed) })
        #expect(ran.load(ordering: .relaxed) == 1)
        #expect(dropped.load(ordering: .relaxed) == 1)
        await #expect(throws: IceError.closed) { try await loop.run { 1 } }
        await loop.stop()  // idempotent
    }

    @Test func jobsRacingStopEitherRunOrAreDroppedNeverLost() async throws {
        for _ in 0..<20 {
            let loop = try GLibLoop(name: "callnode-test")
            let settled = Tally()
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<4 {
                    group.addTask {
                        for _ in 0..<50 {
                            loop.post({ settled.add() }, dropped: { settled.add() })
                        }
                    }
                }
                group.addTask { await loop.stop() }
            }
            #expect(settled.value == 200)
        }
    }
}

private final class Tally: Sendable {
    private let count = Atomic<Int>(0)
    func add() { count.add(1, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}
