import Calls
import CallNode
import Foundation

/// Recents over the API: the calls the node has had, each one's quality over time (as numbers
/// and as a picture) and its recording. What `callnode recents` prints, for programs and the
/// console.
extension ControlAPI {
    /// A recording larger than this is not answered in one piece (the API holds a whole answer
    /// in memory): about 43 minutes of the node's 48 kHz mono WAV.
    static let recordingAnswerLimit = 256 << 20

    /// `GET /v1/recents?limit=N` (newest first; 30 unless said, at most 500).
    func recentsList(_ query: [String: String]) async throws -> ControlResponse {
        var limit = 30
        if let given = query["limit"] {
            guard let number = Int(given), (1...500).contains(number) else {
                throw Problem(status: 400, reason: "limit must be a whole number from 1 to 500 (got '\(given)')")
            }
            limit = number
        }
        let rows = try await recents(limit: limit)
        let withQuality = try await node.store.callsWithQuality(rows.map(\.id))
        let now = Date()
        return ControlResponse(200, ["recents": rows.map { Self.recentObject($0, store: node.store, now: now, quality: withQuality.contains($0.id)) }])
    }

    /// `GET /v1/recents/ID[/quality|/quality.svg|/recording]`.
    func recent(_ id: String, part: String?) async throws -> ControlResponse {
        let row = try await resolveRecent(id)
        switch part {
        case nil:
            let quality = try await node.store.callsWithQuality([row.id]).contains(row.id)
            return ControlResponse(200, Self.recentObject(row, store: node.store, now: Date(), quality: quality))
        case "quality":
            let timeline = try await node.store.quality(of: row.id) ?? QualityTimeline()
            let encoder = JSONEncoder()
            let samples = (try? JSONSerialization.jsonObject(with: encoder.encode(timeline.samples))) ?? []
            return ControlResponse(200, ["id": row.id.uuidString, "step_s": timeline.step, "samples": samples,
                                         "summary": QualitySummary.lines(timeline)])
        case "quality.svg":
            guard let timeline = try await node.store.quality(of: row.id), !timeline.samples.isEmpty else {
                throw Problem(status: 404, reason: "call \(row.id.uuidString) kept no quality (it had no media)")
            }
            let who = node.store.contacts.withFingerprint(row.handle)?.name ?? row.handle
            let title = "\(row.direction.rawValue) call with \(who), \(ISO8601DateFormatter().string(from: row.started))"
            return ControlResponse(status: 200, contentType: "image/svg+xml", body: Array(QualityPlot.svg(timeline, title: title).utf8))
        case "recording":
            guard let path = row.recording else {
                throw Problem(status: 404, reason: "call \(row.id.uuidString) was not recorded")
            }
            let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? nil
            guard let size else { throw Problem(status: 410, reason: "the recording \(path) is gone (moved or deleted)") }
            guard size <= Self.recordingAnswerLimit else {
                throw Problem(status: 413, reason: "the recording \(path) is \(size >> 20) MB: read it from the node's disk")
            }
            guard let data = FileManager.default.contents(atPath: path) else {
                throw Problem(status: 403, reason: "the node cannot read its recording \(path)")
            }
            return ControlResponse(status: 200, contentType: "audio/wav", body: Array(data))
        default:
            throw Problem(status: 404, reason: "no such route: GET /v1/recents/\(id)/\(part ?? "")")
        }
    }

    private func recents(limit: Int) async throws -> [RecentCall] {
        do {
            return try await node.store.recents(limit: limit)
        } catch {
            throw Problem(status: 500, reason: "cannot read the recent calls: \(error)")
        }
    }

    /// The recent call `id` names: its whole ID, or a start of it no other recent call shares.
    private func resolveRecent(_ id: String) async throws -> RecentCall {
        switch IDPrefixMatch(id, in: try await recents(limit: 500), id: \.id) {
        case let .one(row): return row
        case .none:
            throw Problem(status: 404, reason: (UUID(uuidString: id).map { "no recent call \($0.uuidString)" } ?? "no recent call whose ID starts with '\(id)'")
                          + " (GET /v1/recents lists them)")
        case let .several(count): throw Problem(status: 409, reason: "'\(id)' starts \(count) recent calls' IDs: give more of it")
        }
    }

    static func recentObject(_ row: RecentCall, store: CallStore, now: Date, quality: Bool) -> [String: Any] {
        ["id": row.id.uuidString, "direction": row.direction.rawValue, "peer": row.handle,
         "name": store.contacts.withFingerprint(row.handle)?.name ?? NSNull(),
         "started": row.started.timeIntervalSince1970,
         "duration_s": row.knownDuration.map { ($0 * 10).rounded() / 10 as Any } ?? NSNull(),
         "outcome": RecentOutcome.word(row, now: now), "recording": row.recording != nil,
         "recording_problem": row.recordingProblem ?? NSNull(), "quality": quality]
    }
}

/// One word for how a recent call went, as `callnode recents` and the API say it.
public enum RecentOutcome {
    public static func word(_ row: RecentCall, now: Date) -> String {
        // An incoming call nobody answered is a missed call; one its node never ended (killed,
        // a power cut) was interrupted.
        if row.direction == .incoming && row.connected == nil && row.reason == .unanswered { return "missed" }
        if row.wasInterrupted(now: now) { return "interrupted" }
        return row.reason?.rawValue ?? (row.isInProgress ? "in progress" : row.state)
    }
}
