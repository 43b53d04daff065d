import Clocks

/// An adaptive jitter buffer for fixed-duration audio frames.
///
/// Reorders packets, drops duplicates and packets too late to play, and says per frame whether
/// to decode, recover with FEC, conceal or play DTX silence. Its target delay follows the 95th
/// percentile of measured packet delay variation over recent packets, between
/// ``JitterBufferConfiguration/minimumDelay`` and ``JitterBufferConfiguration/maximumDelay``:
/// playout stretches (one concealed frame) when the delay is below target and drops a frame when
/// it is well above, at most one frame every few, so it adapts without audible jumps — or, for a
/// caller that time-stretches (``timeStretching``), says which way the delay should move.
///
/// Playout always catches up with the packets it holds: after this node stalls
/// (``skip(frames:)``), when far more audio is buffered than the delay needs, when the peer's
/// timestamps jump while its sequence numbers run on, when the peer's stream falls behind the
/// playout position, or on a new stream (``restart()``), playout moves to the packets it holds
/// and reports a ``PlayoutReset`` (``takeResets()``). It never discards the frames due next.
///
/// A plain value driven by the caller's clock: ``insert(sequence:timestamp:payload:arrival:)``
/// on arrival and ``nextFrame(now:)`` once per frame period. Deterministic for tests.
public struct JitterBuffer: Sendable {
    public let configuration: JitterBufferConfiguration
    public private(set) var statistics = JitterBufferStatistics()
    /// Whether a packet carries in-band FEC for the frame before it (for Opus, the LBRR flag).
    /// `nil`: assume it does. A lost frame whose next packet carries none is concealed.
    public var carriesFEC: (@Sendable ([UInt8]) -> Bool)?
    /// How far back the peer's redundant copies go, in frames (RFC 2198; the deepest copy's
    /// offset, 3 for copies 1, 2 and 3 back or for copies 1 and 3 back). While losses happen
    /// (the FEC hold), the delay holds that many frames and half a frame more, so the deepest
    /// copy arrives before its frame is due; on a clean path it adds nothing.
    public var redundancyDepth = 0
    /// Whether the caller time-stretches (``TimeStretcher``): the buffer then moves its delay
    /// by neither dropping nor inserting whole frames, and says which way it wants it to move
    /// (``delayAdjustment``) for the caller to lengthen or shorten the audio it decodes.
    public var timeStretching = false
    /// Decoded audio waiting to play outside the buffer (the stretcher's backlog), counted in
    /// the delay the buffer steers by. Set before each ``nextFrame(now:)``.
    public var outputBacklog: Duration = .zero
    /// With ``timeStretching``: which way the delay should move, as of the last frame taken.
    public private(set) var delayAdjustment: DelayAdjustment = .none

    private struct Entry {
        var sequence: Int64
        /// On the buffer's continuous timeline (the peer's timestamp plus the timeline offset).
        var timestamp: Int64
        var payload: [UInt8]
        /// Arrival − media time, as recorded in the transit history.
        var transit: Double
        /// A copy from a later packet's redundancy, not the frame's own packet.
        var redundant = false
    }
    /// Buffered packets in timestamp order.
    private var entries: [Entry] = []
    private var highestSequence: Int64?
    /// The last 256 sequence numbers received, by slot, to recognise duplicates.
    private var recentSequences = [Int64](repeating: -1, count: 256)
    private var highestTimestamp: Int64?

    /// The packet with the highest sequence number so far: its peer timestamp (extended, for
    /// extending the next ones), its timestamp on our timeline, and its arrival in seconds.
    private var newest: (sequence: Int64, peerTimestamp: Int64, timestamp: Int64, arrival: Double)?
    /// Added to the peer's (extended) timestamps to place them on our continuous timeline; it
    /// changes when the peer's timestamps jump or its stream falls behind.
    private var timelineOffset: Int64 = 0
    /// The offset before the last change, for packets sent before it (reordered across it).
    private var previousOffset: (before: Int64, offset: Int64)?
    /// Newest packets that arrived after their frame was due, in a row: if nothing else is left
    /// to play, the peer's stream runs behind our playout position and playout moves to them.
    private var lateRun: [Entry] = []
    private var resets: [PlayoutReset] = []
    /// Recent sequence numbers of the peer's packets that carry no audio frame (DTMF events):
    /// a gap they explain is not loss.
    private var nonAudio: [Int64] = []
    /// After this node stalled: packets before this timestamp were held up by the stall, and
    /// their transits say nothing about the network.
    private var stallHorizon: Int64?

