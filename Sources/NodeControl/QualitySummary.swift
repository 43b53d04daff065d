import Calls
import Foundation

/// A call's quality over time (``QualityTimeline``) in a few lines for a person: what was lost
/// and concealed, its worst moments and when, jitter and round trip at their highest, the
/// bitrates and levels. `callnode recents show` prints it.
public enum QualitySummary {
    public static func lines(_ timeline: QualityTimeline, worst count: Int = 3) -> [String] {
        let samples = timeline.samples
        guard let last = samples.last else { return ["no quality was kept for this call (it had no media)"] }
        let seconds = last.at + timeline.step
        let lost = samples.map(\.lost).reduce(0, +), concealed = samples.map(\.concealed).reduce(0, +)
        let every = timeline.step == 1 ? "a sample a second" : "a sample every \(timeline.step) s"
        var lines = ["quality over \(clock(seconds)) (\(every)): lost \(counted(lost, "packet")), concealed \(counted(concealed, "frame"))"]
        let worst = timeline.worst(count)
        lines.append(worst.isEmpty ? "  nothing lost or concealed"
                     : "  worst: " + worst.map { "\(clock($0.at)) lost \($0.lost), concealed \($0.concealed)" }.joined(separator: "; "))
        if let jitter = samples.max(by: { $0.jitterMs < $1.jitterMs }) {
            let rtt = samples.compactMap(\.rttMs).max().map { String(format: "round trip up to %.1f ms", $0) } ?? "round trip not measured"
            lines.append(String(format: "  jitter up to %.1f ms (%@); %@", jitter.jitterMs, clock(jitter.at), rtt))
        }
        let sent = samples.map(\.sendKbps), received = samples.map(\.receiveKbps)
        let redundancy = samples.map(\.redundancy).max() ?? 0
        lines.append("  sent \(range(sent)) kbit/s" + (redundancy > 0 ? " (up to \(redundancy) \(redundancy == 1 ? "copy" : "copies") a packet)" : "")
                     + ", received \(range(received)) kbit/s")
        lines.append(String(format: "  loudest sent %.0f dBFS, heard %.0f dBFS",
                            samples.map(\.sendLevel).max() ?? -100, samples.map(\.receiveLevel).max() ?? -100))
        return lines
    }

    private static func counted(_ count: Int, _ noun: String) -> String { "\(count) \(noun)\(count == 1 ? "" : "s")" }

    /// `m:ss` into the call.
    static func clock(_ seconds: Int) -> String { String(format: "%d:%02d", seconds / 60, seconds % 60) }

    private static func range(_ values: [Int]) -> String {
        guard let low = values.min(), let high = values.max() else { return "-" }
        return low == high ? "\(low)" : "\(low)–\(high)"
    }
}
