@_spi(Testing) import RTP
import Testing

/// The jitter buffer's delay target takes the 95th percentile of recent transits for every
/// packet, by selection in place rather than a sort: it must pick what a sort would.
@Suite struct SelectionTests {
    @Test func selectionPicksWhatSortingWouldPutThere() {
        var generator = SplitMix(seed: 7)
        for count in [1, 2, 3, 5, 8, 50, 100, 499, 500] {
            for trial in 0..<20 {
                // Few distinct values in some trials: duplicates and runs of equal values.
                let distinct = trial % 3 == 0 ? 4 : 1_000_000
                let values = (0..<count).map { _ in Double(generator.next() % UInt64(distinct)) / 1000 }
                let sorted = values.sorted()
                for k in Set([0, count / 2, min(count - 1, Int(Double(count) * 0.95)), count - 1]) {
                    var scratch = values + [Double](repeating: -1, count: 3)  // beyond `count`: left alone
                    #expect(JitterBuffer.select(k, of: count, in: &scratch) == sorted[k], "count \(count), k \(k)")
                    #expect(scratch.suffix(3) == [-1, -1, -1])
                    #expect(scratch.prefix(count).sorted() == sorted)
                }
            }
        }
    }

    struct SplitMix {
        var state: UInt64
        init(seed: UInt64) { state = seed }
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }
}
