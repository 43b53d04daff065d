import RTP
import Locking
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A call's control traffic: RTCP reports both ways (loss, RTT, the redundancy and FEC they
/// steer) and RFC 4733 telephone events.
extension MediaActor {
    /// One digit per event: every packet of an event shares its timestamp, so a lost first
    /// packet is made up by the next and the three end packets do not repeat the digit.
    func receiveTelephoneEvent(_ packet: RTPPacket) {
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
    func nextTelephoneEvent() -> RTPPacket? {
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

    func receiveRTCP(_ bytes: [UInt8], arrival: Duration) {
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
            case .other:
                if let runs = LossRunReport(packet), runs.source == ssrc { useLossRuns(runs) }
            case .sourceDescription:
                break
            }
        }
    }

    /// Which way audio flows (RFC 3264 directions; hold is one of them): not sending, the
    /// microphone is read and dropped; not receiving, arriving audio is dropped and silence
    /// played. `holdAudio` (a prompt, music) is sent instead of the microphone while set. RTCP
    /// reports go on both ways, so the call stays measured and alive.
    /// Hold audio at another rate than ``captureFormat`` is resampled to it.
    public func setDirection(sending: Bool, receiving: Bool, holdAudio: (any AudioSource)? = nil) throws(MediaError) {
        var hold = holdAudio
        if let given = holdAudio {
            if isHeld(given) {
                hold = self.holdAudio
            } else {
                let adapted = try atCaptureRate(given, what: "hold audio")
                do throws(AudioDeviceError) { try adapted.start() } catch { throw .device(error) }
                hold = adapted
            }
        }
        if let old = self.holdAudio, old !== hold { old.stop() }
        self.holdAudio = sending ? hold : nil
        if receiving && !receivingAudio {
            // Audio comes back after a pause of any length: a fresh start, not a late stream
            // (and not a playout reset to report: the pause was agreed).
            jitter.restart()
            _ = jitter.takeResets()
            stretcher = TimeStretcher(frameSamples: playFrame.count, sampleRate: sink.format.sampleRate)
        }
        if sending && !sendingAudio {
            // Sending again after a pause: the encoder's last frame is from before it, and the
            // first packet's in-band FEC would carry it (a peer recovering a "lost" frame then
            // plays audio from before the hold, after a mute set meanwhile too).
            encoder?.reset()
        }
        sendingAudio = sending
        receivingAudio = receiving
    }

    /// Whether `source` is the hold audio sent now: itself, or resampled to the call's rate.
    func isHeld(_ source: any AudioSource) -> Bool {
        guard let current = holdAudio else { return false }
        return current === source || (current as? ResampledSource)?.inner === source
    }

    /// Whether audio is sent and played now (see ``setDirection(sending:receiving:holdAudio:)``).
    public var direction: (sending: Bool, receiving: Bool) { (sendingAudio, receivingAudio) }

    /// The peer's loss-run report: bursty loss spreads the redundant copies.
    func useLossRuns(_ report: LossRunReport) {
        guard let run = report.meanRun else { return }
        reportedRunLength = reportedRunLength == 0 ? run : (reportedRunLength + run) / 2
        // Random loss at rate p makes runs of 1 / (1 − p) on average.
        let burstiness = reportedRunLength * (1 - min(reportedLoss, 0.9))
        spreadCopies = burstiness >= MediaConfiguration.burstinessToSpread
    }

