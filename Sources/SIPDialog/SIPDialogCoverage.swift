import CallCore

/// Which phase × input pairs SIP dialogs have handled in this process, when asked: how much of
/// the dialog's decisions a simulator sweep, or the value's own unit tests, reach
/// (`callnode-sim --coverage`, `scripts/leg-coverage`). Off unless ``start()`` is called or
/// `CALLNODE_SIP_COVERAGE` names a file. A pair reads `confirmed × invite`; the call's signals
/// name which (`confirmed × call(offer)`), responses their class (`early × response(1xx)`,
/// `confirmed × response(491)`), timers which.
public enum SIPDialogCoverage {
    private static let pairs = PairCoverage(environment: "CALLNODE_SIP_COVERAGE")

    /// Starts recording (in memory) if it is not on.
    public static func start() { pairs.start() }

    /// The pairs handled since recording started.
    public static var visited: Set<String> { pairs.visited }

    static func record(_ phase: SIPDialogState.Phase, _ input: SIPDialogInput) {
        pairs.record { "\(PairCoverage.caseName(phase)) × \(name(of: input))" }
    }

    /// An input's name: its case, the call's signal, a response's class (491 apart: glare), a
    /// timer.
    public static func name(of input: SIPDialogInput) -> String {
        func statusClass(_ status: Int) -> String { status == 491 || status == 481 ? "\(status)" : "\(status / 100)xx" }
        switch input {
        case let .call(signal): return "call(\(PairCoverage.caseName(signal)))"
        case let .response(status, _, _): return "response(\(statusClass(status)))"
        case let .probeAnswered(status, _, local): return "probeAnswered(\(statusClass(status))\(local ? ", local" : ""))"
        case let .timerFired(timer): return "timerFired(\(PairCoverage.caseName(timer)))"
        default: return PairCoverage.caseName(input)
        }
    }
}