    /// Transit (arrival − media time) of recent packets.
    private var transits: TransitHistory

    /// The timestamp of the next frame to play; `nil` until playout starts.
    private var nextTimestamp: Int64?
    private var lastPlayedSequence: Int64?
    /// Frames concealed since the last played packet, re-counted as DTX silence if the next
    /// packet shows the sender paused on purpose.
    private var concealedSinceLastPacket = 0
    private var framesSinceShrink = 0
    /// Frames left during which a recent loss keeps one extra frame of delay for FEC.
    private var fecHoldFrames = 0
    /// The deepest redundancy seen during the current FEC hold: the delay it added stays until
    /// the hold ends, so a peer moving between depths does not move playout back and forth
    /// (each move a frame dropped or inserted in the speech).
    private var heldDepth = 0
    /// The delay the latest packet in the history needed (its delay variation and half a frame):
    /// playout gives back no delay such a packet needed while it is in the history. The target
    /// leaves out the latest few packets; without this, a packet waited for (a frame held for it)
    /// would be followed by a compression at once, and the next late one by another hold.
    private var recentNeed: Duration = .zero
    /// The frame held one tick at the first gap after a clean stretch, until the next tick
    /// says whether its packet was lost or only late.
    private var heldAtFirstGap: Int64?
    /// Frames concealed in place at a gap while nothing had been lost, until they settle.
    private var inPlace: InPlaceConcealment?
    /// With a ``PlayoutAction/play(_:)``: the payloads of the frames right before it, concealed
    /// in place and come late (a stall of the sender's host), in order, for a decoder whose
    /// state carries over (Opus) to decode first from its state before them; or none.
    public private(set) var resyncPayloads: [[UInt8]] = []
    /// Whether the frame just concealed starts a run concealed in place whose packets may still
    /// come: a decoder whose state carries over keeps its state from before it.
    public private(set) var startsConcealingInPlace = false

    public init(configuration: JitterBufferConfiguration = JitterBufferConfiguration()) {
        self.configuration = configuration
        transits = TransitHistory(length: configuration.historyLength)
        statistics.targetDelay = configuration.minimumDelay
        entries.reserveCapacity(32)
    }

    /// Packets waiting to be played.
    public var bufferedPackets: Int { entries.count }

    /// No frame has been taken yet: the next ``nextFrame(now:)`` with a packet buffered starts playout.
    public var isWaitingToStart: Bool { nextTimestamp == nil }

    /// The most packets held at once: three times the maximum delay's worth (a stalled node
    /// reads a whole backlog at once), at least 16.
    public var capacity: Int { max(16, 3 * Int(configuration.maximumDelay / configuration.frameDuration) + 4) }

    /// A timestamp step this much larger or smaller than the sequence numbers and the packets'
    /// pace explain is a jump of the peer's timeline, not jitter or a pause in sending.
    private var jumpThreshold: Int64 {
        max(5 * configuration.samplesPerFrame, Int64(configuration.clockRate / 10))
    }

    /// The resets since the last call, oldest first.
    public mutating func takeResets() -> [PlayoutReset] {
        defer { resets.removeAll() }
        return resets
    }

    private mutating func reset(_ reason: PlayoutReset.Reason, samples: Int64) {
        statistics.playoutResets += 1
        let micros = samples * 1_000_000 / Int64(configuration.clockRate)
        resets.append(PlayoutReset(reason: reason, jump: .microseconds(micros)))
    }

