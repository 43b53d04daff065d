import Foundation
import FuzzTargets
import Testing

/// The fuzz targets' inputs kept in the repository, replayed in every test run: the seeds
/// (`Fuzz/corpus/<target>`) and every input that once found a bug (`Fuzz/regressions/<target>`).
/// A regression that comes back traps here, naming the broken property.
@Suite struct FuzzCorpusTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fuzz")

    static func inputs(_ kind: String, _ target: FuzzTarget) -> [(String, [UInt8])] {
        let folder = root.appendingPathComponent(kind).appendingPathComponent(target.rawValue)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        return names.sorted().compactMap { name in
            (try? Data(contentsOf: folder.appendingPathComponent(name))).map { (name, Array($0)) }
        }
    }

    @Test(arguments: FuzzTarget.allCases)
    func theSeedsInTheRepositoryAreTheOnesTheNodesWritersMakeAndAllPass(target: FuzzTarget) {
        let stored = Self.inputs("corpus", target)
        let written = target.seeds.sorted { $0.name < $1.name }
        #expect(stored.map(\.0) == written.map(\.name), "Fuzz/corpus/\(target.rawValue) is out of date: run `swift run callnode-fuzz --write-seeds Fuzz/corpus`")
        #expect(stored.map(\.1) == written.map(\.bytes), "Fuzz/corpus/\(target.rawValue) differs from what the writers make now")
        #expect(!written.isEmpty)
        for (_, bytes) in stored { target.run(bytes) }
    }

    @Test(arguments: FuzzTarget.allCases)
    func everyInputThatOnceFoundABugPassesNow(target: FuzzTarget) {
        for (_, bytes) in Self.inputs("regressions", target) { target.run(bytes) }
    }

    /// Every seed parses (a seed that does not parse starts the fuzzer from nothing).
    @Test func seedsAreValidInputs() throws {
        for seed in FuzzTarget.sdp.seeds { #expect(FuzzTarget.parses(.sdp, seed.bytes), "\(seed.name)") }
        for seed in FuzzTarget.candidate.seeds { #expect(FuzzTarget.parses(.candidate, seed.bytes), "\(seed.name)") }
        for seed in FuzzTarget.rtp.seeds { #expect(FuzzTarget.parses(.rtp, seed.bytes), "\(seed.name)") }
        for seed in FuzzTarget.rtcp.seeds { #expect(FuzzTarget.parses(.rtcp, seed.bytes), "\(seed.name)") }
        for seed in FuzzTarget.sip.seeds { #expect(FuzzTarget.parses(.sip, seed.bytes), "\(seed.name)") }
        for seed in FuzzTarget.signaling.seeds { #expect(FuzzTarget.parses(.signaling, seed.bytes), "\(seed.name)") }
    }
}
