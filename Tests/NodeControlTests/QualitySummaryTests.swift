import CallNode
import Foundation
import NodeControl
import Testing

/// What `callnode recents show` says of a call's quality over time.
@Suite struct QualitySummaryTests {
    static func second(_ at: Int, lost: Int = 0, concealed: Int = 0, jitter: Double = 2, rtt: Double? = 21,
                       sendKbps: Int = 40, redundancy: Int = 1) -> QualityTimeline.Sample {
        QualityTimeline.Sample(at: at, lost: lost, concealed: concealed, jitterMs: jitter, rttMs: rtt, sendLevel: -18, receiveLevel: -23.6,
                               sendKbps: sendKbps, receiveKbps: 42, redundancy: redundancy)
    }

    @Test func itSaysWhatWasLostItsWorstMomentsAndThePeaks() {
        var timeline = QualityTimeline()
        for at in 0..<75 {
            timeline.append(Self.second(at, lost: at == 64 ? 9 : at == 12 ? 2 : 0, concealed: at == 64 ? 4 : 0,
                                        jitter: at == 64 ? 31.25 : 2, rtt: at == 0 ? nil : 21, sendKbps: at > 64 ? 120 : 40,
                                        redundancy: at > 64 ? 3 : 1))
        }
        #expect(QualitySummary.lines(timeline) == [
            "quality over 1:15 (a sample a second): lost 11 packets, concealed 4 frames",
            "  worst: 1:04 lost 9, concealed 4; 0:12 lost 2, concealed 0",
            "  jitter up to 31.2 ms (1:04); round trip up to 21.0 ms",
            "  sent 40–120 kbit/s (up to 3 copies a packet), received 42 kbit/s",
            "  loudest sent -18 dBFS, heard -24 dBFS",
        ])
    }

    @Test func aCleanCallAndACallWithoutMediaSaySo() {
        var clean = QualityTimeline()
        for at in 0..<3 { clean.append(Self.second(at, rtt: nil, redundancy: 0)) }
        let lines = QualitySummary.lines(clean)
        #expect(lines[0] == "quality over 0:03 (a sample a second): lost 0 packets, concealed 0 frames")
        #expect(lines[1] == "  nothing lost or concealed")
        #expect(lines[2] == "  jitter up to 2.0 ms (0:00); round trip not measured")
        #expect(lines[3] == "  sent 40 kbit/s, received 42 kbit/s")
        #expect(QualitySummary.lines(QualityTimeline()) == ["no quality was kept for this call (it had no media)"])
        var oneCopy = QualityTimeline()
        oneCopy.append(Self.second(0))
        #expect(QualitySummary.lines(oneCopy)[3] == "  sent 40 kbit/s (up to 1 copy a packet), received 42 kbit/s")
        var one = QualityTimeline()
        one.append(Self.second(0, lost: 1, concealed: 1))
        #expect(QualitySummary.lines(one)[0] == "quality over 0:01 (a sample a second): lost 1 packet, concealed 1 frame")
    }
}

/// The picture `callnode recents show N --plot PATH` draws: an SVG of the expected size, with a
/// bar for each second that lost packets, where that second is.
@Suite struct QualityPlotTests {
    @Test func theLossIsDrawnWhereItHappened() {
        var timeline = QualityTimeline()
        for at in 0..<60 { timeline.append(QualitySummaryTests.second(at, lost: at == 30 ? 8 : 0, concealed: at == 30 ? 3 : 0)) }
        let svg = QualityPlot.svg(timeline, title: "outgoing call with <bob>")
        #expect(svg.hasPrefix("<?xml") && svg.contains("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"900\" height=\"\(QualityPlot.height)\""))
        #expect(svg.contains("outgoing call with &lt;bob&gt;"), "the title is escaped")
        let bars = svg.split(separator: "\n").filter { $0.contains("class=\"lost\"") }
        #expect(bars.count == 1 && bars[0].contains("data-at=\"30\""), "\(bars)")
        // Second 30 of 60 sits halfway along the plot's width.
        let x = bars.first.flatMap { $0.split(separator: " ").first { $0.hasPrefix("x=") } }.flatMap { Double($0.dropFirst(3).dropLast()) }
        let middle = Double(QualityPlot.width - 56 - 16) / 2 + 56
        #expect(x.map { abs($0 - middle) < 1 } == true, "x \(String(describing: x)), expected \(middle)")
        #expect(svg.components(separatedBy: "class=\"concealed\"").count == 2)
        #expect(svg.contains("class=\"jitter\"") && svg.contains("class=\"rtt\"") && svg.contains("class=\"sent-rate\""))
        #expect(svg.hasSuffix("</svg>\n"))
    }
}