    /// Adds a received packet.
    ///
    /// - Returns: `false` if it was dropped (duplicate, or too late to play).
    @discardableResult
    public mutating func insert(sequence: UInt16, timestamp: UInt32, payload: [UInt8], arrival: Duration) -> Bool {
        let seq = highestSequence.map { SequenceNumber.extend(sequence, near: $0) } ?? Int64(sequence)
        let slot = Int(seq & 255)
        if recentSequences[slot] == seq {
            statistics.duplicates += 1
            return false
        }
        recentSequences[slot] = seq
        statistics.packetsReceived += 1
        let peerTimestamp = newest.map { Self.extendTimestamp(timestamp, near: $0.peerTimestamp) } ?? Int64(timestamp)
        var ts = peerTimestamp + offset(forSequence: seq)
        let isNewest = newest.map { seq > $0.sequence } ?? true
        if isNewest {
            if let jump = timelineJump(sequence: seq, timestamp: ts, arrival: arrival.seconds) ?? offGrid(sequence: seq, timestamp: ts) {
                previousOffset = (seq, timelineOffset)
                timelineOffset -= jump
                ts -= jump
                // A step under a millisecond is a sender stamping its packets by its clock, not
                // a move anyone would hear: the stream is put back on the grid without a word.
                if abs(jump) * 1_000 >= Int64(configuration.clockRate) { reset(.timestampJump, samples: jump) }
            }
            newest = (seq, peerTimestamp, ts, arrival.seconds)
        }
        highestSequence = max(highestSequence ?? seq, seq)
        highestTimestamp = max(highestTimestamp ?? ts, ts)
        let transit = arrival.seconds - Double(ts) / Double(configuration.clockRate)
        // Packets sent while this node stalled were held up by the stall, not the network.
        if stallHorizon.map({ ts >= $0 }) ?? true { transits.record(transit, sequence: seq) }

        if let next = nextTimestamp, ts < next {
            statistics.late += 1
            if inPlace?.covers(ts, frame: configuration.samplesPerFrame) == true {
                // A frame concealed in place came after all: late, not lost.
                statistics.lost -= 1
                inPlace?.cameLate(ts, payload: payload)
            }
            // Packets held up by this node's own stall are late because we slept, not because
            // the peer's stream runs behind: they must not move the peer's timeline.
            if isNewest, stallHorizon.map({ ts >= $0 }) ?? true {
                lateRun.append(Entry(sequence: seq, timestamp: ts, payload: payload, transit: transit))
                if lateRun.count > 8 { lateRun.removeFirst() }
            }
            return false
        }
        if isNewest { lateRun.removeAll() }
        // Keep timestamp order; arrivals are nearly always in order, so search from the end.
        var index = entries.count
        while index > 0 && entries[index - 1].timestamp > ts { index -= 1 }
        if index > 0, entries[index - 1].timestamp == ts {
            // Its redundant copy came first (the packet was reordered, not lost): keep the original.
            entries[index - 1] = Entry(sequence: seq, timestamp: ts, payload: payload, transit: transit)
            return true
        }
        entries.insert(Entry(sequence: seq, timestamp: ts, payload: payload, transit: transit), at: index)
        // Bound the buffer. Too much is buffered only when playout is behind (a backlog read at
        // once): move playout forward with the oldest frames dropped, so the frames it plays
        // next are the ones still held.
        if entries.count > capacity {
            let excess = entries.count - capacity
            entries.removeFirst(excess)
            statistics.shrunk += excess
            if let next = nextTimestamp, let first = entries.first, first.timestamp > next {
                reset(.catchUp, samples: first.timestamp - next)
                nextTimestamp = first.timestamp
            }
        }
        return true
    }

    /// The offset that maps a packet's timestamp onto our timeline: the current one, or the one
    /// before the last jump for a packet sent before it.
    private func offset(forSequence sequence: Int64) -> Int64 {
        if let previous = previousOffset, sequence < previous.before { return previous.offset }
        return timelineOffset
    }

    /// For the newest packet so far: how far (in timestamp units) its timestamp jumped from what
    /// its sequence number and arrival explain, or `nil` if it continues the stream.
    ///
    /// A step backward beyond the threshold is always a jump. A step forward is also what a
    /// sender in discontinuous transmission (or one that paused and accounts for the pause)
    /// sends: then its packet arrives that much later too. So a forward step is a jump only if
    /// it is not matched by the time that passed since the previous packet arrived.
    private func timelineJump(sequence: Int64, timestamp: Int64, arrival: Double) -> Int64? {
        guard let newest, sequence - newest.sequence <= 3_000 else { return nil }
        let frame = configuration.samplesPerFrame
        let expected = newest.timestamp + (sequence - newest.sequence) * frame
        let step = timestamp - expected
        if step < -jumpThreshold { return step }
        guard step > jumpThreshold else { return nil }
        let rate = Double(configuration.clockRate)
        let paced = Double(sequence - newest.sequence) * Double(frame) / rate
        let unexplained = Double(step) / rate - max(0, arrival - newest.arrival - paced)
        return unexplained * rate > Double(jumpThreshold) ? step : nil
    }

