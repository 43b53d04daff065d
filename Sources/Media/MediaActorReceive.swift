import RTP

/// Receiving: an SRTP packet opened where it lies, its header and red blocks read in place, and
/// the frames the jitter buffer keeps.
extension MediaActor {
    /// One SRTP packet, opened where it lies; nothing of it is copied but the frames the
    /// jitter buffer keeps.
    func receiveRTP(_ bytes: inout [UInt8], arrival: Duration) {
        if let drop = inbound.unprotect(inPlace: &bytes) {
            count(drop)
            return
        }
        heardPeer(at: arrival)
        guard let header = try? RTPHeader(parsing: bytes) else {
            stats.malformedDropped += 1
            return
        }
        if let current = remoteSSRC, current != header.ssrc, !takesPlayoutOver(from: current, at: arrival) {
            stats.otherSourcesDropped += 1
            return
        }
        if header.payloadType == configuration.telephoneEventPayloadType {
            reception.record(sequence: header.sequenceNumber, timestamp: header.timestamp, ssrc: header.ssrc,
                             arrival: arrival, measuresJitter: false)
            jitter.noteNonAudio(sequence: header.sequenceNumber)
            if let packet = try? RTPPacket(parsing: bytes) { receiveTelephoneEvent(packet) }
            return
        }
        guard !header.payload.isEmpty else {
            stats.malformedDropped += 1
            return
        }
        var primary = header.payload
        receivedBlocks.removeAll(keepingCapacity: true)
        if let red = configuration.redundancyPayloadType, header.payloadType == red {
            guard let parsed = try? RedundantAudio.parse(bytes, in: header.payload, block: { receivedBlocks.append(($0, $1, $2)) }),
                  parsed.payloadType == configuration.payloadType, !parsed.range.isEmpty else {
                stats.malformedDropped += 1
                return
            }
            primary = parsed.range
        } else if header.payloadType != configuration.payloadType {
            stats.malformedDropped += 1
            return
        }
        guard receivingAudio else {
            // Held: authentic and counted (so the reports do not call it lost), not played.
            stats.packetsReceived += 1
            stats.bytesReceived += header.payload.count
            reception.record(sequence: header.sequenceNumber, timestamp: header.timestamp, ssrc: header.ssrc, arrival: arrival)
            return
        }
        if let previous = remoteSSRC, previous != header.ssrc {
            // An authentic packet of a new stream: its numbering has nothing to do with the old one's.
            jitter.restart()
        }
        remoteSSRC = header.ssrc
        remoteSSRCHeardAt = max(remoteSSRCHeardAt ?? arrival, arrival)
        stats.packetsReceived += 1
        stats.bytesReceived += header.payload.count
        reception.record(sequence: header.sequenceNumber, timestamp: header.timestamp, ssrc: header.ssrc, arrival: arrival)
        // Authentic and counted as received (the sender is not told of loss), but a frame that
        // does not open under the frame key is never played.
        guard let payload = open(bytes[primary]) else { return }
        jitter.insert(sequence: header.sequenceNumber, timestamp: header.timestamp, payload: payload, arrival: arrival)
        // Redundant copies of earlier frames (a sender repeats the frames of earlier packets, so
        // k frames back is k sequence numbers back). Other blocks (another codec, another
        // spacing) are skipped.
        // How far back the peer's copies go, so playout holds enough delay for them to arrive in time.
        let depth = min(MediaConfiguration.deepestRedundantFrame,
                        receivedBlocks.reduce(0) { max($0, Int($1.offset) / Int(timestampStep)) })  // per packet: no array
        peerLatestDepth = depth
        peerDepth = depth >= peerDepth.depth ? (depth, 0) : (peerDepth.depth, peerDepth.age + 1)
        if peerDepth.age > 250 { peerDepth = (depth, 0) }  // five seconds without deeper copies
        jitter.redundancyDepth = peerDepth.depth
        for block in receivedBlocks where block.payloadType == configuration.payloadType && !block.range.isEmpty {
            let offset = UInt32(block.offset)
            guard offset % timestampStep == 0, (1...UInt32(MediaConfiguration.deepestRedundantFrame)).contains(offset / timestampStep) else { continue }
            let sequence = header.sequenceNumber &- UInt16(offset / timestampStep), timestamp = header.timestamp &- offset
            // Only a copy the buffer lacks is opened and kept.
            guard jitter.wantsRedundant(sequence: sequence, timestamp: timestamp), let copy = open(bytes[block.range]) else { continue }
            jitter.insertRedundant(sequence: sequence, timestamp: timestamp, payload: copy, arrival: arrival)
        }
    }

    /// A frame's payload as the codec needs it: opened if frames are encrypted end to end;
    /// `nil`, counted, if it does not open.
    ///
    /// The frame is written into a buffer of a frame already played (``recycle(_:)``), so a
    /// steady call allocates none per packet for it.
    func open(_ body: ArraySlice<UInt8>) -> [UInt8]? {
        var frame = spareFrames.popLast() ?? []
        guard let frameCipher else {
            frame.removeAll(keepingCapacity: true)
            frame.append(contentsOf: body)
            return frame
        }
        guard frameCipher.open(body, into: &frame) else {
            stats.frameDecryptionFailures += 1
            recycle(frame)
            return nil
        }
        return frame
    }

    /// Keeps a played frame's buffer for the next frame received (a few at most).
    func recycle(_ frame: [UInt8]) {
        if spareFrames.count < 4 { spareFrames.append(frame) }
    }

    /// Replaces a frame key while the call runs (a group's sender key changed): nil leaves
    /// one. Frames sealed before the peer switched still open.
    /// - Throws: ``MediaError/crypto(_:)`` when the call does not encrypt frames.
    public func setFrameKeys(outbound: FrameEncryptionKey?, inbound: FrameEncryptionKey?) throws(MediaError) {
        guard frameCipher != nil else { throw .crypto("this call does not encrypt frames end to end") }
        frameCipher?.rekey(outbound: outbound, inbound: inbound)
    }

    /// Whether a packet of another stream takes the playout over from `current`. A second stream
    /// while the one being played still sends (forked early media, a stray sender on the port)
    /// waits until that one has gone quiet (``MediaConfiguration/sourceTakeover``). This node's
    /// own stream coming back (a peer that reflects what it gets, as an echo test does) plays
    /// only while nothing else is heard: any other source takes over from it at once, and it
    /// never takes over from one that still sends.
    func takesPlayoutOver(from current: UInt32, at arrival: Duration) -> Bool {
        if current == self.ssrc { return true }
        guard let heard = remoteSSRCHeardAt else { return true }
        return arrival - heard >= MediaConfiguration.sourceTakeover
    }
}
