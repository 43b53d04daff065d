import RTP

/// Moves the playout delay without dropping or inventing a frame: decoded speech is lengthened
/// or shortened by one pitch period at a time, overlap-added where the signal repeats itself —
/// the WSOLA idea behind WebRTC NetEq's preemptive expand and accelerate.
///
/// The stretcher sits between the decoder and the speaker. What a stretch adds waits in its
/// backlog; once a whole frame has built up it plays on its own while the jitter buffer's frame
/// stays due (the buffer's delay grows by a frame as the backlog shrinks by one). A compression
/// takes two decoded frames and returns them one period shorter. The jitter buffer counts the
/// backlog in the delay it steers by (``JitterBuffer/outputBacklog``).
public struct TimeStretcher: Sendable {
    /// Samples per frame (one channel).
    public let frameSamples: Int
    /// Shortest and longest period searched, in samples (2.5–10 ms: voices from 100 to 400 Hz).
    public let minimumPeriod: Int
    public let maximumPeriod: Int
    private var backlog: [Int16] = []
    /// The speech level lately (``isQuiet(_:)``) and how many frames a move has waited.
    private var speechLevel = 0.0
    private var waited = 0

    /// - Parameters:
    ///   - frameSamples: Samples per frame.
    ///   - sampleRate: The decoded audio's rate.
    public init(frameSamples: Int, sampleRate: Int) {
        self.frameSamples = frameSamples
        minimumPeriod = max(8, sampleRate / 400)
        maximumPeriod = max(minimumPeriod + 1, min(frameSamples / 2, sampleRate / 100))
        backlog.reserveCapacity(frameSamples * 3)
    }

    /// Samples decoded and not played yet.
    public var backlogSamples: Int { backlog.count }

    /// Whether a whole frame waits to be played on its own.
    public var hasWholeFrame: Bool { backlog.count >= frameSamples }

    /// Queues decoded audio.
    public mutating func push(_ samples: [Int16]) { backlog.append(contentsOf: samples) }

    /// Fills `frame` from the backlog (silence for what it lacks).
    public mutating func take(into frame: inout [Int16]) {
        let count = min(frame.count, backlog.count)
        for i in 0..<count { frame[i] = backlog[i] }
        for i in count..<frame.count { frame[i] = 0 }
        backlog.removeFirst(count)
    }

    /// Forgets the backlog (playout moved elsewhere on the stream).
    public mutating func clear() { backlog.removeAll(keepingCapacity: true) }

    /// `x` one period longer: its first period, then a cross-fade from the second period into
    /// the first, then the rest — at a periodic signal's own period, a seamless repetition.
    public func lengthened(_ x: [Int16]) -> [Int16] {
        guard x.count >= 2 * maximumPeriod else { return x }
        return Self.lengthened(x, by: bestPeriod(x, from: 0))
    }

    /// `x` one period shorter: a cross-fade from its first period into its second takes the
    /// place of both.
    public func shortened(_ x: [Int16]) -> [Int16] {
        guard x.count >= 2 * maximumPeriod + 1 else { return x }
        return Self.shortened(x, by: bestPeriod(x, from: 0))
    }

    /// A quiet frame a whole frame longer, in two half-frame repetitions, each cross-faded in
    /// and out (continuous at every join; what it repeats is too quiet to be heard as such).
    public func lengthenedByAFrame(_ x: [Int16]) -> [Int16] {
        let first = x.count / 2, second = x.count - first
        guard first > 0 else { return x }
        return Self.lengthened(Self.lengthened(x, by: first), by: second)
    }

    /// Two frames, the first of them quiet, as one: the first cross-faded into the second over
    /// its whole length.
    public func shortenedByAFrame(_ x: [Int16]) -> [Int16] {
        guard x.count >= 2 else { return x }
        return Self.shortened(x, by: x.count / 2)
    }

    static func lengthened(_ x: [Int16], by period: Int) -> [Int16] {
        guard period > 0, x.count >= 2 * period else { return x }
        var y = [Int16]()
        y.reserveCapacity(x.count + period)
        y.append(contentsOf: x[0..<period])
        for i in 0..<period {
            let w = Double(i + 1) / Double(period + 1)
            y.append(clamp(Double(x[period + i]) * (1 - w) + Double(x[i]) * w))
        }
        y.append(contentsOf: x[period...])
        return y
    }

    static func shortened(_ x: [Int16], by period: Int) -> [Int16] {
        guard period > 0, x.count >= 2 * period else { return x }
        var y = [Int16]()
        y.reserveCapacity(x.count - period)
        for i in 0..<period {
            let w = Double(i + 1) / Double(period + 1)
            y.append(clamp(Double(x[i]) * (1 - w) + Double(x[period + i]) * w))
        }
        y.append(contentsOf: x[(2 * period)...])
        return y
    }

    /// How a move of the delay is made for the frame about to play.
    public enum Stretch: Equatable, Sendable {
        /// Not now: no move is wanted, or a shorter delay waits for a quiet frame.
        case none
        /// The whole move in this quiet frame: a frame more (or, with the next, a frame less).
        case wholeFrame
        /// A pitch period: a longer delay in speech, or a shorter one that has waited long enough.
        case period
    }

