import ArgumentParser
import AudioCodec
import Media
import POSIX

#if canImport(Glibc)
import Glibc
#endif

/// The bare C work of many plain-RTP calls, paced as the node's media lanes pace them: the
/// anchor `scripts/measure-calls-per-core` reads the node's CPU against.
///
/// Per call and 20 ms frame: a frame of a tone coded (G.711: 160 samples to A-law; Opus: 960
/// samples with the node's encoder settings at a given complexity), an RTP packet sent over
/// loopback UDP from the call's socket to its peer socket, received there, decoded, and the
/// decoded samples appended to the call's recording (a stdio stream: written out in blocks as
/// a buffered writer would). That is one send, one receive, one encode, one decode and a
/// recording per call-frame, what the node does for a SIPp call (SIPp's sends land in SIPp's
/// CPU there as the peer socket's receive does here). Calls are spread as the node's clock
/// spreads its clients: over one thread per lane and four phases of the 20 ms period, each
/// lane sleeping until the next phase that has calls.
enum BareCallsBenchmark {
    enum Codec {
        case pcma
        /// Opus as the node sends it (mono 48 kHz, its bitrate, FEC and voice hint), at this
        /// complexity (the node's governor lowers it under load: the anchor takes the same).
        case opus(complexity: Int)
    }

    struct Figures {
        /// CPU time of the whole run (process), and the wall time it took.
        var cpu: Duration
        var wall: Duration
        /// Frames whose work ended after their phase's next instant came (the lane was behind).
        var late: Int
        var frames: Int
    }

    private struct Call {
        let sender: Int32
        let receiver: Int32
        let recording: UnsafeMutablePointer<FILE>
        var sequence: UInt16 = 0
        /// Opus's encoder and decoder for the call (nil for G.711).
        var opus: (encoder: OpusEncoder, decoder: OpusDecoder)?
    }

    /// 20 ms of a 700 Hz tone at 8 kHz: exactly 14 cycles, so every frame is the same.
    private static let tone: [Int16] = (0..<160).map { Int16(8_000 * sin(2 * Double.pi * 700 * Double($0) / 8_000)) }
    /// The same at 48 kHz, for Opus.
    private static let wideTone: [Int16] = (0..<960).map { Int16(8_000 * sin(2 * Double.pi * 700 * Double($0) / 48_000)) }

    /// Runs `calls` calls for `seconds` on `lanes` threads and returns the process's CPU time
    /// over the run. Recordings go to `directory` (one raw file per call, removed after).
    static func run(calls: Int, seconds: Int, lanes: Int, phases: Int = 4, codec: Codec = .pcma, directory: String) throws -> Figures {
        var all: [Call] = []
        defer {
            for call in all {
                close(call.sender)
                close(call.receiver)
                fclose(call.recording)
            }
            for index in 0..<calls { unlink("\(directory)/call-\(index).raw") }
        }
        for index in 0..<calls {
            let receiver = try socketBound()
            let sender = try socketBound()
            var address = try localAddress(of: receiver)
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(sender, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard connected == 0 else { throw SystemError.last("connect") }
            guard let file = fopen("\(directory)/call-\(index).raw", "w") else { throw SystemError.last("fopen") }
            var call = Call(sender: sender, receiver: receiver, recording: file)
            if case let .opus(complexity) = codec {
                var settings = MediaConfiguration().opus
                settings.complexity = complexity
                call.opus = (try OpusEncoder(configuration: settings), try OpusDecoder(sampleRate: 48_000, channels: 1))
            }
            all.append(call)
        }
        let laneCount = max(1, min(lanes, calls))
        var perLane = Array(repeating: [[Call]](repeating: [], count: phases), count: laneCount)
        for (index, call) in all.enumerated() { perLane[index % laneCount][(index / laneCount) % phases].append(call) }

        let start = cpuTime()
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let began = now
        let periods = seconds * 50
        let threads = try perLane.enumerated().map { lane, groups in
            let box = Box(groups)
            let thread = try SystemThread.start(name: "bare-g711-\(lane)") {
                box.late = runLane(&box.groups, began: began, periods: periods, phases: phases)
            }
            return (thread, box)
        }
        var late = 0
        for (thread, box) in threads {
            thread.join()
            late += box.late
        }
        var ended = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ended)
        let wall = Duration.seconds(ended.tv_sec - began.tv_sec) + .nanoseconds(ended.tv_nsec - began.tv_nsec)
        return Figures(cpu: cpuTime() - start, wall: wall, late: late, frames: periods * calls)
    }