    func useReport(_ block: ReportBlock, arrival: Duration) {
        guard block.ssrc == ssrc else { return }
        stats.remoteFractionLost = Double(block.fractionLost) / 256
        if configuration.redundancyPayloadType != nil && configuration.redundancy == .adaptive {
            // Depth follows the loss the peer reports, smoothed (``redundancyDepth(forLoss:)``);
            // back to none after a clean hold.
            let seen = Double(block.fractionLost) / 256
            reportedLoss = reportedLoss == 0 ? seen : (reportedLoss + seen) / 2
            if !heardReport {
                // The initial depth was for a path not known yet: the first report says what
                // it needs (below, at once: one copy without loss, and none after the hold).
                heardReport = true
                redundancyDepth = 1
            }
            if block.fractionLost > 0 {
                redundancyActive = true
                lastReportedLossAt = arrival
            }
            if block.fractionLost > 0 || redundancyActive {
                // Up at once; down a copy at a time once the reports have wanted less for a
                // while: a path whose loss swings around a threshold keeps one depth (and the
                // peer's playout one delay) instead of moving with every report.
                let wanted = max(1, min(configuration.maximumRedundancyDepth, Self.redundancyDepth(forLoss: reportedLoss)))
                if wanted >= redundancyDepth {
                    redundancyDepth = wanted
                    lowerDepthWantedSince = nil
                } else if let since = lowerDepthWantedSince {
                    if arrival - since >= MediaConfiguration.redundancyStepDown {
                        redundancyDepth -= 1
                        lowerDepthWantedSince = redundancyDepth > wanted ? arrival : nil
                    }
                } else {
                    lowerDepthWantedSince = arrival
                }
            }
            if block.fractionLost == 0, let last = lastReportedLossAt, arrival - last >= MediaConfiguration.redundancyHold {
                redundancyActive = false
                redundancyDepth = 1
                reportedLoss = 0
                lowerDepthWantedSince = nil
                reportedRunLength = 0
                spreadCopies = false
            }
        }
        if let encoder {
            planFEC(encoder)
            planBitrate(encoder)
        }
        if let rtt = block.roundTripTime(arrivalNTP: NTPTime.middle(ntp(arrival))) { stats.roundTripTime = rtt }
    }

    /// Copies per packet for the loss the peer reports (smoothed): one for light loss, two
    /// from 5 %, three from 8 %, four from 38 %, five from 45 %. A frame is lost only when its
    /// packet and every packet with a copy are: at 50 % random loss 6.3 % of frames with three
    /// copies, 1.6 % with five.
    static func redundancyDepth(forLoss loss: Double) -> Int {
        switch loss {
        case ..<0.05: 1
        case ..<0.08: 2
        case ..<0.38: 3
        case ..<0.45: 4
        default: 5
        }
    }

    /// The encoder's bitrate for the copies it goes out with: beyond three copies each frame
    /// gets a share of what a frame and three copies take at the call's bitrate, so heavy loss
    /// deepens the redundancy without raising what the call sends (at 40 kbit/s: 32 kbit/s
    /// with four copies, 27 with five).
    func planBitrate(_ encoder: OpusEncoder) {
        let configured = configuration.opus.bitrate
        let copies = redundancyActive ? redundancyDepth : 0
        let wanted = copies > 3 ? configured * 4 / (copies + 1) : configured
        if wanted != encoder.bitrate { try? encoder.setBitrate(wanted) }
    }

    /// Opus's in-band FEC planned for the loss the peer reports (G.711 calls have none).
    func planFEC(_ encoder: OpusEncoder) {
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
    }

    /// NTP time on this call's clock (consistent with itself, which is all RTT needs).
    func ntp(_ time: Duration) -> UInt64 { NTPTime.timestamp(sinceUnixEpoch: time) }

    /// Whether heavy loss began since the last report, which told the peer of little or none
    /// (under 5 %): at 10 % or more of the interval so far (three packets at least), the peer
    /// should hear of it now, not
    /// at the next interval (its redundancy and FEC follow reports). A report that caught only
    /// the first losses of a bad path does not hold the news back for a whole interval. Once
    /// the peer knows of loss, reports keep their interval: early ones over a few packets would
    /// swing its redundancy with every burst.
    ///
    /// The report crosses the path whose loss it reports, so it may be lost too: while the
    /// loss stays heavy and the peer's copies have not followed (it sends copies, fewer than
    /// three frames deep), the news goes out again — twice more at most before the next
    /// regular report, each after another ``MediaConfiguration/earlyReportAfterPackets``
    /// packets with the same loss.
    func reportsLossEarly() -> Bool {
        guard let after = configuration.earlyReportAfterPackets, receivingAudio else { return false }
        let interval = reception.sinceLastReport
        // Three losses at least: one early in an interval is no news (1 % loss has them).
        guard interval.expected >= after && interval.lost >= 3 && interval.lost * 10 >= interval.expected else { return false }
        if lastReportedLoss < 0.05 { return true }
        return earlyReports > 0 && earlyReports < 3 && (1..<3).contains(peerLatestDepth)
    }

