import CallNodeTestSupport
import RTP
import Testing

/// Jitter-buffer behaviour on simulated time: a sender emits one 20 ms frame every 20 ms, each
/// packet takes its own network delay, and the receiver asks for a frame every 20 ms, 15 ms
/// into each period (at the usual 30 ms of delay, a quarter frame after its packet came: the
/// least margin playout starts with). No real clock is involved.
@Suite struct JitterBufferTests {
    struct Sent {
        var sequence: UInt16
        var timestamp: UInt32
        var sentAt: Duration
        var delay: Duration?  // nil: lost
        var payload: [UInt8]
    }

    /// Packet i is sent at i × 20 ms with timestamp base + i × 960 and payload [i % 256].
    static func stream(count: Int, sequenceBase: UInt16 = 100, timestampBase: UInt32 = 5000,
                       delay: (Int) -> Duration?) -> [Sent] {
        (0..<count).map { i in
            Sent(sequence: sequenceBase &+ UInt16(truncatingIfNeeded: i), timestamp: timestampBase &+ UInt32(i * 960),
                 sentAt: .milliseconds(20 * i), delay: delay(i), payload: [UInt8(i % 256)])
        }
    }

    /// Runs the receiver for `ticks` frame periods; returns the action of each tick.
    static func run(_ buffer: inout JitterBuffer, _ packets: [Sent], ticks: Int,
                    onTick: ((Int, JitterBuffer) -> Void)? = nil) -> [PlayoutAction] {
        let arrivals = packets.compactMap { p in p.delay.map { (p.sentAt + $0, p) } }.sorted { $0.0 < $1.0 }
        var next = 0
        var actions: [PlayoutAction] = []
        for tick in 0..<ticks {
            let now = Duration.milliseconds(20 * tick + 15)
            while next < arrivals.count && arrivals[next].0 <= now {
                let p = arrivals[next].1
                buffer.insert(sequence: p.sequence, timestamp: p.timestamp, payload: p.payload, arrival: arrivals[next].0)
                next += 1
            }
            actions.append(buffer.nextFrame(now: now))
            onTick?(tick, buffer)
        }
        return actions
    }

    static func played(_ actions: [PlayoutAction]) -> [UInt8] {
        actions.compactMap { if case let .play(p) = $0 { p[0] } else { nil } }
    }

    @Test func steadyStreamPlaysEveryFrameInOrderAtTheMinimumDelay() {
        var buffer = JitterBuffer()
        let actions = Self.run(&buffer, Self.stream(count: 100) { _ in .milliseconds(30) }, ticks: 100)
        // The first packet plays at the first tick that finds it; no jitter, so no stretch.
        #expect(Array(actions.prefix(2)) == [.waiting, .play([0])])
        #expect(Self.played(actions) == (0..<99).map { UInt8($0) })
        #expect(buffer.statistics.concealed == 0)
        #expect(buffer.statistics.lost == 0)
        #expect(buffer.statistics.stretched == 0)
        #expect(buffer.statistics.targetDelay == .milliseconds(10))
    }

    @Test func aStartBelowTheTargetWaitsATickRatherThanStretchAfterTheFirstFrame() {
        // A buffer that wants a frame of delay holds the first packet back a tick (nothing was
        // heard yet, so the wait is not heard) rather than play it at once and then stretch
        // (a concealed frame inserted after the first).
        var buffer = JitterBuffer(configuration: JitterBufferConfiguration(minimumDelay: .milliseconds(20)))
        let actions = Self.run(&buffer, Self.stream(count: 30) { _ in .milliseconds(30) }, ticks: 30)
        #expect(Array(actions.prefix(4)) == [.waiting, .waiting, .play([0]), .play([1])])
        #expect(buffer.statistics.stretched == 0)
        #expect(buffer.statistics.concealed == 0)
        #expect(buffer.statistics.currentDelay == .milliseconds(25))
        #expect(Self.played(actions) == (0..<28).map { UInt8($0) })
    }

