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
    private struct Recorder {
        var pairs: Set<String> = []
        var file: UnsafeMutablePointer<FILE>?
    }

    private static let recorder = Mutex<Recorder?>(fromEnvironment())

    private static func fromEnvironment() -> Recorder? {
        guard let path = getenv("CALLNODE_LEG_COVERAGE") else { return nil }
        return Recorder(file: fopen(path, "a"))
    }

    /// Starts recording (in memory) if it is not on.
    public static func start() {
        recorder.withLock { if $0 == nil { $0 = Recorder() } }
    }

    /// The pairs handled since recording started.
    public static var visited: Set<String> {
        recorder.withLock { $0?.pairs ?? [] }
    }

    static func record(_ phase: LegPhase, _ event: LegEvent) {
        recorder.withLock { recorder in
            guard recorder != nil else { return }
            let pair = "\(name(of: phase)) × \(name(of: event))"
            guard recorder!.pairs.insert(pair).inserted, let file = recorder!.file else { return }
            fputs(pair + "\n", file)
            fflush(file)
        }
    }

    /// A phase's name without what it carries (`securing`, `ended`).
    public static func name(of phase: LegPhase) -> String { caseName(phase) }

    /// An event's name without what it carries, but for which timer fired and which request
    /// came.
    public static func name(of event: LegEvent) -> String {
        switch event {
        case let .timerFired(timer): "timerFired(\(caseName(timer)))"
        case let .request(request, _): "request(\(caseName(request)))"
        default: caseName(event)
        }
    }

    private static func caseName(_ value: Any) -> String {
        let text = String(describing: value)
        return String(text.prefix { $0 != "(" })
    }
}
