import Foundation

/// Counts of the process's open file descriptors and threads (Linux `/proc`).
public struct ProcessResourceCounts: Equatable, CustomStringConvertible, Sendable {
    public var fileDescriptors: Int
    public var threads: Int

    public static func current() -> ProcessResourceCounts {
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? -1
        let threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task").count) ?? -1
        return ProcessResourceCounts(fileDescriptors: fds, threads: threads)
    }

    public var description: String { "\(fileDescriptors) fds, \(threads) threads" }
}
