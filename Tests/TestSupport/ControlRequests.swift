import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Requests to a node's control API as its users make them from outside: curl, over the
/// node's Unix socket or TCP.
public enum ControlRequests {
    /// A short socket path of its own (a socket's path is limited to 107 bytes).
    public static func socketPath() -> String { "/tmp/cn-ctl-\(UUID().uuidString.prefix(8)).sock" }

    /// Runs curl with `arguments` (silent); returns its exit status and what it printed.
    public static func curl(_ arguments: [String]) async throws -> (status: Int32, output: String) {
        let log = "/tmp/cn-curl-\(UUID().uuidString.prefix(8)).out"
        defer { unlink(log) }
        // A minute at most: the node's handlers run on this process's two pool threads, which
        // the suite's first half-minute (every test started at once) keeps busy for up to ~30 s
        // (pure parsing tests "pass after 27 s" then); ten seconds timed out there.
        let status = try await ChildProcess.running("/usr/bin/curl", ["-s", "--max-time", "60"] + arguments, output: log)
        return (status, (try? String(contentsOfFile: log, encoding: .utf8)) ?? "")
    }

    /// curl with `arguments`, its answer read as HTTP: status, headers (lower-cased names) and body.
    public static func exchange(_ arguments: [String]) async throws -> (status: Int, headers: [String: String], body: String) {
        let output = try await curl(["-D", "-"] + arguments).output
        let parts = output.components(separatedBy: "\r\n\r\n")
        let head = parts.first?.components(separatedBy: "\r\n") ?? []
        let status = head.first.flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") } ?? 0
        var headers: [String: String] = [:]
        for line in head.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return (status, headers, parts.dropFirst().joined(separator: "\r\n\r\n"))
    }
}
