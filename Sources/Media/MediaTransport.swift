import Locking
import RTP

/// The datagram path a call's media runs over: the ICE agent in a real call, an in-memory
/// link in tests and simulations.
public protocol MediaTransport: AnyObject, Sendable {
    /// Sends one datagram; failures are the transport's to count (media does not retry).
    nonisolated(nonsending) func send(_ datagram: [UInt8]) async
    /// Sets where received datagrams go (replacing any previous handler). Called on any thread.
    /// The bytes are lent for the call only: the handler copies what it keeps (into a buffer
    /// of its own, so a steady call allocates nothing per packet).
    func setReceiveHandler(_ handler: (@Sendable (UnsafeRawBufferPointer) -> Void)?)
    /// On (true): received datagrams may wait until ``pollReceived()`` hands them to the
    /// handler on the tick's own thread, so no thread wakes per packet. Off: they are handed
    /// over as they arrive. The default implementation ignores it (always as they arrive).
    func receiveOnTicks(_ on: Bool)
    /// Called at the start of every tick while ``receiveOnTicks(_:)`` is on: hands over what
    /// arrived since the last one, on this thread. The default does nothing.
    func pollReceived()
    /// During the receive handler's call: how long before it the datagram reached this host,
    /// when the transport knows (zero otherwise). Arrival times are stamped with it.
    var arrivalAge: Duration { get }
}

extension MediaTransport {
    public func receiveOnTicks(_ on: Bool) {}
    public func pollReceived() {}
    public var arrivalAge: Duration { .zero }
}

/// Settings of an ``InMemoryMediaLink``.
public struct LinkConditions: Sendable, Equatable {
    /// Probability (0–1) that a datagram is lost, on average.
    public var loss: Double
    /// How many datagrams a loss takes in a row, on average: 1 for independent (random) loss;
    /// more for bursty loss (a Gilbert model, as Wi-Fi and mobile links lose).
    public var meanBurst: Double
    /// One-way delay.
    public var delay: Duration
    /// Extra random delay up to this much per datagram (reorders when above the frame period).
    public var jitter: Duration

    public init(loss: Double = 0, meanBurst: Double = 1, delay: Duration = .zero, jitter: Duration = .zero) {
        self.loss = loss
        self.meanBurst = meanBurst
        self.delay = delay
        self.jitter = jitter
    }
}

/// Which packets a lossy path drops: a two-state Gilbert model (every packet lost in the bad
/// state, none in the good one) with a given average loss and mean burst length, from a
/// seeded generator — the same seed gives the same pattern on every machine. A mean burst of
/// one packet or less is independent (random) loss.
///
/// From the good state the path turns bad with probability `loss / (meanBurst · (1 − loss))`;
/// from the bad state it turns good with probability `1 / meanBurst`, so bursts are
/// geometrically distributed with that mean and the long-run share lost is `loss`.
public struct LossPattern: Sendable {
    public let loss: Double
    public let meanBurst: Double
    private var rng: UInt64
    private var bad = false

    public init(loss: Double, meanBurst: Double = 1, seed: UInt64) {
        self.loss = min(max(loss, 0), 1)
        self.meanBurst = max(meanBurst, 1)
        rng = seed &+ 0x9E37_79B9_7F4A_7C15
    }

    /// Whether the next packet is lost.
    public mutating func dropsNext() -> Bool {
        guard loss > 0 else { return false }
        if meanBurst <= 1 { return uniform() < loss }
        let leave = 1 / meanBurst
        let enter = min(1, leave * loss / max(1 - loss, .ulpOfOne))
        bad = bad ? uniform() >= leave : uniform() < enter
        return bad
    }

    /// A number in [0, 1).
    private mutating func uniform() -> Double {
        Double(splitMix64(&rng) >> 11) / Double(1 << 53)
    }
}

/// SplitMix64's next value: the seeded generator of the link's losses and delays.
func splitMix64(_ s: inout UInt64) -> UInt64 {
    s &+= 0x9E37_79B9_7F4A_7C15
    var z = s
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
}

/// What a call needs of its media: start and stop it, silence the microphone, send DTMF, read
/// its figures and follow its events. ``MediaActor`` is the media path of every call (Opus,
/// SRTP, the jitter buffer) over whichever ``MediaTransport`` the call has.
public protocol MediaPath: AnyObject, Sendable {
    /// Statistics, stalls, DTMF, playout resets; iterated once, by the path's owner.
    var events: AsyncStream<MediaEvent> { get }
    /// The format what is sent is made in (hold audio made in it is sent as it is).
    var captureFormat: AudioFormat { get }
    /// Opens the endpoints and joins the media clock.
    func start() async throws(MediaError)
    /// Sends RTCP BYE, leaves the clock and closes the endpoints. Idempotent.
    func stop() async
    /// Silences the microphone, or lets it be heard.
    func setMuted(_ muted: Bool) async throws(MediaError)
    /// Queues DTMF digits (RFC 4733).
    func sendDTMF(_ digits: String) async throws(MediaError)
    /// Which way audio flows (RFC 3264: hold), and what a held call sends instead of the
    /// microphone.
    func setDirection(sending: Bool, receiving: Bool, holdAudio: (any AudioSource)?) async throws(MediaError)
    /// Mixes `source` (a prompt, music) into what is sent at `volume`; `nil` removes it.
    func setAppAudio(_ source: (any AudioSource)?, volume: Double) async throws(MediaError)
    /// Sets the microphone's and the output's gain (nil leaves one as it is); both, as now.
    func setVolumes(microphone: Double?, output: Double?) async -> CallVolumes
    /// Records the call into `sink` from now on (see ``MediaActor/setTap(_:mixingSent:)``).
    func setTap(_ sink: (any AudioSink)?, mixingSent: Bool) async throws(MediaError)
    /// The current statistics.
    var statistics: MediaStatistics { get async }
    /// Replaces a frame key while the call runs (nil leaves one).
    func setFrameKeys(outbound: FrameEncryptionKey?, inbound: FrameEncryptionKey?) async throws(MediaError)
}

extension MediaActor: MediaPath {}
