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

    @Test func aPacketLateButNotLostAfterACleanStretchIsConcealedInPlaceAndMovesNothing() throws {
        // Ticks a quarter frame after their packets, the least margin playout starts with. One
        // packet comes 15 ms late after three clean seconds (the sender's host busy a moment).
        // Nothing has been lost, so the gap is taken for such a stall: its frame is concealed
        // in place, not held (a frame held moves the delay in the middle of speech). When the
        // packet comes, late, it is counted late, not lost, and handed back with the next frame
        // so the decoder's state follows the stream again. No delay moves, no FEC hold.
        var buffer = JitterBuffer()
        buffer.timeStretching = true
        let packets = JitterBufferTests.stream(count: 500) { i in i == 150 ? .milliseconds(45) : .milliseconds(30) }
        var targets: Set<Duration> = []
        var resyncs: [[UInt8]] = []
        let actions = Self.run(&buffer, packets, ticks: 500, phase: .milliseconds(15)) { tick, b in
            if tick > 152 { targets.insert(b.statistics.targetDelay) }
            if !b.resyncPayloads.isEmpty { resyncs.append(contentsOf: b.resyncPayloads) }
        }
        let index = try #require(actions.firstIndex(of: .play([149])))
        #expect(Array(actions[(index + 1)...(index + 2)]) == [.conceal, .play([151])])
        #expect(resyncs == [[150]], "the late packet goes to the decoder with the frame after it: \(resyncs)")
        let stats = buffer.statistics
        #expect(stats.stretched == 0 && stats.lost == 0 && stats.late == 1 && stats.concealed == 1, "\(stats)")
        #expect(stats.expanded == 0 && stats.compressed == 0, "\(stats)")
        #expect(targets == [.milliseconds(10)], "the target after the late packet: \(targets)")
        let expected: [UInt8] = (0..<499).filter { $0 != 150 }.map { UInt8($0 % 256) }
        #expect(JitterBufferTests.played(actions) == expected, "every frame but the late one, in order")
    }

    @Test func aPacketLostAfterACleanStretchIsConcealedInPlaceThenTheDelayHoldsForFEC() throws {
        // The same gap, but its packet never comes: lost. It was concealed in place; a tick
        // later with no packet for it, the FEC hold starts (a frame more in the target), and
        // the next gap is held a tick for the packet after it, which rebuilds it.
        var buffer = JitterBuffer()
        buffer.timeStretching = true
        let packets = JitterBufferTests.stream(count: 300) { i in i == 150 || i == 160 ? nil : .milliseconds(30) }
        var targetAt: [Int: Duration] = [:]
        let actions = Self.run(&buffer, packets, ticks: 300, phase: .milliseconds(15)) { tick, b in
            targetAt[tick] = b.statistics.targetDelay
            #expect(b.resyncPayloads.isEmpty)
        }
        let index = try #require(actions.firstIndex(of: .play([149])))
        #expect(actions[index + 1] == .conceal && actions[index + 2] == .play([151]))
        #expect(targetAt[index - 1] == .milliseconds(10) && targetAt[index + 3] == .milliseconds(30), "\(targetAt[index + 3] ?? .zero)")
        #expect(actions.contains(.recover(fromNext: [161])), "the second loss, under the FEC hold, is rebuilt")
        let stats = buffer.statistics
        #expect(stats.lost == 2 && stats.concealed == 1 && stats.fecRecovered == 1 && stats.late == 0, "\(stats)")
    }

    @Test func aSixtyMillisecondStallIsConcealedInPlaceFrameByFrameAndItsPacketsGoToTheDecoderInOrder() throws {
        // The sender's host stalls 60 ms three seconds in: packets 150, 151 and 152 arrive
        // together with 153, 60, 40 and 20 ms late. Each of the three frames is concealed where
        // it falls (none held: nothing moves the delay), and when they come, late, all three
        // are counted late, not lost, and handed in order to the decoder with 153.
        var buffer = JitterBuffer()
        buffer.timeStretching = true
        let late: [Int: Int64] = [150: 60, 151: 40, 152: 20]
        let packets = JitterBufferTests.stream(count: 500) { i in .milliseconds(30 + (late[i] ?? 0)) }
        var resyncs: [[[UInt8]]] = []
        var startsInPlace = 0
        let actions = Self.run(&buffer, packets, ticks: 500, phase: .milliseconds(15)) { _, b in
            if !b.resyncPayloads.isEmpty { resyncs.append(b.resyncPayloads) }
            if b.startsConcealingInPlace { startsInPlace += 1 }
        }
        let index = try #require(actions.firstIndex(of: .play([149])))
        #expect(Array(actions[(index + 1)...(index + 4)]) == [.conceal, .conceal, .conceal, .play([153])])
        #expect(resyncs == [[[150], [151], [152]]], "the late packets, in order, with the frame after them: \(resyncs)")
        #expect(startsInPlace == 1, "the decoder's state is kept once, before the first frame concealed")
        let stats = buffer.statistics
        #expect(stats.stretched == 0 && stats.lost == 0 && stats.late == 3 && stats.concealed == 3, "\(stats)")
        #expect(stats.expanded == 0 && stats.compressed == 0, "\(stats)")
        let expected: [UInt8] = (0..<499).filter { !(150...152).contains($0) }.map { UInt8($0 % 256) }
        #expect(JitterBufferTests.played(actions) == expected, "every frame but the late ones, in order")
    }

    @Test func aGapLongerThanAStallIsLossAndTheDelayHoldsForFEC() throws {
        // Nine packets in a row never come. Seven frames are concealed in place (it could be a
        // stall of up to 140 ms); at the eighth with nothing come it is loss: the FEC hold starts (a frame more
        // in the target) and the rest of the gap is concealed as lost. Nothing is handed to the
        // decoder as late, and the next loss, under the hold, is rebuilt from FEC.
        var buffer = JitterBuffer()
        buffer.timeStretching = true
        let packets = JitterBufferTests.stream(count: 300) { i in (150...158).contains(i) || i == 170 ? nil : .milliseconds(30) }
        var targetAt: [Int: Duration] = [:]
        let actions = Self.run(&buffer, packets, ticks: 300, phase: .milliseconds(15)) { tick, b in
            targetAt[tick] = b.statistics.targetDelay
            #expect(b.resyncPayloads.isEmpty)
        }
        let index = try #require(actions.firstIndex(of: .play([149])))
        #expect(Array(actions[(index + 1)...(index + 10)]) == Array(repeating: .conceal, count: 9) + [.play([159])])
        #expect(targetAt[index + 7] == .milliseconds(10) && targetAt[index + 8] == .milliseconds(30), "\(targetAt[index + 8] ?? .zero)")
        #expect(actions.contains(.recover(fromNext: [171])), "the next loss, under the FEC hold, is rebuilt")
        let stats = buffer.statistics
        #expect(stats.lost == 10 && stats.concealed == 9 && stats.fecRecovered == 1 && stats.late == 0, "\(stats)")
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
        // A path that lost its 21st packet, so a gap may be loss and is held a tick for the FEC
        // in the packet after it. After the FEC hold, four packets half a second apart come
        // 25 ms late (the sender's host busy for a moment each time): too few to move the
        // target. Playout holds a frame for the first and keeps that delay while such packets
        // are in its history; it gives the delay back once, two seconds after the last. Giving
        // it back at once would hold a frame again for the next late packet, and again: each
        // move heard.
        var buffer = JitterBuffer()
        buffer.timeStretching = true
        let late: Set<Int> = [350, 375, 400, 425]
        let packets = JitterBufferTests.stream(count: 700) { i in
            i == 20 ? nil : late.contains(i) ? .milliseconds(55) : .milliseconds(30)
        }
        var compressedAt: [Int] = []
        var compressed = 0
        var stretchedBefore = 0
        let actions = Self.run(&buffer, packets, ticks: 700, phase: .milliseconds(5)) { tick, b in
            if b.statistics.compressed > compressed {
                compressed = b.statistics.compressed
                compressedAt.append(tick)
            }
            if tick == 349 { stretchedBefore = b.statistics.stretched }
        }
        let stats = buffer.statistics
        #expect(stats.stretched - stretchedBefore == 1 && stats.expanded == 0, "one frame held for the late packets: \(stats)")
        #expect(stats.lost == 1 && stats.late == 0, "\(stats)")
        let afterLate = compressedAt.filter { $0 >= 350 }
        #expect(afterLate.count == 1 && afterLate.allSatisfy { $0 > 425 + 100 }, "given back at ticks \(compressedAt)")
        #expect(JitterBufferTests.played(actions).count >= 694)
    }

    @Test func aLossAfterALatePacketStartsTheFECHoldAndTheNextLossIsRebuilt() {
        // Packet 150 is late, packets 300 and 400 lost. The late one is concealed in place
        // (nothing lost yet), and so is the first loss: a tick later with no packet for it, the
        // FEC hold starts and the delay grows a frame. The packet after the second loss is then
        // there in time and its FEC rebuilds it.
        var buffer = JitterBuffer()
        let packets = JitterBufferTests.stream(count: 500) { i in
            i == 150 ? .milliseconds(45) : i == 300 || i == 400 ? nil : .milliseconds(30)
        }
        let actions = Self.run(&buffer, packets, ticks: 500, phase: .milliseconds(15))
        #expect(actions.contains(.recover(fromNext: [UInt8(401 % 256)])))
        #expect(!actions.contains(.recover(fromNext: [UInt8(301 % 256)])))
        let stats = buffer.statistics
        #expect(stats.lost == 2 && stats.fecRecovered == 1 && stats.late == 1, "\(stats)")
        #expect(stats.targetDelay == .milliseconds(30), "the FEC hold keeps a frame more: \(stats)")
    }
}
