#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `errno` as the calling thread has it now (outside ``SystemError``, whose own `errno` field
/// would shadow it).
private func currentErrno() -> Int32 { errno }

/// A system call that failed: which one, and the `errno` it left.
public struct SystemError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The call, as the caller named it (`recvfrom`, `open /proc/net/route`).
    public var function: String
    public var errno: Int32

    public init(function: String, errno: Int32) {
        self.function = function
        self.errno = errno
    }

    public var description: String { "\(function): \(String(cString: strerror(errno))) (errno \(errno))" }
}

/// What a system call on a non-blocking descriptor did.
public enum IOResult<Value: Sendable>: Sendable {
    /// It did its work and returned `Value`.
    case processed(Value)
    /// It would have blocked (`EAGAIN`, `EWOULDBLOCK`): nothing was done.
    case wouldBlock
}

/// Runs a system call that returns -1 and sets `errno` when it fails: the one funnel through
/// which this package reads `errno` (as swift-nio's `syscall(blocking:where:)`). An interrupted
/// call (`EINTR`) is made again.
/// - Throws: ``SystemError`` named `function`.
@discardableResult
public func syscall<T: FixedWidthInteger>(where function: @autoclosure () -> String, _ body: () -> T) throws(SystemError) -> T {
    while true {
        let result = body()
        if result != -1 { return result }
        let code = errno
        if code == EINTR { continue }
        throw SystemError(function: function(), errno: code)
    }
}

/// As ``syscall(where:_:)`` for a call on a non-blocking descriptor: a call that would block
/// returns ``IOResult/wouldBlock`` instead of throwing.
public func syscall<T: FixedWidthInteger & Sendable>(blocking: Bool, where function: @autoclosure () -> String,
                                                     _ body: () -> T) throws(SystemError) -> IOResult<T> {
    while true {
        let result = body()
        if result != -1 { return .processed(result) }
        let code = errno
        if code == EINTR { continue }
        if !blocking && (code == EAGAIN || code == EWOULDBLOCK) { return .wouldBlock }
        throw SystemError(function: function(), errno: code)
    }
}

extension SystemError {
    /// The error the last failed call left in `errno`, for calls that report failure otherwise
    /// than by -1 (`fopen`'s nil, a short `fwrite`, `fflush`'s EOF). Read it right after the call.
    public static func last(_ function: String) -> SystemError {
        SystemError(function: function, errno: currentErrno())
    }

    /// What went wrong, in the system's words (`No such file or directory`).
    public var reason: String { String(cString: strerror(errno)) }
}
