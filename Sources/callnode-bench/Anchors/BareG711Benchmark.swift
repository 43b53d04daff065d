import ArgumentParser
import AudioCodec
import POSIX

#if canImport(Glibc)
import Glibc
#endif

/// The bare C work of many plain-RTP G.711 calls, paced as the node's media lanes pace them:
/// the anchor `scripts/measure-calls-per-core` reads the node's CPU against.
///
/// Per call and 20 ms frame: 160 samples of a tone coded to A-law, a 172-byte RTP packet sent
/// over loopback UDP from the call's socket to its peer socket, received there, decoded, and
/// the 160 decoded samples appended to the call's recording (a stdio stream: written out in
/// blocks as a buffered writer would). That is one send, one receive, one encode, one decode
/// and a recording per call-frame, what the node does for a SIPp call (SIPp's sends land in
/// SIPp's CPU there as the peer socket's receive does here). Calls are spread as the node's
/// clock spreads its clients: over one thread per lane and four phases of the 20 ms period,
/// each lane sleeping until the next phase that has calls.
enum BareG711Benchmark {
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
    }

    /// 20 ms of a 700 Hz tone at 8 kHz: exactly 14 cycles, so every frame is the same.
    private static let tone: [Int16] = (0..<160).map { Int16(8_000 * sin(2 * Double.pi * 700 * Double($0) / 8_000)) }

    /// Runs `calls` calls for `seconds` on `lanes` threads and returns the process's CPU time
    /// over the run. Recordings go to `directory` (one raw file per call, removed after).
    static func run(calls: Int, seconds: Int, lanes: Int, phases: Int = 4, directory: String) throws -> Figures {
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
            all.append(Call(sender: sender, receiver: receiver, recording: file))
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
        var decoded = [Int16](repeating: 0, count: 160)
        var late = 0
        for period in 0..<periods {
            for phase in 0..<phases where !groups[phase].isEmpty {
                let due = Int64(began.tv_nsec) + Int64(period) * 20_000_000 + Int64(phase * step)
                var deadline = timespec(tv_sec: began.tv_sec + Int(due / 1_000_000_000), tv_nsec: Int(due % 1_000_000_000))
                while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nil) == EINTR {}
                for index in groups[phase].indices {
                    frame(&groups[phase][index], packet: &packet, received: &received, decoded: &decoded)
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
        decoded.withUnsafeBufferPointer { _ = fwrite($0.baseAddress, 2, $0.count, call.recording) }
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
        let directory = "/tmp/callnode-bare-g711-\(getpid())"
        mkdir(directory, 0o700)
        defer { rmdir(directory) }
        let figures = try BareG711Benchmark.run(calls: calls, seconds: seconds,
                                                lanes: lanes ?? Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))), directory: directory)
        let share = Double(figures.cpu.components.seconds) + Double(figures.cpu.components.attoseconds) / 1e18
        let wall = Double(figures.wall.components.seconds) + Double(figures.wall.components.attoseconds) / 1e18
        let percent = 100 * share / wall
        func rounded(_ value: Double, _ places: Double) -> Double { (value * places).rounded() / places }
        print("bare-g711: \(calls) calls, \(rounded(percent, 100)) % of a core (\(rounded(percent / Double(calls), 1_000)) % a call), "
              + "\(figures.late) of \(figures.frames) frames late")
    }
}
