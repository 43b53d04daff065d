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
        let period = bestPeriod(x, from: 0)
        var y = [Int16]()
        y.reserveCapacity(x.count + period)
        y.append(contentsOf: x[0..<period])
        for i in 0..<period {
            let w = Double(i + 1) / Double(period + 1)
            y.append(Self.clamp(Double(x[period + i]) * (1 - w) + Double(x[i]) * w))
        }
        y.append(contentsOf: x[period...])
        return y
    }

    /// `x` one period shorter: a cross-fade from its first period into its second takes the
    /// place of both.
    public func shortened(_ x: [Int16]) -> [Int16] {
        guard x.count >= 2 * maximumPeriod + 1 else { return x }
        let period = bestPeriod(x, from: 0)
        var y = [Int16]()
        y.reserveCapacity(x.count - period)
        for i in 0..<period {
            let w = Double(i + 1) / Double(period + 1)
            y.append(Self.clamp(Double(x[i]) * (1 - w) + Double(x[period + i]) * w))
        }
        y.append(contentsOf: x[(2 * period)...])
        return y
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

    private static func clamp(_ value: Double) -> Int16 {
        Int16(max(-32_768, min(32_767, value.rounded())))
    }
}
