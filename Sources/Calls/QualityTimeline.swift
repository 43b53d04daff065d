import Foundation

/// A call's quality over time, one sample a second (then, past ``limit`` samples, one every two
/// seconds, four…): what was lost, concealed, how jittery and far the path was, how loud each
/// way, the bitrates and the redundancy. Kept with the call in Recents, so that after a bad call
/// "what happened, and when" has an answer (`callnode recents show`).
public struct QualityTimeline: Sendable, Equatable, Codable {
    /// One stretch of the call (``QualityTimeline/step`` seconds long, from `at` seconds after
    /// the media started).
    public struct Sample: Sendable, Equatable, Codable {
        public var at: Int
        /// Packets lost (after retransmission of nothing: RTP's count) in this stretch.
        public var lost: Int
        /// Frames the receiver concealed in this stretch.
        public var concealed: Int
        /// Interarrival jitter (the stretch's highest), ms.
        public var jitterMs: Double
        /// Round-trip time from RTCP (the stretch's highest), ms; nil before the first report.
        public var rttMs: Double?
        /// Levels sent and heard, dBFS (the stretch's loudest).
        public var sendLevel: Double
        public var receiveLevel: Double
        /// Bitrates sent and received (the stretch's mean), kbit/s.
        public var sendKbps: Int
        public var receiveKbps: Int
        /// Redundant copies per packet sent (the stretch's deepest).
        public var redundancy: Int

        public init(at: Int, lost: Int, concealed: Int, jitterMs: Double, rttMs: Double?, sendLevel: Double, receiveLevel: Double,
                    sendKbps: Int, receiveKbps: Int, redundancy: Int) {
            self.at = at
            self.lost = lost
            self.concealed = concealed
            self.jitterMs = jitterMs
            self.rttMs = rttMs
            self.sendLevel = sendLevel
            self.receiveLevel = receiveLevel
            self.sendKbps = sendKbps
            self.receiveKbps = receiveKbps
            self.redundancy = redundancy
        }

        /// This stretch and the next as one: counts add up, peaks stay, bitrates average.
        func merged(with next: Sample) -> Sample {
            Sample(at: at, lost: lost + next.lost, concealed: concealed + next.concealed, jitterMs: max(jitterMs, next.jitterMs),
                   rttMs: [rttMs, next.rttMs].compactMap { $0 }.max(), sendLevel: max(sendLevel, next.sendLevel),
                   receiveLevel: max(receiveLevel, next.receiveLevel), sendKbps: (sendKbps + next.sendKbps) / 2,
                   receiveKbps: (receiveKbps + next.receiveKbps) / 2, redundancy: max(redundancy, next.redundancy))
        }
    }

    /// Seconds each sample covers: 1, doubled each time the samples reach ``limit``.
    public private(set) var step = 1
    public private(set) var samples: [Sample] = []

    /// At most this many samples are kept (an hour at one a second): a longer call halves its
    /// resolution rather than grow without bound.
    public static let limit = 3_600

    public init() {}

    /// Adds the second starting `at` seconds into the call. Seconds of a coarser timeline fold
    /// into its last sample until it covers ``step`` seconds.
    public mutating func append(_ second: Sample) {
        if let last = samples.last, second.at < last.at + step {
            samples[samples.count - 1] = last.merged(with: second)
            return
        }
        var sample = second
        sample.at = second.at - second.at % step
        samples.append(sample)
        if samples.count > Self.limit {
            step *= 2
            samples = stride(from: 0, to: samples.count, by: 2).map { index in
                index + 1 < samples.count ? samples[index].merged(with: samples[index + 1]) : samples[index]
            }
        }
    }

    /// The stretches that lost or concealed most, worst first (at most `count`; only those
    /// with something lost or concealed).
    public func worst(_ count: Int) -> [Sample] {
        samples.filter { $0.lost + $0.concealed > 0 }
            .sorted { ($0.lost + $0.concealed, -$0.at) > ($1.lost + $1.concealed, -$1.at) }
            .prefix(count).map { $0 }
    }
}
