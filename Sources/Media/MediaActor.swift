import RTP
import Locking
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// How muting silences the microphone.
public enum MuteMode: String, Sendable, CaseIterable {
    /// Keep capturing and sending, but send silence (fast; the device stays open).
    case sendSilence
    /// Close the capture device while muted and reopen it on unmute.
    case restartDevice
    /// Zero the microphone input only: app audio mixed into the call is still sent.
    case inputMixer
}

/// When to send each frame again in the next packet (RFC 2198 redundant audio).
public enum RedundancyPolicy: String, Sendable, CaseIterable {
    /// Never (the peer may still send redundancy; it is always used when it arrives).
    case off
    /// From the first frame (a call's loss is not known before the peer's first reports, and
    /// its first words matter), then for as long as the peer reports loss in RTCP: it stops
    /// once reports have shown none for ``MediaConfiguration/redundancyHold``, and starts
    /// again with the first report of loss. A clean call goes back to the plain bitrate.
    case adaptive
    /// From the first frame.
    case always
}

/// Settings of one call's media.
public struct MediaConfiguration: Sendable, Equatable {
    /// The encoder profile. Its sample rate is replaced by the source's rate.
    public var opus: OpusConfiguration
    /// The RTP payload type for Opus (dynamic; 111 by default, RFC 7587).
    public var payloadType: UInt8
    public var jitterBuffer: JitterBufferConfiguration
    /// How often RTCP reports are sent.
    public var rtcpInterval: Duration
    /// How often a ``MediaEvent/statistics(_:)`` event is emitted.
    public var statisticsInterval: Duration
    public var muteMode: MuteMode
    /// The RTCP CNAME (an opaque per-node name).
    public var cname: String
    /// Whether FEC follows the loss the peer reports in RTCP (on by default; FEC costs quality
    /// on a clean network, so it is planned only for the loss actually seen).
    public var adaptiveFEC: Bool
    /// The RTP payload type of RFC 4733 telephone events (DTMF), 101 by default.
    public var telephoneEventPayloadType: UInt8
    /// How long each sent DTMF digit lasts.
    public var dtmfDuration: Duration
    /// Audio between two sent digits.
    public var dtmfGap: Duration
    /// How long nothing may arrive from the peer before ``MediaEvent/inboundStalled`` (the
    /// path is probably cut: a peer always sends at least a DTX frame every 400 ms and RTCP
    /// every second).
    public var stallTimeout: Duration = .seconds(1)
    /// The RTP payload type of RFC 2198 redundant audio (`red/48000/2`) both sides agreed on, or
    /// `nil` when the peer does not support it. Only then is redundancy sent or understood.
    public var redundancyPayloadType: UInt8?
    /// When to send redundancy, if the peer supports it. Each redundant packet carries the
    /// previous frame again, so a single lost packet is rebuilt at full quality from the next
    /// one, at the price of twice the payload bitrate while it is on. While it is on, Opus's
    /// in-band FEC plans for no loss: it would take bits from the primary encoding to protect
    /// the same single losses less well.
    public var redundancy: RedundancyPolicy = .adaptive
    /// With ``RedundancyPolicy/adaptive``: how long after the start, or the last report of
    /// loss, redundancy stays on.
    public static let redundancyHold: Duration = .seconds(10)

    public init(opus: OpusConfiguration = OpusConfiguration(), payloadType: UInt8 = 111,
                jitterBuffer: JitterBufferConfiguration = JitterBufferConfiguration(),
                rtcpInterval: Duration = .seconds(1), statisticsInterval: Duration = .seconds(1),
                muteMode: MuteMode = .sendSilence, cname: String = "callnode", adaptiveFEC: Bool = true,
                telephoneEventPayloadType: UInt8 = 101, dtmfDuration: Duration = .milliseconds(100),
                dtmfGap: Duration = .milliseconds(60)) {
        self.telephoneEventPayloadType = telephoneEventPayloadType
        self.dtmfDuration = dtmfDuration
        self.dtmfGap = dtmfGap
        self.opus = opus
        self.payloadType = payloadType
        self.jitterBuffer = jitterBuffer
        self.rtcpInterval = rtcpInterval
        self.statisticsInterval = statisticsInterval
        self.muteMode = muteMode
        self.cname = cname
        self.adaptiveFEC = adaptiveFEC
    }
}