    @Test func aBacklogBeforeTheFirstFrameStartsWithItsNewestPacketAndLeavesTheTargetAlone() {
        // Playout starts 200 ms after the peer's media (the first ten packets were kept for
        // us and arrive together at 200 ms); from then on the path is clean. The backlog is
        // skipped at once, before anything is heard, instead of being dropped frame by frame
        // mid-speech while its bunched transits hold the target up.
        var buffer = JitterBuffer()
        let packets = Self.stream(count: 100) { i in i < 10 ? .milliseconds(200 - 20 * i) : .milliseconds(20) }
        let actions = Self.run(&buffer, packets, ticks: 100)
        #expect(Array(actions.prefix(11)) == Array(repeating: .waiting, count: 10) + [.play([9])])
        #expect(Self.played(actions) == (9..<99).map { UInt8($0) })
        #expect(buffer.statistics.shrunk == 9)
        #expect(buffer.statistics.stretched == 0 && buffer.statistics.concealed == 0)
        #expect(buffer.statistics.targetDelay == .milliseconds(10))
    }

    @Test func reorderedPacketsPlayInSequence() {
        var buffer = JitterBuffer()
        // Every odd packet arrives 15 ms later than its even successor.
        let actions = Self.run(&buffer, Self.stream(count: 60) { i in .milliseconds(i % 2 == 1 ? 40 : 5) }, ticks: 64)
        let played = Self.played(actions)
        #expect(played == played.sorted())
        // The first swap is a surprise (one frame concealed or recovered, its packet then late);
        // once the delay estimate has seen it, every later swap is absorbed.
        #expect(buffer.statistics.late <= 1)
        #expect(!actions.dropFirst(8).prefix(40).contains { if case .play = $0 { false } else { true } })
        #expect(played.count >= 50)
    }

    @Test func duplicatesArePlayedOnce() {
        var buffer = JitterBuffer()
        var packets = Self.stream(count: 30) { _ in .milliseconds(10) }
        packets += packets[5..<10].map { var p = $0; p.delay = .milliseconds(12); return p }  // still early
        packets += packets[0..<3].map { var p = $0; p.delay = .milliseconds(200); return p }  // after playout
        let actions = Self.run(&buffer, packets, ticks: 32)
        #expect(Self.played(actions) == (0..<30).map { UInt8($0) })
        #expect(buffer.statistics.duplicates == 8)
    }

    /// With a frame of delay in hand, the packet after a lost one is there in time for its FEC.
    static let oneFrameHeld = JitterBufferConfiguration(minimumDelay: .milliseconds(20))

    @Test func aSingleLossIsRecoveredFromTheNextPacketsFEC() {
        var buffer = JitterBuffer(configuration: Self.oneFrameHeld)
        let actions = Self.run(&buffer, Self.stream(count: 40) { i in i == 10 ? nil : .milliseconds(30) }, ticks: 40)
        #expect(actions.contains(.recover(fromNext: [11])))
        #expect(buffer.statistics.fecRecovered == 1)
        #expect(buffer.statistics.lost == 1)
        #expect(buffer.statistics.concealed == 0)
    }

    @Test func aFirstLossOnACleanPathHoldsAFrameSoThatFECRebuildsIt() {
        // At the default floor a clean path plays each packet as it comes, so when the first
        // gap comes the packet after it is not there yet. The buffer holds that frame one tick
        // (one stretch: a concealed frame continues the audio) and keeps the extra frame for
        // the FEC hold: the gap and a later loss are both rebuilt from the next packet's FEC.
        var buffer = JitterBuffer()
        let lost: Set<Int> = [10, 30]
        let actions = Self.run(&buffer, Self.stream(count: 60) { lost.contains($0) ? nil : .milliseconds(30) }, ticks: 60)
        let index = actions.firstIndex(of: .play([9]))!
        #expect(Array(actions[(index + 1)...(index + 3)]) == [.conceal, .recover(fromNext: [11]), .play([11])])
        #expect(actions.contains(.recover(fromNext: [31])))
        #expect(buffer.statistics.lost == 2)
        #expect(buffer.statistics.fecRecovered == 2)
        #expect(buffer.statistics.concealed == 0)
        #expect(buffer.statistics.stretched == 1)
    }

