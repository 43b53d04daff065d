import Clocks

/// What a receiver knows about one RTP source: loss (RFC 3550 A.3) and interarrival jitter
/// (A.8), and the timing of the last sender report, from which it builds report blocks.
///
/// A plain value: the media actor owns it and feeds it every packet with its arrival time.
public struct ReceptionStatistics: Sendable {
    /// The RTP clock rate (48 000 for Opus).
    public let clockRate: Int
    public private(set) var ssrc: UInt32?
    public private(set) var packetsReceived: Int = 0
    public private(set) var duplicates: Int = 0

    private var baseSequence: Int64 = 0
    private var highestSequence: Int64 = 0
    private var receivedPrior: Int = 0
    private var expectedPrior: Int64 = 0
    /// The last 1024 extended sequence numbers by slot, for duplicate detection without
    /// allocating per packet.
    private var seen = [Int64](repeating: -1, count: 1024)
    /// Relative transit time of the previous packet, in RTP units; `nil` before the first.
    private var lastTransit: Double?
    /// RFC 3550 A.8 estimator, in RTP timestamp units (not rounded).
    public private(set) var jitter: Double = 0
    /// Packets missing in runs since the last ``takeLossRuns()``, and the runs.
    private var runLost = 0
    private var runs = 0
    private var lastSenderReportNTP: UInt64?
    private var lastSenderReportArrival: Duration?

    public init(clockRate: Int) {
        self.clockRate = clockRate
    }

    /// Records one received packet.
    ///
    /// - Parameters:
    ///   - arrival: When it arrived, on the receiver's clock (any fixed origin).
    /// - Returns: `false` for a duplicate (already counted), `true` otherwise.
    @discardableResult
    public mutating func record(sequence: UInt16, timestamp: UInt32, ssrc: UInt32, arrival: Duration,
                                measuresJitter: Bool = true) -> Bool {
        if self.ssrc != ssrc {
            // A new source (or the first): start over.
            self = ReceptionStatistics(clockRate: clockRate)
            self.ssrc = ssrc
            baseSequence = Int64(sequence)
            highestSequence = Int64(sequence)
        }
        let extended = SequenceNumber.extend(sequence, near: highestSequence)
        let slot = Int(extended & 1023)
        if seen[slot] == extended {
            duplicates += 1
            return false
        }
        seen[slot] = extended
        packetsReceived += 1
        if extended > highestSequence + 1 && packetsReceived > 1 {
            // The packets between were lost (or come later, reordered): one run.
            runLost += Int(min(extended - highestSequence - 1, 1_000))
            runs += 1
        }
        if extended > highestSequence { highestSequence = extended }
        if extended < baseSequence { baseSequence = extended }

        // Packets whose timestamp is not a sampling instant (RFC 4733 events repeat the event's
        // start) count for loss but not for jitter.
        guard measuresJitter else { return true }
        // A.8: transit = arrival (in RTP units) − timestamp; J += (|D| − J) / 16.
        let arrivalUnits = arrival.seconds * Double(clockRate)
        let transit = arrivalUnits - Double(timestamp)
        if let last = lastTransit {
            var d = transit - last
            // Timestamps wrap at 2^32: bring the difference back near zero.
            let wrap = 4_294_967_296.0
            if d > wrap / 2 { d -= wrap } else if d < -wrap / 2 { d += wrap }
            jitter += (abs(d) - jitter) / 16
        }
        lastTransit = transit
        return true
    }

    /// The packets found missing since the last call, and in how many runs (gaps in the
    /// sequence numbers as packets arrive); starts counting afresh.
    public mutating func takeLossRuns() -> (lost: Int, runs: Int) {
        defer { runLost = 0; runs = 0 }
        return (runLost, runs)
    }

    /// The extended highest sequence number received.
    public var extendedHighestSequence: UInt32 { UInt32(truncatingIfNeeded: highestSequence) }

    /// Packets expected from the first to the highest sequence number.
    public var expected: Int64 { packetsReceived == 0 ? 0 : highestSequence - baseSequence + 1 }

    /// Packets lost since the start (A.3; can be negative with duplicates from the network).
    public var cumulativeLost: Int64 { expected - Int64(packetsReceived) }

    /// Jitter as a duration.
    public var jitterDuration: Duration { .microseconds(Int64(jitter * 1_000_000 / Double(clockRate))) }

    /// Remembers a sender report from this source (for LSR/DLSR in the next report block).
    public mutating func recordSenderReport(ntpTimestamp: UInt64, arrival: Duration) {
        lastSenderReportNTP = ntpTimestamp
        lastSenderReportArrival = arrival
    }

    /// Packets expected and lost since the last report block (what the next one will say).
    public var sinceLastReport: (expected: Int64, lost: Int64) {
        guard packetsReceived > 0 else { return (0, 0) }
        let expectedInterval = expected - expectedPrior
        return (expectedInterval, max(0, expectedInterval - Int64(packetsReceived - receivedPrior)))
    }

    /// A report block for now, and resets the per-interval counters behind the fraction lost.
    public mutating func makeReportBlock(now: Duration) -> ReportBlock? {
        guard let ssrc, packetsReceived > 0 else { return nil }
        let expectedInterval = expected - expectedPrior
        let receivedInterval = Int64(packetsReceived - receivedPrior)
        expectedPrior = expected
        receivedPrior = packetsReceived
        let lostInterval = expectedInterval - receivedInterval
        let fraction: UInt8 = (expectedInterval == 0 || lostInterval <= 0)
            ? 0 : UInt8(min(255, (lostInterval << 8) / expectedInterval))
        var lsr: UInt32 = 0, dlsr: UInt32 = 0
        if let ntp = lastSenderReportNTP, let at = lastSenderReportArrival {
            lsr = NTPTime.middle(ntp)
            dlsr = NTPTime.short(now - at)
        }
        return ReportBlock(
            ssrc: ssrc, fractionLost: fraction,
            cumulativeLost: Int32(clamping: cumulativeLost),
            extendedHighestSequence: extendedHighestSequence,
            jitter: UInt32(min(jitter.rounded(), Double(UInt32.max))), lastSenderReport: lsr, delaySinceLastSenderReport: dlsr)
    }
}