    /// For the newest packet so far, when its timestamp stepped by other than whole frames from
    /// what its sequence number says (a sender that switched what it plays, as SIPp does between
    /// two files, or a PBX that moved the media and kept the stream): how far it is off the
    /// frames' grid, the nearest way. Playout takes a frame whose timestamp is the one due, so
    /// a stream shifted off the grid would never be played again; it is moved back onto it.
    private func offGrid(sequence: Int64, timestamp: Int64) -> Int64? {
        guard let newest else { return nil }
        let frame = configuration.samplesPerFrame
        var residual = (timestamp - newest.timestamp - (sequence - newest.sequence) * frame) % frame
        if residual > frame / 2 { residual -= frame } else if residual <= -frame / 2 { residual += frame }
        return residual == 0 ? nil : residual
    }

    /// Adds a frame carried again in a later packet (RFC 2198 redundancy), as `sequence` and
    /// `timestamp` of its own packet. It fills a gap only: a frame whose packet arrived, or
    /// whose turn has passed, is ignored, and it counts neither as received nor in the delay
    /// estimate (its arrival says nothing about the network's delay for it).
    ///
    /// - Returns: `true` if it was kept to fill a gap.
    @discardableResult
    public mutating func insertRedundant(sequence: UInt16, timestamp: UInt32, payload: [UInt8], arrival: Duration) -> Bool {
        guard let (seq, ts, index) = place(redundant: sequence, timestamp: timestamp) else { return false }
        let transit = arrival.seconds - Double(ts) / Double(configuration.clockRate)
        entries.insert(Entry(sequence: seq, timestamp: ts, payload: payload, transit: transit, redundant: true), at: index)
        return true
    }

    /// Whether ``insertRedundant(sequence:timestamp:payload:arrival:)`` would keep a copy of
    /// this frame (it is missing and not yet due): a caller asks before it opens or copies one.
    public func wantsRedundant(sequence: UInt16, timestamp: UInt32) -> Bool {
        place(redundant: sequence, timestamp: timestamp) != nil
    }

    /// Where a redundant copy of a frame goes: its extended sequence and timestamp and its
    /// index in `entries`; nil when it is not wanted (received, due already, too old, or
    /// playout has not started: it starts with the newest packet, no gap to fill).
    private func place(redundant sequence: UInt16, timestamp: UInt32) -> (Int64, Int64, Int)? {
        guard nextTimestamp != nil, let highSeq = highestSequence, let newest else { return nil }
        let seq = SequenceNumber.extend(sequence, near: highSeq)
        let ts = Self.extendTimestamp(timestamp, near: newest.peerTimestamp) + offset(forSequence: seq)
        if recentSequences[Int(seq & 255)] == seq { return nil }
        if let next = nextTimestamp, ts < next { return nil }
        guard seq > highSeq - 256 else { return nil }
        var index = entries.count
        while index > 0 && entries[index - 1].timestamp > ts { index -= 1 }
        if index > 0, entries[index - 1].timestamp == ts { return nil }
        return (seq, ts, index)
    }

    /// This node did not play `frames` frame periods (its process was paused or starved, and its
    /// clock skipped their ticks): playout moves on by as much, so it stays as far behind the
    /// peer as before, and what was due in between is dropped as late.
    public mutating func skip(frames: Int) {
        guard frames > 0, let next = nextTimestamp else { return }
        let moved = Int64(frames) * configuration.samplesPerFrame
        nextTimestamp = next + moved
        statistics.skipped += frames
        stallHorizon = next + moved
        while let first = entries.first, first.timestamp < next + moved { entries.removeFirst() }
        concealedSinceLastPacket = 0
        lateRun.removeAll()
        reset(.stall, samples: moved)
    }

    /// The peer started a new stream (a new SSRC): its sequence numbers and timestamps have
    /// nothing to do with the old ones. Playout starts over with its first packet; the
    /// statistics go on.
    public mutating func restart() {
        let kept = statistics, fec = carriesFEC, depth = redundancyDepth, stretching = timeStretching
        self = JitterBuffer(configuration: configuration)
        statistics = kept
        carriesFEC = fec
        redundancyDepth = depth
        timeStretching = stretching
        reset(.newSource, samples: 0)
    }

    /// The FEC hold in frames (``JitterBufferConfiguration/fecHold``).
    private var fecHoldLength: Int { Int((configuration.fecHold / configuration.frameDuration).rounded(.up)) }