    @Test func aBurstLossIsConcealedThenRecovered() {
        var buffer = JitterBuffer(configuration: Self.oneFrameHeld)
        let lost: Set<Int> = [10, 11, 12]
        let actions = Self.run(&buffer, Self.stream(count: 40) { lost.contains($0) ? nil : .milliseconds(30) }, ticks: 40)
        let index = actions.firstIndex(of: .play([9]))!
        // The first tick of the gap holds (stretch), then two frames are concealed and the
        // third is rebuilt from packet 13's FEC.
        #expect(Array(actions[(index + 1)...(index + 5)]) == [.conceal, .conceal, .conceal, .recover(fromNext: [13]), .play([13])])
        #expect(buffer.statistics.stretched == 1)  // at the gap (the start waited a tick instead)
        #expect(buffer.statistics.lost == 3)
        #expect(buffer.statistics.concealed == 2)
        #expect(buffer.statistics.fecRecovered == 1)
    }

    @Test func discontinuousTransmissionIsSilenceNotLoss() {
        var buffer = JitterBuffer()
        // Sequence numbers stay consecutive while the timestamps skip 10 frames (sender in DTX).
        var packets = Self.stream(count: 20) { _ in .milliseconds(30) }
        let resumed = Self.stream(count: 20, sequenceBase: 120, timestampBase: 5000 + 30 * 960) { _ in .milliseconds(30) }
            .map { var p = $0; p.sentAt += .milliseconds(600); p.payload = [p.payload[0] + 100]; return p }
        packets += resumed
        let actions = Self.run(&buffer, packets, ticks: 52)  // 2 waiting + 40 packets + 10 DTX frames
        #expect(buffer.statistics.lost == 0)
        #expect(buffer.statistics.concealed == 0)
        #expect(buffer.statistics.silence == 10)
        #expect(Self.played(actions).suffix(3) == [117, 118, 119].map { UInt8($0) })
    }

    @Test func packetsLaterThanTheirFrameAreDroppedAsLate() {
        var buffer = JitterBuffer(configuration: JitterBufferConfiguration(maximumDelay: .milliseconds(60)))
        let actions = Self.run(&buffer, Self.stream(count: 40) { i in .milliseconds(i == 20 ? 500 : 30) }, ticks: 60)
        #expect(buffer.statistics.late == 1)
        #expect(!Self.played(actions).contains(20))
    }

    @Test func targetGrowsWithAJitterBurstAndShrinksWhenTheNetworkCalms() {
        var buffer = JitterBuffer()
        // Calm, then 2 s where every fifth packet is held 120 ms, then calm for 6 s.
        let packets = Self.stream(count: 450) { i in
            (100..<200).contains(i) && i % 5 == 0 ? .milliseconds(150) : .milliseconds(30)
        }
        var targetDuringBurst = Duration.zero
        var delayDuringBurst = Duration.zero
        _ = Self.run(&buffer, packets, ticks: 450) { tick, b in
            if tick == 199 {
                targetDuringBurst = b.statistics.targetDelay
                delayDuringBurst = b.statistics.currentDelay
            }
        }
        #expect(targetDuringBurst >= .milliseconds(120), "target during the burst: \(targetDuringBurst)")
        #expect(delayDuringBurst >= .milliseconds(100), "delay during the burst: \(delayDuringBurst)")
        #expect(buffer.statistics.targetDelay <= .milliseconds(30), "target after calm: \(buffer.statistics.targetDelay)")
        #expect(buffer.statistics.currentDelay <= .milliseconds(50), "delay after calm: \(buffer.statistics.currentDelay)")
        #expect(buffer.statistics.stretched > 0)
        #expect(buffer.statistics.shrunk > 0)
    }

    @Test func theTargetNeverExceedsTheConfiguredMaximum() {
        var buffer = JitterBuffer(configuration: JitterBufferConfiguration(maximumDelay: .milliseconds(80)))
        var rng = SplitMix64(seed: 3)
        let delays = (0..<300).map { _ in Duration.milliseconds(Int64(rng.next() % 400)) }
        _ = Self.run(&buffer, Self.stream(count: 300) { delays[$0] }, ticks: 320) { _, b in
            #expect(b.statistics.targetDelay <= .milliseconds(80))
        }
        #expect(buffer.bufferedPackets <= 8)
    }

    @Test func sequenceAndTimestampWrapAround() {
        var buffer = JitterBuffer()
        let packets = Self.stream(count: 60, sequenceBase: 0xFFF0, timestampBase: 0xFFFF_FFFF - 20 * 960) { _ in .milliseconds(30) }
        let actions = Self.run(&buffer, packets, ticks: 60)
        #expect(Self.played(actions) == (0..<59).map { UInt8($0) })
        #expect(buffer.statistics.lost == 0)
    }

