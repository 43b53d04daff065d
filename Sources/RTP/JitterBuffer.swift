/// Settings of an ``JitterBuffer``.
public struct JitterBufferConfiguration: Sendable, Equatable {
    /// The duration of one frame (all frames of a call have the same duration).
    public var frameDuration: Duration
    /// RTP clock rate (48 000 for Opus, whatever the audio rate).
    public var clockRate: Int
    /// The smallest target delay (default: half a frame). On a clean path the target is the
    /// packet delay variation plus half a frame, so this floor rarely binds; playout happens on
    /// frame ticks, so the delay actually kept lies between the target and a frame more.
    public var minimumDelay: Duration
    /// The largest target delay (default 200 ms). Packets later than this are dropped as late.
    public var maximumDelay: Duration
    /// How many recent packets the delay estimate looks at (default 100, two seconds of 20 ms
    /// frames): a burst raises the target at once and leaves the window this many packets later.
    public var historyLength: Int
    /// After a loss, keep one more frame of delay for this long (default 5 s), so the packet
    /// after a lost one is usually there in time for in-band FEC to rebuild the lost frame;
    /// `.zero` turns it off. On a clean path the delay stays at its floor.
    public var fecHold: Duration

    public init(frameDuration: Duration = .milliseconds(20), clockRate: Int = 48_000,
                minimumDelay: Duration? = nil, maximumDelay: Duration = .milliseconds(200), historyLength: Int = 100,
                fecHold: Duration = .seconds(5)) {
        self.fecHold = fecHold
        self.frameDuration = frameDuration
        self.clockRate = clockRate
        self.minimumDelay = minimumDelay ?? frameDuration / 2
        self.maximumDelay = maximumDelay
        self.historyLength = historyLength
    }

    /// RTP timestamp units per frame.
    public var samplesPerFrame: Int64 { Int64((frameDuration.seconds * Double(clockRate)).rounded()) }
}

/// What to play for one frame.
public enum PlayoutAction: Sendable, Equatable {
    /// Not started yet (no packet has arrived): play nothing.
    case waiting
    /// Decode this payload.
    case play([UInt8])
    /// The frame is missing but the next packet is here: decode its in-band FEC.
    case recover(fromNext: [UInt8])
    /// The frame is missing: conceal it (packet-loss concealment).
    case conceal
    /// The sender is in discontinuous transmission (no packets on purpose): comfort silence.
    case silence
}

/// Counters and delays of a ``JitterBuffer``.
public struct JitterBufferStatistics: Sendable, Equatable {
    /// How far behind the earliest possible arrival playout currently runs.
    public var currentDelay: Duration = .zero
    /// The delay the buffer steers toward (measured jitter, clamped to the configured range).
    public var targetDelay: Duration = .zero
    public var packetsReceived = 0
    public var packetsPlayed = 0
    /// Packets that arrived after their frame was played (or concealed).
    public var late = 0
    public var duplicates = 0
    /// Frames whose packet was missing at playout (concealed or recovered by FEC).
    public var lost = 0
    /// Frames concealed by PLC.
    public var concealed = 0
    /// Frames recovered from the next packet's FEC.
    public var fecRecovered = 0
    /// Frames whose own packet never came, played from a later packet's redundant copy (RFC
    /// 2198). They are not counted as lost: the frame was there at playout, at full quality.
    public var redundancyRecovered = 0
    /// Frames of discontinuous-transmission silence.
    public var silence = 0
    /// Frames inserted to grow the delay, and frames dropped to shrink it.
    public var stretched = 0
    public var shrunk = 0

    public init() {}
}

/// An adaptive jitter buffer for fixed-duration audio frames.
///
/// Reorders packets, drops duplicates and packets too late to play, and says per frame whether
/// to decode, recover with FEC, conceal or play DTX silence. Its target delay follows the 95th
/// percentile of measured packet delay variation over recent packets, between
/// ``JitterBufferConfiguration/minimumDelay`` and ``JitterBufferConfiguration/maximumDelay``:
/// playout stretches (one concealed frame) when the delay is below target and drops a frame when
/// it is well above, at most one frame every few, so it adapts without audible jumps.
///
/// A plain value driven by the caller's clock: ``insert(sequence:timestamp:payload:arrival:)``
/// on arrival and ``nextFrame(now:)`` once per frame period. Deterministic for tests.
public struct JitterBuffer: Sendable {
    public let configuration: JitterBufferConfiguration
    public private(set) var statistics = JitterBufferStatistics()

    private struct Entry {
        var sequence: Int64
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

    /// Transit (arrival − media time) of recent packets, a ring of `historyLength` values.
    private var transits: [Double]
    private var transitCount = 0
    private var transitNext = 0
    private var scratch: [Double]

    /// The timestamp of the next frame to play; `nil` until playout starts.
    private var nextTimestamp: Int64?
    private var lastPlayedSequence: Int64?
    /// Frames concealed since the last played packet, re-counted as DTX silence if the next
    /// packet shows the sender paused on purpose.
    private var concealedSinceLastPacket = 0
    private var framesSinceShrink = 0
    /// Frames left during which a recent loss keeps one extra frame of delay for FEC.
    private var fecHoldFrames = 0

