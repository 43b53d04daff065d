import Foundation
import Locking
import POSIX

#if canImport(Glibc)
import Glibc
#endif

/// Watches a database file's directory with inotify and calls `changed` after writes to the
/// database or its WAL, so a running node sees contacts and blocks that another process (the
/// `callnode` command line) changed. Events that arrive together are coalesced into one call.
///
/// Runs on its own thread (it blocks in `poll`), never on the cooperative pool. SQLite has no
/// cross-process change notification and GRDB's observation sees only its own connections'
/// writes; the file system sees every writer.
final class StoreWatcher: Sendable {
    /// The write end of a pipe whose read end the thread polls: a byte written stops it.
    private let wake: Int32
    private let finished = Locked(false)

    /// How often the files are looked at when inotify cannot be had.
    static let pollInterval: Int32 = 500

    /// Starts watching: with inotify, or, when the host has none to give (its per-user limit
    /// of instances, 128 by default, is shared by every process of the user), by looking at the
    /// database's files twice a second. Nil only when not even a pipe or a thread can be made.
    /// `inotify` false looks at the files from the start (what a host without inotify gets).
    init?(path: String, inotify useInotify: Bool = true, changed: @escaping @Sendable () -> Void) {
        let directory = (path as NSString).deletingLastPathComponent
        let name = (path as NSString).lastPathComponent
        var fd = useInotify ? inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK)) : -1
        let mask = UInt32(IN_MODIFY) | UInt32(IN_CLOSE_WRITE) | UInt32(IN_MOVED_TO) | UInt32(IN_CREATE)
        if fd >= 0 && inotify_add_watch(fd, directory.isEmpty ? "." : directory, mask) < 0 {
            close(fd)
            fd = -1
        }
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else {
            if fd >= 0 { close(fd) }
            return nil
        }
        let inotify = fd
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        let (stopRead, stopWrite) = (ends[0], ends[1])
        self.wake = stopWrite
        let finished = self.finished
        let watching = try? SystemThread.start(name: "callnode-store-watch", detached: true) {
            if inotify >= 0 {
                Self.loop(fd: inotify, wake: stopRead, name: name, finished: finished, changed: changed)
            } else {
                Self.pollLoop(path: path, wake: stopRead, finished: finished, changed: changed)
            }
            // Under the lock `stop()` writes under: no write can reach a closed (or reused) fd.
            finished.withLock { done in
                done = true
                if inotify >= 0 { close(inotify) }
                close(stopRead)
                close(stopWrite)
            }
        }
        guard watching != nil else {
            finished.withLock { $0 = true }  // so deinit's stop() writes to no closed descriptor
            if inotify >= 0 { close(inotify) }
            close(stopRead)
            close(stopWrite)
            return nil
        }
    }

    /// Stops the thread (idempotent); `changed` is not called afterwards.
    func stop() {
        let wake = self.wake
        finished.withLock { done in
            guard !done else { return }
            done = true
            var byte: UInt8 = 1
            _ = write(wake, &byte, 1)
        }
    }

    deinit { stop() }

    /// The database's files as `stat` sees them (the file and its write-ahead log): any write
    /// changes a size or a modification time.
    static func signature(of path: String) -> [Int64] {
        [path, path + "-wal"].flatMap { file -> [Int64] in
            var status = stat()
            guard stat(file, &status) == 0 else { return [-1, -1, -1, -1] }
            return [Int64(status.st_ino), Int64(status.st_size), Int64(status.st_mtim.tv_sec), Int64(status.st_mtim.tv_nsec)]
        }
    }

    /// Without inotify: the files looked at every ``pollInterval`` milliseconds.
    private static func pollLoop(path: String, wake: Int32, finished: Locked<Bool>, changed: @Sendable () -> Void) {
        var last = signature(of: path)
        while !finished.withLock({ $0 }) {
            var fds = [pollfd(fd: wake, events: Int16(POLLIN), revents: 0)]
            guard let ready = try? syscall(where: "poll", { poll(&fds, 1, pollInterval) }) else { return }
            if ready > 0 && fds[0].revents != 0 { return }
            let now = signature(of: path)
            if now != last {
                last = now
                if !finished.withLock({ $0 }) { changed() }
            }
        }
    }

    private static func loop(fd: Int32, wake: Int32, name: String, finished: Locked<Bool>, changed: @Sendable () -> Void) {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !finished.withLock({ $0 }) {
            var fds = [pollfd(fd: fd, events: Int16(POLLIN), revents: 0), pollfd(fd: wake, events: Int16(POLLIN), revents: 0)]
            guard (try? syscall(where: "poll", { poll(&fds, 2, -1) })) != nil else { return }
            if fds[1].revents != 0 { return }
            var touched = false
            // Drain everything queued now (and what follows within a moment), then reload once.
            repeat {
                let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                guard count > 0 else { break }
                var offset = 0
                while offset + MemoryLayout<inotify_event>.size <= count {
                    let (length, file) = buffer.withUnsafeBytes { raw -> (Int, String) in
                        let event = raw.loadUnaligned(fromByteOffset: offset, as: inotify_event.self)
                        let start = offset + MemoryLayout<inotify_event>.size
                        let bytes = raw[start..<min(count, start + Int(event.len))].prefix { $0 != 0 }
                        return (Int(event.len), String(decoding: bytes, as: UTF8.self))
                    }
                    if file.hasPrefix(name) { touched = true }
                    offset += MemoryLayout<inotify_event>.size + length
                }
            } while true
            if touched && !finished.withLock({ $0 }) { changed() }
        }
    }
}
