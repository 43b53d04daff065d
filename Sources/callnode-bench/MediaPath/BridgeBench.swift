import CallNodeTestKit
import ArgumentParser
import AudioSession
import CallNode
import Foundation

/// The audio session's bridge: CPU per port per call-second through the session (its lock,
/// the capture copied to every port, a conference's mixes, the output's sum), against a bare
/// loop doing the same arithmetic on plain arrays in the same run; and whole call legs in real
/// time with their ports in one conference, against the same legs without the bridge.
struct BridgeBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bridge",
        abstract: "Audio bridge CPU per port vs a bare summing loop; legs in real time with 2, 4, 8 ports in one conference.")

    @Option(help: "Ports in one conference, each measured.")
    var ports: [Int] = [2, 4, 8]

    @Option(help: "Call-seconds per CPU measurement.")
    var seconds = 60

    @Option(help: "CPU measurements per port count (interleaved with the bare loop); the median is reported.")
    var runs = 5

    @Option(help: "Seconds of real time per leg count.")
    var realTimeSeconds = 5

    @Flag(help: "One JSON object per measurement on stdout.")
    var json = false

    func validate() throws {
        guard seconds > 0, runs > 0, realTimeSeconds > 0, ports.allSatisfy({ $0 >= 1 && $0 <= 64 }) else {
            throw ValidationError("counts must be positive (ports 1–64)")
        }
    }

    func run() async throws {
        let median = { (xs: [Double]) in xs.sorted()[xs.count / 2] }
        for count in ports {
            var bridge: [Double] = [], bare: [Double] = []
            for _ in 0..<runs {
                bridge.append(try await Self.sessionCPU(ports: count, frames: seconds * 50))
                bare.append(Self.bareCPU(ports: count, frames: seconds * 50))
            }
            let perPort = median(bridge) / Double(count * seconds), barePerPort = median(bare) / Double(count * seconds)
            if json {
                print("{\"group\":\"bridge\",\"subject\":\"cpu\",\"ports\":\(count),\"cpu_us_per_port_second\":\(String(format: "%.2f", perPort * 1e6)),\"bare_us_per_port_second\":\(String(format: "%.2f", barePerPort * 1e6)),\"ratio\":\(String(format: "%.2f", perPort / barePerPort))}")
            } else {
                print(String(format: "bridge cpu, %d ports in one conference: %.1f µs per port per call-second (bare summing loop %.1f µs), ratio %.2f",
                             count, perPort * 1e6, barePerPort * 1e6, perPort / barePerPort))
            }
        }
        for count in ports {
            let plain = try await Self.realTime(legs: count, bridged: false, seconds: realTimeSeconds)
            let bridged = try await Self.realTime(legs: count, bridged: true, seconds: realTimeSeconds)
            for (what, figures) in [("plain sources", plain), ("ports in one conference", bridged)] {
                if json {
                    print("{\"group\":\"bridge\",\"subject\":\"real time, \(what)\",\"calls\":\(count),\"legs\":\(2 * count),\"late_percent\":\(String(format: "%.2f", figures.latePercent)),\"cpu_percent\":\(String(format: "%.1f", figures.cpuPercent))}")
                } else {
                    print(String(format: "bridge real time, %d calls (%d legs with their peers), %@: %.2f %% of ticks late, %.1f %% CPU of %d cores",
                                 count, 2 * count, what, figures.latePercent, figures.cpuPercent, ProcessInfo.processInfo.activeProcessorCount))
                }
            }
        }
    }

    /// CPU seconds of `frames` periods of `ports` conference ports, each reading a frame of
    /// capture and playing one, through an app-owned session's sources and sinks.
    static func sessionCPU(ports count: Int, frames: Int) async throws -> Double {
        let backend = ManualRenderingBackend()
        let session = AudioSessionOwner<AppOwned>(name: "bridge bench", configuration: AudioSessionConfiguration(), backend: backend)
        try await session.setVoiceProcessingEnabled(false)
        _ = try await session.activate()
        var endpoints: [SessionPort] = []
        for _ in 0..<count {
            let port = try await session.port()
            try port.source.start()
            try port.sink.start()
            endpoints.append(port)
        }
        await session.join(endpoints.map(\.id))
        let device = backend.endpoint("manual")
        let voice = (0..<960).map { Int16(truncatingIfNeeded: ($0 * 37) % 8_000 - 4_000) }
        var frame = [Int16](repeating: 0, count: 960)
        let start = BareMediaBenchmark.cpuTime()
        for _ in 0..<frames {
            device.pushCapture(voice)
            for port in endpoints {
                _ = port.source.read(into: &frame)
                port.sink.write(voice)
            }
            _ = device.pullPlayback(maximum: 4_800)
        }
        let cpu = (BareMediaBenchmark.cpuTime() - start).seconds
        for port in endpoints { port.source.stop(); port.sink.stop() }
        try await session.deactivate()
        return cpu
    }

    /// The same arithmetic on plain arrays: the capture copied to each port plus the other
    /// members' audio (the sum of all less its own), saturated; every port's audio summed and
    /// saturated for the output.
    static func bareCPU(ports count: Int, frames: Int) -> Double {
        let voice = (0..<960).map { Int16(truncatingIfNeeded: ($0 * 37) % 8_000 - 4_000) }
        var played = [[Int16]](repeating: voice, count: count)
        var outbound = [[Int16]](repeating: [Int16](repeating: 0, count: 960), count: count)
        var total = [Int32](repeating: 0, count: 960)
        var output = [Int16](repeating: 0, count: 960)
        var sink = 0
        let start = BareMediaBenchmark.cpuTime()
        for _ in 0..<frames {
            for i in 0..<960 { total[i] = 0 }
            for port in 0..<count { for i in 0..<960 { total[i] += Int32(played[port][i]) } }
            for port in 0..<count {
                for i in 0..<960 { outbound[port][i] = Int16(clamping: Int32(voice[i]) + total[i] - Int32(played[port][i])) }
            }
            for i in 0..<960 { output[i] = Int16(clamping: total[i]) }
            sink &+= Int(output[count % 960]) &+ Int(outbound[count - 1][7])
            for port in 0..<count { played[port][0] = Int16(truncatingIfNeeded: sink) }
        }
        let cpu = (BareMediaBenchmark.cpuTime() - start).seconds
        if sink == 42 { print("") }  // keeps the loop's results alive
        return cpu
    }

    /// `legs` calls in real time (Opus, SRTP, the in-memory link): this side's legs on one
    /// session's ports joined in a conference (`bridged`), or on plain sources and sinks.
    static func realTime(legs: Int, bridged: Bool, seconds: Int) async throws -> (latePercent: Double, cpuPercent: Double) {
        let speech = SyntheticSpeech.samples(seconds: 10)
        var configuration = MediaConfiguration()
        configuration.statisticsInterval = .seconds(3600)
        let clock = MediaClock()
        let backend = ManualRenderingBackend()
        let session = AudioSessionOwner<AppOwned>(name: "bridge bench", configuration: AudioSessionConfiguration(), backend: backend)
        try await session.setVoiceProcessingEnabled(false)
        _ = try await session.activate()
        var actors: [MediaActor] = [], ids: [BridgePortID] = []
        for _ in 0..<legs {
            let link = InMemoryMediaLink(clock: clock)
            let keyA = SRTPKey.random(), keyB = SRTPKey.random()
            let source: any AudioSource, sink: any AudioSink
            if bridged {
                let port = try await session.port()
                (source, sink) = (port.source, port.sink)
                ids.append(port.id)
            } else {
                (source, sink) = (WAVFileSource(samples: speech, format: AudioFormat(), loops: true), NullSink())
            }
            let a = try MediaActor(configuration: configuration, transport: link.a, keys: MediaKeys(outbound: keyA, inbound: keyB),
                                   source: source, sink: sink, clock: clock)
            let b = try MediaActor(configuration: configuration, transport: link.b, keys: MediaKeys(outbound: keyB, inbound: keyA),
                                   source: WAVFileSource(samples: speech, format: AudioFormat(), loops: true), sink: NullSink(), clock: clock)
            try await a.start()
            try await b.start()
            actors += [a, b]
        }
        if bridged { await session.join(ids) }
        let device = backend.endpoint("manual")
        let feeding = Task {
            // The device's side: a frame of capture in and the output drained every period.
            while !Task.isCancelled {
                device.pushCapture(Array(speech.prefix(960)))
                _ = device.pullPlayback(maximum: 48_000)
                try? await Task.sleep(for: .milliseconds(20))
            }
        }
        defer { feeding.cancel() }  // also when the sleep below throws
        let cpuBefore = BareMediaBenchmark.cpuTime(), wallBefore = ContinuousClock.now
        let ticking = Task { await clock.run() }
        defer { ticking.cancel() }
        try await Task.sleep(for: .seconds(seconds))
        ticking.cancel()
        let report = await ticking.value
        feeding.cancel()
        let cpu = (BareMediaBenchmark.cpuTime() - cpuBefore).seconds / (ContinuousClock.now - wallBefore).seconds
            / Double(ProcessInfo.processInfo.activeProcessorCount) * 100
        for actor in actors { await actor.stop() }
        try await session.deactivate()
        return (report.lateFraction(phases: clock.phases) * 100, cpu)
    }
}
