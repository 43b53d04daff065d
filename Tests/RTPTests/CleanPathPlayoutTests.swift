import RTP
import Testing

/// Playout on a clean path: no loss, no jitter worth the name, only a packet now and then a few
/// milliseconds late (the sender's host was busy for a moment). Playout must not move its delay
/// for that: each move is heard, and a clean call should sound as the encoder made it.
@Suite struct CleanPathPlayoutTests {
    typealias Sent = JitterBufferTests.Sent

    /// A receiver whose ticks fall `phase` into each 20 ms period, time-stretching if the
    /// buffer does: when the buffer asks to grow, the frame is lengthened by a whole frame (what
    /// the stretcher does with a quiet one), which plays on its own next tick while the buffer's
    /// frame stays due; when it asks to shrink, two frames are taken in one tick.
    static func run(_ buffer: inout JitterBuffer, _ packets: [Sent], ticks: Int, phase: Duration,
                    onTick: ((Int, JitterBuffer) -> Void)? = nil) -> [PlayoutAction] {
        let arrivals = packets.compactMap { p in p.delay.map { (p.sentAt + $0, p) } }.sorted { $0.0 < $1.0 }
        var next = 0
        var actions: [PlayoutAction] = []
        var backlogFrames = 0
        for tick in 0..<ticks {
            let now = .milliseconds(20 * tick) + phase
            while next < arrivals.count && arrivals[next].0 <= now {
                let p = arrivals[next].1
                buffer.insert(sequence: p.sequence, timestamp: p.timestamp, payload: p.payload, arrival: arrivals[next].0)
                next += 1
            }
            defer { onTick?(tick, buffer) }
            if backlogFrames > 0 {
                backlogFrames -= 1
                continue
            }
            let action = buffer.nextFrame(now: now)
            actions.append(action)
            guard buffer.timeStretching, case .play = action else { continue }
            switch buffer.delayAdjustment {
            case .grow:
                buffer.noteTimeStretch(.grow)
                backlogFrames += 1
            case .shrink:
                buffer.noteTimeStretch(.shrink)
                actions.append(buffer.nextFrame(now: now))
            case .none:
                break
            }
        }
        return actions
    }

    @Test(arguments: [false, true])
    func aStartRightBehindThePacketsWaitsATickAndThenRidesOutPacketsAFewMillisecondsLate(stretching: Bool) {
        // Each packet arrives just as the tick that would play it comes. Started then, playout
        // would keep no margin at all, and the first packet 3 ms late would be missed (one
        // frame held, then a frame more kept for FEC for five seconds). One packet in 50 comes
        // 3 ms late: too rare to move the delay estimate.
        var buffer = JitterBuffer()
        buffer.timeStretching = stretching
        let packets = JitterBufferTests.stream(count: 600) { i in i % 50 == 25 ? .milliseconds(33) : .milliseconds(30) }
        let actions = Self.run(&buffer, packets, ticks: 600, phase: .milliseconds(10))
        #expect(Array(actions.prefix(3)) == [.waiting, .waiting, .play([0])])
        let stats = buffer.statistics
        #expect(stats.expanded == 0 && stats.compressed == 0 && stats.shrunk == 0 && stats.stretched == 0, "\(stats)")
        #expect(stats.concealed == 0 && stats.lost == 0 && stats.late == 0, "\(stats)")
        #expect(stats.targetDelay == .milliseconds(10) && stats.currentDelay == .milliseconds(20), "\(stats)")
        #expect(JitterBufferTests.played(actions) == (0..<598).map { UInt8($0 % 256) })
    }