    // MARK: - Redundant copies (RFC 2198)

    /// Like `run`, but every packet also carries the one before it, as a redundant copy.
    static func runWithRedundancy(_ buffer: inout JitterBuffer, _ packets: [Sent], ticks: Int) -> [PlayoutAction] {
        let arrivals = packets.enumerated().compactMap { i, p in p.delay.map { (p.sentAt + $0, i) } }.sorted { $0.0 < $1.0 }
        var next = 0
        var actions: [PlayoutAction] = []
        for tick in 0..<ticks {
            let now = Duration.milliseconds(20 * tick + 15)
            while next < arrivals.count && arrivals[next].0 <= now {
                let (arrival, i) = arrivals[next]
                let p = packets[i]
                buffer.insert(sequence: p.sequence, timestamp: p.timestamp, payload: p.payload, arrival: arrival)
                if i > 0 {
                    let previous = packets[i - 1]
                    buffer.insertRedundant(sequence: previous.sequence, timestamp: previous.timestamp,
                                           payload: previous.payload, arrival: arrival)
                }
                next += 1
            }
            actions.append(buffer.nextFrame(now: now))
        }
        return actions
    }

    @Test func aLostPacketPlaysWholeFromTheNextOnesRedundantCopy() {
        var buffer = JitterBuffer()
        let lost: Set<Int> = [20, 40, 41, 60]
        let packets = Self.stream(count: 100) { lost.contains($0) ? nil : .milliseconds(30) }
        let actions = Self.runWithRedundancy(&buffer, packets, ticks: 102)
        let s = buffer.statistics
        // 20 and 60 come back from 21's and 61's copies; of 40 and 41 only 41 does (42 carries
        // 41), so 40 is the one frame left to conceal or rebuild by FEC.
        #expect(s.redundancyRecovered == 3)
        #expect(s.lost == 4 && s.fecRecovered + s.concealed == 1, "\(s) \(actions)")
        let played = Self.played(actions)
        #expect(played.contains(20) && played.contains(41) && played.contains(60) && !played.contains(40))
        #expect(played == played.sorted(), "in order")
        // The copies' arrivals are not delay measurements: the target stays where the real
        // packets put it (the first gap holds one frame for a while, as for FEC).
        #expect(s.packetsPlayed + s.redundancyRecovered == played.count)
        #expect(s.duplicates == 0 && s.late == 0)
    }

    @Test func aCopyOfAFrameThatArrivedOrWhoseTurnPassedIsIgnored() {
        var buffer = JitterBuffer()
        buffer.insert(sequence: 10, timestamp: 9_600, payload: [10], arrival: .milliseconds(200))
        // Not started: nothing to fill. (`wantsRedundant` says beforehand what each insert does.)
        #expect(!buffer.wantsRedundant(sequence: 9, timestamp: 8_640))
        let early = buffer.insertRedundant(sequence: 9, timestamp: 8_640, payload: [9], arrival: .milliseconds(200))
        #expect(!early)
        let first = buffer.nextFrame(now: .milliseconds(205))
        #expect(first == .play([10]))
        buffer.insert(sequence: 11, timestamp: 10_560, payload: [11], arrival: .milliseconds(220))
        // 10 arrived (and played), 9 is older than playout: both copies are dropped, uncounted.
        #expect(!buffer.wantsRedundant(sequence: 10, timestamp: 9_600) && !buffer.wantsRedundant(sequence: 9, timestamp: 8_640))
        let arrived = buffer.insertRedundant(sequence: 10, timestamp: 9_600, payload: [10], arrival: .milliseconds(220))
        let passed = buffer.insertRedundant(sequence: 9, timestamp: 8_640, payload: [9], arrival: .milliseconds(220))
        #expect(!arrived && !passed)
        #expect(buffer.statistics.duplicates == 0 && buffer.statistics.late == 0)
        let second = buffer.nextFrame(now: .milliseconds(225))
        #expect(second == .play([11]))

        // 12's copy comes first (13 overtook it); 12 itself then arrives and takes its place once.
        buffer.insert(sequence: 13, timestamp: 12_480, payload: [13], arrival: .milliseconds(240))
        #expect(buffer.wantsRedundant(sequence: 12, timestamp: 11_520))
        let copyKept = buffer.insertRedundant(sequence: 12, timestamp: 11_520, payload: [112], arrival: .milliseconds(240))
        let originalKept = buffer.insert(sequence: 12, timestamp: 11_520, payload: [12], arrival: .milliseconds(241))
        #expect(copyKept && originalKept)
        #expect(!buffer.wantsRedundant(sequence: 12, timestamp: 11_520), "a second copy of a frame held is not wanted")
        #expect(buffer.bufferedPackets == 2)
        let third = buffer.nextFrame(now: .milliseconds(245)), fourth = buffer.nextFrame(now: .milliseconds(265))
        #expect(third == .play([12]) && fourth == .play([13]))
        #expect(buffer.statistics.redundancyRecovered == 0 && buffer.statistics.packetsPlayed == 4)
    }
}

