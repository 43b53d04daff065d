import RTP
import Testing

/// Playout after a stall of this node, a jump of the peer's timestamps, a peer stream that fell
/// behind, and a new stream: each time, audio is back within 100 ms of the first packet after
/// the event and then plays on in order. Simulated time only: a sender emits one 20 ms frame
/// every 20 ms, the network delays each by 30 ms, the receiver asks for a frame every 20 ms.
@Suite struct PlayoutRecoveryTests {
    struct Packet {
        var index: Int
        var sequence: UInt16
        var timestamp: UInt32
        var sentAt: Duration
    }

    struct Run {
        /// What each tick played: the packet index, or nil for anything but a packet.
        var played: [(at: Duration, index: Int?)] = []
        var buffer: JitterBuffer
        var resets: [PlayoutReset] = []
        var arrivals: [Int: Duration] = [:]

        /// The first tick at or after `time` that played a packet, and which one.
        func firstPlay(from time: Duration) -> (at: Duration, index: Int)? {
            for entry in played where entry.at >= time {
                if let index = entry.index { return (entry.at, index) }
            }
            return nil
        }

        /// Ticks from `time` on that did not play a packet.
        func gaps(from time: Duration) -> Int { played.filter { $0.at >= time && $0.index == nil }.count }

        /// Packet indices played from `time` on are strictly increasing.
        func inOrder(from time: Duration) -> Bool {
            let indices = played.filter { $0.at >= time }.compactMap(\.index)
            return zip(indices, indices.dropFirst()).allSatisfy { $0 < $1 }
        }
    }

    static let frame = Duration.milliseconds(20)

    /// Packet i: sequence `sequenceBase + i`, timestamp from `timestamp(i)`, sent at `sentAt(i)`.
    static func stream(count: Int, sequenceBase: UInt16 = 1_000,
                       timestamp: (Int) -> UInt32 = { UInt32(7_000 + $0 * 960) },
                       sentAt: (Int) -> Duration = { frame * $0 }) -> [Packet] {
        (0..<count).map { i in
            Packet(index: i, sequence: sequenceBase &+ UInt16(truncatingIfNeeded: i), timestamp: timestamp(i), sentAt: sentAt(i))
        }
    }

    /// Runs the receiver for `ticks` periods (tick t at 20 t + 15 ms: the packets of a steady stream are a quarter frame old when taken). While `stall` lasts the
    /// receiver does not run: packets arriving meanwhile are read when it resumes, and the first
    /// tick after it skips the ticks it missed (`reportSkips`), as the media clock reports them.
    static func run(_ packets: [Packet], ticks: Int, delay: Duration = .milliseconds(30),
                    stall: Range<Duration>? = nil, reportSkips: Bool = true,
                    configuration: JitterBufferConfiguration = JitterBufferConfiguration(),
                    restartAt: Int? = nil) -> Run {
        var run = Run(buffer: JitterBuffer(configuration: configuration))
        let arrivals = packets.map { ($0.sentAt + delay, $0) }.sorted { $0.0 < $1.0 }
        var next = 0
        var skipped = 0
        for tick in 0..<ticks {
            let now = frame * tick + .milliseconds(15)
            if let stall, stall.contains(now) {
                skipped += 1
                continue
            }
            if skipped > 0 {
                if reportSkips { run.buffer.skip(frames: skipped) }
                skipped = 0
            }
            while next < arrivals.count && arrivals[next].0 <= now {
                var (arrival, packet) = arrivals[next]
                if let stall, stall.contains(arrival) { arrival = stall.upperBound }
                if packet.index == restartAt { run.buffer.restart() }
                run.arrivals[packet.index] = arrival
                run.buffer.insert(sequence: packet.sequence, timestamp: packet.timestamp,
                                  payload: [UInt8(packet.index & 0xFF), UInt8(packet.index >> 8)], arrival: arrival)
                next += 1
            }
            let action = run.buffer.nextFrame(now: now)
            run.resets += run.buffer.takeResets()
            if case let .play(payload) = action {
                run.played.append((now, Int(payload[0]) | Int(payload[1]) << 8))
            } else {
                run.played.append((now, nil))
            }
        }
        return run
    }

