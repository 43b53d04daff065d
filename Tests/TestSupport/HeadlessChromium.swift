import Foundation
import Locking
import POSIX

#if canImport(Glibc)
import Glibc
#endif

/// Debian's Chromium, headless, driven over the DevTools protocol on two pipes
/// (`--remote-debugging-pipe`): a page opened, clicked and typed into as a person would, and
/// read back. Pipes rather than a port: there is no port to find free or to race another
/// browser for, and the connection ends with the process.
///
/// Each message, either way, is JSON ended by a NUL byte. Replies are read on a thread of the
/// helper's own (a blocking `read` on the cooperative pool would hold one of its two threads);
/// events are kept, so that a failure can quote what the page logged. Close it with
/// ``close()`` when done (the last release closes it too, on whatever thread releases it).
public final class HeadlessChromium: Sendable {
    /// Chromium's output (its log, with `--enable-logging=stderr`), whose end a failure quotes.
    public let log: String
    let connection: Connection
    private let process: ChildProcess
    private let reader: SystemThread
    private let closed = Locked(false)

    /// Starts Chromium with a blank page, `profile` as its user data directory and its output
    /// into `log`.
    public init(chromium: String = "/usr/bin/chromium", profile: String, log: String, extraArguments: [String] = []) throws {
        try? FileManager.default.createDirectory(at: URL(fileURLWithPath: log).deletingLastPathComponent(),
                                                 withIntermediateDirectories: true)
        let (commands, replies) = try Connection.pipes()
        let arguments = [
            "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--user-data-dir=\(profile)",
            "--remote-debugging-pipe", "--enable-logging=stderr", "--v=0", "--window-size=1280,900",
            "--hide-scrollbars", "--mute-audio",
        ] + extraArguments + ["about:blank"]
        let process: ChildProcess
        do {
            // Chromium reads commands from its descriptor 3 and writes replies to its 4.
            process = try ChildProcess(chromium, arguments, output: log, nullStdin: true,
                                       descriptors: [3: commands.read, 4: replies.write])
        } catch {
            Connection.closeAll([commands.read, commands.write, replies.read, replies.write])
            throw error
        }
        // The child's ends are the child's alone: the replies pipe reads end of file once
        // Chromium has gone only if no copy of its write end is left here.
        Connection.closeAll([commands.read, replies.write])
        let connection = Connection(commands: commands.write, replies: replies.read, log: log)
        let reader: SystemThread
        do {
            reader = try SystemThread.start(name: "test-chromium") { connection.readReplies() }
        } catch {
            process.stop(grace: .zero)
            connection.closeDescriptors()
            throw TestFailure("no thread to read chromium's replies on: \(error)")
        }
        self.log = log
        self.process = process
        self.connection = connection
        self.reader = reader
    }

    deinit { close() }

    /// Sends the command `method` (to the page of `session`, or to the browser) and returns
    /// its reply's `result`.
    /// - Throws: ``TestFailure`` when the reply is an error, when none comes within `timeout`,
    ///   or when Chromium has gone (with the end of its log).
    @discardableResult
    public func send(_ method: String, _ params: [String: Any] = [:], session: String? = nil,
                     timeout: Duration = .seconds(20)) async throws -> sending [String: Any] {
        let connection = self.connection
        let id = connection.nextID()
        var message: [String: Any] = ["id": id, "method": method, "params": params]
        if let session { message["sessionId"] = session }
        let bytes = try Connection.frame(message)
        // The command waits for whichever comes first: its reply (the reader thread), the
        // timer, a failed write or the pipe's end. Each takes the continuation out of the
        // pending ones before resuming it, so only the first resumes it.
        var timer: Task<Void, Never>?
        defer { timer?.cancel() }
        let reply: Data = try await withCheckedThrowingContinuation { continuation in
            if let ended = connection.register(id, continuation) {
                continuation.resume(throwing: TestFailure("\(method): \(ended)"))
                return
            }
            timer = Task {
                try? await Task.sleep(for: timeout)
                guard !Task.isCancelled else { return }
                connection.resolve(id, .failure(TestFailure("\(method): chromium gave no reply in \(timeout)")))
            }
            if let failed = connection.transmit(bytes, deadline: ContinuousClock.now + timeout) {
                connection.resolve(id, .failure(TestFailure("\(method): \(failed); its log ends:\n\(connection.logTail())")))
            }
        }
        guard let object = try? JSONSerialization.jsonObject(with: reply) as? [String: Any] else {
            throw TestFailure("\(method): chromium's reply is not a JSON object")
        }
        if let error = object["error"] as? [String: Any] {
            let reason = error["message"] as? String ?? "\(error)"
            let detail = error["data"] as? String
            throw TestFailure(detail.map { "\(method): \(reason) (\($0))" } ?? "\(method): \(reason)")
        }
        guard let result = object["result"] as? [String: Any] else { return [:] }
        return result
    }

