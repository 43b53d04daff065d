import MediaTiming
import RTP
import Locking
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// One call's media: capture → mixer → Opus → RTP → SRTP → transport, and transport → SRTP →
/// RTP → jitter buffer → Opus (FEC, PLC) → playback, with RTCP reports both ways. A call with a
/// SIP peer may code G.711 instead (``MediaConfiguration/encoding``), resampled to 8 kHz.
///
/// Driven by a ``MediaClock`` (one per node; a manual one in tests): every tick sends one
/// frame and plays one frame. The actor owns its codec and SRTP state; endpoints buffer on
/// their own threads where they have hardware behind them.
public actor MediaActor: MediaClockClient {
    public nonisolated let events: AsyncStream<MediaEvent>
    let eventsContinuation: AsyncStream<MediaEvent>.Continuation
    public nonisolated let configuration: MediaConfiguration
    public nonisolated let source: any AudioSource
    public nonisolated let sink: any AudioSink
    /// The format what the call sends is made in: its source's (hold audio and app audio at
    /// another rate are resampled to it).
    public nonisolated var captureFormat: AudioFormat { source.format }
    /// Our RTP synchronization source.
    public nonisolated let ssrc: UInt32

    let transport: any MediaTransport
    let clock: MediaClock
    /// Opus's encoder and decoder, or `nil` for a G.711 call.
    let encoder: OpusEncoder?
    let decoder: OpusDecoder?
    /// G.711's path, or `nil` for an Opus call.
    let narrowband: NarrowbandCodec?
    let outbound: SRTPSession
    let inbound: SRTPSession
    var frameCipher: FrameCipher?
    let inbox = Inbox()
    /// The inbox's other buffer: each tick swaps it in, so neither is copied or reallocated.
    private var drained: [Inbox.Datagram] = []
    /// Buffers of the datagrams this tick handled, given back to the inbox at the next.
    private var handled: [[UInt8]] = []

    var jitter: JitterBuffer
    /// The Opus decoder's state from before frames concealed in place, while their packets may
    /// still come (``JitterBuffer/startsConcealingInPlace``); made the first time it is needed.
    var decoderBeforeConcealing: OpusDecoder?
    /// Lengthens or shortens decoded speech when the jitter buffer moves its delay.
    var stretcher: TimeStretcher
    var reception = ReceptionStatistics(clockRate: 48_000)
    var stats = MediaStatistics()
    var sequence: UInt16
    var timestamp: UInt32
    let timestampStep: UInt32
    var captureFrame: [Int16]
    var appFrame: [Int16]
    var playFrame: [Int16]
    var state: State = .idle
    var muted = false
    /// The loss the last report sent told the peer of, 0–1 (early feedback is for news).
    var lastReportedLoss = 0.0
    /// Early reports sent since the last regular one.
    var earlyReports = 0
    /// Which way audio flows, as the offer and answer say (RFC 3264): a held call sends
    /// nothing (or its hold audio) and plays nothing. RTCP goes on either way.
    var sendingAudio = true
    var receivingAudio = true
    /// What a held call sends instead of the microphone, if anything.
    var holdAudio: (any AudioSource)?
    var microphoneVolume = 1.0
    /// Gain on what is played (not on a recording tap).
    var outputVolume = 1.0
    var appAudio: (source: any AudioSource, volume: Double)?
    /// A recording taken on demand: what is heard, and with `mixesSent` what is sent as well.
    var tap: (sink: any AudioSink, mixesSent: Bool)?
    /// What was sent this tick, for a tap that records both sides (silence while held).
    var tapSentFrame: [Int16] = []
    /// A tap's sent side at the sink's rate, when the call sends at another rate than it plays
    /// (a G.711 call's source at 8 kHz, its speaker at 48): the resampler and its frame.
    var tapSentResampler: Resampler?
    var tapSentResampled: [Int16] = []
    var sourceEnded = false
    var nextRTCP = Duration.zero
    var nextStatistics = Duration.zero
    var lastStatisticsAt = Duration.zero
    var bytesAtLastStatistics = (sent: 0, received: 0)
    var remoteSSRC: UInt32?
    /// When the stream being played last sent audio (``MediaConfiguration/sourceTakeover``).
    var remoteSSRCHeardAt: Duration?
    var dtmfQueue: [UInt8] = []
    var dtmfEvent: (code: UInt8, timestamp: UInt32, frames: Int, ends: Int)?
    var dtmfGapFrames = 0
    var lastDTMFTimestamp: UInt32?
    /// Media time of the last authentic packet (or of the first tick); whether we reported a stall.
    var lastInboundAt: Duration?
    var playedAudio = false
    /// Frames concealed in a row, since the last one decoded (``fadeConcealment(_:_:)``).
    var concealedRun = 0
    /// Whether received datagrams wait for the tick (``MediaTransport/receiveOnTicks(_:)``).
    var receivesOnTicks = false
    /// Buffers of frames already played, for the frames received next.
    var spareFrames: [[UInt8]] = []
    /// When the first frame played as its packet arrived (real-time clocks), until the next tick.
    var playedOnArrivalAt: Duration?
    /// When the last tick was due: the first frame plays as it arrives only if the ticks after
    /// it, on this grid, leave its successors' packets their margin (``JitterBuffer/mayStartOnArrival(ticksAt:)``).
    var lastTickDue: Duration?
    var sendMeter: LevelMeter
    var receiveMeter: LevelMeter
    /// The last audio packets sent, newest last (their bodies as sent, sealed if frames are
    /// encrypted), for redundant copies.
    var recentAudio: [SentAudio] = []
    /// The buffer of the frame that last left ``recentAudio``: the next frame is written into it.
    var spareBody: [UInt8] = []
    /// The packet being built: header, red blocks, frame, SRTP tag, reused frame after frame
    /// (a transport that keeps the last one makes the next frame copy it once).
    var outgoing: [UInt8] = []
    /// A received red payload's redundant blocks (type, timestamp offset, where the data
    /// lies), reused packet after packet.
    var receivedBlocks: [(payloadType: UInt8, offset: UInt16, range: Range<Int>)] = []
    var redundancyActive = false
    /// How many earlier frames each packet carries again while redundancy is active.
    var redundancyDepth = 1
    /// The loss the peer reports, smoothed (0–1).
    var reportedLoss = 0.0
    /// How many packets a run of losses takes, as the peer's loss-run reports say (smoothed;
    /// 0 before any), and whether that makes the copies spread out.
    var reportedRunLength = 0.0
    var spreadCopies = false
    /// Since when the reports have asked for less depth than is sent (depth comes down a copy
    /// at a time, after ``MediaConfiguration/redundancyStepDown`` of such reports).
    var lowerDepthWantedSince: Duration?
    /// The deepest redundant copy seen in the peer's recent packets, and how many packets ago.
    var peerDepth = (depth: 0, age: 0)
    /// How far back the copies in the peer's latest packet go: what it sends now (the deepest
    /// of the last seconds may be from before a report changed it).
    var peerLatestDepth = 0
    var lastReportedLossAt: Duration?
    /// Whether a report of the peer's has come: until then the redundancy is at its initial depth.
    var heardReport = false

    enum State { case idle, running, stopped }

    /// Prepares a call's media; nothing is opened until ``start()``.
    ///
    /// - Throws: ``MediaError`` for an unsupported sample rate or frame duration, or keys
    ///   libsrtp rejects.
    public init(configuration: MediaConfiguration = MediaConfiguration(), transport: any MediaTransport,
                keys: MediaKeys, source: any AudioSource, sink: any AudioSink, clock: MediaClock) throws(MediaError) {
        var opus = configuration.opus
        opus.sampleRate = source.format.sampleRate
        opus.channels = 1
        if let problem = opus.problem() { throw .invalidConfiguration(problem) }
        guard source.format.channels == 1, sink.format.channels == 1 else {
            throw .invalidConfiguration("media endpoints must be mono")
        }
        guard opus.frameDuration == clock.frameDuration, configuration.jitterBuffer.frameDuration == clock.frameDuration else {
            throw .invalidConfiguration("the media clock ticks every \(clock.frameDuration); Opus frames and the jitter buffer must match it")
        }
        if let problem = configuration.redundancyProblem { throw .invalidConfiguration(problem) }
        let encoding = configuration.encoding
        if encoding == .opus {
            guard configuration.payloadType >= 96 && configuration.payloadType <= 127 else {
                throw .invalidConfiguration("Opus needs a dynamic payload type (96–127), got \(configuration.payloadType)")
            }
            do throws(OpusError) {
                encoder = try OpusEncoder(configuration: opus)
                decoder = try OpusDecoder(sampleRate: sink.format.sampleRate, channels: 1)
            } catch {
                throw .codec(error.description)
            }
            narrowband = nil
        } else {
            guard configuration.payloadType <= 127 else {
                throw .invalidConfiguration("an RTP payload type is 0–127, got \(configuration.payloadType)")
            }
            let playbackSamples = Int(Int64(sink.format.sampleRate) * opus.frameDuration.milliseconds / 1000)
            guard let codec = NarrowbandCodec(encoding: encoding, frameDuration: opus.frameDuration, captureRate: source.format.sampleRate,
                                              playbackRate: sink.format.sampleRate, playbackSamples: playbackSamples) else {
                throw .codec("no resampler from \(source.format.sampleRate) Hz to \(encoding.clockRate) Hz and back")
            }
            (encoder, decoder, narrowband) = (nil, nil, codec)
        }
        do throws(SRTPError) {
            if let outboundKey = keys.outbound, let inboundKey = keys.inbound {
                outbound = try SRTPSession(key: outboundKey, direction: .outbound)
                inbound = try SRTPSession(key: inboundKey, direction: .inbound)
            } else if keys.outbound == nil && keys.inbound == nil {
                outbound = SRTPSession(unprotected: .outbound)
                inbound = SRTPSession(unprotected: .inbound)
            } else {
                throw SRTPError(function: "keys", status: -1)
            }
        } catch {
            throw .crypto(keys.outbound == nil || keys.inbound == nil ? "SRTP needs a key each way, or none (plain RTP)" : error.description)
        }
        frameCipher = keys.frameEncryption.map { FrameCipher(keys: $0) }
        self.configuration = configuration
        self.transport = transport
        self.clock = clock
        self.source = source
        self.sink = sink
        var rng = SystemRandomNumberGenerator()
        ssrc = configuration.ssrc ?? UInt32.random(in: 1...UInt32.max, using: &rng)
        sequence = UInt16.random(in: 0...UInt16.max, using: &rng)
        timestamp = UInt32.random(in: 0...UInt32.max, using: &rng)
        timestampStep = UInt32(Int64(encoding.clockRate) * opus.frameDuration.milliseconds / 1000)
        reception = ReceptionStatistics(clockRate: encoding.clockRate)
        var jitterConfiguration = configuration.jitterBuffer
        jitterConfiguration.clockRate = encoding.clockRate
        jitter = JitterBuffer(configuration: jitterConfiguration)
        // Opus FEC is there only when the encoder put LBRR data in the packet; G.711 has none.
        if encoding == .opus { jitter.carriesFEC = { OpusPacket.carriesFEC($0) } }
        jitter.timeStretching = configuration.timeStretching
        captureFrame = [Int16](repeating: 0, count: opus.samplesPerFrame)
        appFrame = captureFrame
        playFrame = [Int16](repeating: 0, count: Int(Int64(sink.format.sampleRate) * opus.frameDuration.milliseconds / 1000))
        stretcher = TimeStretcher(frameSamples: playFrame.count, sampleRate: sink.format.sampleRate)
        let meterFrames = Int(200 / max(1, opus.frameDuration.milliseconds))
        sendMeter = LevelMeter(frames: meterFrames)
        receiveMeter = LevelMeter(frames: meterFrames)
        stats.encoding = encoding
        redundancyActive = encoding == .opus && configuration.redundancyPayloadType != nil && configuration.redundancy != .off
        redundancyDepth = max(1, min(configuration.maximumRedundancyDepth, configuration.initialRedundancyDepth))
        (events, eventsContinuation) = AsyncStream.makeStream(of: MediaEvent.self, bufferingPolicy: .bufferingNewest(64))
    }

    /// Opens the endpoints, starts receiving and joins the clock.
    ///
    /// - Throws: ``MediaError/device(_:)`` if a device cannot be opened (nothing is left open).
    public func start() throws(MediaError) {
        switch state {
        case .running: return
        case .stopped: throw .stopped
        case .idle: break
        }
        // Muted before start in the restart-device mode: the microphone stays closed.
        let capture = !(muted && configuration.muteMode == .restartDevice)
        do throws(AudioDeviceError) {
            if capture { try source.start() }
            do throws(AudioDeviceError) { try sink.start() } catch {
                if capture { source.stop() }
                throw error
            }
        } catch {
            throw .device(error)
        }
        let inbox = self.inbox, clock = self.clock, transport = self.transport
        // The first packet is played as soon as the clock can (at once in real time, at the
        // next step of a manual clock) rather than waiting for this call's tick.
        transport.setReceiveHandler { [weak self] bytes in
            // Stamped when it reached the host, not when it was read: a tick reads a frame
            // period's datagrams at once (RTCP's round trip and the jitter measure both use it).
            inbox.put(bytes, arrival: clock.now - transport.arrivalAge)
            if inbox.firstAudio.load(ordering: .relaxed) == 0, let self,
               inbox.firstAudio.compareExchange(expected: 0, desired: 1, ordering: .relaxed).exchanged {
                clock.soon { await self.playOnArrival() }
            }
        }
        state = .running
        // The first report goes out early, so the peer plans FEC for a lossy path within a
        // quarter interval instead of a whole one (RFC 3550 §6.2 also halves the first interval).
        nextRTCP = clock.now + configuration.rtcpInterval / 4
        nextStatistics = clock.now + configuration.statisticsInterval
        lastStatisticsAt = clock.now
        lastReportedLossAt = clock.now
        clock.add(self)
    }

    /// Sends RTCP BYE, leaves the clock and closes the endpoints. Idempotent.
    public func stop() async {
        guard state != .stopped else { return }
        let wasRunning = state == .running
        state = .stopped
        clock.remove(self)
        if receivesOnTicks {
            receivesOnTicks = false
            transport.receiveOnTicks(false)
        }
        transport.setReceiveHandler(nil)
        if wasRunning {
            let bye = RTCPPacket.serializeCompound([
                .receiverReport(ReceiverReport(ssrc: ssrc)), .bye(ssrcs: [ssrc], reason: "hang up"),
            ])
            if let protected = try? outbound.protectRTCP(bye) { await transport.send(protected) }
            source.stop()
            sink.stop()
            appAudio?.source.stop()
        }
        tap?.sink.stop()
        tap = nil
        eventsContinuation.finish()
    }

    /// Mutes or unmutes the microphone as ``MediaConfiguration/muteMode`` says.
    public func setMuted(_ muted: Bool) throws(MediaError) {
        guard muted != self.muted else { return }
        self.muted = muted
        guard state == .running, configuration.muteMode == .restartDevice else { return }
        if muted {
            source.stop()
        } else {
            do throws(AudioDeviceError) { try source.start() } catch { throw .device(error) }
        }
    }

    public var isMuted: Bool { muted }

    /// Queues DTMF digits to send as RFC 4733 telephone events, one after another, each
    /// ``MediaConfiguration/dtmfDuration`` long. Audio pauses while a digit is sent.
    /// - Throws: ``MediaError/invalidDTMF(_:)`` for anything but 0–9, *, #, A–D (nothing is queued).
    public func sendDTMF(_ digits: String) throws(MediaError) {
        let codes = digits.compactMap(TelephoneEvent.code(for:))
        guard !digits.isEmpty, codes.count == digits.count else { throw .invalidDTMF(digits) }
        dtmfQueue.append(contentsOf: codes)
    }

    /// Digits queued or being sent.
    public var pendingDTMF: Int { dtmfQueue.count + (dtmfEvent == nil ? 0 : 1) }

    /// The current statistics.
    public var statistics: MediaStatistics {
        var s = stats
        s.jitterBuffer = jitter.statistics
        s.sendLevel = sendMeter.level
        s.receiveLevel = receiveMeter.level
        s.jitter = reception.jitterDuration
        s.packetsLost = Int(reception.cumulativeLost)
        s.fecExpectedLossPercent = encoder?.expectedLossPercent ?? 0
        s.opusComplexity = encoder?.complexity ?? 0
        s.opusBitrate = encoder?.bitrate ?? 0
        s.sendingRedundancy = redundancyActive
        s.redundancyDepth = redundancyActive ? redundancyDepth : 0
        s.redundancySpread = redundancyActive && redundancyDepth > 1 && spreadCopies
        return s
    }

    // MARK: - The frame cycle

    public func tick(now: Duration) async { await tick(now: now, skipped: 0) }

    public func tick(now: Duration, skipped: Int) async {
        guard state == .running else { return }
        lastTickDue = now
        if configuration.complexityFollowsLoad, let encoder {
            let wanted = min(configuration.opus.complexity, clock.complexityCap)
            if wanted != encoder.complexity { try? encoder.setComplexity(wanted) }
        }
        if skipped > 0 { skip(frames: skipped, now: now) }
        if receivesOnTicks {
            transport.pollReceived()
        } else if playedAudio {
            // From the first audio on (which played as it arrived), what arrives waits for
            // the tick instead of waking a thread per packet (transports that deliver on the
            // clock's own ticks, as in-memory ones do, take no notice).
            receivesOnTicks = true
            transport.receiveOnTicks(true)
            transport.pollReceived()
        }
        receive(now: now)
        watchInbound(now: now)
        await sendFrame()
        if let played = playedOnArrivalAt {
            // The first frame played as it arrived, within this period: its tick is done.
            playedOnArrivalAt = nil
            if clock.now - played >= clock.frameDuration { playFrame(now: now) }
        } else {
            playFrame(now: now)
        }
        if now >= nextRTCP || reportsLossEarly() {
            earlyReports = now >= nextRTCP ? 0 : earlyReports + 1
            nextRTCP = now + configuration.rtcpInterval
            // The report's times (NTP, DLSR) are when it is really sent, for the peer's RTT.
            await sendReport(now: clock.now)
        }
        if now >= nextStatistics {
            nextStatistics = now + configuration.statisticsInterval
            let elapsed = (now - lastStatisticsAt).seconds
            if elapsed > 0 {
                stats.sendBitrate = Int(Double(stats.bytesSent - bytesAtLastStatistics.sent) * 8 / elapsed)
                stats.receiveBitrate = Int(Double(stats.bytesReceived - bytesAtLastStatistics.received) * 8 / elapsed)
            }
            bytesAtLastStatistics = (stats.bytesSent, stats.bytesReceived)
            lastStatisticsAt = now
            eventsContinuation.yield(.statistics(statistics))
        }
    }

    /// This process did not run for `frames` frame periods (paused, starved): no audio was
    /// captured, sent or played in them. The stream's timestamps move on by as much (RFC 3550
    /// §5.1: they follow the sampling clock), so the peer hears a gap, not a stream shifted late;
    /// playout moves on with the clock; file sources and sinks keep to real time; and the peer
    /// is not blamed for the silence we slept through.
    func skip(frames: Int, now: Duration) {
        timestamp &+= UInt32(truncatingIfNeeded: frames) &* timestampStep
        source.skip(samples: frames * captureFrame.count)
        sink.fillSkipped(samples: frames * playFrame.count)
        tap?.sink.fillSkipped(samples: frames * playFrame.count)
        jitter.skip(frames: frames)
        lastInboundAt = now
    }

    func reportPlayoutResets() {
        for reset in jitter.takeResets() { eventsContinuation.yield(.playoutReset(reset)) }
    }

    /// Before the first frame has played: take what arrived and play it now if the jitter
    /// buffer can start, and if this call's ticks fall far enough after its packets' arrivals
    /// (otherwise a tick starts playout, a frame later than it could). That frame is this
    /// period's: the call's next tick, less than a period later, plays nothing new (the next
    /// packet is not due before a period after this one; asking for it then would conceal a
    /// frame, find the next two packets late and move the stream's timeline by 40 ms), and the
    /// ticks after it go on from there.
    func playOnArrival() {
        guard state == .running, !playedAudio else { return }
        defer { inbox.firstAudio.store(playedAudio ? 2 : 0, ordering: .relaxed) }
        let now = clock.now
        receive(now: now)
        if jitter.isWaitingToStart && jitter.bufferedPackets > 0, lastTickDue.map({ jitter.mayStartOnArrival(ticksAt: $0) }) ?? true {
            playFrame(now: now)
            if playedAudio { playedOnArrivalAt = now }
        }
    }

    func receive(now: Duration) {
        var datagrams: [Inbox.Datagram] = []
        swap(&datagrams, &drained)  // held once: the receiving thread appends without a copy
        inbox.take(&datagrams, returning: &handled)
        defer {
            datagrams.removeAll(keepingCapacity: true)
            drained = datagrams
        }
        for i in datagrams.indices {
            // Taken out of the list, so it is held once and SRTP opens it where it lies.
            var bytes: [UInt8] = []
            swap(&bytes, &datagrams[i].bytes)
            switch DatagramKind(classifying: bytes) {
            case .rtp: receiveRTP(&bytes, arrival: datagrams[i].arrival)
            case .rtcp: receiveRTCP(bytes, arrival: datagrams[i].arrival)
            default: stats.malformedDropped += 1
            }
            handled.append(bytes)
        }
    }

    /// Reports a stall when nothing authentic arrived for the stall timeout, and its end.
    func watchInbound(now: Duration) {
        guard let last = lastInboundAt else {
            lastInboundAt = now
            return
        }
        // A held call hears only RTCP (a report a second): a stall is three missed reports.
        let timeout = receivingAudio ? configuration.stallTimeout : max(configuration.stallTimeout, configuration.rtcpInterval * 3)
        if !stats.inboundStalled && now - last >= timeout {
            stats.inboundStalled = true
            stats.inboundStalls += 1
            eventsContinuation.yield(.inboundStalled)
        }
    }

    /// An authentic packet (RTP or RTCP) arrived at `arrival`.
    func heardPeer(at arrival: Duration) {
        lastInboundAt = max(lastInboundAt ?? arrival, arrival)
        if stats.inboundStalled {
            stats.inboundStalled = false
            eventsContinuation.yield(.inboundResumed)
        }
    }

    func count(_ drop: SRTPDrop) {
        switch drop {
        case .authenticationFailed: stats.authenticationFailures += 1
        case .replayed: stats.replaysDropped += 1
        case .malformed: stats.malformedDropped += 1
        }
    }
}
