import AudioSession
import CallNodeTestKit
import CallNodeTestSupport
@testable import Calls
import Clocks
import Foundation
import Testing

@Suite struct ConcurrentCallsTests {
    static func store() throws -> CallStore {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("calls-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        return try CallStore(path: dir + "/node.sqlite")
    }

    @Test func manyCallsFromSeveralTasksLeaveRegistryObserverAndRecentsConsistent() async throws {
        let configuration = ProviderConfiguration(maximumCallGroups: 64, maximumCallsPerCallGroup: 1)
        let a = try await CallManager(configuration: configuration, audio: .appOwned, store: try Self.store(), clock: TimerClock(ManualClock()))
        let b = try await CallManager(configuration: configuration, audio: .appOwned, store: try Self.store(), clock: TimerClock(ManualClock()))
        let changesA = a.observer.changes(), changesB = b.observer.changes()
        let peers = InMemoryCallPeers(a: a, b: b)
        let tasks = 8, callsPerTask = 12
        let endedAt = try await withThrowingTaskGroup(of: [(UUID, Bool)].self) { group in
            for task in 0..<tasks {
                group.addTask {
                    var rng = SplitMix64(seed: UInt64(task + 1))
                    var ended: [(UUID, Bool)] = []
                    for _ in 0..<callsPerTask {
                        let uuid = UUID()
                        let start = try await a.controller.request(.start(call: uuid, handle: CallHandle(.generic, "b")))
                        guard try await a.outcome(of: start) == .fulfilled else { throw TestFailure("start failed") }
                        let answer = try await b.controller.request(.answer(call: uuid))
                        guard try await b.outcome(of: answer) == .fulfilled else { throw TestFailure("answer failed") }
                        let endsAtA = Bool.random(using: &rng)
                        let ender = endsAtA ? a : b
                        let end = try await ender.controller.request(.end(call: uuid))
                        guard try await ender.outcome(of: end) == .fulfilled else { throw TestFailure("end failed") }
                        ended.append((uuid, endsAtA))
                    }
                    return ended
                }
            }
            var all: [UUID: Bool] = [:]
            for try await part in group { for (uuid, endsAtA) in part { all[uuid] = endsAtA } }
            return all
        }
        let total = tasks * callsPerTask
        #expect(endedAt.count == total)
        // Remote ends are reported after the local end is fulfilled: wait for both registries to drain.
        for manager in [a, b] {
            for _ in 0..<10_000 where await manager.liveCallCount > 0 { await Task.yield() }
            #expect(await manager.liveCallCount == 0)
            #expect(manager.observer.calls.isEmpty)
        }
        await peers.stop()

        for (manager, isA) in [(a, true), (b, false)] {
            let rows = try await manager.store!.recents(limit: 10_000)
            #expect(rows.count == total)
            #expect(Set(rows.map(\.id)) == Set(endedAt.keys))
            for row in rows {
                let endedHere = endedAt[row.id] == isA
                #expect(row.reason == (endedHere ? .localEnded : .remoteEnded), "\(row)")
                #expect(row.connected != nil && row.ended != nil && row.direction == (isA ? .outgoing : .incoming))
            }
        }
        for changes in [changesA, changesB] {
            var endedChanges: [UUID: Int] = [:]
            for await change in changes where change.hasEnded { endedChanges[change.id, default: 0] += 1 }
            #expect(endedChanges.count == total && endedChanges.values.allSatisfy { $0 == 1 })
        }
    }
}
