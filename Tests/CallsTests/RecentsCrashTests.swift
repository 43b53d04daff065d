import CallNodeTestSupport
import Foundation
import Testing
@testable import Calls

#if canImport(Glibc)
import Glibc
#endif

@Suite struct RecentsCrashTests {
    /// A node killed with SIGKILL mid-call: its finished call and the in-progress call's latest
    /// state are in the database when it is reopened.
    @Test func recentsSurviveAProcessKilledMidCall() async throws {
        let child = try BuildProducts.executable("calls-crash-child")
        let directory = "/tmp/callnode-crash-\(getpid())-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let database = directory + "/node.sqlite", output = directory + "/child.log"
        let finished = UUID(), live = UUID()
        let process = try ChildProcess(child, [database, finished.uuidString, live.uuidString], output: output)
        // Wait (bounded) for the child to say both calls are written; fail with its output if it dies.
        var ready = false
        for _ in 0..<600 where !ready {
            ready = ((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").contains("READY")
            if !ready {
                guard process.isRunning else {
                    throw TestFailure("the child exited early: \((try? String(contentsOfFile: output, encoding: .utf8)) ?? "")")
                }
                try await Task.sleep(for: .milliseconds(100))
            }
        }
        #expect(ready)
        let killedAt = Date()
        kill(process.pid, SIGKILL)
        #expect(await process.wait() == -1, "killed by a signal")

        let store = try CallStore(path: database)
        let rows = try await store.recents()
        #expect(rows.count == 2)
        let done = try #require(rows.first { $0.id == finished })
        #expect(done.reason == .remoteEnded && done.ended != nil && done.direction == .outgoing)
        #expect(done.connected != nil && done.duration != nil)
        let inProgress = try #require(rows.first { $0.id == live })
        #expect(inProgress.isInProgress && inProgress.state == "connected" && inProgress.connected != nil)
        #expect(inProgress.direction == .incoming && inProgress.handle == "alice")
        // How long it lasted, as far as the node knew: its last heartbeat before the kill.
        // The child wrote its rows and flushed them 1.5 s into the call, then went on noting
        // the call every 0.2 s until it was killed (a loaded machine may take a while to say READY).
        let lasted = try #require(inProgress.knownDuration)
        let connected = try #require(inProgress.connected)
        #expect(lasted >= 1.2 && lasted <= killedAt.timeIntervalSince(connected) + 0.05,
                "the call lasted \(lasted) s as far as its row says; it was killed \(killedAt.timeIntervalSince(connected)) s after it connected")
        #expect(!inProgress.wasInterrupted(now: Date()), "a row seen a moment ago is not yet taken as interrupted")
        #expect(inProgress.wasInterrupted(now: Date() + 60))
        #expect(!done.wasInterrupted(now: Date() + 60) && done.knownDuration == done.duration)
        #expect(try await store.journalMode() == "wal")
    }
}