    /// A lane's state, handed to its thread and read back once the thread is joined.
    private final class Box: @unchecked Sendable {  // written by the lane's thread, read after its join
        var groups: [[Call]]
        var late = 0
        init(_ groups: [[Call]]) { self.groups = groups }
    }

    /// One lane: each period, for each phase with calls, sleep until the phase's instant and
    /// run its calls' frames. Returns how many frames ended past the next phase's instant.
    private static func runLane(_ groups: inout [[Call]], began: timespec, periods: Int, phases: Int) -> Int {
        let step = 20_000_000 / phases
        var packet = [UInt8](repeating: 0, count: 172)
        var received = [UInt8](repeating: 0, count: 1_500)
        var payload: [UInt8] = []
        var decoded = [Int16](repeating: 0, count: 960)
        var late = 0
        for period in 0..<periods {
            for phase in 0..<phases where !groups[phase].isEmpty {
                let due = Int64(began.tv_nsec) + Int64(period) * 20_000_000 + Int64(phase * step)
                var deadline = timespec(tv_sec: began.tv_sec + Int(due / 1_000_000_000), tv_nsec: Int(due % 1_000_000_000))
                while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nil) == EINTR {}
                for index in groups[phase].indices {
                    if groups[phase][index].opus != nil {
                        opusFrame(&groups[phase][index], packet: &packet, received: &received, payload: &payload, decoded: &decoded)
                    } else {
                        frame(&groups[phase][index], packet: &packet, received: &received, decoded: &decoded)
                    }
                }
                var now = timespec()
                clock_gettime(CLOCK_MONOTONIC, &now)
                let next = (due + Int64(step))
                if Int64(now.tv_sec - began.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec) > next { late += groups[phase].count }
            }
        }
        return late
    }

    /// One call's frame: a tone's 160 samples coded, sent, received, decoded, recorded.
    private static func frame(_ call: inout Call, packet: inout [UInt8], received: inout [UInt8], decoded: inout [Int16]) {
        let sequence = call.sequence
        call.sequence &+= 1
        packet.withUnsafeMutableBufferPointer { p in
            p[0] = 0x80; p[1] = 8
            p[2] = UInt8(sequence >> 8); p[3] = UInt8(sequence & 0xFF)
            for index in 0..<160 { p[12 + index] = G711.aLaw(tone[index]) }
            _ = send(call.sender, p.baseAddress, 172, 0)
        }
        let length = received.withUnsafeMutableBytes { recv(call.receiver, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
        guard length > 12 else { return }
        received.withUnsafeBufferPointer { r in
            G711.decode(UnsafeBufferPointer(rebasing: r[12..<length]), law: .a, into: &decoded)
        }
        decoded.withUnsafeBufferPointer { _ = fwrite($0.baseAddress, 2, min(160, $0.count), call.recording) }
    }

    /// One Opus call's frame: 960 samples of a tone encoded, sent, received, decoded, recorded.
    private static func opusFrame(_ call: inout Call, packet: inout [UInt8], received: inout [UInt8], payload: inout [UInt8],
                                  decoded: inout [Int16]) {
        guard let opus = call.opus, let encoded = try? opus.encoder.encode(wideTone) else { return }
        let sequence = call.sequence
        call.sequence &+= 1
        packet.removeAll(keepingCapacity: true)
        packet.append(contentsOf: [0x80, 111, UInt8(sequence >> 8), UInt8(sequence & 0xFF), 0, 0, 0, 0, 0, 0, 0, 1])
        packet.append(contentsOf: encoded)
        packet.withUnsafeBufferPointer { _ = send(call.sender, $0.baseAddress, $0.count, 0) }
        let length = received.withUnsafeMutableBytes { recv(call.receiver, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
        guard length > 12 else { return }
        payload.removeAll(keepingCapacity: true)
        payload.append(contentsOf: received[12..<length])
        guard let samples = try? opus.decoder.decode(payload, into: &decoded) else { return }
        decoded.withUnsafeBufferPointer { _ = fwrite($0.baseAddress, 2, min(samples, $0.count), call.recording) }
    }

    private static func socketBound() throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { throw SystemError.last("socket") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else {
            close(fd)
            throw SystemError.last("bind")
        }
        return fd
    }

    private static func localAddress(of fd: Int32) throws -> sockaddr_in {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let got = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard got == 0 else { throw SystemError.last("getsockname") }
        return address
    }

    /// Runs the anchor in a scratch directory and says it in one line (the line
    /// `measure-calls-per-core` reads: "NAME: N calls, P % of a core …").
    static func line(_ name: String, calls: Int, seconds: Int, lanes: Int?, codec: Codec) throws -> String {
        let directory = "/tmp/callnode-\(name)-\(getpid())"
        mkdir(directory, 0o700)
        defer { rmdir(directory) }
        let figures = try run(calls: calls, seconds: seconds, lanes: lanes ?? Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))), codec: codec,
                              directory: directory)
        func inSeconds(_ d: Duration) -> Double { Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18 }
        let percent = 100 * inSeconds(figures.cpu) / inSeconds(figures.wall)
        func rounded(_ value: Double, _ places: Double) -> Double { (value * places).rounded() / places }
        var complexity = ""
        if case let .opus(value) = codec { complexity = "complexity \(value), " }
        return "\(name): \(calls) calls, \(rounded(percent, 100)) % of a core (\(rounded(percent / Double(calls), 1_000)) % a call), "
            + "\(complexity)\(figures.late) of \(figures.frames) frames late"
    }

    private static func cpuTime() -> Duration {
        var ts = timespec()
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts)
        return .seconds(ts.tv_sec) + .nanoseconds(ts.tv_nsec)
    }
}