    @Test(arguments: [5, 10, 15])
    func aStartWithMarginEnoughPlaysTheFirstPacketAtOnce(phase: Int) {
        // Ticks 15 to 25 ms after their packets (the target of 10 less a quarter frame is 5):
        // the first packet plays at the first tick that finds it.
        var buffer = JitterBuffer()
        buffer.timeStretching = true
        let packets = JitterBufferTests.stream(count: 100) { _ in .milliseconds(30 - phase) }
        let actions = Self.run(&buffer, packets, ticks: 100, phase: .milliseconds(10))
        #expect(Array(actions.prefix(2)) == [.waiting, .play([0])])
        #expect(buffer.statistics.currentDelay == .milliseconds(Int64(phase)))
    }

    @Test func onArrivalTheFirstFrameStartsOnlyIfTheTicksFallFarEnoughBehindItsPacket() {
        // The node plays the first packet as it arrives, between ticks: only if the ticks that
        // follow find their packets at least the target less a quarter frame after they came.
        var buffer = JitterBuffer()
        buffer.insert(sequence: 1, timestamp: 960, payload: [1], arrival: .milliseconds(1_000))
        #expect(buffer.mayStartOnArrival(ticksAt: .milliseconds(1_006)))
        #expect(buffer.mayStartOnArrival(ticksAt: .milliseconds(985)), "ticks at 5 ms and every 20 after it")
        #expect(!buffer.mayStartOnArrival(ticksAt: .milliseconds(1_004)))
        #expect(!buffer.mayStartOnArrival(ticksAt: .milliseconds(1_000)), "a tick at the arrival's instant")
        #expect(!buffer.mayStartOnArrival(ticksAt: .milliseconds(980)))
        _ = buffer.nextFrame(now: .milliseconds(1_006))
        #expect(!buffer.mayStartOnArrival(ticksAt: .milliseconds(1_006)), "started already")
    }

    @Test func aPacketLateButNotLostHoldsOneFrameAndStartsNoFECHold() throws {
        // Ticks a quarter frame after their packets, the least margin playout starts with. One
        // packet comes 15 ms late after three clean seconds: the first gap holds its frame one
        // tick, then the packet comes. It was late, not lost, and the frame held is all the
        // delay it needs; a loss would keep a frame more for FEC for five seconds (the delay
        // would move twice more, up and down).
        var buffer = JitterBuffer()
        buffer.timeStretching = true
        let packets = JitterBufferTests.stream(count: 500) { i in i == 150 ? .milliseconds(45) : .milliseconds(30) }
        var targets: Set<Duration> = []
        let actions = Self.run(&buffer, packets, ticks: 500, phase: .milliseconds(15)) { tick, b in
            if tick > 152 { targets.insert(b.statistics.targetDelay) }
        }
        let index = try #require(actions.firstIndex(of: .play([149])))
        #expect(Array(actions[(index + 1)...(index + 3)]) == [.conceal, .play([150]), .play([151])])
        let stats = buffer.statistics
        #expect(stats.stretched == 1 && stats.lost == 0 && stats.late == 0 && stats.concealed == 0, "\(stats)")
        #expect(stats.expanded == 0 && stats.compressed == 0, "\(stats)")
        #expect(targets == [.milliseconds(10)], "the target after the late packet: \(targets)")
        #expect(JitterBufferTests.played(actions).count == 498)
    }

    @Test func aStallOfTheSendersHostAsTheCallStartsDoesNotSetTheTarget() {
        // Both hosts are busy as a call starts: the sender's host holds its fourth packet 24 ms
        // and sends the fifth with it. With five transits in the history, the latest would be
        // its 95th percentile, the target 34 ms: the delay grown twice in the first words and
        // given back two seconds later. Seen once, the stall leaves the target alone; its late
        // packet is waited for once (the frame held at the first gap), and that is all.
        var buffer = JitterBuffer()
        buffer.timeStretching = true
        let packets = JitterBufferTests.stream(count: 300) { i in
            i == 3 ? .milliseconds(54) : i == 4 ? .milliseconds(34) : .milliseconds(30)
        }
        var targets: Set<Duration> = []
        let actions = Self.run(&buffer, packets, ticks: 300, phase: .milliseconds(15)) { _, b in
            targets.insert(b.statistics.targetDelay)
        }
        let stats = buffer.statistics
        #expect(targets == [.milliseconds(10)], "targets: \(targets)")
        #expect(stats.expanded == 0 && stats.lost == 0 && stats.concealed == 0, "\(stats)")
        #expect(stats.stretched <= 1 && stats.compressed <= 1, "\(stats)")
        #expect(JitterBufferTests.played(actions).prefix(10) == ArraySlice((0..<10).map { UInt8($0) }))
    }

