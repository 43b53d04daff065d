import Foundation

/// Finds where a sent signal appears in a recording.
///
/// The searches are brute-force normalised correlations (millions of multiply-adds for one
/// recording): this target is compiled optimised even in a debug build, and the kernel reads
/// plain buffers, so judging what a call carried costs the machine little beside the calls
/// still running.
public enum AudioAlignment {
    /// The median, over consecutive 0.1 s windows of `received` between `from` and `to`
    /// (sample indices), of each window's best normalised correlation against `sent`. Each
    /// window is aligned on its own, so a frame the adaptive jitter buffer inserts or drops
    /// mid-call (shifting what follows) spoils one window, not the measure; audio that did
    /// not arrive, or arrived garbled, still scores near zero.
    public static func piecewise(sent: [Int16], received: [Int16], from: Int, to: Int) -> Double {
        median(windows(sent: sent, received: received, from: from, to: to).map(\.correlation))
    }

    /// The median correlation of the windows where `sent` holds speech (louder than
    /// `speechLevel` dBFS where the window belongs): the sender's pauses, which noise
    /// suppression rightly turns to near silence, carry no waveform to match.
    public static func piecewiseSpeech(_ windows: [Window], speechLevel: Double = -45) -> Double {
        median(windows.filter { $0.sentLevel > speechLevel }.map(\.correlation))
    }

    public static func median(_ values: [Double]) -> Double {
        values.isEmpty ? 0 : values.sorted()[values.count / 2]
    }

    /// One 0.1 s window of a recording against what was sent.
    public struct Window: CustomStringConvertible, Sendable {
        /// The window's first sample in the recording, and where in `sent` it matched best.
        public var start: Int, lag: Int
        public var correlation: Double
        /// The level of `sent` where the window belongs, dBFS: at its match when it matched
        /// (≥ 0.6), else one window on from the previous window's place.
        public var sentLevel: Double
        /// The window's own level, dBFS.
        public var receivedLevel: Double

        public var description: String {
            String(format: "%.2fs %.2f (sent %.0f, heard %.0f dBFS)", Double(start) / 48_000, correlation, sentLevel, receivedLevel)
        }
    }

    /// The normalised correlation of `count` samples of `x` from `xStart` with `count` samples
    /// of `y` from `yStart`, taking every `step`th sample.
    @inline(__always)
    static func correlation(_ x: UnsafeBufferPointer<Double>, _ xStart: Int, _ y: UnsafeBufferPointer<Double>, _ yStart: Int,
                            count: Int, step: Int) -> Double {
        var dot = 0.0, a = 0.0, b = 0.0
        var i = 0
        while i < count {
            let u = x[xStart + i], v = y[yStart + i]
            dot += u * v; a += u * u; b += v * v
            i += step
        }
        return a > 0 && b > 0 ? dot / (a * b).squareRoot() : 0
    }

    static func level(_ samples: UnsafeBufferPointer<Double>, from start: Int, count: Int) -> Double {
        var power = 0.0
        for i in start..<(start + count) { power += samples[i] * samples[i] }
        power /= Double(max(1, count))
        return power > 0 ? 10 * log10(power / (32_768 * 32_768)) : -100
    }

    /// Each 0.1 s window of `received` between `from` and `to` with its best match in `sent`
    /// (looped), searched near where the previous window matched, else everywhere.
    public static func windows(sent: [Int16], received: [Int16], from: Int, to: Int) -> [Window] {
        let window = 4_800
        let looped = (sent + sent).map(Double.init)
        let heard = received.map(Double.init)
        return looped.withUnsafeBufferPointer { looped in
            heard.withUnsafeBufferPointer { heard in
                func search(_ range: ClosedRange<Int>, start: Int) -> (lag: Int, correlation: Double) {
                    var best = (lag: range.lowerBound, correlation: -1.0)
                    for offset in stride(from: range.lowerBound, through: range.upperBound, by: 8) {
                        let c = correlation(looped, offset, heard, start, count: window, step: 4)
                        if c > best.correlation { best = (offset, c) }
                    }
                    for offset in max(0, best.lag - 8)...min(sent.count - 1, best.lag + 8) {
                        let c = correlation(looped, offset, heard, start, count: window, step: 1)
                        if c > best.correlation { best = (offset, c) }
                    }
                    return best
                }
                var results: [Window] = []
                var lastLag: Int?
                var start = max(0, from)
                while start + window <= min(to, received.count) {
                    // Near where the last window matched (a few frames either way), else everywhere.
                    var best = (lag: 0, correlation: -1.0)
                    let expected = lastLag.map { ($0 + window) % sent.count }
                    if let expected {
                        best = search(max(0, expected - 2_880)...min(sent.count - 1, expected + 2_880), start: start)
                    }
                    if best.correlation < 0.6 { best = search(0...(sent.count - 1), start: start) }
                    let place = best.correlation >= 0.6 ? best.lag : (expected ?? best.lag)
                    results.append(Window(start: start, lag: best.lag, correlation: best.correlation,
                                          sentLevel: level(looped, from: place, count: window),
                                          receivedLevel: level(heard, from: start, count: window)))
                    lastLag = best.lag % sent.count
                    start += window
                }
                return results
            }
        }
    }

    /// The lag and normalised correlation of the best match of a 0.5 s window of `received`
    /// (from `start`, by default the middle) against `sent` (looped), searched coarsely at
    /// 6 kHz, then refined.
    public static func best(sent: [Int16], received: [Int16], start: Int? = nil) -> (lag: Int, correlation: Double) {
        let window = 24_000
        let start = start ?? (received.count / 2 - window / 2)
        guard start >= 0, received.count >= start + window, sent.count > window else { return (0, 0) }
        let target = received[start..<(start + window)].map(Double.init)
        let looped = (sent + sent).map(Double.init)
        return looped.withUnsafeBufferPointer { looped in
            target.withUnsafeBufferPointer { target in
                var best = (lag: 0, correlation: -1.0)
                var offset = 0
                while offset < sent.count {
                    let c = correlation(looped, offset, target, 0, count: window, step: 8)
                    if c > best.correlation { best = (offset, c) }
                    offset += 8
                }
                var refined = (lag: best.lag, correlation: correlation(looped, best.lag, target, 0, count: window, step: 1))
                for offset in max(0, best.lag - 16)...min(sent.count - 1, best.lag + 16) {
                    let c = correlation(looped, offset, target, 0, count: window, step: 1)
                    if c > refined.correlation { refined = (offset, c) }
                }
                return refined
            }
        }
    }
}