    public init(configuration: JitterBufferConfiguration = JitterBufferConfiguration()) {
        self.configuration = configuration
        transits = [Double](repeating: 0, count: max(1, configuration.historyLength))
        scratch = transits
        statistics.targetDelay = configuration.minimumDelay
        entries.reserveCapacity(32)
    }

    /// Packets waiting to be played.
    public var bufferedPackets: Int { entries.count }

    /// No frame has been taken yet: the next ``nextFrame(now:)`` with a packet buffered starts playout.
    public var isWaitingToStart: Bool { nextTimestamp == nil }

    /// Adds a received packet.
    ///
    /// - Returns: `false` if it was dropped (duplicate, or too late to play).
    @discardableResult
    public mutating func insert(sequence: UInt16, timestamp: UInt32, payload: [UInt8], arrival: Duration) -> Bool {
        let seq = highestSequence.map { SequenceNumber.extend(sequence, near: $0) } ?? Int64(sequence)
        let ts = highestTimestamp.map { Self.extendTimestamp(timestamp, near: $0) } ?? Int64(timestamp)
        let slot = Int(seq & 255)
        if recentSequences[slot] == seq {
            statistics.duplicates += 1
            return false
        }
        recentSequences[slot] = seq
        statistics.packetsReceived += 1
        highestSequence = max(highestSequence ?? seq, seq)
        highestTimestamp = max(highestTimestamp ?? ts, ts)
        let transit = arrival.seconds - Double(ts) / Double(configuration.clockRate)
        recordTransit(transit)

        if let next = nextTimestamp, ts < next {
            statistics.late += 1
            return false
        }
        // Keep timestamp order; arrivals are nearly always in order, so search from the end.
        var index = entries.count
        while index > 0 && entries[index - 1].timestamp > ts { index -= 1 }
        if index > 0, entries[index - 1].timestamp == ts {
            // Its redundant copy came first (the packet was reordered, not lost): keep the original.
            entries[index - 1] = Entry(sequence: seq, timestamp: ts, payload: payload, transit: transit)
            return true
        }
        entries.insert(Entry(sequence: seq, timestamp: ts, payload: payload, transit: transit), at: index)
        // Bound the buffer: never hold more than the maximum delay's worth (plus slack).
        let limit = Int(configuration.maximumDelay / configuration.frameDuration) + 4
        if entries.count > limit {
            entries.removeFirst(entries.count - limit)
            statistics.shrunk += 1
        }
        return true
    }

    /// Adds a frame carried again in a later packet (RFC 2198 redundancy), as `sequence` and
    /// `timestamp` of its own packet. It fills a gap only: a frame whose packet arrived, or
    /// whose turn has passed, is ignored, and it counts neither as received nor in the delay
    /// estimate (its arrival says nothing about the network's delay for it).
    ///
    /// - Returns: `true` if it was kept to fill a gap.
    @discardableResult
    public mutating func insertRedundant(sequence: UInt16, timestamp: UInt32, payload: [UInt8], arrival: Duration) -> Bool {
        // Before playout starts there is no gap to fill (it starts with the newest packet).
        guard nextTimestamp != nil, let highSeq = highestSequence, let highTs = highestTimestamp else { return false }
        let seq = SequenceNumber.extend(sequence, near: highSeq)
        let ts = Self.extendTimestamp(timestamp, near: highTs)
        if recentSequences[Int(seq & 255)] == seq { return false }
        if let next = nextTimestamp, ts < next { return false }
        guard seq > highSeq - 256 else { return false }
        var index = entries.count
        while index > 0 && entries[index - 1].timestamp > ts { index -= 1 }
        if index > 0, entries[index - 1].timestamp == ts { return false }
        let transit = arrival.seconds - Double(ts) / Double(configuration.clockRate)
        entries.insert(Entry(sequence: seq, timestamp: ts, payload: payload, transit: transit, redundant: true), at: index)
        return true
    }