    /// How far under the target the first frame may start. Playout keeps the gap between a
    /// packet's arrival and the tick that takes it that the first frame set, and on a clean path
    /// that gap is the only margin a packet a little late has: started a millisecond behind its
    /// packet, playout misses the first packet the sender's host delays, holds a frame for it
    /// and keeps a frame more for FEC for seconds (each move of the delay is heard). Started
    /// no less than a quarter frame under the target, it rides such hiccups out.
    public var startMargin: Duration { configuration.frameDuration / 4 }

    /// Whether the first frame may play as its packet arrives, for a receiver whose ticks fall
    /// at `tick` give or take whole frame periods: the ticks after it find their packets as long
    /// after they came as the next tick falls after the newest packet's arrival, and that must
    /// be no less than the target less ``startMargin``. If not, a tick starts playout, once its
    /// frame has waited long enough.
    public func mayStartOnArrival(ticksAt tick: Duration) -> Bool {
        guard nextTimestamp == nil, let newest else { return false }
        let period = Int64((configuration.frameDuration.seconds * 1_000_000).rounded())
        var phase = Int64(((tick.seconds - newest.arrival) * 1_000_000).rounded()) % period
        if phase < 0 { phase += period }
        return .microseconds(phase) + startMargin >= statistics.targetDelay
    }

