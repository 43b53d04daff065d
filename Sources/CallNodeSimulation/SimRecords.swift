import CallCore
import Foundation

// What a run records: its failures and outcome, the calls as it saw them, and the trace's
// time stamps and scrubbing (the same trace every run).

/// A broken rule: which invariant, what happened, and when.
public struct SimFailure: Sendable, Equatable, CustomStringConvertible {
    /// The invariant's name (see ``Invariant``).
    public let invariant: String
    public let message: String
    public let frame: Int

    public var description: String { "[\(SimTrace.time(frame))] INVARIANT \(invariant): \(message)" }
}

/// What one run did: its trace, and the first rule it broke (if any).
public struct SimOutcome: Sendable {
    public let plan: SimPlan
    public let trace: [String]
    public let failure: SimFailure?
    /// Frames simulated, calls placed, jobs the scheduler ran.
    public let frames: Int
    public let calls: Int
    public let jobs: Int
    /// Jobs that other threads enqueued while the seed chose the order: where they landed may
    /// differ on another run (zero in a run that replays exactly).
    public let foreignJobs: Int
}

/// The trace's notation.
enum SimTrace {
    static func time(_ frame: Int) -> String {
        let milliseconds = frame * 20
        return "t+\(milliseconds / 1000).\(String(format: "%03d", milliseconds % 1000))s"
    }
}

/// One call as the simulation saw it.
struct SimCall {
    struct Side {
        /// The node's own ID for the call.
        let uuid: UUID
        var connectedAt: Int?
        var ended: CallEndReason?
        var endedAt: Int?
        var endDetail: String?
        var endCount = 0
        var probe: ToneProbe?
        var probeRead = 0
        /// The node crashed during the call: this side never ends as such.
        var crashed = false
        /// Frames heard in the last step.
        var pending: [UInt8] = []
        /// Since when the peer's microphone may not be heard here (muted or held, either side).
        var silencedSince: Int?
        /// Since when the call should carry the peer's microphone here.
        var eligibleSince: Int?
        /// The last frame the peer's tone was heard here.
        var lastHeardPeer: Int?
        /// When this side was told its call's transfer succeeded (the call ends here then).
        var transferredAt: Int?
    }

    let uuid: UUID
    let number: Int
    var caller: Int?
    var callee: Int?
    var intendedCallee: Int?
    var sides: [Int: Side] = [:]
    var reasonsChecked = false

    func peer(of node: Int) -> Int? {
        if node == caller { return callee ?? intendedCallee }
        if node == callee { return caller }
        return nil
    }
}

/// Replaces identifiers that differ from run to run (call UUIDs, fingerprints) so that a trace
/// is the same every time.
func scrub(_ line: String) -> String {
    var result = line
    if result.contains("-") {
        result = result.replacingOccurrences(of: "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}", with: "<id>",
                                             options: .regularExpression)
    }
    if result.contains(":") {
        result = result.replacingOccurrences(of: "([0-9A-Fa-f]{2}:){5,}[0-9A-Fa-f]{2}", with: "<fingerprint>", options: .regularExpression)
    }
    result = result.replacingOccurrences(of: "[0-9a-fA-F]{32,}", with: "<fingerprint>", options: .regularExpression)
    return result
}