    /// Opens `url` in a window of its own and attaches to it, with its page and runtime events on.
    ///
    /// A window, not a tab: a tab opened beside another hides it (`document.visibilityState`
    /// is "hidden", no animation frame runs, a screenshot waits for one), and a test may hold
    /// several pages at once.
    public func openPage(_ url: String) async throws -> Page {
        let created = try await send("Target.createTarget", ["url": url, "newWindow": true])
        guard let target = created["targetId"] as? String else { throw TestFailure("Target.createTarget gave no targetId") }
        let attached = try await send("Target.attachToTarget", ["targetId": target, "flatten": true])
        guard let session = attached["sessionId"] as? String else { throw TestFailure("Target.attachToTarget gave no sessionId") }
        // Console messages logged before this are not lost: enabling the runtime reports them.
        try await send("Page.enable", session: session)
        try await send("Runtime.enable", session: session)
        return Page(session: session, browser: self)
    }

    /// Every event Chromium has sent so far, oldest first; a page's events carry its session.
    public var events: [(method: String, params: [String: Any]?, sessionId: String?)] {
        var events: [(method: String, params: [String: Any]?, sessionId: String?)] = []
        for event in connection.events() {
            let object = try? JSONSerialization.jsonObject(with: event.message) as? [String: Any]
            events.append((method: event.method, params: object?["params"] as? [String: Any], sessionId: event.session))
        }
        return events
    }

    /// Closes the browser: `Browser.close` (up to 2 s for it to exit), then SIGTERM and SIGKILL
    /// if it is still there; then the pipes. Later calls return at once.
    public func close() {
        let first = closed.withLock { done -> Bool in
            let wasDone = done
            done = true
            return !wasDone
        }
        guard first else { return }
        let deadline = ContinuousClock.now + .seconds(2)
        if connection.isOpen, let bytes = try? Connection.frame(["id": connection.nextID(), "method": "Browser.close"]),
           connection.transmit(bytes, deadline: deadline) == nil {
            while process.isRunning && ContinuousClock.now < deadline { usleep(10_000) }
        }
        process.stop(grace: .seconds(2))
        connection.stopReading()
        reader.join()
        connection.closeDescriptors()
    }

    /// The console of the page of `session`, as ``Page/console`` gives it.
    func consoleLines(session: String) -> [String] {
        var lines: [String] = []
        for event in connection.events() where event.session == session {
            guard event.method == "Runtime.consoleAPICalled" || event.method == "Runtime.exceptionThrown",
                  let object = try? JSONSerialization.jsonObject(with: event.message) as? [String: Any],
                  let params = object["params"] as? [String: Any] else { continue }
            if event.method == "Runtime.consoleAPICalled" {
                let kind = params["type"] as? String ?? "log"
                let arguments = (params["args"] as? [[String: Any]] ?? []).map { DevTools.text(of: $0) }
                lines.append("\(kind): \(arguments.joined(separator: " "))")
            } else {
                let details = params["exceptionDetails"] as? [String: Any] ?? [:]
                lines.append("exception: \(DevTools.describe(exception: details))")
            }
        }
        return lines
    }
}

/// This process's ends of the two pipes, and what came through them: the replies awaited,
/// the events kept. The reader thread and every sender share it; the browser object does
/// not, so the reader never keeps the browser alive.
final class Connection: Sendable {
    struct Event: Sendable {
        let method: String
        let session: String?
        /// The whole message, its params decoded when read (JSON objects are not Sendable).
        let message: Data
    }

    private struct State {
        var nextID = 1
        /// Commands waiting for their reply, by id; whoever takes one out resumes it.
        var pending: [Int: CheckedContinuation<Data, any Error>] = [:]
        var events: [Event] = []
        /// Why no more replies will come, once the pipe has ended.
        var ended: String?
        /// Set by ``stopReading()``: the reader ends at its next poll.
        var stopping = false
    }

    let log: String
    private let replies: Int32
    /// The commands' write end, -1 once closed; held while a whole message is written, so
    /// that two commands' bytes never interleave.
    private let commands: Locked<Int32>
    private let state = Locked(State())

    init(commands: Int32, replies: Int32, log: String) {
        // Never blocking: a write that cannot finish gives up at its deadline (see writeAll).
        _ = fcntl(commands, F_SETFL, fcntl(commands, F_GETFL) | O_NONBLOCK)
        self.commands = Locked(commands)
        self.replies = replies
        self.log = log
    }