/// `callnode-bench bare-g711`: the anchor of `scripts/measure-calls-per-core`, as one line.
struct BareG711Bench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bare-g711",
        abstract: "The bare C work of N plain-RTP G.711 calls (code, UDP send and receive, decode, record), paced on one thread per core as the node's media lanes pace calls: CPU as a share of one core.")

    @Option(help: "Calls.")
    var calls = 100

    @Option(help: "Seconds to run.")
    var seconds = 15

    @Option(help: "Threads (default: one per processor, as the node's media lanes).")
    var lanes: Int?

    func validate() throws {
        guard (1...5_000).contains(calls), (1...600).contains(seconds) else { throw ValidationError("calls 1–5000, seconds 1–600") }
    }

    func run() throws {
        print(try BareCallsBenchmark.line("bare-g711", calls: calls, seconds: seconds, lanes: lanes, codec: .pcma))
    }
}

/// `callnode-bench bare-opus`: the same anchor for Opus calls, at the complexity the node ran.
struct BareOpusBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bare-opus",
        abstract: "The bare C work of N plain-RTP Opus calls (encode with the node's settings, UDP send and receive, decode, record), paced on one thread per core as the node's media lanes pace calls: CPU as a share of one core.")

    @Option(help: "Calls.")
    var calls = 50

    @Option(help: "Seconds to run.")
    var seconds = 15

    @Option(help: "Opus complexity, 0–10 (the node's governor lowers it under load: give the one the node ran at).")
    var complexity = 8

    @Option(help: "Threads (default: one per processor, as the node's media lanes).")
    var lanes: Int?

    func validate() throws {
        guard (1...2_000).contains(calls), (1...600).contains(seconds) else { throw ValidationError("calls 1–2000, seconds 1–600") }
        guard (0...10).contains(complexity) else { throw ValidationError("complexity 0–10") }
    }

    func run() throws {
        print(try BareCallsBenchmark.line("bare-opus", calls: calls, seconds: seconds, lanes: lanes, codec: .opus(complexity: complexity)))
    }
}
