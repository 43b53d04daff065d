import Calls
import Media

/// Builds a call's ``QualityTimeline`` from its media's statistics (one a second,
/// ``MediaConfiguration/statisticsInterval``): each becomes a sample of what changed since the
/// one before. The call's leg keeps one and stores the timeline as the call ends.
struct QualityRecording: Sendable {
    private var first: Duration?
    private var previous: MediaStatistics?
    private(set) var timeline = QualityTimeline()

    /// Takes the media's figures at `now` on the node's clock; the first are the baseline.
    mutating func take(_ statistics: MediaStatistics, at now: Duration) {
        defer { previous = statistics }
        guard let first, let previous else {
            self.first = now
            return
        }
        // Whole seconds into the call, to the nearest: the figures come a second apart give or
        // take the media thread's lateness, and a second a hair short of its number truncated
        // would take the number before it, where the timeline merges it into that second.
        let at = Int(((now - first) / .seconds(1)).rounded())
        timeline.append(Self.sample(at: at, from: previous, to: statistics))
    }

    static func sample(at: Int, from previous: MediaStatistics, to current: MediaStatistics) -> QualityTimeline.Sample {
        QualityTimeline.Sample(
            at: at, lost: max(0, current.packetsLost - previous.packetsLost),
            concealed: max(0, current.jitterBuffer.concealed - previous.jitterBuffer.concealed),
            jitterMs: milliseconds(current.jitter), rttMs: current.roundTripTime.map(milliseconds),
            sendLevel: current.sendLevel, receiveLevel: current.receiveLevel,
            sendKbps: current.sendBitrate / 1000, receiveKbps: current.receiveBitrate / 1000,
            redundancy: current.sendingRedundancy ? current.redundancyDepth : 0)
    }

    private static func milliseconds(_ duration: Duration) -> Double {
        ((Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15) * 10).rounded() / 10
    }
}
