/// The transits (arrival − media time) of a stream's recent packets, with their sequence
/// numbers: what the jitter buffer's delay is set by. A ring of the last `length` packets.
struct TransitHistory: Sendable {
    private var transits: [Double]
    /// The sequence number of each packet in `transits`, slot for slot.
    private var sequences: [Int64]
    private var count = 0
    private var next = 0
    private var scratch: [Double]
    /// The least transit in the history, kept as packets come (read every tick): found again
    /// by a scan only when the packet leaving the ring was the least.
    private var least = Double.infinity

    init(length: Int) {
        transits = [Double](repeating: 0, count: max(1, length))
        sequences = [Int64](repeating: 0, count: transits.count)
        scratch = transits
    }

    mutating func record(_ transit: Double, sequence: Int64) {
        let leavingWasLeast = count == transits.count && transits[next] <= least
        transits[next] = transit
        sequences[next] = sequence
        next = (next + 1) % transits.count
        count = min(count + 1, transits.count)
        if leavingWasLeast {
            least = .infinity
            for i in 0..<count where transits[i] < least { least = transits[i] }
        } else {
            least = min(least, transit)
        }
    }

    /// Forgets the history (playout moved to a new place on the stream) and starts it again
    /// with one packet's transit.
    mutating func restart(with transit: Double, sequence: Int64) {
        count = 0
        next = 0
        least = .infinity
        record(transit, sequence: sequence)
    }

    /// The earliest transit in the history: the path's own delay, as far as it shows.
    func minimum() -> Double? {
        count > 0 ? least : nil
    }

    /// The delay variation (over the minimum, in seconds) that the target covers — the 95th
    /// percentile, what a full history's latest four packets in a hundred leave out — and the
    /// largest, the latest packet's in the history. `nil` while the history is empty.
    ///
    /// While the history fills (the call's first two seconds), its 95th percentile is nearly
    /// its latest packet. Both hosts are busy as a call starts, and a sender's host held up for
    /// a frame period or more sends two or more packets late in a row (the one due in the stall
    /// and the next, sent together): taken for the target, that would grow the delay in the
    /// first words and give it back two seconds later, both moves heard. So when the packets
    /// above what a full history would leave out are one such run, they are left out as a full
    /// history would. A lone late packet (reordering) and late packets spread over the history
    /// (a jittery path) are not: for them the percentile stands.
    mutating func variation() -> (covered: Double, largest: Double)? {
        guard count > 0 else { return nil }
        for i in 0..<count { scratch[i] = transits[i] - least }
        let k = min(count - 1, Int(Double(count) * 0.95))
        let covered = JitterBuffer.select(k, of: count, in: &scratch)
        // The selection leaves the values above the k-th after it: the largest is among them.
        var largest = covered
        for i in (k + 1)..<count where scratch[i] > largest { largest = scratch[i] }
        if count < transits.count, let stall = coveredLeavingOutOneStall(least: least) { return (stall, largest) }
        return (covered, largest)
    }

    /// With a history still filling: when the packets above what a full history would leave
    /// out are two or more consecutive sequence numbers and nothing else, the variation of the
    /// latest packet not in that run; otherwise `nil`.
    private mutating func coveredLeavingOutOneStall(least: Double) -> Double? {
        let leftOut = transits.count - 1 - min(transits.count - 1, Int(Double(transits.count) * 0.95))
        guard leftOut > 0, count > 1 else { return nil }
        for i in 0..<count { scratch[i] = transits[i] - least }
        let kept = JitterBuffer.select(max(0, count - 1 - leftOut), of: count, in: &scratch)
        // Transits are differences of seconds: equal ones differ in their last bits. Only a
        // packet later by more than a millisecond is above.
        var above = 0, first = Int64.max, last = Int64.min
        for i in 0..<count where transits[i] - least > kept + 0.001 {
            above += 1
            first = min(first, sequences[i])
            last = max(last, sequences[i])
        }
        return above > 1 && last - first == Int64(above - 1) ? kept : nil
    }
}
