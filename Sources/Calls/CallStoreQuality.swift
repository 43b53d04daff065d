import Foundation
import GRDB

/// Each call's quality over time (``QualityTimeline``), kept beside its Recents row and cleared
/// with Recents.
extension CallStore {
    /// Queues keeping `timeline` as the call's (replacing what was kept), in order with the
    /// Recents rows the call manager writes: the caller never waits on the database (a call's
    /// end does not), and ``flush()`` waits for it.
    public func saveQuality(_ timeline: QualityTimeline, of call: UUID) {
        guard let data = try? JSONEncoder().encode(timeline) else { return }  // plain numbers: cannot fail
        enqueue("the quality of call \(call)") { db in
            try db.execute(sql: "INSERT OR REPLACE INTO quality (id, timeline) VALUES (?, ?)", arguments: [call.uuidString, data])
        }
    }

    /// The call's quality over time, if it was kept (nil for a call that never had media, or
    /// one kept before this was).
    public func quality(of call: UUID) async throws -> QualityTimeline? {
        let data = try await pool.read { db in
            try Data.fetchOne(db, sql: "SELECT timeline FROM quality WHERE id = ?", arguments: [call.uuidString])
        }
        return try data.map { try JSONDecoder().decode(QualityTimeline.self, from: $0) }
    }

    /// Which of `calls` have their quality kept (one query for a list of Recents).
    public func callsWithQuality(_ calls: [UUID]) async throws -> Set<UUID> {
        guard !calls.isEmpty else { return [] }
        let ids = calls.map(\.uuidString)
        let kept = try await pool.read { db in
            try String.fetchAll(db, sql: "SELECT id FROM quality WHERE id IN (\(databaseQuestionMarks(count: ids.count)))",
                                arguments: StatementArguments(ids))
        }
        return Set(kept.compactMap(UUID.init(uuidString:)))
    }
}
