import ArgumentParser
import CallNode
@_spi(Benchmarks) import Media
import Foundation
import Synchronization

/// `callnode-bench media --paired-rounds`: each party count as one conference and as plain
/// calls in turn, round after round, each beside a bare ceiling paced as real time runs it.
extension MediaBench {
    /// What one kind (conference or plain calls) did at one party count over the rounds.
    struct PairedFigures {
        var kept = 0
        var latePercent: [Double] = []
        var cpuPercent: [Double] = []
        /// Share of the unpaced ceiling, in the rounds that kept up.
        var ofCeiling: [Double] = []
        /// Share of the paced ceiling timed beside it, every round.
        var ofPacedCeiling: [Double] = []
    }

    /// Runs the rounds (ABBA: the two kinds in turn, the first kind alternating), so the drift
    /// of this machine's speed over minutes falls on both alike, and prints in how many rounds
    /// each kind kept up.
    func runPairedRounds(speech: [Int16], configuration: MediaConfiguration, baseline: Double) async throws {
        var figures: [Bool: [Int: PairedFigures]] = [true: [:], false: [:]]
        for round in 0..<pairedRounds {
            for parties in conference {
                for inConference in round % 2 == 0 ? [true, false] : [false, true] {
                    let (best, ceiling, points) = try await sweep(legs: [parties * 2], speech: speech, configuration: configuration, baseline: baseline,
                                                                  label: "round \(round + 1), \(inConference ? "one conference" : "plain calls")",
                                                                  conference: inConference)
                    let paced = try pacedBareCeiling(legs: parties * 2, speech: speech, configuration: configuration)
                    print(String(format: "media real time (round %d): paced bare ceiling beside it %.0f legs (%.4f s per leg-second), this count %.0f %% of it",
                                 round + 1, paced.legs, paced.perLeg, Double(parties * 2) / paced.legs * 100))
                    var entry = figures[inConference]![parties, default: PairedFigures()]
                    if best > 0 { entry.kept += 1 }
                    if let point = points.first {
                        entry.latePercent.append(point.latePercent)
                        entry.cpuPercent.append(point.cpuPercent)
                    }
                    if let ceiling { entry.ofCeiling.append(Double(parties * 2) / ceiling * 100) }
                    entry.ofPacedCeiling.append(Double(parties * 2) / paced.legs * 100)
                    figures[inConference]![parties] = entry
                }
            }
        }
        let median = { (xs: [Double]) in xs.isEmpty ? Double.nan : xs.sorted()[xs.count / 2] }
        print("media real time, paired rounds: parties | kept up as one conference (median late %, CPU %) | kept up as plain calls (median late %, CPU %) | share of the ceiling when kept up (median, conference / plain) | share of the paced ceiling (median of every round, conference / plain)")
        for parties in conference {
            let c = figures[true]![parties, default: PairedFigures()], p = figures[false]![parties, default: PairedFigures()]
            print(String(format: "media real time, paired rounds: %d parties | %d of %d (%.2f %%, %.0f %%) | %d of %d (%.2f %%, %.0f %%) | %.0f %% / %.0f %% | %.0f %% / %.0f %%",
                         parties, c.kept, pairedRounds, median(c.latePercent), median(c.cpuPercent),
                         p.kept, pairedRounds, median(p.latePercent), median(p.cpuPercent),
                         median(c.ofCeiling), median(p.ofCeiling), median(c.ofPacedCeiling), median(p.ofPacedCeiling)))
        }
    }

    /// The bare loop's ceiling in real time: `legs` codec states split over the machine's cores,
    /// each core's share paced as a media lane runs it (one frame of each every 20 ms, then a
    /// sleep) for `seconds`, all cores at once; the cores divided by the CPU per leg-second.
    /// Work that wakes every 20 ms finds colder caches than a loop that never sleeps, and every
    /// real-time program pays that, so this is the ceiling a count in real time is fairly held to.
    func pacedBareCeiling(legs: Int, speech: [Int16], configuration: MediaConfiguration, seconds: Int = 2) throws -> (perLeg: Double, legs: Double) {
        let cores = ProcessInfo.processInfo.activeProcessorCount
        let share = max(1, legs / cores)
        let failed = Atomic<Bool>(false)
        let opus = configuration.opus
        let start = BareMediaBenchmark.cpuTime()
        DispatchQueue.concurrentPerform(iterations: cores) { _ in
            if BareMediaBenchmark.run(frames: share * 50 * seconds, pcm: speech, bitrate: Int32(opus.bitrate), complexity: Int32(opus.complexity),
                                      expectedLossPercent: Int32(opus.expectedLossPercent), states: share, paced: true) == nil {
                failed.store(true, ordering: .relaxed)
            }
        }
        guard !failed.load(ordering: .relaxed) else { throw ValidationError("the paced bare Opus/SRTP loop failed") }
        let perLeg = (BareMediaBenchmark.cpuTime() - start).seconds / Double(cores * share * seconds)
        return (perLeg, Double(cores) / perLeg)
    }
}