extension MediaConfiguration {
    /// Whether `red` can carry redundant audio here: a dynamic payload type (35–63 or 96–127)
    /// that neither Opus nor telephone events use.
    public func isUsableRedundancyPayloadType(_ red: Int) -> Bool {
        ((35...63).contains(red) || (96...127).contains(red)) && red != Int(payloadType) && red != Int(telephoneEventPayloadType)
    }

    /// Why ``redundancyPayloadType`` cannot be used, or `nil` if it can (or is not set).
    var redundancyProblem: String? {
        guard let red = redundancyPayloadType, !isUsableRedundancyPayloadType(Int(red)) else { return nil }
        return "redundant audio needs its own dynamic payload type (35–63 or 96–127), got \(red)"
    }
}

/// The keys of a call: our SRTP key protects what we send, the peer's checks what we receive;
/// an optional frame key, shared by both peers, adds end-to-end encryption of every payload.
public struct MediaKeys: Sendable, Equatable {
    public var outbound: SRTPKey
    public var inbound: SRTPKey
    /// When set (on both sides, the same key), payloads are sealed end to end under SRTP.
    public var frameEncryption: FrameEncryptionKey?
    public init(outbound: SRTPKey, inbound: SRTPKey, frameEncryption: FrameEncryptionKey? = nil) {
        self.outbound = outbound
        self.inbound = inbound
        self.frameEncryption = frameEncryption
    }
}

/// Why media could not start or run.
public enum MediaError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalidConfiguration(String)
    case device(AudioDeviceError)
    case codec(String)
    case crypto(String)
    /// ``MediaActor/start()`` after ``MediaActor/stop()``.
    case stopped
    /// DTMF digits other than 0–9, *, #, A–D.
    case invalidDTMF(String)

    public var description: String {
        switch self {
        case let .invalidConfiguration(detail): "invalid media configuration: \(detail)"
        case let .device(error): error.description
        case let .codec(detail): "codec error: \(detail)"
        case let .crypto(detail): "SRTP error: \(detail)"
        case .stopped: "media already stopped"
        case let .invalidDTMF(digits): "DTMF digits must be 0–9, *, # or A–D, got '\(digits)'"
        }
    }
}

/// A snapshot of one call's media.
public struct MediaStatistics: Sendable, Equatable {
    public var packetsSent = 0
    public var bytesSent = 0
    public var packetsReceived = 0
    public var bytesReceived = 0
    /// Payload bitrate over the last statistics interval, bit/s.
    public var sendBitrate = 0
    public var receiveBitrate = 0
    /// Packets lost from the peer (RFC 3550 cumulative count) and the peer's view of ours.
    public var packetsLost = 0
    public var remoteFractionLost = 0.0
    /// Interarrival jitter of what we receive.
    public var jitter = Duration.zero
    /// From RTCP SR/RR; `nil` until the first report with LSR comes back.
    public var roundTripTime: Duration?
    /// RMS level of what was sent and played over the last 200 ms, in dBFS (−100 for digital
    /// silence). A single 20 ms frame of speech is below −40 dBFS about half the time.
    public var sendLevel = -100.0
    public var receiveLevel = -100.0
    public var jitterBuffer = JitterBufferStatistics()
    /// Inbound packets dropped by SRTP: failed authentication (tampered), replayed, malformed.
    public var authenticationFailures = 0
    public var replaysDropped = 0
    public var malformedDropped = 0
    /// Payloads that passed SRTP but failed frame decryption (wrong or missing frame key).
    public var frameDecryptionFailures = 0
    /// DTX frames the encoder asked not to send.
    public var framesNotSent = 0
    /// The loss in-band FEC currently plans for, in percent.
    public var fecExpectedLossPercent = 0
    /// Whether each packet currently carries the previous frame again (RFC 2198).
    public var sendingRedundancy = false
    /// DTMF digits sent and received (RFC 4733 events).
    public var dtmfSent = 0
    public var dtmfReceived = 0
    /// Times nothing arrived from the peer for the stall timeout, and whether that is so now.
    public var inboundStalls = 0
    public var inboundStalled = false