    func sendReport(now: Duration) async {
        var packets: [RTCPPacket] = []
        let blocks = reception.makeReportBlock(now: now).map { [$0] } ?? []
        lastReportedLoss = Double(blocks.first?.fractionLost ?? 0) / 256
        if stats.packetsSent > 0 {
            packets.append(.senderReport(SenderReport(
                ssrc: ssrc, ntpTimestamp: ntp(now), rtpTimestamp: timestamp,
                packetCount: UInt32(truncatingIfNeeded: stats.packetsSent),
                octetCount: UInt32(truncatingIfNeeded: stats.bytesSent), reports: blocks)))
        } else {
            packets.append(.receiverReport(ReceiverReport(ssrc: ssrc, reports: blocks)))
        }
        packets.append(.sourceDescription([SDESChunk(ssrc: ssrc, cname: configuration.cname)]))
        if let source = reception.ssrc {
            let runs = reception.takeLossRuns()
            packets.append(LossRunReport(ssrc: ssrc, source: source, lost: UInt16(min(runs.lost, 65_535)),
                                         runs: UInt16(min(runs.runs, 65_535))).packet)
        }
        guard let protected = try? outbound.protectRTCP(RTCPPacket.serializeCompound(packets)) else { return }
        await transport.send(protected)
    }
}

/// An audio packet as sent (its body sealed if frames are encrypted).
struct SentAudio {
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

    /// Adds a frame (an empty one is silence).
    mutating func add(_ frame: [Int16]) {
        // Integer squares (a frame's sum fits easily): no per-sample conversions.
        var sum: Int64 = 0
        frame.withUnsafeBufferPointer { samples in
            for sample in samples {
                let value = Int64(truncatingIfNeeded: sample)
                sum &+= value &* value
            }
        }
        energies[next] = Double(sum) / Double(max(1, frame.count))
        next = (next + 1) % energies.count
    }

    /// The level over the span ending with the last frame, in dB below full scale (−100 for
    /// silence). Worked out when asked (statistics are read a few times a second, frames come
    /// fifty times), not per frame.
    var level: Double {
        var total = 0.0
        for e in energies { total += e }
        let rms = (total / Double(energies.count)).squareRoot() / 32768
        return rms > 0 ? max(-100, 20 * log10(rms)) : -100
    }
}

/// Datagrams received between two ticks, with their arrival times. Filled by the transport's
/// thread (or the tick's own, when it polls), emptied by the media actor. Each datagram is
/// copied into the buffer of one the actor has handled, so a steady call allocates nothing here.
final class Inbox: Sendable {
    /// A datagram as it arrived (a struct, not a tuple: lists of tuples are copied and
    /// destroyed through the runtime's generic value witnesses).
    struct Datagram {
        var bytes: [UInt8]
        var arrival: Duration
    }

    struct Box {
        var items: [Datagram] = []
        /// Buffers of handled datagrams, for the next ones.
        var spares: [[UInt8]] = []
    }
    let box = Locked(Box())
    /// Until the first frame plays: 0 idle, 1 a wake-up is on its way to the actor, 2 played.
    let firstAudio = Atomic<Int>(0)
    /// Bounded: a stalled actor drops the oldest datagrams rather than grow.
    static let capacity = 256
    static let spareLimit = 16

    func put(_ bytes: UnsafeRawBufferPointer, arrival: Duration) {
        box.withLock { box in
            // Over the bound the oldest datagram goes, and its buffer carries the new one.
            var buffer = box.items.count >= Self.capacity ? box.items.removeFirst().bytes : box.spares.popLast() ?? []
            buffer.removeAll(keepingCapacity: true)
            buffer.append(contentsOf: bytes)
            box.items.append(Datagram(bytes: buffer, arrival: arrival))
        }
    }

    /// Swaps what arrived into `items` (handing over the emptied list the caller passes in) and
    /// takes back the buffers of `handled` datagrams.
    func take(_ items: inout [Datagram], returning handled: inout [[UInt8]]) {
        box.withLock { box in
            swap(&box.items, &items)
            while box.spares.count < Self.spareLimit, let buffer = handled.popLast() { box.spares.append(buffer) }
        }
        handled.removeAll(keepingCapacity: true)
    }
}
