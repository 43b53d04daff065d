import Calls
import Foundation

/// A call's quality over time as a picture: an SVG of four bands over the call's seconds —
/// packets lost and frames concealed (bars), jitter and round trip (ms), the levels sent and
/// heard (dBFS), the bitrates each way (kbit/s). SVG because it is text the node writes itself
/// (no plotting library, no image codec), opens in any browser, and scales without blur.
public enum QualityPlot {
    public static let width = 900
    static let band = 110, top = 34, left = 56, right = 16, gap = 18

    public static var height: Int { top + 4 * band + 3 * gap + 30 }

    /// The SVG document for `timeline`, titled `title`.
    public static func svg(_ timeline: QualityTimeline, title: String) -> String {
        let samples = timeline.samples
        let seconds = max(1, (samples.last?.at ?? 0) + timeline.step)
        let plotWidth = Double(width - left - right)
        func x(_ at: Int) -> Double { Double(left) + plotWidth * Double(at) / Double(seconds) }
        var body: [String] = []
        body.append(##"<text x="\##(left)" y="20" font-size="14" font-weight="bold">\##(escape(title))</text>"##)

        // Each band: its frame, its name, its scale, then its series.
        func bandTop(_ index: Int) -> Int { top + index * (band + gap) }
        func frame(_ index: Int, _ name: String, maximum: Double, unit: String, minimum: Double = 0) {
            let y = bandTop(index)
            body.append(##"<rect x="\##(left)" y="\##(y)" width="\##(Int(plotWidth))" height="\##(band)" fill="#fafafa" stroke="#bbb"/>"##)
            body.append(##"<text x="\##(left + 4)" y="\##(y + 13)" font-size="11" fill="#444">\##(escape(name))</text>"##)
            body.append(##"<text x="\##(left - 4)" y="\##(y + 10)" font-size="10" text-anchor="end">\##(format(maximum)) \##(unit)</text>"##)
            body.append(##"<text x="\##(left - 4)" y="\##(y + band)" font-size="10" text-anchor="end">\##(format(minimum))</text>"##)
        }
        func y(_ value: Double, band index: Int, maximum: Double, minimum: Double = 0) -> Double {
            let clamped = min(max(value, minimum), maximum)
            return Double(bandTop(index) + band) - Double(band) * (clamped - minimum) / max(maximum - minimum, 1e-9)
        }
        func line(_ values: [(Int, Double)], band index: Int, maximum: Double, minimum: Double = 0, color: String, name: String) {
            guard !values.isEmpty else { return }
            let points = values.map { String(format: "%.1f,%.1f", x($0.0) + x(timeline.step) / 2 - x(0) / 2, y($0.1, band: index, maximum: maximum, minimum: minimum)) }
            body.append(##"<polyline class="\##(name)" fill="none" stroke="\##(color)" stroke-width="1.5" points="\##(points.joined(separator: " "))"/>"##)
        }

        // Lost and concealed, as bars side by side.
        let counts = samples.map { max($0.lost, $0.concealed) }
        let countMax = Double(max(1, counts.max() ?? 1))
        frame(0, "lost packets (red), concealed frames (orange)", maximum: countMax, unit: "")
        let barWidth = max(1, (x(timeline.step) - x(0)) / 2 - 0.5)
        for sample in samples {
            for (value, color, offset, name) in [(sample.lost, "#d62728", 0.0, "lost"), (sample.concealed, "#ff7f0e", barWidth, "concealed")] where value > 0 {
                let top = y(Double(value), band: 0, maximum: countMax)
                let geometry = String(format: "x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"",
                                      x(sample.at) + offset, top, barWidth, Double(bandTop(0) + band) - top)
                body.append("<rect class=\"\(name)\" data-at=\"\(sample.at)\" \(geometry) fill=\"\(color)\"/>")
            }
        }
        // Jitter and round trip.
        let timeMax = max(10, (samples.map(\.jitterMs) + samples.compactMap(\.rttMs)).max() ?? 10)
        frame(1, "jitter (blue), round trip (purple)", maximum: timeMax, unit: "ms")
        line(samples.map { ($0.at, $0.jitterMs) }, band: 1, maximum: timeMax, color: "#1f77b4", name: "jitter")
        line(samples.compactMap { sample in sample.rttMs.map { (sample.at, $0) } }, band: 1, maximum: timeMax, color: "#9467bd", name: "rtt")
        // Levels.
        frame(2, "level sent (green), heard (teal)", maximum: 0, unit: "dBFS", minimum: -60)
        line(samples.map { ($0.at, $0.sendLevel) }, band: 2, maximum: 0, minimum: -60, color: "#2ca02c", name: "sent-level")
        line(samples.map { ($0.at, $0.receiveLevel) }, band: 2, maximum: 0, minimum: -60, color: "#17becf", name: "heard-level")
        // Bitrates.
        let rateMax = Double(max(64, (samples.map(\.sendKbps) + samples.map(\.receiveKbps)).max() ?? 64))
        frame(3, "sent (black), received (grey); redundancy in copies a packet above", maximum: rateMax, unit: "kbit/s")
        line(samples.map { ($0.at, Double($0.sendKbps)) }, band: 3, maximum: rateMax, color: "#222", name: "sent-rate")
        line(samples.map { ($0.at, Double($0.receiveKbps)) }, band: 3, maximum: rateMax, color: "#999", name: "received-rate")
        var lastRedundancy = -1
        for sample in samples where sample.redundancy != lastRedundancy {
            lastRedundancy = sample.redundancy
            body.append(String(format: ##"<text x="%.1f" y="%d" font-size="9" fill="#555">%d</text>"##, x(sample.at), bandTop(3) + 24, sample.redundancy))
        }

        // The time axis, in m:ss under the last band.
        let axis = bandTop(3) + band + 14
        let tick = [1, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800].first { seconds / $0 <= 10 } ?? 3600
        for at in stride(from: 0, through: seconds, by: tick) {
            body.append(String(format: ##"<text x="%.1f" y="%d" font-size="10" text-anchor="middle">"##, x(at), axis) + QualitySummary.clock(at) + "</text>")
        }
        return """
            <?xml version="1.0" encoding="UTF-8"?>
            <svg xmlns="http://www.w3.org/2000/svg" width="\(width)" height="\(height)" viewBox="0 0 \(width) \(height)" font-family="sans-serif">
            <rect width="100%" height="100%" fill="white"/>
            \(body.joined(separator: "\n"))
            </svg>

            """
    }

    private static func format(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : String(format: "%.1f", value)
    }

    private static func escape(_ text: String) -> String {
        text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }
}
