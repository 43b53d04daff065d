import CallNode
import CallNodeTestKit
import CallNodeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A call's recording that fails mid-call (its disk fills up): the call goes on, the node says
/// so (event, metric via the event, log), Recents marks the recording incomplete, and the file
/// holds what was written before.
@Suite struct RecordingFailureTests {
    /// Points every descriptor open on `path` at /dev/full (writes fail with ENOSPC), as a disk
    /// that filled up would; returns how many files under `path` were open.
    static func fillDisk(under path: String) -> Int {
        let full = open("/dev/full", O_WRONLY)
        defer { close(full) }
        // Files, not descriptors (a recording holds one descriptor for its file, and nothing
        // else under `path` is open: a descriptor that came and went between the look and the
        // dup2 would be another test's by then).
        var swapped: Set<String> = []
        // Every open descriptor (a whole test run has many more than a thousand).
        let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd"))?.compactMap { Int32($0) } ?? []
        for descriptor in descriptors where descriptor > 2 && descriptor != full {
            var link = [CChar](repeating: 0, count: 1024)
            let count = readlink("/proc/self/fd/\(descriptor)", &link, link.count - 1)
            guard count > 0 else { continue }
            let target = String(decoding: link[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
            if target.hasPrefix(path) {
                dup2(full, descriptor)
                swapped.insert(target)
            }
        }
        return swapped.count
    }

    @Test func aRecordingThatFailsMidCallIsReportedAndTheCallGoesOn() async throws {
        let f = try InMemoryNodes()
        let recordings = f.path("recordings-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(atPath: recordings, withIntermediateDirectories: true)
        let alice = try await f.node("alice", input: .tone(440))
        let bob = try await f.node("bob") { $0.callAudio = CallAudio.perCall(input: nil, recordingsIn: recordings) }
        try await f.trust(alice, as: "alice", bob, as: "bob")
        let call = try await alice.call(.contact("bob"))
        try await f.waitFor("bob", advancing: true) { if case .connected = $0 { true } else { false } }
        for _ in 0..<150 { await f.step() }  // three seconds recorded
        #expect(Self.fillDisk(under: recordings) == 1)
        let failed = try await f.waitFor("bob", advancing: true, frames: 200) { if case .recordingFailed = $0 { true } else { false } }
        guard case let .recordingFailed(bobCall, path, reason) = failed.event else { return }
        #expect(reason.contains("No space left on device"), "\(reason)")
        #expect(path.hasPrefix(recordings))
        // The call goes on: audio keeps coming, nothing ended.
        let before = try #require(await bob.statistics(bobCall)).packetsReceived
        for _ in 0..<50 { await f.step() }
        #expect(try #require(await bob.statistics(bobCall)).packetsReceived >= before + 45)
        #expect(!f.events("bob").contains { if case .ended = $0 { true } else { false } })
        try await alice.hangUp(call)
        try await f.waitFor("bob", advancing: true) { if case .ended = $0 { true } else { false } }
        // Recents says the recording is incomplete, and why.
        try await bob.store.flush()
        let recent = try #require(try await bob.store.recents().first { $0.id == bobCall })
        #expect(recent.recording == path)
        #expect(recent.recordingProblem?.contains("No space left") == true, "\(recent.recordingProblem ?? "-")")
        await f.shutdown()
        // The file holds a valid recording of about the seconds before the disk filled.
        let samples = try WAV.read(path: path).samples
        #expect(samples.count >= 2 * 48_000 && samples.count <= 4 * 48_000, "\(samples.count) samples")
    }
}
