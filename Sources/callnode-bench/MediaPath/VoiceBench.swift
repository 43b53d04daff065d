import VoiceProcessing
import ArgumentParser
import AudioSession
@_spi(Benchmarks) import Media
import Foundation

#if canImport(Glibc)
import Glibc
#endif

/// Voice processing figures: CPU per call against bare speexdsp, and how soon a call has
/// microphone audio with and without always-prepared recording.
struct VoiceBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "voice",
        abstract: "Voice processing CPU vs bare speexdsp; mic-publish latency, cold vs always-prepared (ALSA).")

    @Option(help: "Call-seconds of audio per CPU measurement.")
    var seconds = 20

    @Option(help: "CPU measurements (interleaved with the bare loop); the median is reported.")
    var runs = 5

    @Option(help: "Echo tail in ms.")
    var tail = 200

    @Option(help: "Calls per mic-publish measurement (0 skips it).")
    var calls = 20

    @Option(help: "ALSA capture device for mic-publish. Without it, a private PulseAudio server with a null sink is started and a tone played into it (pulseaudio must be installed).")
    var device: String?

    func validate() throws {
        guard seconds > 0, runs > 0, calls >= 0 else { throw ValidationError("--seconds and --runs must be positive, --calls at least 0") }
        guard (10...1000).contains(tail) else { throw ValidationError("--tail must be 10–1000 ms") }
    }

    func run() async throws {
        try cpu()
        if calls > 0 { try await micPublish() }
    }

    // MARK: CPU

    func cpu() throws {
        let far = SyntheticSpeech.samples(seconds: 10, seed: 1)
        let near = Array(SyntheticSpeech.samples(seconds: 10, seed: 9).reversed())
        let microphone = far.indices.map { n in
            Int16(clamping: (n >= 1_440 ? Int(far[n - 1_440]) / 2 : 0) + Int(near[n]) / 3)
        }
        var options = VoiceProcessingOptions()
        options.echoTail = .milliseconds(tail)
        let frames = seconds * 50
        var ours: [Double] = [], bare: [Double] = []
        for _ in 0..<runs {
            let processor = try VoiceProcessor(options: options)
            var frame = [Int16](repeating: 0, count: 960)
            var offset = 0
            let start = BareMediaBenchmark.cpuTime()
            for _ in 0..<frames {
                if offset + 960 > microphone.count { offset = 0 }
                processor.playback(Array(far[offset..<offset + 960]))
                for i in 0..<960 { frame[i] = microphone[offset + i] }
                processor.process(&frame)
                offset += 960
            }
            ours.append((BareMediaBenchmark.cpuTime() - start).seconds)
            guard let anchor = BareVoiceProcessingBenchmark.run(blocks: frames * 2, microphone: microphone, far: far, tail: tail * 48) else {
                throw ValidationError("speexdsp could not make its states")
            }
            bare.append(anchor.seconds)
        }
        let o = ours.sorted()[runs / 2], b = bare.sorted()[runs / 2]
        let perCallSecond = o / Double(seconds)
        print(String(format: "voice processing (AEC %d ms tail + NS + AGC, 48 kHz): %.2f ms CPU per call-second (%.1f %% of one core), bare speexdsp %.2f ms; overhead %.2fx; median of %d × %d s",
                     tail, perCallSecond * 1000, perCallSecond * 100, b / Double(seconds) * 1000, o / b, runs, seconds))
    }

    // MARK: Mic-publish latency

    /// From `activate()` to the first frame media reads that holds captured audio, for `calls`
    /// calls cold (the device opens at each activation) and as many with the microphone
    /// prepared.
    func micPublish() async throws {
        var server: PrivatePulse?
        let input: String
        if let device {
            input = device
        } else {
            server = try PrivatePulse()
            input = "pulse"
        }
        defer { server?.stop() }
        // Something to hear: a tone into the null sink, whose monitor is the microphone.
        let speaker = server.map { _ in ALSAPlaybackSink(device: "pulse") }
        try speaker?.start()
        defer { speaker?.stop() }
        let tone = ToneSource(frequency: 1_000, amplitude: 0.3)
        var ahead = [Int16](repeating: 0, count: 960)
        for _ in 0..<10 { _ = tone.read(into: &ahead); speaker?.write(ahead) }  // 200 ms ahead
        let feeding = Task {
            var chunk = [Int16](repeating: 0, count: 960)
            var next = ContinuousClock.now + .milliseconds(100)
            while !Task.isCancelled {
                _ = tone.read(into: &chunk)
                speaker?.write(chunk)
                next += .milliseconds(20)
                try? await Task.sleep(until: next)
            }
        }
        defer { feeding.cancel() }

        var configuration = AudioSessionConfiguration(category: .record)
        configuration.preferredInput = input
        for prepared in [false, true] {
            let session = AudioSessionOwner<AppOwned>(name: "mic-publish", configuration: configuration,
                                                      backend: ALSADeviceBackend(defaultInput: input, defaultOutput: input))
            try await session.setVoiceProcessingEnabled(false)
            if prepared { try await session.setRecordingAlwaysPrepared(true) }
            var samples: [Double] = []
            for _ in 0..<calls {
                try await Task.sleep(for: .milliseconds(100))  // between calls, as a user would
                let start = ContinuousClock.now
                try await session.activate()
                let microphone = try await session.microphone()
                try microphone.start()
                var frame = [Int16](repeating: 0, count: 960)
                let deadline = start + .seconds(3)
                while ContinuousClock.now < deadline {
                    _ = microphone.read(into: &frame)
                    if frame.contains(where: { $0 != 0 }) { break }
                    try await Task.sleep(for: .milliseconds(1))
                }
                let elapsed = ContinuousClock.now - start
                microphone.stop()
                try await session.deactivate()
                guard elapsed < .seconds(3) else { throw ValidationError("no audio from '\(input)' within 3 s") }
                samples.append(elapsed.seconds * 1000)
            }
            await session.shutdown()
            // The first call is reported apart: it may include the sound server's own start-up.
            let sorted = (samples.count > 1 ? Array(samples.dropFirst()) : samples).sorted()
            print(String(format: "mic-publish, %@, ALSA '%@', %d calls: first %.2f ms; then min %.2f ms, median %.2f ms, p90 %.2f ms, max %.2f ms",
                         prepared ? "always-prepared" : "cold", input, calls, samples[0], sorted[0], sorted[sorted.count / 2],
                         sorted[sorted.count * 9 / 10], sorted[sorted.count - 1]))
        }
    }
}

