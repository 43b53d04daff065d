import Foundation
import POSIX
import Locking

#if canImport(Glibc)
import Glibc
#endif

/// A child process started with posix_spawn, for test servers and tools. (Foundation's
/// `Process.waitUntilExit` was seen spinning forever on this platform.)
public final class ChildProcess: Sendable {
    public let pid: pid_t
    /// The exit status once the child has been reaped (by `isRunning`, `wait` or `stop`).
    private let reaped = Locked<Int32?>(nil)

    /// Starts `path` with `arguments`; stdout and stderr go to /dev/null unless `output` names a file.
    /// `stdin`: a descriptor of the caller's for the child's standard input (the caller closes
    /// it); `nullStdin`: the child reads /dev/null, opened in the child alone, so this process
    /// holds no descriptor for it (a test counting descriptors may run meanwhile).
    /// `environment`: variables set (or replaced) for the child, on top of this process's.
    /// `descriptors`: more descriptors the child inherits, keyed by their number in the child
    /// (3 and up), each a descriptor of the caller's put there with dup2 (the caller closes
    /// its own); no caller's descriptor may itself be one of those numbers (the dup2 calls
    /// run in turn and would overwrite it).
    public init(_ path: String, _ arguments: [String], output: String = "/dev/null", stdin: Int32? = nil, nullStdin: Bool = false,
                environment: [String: String] = [:], descriptors: [Int32: Int32] = [:]) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if let stdin {
            posix_spawn_file_actions_adddup2(&actions, stdin, 0)
        } else if nullStdin {
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        }
        posix_spawn_file_actions_addopen(&actions, 1, output, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        for (target, source) in descriptors.sorted(by: { $0.key < $1.key }) {
            posix_spawn_file_actions_adddup2(&actions, source, target)
        }
        // Nothing else of the test process goes with the child: an inherited socket keeps a
        // connection the node closed open (no FIN while the child holds a copy), and NIO
        // accepts without close-on-exec. A flood test once saw its 64 timed-out handshakes
        // stay open for 30 s while a simulator child ran.
        // (The descriptors asked for stay: closing starts above the highest.)
        _ = Self.addCloseFrom(&actions, max(3, (descriptors.keys.max() ?? 2) + 1))
        let argv: [UnsafeMutablePointer<CChar>?] = ([path] + arguments).map { strdup($0) } + [nil]
        defer { for arg in argv { free(arg) } }
        var pid: pid_t = 0
        var variables: [UnsafeMutablePointer<CChar>?] = []
        var index = 0
        while let entry = environ[index] {
            let text = String(cString: entry)
            let name = String(text.prefix { $0 != "=" })
            if environment[name] == nil { variables.append(strdup(entry)) }
            index += 1
        }
        for (name, value) in environment { variables.append(strdup("\(name)=\(value)")) }
        variables.append(nil)
        defer { for variable in variables { free(variable) } }
        // A child starts as from a shell: no signal blocked, every signal's default action. The
        // spawning thread is often one of libdispatch's, which block signals, and a child would
        // inherit that mask (Kamailio's timer process then never ran: no retransmission, no
        // failover, no probes).
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t(), all = sigset_t()
        sigemptyset(&none)
        sigfillset(&all)
        sigdelset(&all, SIGKILL)
        sigdelset(&all, SIGSTOP)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let rc = posix_spawn(&pid, path, &actions, &attributes, argv, variables)
        guard rc == 0 else { throw TestFailure("cannot start \(path): \(String(cString: strerror(rc)))") }
        self.pid = pid
    }

    /// Whether the child is still running (reaps it, keeping its status, if it ended).
    public var isRunning: Bool {
        if reaped.withLock({ $0 }) != nil { return false }
        var status: Int32 = 0
        let result = waitpid(pid, &status, WNOHANG)
        if result == pid { record(status) }
        return result == 0
    }

    /// Waits for the child to exit and returns its exit status (-1 if killed by a signal).
    /// Waits for the process to end, on a thread of its own: a `waitpid` on the cooperative
    /// pool would hold one of its two threads for as long as the child runs, and every
    /// in-process node and server of the tests running beside it would wait with it.
    public func wait() async -> Int32 {
        if let status = reaped.withLock({ $0 }) { return status }
        // Off the cooperative pool; should no thread be had, here.
        return (try? await SystemThread.run(name: "test-wait") { self.waitBlocking() }) ?? waitBlocking()
    }

    /// Waits for the process to end on the calling thread (never on the cooperative pool).
    public func waitBlocking() -> Int32 {
        if let status = reaped.withLock({ $0 }) { return status }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return record(status)
    }

    @discardableResult
    private func record(_ raw: Int32) -> Int32 {
        let status = (raw & 0x7F) == 0 ? (raw >> 8) & 0xFF : -1
        reaped.withLock { $0 = status }
        return status
    }

    /// SIGTERM, then SIGKILL if it is still there after `grace`; always reaps it.
    public func stop(grace: Duration = .seconds(2)) {
        guard isRunning else { return }
        kill(pid, SIGTERM)
        let deadline = ContinuousClock.now + grace
        while ContinuousClock.now < deadline {
            if !isRunning { return }
            usleep(10_000)
        }
        kill(pid, SIGKILL)
        _ = waitBlocking()
    }

    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34+), which Swift's Glibc module
    /// does not import: looked up once by name.
    private static let addCloseFrom: @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32 = {
        // Force-unwrap: glibc 2.36 on Debian 12 has it; without it every child would keep the test's sockets.
        let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np")!
        return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
    }()

    /// As ``run(_:_:input:output:)``, waited for on a thread of its own: the calling task holds
    /// no thread of the cooperative pool meanwhile (two of them, on two cores, serve every test).
    public static func running(_ path: String, _ arguments: [String], input: String = "", output: String = "/dev/null",
                               limit: Duration? = nil) async throws -> Int32 {
        let result = try await SystemThread.run(name: "test-child") { () -> Result<Int32, TestFailure> in
            do {
                return .success(try run(path, arguments, input: input, output: output, limit: limit))
            } catch let failure as TestFailure {
                return .failure(failure)
            } catch {
                return .failure(TestFailure("\(error)"))
            }
        }
        return try result.get()
    }

    /// Runs `path` to completion with `input` on stdin; returns its exit status. With `limit`, a
    /// child still running after it is stopped (SIGTERM, then SIGKILL) and the run throws: a
    /// program that hangs fails its test rather than the whole suite's time.
    public static func run(_ path: String, _ arguments: [String], input: String = "", output: String = "/dev/null",
                           limit: Duration? = nil) throws -> Int32 {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw TestFailure("pipe failed") }
        // Close-on-exec, or the child would hold its own stdin's write end and never see EOF.
        for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        let child: ChildProcess
        do {
            child = try ChildProcess(path, arguments, output: output, stdin: fds[0])
        } catch {
            close(fds[0]); close(fds[1])
            throw error
        }
        close(fds[0])
        _ = input.withCString { write(fds[1], $0, strlen($0)) }
        close(fds[1])
        if let limit {
            let deadline = ContinuousClock.now + limit
            while child.isRunning {
                guard ContinuousClock.now < deadline else {
                    child.stop()
                    throw TestFailure("\(path) still ran after \(limit): stopped")
                }
                usleep(20_000)
            }
        }
        return child.waitBlocking()
    }
}

/// A test setup step that failed, with what went wrong.
public struct TestFailure: Error, Sendable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