    /// What to play for the frame due now. Call once per frame period.
    public mutating func nextFrame(now: Duration) -> PlayoutAction {
        let frame = configuration.samplesPerFrame
        if let held = heldAtFirstGap {
            heldAtFirstGap = nil
            if let first = entries.first, first.timestamp == held, !first.redundant {
                // The frame held at the first gap came after all: it was late, not lost, and
                // the frame it was held already put its lateness into the delay. No FEC hold.
                fecHoldFrames = 0
            }
        }
        if !resyncPayloads.isEmpty { resyncPayloads.removeAll() }
        startsConcealingInPlace = false
        var stall: InPlaceConcealment?
        if let run = inPlace {
            if run.allCame {
                stall = run
                inPlace = nil
            } else if run.frames >= InPlaceConcealment.maximumFrames || (highestTimestamp ?? .min) >= run.end(frame: frame) {
                // Too long a gap, or a packet sent after the run came without some of the run's:
                // lost. The delay holds for FEC.
                inPlace = nil
                fecHoldFrames = fecHoldLength
            }
        }
        updateTarget()
        guard var next = nextTimestamp else {
            // Start with the newest packet: at once if it came long enough before this tick
            // (``startMargin``), otherwise on a tick to come.
            guard let newest = entries.last else { return .waiting }
            if entries.count > 1 {
                // Several packets before the first frame is a late start of our own playout
                // (the peer's media began first), not network jitter. Playing the backlog would
                // start with its whole length as delay, and its packets' transits, all arriving
                // together, would raise the target so the excess could only be dropped frame by
                // frame mid-speech. So start with the newest and forget the backlog's transits.
                statistics.shrunk += entries.count - 1
                entries.removeFirst(entries.count - 1)
                transits.restart(with: newest.transit, sequence: newest.sequence)
            }
            nextTimestamp = newest.timestamp
            return nextFrame(now: now)
        }
        if entries.isEmpty, lateRun.count >= 2 {
            // Nothing left to play, and the newest packets all came after their frames were
            // due: the peer's stream runs behind us (it was paused and kept its timestamps).
            // Move the stream's timeline forward to our playout position and play on from it.
            let shift = next - lateRun[0].timestamp
            previousOffset = (lateRun[0].sequence, timelineOffset)
            timelineOffset += shift
            newest?.timestamp += shift
            highestTimestamp = (highestTimestamp ?? 0) + shift
            statistics.late -= lateRun.count
            entries = lateRun.map { e in
                Entry(sequence: e.sequence, timestamp: e.timestamp + shift, payload: e.payload,
                      transit: e.transit - Double(shift) / Double(configuration.clockRate))
            }
            transits.restart(with: entries[entries.count - 1].transit, sequence: entries[entries.count - 1].sequence)
            lateRun.removeAll()
            reset(.lateStream, samples: -shift)
        }
        if let last = entries.last {
            // Far more buffered than the delay needs: packets were held up and came together.
            // Jump to the newest minus the target delay rather than drop a frame in five.
            let targetFrames = Int64((statistics.targetDelay / configuration.frameDuration).rounded(.up))
            let aheadFrames = (last.timestamp - next) / frame + 1
            if aheadFrames > targetFrames + 5 {
                let target = last.timestamp - targetFrames * frame
                var dropped = 0
                while let first = entries.first, first.timestamp < target {
                    entries.removeFirst()
                    dropped += 1
                }
                statistics.shrunk += Int((target - next) / frame)
                reset(.catchUp, samples: target - next)
                transits.restart(with: last.transit, sequence: last.sequence)
                updateTarget()
                next = target
                lateRun.removeAll()
                concealedSinceLastPacket = 0
            }
        }
        let bufferDelay = delay(playing: next, at: now)
        statistics.currentDelay = bufferDelay + outputBacklog
        if lastPlayedSequence == nil, entries.first?.timestamp == next, bufferDelay + startMargin < statistics.targetDelay {
            // The first frame waits a tick rather than start right behind its packet
            // (``startMargin``): before anything was heard, waiting is not heard.
            nextTimestamp = next
            return .waiting
        }

        // Ahead of both the target and what the history's latest packet needed: delay to give back.
        let aheadOfNeed = statistics.currentDelay > max(statistics.targetDelay, recentNeed) + configuration.frameDuration
        if timeStretching {
            // The caller moves the delay smoothly, a pitch period at a time. It grows until the
            // packets themselves are held long enough: the caller's backlog of stretched audio
            // delays what is heard, but a frame's FEC or copy in the next packet has to be here
            // when the frame is due, and the backlog does not make it so.
            if aheadOfNeed, entries.count >= 2 {
                delayAdjustment = .shrink
            } else if lastPlayedSequence != nil, bufferDelay + configuration.frameDuration / 2 < statistics.targetDelay {
                delayAdjustment = .grow
            } else {
                delayAdjustment = .none
            }
        }
        // Too far ahead of the target: drop one frame (at most every fifth frame).
        framesSinceShrink += 1
        if !timeStretching, aheadOfNeed,
           framesSinceShrink >= 5, entries.count >= 2, entries[0].timestamp == next {
            entries.removeFirst()
            next += frame
            statistics.shrunk += 1
            framesSinceShrink = 0
        }
        // Below the target by more than half a frame: stretch by one concealed frame (never
        // before the first frame: that one plays at once).
        if !timeStretching, lastPlayedSequence != nil, statistics.currentDelay + configuration.frameDuration / 2 < statistics.targetDelay {
            statistics.stretched += 1
            nextTimestamp = next  // hold: the same frame plays next time, one frame later
            return .conceal
        }

        // Drop anything older than the frame due.
        while let first = entries.first, first.timestamp < next { entries.removeFirst() }
        nextTimestamp = next + frame
        if let first = entries.first, first.timestamp == next {
            entries.removeFirst()
            if let last = lastPlayedSequence, concealedSinceLastPacket > 0, audioPacketsMissing(after: last, before: first.sequence) == 0 {
                // No audio packet is missing across this gap in time: the sender paused (DTX,
                // or a DTMF digit); what was concealed meanwhile was silence, not loss.
                statistics.concealed -= concealedSinceLastPacket
                statistics.lost -= concealedSinceLastPacket
                statistics.silence += concealedSinceLastPacket
            }
            concealedSinceLastPacket = 0
            lastPlayedSequence = first.sequence
            if first.redundant {
                statistics.lost += 1
                statistics.redundancyRecovered += 1
                // A loss like any other: it starts the FEC hold, or keeps one running, so the
                // delay holds for the copies' depth from the first loss on. A copy one back can
                // come in time without it, but the next loss may be two in a row.
                fecHoldFrames = fecHoldLength
            } else {
                statistics.packetsPlayed += 1
            }
            if let stall, stall.end(frame: frame) == first.timestamp { resyncPayloads = stall.late.map(\.payload) }
            return .play(first.payload)
        }
        if let first = entries.first, let last = lastPlayedSequence, audioPacketsMissing(after: last, before: first.sequence) == 0 {
            // The next packet is the very next one sent, yet later in time: DTX.
            statistics.silence += 1
            return .silence
        }
        let nextPacketHere = entries.first?.timestamp == next + frame
        if fecHoldFrames == 0, configuration.fecHold > .zero, !nextPacketHere, lastPlayedSequence != nil,
           statistics.packetsPlayed >= InPlaceConcealment.cleanStretch,
           inPlace.map({ $0.continues(at: next, frame: frame) }) ?? (statistics.lost == 0) {
            // Nothing lost so far: a gap is likelier a stall of the sender's host than loss
            // (``InPlaceConcealment``). Concealed where it falls; playout keeps its pace.
            if inPlace == nil {
                inPlace = InPlaceConcealment(first: next)
                startsConcealingInPlace = true
            } else {
                inPlace?.extend()
            }
            nextTimestamp = next + frame
            statistics.lost += 1
            statistics.concealed += 1
            concealedSinceLastPacket += 1
            return .conceal
        }
        if fecHoldFrames == 0, configuration.fecHold > .zero, !nextPacketHere, lastPlayedSequence != nil {
            // The first gap after a clean stretch, with nothing behind it yet: hold this frame
            // one tick (a concealed frame continues the audio) and start the FEC hold. Next
            // tick either it arrived late after all, or the packet after it brings its FEC.
            fecHoldFrames = fecHoldLength
            heldAtFirstGap = next
            statistics.stretched += 1
            nextTimestamp = next
            return .conceal
        }
        statistics.lost += 1
        fecHoldFrames = fecHoldLength
        if let first = entries.first, first.timestamp == next + frame {
            // This frame's loss is settled by the next packet: rebuilt from its FEC if it
            // carries any, otherwise concealed.
            lastPlayedSequence = first.sequence - 1
            concealedSinceLastPacket = 0
            if carriesFEC?(first.payload) ?? true {
                statistics.fecRecovered += 1
                return .recover(fromNext: first.payload)
            }
            statistics.concealed += 1
            return .conceal
        }
        statistics.concealed += 1
        concealedSinceLastPacket += 1
        return .conceal
    }