    /// Two pipes, every end close-on-exec and numbered 10 or above: no end is one of the
    /// numbers the child's copies go to (3 and 4), which the child's dup2 calls would overwrite.
    static func pipes() throws -> (commands: (read: Int32, write: Int32), replies: (read: Int32, write: Int32)) {
        var made: [Int32] = []
        for _ in 0..<2 {
            var ends: [Int32] = [-1, -1]
            guard pipe(&ends) == 0 else {
                let reason = String(cString: strerror(errno))
                closeAll(made)
                throw TestFailure("pipe failed: \(reason)")
            }
            for end in ends {
                let moved = fcntl(end, F_DUPFD, 10)
                if moved >= 0 { made.append(moved) }
            }
            closeAll(ends)
            guard made.count % 2 == 0 else {
                closeAll(made)
                throw TestFailure("fcntl(F_DUPFD) failed")
            }
        }
        guard made.count == 4 else {
            closeAll(made)
            throw TestFailure("fcntl(F_DUPFD) failed")
        }
        for end in made { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        return (commands: (read: made[0], write: made[1]), replies: (read: made[2], write: made[3]))
    }

    static func closeAll(_ descriptors: [Int32]) {
        for descriptor in descriptors where descriptor >= 0 { close(descriptor) }
    }

    /// `object` as a message: its JSON and the NUL that ends it.
    static func frame(_ object: [String: Any]) throws -> [UInt8] {
        guard JSONSerialization.isValidJSONObject(object) else { throw TestFailure("not a JSON object: \(object)") }
        let json = try JSONSerialization.data(withJSONObject: object)
        return Array(json) + [0]
    }

    func nextID() -> Int {
        state.withLock { state -> Int in
            let id = state.nextID
            state.nextID += 1
            return id
        }
    }

    var isOpen: Bool { state.withLock { $0.ended == nil } }

    func events() -> [Event] { state.withLock { $0.events } }

    /// Makes `continuation` wait for the reply to `id`; or, once the pipe has ended, says why
    /// (and the caller resumes it).
    func register(_ id: Int, _ continuation: CheckedContinuation<Data, any Error>) -> String? {
        state.withLock { state -> String? in
            if let ended = state.ended { return ended }
            state.pending[id] = continuation
            return nil
        }
    }

    /// Resumes the command `id` with `result`, if it still waits.
    func resolve(_ id: Int, _ result: Result<Data, TestFailure>) {
        let continuation = state.withLock { $0.pending.removeValue(forKey: id) }
        continuation?.resume(with: result)
    }

    /// Writes `bytes` whole, or says why not.
    func transmit(_ bytes: [UInt8], deadline: ContinuousClock.Instant) -> String? {
        commands.withLock { descriptor -> String? in
            guard descriptor >= 0 else { return "the DevTools pipe is closed" }
            return Connection.writeAll(bytes, to: descriptor, deadline: deadline)
        }
    }

    /// Writes all of `bytes` to the non-blocking `descriptor`, waiting for room until `deadline`.
    ///
    /// SIGPIPE is blocked on this thread meanwhile, and one the write raised is taken before
    /// the mask is restored: once Chromium has gone, a write to its pipe would otherwise kill
    /// the test process instead of failing with EPIPE.
    private static func writeAll(_ bytes: [UInt8], to descriptor: Int32, deadline: ContinuousClock.Instant) -> String? {
        var pipeSignal = sigset_t(), previous = sigset_t()
        sigemptyset(&pipeSignal)
        sigaddset(&pipeSignal, SIGPIPE)
        pthread_sigmask(SIG_BLOCK, &pipeSignal, &previous)
        defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
        var written = 0
        while written < bytes.count {
            let count = bytes.withUnsafeBytes { raw in write(descriptor, raw.baseAddress! + written, raw.count - written) }
            if count > 0 {
                written += count
                continue
            }
            let error = errno
            if count < 0 && error == EINTR { continue }
            if count < 0 && error == EAGAIN {
                let left = ContinuousClock.now.duration(to: deadline)
                guard left > .zero else { return "chromium took no command for too long (its pipe stayed full)" }
                let (seconds, attoseconds) = left.components
                var ready = pollfd(fd: descriptor, events: Int16(POLLOUT), revents: 0)
                _ = poll(&ready, 1, Int32(clamping: seconds * 1000 + attoseconds / 1_000_000_000_000_000 + 1))
                continue
            }
            if count < 0 && error == EPIPE {
                var pending = sigset_t()
                sigpending(&pending)
                if sigismember(&pending, SIGPIPE) == 1 {
                    var now = timespec(tv_sec: 0, tv_nsec: 0)
                    _ = sigtimedwait(&pipeSignal, nil, &now)
                }
                return "chromium closed the DevTools pipe"
            }
            return "writing to the DevTools pipe failed: \(String(cString: strerror(error)))"
        }
        return nil
    }

    /// The reader thread: splits the replies at their NULs until the pipe ends (or
    /// ``stopReading()``), then fails every command still waiting.
    func readReplies() {
        var unread: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        var why = "chromium closed the DevTools pipe"
        while true {
            // A timeout, so that a stop is seen even should some process still hold a copy of
            // the replies' write end.
            var ready = pollfd(fd: replies, events: Int16(POLLIN), revents: 0)
            let polled = poll(&ready, 1, 100)
            let pollError = errno
            if state.withLock({ $0.stopping }) {
                why = "the browser was closed"
                break
            }
            if polled < 0 {
                if pollError == EINTR { continue }
                why = "polling the DevTools pipe failed (\(String(cString: strerror(pollError))))"
                break
            }
            if polled == 0 { continue }
            let count = chunk.withUnsafeMutableBytes { raw in read(replies, raw.baseAddress, raw.count) }
            let readError = errno
            if count < 0 {
                if readError == EINTR || readError == EAGAIN { continue }
                why = "reading the DevTools pipe failed (\(String(cString: strerror(readError))))"
                break
            }
            if count == 0 { break }
            var searched = unread.count
            unread.append(contentsOf: chunk[0..<count])
            var start = 0
            while let end = unread[searched...].firstIndex(of: 0) {
                take(Data(unread[start..<end]))
                start = end + 1
                searched = start
            }
            if start > 0 { unread.removeSubrange(0..<start) }
        }
        fail("\(why); its log ends:\n\(logTail())")
    }

    /// Ends the reader within its poll's 100 ms.
    func stopReading() { state.withLock { $0.stopping = true } }

    /// Closes this process's ends. Only once the reader has ended.
    func closeDescriptors() {
        commands.withLock { descriptor in
            if descriptor >= 0 { close(descriptor) }
            descriptor = -1
        }
        close(replies)
    }

    /// One message: a reply resumes its command, an event is kept.
    private func take(_ message: Data) {
        guard let object = try? JSONSerialization.jsonObject(with: message) as? [String: Any] else { return }
        if let id = object["id"] as? Int {
            resolve(id, .success(message))
        } else if let method = object["method"] as? String {
            let event = Event(method: method, session: object["sessionId"] as? String, message: message)
            state.withLock { $0.events.append(event) }
        }
    }

    private func fail(_ reason: String) {
        let waiting = state.withLock { state -> [CheckedContinuation<Data, any Error>] in
            state.ended = reason
            let continuations = Array(state.pending.values)
            state.pending.removeAll()
            return continuations
        }
        for continuation in waiting { continuation.resume(throwing: TestFailure(reason)) }
    }

    /// The last 20 lines of Chromium's log.
    func logTail() -> String {
        guard let data = FileManager.default.contents(atPath: log) else { return "(no log at \(log))" }
        return String(decoding: data, as: UTF8.self).split(separator: "\n").suffix(20).joined(separator: "\n")
    }
}

/// Reading the protocol's values: RemoteObjects, exceptions, numbers.
enum DevTools {
    /// A console argument or evaluation result as the console would print it.
    static func text(of remote: [String: Any]) -> String {
        if let unserializable = remote["unserializableValue"] as? String { return unserializable }
        let kind = remote["type"] as? String ?? ""
        if kind == "string", let value = remote["value"] as? String { return value }
        if kind == "boolean", let value = remote["value"] as? Bool { return value ? "true" : "false" }
        if kind == "undefined" { return "undefined" }
        if let description = remote["description"] as? String { return description }
        if let value = remote["value"] {
            if value is NSNull { return "null" }
            if JSONSerialization.isValidJSONObject(value), let data = try? JSONSerialization.data(withJSONObject: value) {
                return String(decoding: data, as: UTF8.self)
            }
            return "\(value)"
        }
        return kind
    }

    /// An `ExceptionDetails`: its text ("Uncaught") with the exception's description (its
    /// message and stack).
    static func describe(exception details: [String: Any]) -> String {
        let summary = details["text"] as? String ?? "exception"
        guard let exception = details["exception"] as? [String: Any] else { return summary }
        return "\(summary): \(exception["description"] as? String ?? text(of: exception))"
    }

    static func number(_ value: Any?) -> Double? {
        if let number = value as? Double { return number }
        if let number = value as? Int { return Double(number) }
        if let number = value as? NSNumber { return number.doubleValue }
        return nil
    }

    /// `string` as a JavaScript string literal (JSON's quoting).
    static func literal(_ string: String) -> String {
        guard let data = try? JSONSerialization.data(withJSONObject: [string]) else { return "\"\"" }
        return String(String(decoding: data, as: UTF8.self).dropFirst().dropLast())
    }

    /// An expression as a failure quotes it: its first 200 characters.
    static func shortened(_ expression: String) -> String {
        let flat = expression.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.joined(separator: " ")
        return flat.count > 200 ? String(flat.prefix(200)) + "…" : flat
    }
}