    /// Frames of speech a shorter delay waits for a quiet frame before it moves a period at a
    /// time (a second at 20 ms frames): meanwhile nothing is lost but latency, and a stretch in
    /// a pause is not heard. A longer delay does not wait: until it is there, the copies and
    /// FEC it holds for come too late (waiting 200 ms for a quiet frame cost 0.04–0.09 PESQ-WB
    /// at 30 % loss over 20 loss patterns).
    public static let shrinkWait = 50
    /// A frame this far under the speech heard lately (−15 dB), or under ``quietFloor``, is quiet.
    public static let quietShare = 0.18
    /// RMS under which a frame is quiet whatever came before (about −50 dBFS).
    public static let quietFloor = 100.0

    /// How to make `adjustment` with `frame`, the decoded frame about to play; called for every
    /// decoded frame (it follows the speech level). A quiet frame takes the whole move at once,
    /// the way NetEq stretches in silence; in speech a longer delay moves a period per frame,
    /// a shorter one first waits for a quiet frame (``shrinkWait``).
    public mutating func plan(_ adjustment: DelayAdjustment, for frame: [Int16]) -> Stretch {
        let quiet = isQuiet(frame)
        switch adjustment {
        case .none:
            waited = 0
            return .none
        case _ where quiet:
            waited = 0
            return .wholeFrame
        case .grow:
            return .period
        case .shrink:
            waited += 1
            return waited > Self.shrinkWait ? .period : .none
        }
    }

    /// Whether `frame` is quiet against the speech heard lately; follows the level (a peak
    /// follower of frames' RMS, every sixteenth sample: it rises at once and falls by about 9 dB
    /// a second).
    public mutating func isQuiet(_ frame: [Int16]) -> Bool {
        var sum = 0, count = 0
        frame.withUnsafeBufferPointer { p in
            var i = 0
            while i < p.count {
                let v = Int(p[i])
                sum &+= v &* v
                count &+= 1
                i &+= 16
            }
        }
        let rms = count > 0 ? (Double(sum) / Double(count)).squareRoot() : 0
        speechLevel = max(rms, speechLevel * 0.98)
        return rms < max(Self.quietFloor, speechLevel * Self.quietShare)
    }

    /// The lag in `minimumPeriod...maximumPeriod` at which `x` (from `start`) best matches
    /// itself: the highest normalized correlation over one longest period.
    ///
    /// Searched as WebRTC NetEq does, coarse then fine: every lag of the signal summed in
    /// blocks of ``decimation`` samples (at 48 kHz, a 12 kHz signal, which keeps every voice's
    /// pitch), then the lags around the best one at the full rate. A fraction (~1/7) of the
    /// work of trying every lag at the full rate — that cost a tenth of a loaded node's CPU when
    /// late ticks made every leg stretch.
    func bestPeriod(_ x: [Int16], from start: Int) -> Int {
        let factor = decimation
        guard factor > 1 else { return Self.bestLag(x, from: start, lags: minimumPeriod...maximumPeriod, window: maximumPeriod, step: 2) }
        var coarse = [Int32](repeating: 0, count: (x.count - start) / factor)
        x.withUnsafeBufferPointer { p in
            for k in coarse.indices {
                var sum: Int32 = 0
                for i in 0..<factor { sum += Int32(p[start + k * factor + i]) }
                coarse[k] = sum
            }
        }
        let low = (minimumPeriod + factor - 1) / factor, high = maximumPeriod / factor
        // A periodic signal matches itself as well at twice its period: the shortest lag
        // within a hair of the best is the period.
        let roughly = Self.bestLag(coarse, from: 0, lags: low...max(low, high), window: maximumPeriod / factor, step: 1,
                                   tolerance: 0.02) * factor
        let around = max(minimumPeriod, roughly - factor)...min(maximumPeriod, roughly + factor)
        return Self.bestLag(x, from: start, lags: around, window: maximumPeriod, step: 2)
    }

    /// Samples summed into one for the coarse period search: 4 at 48 kHz, none at 12 kHz or less.
    var decimation: Int { max(1, minimumPeriod / 30) }

    /// The lag in `lags` whose normalized correlation over `window` samples (every `step`-th)
    /// from `start` is highest; with a `tolerance`, the shortest peak within it of the highest.
    static func bestLag<T: BinaryInteger>(_ x: [T], from start: Int, lags: ClosedRange<Int>, window: Int, step: Int,
                                          tolerance: Double = 0) -> Int {
        var best = (lag: lags.lowerBound, score: -Double.infinity)
        var scores: [(lag: Int, score: Double)] = []
        if tolerance > 0 { scores.reserveCapacity(lags.count) }
        x.withUnsafeBufferPointer { p in
            var lag = lags.lowerBound
            while lag <= lags.upperBound, start + lag + window <= p.count {
                var dot = 0.0, a = 0.0, b = 0.0
                var i = start
                while i < start + window {
                    let u = Double(p[i]), v = Double(p[i + lag])
                    dot += u * v; a += u * u; b += v * v
                    i += step
                }
                let score = a > 0 && b > 0 ? dot / (a * b).squareRoot() : 0
                if score > best.score { best = (lag, score) }
                if tolerance > 0 { scores.append((lag, score)) }
                lag += 1
            }
        }
        guard tolerance > 0 else { return best.lag }
        // The first peak (not a shoulder of the best one) that comes within `tolerance`.
        for (i, candidate) in scores.enumerated() where candidate.score >= best.score - tolerance {
            let left = i > 0 ? scores[i - 1].score : -Double.infinity
            let right = i + 1 < scores.count ? scores[i + 1].score : -Double.infinity
            if candidate.score >= left && candidate.score >= right { return candidate.lag }
        }
        return best.lag
    }

    static func clamp(_ value: Double) -> Int16 {
        Int16(max(-32_768, min(32_767, value.rounded())))
    }
}
