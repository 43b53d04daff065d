import Clocks

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

/// Which way a time-stretching caller should move the playout delay now.
public enum DelayAdjustment: Sendable, Equatable {
    case none
    /// Below the target: lengthen what plays.
    case grow
    /// Above the target by more than a frame: shorten what plays.
    case shrink
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
    /// Frames whose own packet was missing at playout. Each is counted once more as exactly
    /// one of: rebuilt from a later packet's redundant copy, rebuilt from the next packet's
    /// in-band FEC, or concealed — `lost == redundancyRecovered + fecRecovered + concealed`.
    /// Frames the sender never sent (DTX, audio paused for DTMF) are silence, not loss.
    public var lost = 0
    /// Lost frames concealed by PLC.
    public var concealed = 0
    /// Lost frames rebuilt from the next packet's in-band FEC (only when that packet carries FEC).
    public var fecRecovered = 0
    /// Lost frames played whole from a later packet's redundant copy (RFC 2198).
    public var redundancyRecovered = 0
    /// Frames the sender did not send: discontinuous transmission, audio paused for DTMF.
    public var silence = 0
    /// Frames inserted to grow the delay, and frames dropped to shrink it.
    public var stretched = 0
    public var shrunk = 0
    /// Time-stretching (when the caller does it): frames lengthened, and pairs of frames
    /// shortened, by a pitch period to move the delay.
    public var expanded = 0
    public var compressed = 0
    /// Frames not played because this node stalled (its clock skipped their ticks): the host
    /// was paused or starved, so they were neither lost by the network nor concealed.
    public var skipped = 0
    /// Times playout moved to a new place on the stream (``PlayoutReset``).
    public var playoutResets = 0

    public init() {}
}

/// Playout moved to a new place on the peer's stream instead of playing on from where it was.
public struct PlayoutReset: Sendable, Equatable {
    /// Why playout moved.
    public enum Reason: String, Sendable, Equatable {
        /// The peer's timestamps jumped (forward or backward) while its sequence numbers and its
        /// packets' pace went on: the stream is read on a continuous timeline from here on.
        case timestampJump = "timestamp-jump"
        /// This node's clock skipped ticks (the process was paused or starved).
        case stall
        /// More audio was buffered than the delay needs (packets held up somewhere, then
        /// delivered together): playout skipped ahead to the newest it holds.
        case catchUp = "catch-up"
        /// The peer's packets kept their timestamps but arrived later than their frames were
        /// due (the peer was paused and did not account for it): playout moved back to them.
        case lateStream = "late-stream"
        /// The peer started a new RTP stream (a new SSRC): playout starts over on it.
        case newSource = "new-source"
    }

    public var reason: Reason
    /// How far playout moved on the peer's timeline (positive: forward, skipping audio).
    public var jump: Duration

    public init(reason: Reason, jump: Duration) {
        self.reason = reason
        self.jump = jump
    }
}

extension JitterBuffer {
    /// Extends a 32-bit RTP timestamp to 64 bits, choosing the value closest to `reference`.
    static func extendTimestamp(_ timestamp: UInt32, near reference: Int64) -> Int64 {
        let base = reference & ~0xFFFF_FFFF
        var candidate = base | Int64(timestamp)
        if candidate - reference > 0x8000_0000 { candidate -= 0x1_0000_0000 }
        else if reference - candidate > 0x8000_0000 { candidate += 0x1_0000_0000 }
        return candidate
    }
}

extension JitterBuffer {
    /// The `k`-th smallest (from 0) of the first `count` values, found in place (Hoare's
    /// selection, median-of-three pivot): what sorting them would put at `k`, without sorting
    /// (the standard library's sort allocates a buffer, and this runs for every packet).
    @_spi(Testing) public static func select(_ k: Int, of count: Int, in values: inout [Double]) -> Double {
        values.withUnsafeMutableBufferPointer { v -> Double in
            var low = 0, high = count - 1
            while low < high {
                let middle = low + (high - low) / 2
                // Order low, middle, high; the middle one is the pivot.
                if v[middle] < v[low] { v.swapAt(middle, low) }
                if v[high] < v[low] { v.swapAt(high, low) }
                if v[high] < v[middle] { v.swapAt(high, middle) }
                let pivot = v[middle]
                var i = low, j = high
                while i <= j {
                    while v[i] < pivot { i += 1 }
                    while pivot < v[j] { j -= 1 }
                    if i <= j {
                        v.swapAt(i, j)
                        i += 1
                        j -= 1
                    }
                }
                // [low, j] ≤ pivot ≤ [i, high]; what lies between equals the pivot.
                if k <= j {
                    high = j
                } else if k >= i {
                    low = i
                } else {
                    return v[k]
                }
            }
            return v[k]
        }
    }
}
