import CallNodeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The test servers and tools the suite starts take nothing of the test process with them: a
/// socket a child inherited stays open after the node closes it (no FIN reaches the peer), and
/// tests that wait for the node to close a connection then waited in vain.
@Suite struct ChildProcessTests {
    @Test func aChildInheritsNoDescriptorButItsStandardOnes() async throws {
        let socketFD = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)  // no close-on-exec, as NIO's accepted sockets
        try #require(socketFD >= 0)
        defer { close(socketFD) }
        // A copy at a high number, the lowest free one from 517 up: never dup2 onto a fixed
        // number, which would silently close whatever another test holds there (a database, a
        // connection) and hand this test's socket to its owner.
        let high = fcntl(socketFD, F_DUPFD, 517)
        try #require(high >= 517)
        defer { close(high) }
        let output = FileManager.default.temporaryDirectory.appendingPathComponent("child-fds-\(getpid()).txt").path
        defer { unlink(output) }
        let status = try ChildProcess.run("/bin/ls", ["/proc/self/fd"], output: output)
        #expect(status == 0)
        let listed = Set(((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").split(whereSeparator: \.isWhitespace).map(String.init))
        #expect(listed.contains("0") && listed.contains("1") && listed.contains("2"), "\(listed)")
        #expect(!listed.contains("\(high)") && !listed.contains("\(socketFD)"), "the child inherited the test's socket: \(listed.sorted())")
    }
}
