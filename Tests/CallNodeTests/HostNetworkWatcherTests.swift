import CallNode
import Foundation
import Testing
import CallNodeTestSupport

#if canImport(Glibc)
import Glibc
#endif

@Suite(.serialized) struct HostNetworkWatcherTests {
    /// Runs `ip` with `arguments`; its exit status.
    @discardableResult
    static func ip(_ arguments: [String]) -> Int32 {
        (try? ChildProcess.run("/usr/sbin/ip", arguments, output: "/dev/null")) ?? -1
    }

    @Test(.enabled(if: geteuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/sbin/ip"), "needs root and ip to add an interface"),
          .exclusiveProcessResources)
    func anAddressAddedToThisHostIsReportedWithinASecondNotAtTheFallback() async throws {
        let link = "cnwatch\(getpid() % 10_000)"
        Self.ip(["link", "del", link])
        // A veth pair (this kernel has no dummy links); the address goes on one end.
        guard Self.ip(["link", "add", link, "type", "veth", "peer", "name", link + "p"]) == 0 else {
            Issue.record("cannot add a veth link")
            return
        }
        defer { Self.ip(["link", "del", link]) }
        // A minute's fallback: only the kernel's messages can explain a report within a second.
        let changes = HostNetworkWatcher.changes(settle: .milliseconds(50), fallback: .seconds(60))
        let reports = Task {
            var count = 0
            for await _ in changes {
                count += 1
                if HostNetworkSnapshot.current().addresses.contains("198.18.77.9") { return (count, true) }
            }
            return (count, false)
        }
        try await Task.sleep(for: .milliseconds(200))  // the watcher's socket is bound
        let before = ContinuousClock.now
        #expect(Self.ip(["addr", "add", "198.18.77.9/32", "dev", link]) == 0)
        #expect(Self.ip(["link", "set", link, "up"]) == 0)
        let seen = await withTaskGroup(of: (Int, Bool)?.self) { group in
            group.addTask { await reports.value }
            group.addTask { try? await Task.sleep(for: .seconds(5)); return nil }
            let first = await group.next() ?? nil
            group.cancelAll()
            reports.cancel()
            return first
        }
        #expect(seen?.1 == true, "the new address was reported (\(String(describing: seen)))")
        #expect(ContinuousClock.now - before < .seconds(5))
    }

    @Test func iterationThatEndsStopsTheWatcher() async {
        let changes = HostNetworkWatcher.changes(settle: .milliseconds(10), fallback: .milliseconds(20))
        var count = 0
        for await _ in changes {
            count += 1
            if count == 3 { break }
        }
        // Without the kernel's news it still reports at the fallback interval.
        #expect(count == 3)
    }
}