    @Test func packetsLateAgainAndAgainFromTheStartRaiseTheTargetWithinASecond() {
        // A path with real jitter from its first packet: every fourth packet 15 ms late. The
        // start leaves out four late packets, as the rest of the call does; the fifth within the
        // history sets the target to cover them.
        var buffer = JitterBuffer()
        buffer.timeStretching = true
        let packets = JitterBufferTests.stream(count: 300) { i in i % 4 == 3 ? .milliseconds(45) : .milliseconds(30) }
        var raisedAt: Int?
        _ = Self.run(&buffer, packets, ticks: 300, phase: .milliseconds(15)) { tick, b in
            if raisedAt == nil, b.statistics.targetDelay >= .milliseconds(25) { raisedAt = tick }
        }
        #expect((raisedAt ?? .max) <= 25, "raised at tick \(String(describing: raisedAt))")
        #expect(buffer.statistics.targetDelay == .milliseconds(25), "\(buffer.statistics)")
    }

    @Test func packetsLateAgainWithinSecondsAreWaitedForOnceAndTheDelayGivenBackOnceAfterThem() {
        // After three clean seconds, four packets half a second apart come 25 ms late (the
        // sender's host busy for a moment each time): too few to move the target. Playout holds
        // a frame for the first and keeps that delay while such packets are in its history; it
        // gives the delay back once, two seconds after the last. Giving it back at once would
        // hold a frame again for the next late packet, and again: each move heard.
        var buffer = JitterBuffer()
        buffer.timeStretching = true
        let late: Set<Int> = [150, 175, 200, 225]
        let packets = JitterBufferTests.stream(count: 500) { i in late.contains(i) ? .milliseconds(55) : .milliseconds(30) }
        var compressedAt: [Int] = []
        var compressed = 0
        let actions = Self.run(&buffer, packets, ticks: 500, phase: .milliseconds(5)) { tick, b in
            if b.statistics.compressed > compressed {
                compressed = b.statistics.compressed
                compressedAt.append(tick)
            }
        }
        let stats = buffer.statistics
        #expect(stats.stretched == 1 && stats.expanded == 0 && stats.compressed == 1, "\(stats)")
        #expect(stats.lost == 0 && stats.concealed == 0 && stats.late == 0, "\(stats)")
        #expect(compressedAt.allSatisfy { $0 > 225 + 100 }, "given back at ticks \(compressedAt)")
        #expect(JitterBufferTests.played(actions).count >= 497)
    }

    @Test func aLossAfterALatePacketStillHoldsForFEC() {
        // Packet 150 is late, packet 300 lost. The frame held for the late one stays in the
        // delay, so the packet after the lost one is there in time and its FEC rebuilds it,
        // and the loss starts the FEC hold without a second frame held.
        var buffer = JitterBuffer()
        let packets = JitterBufferTests.stream(count: 500) { i in
            i == 150 ? .milliseconds(45) : i == 300 ? nil : .milliseconds(30)
        }
        let actions = Self.run(&buffer, packets, ticks: 500, phase: .milliseconds(15))
        #expect(actions.contains(.recover(fromNext: [UInt8(301 % 256)])))
        let stats = buffer.statistics
        #expect(stats.lost == 1 && stats.fecRecovered == 1 && stats.concealed == 0, "\(stats)")
        #expect(stats.stretched == 1, "\(stats)")
        #expect(stats.targetDelay == .milliseconds(30), "the FEC hold keeps a frame more: \(stats)")
    }
}
