import CallNodeSimulation
import CallNodeTestSupport
import Foundation
import Testing

/// `callnode-sim`: whole nodes under seeded actions, faults and schedules. Each run is a child
/// process (the simulator takes over its process's Swift concurrency while it runs), at most
/// two at a time (one per core) and at a low priority: the simulator keeps its cores busy only
/// with what the suite's real-time tests (sockets, child nodes answering within seconds) leave.
@Suite struct SimulatorTests {
    static let processes = TestSlots(capacity: 2)

    static func sim(_ arguments: [String]) async throws -> (status: Int32, output: String) {
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("callnode-sim-\(UUID()).log").path
        defer { try? FileManager.default.removeItem(atPath: log) }
        let executable = try BuildProducts.executable("callnode-sim")
        let status = try await processes.withSlots(1) {
            try await ChildProcess.running("/usr/bin/nice", ["-n", "15", executable] + arguments, output: log)
        }
        return (status, (try? String(contentsOfFile: log, encoding: .utf8)) ?? "")
    }

    /// The sweep CI runs: 240 seeds, every invariant kept (two processes of 120 seeds each, side
    /// by side: seeds are independent, and a seed's run is the same in any process).
    /// With `--coverage`: which phase × event pairs of a call's leg the sweep visited, against
    /// those the leg's unit tests reach (`docs/leg-pairs.txt`), and which phase × input pairs of
    /// SIP dialogs, against those the SIP dialog's unit tests reach (`docs/sip-pairs.txt`), less
    /// those a node cannot reach (`docs/unreachable-pairs.txt`, each with the guard that keeps
    /// it out). The two halves together visit every pair when this was written (2026-12-02:
    /// 122 of 122 and 76 of 76, with short timers and the outages that outlast them, the app's
    /// ICE restarts, DTLS-keyed seeds, a SIP peer other than a node, the near misses, audio
    /// sessions slow to activate, one-way breaks, stacks that report late, jobs held back,
    /// actions as the peer's end arrives, gatherings that end late, BYEs that land as a glare
    /// retry fires); the floors leave a margin of one leg pair and two SIP pairs for those that
    /// hang on one seed's draws (BENCHMARKS.md lists them), so a change that makes the sweep
    /// reach less of the call shows; and neither visits a pair listed as unreachable (its
    /// reason would be wrong).
    @Test func aSweepOfSeedsKeepsEveryInvariant() async throws {
        let reachable = Self.root + "/docs/leg-pairs.txt", sipReachable = Self.root + "/docs/sip-pairs.txt"
        let coverage = ["--coverage", "--reachable", reachable, "--sip-reachable", sipReachable,
                        "--unreachable", Self.root + "/docs/unreachable-pairs.txt"]
        async let first = Self.sim(["--seeds", "120", "--from", "1"] + coverage)
        async let second = Self.sim(["--seeds", "120", "--from", "121"] + coverage)
        var missed: [Set<String>] = [], sipMissed: [Set<String>] = []
        for (status, output) in try await [first, second] {
            #expect(status == 0, "\(output.split(separator: "\n").filter { $0.contains("FAILED") || $0.contains("broke") }.joined(separator: "\n"))")
            #expect(output.contains("all 120 seeds kept every invariant"), "\(output.suffix(2_000))")
            #expect(output.contains("phase × event pairs the leg's unit tests reach and a node can were visited"), "\(output.suffix(2_000))")
            #expect(output.contains("phase × input pairs the SIP dialog's unit tests reach and a node can were visited"), "\(output.suffix(2_000))")
            let lines = output.split(separator: "\n")
            let wronglyUnreachable = lines.filter { $0.contains("visited though listed as unreachable") }
            #expect(wronglyUnreachable.isEmpty, "\(wronglyUnreachable.joined(separator: "\n"))")
            missed.append(Set(lines.filter { $0.hasPrefix("  not visited: ") }.map { String($0.dropFirst(15)) }))
            sipMissed.append(Set(lines.filter { $0.hasPrefix("  not visited (sip): ") }.map { String($0.dropFirst(21)) }))
        }
        let pairs = { (path: String) in try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").filter { !$0.isEmpty && !$0.hasPrefix("#") } }
        let cannot = try String(contentsOfFile: Self.root + "/docs/unreachable-pairs.txt", encoding: .utf8).split(separator: "\n")
            .filter { !$0.hasPrefix("#") }.map { $0.components(separatedBy: " — ")[0] }
        let expected = try pairs(reachable).filter { !cannot.contains("leg: \($0)") }
        let sipExpected = try pairs(sipReachable).filter { !cannot.contains("sip: \($0)") }
        let visited = expected.count - missed[0].intersection(missed[1]).count
        let sipVisited = sipExpected.count - sipMissed[0].intersection(sipMissed[1]).count
        let unvisited = missed[0].intersection(missed[1]).sorted() + sipMissed[0].intersection(sipMissed[1]).sorted().map { "sip: " + $0 }
        #expect(expected.count > 100 && visited >= 121, "the sweep visited \(visited) of \(expected.count) leg pairs; not: \(unvisited)")
        #expect(sipExpected.count > 60 && sipVisited >= 74, "the sweep visited \(sipVisited) of \(sipExpected.count) SIP dialog pairs; not: \(unvisited)")
    }

    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path

    /// A seed prints the same trace every time, alone or within a sweep.
    @Test func aSeedReplaysByteForByte() async throws {
        let one = try await Self.sim(["--seed", "17", "--trace"])
        let again = try await Self.sim(["--seed", "17", "--trace"])
        #expect(one.status == 0 && again.status == 0)
        #expect(one.output == again.output)
        #expect(one.output.split(separator: "\n").count > 20, "a trace of something: \(one.output)")
        // The summary line ends with the trace's digest.
        let alone = try #require(one.output.split(separator: "\n").last { $0.hasPrefix("seed 17:") })
        let sweep = try await Self.sim(["--seeds", "3", "--from", "16", "--list"])
        let inSweep = try #require(sweep.output.split(separator: "\n").first { $0.hasPrefix("seed 17:") })
        #expect(inSweep == alone, "the sweep's run of seed 17 differs from its replay")
        // Whatever ran before it in the process: seeds 7…12 first in one sweep, after six others
        // in another.
        let later = try await Self.sim(["--seeds", "12", "--from", "1", "--list"])
        let first = try await Self.sim(["--seeds", "6", "--from", "7", "--list"])
        let summaries = { (output: String) in output.split(separator: "\n").filter { line in (7...12).contains { line.hasPrefix("seed \($0):") } } }
        #expect(summaries(later.output).count == 6)
        #expect(summaries(later.output) == summaries(first.output))
        // Every seed of a sweep, run again: a refused action quotes a call by its number (a
        // node's ID for it is random), its dialogs' glare waits are drawn from the run's seed. A
        // seed whose summary says a job came from another thread may differ, as it says; every
        // other one must not.
        let twice = try await Self.sim(["--seeds", "12", "--from", "1", "--list"])
        let all = { (output: String) in output.split(separator: "\n").filter { $0.hasPrefix("seed ") }.map(String.init) }
        let (first12, second12) = (all(later.output), all(twice.output))
        #expect(first12.count == 12 && second12.count == 12)
        let foreign = { (line: String) in line.contains("from other threads") }
        let compared = zip(first12, second12).filter { !foreign($0.0) && !foreign($0.1) }
        #expect(compared.count >= 9, "most seeds had jobs from other threads: \(first12) \(second12)")
        for (one, other) in compared {
            guard one.hasPrefix("seed 2:") else {
                #expect(one == other)
                continue
            }
            // Seed 2's plan (since the calm windows) prints a second trace in about one run in
            // five, at full speed only: a race with work on another thread that the scheduler
            // does not see as a job. Not found yet (BENCHMARKS, `sim`, fourth step).
            withKnownIssue("seed 2 sometimes takes another order in a race with another thread", isIntermittent: true) {
                #expect(one == other)
            }
        }
    }

    /// A run's trace does not depend on how fast the host runs it: seed 20 (DTLS keys) on a host
    /// slowed to a tenth of a millisecond a job prints what it prints at full speed. OpenSSL's
    /// resends of a DTLS flight followed the wall clock: on a loaded machine a flight went again
    /// that the run's time had not yet asked for (seed 20 printed another trace slowed, before).
    @Test func aSeedReplaysOnASlowHost() async throws {
        let fast = try await Self.sim(["--seed", "20"])
        let slow = try await Self.sim(["--seed", "20", "--slow-host", "100"])
        let summary = { (output: String) in output.split(separator: "\n").first { $0.hasPrefix("seed 20:") }.map(String.init) }
        #expect(fast.status == 0 && slow.status == 0)
        #expect(summary(fast.output) != nil)
        #expect(summary(fast.output) == summary(slow.output), "seed 20 differs on a slow host:\n\(slow.output)")
    }

    /// Each fixed defect, put back, is found within 50 seeds, by the rule it breaks: each seed
    /// picks its own mix first (swarm), so a mix rich in mutes and holds comes soon (2026-11-30:
    /// resume-unmutes at seed 4, mute-lost-before-media at seed 1; with SIP calls in half the
    /// mixes, at seeds 7 and 2; one mix for every seed found them at seeds 31 and 83).
    @Test(arguments: ["resume-unmutes", "mute-lost-before-media"])
    func aReintroducedBugIsFound(bug: String) async throws {
        let (status, output) = try await Self.sim(["--seeds", "50", "--bug", bug, "--stop-at-first"])
        #expect(status == 1, "\(bug) was not found in 50 seeds:\n\(output)")
        #expect(output.contains("INVARIANT muted-or-held-is-silent"), "\(output)")
    }

    /// A seed's trace begins with the mix it picked; `--no-swarm` still makes the plans of one
    /// mix for every seed (the defect found at seed 31 then is found there still).
    @Test func aSeedsTraceSaysItsMixAndTheUniformMixIsKept() async throws {
        let traced = try await Self.sim(["--seed", "4", "--trace", "--bug", "resume-unmutes"])
        let lines = traced.output.split(separator: "\n")
        #expect(lines.first?.hasPrefix("mix: ") == true && lines.first?.contains("actions: dial×") == true, "\(lines.prefix(4))")
        #expect(lines.dropFirst().first?.hasPrefix("mix: faults: ") == true && lines.dropFirst(2).first?.hasPrefix("mix: nodes acting: ") == true)
        #expect(traced.status == 1)
        let uniform = try await Self.sim(["--seed", "31", "--no-swarm", "--bug", "resume-unmutes"])
        #expect(uniform.status == 1 && uniform.output.contains("INVARIANT muted-or-held-is-silent"), "\(uniform.output)")
        #expect(!uniform.output.contains("mix: "))
    }

    /// A failing seed shrinks to fewer steps that still break the same rule, and the replay
    /// command it prints shows it again.
    @Test func aFailingSeedShrinksToAShorterPlanThatStillFails() async throws {
        let (status, output) = try await Self.sim(["--seed", "4", "--bug", "resume-unmutes", "--shrink"])
        #expect(status == 1)
        let original = try #require(output.split(separator: "\n").first { $0.hasPrefix("seed 4:") })
        let originalSteps = try #require(Int(original.split(separator: " ")[2]))
        let shrunkLine = try #require(output.split(separator: "\n").first { $0.hasPrefix("shrunk to ") })
        let shrunkSteps = try #require(Int(shrunkLine.split(separator: " ")[2]))
        #expect(shrunkSteps < originalSteps, "\(shrunkLine) from \(originalSteps)")
        let replay = try #require(output.split(separator: "\n").first { $0.hasPrefix("replay it: callnode-sim ") })
        let arguments = replay.dropFirst("replay it: callnode-sim ".count).split(separator: " ").map(String.init)
        let again = try await Self.sim(arguments)
        #expect(again.status == 1)
        #expect(again.output.contains("INVARIANT muted-or-held-is-silent"), "\(again.output)")
    }

    /// Plans that found defects, kept (as JSON, so that a later change to how seeds make plans
    /// leaves them as they were) once the defects were fixed. The hang-up the simulator found
    /// ending as failed on the other side is kept as a test of its own as well
    /// (`SignalingResumptionTests.aCallHungUpWhileItsSignalingWasDown…`).
    @Test(arguments: [
        // c's microphone fails between calls; c then dials b: the call failed at once ("the audio
        // devices could not open: unplugged") instead of opening c's other microphone.
        #"{"frames":400,"seed":36,"steps":[{"frame":33,"move":{"microphoneFails":{"node":2}}},{"frame":61,"move":{"dial":{"from":2,"to":1}}}]}"#,
    ])
    func aPlanThatFoundADefectPasses(plan: String) async throws {
        try await Self.passes(plan: plan, schedules: nil)
    }

    /// Races the simulator found, each kept as its steps under many schedules: the order that
    /// lost is one of them on the build that found it, and a schedule-only change must not
    /// bring any of them back.
    @Test(arguments: [
        // The caller hangs up as the callee declines: the callee's end action found the leg gone
        // (it had just ended on the caller's end) and failed, and a failed end action ended the
        // call as failed, on either side.
        #"{"frames":80,"seed":55,"steps":[{"frame":5,"move":{"dial":{"from":0,"to":1}}},{"frame":60,"move":{"hangUp":{"node":0,"pick":0}}},{"frame":60,"move":{"hangUp":{"node":1,"pick":0}}}]}"#,
        // a holds its call with the page, then resumes and mutes it at once: the first packet
        // after the hold carried, as Opus's in-band FEC, a's last frame from before the hold, and
        // the page played it (a's voice after the mute). The encoder now starts afresh on resume.
        #"{"frames":400,"seed":1343,"steps":[{"frame":36,"move":{"dial":{"from":3,"to":2}}},{"frame":71,"move":{"answer":{"node":0,"pick":0}}},{"frame":109,"move":{"dial":{"from":2,"to":1}}},{"frame":144,"move":{"answer":{"node":3,"pick":1}}},{"frame":145,"move":{"hold":{"node":0,"on":true,"pick":1}}},{"frame":184,"move":{"hold":{"node":0,"on":false,"pick":1}}},{"frame":184,"move":{"mute":{"node":0,"on":true,"pick":1}}},{"frame":238,"move":{"answer":{"node":3,"pick":2}}},{"frame":358,"move":{"crash":{"node":3}}},{"frame":476,"move":{"restart":{"node":3}}}]}"#,
    ])
    func aRaceThatFoundADefectPassesUnderManySchedules(plan: String) async throws {
        try await Self.passes(plan: plan, schedules: 120)
    }

    /// Two calls between a and b, merged on both sides, close a loop of conferences: a feedback
    /// path that builds up until it clips, where which tone stands out is the loop's delay's
    /// doing (seed 721 failed `audio-both-ways` on it, with every microphone read whole). Calls on
    /// such a loop are not judged while it stands; a single conference is, and so are the calls
    /// once the loop is broken.
    @Test func aLoopOfConferencesIsNotJudgedWhileItStands() async throws {
        let dials = #"{"frame":1,"move":{"dial":{"from":0,"to":1}}},{"frame":5,"move":{"dial":{"from":0,"to":1}}},"#
            + #"{"frame":30,"move":{"answer":{"node":1,"pick":-1001}}},{"frame":32,"move":{"answer":{"node":1,"pick":-1005}}},"#
            + #"{"frame":60,"move":{"merge":{"node":1,"pick":0,"with":1}}}"#
        let loop = #"{"frames":400,"seed":7,"steps":["# + dials
            + #",{"frame":70,"move":{"merge":{"node":0,"pick":0,"with":1}}},{"frame":300,"move":{"unmerge":{"node":0,"pick":0}}}]}"#
        let output = try await Self.passes(plan: loop, schedules: nil)
        #expect(output.contains("audio: #1, #2 form a loop of conferences"), "\(output)")
        #expect(output.contains("audio: the loop of conferences (#1, #2) is broken"), "\(output)")
        // One side's conference alone is no loop: both calls stay judged.
        let one = try await Self.passes(plan: #"{"frames":400,"seed":7,"steps":["# + dials + "]}", schedules: nil)
        #expect(one.contains("b merges #1 and #2: done"), "\(one)")
        #expect(!one.contains("loop of conferences"), "\(one)")
        // Seed 721's shrunk plan: the loop, ICE restarts and five seconds of loss.
        let found = try String(contentsOfFile: Self.root + "/docs/plans/both-merge-one-way.json", encoding: .utf8)
        #expect(try await Self.passes(plan: found, schedules: nil).contains("form a loop of conferences"))
    }

    @discardableResult
    static func passes(plan: String, schedules: Int?) async throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("callnode-sim-plan-\(UUID()).json").path
        try plan.write(toFile: path, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(atPath: path) }
        let (status, output) = try await Self.sim(["--plan-file", path] + (schedules.map { ["--seeds", "\($0)"] } ?? ["--trace"]))
        #expect(status == 0, "\(output)")
        #expect(output.contains(schedules == nil ? ": ok" : "kept every invariant"))
        return output
    }

    /// Plans are data: the same seed makes the same plan, and a shrunk plan is written down as the
    /// places of the steps it kept.
    @Test func aPlanIsItsSeedsAndAShrunkPlanItsPlaces() throws {
        let options = SimOptions()
        let plan = SimPlan.generate(seed: 99, options: options)
        #expect(plan == SimPlan.generate(seed: 99, options: options))
        #expect(plan != SimPlan.generate(seed: 100, options: options))
        #expect(plan.steps.map(\.frame) == plan.steps.map(\.frame).sorted())
        let places = [0, 2, plan.steps.count - 1]
        let shrunk = plan.keeping(places)
        #expect(shrunk.steps.count == 3)
        #expect(plan.places(of: shrunk) == places)
        #expect(try SimPlan(json: plan.json()) == plan)
        // The mix goes with the plan, and with what is kept of it.
        #expect(plan.swarm != nil && shrunk.swarm == plan.swarm)
        var uniform = options
        uniform.swarm = false
        #expect(SimPlan.generate(seed: 99, options: uniform).swarm == nil)
    }
}
