import Foundation
import GRDB
import Testing
@testable import Calls

/// Writes nobody waits for (Recents rows, quality timelines): one that fails is never lost
/// without a word, and waiting for them cannot fail on a lock.
@Suite struct CallStoreWriteTests {
    /// A queued write that cannot be done is counted with its reason, and the writes queued
    /// after it still land.
    @Test func aQueuedWriteThatFailsIsCountedAndTheNextStillLands() async throws {
        let (store, directory) = try CallStoreCacheTests.temporaryStore()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        #expect(store.writeFailures.count == 0)
        // Another program took the quality table away: the timeline has nowhere to go.
        let other = try DatabaseQueue(path: directory + "/node.sqlite")
        try await other.write { db in try db.execute(sql: "DROP TABLE quality") }
        var timeline = QualityTimeline()
        timeline.append(QualityTimelineTests.second(0))
        store.saveQuality(timeline, of: UUID())
        let row = RecentCall(id: UUID(), handle: "bob", handleKind: "generic", direction: .outgoing, state: "ended", started: Date())
        store.save(row)
        try await store.flush()
        let failures = store.writeFailures
        #expect(failures.count == 1)
        #expect(failures.last?.contains("the quality of call") == true)
        #expect(failures.last?.contains("no such table") == true)
        #expect(try await store.recents().map(\.id) == [row.id])
    }

    /// Waiting for the queued writes starts no transaction: another process holding the write
    /// lock does not make it wait out the busy timeout and fail with SQLITE_BUSY.
    @Test func flushingMeetsNoLockOfItsOwn() async throws {
        let (store, directory) = try CallStoreCacheTests.temporaryStore()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var configuration = Configuration()
        configuration.allowsUnsafeTransactions = true  // the lock stays held between the accesses below
        let other = try DatabaseQueue(path: directory + "/node.sqlite", configuration: configuration)
        try await other.writeWithoutTransaction { db in try db.execute(sql: "BEGIN IMMEDIATE") }
        await #expect(throws: Never.self) { try await store.flush() }
        try await other.writeWithoutTransaction { db in try db.execute(sql: "ROLLBACK") }
    }
}
