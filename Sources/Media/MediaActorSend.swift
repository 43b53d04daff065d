import RTP

/// The send half of a call's tick: a frame read from the source (or the hold audio), mixed with
/// app audio and gains, coded (Opus or G.711), framed as RTP with redundant copies when the
/// path loses packets, protected and sent.
extension MediaActor {
    func sendFrame() async {
        let sourceRunning = !(muted && configuration.muteMode == .restartDevice)
        var real = true
        if sourceRunning {
            real = source.read(into: &captureFrame)
        } else {
            for i in captureFrame.indices { captureFrame[i] = 0 }
        }
        if !sendingAudio || holdAudio != nil {
            // Held: the microphone was read (a device never backs up, a file keeps to real
            // time) and is not sent. The timestamp moves on with the clock, so the peer sees
            // the pause as time passing when audio comes back.
            guard sendingAudio, let hold = holdAudio else {
                if tap?.mixesSent == true { for i in tapSentFrame.indices { tapSentFrame[i] = 0 } }
                sendMeter.add([])
                timestamp &+= timestampStep
                return
            }
            if !hold.read(into: &captureFrame) { for i in captureFrame.indices { captureFrame[i] = 0 } }
        }
        if !real && !sourceEnded {
            sourceEnded = true
            eventsContinuation.yield(.sourceEnded)
        }
        let micGain = muted ? 0 : microphoneVolume
        if holdAudio != nil {
            // The hold audio alone, as it is.
        } else if let app = appAudio {
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
        sendMeter.add(captureFrame)
        if tap?.mixesSent == true { tapSentFrame = captureFrame }

        defer { timestamp &+= timestampStep }
        if let event = nextTelephoneEvent() {
            guard let protected = try? outbound.protect(event.serialized()) else { return }
            stats.packetsSent += 1
            stats.bytesSent += event.payload.count
            await transport.send(protected)
            return
        }
        let payload: ArraySlice<UInt8>
        if let encoder {
            guard let encoded = try? encoder.encode(captureFrame) else { return }
            payload = encoded
        } else if let narrowband {
            payload = narrowband.encode(captureFrame)
        } else {
            return
        }
        if encoder != nil && configuration.opus.discontinuousTransmission && payload.count <= 2 {
            stats.framesNotSent += 1  // DTX: the encoder says there is nothing worth sending
            return
        }
        // The frame as sent, in the buffer of the oldest frame kept for copies (no allocation).
        var body: [UInt8] = []
        swap(&body, &spareBody)
        body.removeAll(keepingCapacity: true)
        if frameCipher != nil {
            guard (try? frameCipher?.seal(payload, appendingTo: &body)) != nil else { return }
        } else {
            body.append(contentsOf: payload)
        }
        // Earlier frames again when redundancy is active, k frames back being k packets back
        // (a gap in either ends the run), spread so that a burst of losses rarely takes a frame
        // and all its copies (``MediaConfiguration/redundancyOffsets(depth:)``); the oldest are
        // left out first to keep within the budget. `copies` of the offsets are used.
        var offsets: [Int] = []
        var copies = 0, size = body.count
        if redundancyActive, configuration.redundancyPayloadType != nil {
            offsets = MediaConfiguration.redundancyOffsets(depth: max(1, redundancyDepth), spread: spreadCopies)
            for back in offsets {
                guard recentAudio.count >= back else { break }
                let earlier = recentAudio[recentAudio.count - back]
                guard earlier.sequence &+ UInt16(back) == sequence, timestamp &- earlier.timestamp == timestampStep &* UInt32(back),
                      earlier.body.count <= RedundantAudio.maximumBlockLength,
                      size + earlier.body.count + 4 <= configuration.redundancyBudget else { break }
                size += earlier.body.count + 4
                copies += 1
            }
        }
        // The packet is built in one buffer and protected where it lies.
        var packet: [UInt8] = []
        swap(&packet, &outgoing)
        packet.removeAll(keepingCapacity: true)
        RTPHeader.append(payloadType: copies > 0 ? configuration.redundancyPayloadType ?? configuration.payloadType : configuration.payloadType,
                         sequenceNumber: sequence, timestamp: timestamp, ssrc: ssrc, to: &packet)
        if let id = configuration.audioLevelExtension {
            let level = RTPHeader.audioLevel(of: captureFrame)
            RTPHeader.appendAudioLevel(id: id, level: level, voice: level < 127, to: &packet)
        }
        if copies > 0 {
            // Block headers oldest first, the primary's last, then the data in the same order.
            for k in (0..<copies).reversed() {
                let earlier = recentAudio[recentAudio.count - offsets[k]]
                RedundantAudio.appendBlockHeader(payloadType: configuration.payloadType,
                                                 timestampOffset: UInt16(timestampStep &* UInt32(offsets[k])),
                                                 length: earlier.body.count, to: &packet)
            }
            packet.append(configuration.payloadType & 0x7F)
            for k in (0..<copies).reversed() { packet.append(contentsOf: recentAudio[recentAudio.count - offsets[k]].body) }
        }
        packet.append(contentsOf: body)
        recentAudio.append(SentAudio(sequence: sequence, timestamp: timestamp, body: body))
        if recentAudio.count > MediaConfiguration.deepestRedundantFrame { spareBody = recentAudio.removeFirst().body }
        sequence &+= 1
        let wireCount = packet.count - RTPPacket.headerSize
        defer { outgoing = packet }
        guard (try? outbound.protect(inPlace: &packet)) != nil else { return }
        stats.packetsSent += 1
        stats.bytesSent += wireCount
        await transport.send(packet)
    }
}
