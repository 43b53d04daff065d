import RTP
import Testing

/// The jitter buffer's counters under random and bursty loss: every lost frame is counted once,
/// as rebuilt from a redundant copy, rebuilt from FEC, or concealed; FEC is credited only when
/// the next packet carries it; frames the sender never sent (DTMF) are not loss.
@Suite struct LossAccountingTests {
    /// A loss model: Gilbert–Elliott with every packet lost in the bad state and none in the
    /// good one (random loss is the case of bursts one packet long on average).
    struct LossModel: CustomStringConvertible {
        var name: String
        var average: Double
        var meanBurst: Double

        var description: String { name }

        /// Which of `count` packets are lost, from a seeded generator.
        func losses(count: Int, seed: UInt64) -> Set<Int> {
            var rng = seed | 1
            func uniform() -> Double {
                rng ^= rng >> 12
                rng ^= rng << 25
                rng ^= rng >> 27
                return Double((rng &* 2_685_821_657_736_338_717) >> 11) / Double(1 << 53)
            }
            guard average > 0 else { return [] }
            let leave = 1 / meanBurst                         // bad → good
            let enter = leave * average / (1 - average)       // good → bad
            var bad = false
            var lost: Set<Int> = []
            for i in 0..<count {
                bad = bad ? uniform() >= leave : uniform() < enter
                if meanBurst <= 1 { bad = uniform() < average }
                if bad { lost.insert(i) }
            }
            return lost
        }
    }

    static let models = [
        LossModel(name: "random 10 %", average: 0.10, meanBurst: 1),
        LossModel(name: "random 30 %", average: 0.30, meanBurst: 1),
        LossModel(name: "random 50 %", average: 0.50, meanBurst: 1),
        LossModel(name: "bursty 10 %, bursts of 3", average: 0.10, meanBurst: 3),
        LossModel(name: "bursty 20 %, bursts of 5", average: 0.20, meanBurst: 5),
    ]

    /// Plays `count` frames of a paced stream (30 ms of network delay, no jitter) in which the
    /// packets in `lost` never arrive and every packet carries copies of the `depth` frames
    /// before it. Returns the buffer and the indices of the frames played from their own packet.
    static func play(count: Int, lost: Set<Int>, depth: Int, fec: @escaping @Sendable ([UInt8]) -> Bool,
                     nonAudio: Set<Int> = []) -> (buffer: JitterBuffer, firstPlayed: Int?, lastPlayed: Int?) {
        var buffer = JitterBuffer()
        buffer.carriesFEC = fec
        buffer.redundancyDepth = depth
        var firstPlayed: Int?, lastPlayed: Int?
        for tick in 0..<(count + 3) {
            let now = Duration.milliseconds(20 * tick + 15)
            let i = tick - 2  // the packet sent at 20 i ms arrives 30 ms later, before this tick
            if i >= 0 && i < count && !lost.contains(i) {
                let sequence = UInt16(truncatingIfNeeded: 500 + i), timestamp = UInt32(90_000 + 960 * i)
                if nonAudio.contains(i) {
                    buffer.noteNonAudio(sequence: sequence)
                } else {
                    buffer.insert(sequence: sequence, timestamp: timestamp, payload: [UInt8(i & 0xFF), UInt8(i >> 8)],
                                  arrival: .milliseconds(20 * i + 30))
                    for back in 1...max(1, depth) where depth > 0 && i - back >= 0 && !nonAudio.contains(i - back) {
                        buffer.insertRedundant(sequence: sequence &- UInt16(back), timestamp: timestamp &- UInt32(960 * back),
                                               payload: [UInt8((i - back) & 0xFF), UInt8((i - back) >> 8)],
                                               arrival: .milliseconds(20 * i + 30))
                    }
                }
            }
            if case let .play(payload) = buffer.nextFrame(now: now) {
                let index = Int(payload[0]) | Int(payload[1]) << 8
                if firstPlayed == nil { firstPlayed = index }
                lastPlayed = index
            }
        }
        return (buffer, firstPlayed, lastPlayed)
    }

    @Test(arguments: models, [0, 1, 3])
    func everyLostFrameIsCountedOnceAsRebuiltOrConcealed(model: LossModel, depth: Int) {
        let count = 3_000
        let lost = model.losses(count: count, seed: 7)
        // Every other packet carries FEC (as an encoder does once it plans for loss).
        let (buffer, first, last) = Self.play(count: count, lost: lost, depth: depth, fec: { $0[0] % 2 == 0 })
        let s = buffer.statistics
        #expect(s.lost == s.redundancyRecovered + s.fecRecovered + s.concealed, "\(model), depth \(depth): \(s)")
        // Lost means the frames whose own packet never came, from the first played to the last
        // (give or take the few due after the last one played, when the run stops).
        let start = first ?? 0, end = last ?? count
        let missing = lost.filter { $0 >= start && $0 <= end }.count
        // (A frame dropped to shrink the delay is not played at all, so not counted either.)
        #expect(s.lost >= missing - s.shrunk && s.lost <= missing + 3, "\(model), depth \(depth): lost \(s.lost), missing \(missing), \(s)")
        #expect(s.silence == 0 && s.late == 0, "\(s)")
        if depth == 0 { #expect(s.redundancyRecovered == 0) }
    }

    @Test func aFrameWhoseNextPacketCarriesNoFECIsConcealedNotCreditedToFEC() {
        let lost = LossModel(name: "random 30 %", average: 0.3, meanBurst: 1).losses(count: 2_000, seed: 3)
        let (buffer, _, _) = Self.play(count: 2_000, lost: lost, depth: 0, fec: { _ in false })
        let s = buffer.statistics
        #expect(s.lost > 400)
        #expect(s.fecRecovered == 0, "\(s)")
        #expect(s.concealed == s.lost)
    }

    @Test func deeperRedundancyLeavesOnlyLongerRunsToConceal() {
        // With the delay held for the depth in use, each copy more leaves only longer runs of
        // losses to conceal (random 30 %: about 9 %, 2.7 % and 0.8 % of frames for depths 1–3).
        let lost = LossModel(name: "random 30 %", average: 0.3, meanBurst: 1).losses(count: 3_000, seed: 11)
        let concealed = [0, 1, 2, 3].map { depth in
            Self.play(count: 3_000, lost: lost, depth: depth, fec: { _ in false }).buffer.statistics.concealed
        }
        #expect(concealed[0] > concealed[1] && concealed[1] > concealed[2] && concealed[2] > concealed[3], "\(concealed)")
        #expect(Double(concealed[3]) < 0.03 * 3_000, "\(concealed)")
    }

    @Test func audioPausedForADTMFDigitIsSilenceNotLoss() {
        // Packets 100–109 are telephone events: they take sequence numbers and frame periods,
        // and no audio is sent meanwhile.
        let (buffer, _, _) = Self.play(count: 300, lost: [], depth: 1, fec: { _ in true }, nonAudio: Set(100..<110))
        let s = buffer.statistics
        #expect(s.lost == 0, "\(s)")
        #expect(s.silence >= 9, "\(s)")
    }
}