@Suite struct ReceptionStatisticsTests {
    @Test func jitterFollowsRFC3550AppendixA8() {
        var stats = ReceptionStatistics(clockRate: 48_000)
        // On time, 5 ms late, on time: |D| = 240 units twice.
        stats.record(sequence: 1, timestamp: 0, ssrc: 7, arrival: .zero)
        stats.record(sequence: 2, timestamp: 960, ssrc: 7, arrival: .milliseconds(25))
        #expect(abs(stats.jitter - 15) < 1e-9)
        stats.record(sequence: 3, timestamp: 1920, ssrc: 7, arrival: .milliseconds(40))
        #expect(abs(stats.jitter - (15 + (240 - 15) / 16.0)) < 1e-9)
    }

    @Test func lossAndFractionLostAreComputedPerInterval() {
        var stats = ReceptionStatistics(clockRate: 48_000)
        for seq: UInt16 in 0..<100 where seq % 10 != 3 {  // 10 % loss
            stats.record(sequence: seq, timestamp: UInt32(seq) * 960, ssrc: 7, arrival: .milliseconds(20 * Int64(seq)))
        }
        #expect(stats.cumulativeLost == 10)
        let block = stats.makeReportBlock(now: .seconds(2))!
        #expect(block.fractionLost == 25)  // 10/100 × 256 = 25.6, truncated
        #expect(block.cumulativeLost == 10)
        #expect(block.extendedHighestSequence == 99)
        // A clean second interval reports fraction 0 and keeps the cumulative count.
        for seq: UInt16 in 100..<150 {
            stats.record(sequence: seq, timestamp: UInt32(seq) * 960, ssrc: 7, arrival: .milliseconds(20 * Int64(seq)))
        }
        let next = stats.makeReportBlock(now: .seconds(3))!
        #expect(next.fractionLost == 0)
        #expect(next.cumulativeLost == 10)
    }

    @Test func duplicatesAreCountedNotReceivedTwice() {
        var stats = ReceptionStatistics(clockRate: 48_000)
        let first = stats.record(sequence: 5, timestamp: 0, ssrc: 1, arrival: .zero)
        let again = stats.record(sequence: 5, timestamp: 0, ssrc: 1, arrival: .zero)
        #expect(first)
        #expect(!again)
        #expect(stats.duplicates == 1)
        #expect(stats.packetsReceived == 1)
    }

    @Test func sequenceWrapExtendsTheHighestSequence() {
        var stats = ReceptionStatistics(clockRate: 48_000)
        for i in 0..<20 {
            let seq = UInt16(truncatingIfNeeded: 0xFFF6 + i)
            stats.record(sequence: seq, timestamp: UInt32(i * 960), ssrc: 1, arrival: .milliseconds(Int64(20 * i)))
        }
        #expect(stats.extendedHighestSequence == 0x1_0009)
        #expect(stats.cumulativeLost == 0)
    }

    @Test func reportBlockCarriesLSRAndDLSR() {
        var stats = ReceptionStatistics(clockRate: 48_000)
        stats.record(sequence: 1, timestamp: 0, ssrc: 1, arrival: .zero)
        let ntp: UInt64 = 0x0000_1234_5678_0000
        stats.recordSenderReport(ntpTimestamp: ntp, arrival: .seconds(1))
        let block = stats.makeReportBlock(now: .milliseconds(1500))!
        #expect(block.lastSenderReport == 0x1234_5678)
        #expect(block.delaySinceLastSenderReport == 0x8000)  // 0.5 s in 1/65536 s
    }
}
