#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// Which phase × event pairs legs have handled in this process, when asked: how much of the
/// call's state machine a simulator sweep, or the state's own unit tests, reach
/// (`callnode-sim --coverage`, `scripts/leg-coverage`). Off unless ``start()`` is called or
/// `CALLNODE_LEG_COVERAGE` names a file (then each new pair is appended to it as a line, which
/// is how a test run that has no end hook hands its pairs over). A pair reads
/// `ringing × answering`; timers and requests name which (`connected × timerFired(keepAlive)`).
public enum LegCoverage {
    private static let pairs = PairCoverage(environment: "CALLNODE_LEG_COVERAGE")

    /// Starts recording (in memory) if it is not on.
    public static func start() { pairs.start() }

    /// The pairs handled since recording started.
    public static var visited: Set<String> { pairs.visited }

    static func record(_ phase: LegPhase, _ event: LegEvent) {
        pairs.record { "\(name(of: phase)) × \(name(of: event))" }
    }

    /// A phase's name without what it carries (`securing`, `ended`).
    public static func name(of phase: LegPhase) -> String { PairCoverage.caseName(phase) }

    /// An event's name without what it carries, but for which timer fired and which request
    /// came.
    public static func name(of event: LegEvent) -> String {
        switch event {
        case let .timerFired(timer): "timerFired(\(PairCoverage.caseName(timer)))"
        case let .request(request, _): "request(\(PairCoverage.caseName(request)))"
        default: PairCoverage.caseName(event)
        }
    }
}

/// A record of the state × input pairs a state machine has handled in this process, when asked
/// (``LegCoverage`` for the call's leg, `SIPDialogCoverage` for a SIP dialog). Off unless
/// ``start()`` is called or the environment variable it was made with names a file; then each
/// new pair is also appended to that file as a line.
public final class PairCoverage: Sendable {
    private struct Recorder {
        var pairs: Set<String> = []
        var file: UnsafeMutablePointer<FILE>?
    }

    private let recorder: Mutex<Recorder?>

    /// Records into the file `environment` names, if it names one.
    public init(environment: String) {
        recorder = Mutex(getenv(environment).map { Recorder(file: fopen($0, "a")) })
    }

    /// Starts recording (in memory) if it is not on.
    public func start() {
        recorder.withLock { if $0 == nil { $0 = Recorder() } }
    }

    /// The pairs handled since recording started.
    public var visited: Set<String> {
        recorder.withLock { $0?.pairs ?? [] }
    }

    /// Records the pair `pair` names (made only while recording is on).
    public func record(_ pair: () -> String) {
        recorder.withLock { recorder in
            guard recorder != nil else { return }
            let pair = pair()
            guard recorder!.pairs.insert(pair).inserted, let file = recorder!.file else { return }
            fputs(pair + "\n", file)
            fflush(file)
        }
    }

    /// A value's case name without what it carries (`securing`, `ended`).
    public static func caseName(_ value: Any) -> String {
        let text = String(describing: value)
        return String(text.prefix { $0 != "(" })
    }
}
