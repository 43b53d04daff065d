import ArgumentParser
import CallNode
import CallNodeTestKit
@_spi(Benchmarks) import ICE
@_spi(Benchmarks) import Media
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Media figures: CPU per call leg against the bare C calls, how many legs one machine runs
/// in real time, memory per call.
struct MediaBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "media",
        abstract: "CPU per call leg vs bare Opus+SRTP, concurrent legs in real time, memory per call.")

    @Option(help: "Call-seconds per CPU measurement.")
    var seconds = 10

    @Option(help: "CPU measurements (interleaved with the bare loop); the median is reported.")
    var runs = 5

    @Option(help: "Opus bitrate, bit/s (default: the default profile's).")
    var bitrate = OpusConfiguration().bitrate

    @Option(help: "Opus complexity, 0–10.")
    var complexity = 5

    @Option(help: "Leg counts to try in real time, in order; stops at the first with more than 0.5 % late frames.")
    var legs: [Int] = [20, 40, 60, 80, 100, 120, 140, 160, 200]

    @Option(help: "Seconds of real time per leg count.")
    var realTimeSeconds = 5

    @Option(help: "Calls for the memory measurement.")
    var memoryCalls = 50

    @Option(help: "Seconds each leg count runs before its figures start (calls starting, the load settling).")
    var settleSeconds = 3

    @Option(help: ArgumentHelp("Also time the bare loop going through this many encoder and decoder states in turn (the memory as many legs need), beside the one-state loop.", valueName: "N"))
    var bareStates: Int?

    @Flag(help: "With --bare-states N, also time that loop paced as a media lane runs N legs: one frame of each state every 20 ms, then a sleep until the next period.")
    var barePaced = false

    @Option(help: ArgumentHelp("Instants per frame period the real-time clock spreads legs over (a node's clock: 4).", valueName: "N"))
    var phases = 4

    @Flag(help: "Also sweep over real libnice agents on loopback (two per call) instead of the in-memory link.")
    var overLibnice = false

    @Flag(help: "Also sweep with Opus complexity following the clock's load (from --complexity down to 4, and to 0 while frames are late even at 4), past the fixed figure.")
    var followLoad = false

    @Option(help: ArgumentHelp("Draw CPU and late frames against concurrent legs into this PNG (needs gnuplot: apt-get install gnuplot-nox).", valueName: "FILE.png"))
    var plot: String?

    @Option(help: ArgumentHelp("Also sweep a conference: this side's leg of each call on a port of one audio session, all ports joined, so every party hears the others; party counts, in order, each against the bare ceiling timed beside it.", valueName: "PARTIES"))
    var conference: [Int] = []

    @Flag(help: "With --conference: each party's phone is a replay of its packets (speech encoded once, each packet SRTP-protected as it goes; what the node sends it is counted, not decoded), as if the phones were other machines: the process runs the node's side of each call alone.")
    var farEnds = false

    @Option(help: ArgumentHelp("Draw the conference sweep's CPU and late frames against parties into this PNG (gnuplot).", valueName: "FILE.png"))
    var conferencePlot: String?

    @Option(help: ArgumentHelp("With --conference: also run each party count this many rounds as one conference and as plain calls, the two kinds in turn (ABBA), so the machine's drift over minutes falls on both alike; prints in how many rounds each kept up.", valueName: "ROUNDS"))
    var pairedRounds = 0

    func validate() throws {
        guard seconds > 0, runs > 0, realTimeSeconds > 0, memoryCalls > 0 else { throw ValidationError("counts must be positive") }
        if (plot != nil || conferencePlot != nil) && Self.gnuplot() == nil {
            throw ValidationError("--plot and --conference-plot need gnuplot on PATH (apt-get install gnuplot-nox)")
        }
        guard (0...10).contains(complexity) else { throw ValidationError("--complexity is 0–10") }
        if barePaced && bareStates == nil { throw ValidationError("--bare-paced needs --bare-states N") }
        guard legs.allSatisfy({ $0 >= 2 && $0 % 2 == 0 }) else { throw ValidationError("--legs values are even (two per call)") }
        guard conference.allSatisfy({ $0 >= 2 }) else { throw ValidationError("--conference values are at least 2 parties") }
        if conferencePlot != nil && conference.isEmpty { throw ValidationError("--conference-plot needs --conference PARTIES") }
        guard pairedRounds >= 0 else { throw ValidationError("--paired-rounds is 0 or more") }
        if pairedRounds > 0 && conference.isEmpty { throw ValidationError("--paired-rounds needs --conference PARTIES") }
        if farEnds && conference.isEmpty { throw ValidationError("--far-ends needs --conference PARTIES") }
    }

    func run() async throws {
        let speech = SyntheticSpeech.samples(seconds: 10)
        var opus = OpusConfiguration()
        opus.bitrate = bitrate
        opus.complexity = complexity
        var configuration = MediaConfiguration(opus: opus)
        configuration.statisticsInterval = .seconds(3600)

        // 1. CPU per leg, interleaved with the bare loop and with the same call with frames
        //    encrypted end to end.
        var ratios: [Double] = [], legCPU: [Double] = [], bareCPU: [Double] = [], sealedCPU: [Double] = [], manyStates: [Double] = []
        var pacedStates: [Double] = []
        func measuredCall(frameEncryption: Bool) async throws -> Double {
            let clock = MediaClock.manual()
            let call = try await Self.makeCall(clock: clock, speech: speech, configuration: configuration, frameEncryption: frameEncryption)
            let start = BareMediaBenchmark.cpuTime()
            await clock.advance(frames: seconds * 50)
            let callCPU = (BareMediaBenchmark.cpuTime() - start).seconds
            // Both legs must have sent, received and played every frame, or the figure is void.
            let sa = await call.0.statistics, sb = await call.1.statistics
            guard min(sa.packetsSent, sb.packetsSent) == seconds * 50,
                  min(sa.jitterBuffer.packetsPlayed, sb.jitterBuffer.packetsPlayed) >= seconds * 50 - 2,
                  sa.frameDecryptionFailures + sb.frameDecryptionFailures == 0 else {
                throw ValidationError("the measured call did not carry every frame: sent \(sa.packetsSent)/\(sb.packetsSent), played \(sa.jitterBuffer.packetsPlayed)/\(sb.jitterBuffer.packetsPlayed)")
            }
            await call.0.stop(); await call.1.stop()
            return callCPU / Double(2 * seconds)
        }
        for _ in 0..<runs {
            let perLeg = try await measuredCall(frameEncryption: false)
            sealedCPU.append(try await measuredCall(frameEncryption: true))
            let barePerLeg = try Self.bareLoop(frames: 2 * seconds * 50, speech: speech, opus: opus)
            legCPU.append(perLeg); bareCPU.append(barePerLeg); ratios.append(perLeg / barePerLeg)
            if let states = bareStates {
                // Every state runs a few dozen frames: its first ones cost differently.
                manyStates.append(try Self.bareLoop(frames: max(2 * seconds * 50, states * 40), speech: speech, opus: opus, states: states))
                if barePaced {
                    // `seconds` of real time: that many periods of one frame per state each.
                    pacedStates.append(try Self.bareLoop(frames: states * 50 * seconds, speech: speech, opus: opus, states: states, paced: true))
                }
            }
        }
        let median = { (xs: [Double]) in xs.sorted()[xs.count / 2] }
        print(String(format: "media cpu: %.4f s per leg per call-second (bare Opus+SRTP %.4f), ratio %.2f (median of %d; min %.2f, max %.2f); %d kbit/s, complexity %d",
                     median(legCPU), median(bareCPU), median(ratios), runs, ratios.min()!, ratios.max()!, bitrate / 1000, complexity))
        print(String(format: "media cpu with frame encryption: %.4f s per leg per call-second, %+.1f %% over the same call without (median of %d)",
                     median(sealedCPU), (median(sealedCPU) / median(legCPU) - 1) * 100, runs))
        if let states = bareStates {
            print(String(format: "media cpu: bare loop through %d codec states in turn %.4f s per leg per call-second, %+.1f %% over one state (median of %d)",
                         states, median(manyStates), (median(manyStates) / median(bareCPU) - 1) * 100, runs))
            if barePaced {
                // One thread: the share of its 20 ms periods the frames took.
                let duty = median(pacedStates) * Double(states) * 100
                print(String(format: "media cpu: the same %d states paced as a lane runs them (one frame each every 20 ms, then a sleep; %.0f %% of one core) %.4f s per leg per call-second, %.2f× the unpaced %d-state loop, %.2f× the one-state loop (median of %d)",
                             states, duty, median(pacedStates), median(pacedStates) / median(manyStates), states,
                             median(pacedStates) / median(bareCPU), runs))
            }
        }

        // 2. Legs in real time, against the same clock ticking one client that does nothing
        //    (this machine's own scheduling noise, measured in the same run; a clock without
        //    clients does not wake at all).
        let idle = MediaClock(phases: phases)
        idle.add(IdleClient())
        let idleTicking = Task { await idle.run() }
        defer { idleTicking.cancel() }  // also when the sleep throws (the bench was interrupted)
        try await Task.sleep(for: .seconds(realTimeSeconds))
        idleTicking.cancel()
        let idleReport = await idleTicking.value
        let baseline = idleReport.lateFraction(phases: idle.phases)
        print(String(format: "media real time: idle clock, %d of %d phase ticks late (%.2f %%), max start lag %.1f ms",
                     idleReport.lateTicks, idleReport.phaseTicks, baseline * 100, idleReport.maximumLag.seconds * 1000))
        var fixedConfiguration = configuration
        fixedConfiguration.complexityFollowsLoad = false
        let (best, bestCeiling, points) = try await sweep(legs: legs, speech: speech, configuration: fixedConfiguration, baseline: baseline,
                                                          label: "fixed complexity \(complexity)")
        print("media real time: \(best) legs within 0.5 % late frames above the idle clock at complexity \(complexity) (\(ProcessInfo.processInfo.activeProcessorCount) cores)\(Self.ofCeiling(best, bestCeiling))")
        if let plot {
            try Self.draw(points, baselinePercent: baseline * 100, to: plot)
            print("media real time: plot written to \(plot)")
        }
        if overLibnice {
            // The same fixed-complexity sweep over real libnice agents on loopback (two per call,
            // each with its GLib thread): what the in-memory link leaves out.
            let (overIce, iceCeiling, _) = try await sweep(legs: legs, speech: speech, configuration: fixedConfiguration, baseline: baseline,
                                                           label: "fixed complexity \(complexity), real libnice on loopback", overLibnice: true)
            print("media real time: \(overIce) legs within 0.5 % late frames over real libnice at complexity \(complexity)\(Self.ofCeiling(overIce, iceCeiling))")
        }
        if !conference.isEmpty {
            // Parties in one conference: each call's node-side leg on a session port, the
            // ports joined; its peer leg, in this process too, on plain sources (as in the
            // fixed sweep, two legs per call, so the same ceiling applies).
            let (counted, ceiling, conferencePoints) = try await sweep(legs: conference.map { farEnds ? $0 : $0 * 2 }, speech: speech, configuration: fixedConfiguration,
                                                                       baseline: baseline, label: "fixed complexity \(complexity), one conference\(farEnds ? ", far ends replayed" : "")",
                                                                       conference: true, farEnds: farEnds)
            let parties = farEnds ? counted : counted / 2
            print("media real time: \(parties) parties in one conference within 0.5 % late frames above the idle clock at complexity \(complexity) (each hears the others; \(counted) legs\(farEnds ? ", the node's side alone: each far end a replay" : " with their peers"))\(Self.ofCeiling(counted, ceiling))")
            if let conferencePlot {
                try Self.draw(conferencePoints.map { (farEnds ? $0.legs : $0.legs / 2, $0.cpuPercent, $0.latePercent) }, baselinePercent: baseline * 100, to: conferencePlot,
                              title: "CallNode: parties in one conference on one node, each with its peer leg (\(ProcessInfo.processInfo.activeProcessorCount) cores)",
                              xLabel: "parties in one conference")
                print("media real time: conference plot written to \(conferencePlot)")
            }
        }
        if pairedRounds > 0 {
            try await runPairedRounds(speech: speech, configuration: fixedConfiguration, baseline: baseline)
        }
        if followLoad {
            // The same sweep with complexity following the clock's load, from the first count
            // past the fixed figure (the counts below it keep up at full complexity anyway).
            let more = legs.filter { $0 > best }
            let (adapted, _, _) = try await sweep(legs: more, speech: speech, configuration: configuration, baseline: baseline,
                                               label: "complexity following load (from \(complexity))")
            let figure = max(adapted, best)
            print(String(format: "media real time: %d legs within 0.5 %% late frames with complexity following load (%.2f× the fixed figure)",
                         figure, Double(figure) / Double(max(1, best))))
        }

        // 3. Memory per call.
        let before = Self.residentBytes()
        let clock = MediaClock.manual()
        var calls: [(MediaActor, MediaActor)] = []
        for _ in 0..<memoryCalls { calls.append(try await Self.makeCall(clock: clock, speech: speech, configuration: configuration)) }
        await clock.advance(frames: 100)
        let after = Self.residentBytes()
        for call in calls { await call.0.stop(); await call.1.stop() }
        print(String(format: "media memory: %.0f KiB per call (two legs), %d calls", Double(after - before) / 1024 / Double(memoryCalls), memoryCalls))
    }

    /// The bare Opus+SRTP loop's CPU per leg-second over `frames` frames, at the sweep's codec
    /// settings.
    static func bareLoop(frames: Int, speech: [Int16], opus: OpusConfiguration, states: Int = 1, paced: Bool = false) throws -> Double {
        guard let bare = BareMediaBenchmark.run(frames: frames, pcm: speech, bitrate: Int32(opus.bitrate), complexity: Int32(opus.complexity),
                                                expectedLossPercent: Int32(opus.expectedLossPercent), states: states, paced: paced) else {
            throw ValidationError("the bare Opus/SRTP loop failed")
        }
        return bare.seconds / (Double(frames) / 50)
    }

    /// The bare loop's ceiling now: the machine's cores divided by the bare Opus+SRTP loop's
    /// CPU per leg-second, timed over `frames` frames (one encoder and decoder, as in part 1).
    func bareCeiling(speech: [Int16], configuration: MediaConfiguration, frames: Int = 1_000) throws -> (perLeg: Double, legs: Double) {
        let perLeg = try Self.bareLoop(frames: frames, speech: speech, opus: configuration.opus)
        return (perLeg, Double(ProcessInfo.processInfo.activeProcessorCount) / perLeg)
    }

    /// Legs in real time on one clock, count after count, until one has more than 0.5 % late
    /// ticks above the idle clock's. Returns the last count that kept up, the bare ceiling timed
    /// beside it (before and after that count ran: this machine's speed drifts by a quarter
    /// within minutes, so a ceiling timed once at the start can be far from the one the count
    /// met), and each count's CPU and late share.
    ///
    /// With `conference`, each call's first leg reads and plays through a port of one
    /// app-owned audio session (a manual device, fed a frame of capture and drained every
    /// period), all ports joined in one conference.
    ///
    /// With `farEnds` too, each count is the parties and each party's far end is a
    /// ``FarEndPeer`` (its phone's packets replayed, as if it were another machine): the
    /// count's legs are the node's side alone.
    func sweep(legs: [Int], speech: [Int16], configuration: MediaConfiguration, baseline: Double,
               label: String, overLibnice: Bool = false, conference: Bool = false,
               farEnds: Bool = false) async throws -> (Int, Double?, [(legs: Int, cpuPercent: Double, latePercent: Double)]) {
        let replayed = farEnds ? try FarEndPeer.payloads(of: speech, opus: configuration.opus) : []
        var best = 0
        var bestCeiling: Double?
        var points: [(legs: Int, cpuPercent: Double, latePercent: Double)] = []
        for count in legs {
            let ceilingBefore = try bareCeiling(speech: speech, configuration: configuration)
            let clock = MediaClock(phases: phases)
            var calls: [(MediaActor, MediaActor)] = []
            // The node's legs whose far ends are replays, and those far ends.
            var nodeLegs: [MediaActor] = [], farEndPeers: [FarEndPeer] = []
            let parties = farEnds ? count : count / 2
            var agents: [IceAgent] = []
            let backend = ManualRenderingBackend()
            let session = AudioSessionOwner<AppOwned>(name: "conference", configuration: AudioSessionConfiguration(), backend: backend)
            var ports: [SessionPort] = []
            if conference {
                try await session.setVoiceProcessingEnabled(false)
                _ = try await session.activate()
                for _ in 0..<parties { ports.append(try await session.port()) }
                await session.join(ports.map(\.id))
            }
            let device = backend.endpoint("manual")
            let feeding = Task {
                // The conference's device: a frame of capture in, the output drained, each period.
                guard conference else { return }
                let frame = Array(speech.prefix(960))
                while !Task.isCancelled {
                    device.pushCapture(frame)
                    _ = device.pullPlayback(maximum: 48_000)
                    try? await Task.sleep(for: .milliseconds(20))
                }
            }
            defer { feeding.cancel() }
            for index in 0..<parties {
                // Independent calls: each starts its speech somewhere else (an odd step through
                // the ten seconds, so no two are in step).
                let offset = (index * 6_599 * 48) % max(1, speech.count)
                if farEnds {
                    let (leg, farEnd) = try await Self.makeFarEndCall(clock: clock, payloads: replayed, configuration: configuration,
                                                                      offset: offset / configuration.opus.samplesPerFrame,
                                                                      endpoints: (ports[index].source, ports[index].sink))
                    nodeLegs.append(leg)
                    farEndPeers.append(farEnd)
                } else if overLibnice {
                    let (a, b) = try await LoopbackAgents.connectedPair()
                    agents += [a, b]
                    calls.append(try await Self.makeCall(clock: clock, speech: speech, configuration: configuration, speechOffset: offset,
                                                         transports: (IceMediaTransport(agent: a), IceMediaTransport(agent: b))))
                } else {
                    calls.append(try await Self.makeCall(clock: clock, speech: speech, configuration: configuration, speechOffset: offset,
                                                         endpointsA: conference ? (ports[index].source, ports[index].sink) : nil))
                }
            }
            defer { if !agents.isEmpty { let closing = agents; Task { for agent in closing { await agent.close() } } } }
            let ticking = Task { await clock.run() }
            defer { ticking.cancel() }
            // A second to settle (calls starting at once; a load-following clock finding its
            // complexity), then the figures from scratch.
            try await Task.sleep(for: .seconds(settleSeconds))
            clock.restartReport()
            let stretchesBefore = await Self.stretches(calls, nodeLegs)
            let cpuBefore = BareMediaBenchmark.cpuTime(), wallBefore = ContinuousClock.now
            try await Task.sleep(for: .seconds(realTimeSeconds))
            let complexities = await calls.asyncMap { await $0.0.statistics.opusComplexity }
                + nodeLegs.asyncMap { await $0.statistics.opusComplexity }
            let stretchesAfter = await Self.stretches(calls, nodeLegs)
            ticking.cancel()
            let report = await ticking.value
            let cpuPercent = (BareMediaBenchmark.cpuTime() - cpuBefore).seconds / (ContinuousClock.now - wallBefore).seconds
                / Double(ProcessInfo.processInfo.activeProcessorCount) * 100
            for call in calls { await call.0.stop(); await call.1.stop() }
            for leg in nodeLegs { await leg.stop() }
            for farEnd in farEndPeers { clock.remove(farEnd) }
            // Every far end must have heard its party's leg, or the count measured nothing.
            if let deaf = farEndPeers.firstIndex(where: { $0.received == 0 }) {
                throw ValidationError("party \(deaf)'s far end received nothing from the node's leg")
            }
            for agent in agents { await agent.close() }
            agents = []
            feeding.cancel()
            if conference { try await session.deactivate() }
            let ceilingAfter = try bareCeiling(speech: speech, configuration: configuration)
            let ceiling = (ceilingBefore.legs + ceilingAfter.legs) / 2
            let fraction = report.lateFraction(phases: clock.phases)
            points.append((count, cpuPercent, fraction * 100))
            let legSeconds = Double(count) * Double(realTimeSeconds)
            print(String(format: "media real time (%@): %d legs, %d of %d phase ticks late (%.2f %%), max start lag %.1f ms, longest tick %.1f ms, CPU %.0f %%, complexity at the end %d–%d, time stretches per leg-second %.2f lengthened / %.2f shortened; bare ceiling beside it %.0f legs (%.4f / %.4f s per leg-second before / after), this count %.0f %% of it",
                         label, count, report.lateTicks, report.phaseTicks, fraction * 100, report.maximumLag.seconds * 1000,
                         report.maximumTickDuration.seconds * 1000, cpuPercent, complexities.min() ?? 0, complexities.max() ?? 0,
                         Double(stretchesAfter.expanded - stretchesBefore.expanded) / legSeconds,
                         Double(stretchesAfter.compressed - stretchesBefore.compressed) / legSeconds,
                         ceiling, ceilingBefore.perLeg, ceilingAfter.perLeg, Double(count) / ceiling * 100))
            if fraction > baseline + 0.005 { break }
            best = count
            bestCeiling = ceiling
        }
        return (best, bestCeiling, points)
    }

    /// "N legs" with its share of the bare ceiling timed beside it, when there is one.
    static func ofCeiling(_ legs: Int, _ ceiling: Double?) -> String {
        guard let ceiling, legs > 0 else { return "" }
        return String(format: ", %.0f %% of the bare ceiling timed beside it (%.0f legs)", Double(legs) / ceiling * 100, ceiling)
    }

    /// Frames lengthened and pairs shortened by playout's time stretching, over every leg.
    static func stretches(_ calls: [(MediaActor, MediaActor)], _ more: [MediaActor] = []) async -> (expanded: Int, compressed: Int) {
        var total = (expanded: 0, compressed: 0)
        for leg in calls.flatMap({ [$0.0, $0.1] }) + more {
            let buffer = await leg.statistics.jitterBuffer
            total.expanded += buffer.expanded
            total.compressed += buffer.compressed
        }
        return total
    }

    /// A call whose node-side leg reads and plays through `endpoints` and whose far end is a
    /// replay of `payloads` from frame `offset` (``FarEndPeer``), on one in-memory link.
    static func makeFarEndCall(clock: MediaClock, payloads: [[UInt8]], configuration: MediaConfiguration, offset: Int,
                               endpoints: (any AudioSource, any AudioSink)) async throws -> (MediaActor, FarEndPeer) {
        let link = InMemoryMediaLink(clock: clock)
        let toFarEnd = SRTPKey.random(), fromFarEnd = SRTPKey.random()
        let leg = try MediaActor(configuration: configuration, transport: link.a, keys: MediaKeys(outbound: toFarEnd, inbound: fromFarEnd),
                                 source: endpoints.0, sink: endpoints.1, clock: clock)
        let farEnd = try FarEndPeer(transport: link.b, key: fromFarEnd, payloads: payloads, offset: offset,
                                    payloadType: configuration.payloadType, samplesPerFrame: configuration.opus.samplesPerFrame)
        try await leg.start()
        clock.add(farEnd)
        return (leg, farEnd)
    }

    /// - Parameter speechOffset: Where in the speech each leg starts (samples; B starts half the
    ///   speech further on), so calls of a sweep talk independently instead of all encoding
    ///   the same syllable at the same instant.
    static func makeCall(clock: MediaClock, speech: [Int16], configuration: MediaConfiguration,
                         frameEncryption: Bool = false, plainRTP: Bool = false, speechOffset: Int = 0,
                         transports: (any MediaTransport, any MediaTransport)? = nil,
                         endpointsA: (any AudioSource, any AudioSink)? = nil) async throws -> (MediaActor, MediaActor) {
        let link = InMemoryMediaLink(clock: clock)
        let ends: (any MediaTransport, any MediaTransport) = transports ?? (link.a, link.b)
        // Plain RTP (a SIP phone without SRTP): no key either way.
        let keyA: SRTPKey? = plainRTP ? nil : SRTPKey.random(), keyB: SRTPKey? = plainRTP ? nil : SRTPKey.random()
        let frameA = FrameEncryptionKey.random(), frameB = FrameEncryptionKey.random()
        let sourceA = WAVFileSource(samples: speech, format: AudioFormat(), loops: true)
        let sourceB = WAVFileSource(samples: speech, format: AudioFormat(), loops: true)
        if speechOffset > 0 {
            sourceA.skip(samples: speechOffset)
            sourceB.skip(samples: speechOffset + speech.count / 2)
        }
        let a = try MediaActor(configuration: configuration, transport: ends.0,
                               keys: MediaKeys(outbound: keyA, inbound: keyB, frameEncryption: frameEncryption ? FrameKeys(outbound: frameA, inbound: frameB) : nil),
                               source: endpointsA?.0 ?? sourceA, sink: endpointsA?.1 ?? NullSink(), clock: clock)
        let b = try MediaActor(configuration: configuration, transport: ends.1,
                               keys: MediaKeys(outbound: keyB, inbound: keyA, frameEncryption: frameEncryption ? FrameKeys(outbound: frameB, inbound: frameA) : nil),
                               source: sourceB, sink: NullSink(), clock: clock)
        try await a.start()
        try await b.start()
        return (a, b)
    }

    static func residentBytes() -> Int {
        guard let file = fopen("/proc/self/statm", "r") else { return 0 }
        defer { fclose(file) }
        var size = 0, resident = 0
        _ = withUnsafeMutablePointer(to: &size) { s in withUnsafeMutablePointer(to: &resident) { r in
            withVaList([s, r]) { vfscanf(file, "%ld %ld", $0) }
        } }
        return resident * Int(sysconf(Int32(_SC_PAGESIZE)))
    }
}
