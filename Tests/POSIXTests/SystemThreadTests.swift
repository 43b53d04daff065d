import Foundation
import POSIX
import Synchronization
import Testing

@Suite struct SystemThreadTests {
    /// The name `top -H` and `/proc` show for the calling thread.
    static func currentName() -> String {
        ((try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)) ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
    }

    @Test func aThreadRunsItsBodyUnderItsNameAndJoinWaitsForIt() throws {
        let seen = Mutex<(name: String, onIt: Bool)?>(nil)
        let box = Mutex<SystemThread?>(nil)
        let thread = try SystemThread.start(name: "cn-test-thread") {
            Thread.sleep(forTimeInterval: 0.05)
            let onIt = box.withLock { $0?.isCurrent } ?? false
            seen.withLock { $0 = (Self.currentName(), onIt) }
        }
        box.withLock { $0 = thread }
        #expect(!thread.isCurrent)
        thread.join()
        thread.join()  // a second join returns at once
        let result = seen.withLock { $0 }
        #expect(result?.name == "cn-test-thread")
        #expect(result?.onIt == true)
    }

    @Test func aLongNameIsCutToWhatLinuxKeeps() async throws {
        let name = try await SystemThread.run(name: "callnode-a-very-long-thread-name") { Self.currentName() }
        #expect(name == "callnode-a-very")
    }

    @Test func runReturnsWhatTheBodyReturnsOffTheCallersThread() async throws {
        let callers = Self.currentName()
        let (value, name) = try await SystemThread.run(name: "cn-run") { (6 * 7, Self.currentName()) }
        #expect(value == 42)
        #expect(name == "cn-run" && name != callers)
    }

    @Test func aDetachedThreadRunsAndIsNeverJoined() async throws {
        let ran = await withCheckedContinuation { (done: CheckedContinuation<Bool, Never>) in
            do {
                let thread = try SystemThread.start(name: "cn-detached", detached: true) { done.resume(returning: true) }
                thread.join()  // returns at once: nothing to join
            } catch {
                done.resume(returning: false)
            }
        }
        #expect(ran)
    }
}

@Suite struct SyscallTests {
    @Test func aFailedCallThrowsItsNameAndErrno() {
        #expect(throws: SystemError(function: "close", errno: EBADF)) { try syscall(where: "close") { close(-1) } }
        let error = SystemError(function: "open /nowhere", errno: ENOENT)
        #expect(error.description == "open /nowhere: No such file or directory (errno 2)")
        #expect(error.reason == "No such file or directory")
    }

    @Test func aCallThatSucceedsReturnsItsValue() throws {
        var ends: [Int32] = [0, 0]
        let status = try syscall(where: "pipe") { pipe(&ends) }
        defer { ends.forEach { _ = close($0) } }
        #expect(status == 0)
        var byte: UInt8 = 7
        #expect(try syscall(where: "write") { write(ends[1], &byte, 1) } == 1)
    }

    @Test func aNonBlockingCallThatWouldBlockSaysSoInsteadOfThrowing() throws {
        var ends: [Int32] = [0, 0]
        try syscall(where: "pipe") { pipe(&ends) }
        defer { ends.forEach { _ = close($0) } }
        _ = fcntl(ends[0], F_SETFL, O_NONBLOCK)
        var byte: UInt8 = 0
        guard case .wouldBlock = try syscall(blocking: false, where: "read", { read(ends[0], &byte, 1) }) else {
            Issue.record("an empty pipe's read did not say it would block")
            return
        }
        var one: UInt8 = 9
        _ = write(ends[1], &one, 1)
        guard case .processed(1) = try syscall(blocking: false, where: "read", { read(ends[0], &byte, 1) }) else {
            Issue.record("the byte written was not read")
            return
        }
        #expect(byte == 9)
        // A blocking caller gets the error itself.
        #expect(throws: SystemError(function: "read", errno: EAGAIN)) {
            _ = try syscall(blocking: true, where: "read") { read(ends[0], &byte, 1) }
        }
    }

    @Test func theLastErrorOfACallThatFailsWithoutMinusOneIsRead() {
        let file = fopen("/nonexistent-directory/file", "rb")
        let error = SystemError.last("fopen")
        #expect(file == nil)
        #expect(error == SystemError(function: "fopen", errno: ENOENT))
    }
}
