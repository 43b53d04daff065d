import ArgumentParser
import CSimHost
import CallCore
import CallNodeSimulation
import Foundation
import Logging
import SIPDialog

/// `callnode-sim`: whole nodes under seeded faults and schedules.
struct SimCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "callnode-sim",
        abstract: "Runs whole CallNode nodes on one manual clock under seeded actions, faults and schedules, checking every invariant after every step.",
        discussion: """
            Everything a run does follows from its seed: the users' actions (dial, answer, hang up, \
            mute, hold, swap, merge, DTMF, block, do-not-disturb), the faults (loss, delay, \
            reordering and duplication of media, partitions, signaling resets, unreachable nodes) and \
            the order in which jobs that are ready together run. The same seed prints the same trace.
            Each seed first picks its mix (swarm testing): which actions and faults its plan holds \
            and how often, how many nodes act, how dense and how focused on one call its steps are, \
            how often the schedule runs a job out of turn. A trace's first lines say it; \
            --no-swarm draws every seed from one uniform mix.

              callnode-sim --seeds 500               sweep seeds 1…500, print the failures
              callnode-sim --seed 42 --trace         replay one seed, print its trace
              callnode-sim --seed 42 --shrink        shrink a failing seed to a shorter plan
              callnode-sim --seeds 20 --dry-run      print plans (and their mixes) without running them
              callnode-sim --seeds 200 --bug resume-unmutes
                                                     show that a sweep finds a known bug
              callnode-sim --invariants              what each invariant means
            """)

    @Option(help: "Run this one seed.")
    var seed: UInt64?

    @Option(help: "Sweep this many seeds.")
    var seeds: Int?

    @Option(help: "The first seed of a sweep.")
    var from: UInt64 = 1

    @Flag(help: "Print the run's trace (in a sweep: every run's).")
    var trace = false

    @Flag(help: "Print the run's plan: its steps.")
    var plan = false

    @Flag(help: "Print the plans (with --seed, its; with --seeds, each) without running them: what a seed's mix makes.")
    var dryRun = false

    @Flag(help: "Shrink a failing run to fewer steps that still break the same invariant, and print it.")
    var shrink = false

    @Option(help: ArgumentHelp("Run only these steps of the seed's plan (a shrunk plan, as --shrink prints it).", valueName: "i,j,…"))
    var keep: String?

    @Option(help: ArgumentHelp("Run the plan in this JSON file (as --save-plan writes it) instead of a seed's; with --seeds N, its steps under N schedules.", valueName: "path"))
    var planFile: String?

    @Option(help: ArgumentHelp("Write the run's plan (the shrunk one, with --shrink) to this JSON file.", valueName: "path"))
    var savePlan: String?

    @Option(help: ArgumentHelp("End the activity at this frame instead of --frames (a shrunk plan's end; the plan is still made as for --frames).", valueName: "frame"))
    var cut: Int?

    @Option(help: "Put a fixed defect back: \(SimulationBugs.names.joined(separator: ", ")).")
    var bug: String?

    @Option(help: "Frames (20 ms) of activity per run.")
    var frames = 400

    @Option(help: "Whole nodes per run (2–4); a browser with the first one's call page open joins them.")
    var nodes = 3

    @Flag(help: "Plans without faults (actions only).")
    var noFaults = false

    @Flag(help: "Every seed draws its steps from one uniform mix, as plans were made before each seed picked its own mix of actions, faults, nodes and reordering first (swarm testing, the default).")
    var noSwarm = false

    @Flag(help: "Node b takes its calls' audio from a deliberately unsafe session that the app activates when it answers and the provider activates again (the bug the node's audio ownership rule prevents): what a sweep shows of it.")
    var unsafeSession = false

    @Option(help: ArgumentHelp("Each job waits this many microseconds before it runs, as on a loaded host. The trace must not change: a run that differs with it follows the wall clock somewhere.", valueName: "µs"))
    var slowHost: UInt32 = 0

    @Flag(help: "After the runs, print which phase × event pairs of a call's leg they visited, against those the leg's unit tests reach (--reachable), and which phase × input pairs of SIP dialogs, against those the SIP dialog's unit tests reach (--sip-reachable); less those a node cannot reach (--unreachable).")
    var coverage = false

    @Option(help: ArgumentHelp("The pairs the leg's unit tests reach, one a line (made by scripts/leg-coverage).", valueName: "path"))
    var reachable = "docs/leg-pairs.txt"

    @Option(help: ArgumentHelp("The pairs the SIP dialog's unit tests reach, one a line (made by scripts/leg-coverage).", valueName: "path"))
    var sipReachable = "docs/sip-pairs.txt"

    @Option(help: ArgumentHelp("The pairs the unit tests reach that a node cannot, each with the guard that keeps it out ('leg: PAIR — why' or 'sip: PAIR — why'). A sweep that visits one says so: the reason is wrong.", valueName: "path"))
    var unreachable = "docs/unreachable-pairs.txt"

    @Flag(help: "Print every seed's summary line in a sweep (its trace's digest), not only failures.")
    var list = false

    @Flag(help: "Stop a sweep at its first failure.")
    var stopAtFirst = false

    @Flag(help: "List the invariants and what each means.")
    var invariants = false

    @Flag(help: "Print the nodes' own log lines (to standard error).")
    var log = false

    func validate() throws {
        if !invariants, seed == nil, seeds == nil, planFile == nil { throw ValidationError("give --seed K (one run), --seeds N (a sweep) or --plan-file PATH") }
        if planFile != nil, seed != nil { throw ValidationError("--plan-file has its own seed; --seeds N runs its steps under N schedules") }
        if seed != nil, seeds != nil { throw ValidationError("give either --seed or --seeds, not both") }
        if let seeds, seeds < 1 { throw ValidationError("--seeds must be at least 1") }
        if !(2...4).contains(nodes) { throw ValidationError("--nodes must be 2 to 4") }
        if frames < 50 { throw ValidationError("--frames must be at least 50 (one second)") }
        if keep != nil || cut != nil, seed == nil { throw ValidationError("--keep and --cut go with --seed") }
        if let keep, keep.split(separator: ",").contains(where: { Int($0) == nil }) {
            throw ValidationError("--keep takes the places of steps, as in --keep 0,3,7")
        }
        if let bug, !SimulationBugs.names.contains(bug) {
            throw ValidationError("no such bug '\(bug)'; known: \(SimulationBugs.names.joined(separator: ", "))")
        }
    }

    func run() throws {
        if invariants {
            for invariant in Invariant.allCases where invariant != .setUp { print("\(invariant.rawValue): \(invariant.meaning)") }
            return
        }
        if !log { LoggingSystem.bootstrap { _ in SwiftLogNoOpLogHandler() } }
        var options = SimOptions()
        options.frames = frames
        options.nodes = nodes
        options.faults = !noFaults
        options.reintroducedBug = bug
        options.swarm = !noSwarm
        options.unsafeSession = unsafeSession
        options.slowHost = slowHost
        let runner = SimulationRunner(options: options) { seed in
            csimhost_seed(seed)
            csimhost_set_enabled(1)
        } setHostTime: { time in
            // From a fixed day, so the same run reads the same times.
            let (seconds, attoseconds) = time.components
            csimhost_set_time(1_700_000_000_000_000_000 + seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
        }
        if coverage {
            LegCoverage.start()
            SIPDialogCoverage.start()
        }
        defer { if coverage { printCoverage() } }
        if dryRun {
            let first = seed ?? from
            for each in first..<(first + UInt64(seed == nil ? (seeds ?? 1) : 1)) { printPlan(runner.plan(seed: each)) }
            return
        }
        if seed != nil || (planFile != nil && seeds == nil) {
            var made: SimPlan
            if let planFile {
                do { made = try SimPlan(json: String(contentsOfFile: planFile, encoding: .utf8)) } catch {
                    throw ValidationError("cannot read a plan from \(planFile): \(error)")
                }
            } else {
                made = runner.plan(seed: seed!)
            }
            if let keep { made = made.keeping(keep.split(separator: ",").compactMap { Int($0) }) }
            if let cut { made.frames = min(made.frames, max(1, cut)) }
            let outcome = runner.run(made)
            if plan { printPlan(outcome.plan) }
            if let savePlan, !(shrink && outcome.failure != nil) { try outcome.plan.json().write(toFile: savePlan, atomically: true, encoding: .utf8) }
            if trace { outcome.trace.forEach { print($0) } }
            report(outcome)
            if let failure = outcome.failure {
                if shrink { shrinkAndPrint(outcome, failure: failure, runner: runner) }
                throw ExitCode(1)
            }
            return
        }
        try sweep(runner)
    }

    /// The pairs visited against those the unit tests reach: how many, and which were not; the
    /// leg's, then SIP dialogs'.
    private func printCoverage() {
        let cannot = Self.unreachablePairs(unreachable)
        Self.printCoverage(LegCoverage.visited, reachable: reachable, cannot: cannot["leg"] ?? [], prefix: "coverage", tag: "",
                           what: "phase × event pairs the leg's unit tests reach")
        Self.printCoverage(SIPDialogCoverage.visited, reachable: sipReachable, cannot: cannot["sip"] ?? [], prefix: "sip coverage", tag: " (sip)",
                           what: "phase × input pairs the SIP dialog's unit tests reach")
    }

    /// The pairs a node cannot reach, by kind (`leg`, `sip`), from lines `KIND: PAIR — why`.
    static func unreachablePairs(_ path: String) -> [String: Set<String>] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return [:] }
        var pairs: [String: Set<String>] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let kind = String(line[..<colon])
            let rest = line[line.index(after: colon)...]
            let pair = rest.components(separatedBy: " — ")[0].trimmingCharacters(in: .whitespaces)
            if !pair.isEmpty { pairs[kind, default: []].insert(pair) }
        }
        return pairs
    }

    private static func printCoverage(_ visited: Set<String>, reachable: String, cannot: Set<String>, prefix: String, tag: String, what: String) {
        guard let text = try? String(contentsOfFile: reachable, encoding: .utf8) else {
            print("\(prefix): \(visited.count) pairs visited (no list of reachable pairs at \(reachable): scripts/leg-coverage makes it)")
            return
        }
        let tested = Set(text.split(separator: "\n").map(String.init).filter { !$0.isEmpty && !$0.hasPrefix("#") })
        let expected = tested.subtracting(cannot)
        let hit = visited.intersection(expected), beyond = visited.subtracting(tested)
        print("\(prefix): \(hit.count) of the \(expected.count) \(what) and a node can were visited"
              + " (\(expected.isEmpty ? 0 : 100 * hit.count / expected.count) %); \(tested.intersection(cannot).count) more they reach"
              + " a node cannot (each with its reason in the --unreachable list); \(beyond.count) more the unit tests never reach")
        for pair in expected.subtracting(visited).sorted() { print("  not visited\(tag): \(pair)") }
        for pair in visited.intersection(cannot).sorted() { print("  visited though listed as unreachable\(tag): \(pair)") }
        for pair in beyond.sorted() { print("  beyond the unit tests\(tag): \(pair)") }
    }

    private func report(_ outcome: SimOutcome) {
        var summary = "seed \(outcome.plan.seed): \(outcome.plan.steps.count) steps, \(outcome.calls) calls, \(outcome.frames) frames, trace \(outcome.digest)"
        if outcome.foreignJobs > 0 { summary += " (\(outcome.foreignJobs) jobs from other threads: a replay may differ)" }
        if let failure = outcome.failure {
            print("\(summary): FAILED \(failure)")
        } else {
            print("\(summary): ok")
        }
    }

    private func printPlan(_ plan: SimPlan) {
        print("plan of seed \(plan.seed): \(plan.frames) frames")
        if let swarm = plan.swarm { for line in swarm.description.split(separator: "\n") { print("  \(line)") } }
        for step in plan.steps { print("  \(step)") }
    }

    private func shrinkAndPrint(_ outcome: SimOutcome, failure: SimFailure, runner: SimulationRunner) {
        print("shrinking seed \(outcome.plan.seed) (\(outcome.plan.steps.count) steps) while it breaks \(failure.invariant)…")
        let (shrunk, shrunkOutcome) = runner.shrink(outcome.plan, failure: failure) { runs, candidate in
            if runs % 10 == 0 { print("  \(runs) runs, trying \(candidate.steps.count) steps") }
        }
        print("shrunk to \(shrunk.steps.count) steps over \(shrunk.frames) frames:")
        printPlan(shrunk)
        let original = runner.plan(seed: shrunk.seed)
        var replay = "callnode-sim --seed \(shrunk.seed) --keep \(original.places(of: shrunk).map(String.init).joined(separator: ","))"
        replay += frames != 400 ? " --frames \(frames)" : ""
        replay += shrunk.frames != frames ? " --cut \(shrunk.frames)" : ""
        replay += bug.map { " --bug \($0)" } ?? ""
        replay += nodes != 3 ? " --nodes \(nodes)" : ""
        replay += noFaults ? " --no-faults" : ""
        replay += noSwarm ? " --no-swarm" : ""
        replay += unsafeSession ? " --unsafe-session" : ""
        print("replay it: \(replay) --trace")
        if let savePlan {
            do {
                try shrunk.json().write(toFile: savePlan, atomically: true, encoding: .utf8)
                print("the shrunk plan is in \(savePlan): callnode-sim --plan-file \(savePlan) --trace")
            } catch {
                print("cannot write \(savePlan): \(error)")
            }
        }
        if let shrunkOutcome {
            print("its trace:")
            shrunkOutcome.trace.forEach { print("  \($0)") }
        }
    }

    private func sweep(_ runner: SimulationRunner) throws {
        let count = seeds ?? 1
        // With --plan-file: the file's steps under each seed's schedule.
        var fixed: SimPlan?
        if let planFile {
            do { fixed = try SimPlan(json: String(contentsOfFile: planFile, encoding: .utf8)) } catch {
                throw ValidationError("cannot read a plan from \(planFile): \(error)")
            }
        }
        let started = ContinuousClock.now
        var failed: [SimOutcome] = []
        for seed in from..<(from + UInt64(count)) {
            let outcome = runner.run(fixed.map { SimPlan(seed: seed, frames: $0.frames, steps: $0.steps, swarm: $0.swarm) } ?? runner.plan(seed: seed))
            if trace { outcome.trace.forEach { print($0) } }
            if outcome.failure != nil {
                failed.append(outcome)
                report(outcome)
                fflush(nil)
                if stopAtFirst { break }
            } else if list || outcome.foreignJobs > 0 {
                report(outcome)
            }
            let done = Int(seed - from) + 1
            if done % 50 == 0 || done == count {
                let elapsed = Double((ContinuousClock.now - started).components.seconds) + Double((ContinuousClock.now - started).components.attoseconds) / 1e18
                print("… \(done)/\(count) seeds, \(failed.count) failed, \(String(format: "%.1f", Double(done) / max(elapsed, 0.001))) seeds/s")
                fflush(nil)
            }
        }
        if failed.isEmpty {
            print("all \(count) seeds kept every invariant")
            return
        }
        print("\(failed.count) of \(count) seeds broke an invariant: \(failed.map { "\($0.plan.seed)" }.joined(separator: " "))")
        if let first = failed.first {
            print("the first at seed \(first.plan.seed) (\(first.plan.seed - from + 1) seeds into the sweep)")
        }
        if shrink, let first = failed.first, let failure = first.failure {
            shrinkAndPrint(first, failure: failure, runner: runner)
        }
        throw ExitCode(1)
    }
}