/// A private PulseAudio server with a null sink, for ALSA's `pulse` device: playback into the
/// sink, capture from its monitor.
final class PrivatePulse {
    let process: Process
    let directory: String

    init() throws {
        directory = NSTemporaryDirectory() + "callnode-bench-pulse-\(getpid())"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let socket = directory + "/native"
        unlink(socket)
        guard FileManager.default.isExecutableFile(atPath: "/usr/bin/pulseaudio") else {
            throw ValidationError("pulseaudio is not installed (scripts/bootstrap installs it), or pass --device")
        }
        process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/pulseaudio")
        process.arguments = ["--daemonize=no", "--exit-idle-time=-1", "-n", "--use-pid-file=no", "--system=false", "--disable-shm=yes",
                             "--load=module-native-protocol-unix socket=\(socket) auth-anonymous=1",
                             "--load=module-null-sink sink_name=bench rate=48000 channels=1"]
        process.environment = ["PULSE_RUNTIME_PATH": directory, "HOME": directory, "XDG_RUNTIME_DIR": directory]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let deadline = Date().addingTimeInterval(15)
        while access(socket, F_OK) != 0 {
            guard process.isRunning, Date() < deadline else {
                stop()
                throw ValidationError("pulseaudio did not start")
            }
            usleep(20_000)
        }
        setenv("PULSE_SERVER", "unix:\(socket)", 1)
        setenv("PULSE_SINK", "bench", 1)
        setenv("PULSE_SOURCE", "bench.monitor", 1)
    }

    func stop() {
        if process.isRunning { process.terminate() }
        process.waitUntilExit()
        try? FileManager.default.removeItem(atPath: directory)
    }
}