    public init() {}
}

/// What a call's media reports.
public enum MediaEvent: Sendable, Equatable {
    case statistics(MediaStatistics)
    /// The source ended (a WAV file without looping); silence is sent from here on.
    case sourceEnded
    /// The peer sent RTCP BYE.
    case remoteEnded
    /// The peer sent a DTMF digit (RFC 4733), reported once per event.
    case dtmf(Character)
    /// Nothing authentic arrived from the peer for ``MediaConfiguration/stallTimeout``.
    case inboundStalled
    /// Authentic packets arrive again after ``inboundStalled``.
    case inboundResumed
    /// The first frame of the peer's audio was decoded and handed to the sink (once per call).
    case firstAudio
    /// Playout moved to a new place on the peer's stream: this node stalled, the peer's
    /// timestamps jumped, its stream fell behind, or it started a new one.
    case playoutReset(PlayoutReset)
}

/// One call's media: capture → mixer → Opus → RTP → SRTP → transport, and transport → SRTP →
/// RTP → jitter buffer → Opus (FEC, PLC) → playback, with RTCP reports both ways.
///
/// Driven by a ``MediaClock`` (one per node; a manual one in tests): every tick sends one
/// frame and plays one frame. The actor owns its codec and SRTP state; endpoints buffer on
/// their own threads where they have hardware behind them.
public actor MediaActor: MediaClockClient {
    public nonisolated let events: AsyncStream<MediaEvent>
    private let eventsContinuation: AsyncStream<MediaEvent>.Continuation
    public nonisolated let configuration: MediaConfiguration
    public nonisolated let source: any AudioSource
    public nonisolated let sink: any AudioSink
    /// Our RTP synchronization source.
    public nonisolated let ssrc: UInt32

    private let transport: any MediaTransport
    private let clock: MediaClock
    private let encoder: OpusEncoder
    private let decoder: OpusDecoder
    private let outbound: SRTPSession
    private let inbound: SRTPSession
    private let frameCipher: FrameCipher?
    private let inbox = Inbox()

    private var jitter: JitterBuffer
    private var reception = ReceptionStatistics(clockRate: 48_000)
    private var stats = MediaStatistics()
    private var sequence: UInt16
    private var timestamp: UInt32
    private let timestampStep: UInt32
    private var captureFrame: [Int16]
    private var appFrame: [Int16]
    private var playFrame: [Int16]
    private var state: State = .idle
    private var muted = false
    private var microphoneVolume = 1.0
    private var appAudio: (source: any AudioSource, volume: Double)?
    private var sourceEnded = false
    private var nextRTCP = Duration.zero
    private var nextStatistics = Duration.zero
    private var lastStatisticsAt = Duration.zero
    private var bytesAtLastStatistics = (sent: 0, received: 0)
    private var remoteSSRC: UInt32?
    private var dtmfQueue: [UInt8] = []
    private var dtmfEvent: (code: UInt8, timestamp: UInt32, frames: Int, ends: Int)?
    private var dtmfGapFrames = 0
    private var lastDTMFTimestamp: UInt32?
    /// Media time of the last authentic packet (or of the first tick); whether we reported a stall.
    private var lastInboundAt: Duration?
    private var playedAudio = false
    private var sendMeter: LevelMeter
    private var receiveMeter: LevelMeter
    /// The last audio packet sent (its body as sent, sealed if frames are encrypted), repeated
    /// in the next one while redundancy is on.
    private var lastAudio: SentAudio?
    private var redundancyActive = false
    private var lastReportedLossAt: Duration?

    private enum State { case idle, running, stopped }

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
        guard configuration.payloadType >= 96 && configuration.payloadType <= 127 else {
            throw .invalidConfiguration("Opus needs a dynamic payload type (96–127), got \(configuration.payloadType)")
        }
        if let problem = configuration.redundancyProblem { throw .invalidConfiguration(problem) }
        do throws(OpusError) {
            encoder = try OpusEncoder(configuration: opus)
            decoder = try OpusDecoder(sampleRate: sink.format.sampleRate, channels: 1)
        } catch {
            throw .codec(error.description)
        }
        do throws(SRTPError) {
            outbound = try SRTPSession(key: keys.outbound, direction: .outbound)
            inbound = try SRTPSession(key: keys.inbound, direction: .inbound)
        } catch {
            throw .crypto(error.description)
        }
        frameCipher = keys.frameEncryption.map { FrameCipher(key: $0) }
        self.configuration = configuration
        self.transport = transport
        self.clock = clock
        self.source = source
        self.sink = sink
        var rng = SystemRandomNumberGenerator()
        ssrc = UInt32.random(in: 1...UInt32.max, using: &rng)
        sequence = UInt16.random(in: 0...UInt16.max, using: &rng)
        timestamp = UInt32.random(in: 0...UInt32.max, using: &rng)
        timestampStep = UInt32(48_000 * opus.frameDuration.milliseconds / 1000)
        jitter = JitterBuffer(configuration: configuration.jitterBuffer)
        // Opus FEC is there only when the encoder put LBRR data in the packet.
        jitter.carriesFEC = { OpusPacket.carriesFEC($0) }
        captureFrame = [Int16](repeating: 0, count: opus.samplesPerFrame)
        appFrame = captureFrame
        playFrame = [Int16](repeating: 0, count: Int(Int64(sink.format.sampleRate) * opus.frameDuration.milliseconds / 1000))
        let meterFrames = Int(200 / max(1, opus.frameDuration.milliseconds))
        sendMeter = LevelMeter(frames: meterFrames)
        receiveMeter = LevelMeter(frames: meterFrames)
        redundancyActive = configuration.redundancyPayloadType != nil && configuration.redundancy != .off
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
        let inbox = self.inbox, clock = self.clock
        // The first packet is played as it arrives rather than at the next tick (a real-time
        // clock only: manual clocks stay deterministic).
        let wakeOnFirstPacket = !clock.isManual
        transport.setReceiveHandler { [weak self] bytes in
            let arrival = clock.now
            inbox.items.withLock { box in
                // Bounded: a stalled actor drops the oldest datagrams rather than grow.
                if box.count >= 256 { box.removeFirst() }
                box.append((bytes, arrival))
            }
            if wakeOnFirstPacket, let self,
               inbox.firstAudio.compareExchange(expected: 0, desired: 1, ordering: .relaxed).exchanged {
                Task { await self.playOnArrival() }
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

    /// Microphone gain, 0–4 (1 = unchanged).
    public func setMicrophoneVolume(_ volume: Double) {
        microphoneVolume = max(0, min(4, volume))
    }

    /// Mixes `source` (a prompt, music) into what is sent at `volume` (0–4); `nil` removes it.
    public func setAppAudio(_ source: (any AudioSource)?, volume: Double = 1) throws(MediaError) {
        appAudio?.source.stop()
        appAudio = nil
        guard let source else { return }
        guard source.format.sampleRate == self.source.format.sampleRate, source.format.channels == 1 else {
            throw .invalidConfiguration("app audio must be mono at \(self.source.format.sampleRate) Hz")
        }
        do throws(AudioDeviceError) { try source.start() } catch { throw .device(error) }
        appAudio = (source, max(0, min(4, volume)))
    }

    /// The current statistics.
    public var statistics: MediaStatistics {
        var s = stats
        s.jitterBuffer = jitter.statistics
        s.jitter = reception.jitterDuration
        s.packetsLost = Int(reception.cumulativeLost)
        s.fecExpectedLossPercent = encoder.expectedLossPercent
        s.sendingRedundancy = redundancyActive
        return s
    }

    // MARK: - The frame cycle

    public func tick(now: Duration) async { await tick(now: now, skipped: 0) }

    public func tick(now: Duration, skipped: Int) async {
        guard state == .running else { return }
        if skipped > 0 { skip(frames: skipped, now: now) }
        receive(now: now)
        watchInbound(now: now)
        await sendFrame()
        playFrame(now: now)
        if now >= nextRTCP {
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
    private func skip(frames: Int, now: Duration) {
        timestamp &+= UInt32(truncatingIfNeeded: frames) &* timestampStep
        source.skip(samples: frames * captureFrame.count)
        sink.fillSkipped(samples: frames * playFrame.count)
        jitter.skip(frames: frames)
        lastInboundAt = now
    }

    private func reportPlayoutResets() {
        for reset in jitter.takeResets() { eventsContinuation.yield(.playoutReset(reset)) }
    }

    /// Before the first frame has played: take what arrived and play it now if the jitter
    /// buffer can start. The ticks go on from there (the buffer stretches once if it needs more
    /// delay than the tick phase gives).
    private func playOnArrival() {
        guard state == .running, !playedAudio else { return }
        defer { inbox.firstAudio.store(playedAudio ? 2 : 0, ordering: .relaxed) }
        let now = clock.now
        receive(now: now)
        if jitter.isWaitingToStart && jitter.bufferedPackets > 0 { playFrame(now: now) }
    }

    private func receive(now: Duration) {
        let datagrams = inbox.items.withLock { box in
            defer { box.removeAll(keepingCapacity: true) }
            return box
        }
        for (bytes, arrival) in datagrams {
            switch DatagramKind(classifying: bytes) {
            case .rtp: receiveRTP(bytes, arrival: arrival)
            case .rtcp: receiveRTCP(bytes, arrival: arrival)
            default: stats.malformedDropped += 1
            }
        }
    }

    /// Reports a stall when nothing authentic arrived for the stall timeout, and its end.
    private func watchInbound(now: Duration) {
        guard let last = lastInboundAt else {
            lastInboundAt = now
            return
        }
        if !stats.inboundStalled && now - last >= configuration.stallTimeout {
            stats.inboundStalled = true
            stats.inboundStalls += 1
            eventsContinuation.yield(.inboundStalled)
        }
    }

    /// An authentic packet (RTP or RTCP) arrived at `arrival`.
    private func heardPeer(at arrival: Duration) {
        lastInboundAt = max(lastInboundAt ?? arrival, arrival)
        if stats.inboundStalled {
            stats.inboundStalled = false
            eventsContinuation.yield(.inboundResumed)
        }
    }

    private func count(_ drop: SRTPDrop) {
        switch drop {
        case .authenticationFailed: stats.authenticationFailures += 1
        case .replayed: stats.replaysDropped += 1
        case .malformed: stats.malformedDropped += 1
        }
    }

    private func receiveRTP(_ bytes: [UInt8], arrival: Duration) {
        let plain: [UInt8]
        switch inbound.unprotect(bytes) {
        case let .success(p): plain = p
        case let .failure(drop): count(drop); return
        }
        heardPeer(at: arrival)
        if let packet = try? RTPPacket(parsing: plain), packet.payloadType == configuration.telephoneEventPayloadType {
            reception.record(sequence: packet.sequenceNumber, timestamp: packet.timestamp, ssrc: packet.ssrc,
                             arrival: arrival, measuresJitter: false)
            jitter.noteNonAudio(sequence: packet.sequenceNumber)
            receiveTelephoneEvent(packet)
            return
        }
        guard let packet = try? RTPPacket(parsing: plain), !packet.payload.isEmpty else {
            stats.malformedDropped += 1
            return
        }
        var primary = packet.payload
        var redundant: [RedundantAudio.Block] = []
        if let red = configuration.redundancyPayloadType, packet.payloadType == red {
            guard let parsed = try? RedundantAudio(parsing: packet.payload),
                  parsed.primaryPayloadType == configuration.payloadType, !parsed.primary.isEmpty else {
                stats.malformedDropped += 1
                return
            }
            primary = parsed.primary
            redundant = parsed.redundant
        } else if packet.payloadType != configuration.payloadType {
            stats.malformedDropped += 1
            return
        }
        guard let payload = open(primary, of: packet, framesBack: 0) else { return }
        if let previous = remoteSSRC, previous != packet.ssrc {
            // An authentic packet of a new stream: its numbering has nothing to do with the old one's.
            jitter.restart()
        }
        remoteSSRC = packet.ssrc
        stats.packetsReceived += 1
        stats.bytesReceived += packet.payload.count
        reception.record(sequence: packet.sequenceNumber, timestamp: packet.timestamp, ssrc: packet.ssrc, arrival: arrival)
        jitter.insert(sequence: packet.sequenceNumber, timestamp: packet.timestamp, payload: payload, arrival: arrival)
        // Redundant copies of the one or two frames before (a sender repeats the frames of the
        // packets just before this one, so k frames back is k sequence numbers back). Other
        // blocks (another codec, another spacing) are skipped.
        for block in redundant where block.payloadType == configuration.payloadType && !block.payload.isEmpty {
            let offset = UInt32(block.timestampOffset)
            guard offset % timestampStep == 0, (1...2).contains(offset / timestampStep) else { continue }
            let back = UInt16(offset / timestampStep)
            guard let copy = open(block.payload, of: packet, framesBack: back) else { continue }
            jitter.insertRedundant(sequence: packet.sequenceNumber &- back, timestamp: packet.timestamp &- offset,
                                   payload: copy, arrival: arrival)
        }
    }

    /// A frame's payload as the codec needs it: opened if frames are encrypted end to end
    /// (sealed under its own packet's sequence number and timestamp, `framesBack` before this
    /// packet's for a redundant copy); `nil`, counted, if it does not open.
    private func open(_ body: [UInt8], of packet: RTPPacket, framesBack: UInt16) -> [UInt8]? {
        guard let frameCipher else { return body }
        guard let opened = frameCipher.open(body, ssrc: packet.ssrc,
                                            timestamp: packet.timestamp &- UInt32(framesBack) &* timestampStep,
                                            sequence: packet.sequenceNumber &- framesBack) else {
            stats.frameDecryptionFailures += 1
            return nil
        }
        return opened
    }

    /// One digit per event: every packet of an event shares its timestamp, so a lost first
    /// packet is made up by the next and the three end packets do not repeat the digit.
    private func receiveTelephoneEvent(_ packet: RTPPacket) {
        guard let event = try? TelephoneEvent(parsing: packet.payload), let digit = TelephoneEvent.digit(for: event.event) else {
            stats.malformedDropped += 1
            return
        }
        guard packet.timestamp != lastDTMFTimestamp else { return }
        lastDTMFTimestamp = packet.timestamp
        stats.dtmfReceived += 1
        eventsContinuation.yield(.dtmf(digit))
    }

    /// The telephone-event packet to send this frame instead of audio, if a digit is playing.
    private func nextTelephoneEvent() -> RTPPacket? {
        if dtmfEvent == nil {
            if dtmfGapFrames > 0 {
                dtmfGapFrames -= 1
                return nil
            }
            guard !dtmfQueue.isEmpty else { return nil }
            dtmfEvent = (dtmfQueue.removeFirst(), timestamp, 0, 0)
        }
        guard var event = dtmfEvent else { return nil }
        let toneFrames = max(1, Int(configuration.dtmfDuration / clock.frameDuration))
        let isEnd: Bool
        if event.frames < toneFrames {
            event.frames += 1
            isEnd = false
        } else {
            event.ends += 1  // the final packet goes out three times (RFC 4733 §2.5.1.4)
            isEnd = true
        }
        let duration = UInt16(clamping: event.frames * Int(timestampStep))
        let payload = TelephoneEvent(event: event.code, isEnd: isEnd, duration: duration).serialized()
        if event.ends >= 3 {
            dtmfEvent = nil
            dtmfGapFrames = max(1, Int(configuration.dtmfGap / clock.frameDuration))
            stats.dtmfSent += 1
        } else {
            dtmfEvent = event
        }
        defer { sequence &+= 1 }
        return RTPPacket(payloadType: configuration.telephoneEventPayloadType, sequenceNumber: sequence,
                         timestamp: event.timestamp, ssrc: ssrc, marker: event.frames == 1 && !isEnd, payload: payload)
    }

    private func receiveRTCP(_ bytes: [UInt8], arrival: Duration) {
        let plain: [UInt8]
        switch inbound.unprotectRTCP(bytes) {
        case let .success(p): plain = p
        case let .failure(drop): count(drop); return
        }
        heardPeer(at: arrival)
        guard let packets = try? RTCPPacket.parseCompound(plain) else {
            stats.malformedDropped += 1
            return
        }
        for packet in packets {
            switch packet {
            case let .senderReport(sr):
                reception.recordSenderReport(ntpTimestamp: sr.ntpTimestamp, arrival: arrival)
                sr.reports.forEach { useReport($0, arrival: arrival) }
            case let .receiverReport(rr):
                rr.reports.forEach { useReport($0, arrival: arrival) }
            case .bye:
                eventsContinuation.yield(.remoteEnded)
            case .sourceDescription, .other:
                break
            }
        }
    }

    private func useReport(_ block: ReportBlock, arrival: Duration) {
        guard block.ssrc == ssrc else { return }
        stats.remoteFractionLost = Double(block.fractionLost) / 256
        if configuration.redundancyPayloadType != nil && configuration.redundancy == .adaptive {
            if block.fractionLost > 0 {
                redundancyActive = true
                lastReportedLossAt = arrival
            } else if let last = lastReportedLossAt, arrival - last >= MediaConfiguration.redundancyHold {
                redundancyActive = false
            }
        }
        if configuration.adaptiveFEC && configuration.opus.inbandFEC && redundancyActive {
            // Redundancy rebuilds single losses whole; in-band FEC would only cost the primary bits.
            if encoder.expectedLossPercent != 0 { try? encoder.setExpectedLoss(percent: 0) }
        } else if configuration.adaptiveFEC && configuration.opus.inbandFEC {
            // Plan for the loss the peer sees, smoothed: the first report sets the plan, each
            // later one moves it halfway (capped at 30 %). One report covers 12–50 packets, so
            // on a 10 % path it swings between 0 and 25 %; planning for more loss than there is
            // takes bits from the primary encoding (PESQ-WB at 10 % loss: plan 10 → 2.86,
            // plan 15 → 2.62).
            let seen = stats.remoteFractionLost * 100
            let current = encoder.expectedLossPercent
            let next = min(30, Int((current == 0 ? seen : (Double(current) + seen) / 2).rounded()))
            if next != current { try? encoder.setExpectedLoss(percent: next) }
        }
        if let rtt = block.roundTripTime(arrivalNTP: NTPTime.middle(ntp(arrival))) { stats.roundTripTime = rtt }
    }

    /// NTP time on this call's clock (consistent with itself, which is all RTT needs).
    private func ntp(_ time: Duration) -> UInt64 { NTPTime.timestamp(sinceUnixEpoch: time) }

    private func sendFrame() async {
        let sourceRunning = !(muted && configuration.muteMode == .restartDevice)
        var real = true
        if sourceRunning {
            real = source.read(into: &captureFrame)
        } else {
            for i in captureFrame.indices { captureFrame[i] = 0 }
        }
        if !real && !sourceEnded {
            sourceEnded = true
            eventsContinuation.yield(.sourceEnded)
        }
        let micGain = muted ? 0 : microphoneVolume
        if let app = appAudio {
            _ = app.source.read(into: &appFrame)
            let appGain = (muted && configuration.muteMode == .sendSilence) ? 0 : app.volume
            for i in captureFrame.indices {
                let mixed = Double(captureFrame[i]) * micGain + Double(appFrame[i]) * appGain
                captureFrame[i] = Int16(max(-32768, min(32767, mixed)))
            }
        } else if micGain != 1 {
            for i in captureFrame.indices {
                captureFrame[i] = Int16(max(-32768, min(32767, Double(captureFrame[i]) * micGain)))
            }
        }
        stats.sendLevel = sendMeter.add(captureFrame)

        defer { timestamp &+= timestampStep }
        if let event = nextTelephoneEvent() {
            guard let protected = try? outbound.protect(event.serialized()) else { return }
            stats.packetsSent += 1
            stats.bytesSent += event.payload.count
            await transport.send(protected)
            return
        }
        guard let payload = try? encoder.encode(captureFrame) else { return }
        if configuration.opus.discontinuousTransmission && payload.count <= 2 {
            stats.framesNotSent += 1  // DTX: the encoder says there is nothing worth sending
            return
        }
        var body = Array(payload)
        if let frameCipher {
            guard let sealed = try? frameCipher.seal(body, ssrc: ssrc, timestamp: timestamp, sequence: sequence) else { return }
            body = sealed
        }
        var payloadType = configuration.payloadType
        var wire = body
        if redundancyActive, let red = configuration.redundancyPayloadType, let previous = lastAudio,
           previous.sequence &+ 1 == sequence, timestamp &- previous.timestamp == timestampStep,
           previous.body.count <= RedundantAudio.maximumBlockLength {
            // The previous frame again, just before this one (its packet was the one before).
            wire = RedundantAudio(primaryPayloadType: configuration.payloadType, primary: body, redundant: [
                RedundantAudio.Block(payloadType: configuration.payloadType, timestampOffset: UInt16(timestampStep),
                                     payload: previous.body),
            ]).serialized()
            payloadType = red
        }
        lastAudio = SentAudio(sequence: sequence, timestamp: timestamp, body: body)
        let packet = RTPPacket(payloadType: payloadType, sequenceNumber: sequence, timestamp: timestamp,
                               ssrc: ssrc, payload: wire)
        sequence &+= 1
        guard let protected = try? outbound.protect(packet.serialized()) else { return }
        stats.packetsSent += 1
        stats.bytesSent += wire.count
        await transport.send(protected)
    }

    private func playFrame(now: Duration) {
        let action = jitter.nextFrame(now: now)
        var ok = true
        switch action {
        case .waiting, .silence:
            for i in playFrame.indices { playFrame[i] = 0 }
        case let .play(payload):
            ok = (try? decoder.decode(payload, into: &playFrame)) != nil
        case let .recover(next):
            ok = (try? decoder.recover(fromNext: next, into: &playFrame)) != nil
        case .conceal:
            ok = (try? decoder.conceal(into: &playFrame)) != nil
        }
        if !ok {
            // A payload libopus rejects: conceal instead of playing garbage.
            stats.malformedDropped += 1
            if (try? decoder.conceal(into: &playFrame)) == nil { for i in playFrame.indices { playFrame[i] = 0 } }
        }
        reportPlayoutResets()
        stats.receiveLevel = receiveMeter.add(playFrame)
        sink.write(playFrame)
        if !playedAudio, ok, case .play = action {
            playedAudio = true
            eventsContinuation.yield(.firstAudio)
        }
    }

    private func sendReport(now: Duration) async {
        var packets: [RTCPPacket] = []
        let blocks = reception.makeReportBlock(now: now).map { [$0] } ?? []
        if stats.packetsSent > 0 {
            packets.append(.senderReport(SenderReport(
                ssrc: ssrc, ntpTimestamp: ntp(now), rtpTimestamp: timestamp,
                packetCount: UInt32(truncatingIfNeeded: stats.packetsSent),
                octetCount: UInt32(truncatingIfNeeded: stats.bytesSent), reports: blocks)))
        } else {
            packets.append(.receiverReport(ReceiverReport(ssrc: ssrc, reports: blocks)))
        }
        packets.append(.sourceDescription([SDESChunk(ssrc: ssrc, cname: configuration.cname)]))
        guard let protected = try? outbound.protectRTCP(RTCPPacket.serializeCompound(packets)) else { return }
        await transport.send(protected)
    }
}

/// An audio packet as sent (its body sealed if frames are encrypted).
private struct SentAudio {
    var sequence: UInt16
    var timestamp: UInt32
    var body: [UInt8]
}

/// The RMS level of the last few frames, in dBFS.
struct LevelMeter {
    private var energies: [Double]
    private var next = 0

    /// - Parameter frames: How many frames the level spans.
    init(frames: Int) { energies = [Double](repeating: 0, count: max(1, frames)) }

    /// Adds a frame; returns the level over the span ending with it.
    mutating func add(_ frame: [Int16]) -> Double {
        var sum = 0.0
        for s in frame { sum += Double(s) * Double(s) }
        energies[next] = sum / Double(max(1, frame.count))
        next = (next + 1) % energies.count
        var total = 0.0
        for e in energies { total += e }
        let rms = (total / Double(energies.count)).squareRoot() / 32768
        return rms > 0 ? max(-100, 20 * log10(rms)) : -100
    }
}

/// Datagrams received between two ticks, with their arrival times. Filled by the transport's
/// thread, emptied by the media actor.
private final class Inbox: Sendable {
    let items = Locked<[(bytes: [UInt8], arrival: Duration)]>([])
    /// Until the first frame plays: 0 idle, 1 a wake-up is on its way to the actor, 2 played.
    let firstAudio = Atomic<Int>(0)
}