    /// The caller lengthened (`.grow`) or shortened (`.shrink`) what it played to move the
    /// delay: counted in ``JitterBufferStatistics/expanded`` and ``JitterBufferStatistics/compressed``.
    public mutating func noteTimeStretch(_ adjustment: DelayAdjustment) {
        switch adjustment {
        case .grow: statistics.expanded += 1
        case .shrink: statistics.compressed += 1
        case .none: break
        }
    }

    /// A packet of the peer's stream that carries no audio frame (an RFC 4733 telephone event):
    /// the gap in audio sequence numbers it leaves is not loss.
    public mutating func noteNonAudio(sequence: UInt16) {
        let seq = highestSequence.map { SequenceNumber.extend(sequence, near: $0) } ?? Int64(sequence)
        nonAudio.append(seq)
        if nonAudio.count > 128 { nonAudio.removeFirst(nonAudio.count - 128) }
    }

    /// Audio packets sent between sequence numbers `last` and `next` (exclusive) that did not
    /// come: the numbers in between, less those of non-audio packets.
    private func audioPacketsMissing(after last: Int64, before next: Int64) -> Int64 {
        let between = next - last - 1
        guard between > 0 else { return max(0, between) }
        return between - Int64(nonAudio.count { $0 > last && $0 < next })
    }

    /// How far behind the earliest possible arrival of frame `timestamp` playout runs at `now`.
    private func delay(playing timestamp: Int64, at now: Duration) -> Duration {
        guard let minTransit = transits.minimum() else { return .zero }
        let seconds = now.seconds - Double(timestamp) / Double(configuration.clockRate) - minTransit
        return .microseconds(Int64((seconds * 1_000_000).rounded()))
    }

    private mutating func updateTarget() {
        guard let variation = transits.variation() else { return }
        recentNeed = min(configuration.maximumDelay, .microseconds(Int64((variation.largest * 1_000_000).rounded())) + configuration.frameDuration / 2)
        var target = Duration.microseconds(Int64((variation.covered * 1_000_000).rounded())) + configuration.frameDuration / 2
        if fecHoldFrames > 0 {
            fecHoldFrames -= 1
            heldDepth = max(heldDepth, redundancyDepth)
            // A frame per copy (one for FEC without copies), and with copies half a frame more:
            // the packet with the deepest copy must be there before its frame is due, not race
            // it at the same instant.
            target += configuration.frameDuration * max(1, heldDepth) + (heldDepth > 0 ? configuration.frameDuration / 2 : .zero)
        } else {
            heldDepth = 0
        }
        statistics.targetDelay = min(configuration.maximumDelay, max(configuration.minimumDelay, target))
    }
}