    /// What to play for the frame due now. Call once per frame period.
    public mutating func nextFrame(now: Duration) -> PlayoutAction {
        let frame = configuration.samplesPerFrame
        updateTarget()
        guard var next = nextTimestamp else {
            // Start at once: the first frame is heard a tick sooner, and where the target needs
            // more delay the stretch rule below adds it one frame later.
            guard let newest = entries.last else { return .waiting }
            if entries.count > 1 {
                // Several packets before the first frame is a late start of our own playout
                // (the peer's media began first), not network jitter. Playing the backlog would
                // start with its whole length as delay, and its packets' transits, all arriving
                // together, would raise the target so the excess could only be dropped frame by
                // frame mid-speech. So start with the newest and forget the backlog's transits.
                statistics.shrunk += entries.count - 1
                entries.removeFirst(entries.count - 1)
                transitCount = 0
                transitNext = 0
                recordTransit(newest.transit)
            }
            nextTimestamp = newest.timestamp
            return nextFrame(now: now)
        }
        statistics.currentDelay = delay(playing: next, at: now)

        // Too far ahead of the target: drop one frame (at most every fifth frame).
        framesSinceShrink += 1
        if statistics.currentDelay > statistics.targetDelay + configuration.frameDuration,
           framesSinceShrink >= 5, entries.count >= 2, entries[0].timestamp == next {
            entries.removeFirst()
            next += frame
            statistics.shrunk += 1
            framesSinceShrink = 0
        }
        // Below the target by more than half a frame: stretch by one concealed frame (never
        // before the first frame: that one plays at once).
        if lastPlayedSequence != nil, statistics.currentDelay + configuration.frameDuration / 2 < statistics.targetDelay {
            statistics.stretched += 1
            nextTimestamp = next  // hold: the same frame plays next time, one frame later
            return .conceal
        }

        // Drop anything older than the frame due.
        while let first = entries.first, first.timestamp < next { entries.removeFirst() }
        nextTimestamp = next + frame

        if let first = entries.first, first.timestamp == next {
            entries.removeFirst()
            if let last = lastPlayedSequence, first.sequence == last + 1 + Int64(concealedSinceLastPacket) {
                // Every frame in between was a real loss; nothing to re-count.
            } else if let last = lastPlayedSequence, first.sequence == last + 1, concealedSinceLastPacket > 0 {
                // Consecutive sequence numbers across a gap in time: the sender paused (DTX).
                statistics.concealed -= concealedSinceLastPacket
                statistics.lost -= concealedSinceLastPacket
                statistics.silence += concealedSinceLastPacket
            }
            concealedSinceLastPacket = 0
            lastPlayedSequence = first.sequence
            if first.redundant {
                statistics.redundancyRecovered += 1
            } else {
                statistics.packetsPlayed += 1
            }
            return .play(first.payload)
        }
        if let first = entries.first, let last = lastPlayedSequence, first.sequence == last + 1 {
            // The next packet is the very next one sent, yet later in time: DTX.
            statistics.silence += 1
            return .silence
        }
        let nextPacketHere = entries.first?.timestamp == next + frame
        if fecHoldFrames == 0, configuration.fecHold > .zero, !nextPacketHere, lastPlayedSequence != nil {
            // The first gap after a clean stretch, with nothing behind it yet: hold this frame
            // one tick (a concealed frame continues the audio) and start the FEC hold. Next
            // tick either it arrived late after all, or the packet after it brings its FEC.
            fecHoldFrames = Int((configuration.fecHold / configuration.frameDuration).rounded(.up))
            statistics.stretched += 1
            nextTimestamp = next
            return .conceal
        }
        statistics.lost += 1
        fecHoldFrames = Int((configuration.fecHold / configuration.frameDuration).rounded(.up))
        if let first = entries.first, first.timestamp == next + frame {
            statistics.fecRecovered += 1
            lastPlayedSequence = first.sequence - 1
            concealedSinceLastPacket = 0
            return .recover(fromNext: first.payload)
        }
        statistics.concealed += 1
        concealedSinceLastPacket += 1
        return .conceal
    }

    /// How far behind the earliest possible arrival of frame `timestamp` playout runs at `now`.
    private func delay(playing timestamp: Int64, at now: Duration) -> Duration {
        guard let minTransit = minimumTransit() else { return .zero }
        let seconds = now.seconds - Double(timestamp) / Double(configuration.clockRate) - minTransit
        return .microseconds(Int64(seconds * 1_000_000))
    }

    private mutating func recordTransit(_ transit: Double) {
        transits[transitNext] = transit
        transitNext = (transitNext + 1) % transits.count
        transitCount = min(transitCount + 1, transits.count)
    }

    private func minimumTransit() -> Double? {
        guard transitCount > 0 else { return nil }
        var minimum = Double.infinity
        for i in 0..<transitCount where transits[i] < minimum { minimum = transits[i] }
        return minimum
    }

    private mutating func updateTarget() {
        guard let minTransit = minimumTransit() else { return }
        for i in 0..<transitCount { scratch[i] = transits[i] - minTransit }
        scratch[0..<transitCount].sort()
        let p95 = scratch[min(transitCount - 1, Int(Double(transitCount) * 0.95))]
        var target = Duration.microseconds(Int64(p95 * 1_000_000)) + configuration.frameDuration / 2
        if fecHoldFrames > 0 {
            fecHoldFrames -= 1
            target += configuration.frameDuration
        }
        statistics.targetDelay = min(configuration.maximumDelay, max(configuration.minimumDelay, target))
    }

    /// Extends a 32-bit RTP timestamp to 64 bits, choosing the value closest to `reference`.
    static func extendTimestamp(_ timestamp: UInt32, near reference: Int64) -> Int64 {
        let base = reference & ~0xFFFF_FFFF
        var candidate = base | Int64(timestamp)
        if candidate - reference > 0x8000_0000 { candidate -= 0x1_0000_0000 }
        else if reference - candidate > 0x8000_0000 { candidate += 0x1_0000_0000 }
        return candidate
    }
}