    /// Audio resumes within 100 ms of `packet`'s arrival and plays on with at most `gaps` ticks
    /// of something else over the last `tail` seconds, in order.
    static func expectRecovered(_ run: Run, after packet: Int, reason: PlayoutReset.Reason,
                                sourceLocation: SourceLocation = #_sourceLocation) {
        guard let arrival = run.arrivals[packet], let first = run.firstPlay(from: arrival) else {
            Issue.record("nothing played after packet \(packet)", sourceLocation: sourceLocation)
            return
        }
        #expect(first.at - arrival <= .milliseconds(100), "audio back \(first.at - arrival) after the first packet",
                sourceLocation: sourceLocation)
        #expect(first.index >= packet - 10, "played \(first.index), an old packet", sourceLocation: sourceLocation)
        #expect(run.gaps(from: first.at) <= 2, "\(run.gaps(from: first.at)) ticks without audio after recovery",
                sourceLocation: sourceLocation)
        #expect(run.inOrder(from: first.at), sourceLocation: sourceLocation)
        #expect(run.resets.contains { $0.reason == reason }, "resets: \(run.resets)", sourceLocation: sourceLocation)
        #expect(run.buffer.statistics.currentDelay <= .milliseconds(80),
                "delay after recovery: \(run.buffer.statistics.currentDelay)", sourceLocation: sourceLocation)
    }

    @Test(arguments: [300, 1_000, 5_000])
    func aStallOfThisNodeIsSkippedAndAudioComesBack(milliseconds: Int) {
        let stall = Duration.milliseconds(2_000)..<(.milliseconds(2_000 + milliseconds))
        let run = Self.run(Self.stream(count: 400 + milliseconds / 20), ticks: 400 + milliseconds / 20, stall: stall)
        // The first packet sent after the stall ended.
        let firstAfter = (2_000 + milliseconds) / 20
        Self.expectRecovered(run, after: firstAfter, reason: .stall)
        #expect(run.buffer.statistics.skipped == milliseconds / 20)
        // What was due during the stall is gone, not played late: playout keeps its delay.
        #expect(run.resets.first?.jump == .milliseconds(milliseconds))
        // The packets our stall held up are late because we slept: they do not make the peer's
        // stream look late (which would shift its timeline by the stall once more).
        #expect(!run.resets.contains { $0.reason == .lateStream }, "resets: \(run.resets)")
    }

    @Test(arguments: [300, 1_000, 5_000])
    func aStallNobodyReportedIsCaughtUpOnTheBufferedPackets(milliseconds: Int) {
        // The clock did not say it skipped (an endpoint blocked the media actor, say): the
        // backlog read at once is far more than the delay needs, and playout jumps to its end.
        let stall = Duration.milliseconds(2_000)..<(.milliseconds(2_000 + milliseconds))
        let run = Self.run(Self.stream(count: 400 + milliseconds / 20), ticks: 400 + milliseconds / 20,
                           stall: stall, reportSkips: false)
        Self.expectRecovered(run, after: (2_000 + milliseconds) / 20, reason: .catchUp)
        #expect(run.buffer.statistics.skipped == 0)
    }

    @Test(arguments: [400, 1_000, 60_000, -400, -1_000, -60_000])
    func aTimestampJumpWithConsecutiveSequenceNumbersPlaysOnWithoutAGap(milliseconds: Int) {
        // From packet 100 on, the peer's timestamps are `milliseconds` off; its packets keep
        // their pace and numbering (RFC 3550 §5.1 allows it).
        let jump = Int64(milliseconds) * 48
        let packets = Self.stream(count: 300, timestamp: { i in
            UInt32(truncatingIfNeeded: Int64(1_000_000 + i * 960) + (i >= 100 ? jump : 0))
        })
        let run = Self.run(packets, ticks: 300)
        Self.expectRecovered(run, after: 100, reason: .timestampJump)
        // Not a single frame is lost to the jump: every packet from 10 on plays, in order.
        #expect(run.played.compactMap(\.index).filter { $0 >= 10 && $0 < 290 } == Array(10..<290))
        #expect(run.resets.map(\.jump) == [.milliseconds(milliseconds)])
        #expect(run.buffer.statistics.lost == 0)
    }

    @Test(arguments: [64, 96, -300, 5_000])
    func aTimestampStepOffTheFramesGridIsPlayedOn(samples: Int) {
        // From packet 100 on, the timestamps are `samples` off, not a whole number of frames
        // (SIPp switching from one file to the next moved them 64 samples at 8 kHz): before,
        // playout waited for a frame on the old grid that never came and went silent for good.
        let packets = Self.stream(count: 300, timestamp: { i in
            UInt32(truncatingIfNeeded: Int64(1_000_000 + i * 960) + (i >= 100 ? Int64(samples) : 0))
        })
        let run = Self.run(packets, ticks: 300)
        Self.expectRecovered(run, after: 100, reason: .timestampJump)
        #expect(run.played.compactMap(\.index).filter { $0 >= 10 && $0 < 290 } == Array(10..<290))
        #expect(run.buffer.statistics.lost == 0)
        #expect(run.resets.count == 1, "resets: \(run.resets)")
    }

    @Test func timestampsStampedByTheSendersClockPlayOnWithoutResets() {
        // A sender whose timestamps follow its clock a few samples either side of the frame's
        // (2 samples at 48 kHz: 42 µs): every packet is put back on the grid, and played.
        let packets = Self.stream(count: 300, timestamp: { i in UInt32(1_000_000 + i * 960 + [0, 2, -1, 1, -2][i % 5]) })
        let run = Self.run(packets, ticks: 300)
        #expect(run.played.compactMap(\.index).filter { $0 >= 10 && $0 < 290 } == Array(10..<290))
        #expect(run.resets.isEmpty, "resets: \(run.resets.count)")
        #expect(run.buffer.statistics.lost == 0)
    }

    @Test func sequenceNumbersWrapDuringAStall() {
        // Sequence numbers pass 65535 → 0 while the node is stopped for a second.
        let packets = Self.stream(count: 300, sequenceBase: 65_535 - 120)
        let stall = Duration.milliseconds(2_000)..<(.milliseconds(3_000))
        let run = Self.run(packets, ticks: 300, stall: stall)
        Self.expectRecovered(run, after: 150, reason: .stall)
        #expect(run.played.last?.index == 298)
    }

    @Test func timestampsWrapWhileTheyJump() {
        // A forward jump of a second that also crosses 2^32.
        let packets = Self.stream(count: 300, timestamp: { i in
            UInt32(truncatingIfNeeded: Int64(UInt32.max) - 150 * 960 + Int64(i * 960) + (i >= 100 ? 48_000 : 0))
        })
        let run = Self.run(packets, ticks: 300)
        Self.expectRecovered(run, after: 100, reason: .timestampJump)
        #expect(run.played.compactMap(\.index).filter { $0 >= 10 && $0 < 290 } == Array(10..<290))
    }

    @Test func aPeerThatPausedAndKeptItsTimestampsIsFollowed() {
        // The peer stops for a second and goes on with the next timestamp, as if no time had
        // passed: its packets now arrive a second after their frames were due here.
        let packets = Self.stream(count: 300, sentAt: { i in Self.frame * i + (i >= 100 ? .seconds(1) : .zero) })
        let run = Self.run(packets, ticks: 350)
        Self.expectRecovered(run, after: 100, reason: .lateStream)
        #expect(run.played.compactMap(\.index).filter { $0 >= 100 && $0 < 290 } == Array(100..<290))
    }

    @Test func aPeerThatPausedAndAccountedForItIsAGapNotAJump() {
        // The same pause, but its timestamps move on with the time (what a node does now): the
        // gap is played as DTX silence, nothing resets, nothing counts as lost.
        let packets = Self.stream(count: 300, timestamp: { i in UInt32(7_000 + i * 960 + (i >= 100 ? 48_000 : 0)) },
                                  sentAt: { i in Self.frame * i + (i >= 100 ? .seconds(1) : .zero) })
        let run = Self.run(packets, ticks: 350)
        guard let arrival = run.arrivals[100], let first = run.firstPlay(from: arrival) else {
            Issue.record("nothing played after the pause")
            return
        }
        #expect(first.index == 100)
        #expect(first.at - arrival <= .milliseconds(40))
        #expect(run.resets.isEmpty)
        #expect(run.buffer.statistics.lost == 0)
        #expect(run.buffer.statistics.silence >= 45)
    }

    @Test func aNewStreamStartsPlayoutOverOnIt() {
        // From packet 150 on, the peer's numbering and timestamps are a new stream's.
        let packets = Self.stream(count: 300).map { p in
            var p = p
            if p.index >= 150 {
                p.sequence = 40_000 &+ UInt16(p.index)
                p.timestamp = 3_000_000_000 &+ UInt32(p.index * 960)
            }
            return p
        }
        let run = Self.run(packets, ticks: 300, restartAt: 150)
        Self.expectRecovered(run, after: 150, reason: .newSource)
        #expect(run.played.compactMap(\.index).filter { $0 >= 150 && $0 < 299 } == Array(150..<299))
    }

    @Test func aJitterSpikeIsNotMistakenForAJumpOrAStall() {
        // Every packet from 100 to 104 is held 120 ms and then they come together: the buffer
        // rides it out as jitter (it conceals or stretches), with no reset.
        let packets = Self.stream(count: 300)
        let delays: (Int) -> Duration = { i in (100...104).contains(i) ? .milliseconds(150 - 20 * (i - 100)) : .milliseconds(30) }
        let arrivals = packets.map { ($0.sentAt + delays($0.index), $0) }.sorted { $0.0 < $1.0 }
        var buffer = JitterBuffer()
        var next = 0
        var resets: [PlayoutReset] = []
        for tick in 0..<300 {
            let now = Self.frame * tick + .milliseconds(15)
            while next < arrivals.count && arrivals[next].0 <= now {
                buffer.insert(sequence: arrivals[next].1.sequence, timestamp: arrivals[next].1.timestamp,
                              payload: [0], arrival: arrivals[next].0)
                next += 1
            }
            _ = buffer.nextFrame(now: now)
            resets += buffer.takeResets()
        }
        #expect(resets.isEmpty)
        #expect(buffer.statistics.lost <= 6)
        #expect(buffer.statistics.packetsPlayed >= 285)
    }
}
