import CallNode
import CallNodeTestSupport
import Foundation
import FoundationXML
import NodeControl
import Testing

extension NetworkBeds.NetworkBedTests {
    /// Ten percent loss for six seconds in the middle of a call through the bed: the callee's
    /// per-second quality record shows it in those seconds and no others, and `callnode recents
    /// show --plot` draws it as a well-formed SVG of the plot's size.
    @Test func aCallsQualityRecordShowsTheBedsLossInTheSecondsItRan() async throws {
        let bed = try await Bed("quality-record")
        defer { bed.down() }
        let callers = try await Self.callers(in: bed)
        _ = try await bed.startRelay()
        let network = ["--stun", NetworkBed.stun]
        let bob = try await Self.startBob(bed, callers, network: network, recording: bed.directory + "/recording.wav", log: "bob.log")
        // A steady tone: 50 packets every second (speech's pauses would send few, which a
        // second of 10 % loss may leave all through). Long enough for clean seconds after the
        // loss however slowly the bed's commands run beside other work.
        let alice = try bed.start("a", [
            "call", "bob", "--home", callers.alice.home, "--relay", NetworkBed.relay,
            "--input", "tone:440", "--duration", "24", "--json",
        ] + network, log: "alice.log")
        _ = try await alice.waitFor("connected")
        try await Task.sleep(for: .seconds(5))
        // The bed's commands take a while under load, and the loss may begin (or end) anywhere
        // within one: the seconds they ran in are neither before, during nor after.
        let lossAsked = Self.epoch()
        try await bed.control(["loss", "10"])
        let lossFrom = Self.epoch()
        try await Task.sleep(for: .seconds(6))
        let lossEndAsked = Self.epoch()
        try await bed.control(["loss", "0"])
        let lossTo = Self.epoch()
        _ = try await alice.exit(timeout: .seconds(30))
        _ = try await bob.exit(timeout: .seconds(20))

        let store = try CallStore(path: callers.bob.home + "/callnode.sqlite")
        let row = try #require(try await store.recents(limit: 1).first)
        let timeline = try #require(try await store.quality(of: row.id), "Bob kept no quality for the call")
        // The Nth sample covers the second between Bob's stats events N and N+1 (the first is
        // the baseline): when each second was, on the wall clock. (Its `at` is whole seconds
        // into the call, to the nearest: truncated, a second a hair short of its number took the
        // one before and was merged into that second, and the samples no longer matched.)
        let times = bob.events("stats").compactMap { $0["time"] as? Double }
        let samples = timeline.samples
        #expect(samples.count >= 12 && times.count >= samples.count + 1, "\(samples.count) samples, \(times.count) stats")
        var before: [Int] = [], during: [Int] = [], after: [Int] = []
        for (index, sample) in samples.enumerated() where index + 1 < times.count {
            let (start, end) = (times[index], times[index + 1])
            if end < lossAsked - 0.3 { before.append(sample.lost) }
            if start > lossFrom + 0.3 && end < lossEndAsked - 0.3 { during.append(sample.lost) }
            if start > lossTo + 1 { after.append(sample.lost) }
        }
        #expect(before.count >= 3 && before.allSatisfy { $0 == 0 }, "seconds before the loss: \(before)")
        // Each second of it lost some (one second in 200 of 50 packets loses none at 10 %: one
        // such second is let pass).
        #expect(during.count >= 4 && during.filter { $0 > 0 }.count >= during.count - 1 && during.reduce(0, +) >= 8,
                "seconds of the loss: \(during); loss \(lossFrom)–\(lossTo), stats at \(times)")
        #expect(after.count >= 2 && after.allSatisfy { $0 == 0 }, "seconds after the loss: \(after)")
        let lost = (bob.events("stats").last?["packets_lost"] as? Int) ?? -1
        #expect(samples.map(\.lost).reduce(0, +) == lost, "the seconds add up to the call's \(lost) lost")

        // The summary and the picture, as a person asks for them.
        let plot = bed.directory + "/call.svg"
        let shown = try await bed.callnode(["recents", "show", "1", "--home", callers.bob.home, "--plot", plot])
        #expect(shown.status == 0 && shown.output.contains("quality over") && shown.output.contains("worst:"), "\(shown.output)")
        let parsed = SVGSize(try Data(contentsOf: URL(fileURLWithPath: plot)))
        #expect(parsed.wellFormed && parsed.width == QualityPlot.width && parsed.height == QualityPlot.height,
                "\(parsed.wellFormed) \(String(describing: parsed.width))×\(String(describing: parsed.height))")
    }
}

/// Whether an SVG document parses as XML, and the size its root element says.
final class SVGSize: NSObject, XMLParserDelegate {
    private(set) var width: Int?
    private(set) var height: Int?
    private(set) var wellFormed = false

    init(_ data: Data) {
        super.init()
        let parser = XMLParser(data: data)
        parser.delegate = self
        wellFormed = parser.parse()
    }

    func parser(_ parser: XMLParser, didStartElement element: String, namespaceURI: String?, qualifiedName: String?,
                attributes: [String: String] = [:]) {
        guard element == "svg", width == nil else { return }
        width = attributes["width"].flatMap { Int($0) }
        height = attributes["height"].flatMap { Int($0) }
    }
}
