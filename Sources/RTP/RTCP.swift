/// A reception report block (RFC 3550 §6.4.1): what one receiver saw of one source.
public struct ReportBlock: Sendable, Equatable {
    public var ssrc: UInt32
    /// Fraction of packets lost since the previous report, in 1/256 units.
    public var fractionLost: UInt8
    /// Packets lost since the start (24-bit signed; negative when duplicates outnumber losses).
    public var cumulativeLost: Int32
    public var extendedHighestSequence: UInt32
    /// Interarrival jitter in RTP timestamp units.
    public var jitter: UInt32
    /// The middle 32 bits of the NTP time of the last SR received from this source (0 if none).
    public var lastSenderReport: UInt32
    /// Delay since that SR, in 1/65536 s.
    public var delaySinceLastSenderReport: UInt32

    public init(ssrc: UInt32, fractionLost: UInt8, cumulativeLost: Int32, extendedHighestSequence: UInt32,
                jitter: UInt32, lastSenderReport: UInt32, delaySinceLastSenderReport: UInt32) {
        self.ssrc = ssrc
        self.fractionLost = fractionLost
        self.cumulativeLost = cumulativeLost
        self.extendedHighestSequence = extendedHighestSequence
        self.jitter = jitter
        self.lastSenderReport = lastSenderReport
        self.delaySinceLastSenderReport = delaySinceLastSenderReport
    }

    /// Round-trip time (RFC 3550 §6.4.1): arrival − LSR − DLSR, all in NTP short format.
    /// `nil` when the report carries no LSR.
    public func roundTripTime(arrivalNTP: UInt32) -> Duration? {
        guard lastSenderReport != 0 else { return nil }
        let rtt = arrivalNTP &- lastSenderReport &- delaySinceLastSenderReport
        guard rtt < 0x8000_0000 else { return .zero }  // clock skew made it "negative"
        return NTPTime.duration(short: rtt)
    }
}

/// A sender report (RFC 3550 §6.4.1).
public struct SenderReport: Sendable, Equatable {
    public var ssrc: UInt32
    public var ntpTimestamp: UInt64
    public var rtpTimestamp: UInt32
    public var packetCount: UInt32
    public var octetCount: UInt32
    public var reports: [ReportBlock]

    public init(ssrc: UInt32, ntpTimestamp: UInt64, rtpTimestamp: UInt32, packetCount: UInt32,
                octetCount: UInt32, reports: [ReportBlock] = []) {
        self.ssrc = ssrc
        self.ntpTimestamp = ntpTimestamp
        self.rtpTimestamp = rtpTimestamp
        self.packetCount = packetCount
        self.octetCount = octetCount
        self.reports = reports
    }
}

/// A receiver report (RFC 3550 §6.4.2).
public struct ReceiverReport: Sendable, Equatable {
    public var ssrc: UInt32
    public var reports: [ReportBlock]

    public init(ssrc: UInt32, reports: [ReportBlock] = []) {
        self.ssrc = ssrc
        self.reports = reports
    }
}

/// An SDES chunk: one source and its CNAME (other SDES items are skipped when parsing).
public struct SDESChunk: Sendable, Equatable {
    public var ssrc: UInt32
    public var cname: String
    public init(ssrc: UInt32, cname: String) {
        self.ssrc = ssrc
        self.cname = cname
    }
}

/// One RTCP packet of a compound datagram.
public enum RTCPPacket: Sendable, Equatable {
    case senderReport(SenderReport)
    case receiverReport(ReceiverReport)
    /// SDES: the CNAME of each source (other items are skipped when parsing).
    case sourceDescription([SDESChunk])
    case bye(ssrcs: [UInt32], reason: String?)
    /// A packet type CallNode does not interpret (APP, feedback…), kept whole.
    case other(packetType: UInt8, bytes: [UInt8])

    public static let senderReportType: UInt8 = 200
    public static let receiverReportType: UInt8 = 201
    public static let sourceDescriptionType: UInt8 = 202
    public static let byeType: UInt8 = 203

    /// Parses a compound RTCP datagram (RFC 3550 §6.1): one or more packets back to back,
    /// each with version 2 and a length that fits.
    ///
    /// - Throws: ``RTPParseError`` for an empty datagram, a wrong version, a length that runs
    ///   past the end, or a report count that does not fit its packet.
    public static func parseCompound(_ bytes: [UInt8]) throws(RTPParseError) -> [RTCPPacket] {
        guard bytes.count >= 4 else { throw .truncated(needed: 4, available: bytes.count) }
        var packets: [RTCPPacket] = []
        var offset = 0
        while offset < bytes.count {
            guard bytes.count - offset >= 4 else { throw .truncated(needed: offset + 4, available: bytes.count) }
            let version = Int(bytes[offset] >> 6)
            guard version == 2 else { throw .unsupportedVersion(version) }
            let count = Int(bytes[offset] & 0x1F)
            let hasPadding = bytes[offset] & 0x20 != 0
            let type = bytes[offset + 1]
            let length = 4 * (Int(bytes.readUInt16(at: offset + 2)) + 1)
            guard offset + length <= bytes.count else {
                throw .invalidLength("RTCP packet of \(length) bytes at offset \(offset) overruns the \(bytes.count)-byte datagram")
            }
            var body = Array(bytes[(offset + 4)..<(offset + length)])
            if hasPadding {
                let pad = Int(body.last ?? 0)
                guard pad > 0, pad <= body.count else { throw .invalidPadding(pad) }
                body.removeLast(pad)
            }
            packets.append(try parseOne(type: type, count: count, body: body, whole: Array(bytes[offset..<(offset + length)])))
            offset += length
        }
        return packets
    }

    private static func parseOne(type: UInt8, count: Int, body: [UInt8], whole: [UInt8]) throws(RTPParseError) -> RTCPPacket {
        switch type {
        case senderReportType:
            guard body.count >= 24 + 24 * count else { throw .truncated(needed: 28 + 24 * count, available: body.count + 4) }
            let ntp = UInt64(body.readUInt32(at: 4)) << 32 | UInt64(body.readUInt32(at: 8))
            return .senderReport(SenderReport(
                ssrc: body.readUInt32(at: 0), ntpTimestamp: ntp, rtpTimestamp: body.readUInt32(at: 12),
                packetCount: body.readUInt32(at: 16), octetCount: body.readUInt32(at: 20),
                reports: (0..<count).map { parseBlock(body, at: 24 + 24 * $0) }))
        case receiverReportType:
            guard body.count >= 4 + 24 * count else { throw .truncated(needed: 8 + 24 * count, available: body.count + 4) }
            return .receiverReport(ReceiverReport(
                ssrc: body.readUInt32(at: 0), reports: (0..<count).map { parseBlock(body, at: 4 + 24 * $0) }))
        case sourceDescriptionType:
            var items: [SDESChunk] = []
            var offset = 0
            for _ in 0..<count {
                guard body.count >= offset + 4 else { throw .truncated(needed: offset + 8, available: body.count + 4) }
                let ssrc = body.readUInt32(at: offset)
                offset += 4
                var cname: String?
                while true {
                    guard offset < body.count else { throw .invalidField("SDES chunk without an END item") }
                    let itemType = body[offset]
                    if itemType == 0 {  // END, then pad to a word boundary
                        offset += 1
                        offset = (offset + 3) & ~3
                        break
                    }
                    guard offset + 2 <= body.count else { throw .truncated(needed: offset + 6, available: body.count + 4) }
                    let length = Int(body[offset + 1])
                    guard offset + 2 + length <= body.count else { throw .truncated(needed: offset + 6 + length, available: body.count + 4) }
                    if itemType == 1 {
                        cname = String(decoding: body[(offset + 2)..<(offset + 2 + length)], as: UTF8.self)
                    }
                    offset += 2 + length
                }
                items.append(SDESChunk(ssrc: ssrc, cname: cname ?? ""))
            }
            return .sourceDescription(items)
        case byeType:
            guard body.count >= 4 * count else { throw .truncated(needed: 4 + 4 * count, available: body.count + 4) }
            let ssrcs = (0..<count).map { body.readUInt32(at: 4 * $0) }
            var reason: String?
            if body.count > 4 * count {
                let length = Int(body[4 * count])
                guard body.count >= 4 * count + 1 + length else { throw .invalidLength("BYE reason overruns the packet") }
                reason = String(decoding: body[(4 * count + 1)..<(4 * count + 1 + length)], as: UTF8.self)
            }
            return .bye(ssrcs: ssrcs, reason: reason)
        default:
            return .other(packetType: type, bytes: whole)
        }
    }

    private static func parseBlock(_ body: [UInt8], at offset: Int) -> ReportBlock {
        let lostField = body.readUInt32(at: offset + 4) & 0x00FF_FFFF
        // 24-bit two's complement.
        let cumulative = lostField & 0x80_0000 != 0 ? Int32(bitPattern: lostField | 0xFF00_0000) : Int32(lostField)
        return ReportBlock(
            ssrc: body.readUInt32(at: offset), fractionLost: body[offset + 4], cumulativeLost: cumulative,
            extendedHighestSequence: body.readUInt32(at: offset + 8), jitter: body.readUInt32(at: offset + 12),
            lastSenderReport: body.readUInt32(at: offset + 16), delaySinceLastSenderReport: body.readUInt32(at: offset + 20))
    }

    /// Serializes packets back to back as one compound datagram.
    public static func serializeCompound(_ packets: [RTCPPacket]) -> [UInt8] {
        var out: [UInt8] = []
        for packet in packets { packet.serialize(into: &out) }
        return out
    }

    /// Appends this packet's wire form to `out`.
    public func serialize(into out: inout [UInt8]) {
        let start = out.count
        switch self {
        case let .senderReport(sr):
            precondition(sr.reports.count < 32, "at most 31 report blocks")
            out.append(0x80 | UInt8(sr.reports.count))
            out.append(Self.senderReportType)
            out.appendUInt16(0)
            out.appendUInt32(sr.ssrc)
            out.appendUInt32(UInt32(sr.ntpTimestamp >> 32))
            out.appendUInt32(UInt32(sr.ntpTimestamp & 0xFFFF_FFFF))
            out.appendUInt32(sr.rtpTimestamp)
            out.appendUInt32(sr.packetCount)
            out.appendUInt32(sr.octetCount)
            for block in sr.reports { Self.serialize(block, into: &out) }
        case let .receiverReport(rr):
            precondition(rr.reports.count < 32, "at most 31 report blocks")
            out.append(0x80 | UInt8(rr.reports.count))
            out.append(Self.receiverReportType)
            out.appendUInt16(0)
            out.appendUInt32(rr.ssrc)
            for block in rr.reports { Self.serialize(block, into: &out) }
        case let .sourceDescription(chunks):
            precondition(chunks.count < 32, "at most 31 SDES chunks")
            out.append(0x80 | UInt8(chunks.count))
            out.append(Self.sourceDescriptionType)
            out.appendUInt16(0)
            for chunk in chunks {
                out.appendUInt32(chunk.ssrc)
                let bytes = Array(chunk.cname.utf8.prefix(255))
                out.append(1)
                out.append(UInt8(bytes.count))
                out.append(contentsOf: bytes)
                out.append(0)  // END
                while (out.count - start) % 4 != 0 { out.append(0) }
            }
        case let .bye(ssrcs, reason):
            precondition(ssrcs.count < 32, "at most 31 sources")
            out.append(0x80 | UInt8(ssrcs.count))
            out.append(Self.byeType)
            out.appendUInt16(0)
            for ssrc in ssrcs { out.appendUInt32(ssrc) }
            if let reason {
                let bytes = Array(reason.utf8.prefix(255))
                out.append(UInt8(bytes.count))
                out.append(contentsOf: bytes)
                while (out.count - start) % 4 != 0 { out.append(0) }
            }
        case let .other(_, bytes):
            out.append(contentsOf: bytes)
            return
        }
        let words = (out.count - start) / 4 - 1
        out[start + 2] = UInt8(words >> 8)
        out[start + 3] = UInt8(words & 0xFF)
    }

    private static func serialize(_ block: ReportBlock, into out: inout [UInt8]) {
        out.appendUInt32(block.ssrc)
        let lost = UInt32(bitPattern: max(-0x80_0000, min(0x7F_FFFF, block.cumulativeLost))) & 0x00FF_FFFF
        out.appendUInt32(UInt32(block.fractionLost) << 24 | lost)
        out.appendUInt32(block.extendedHighestSequence)
        out.appendUInt32(block.jitter)
        out.appendUInt32(block.lastSenderReport)
        out.appendUInt32(block.delaySinceLastSenderReport)
    }
}

/// NTP timestamps (RFC 5905 64-bit format) as RTCP uses them.
public enum NTPTime {
    /// Seconds between 1900 (NTP epoch) and 1970 (Unix epoch).
    public static let unixOffset: UInt64 = 2_208_988_800

    /// A 64-bit NTP timestamp for a time given as a duration since the Unix epoch.
    public static func timestamp(sinceUnixEpoch d: Duration) -> UInt64 {
        let (seconds, attoseconds) = max(d, .zero).components
        let fraction = UInt64((Double(attoseconds) / 1e18) * 4_294_967_296.0)
        return (UInt64(seconds) + unixOffset) << 32 | min(fraction, 0xFFFF_FFFF)
    }

    /// The middle 32 bits (NTP short format) of a 64-bit timestamp, as LSR uses.
    public static func middle(_ ntp: UInt64) -> UInt32 { UInt32((ntp >> 16) & 0xFFFF_FFFF) }

    /// A duration in NTP short format (1/65536 s units). Negative durations (clocks read on
    /// different threads a moment apart) count as zero.
    public static func short(_ d: Duration) -> UInt32 {
        let (seconds, attoseconds) = max(d, .zero).components
        return UInt32(truncatingIfNeeded: seconds << 16) &+ UInt32((Double(attoseconds) / 1e18) * 65536.0)
    }

    /// An NTP short-format value as a duration.
    public static func duration(short value: UInt32) -> Duration {
        .microseconds(Int64(value) * 1_000_000 / 65536)
    }
}

/// How the packets of a stream were lost in the last report interval: how many, in how many
/// runs. CallNode nodes send it beside their receiver reports as an RTCP APP packet (RFC 3550
/// §6.7, name `CNLR`), so a sender can tell bursts from random loss — the receiver report's
/// fraction lost cannot — and spread its redundant copies when losses come in runs. Peers that
/// do not know it ignore it, as RFC 3550 asks of APP packets.
public struct LossRunReport: Sendable, Equatable {
    public static let packetType: UInt8 = 204
    public static let name: [UInt8] = Array("CNLR".utf8)
    /// The reporter.
    public var ssrc: UInt32
    /// The stream reported on.
    public var source: UInt32
    /// Packets lost in the interval, and the runs they came in.
    public var lost: UInt16
    public var runs: UInt16

    public init(ssrc: UInt32, source: UInt32, lost: UInt16, runs: UInt16) {
        self.ssrc = ssrc
        self.source = source
        self.lost = lost
        self.runs = runs
    }

    /// How many packets a run of losses took on average; `nil` when nothing was lost.
    public var meanRun: Double? { runs > 0 ? Double(lost) / Double(runs) : nil }

    /// As an RTCP packet to put in a compound datagram.
    public var packet: RTCPPacket {
        var out: [UInt8] = [0x80, Self.packetType]
        out.appendUInt16(4)  // 5 words
        out.appendUInt32(ssrc)
        out.append(contentsOf: Self.name)
        out.appendUInt32(source)
        out.appendUInt16(lost)
        out.appendUInt16(runs)
        return .other(packetType: Self.packetType, bytes: out)
    }

    /// Reads one from an APP packet (`nil` for any other APP packet, or one too short).
    public init?(_ packet: RTCPPacket) {
        guard case let .other(type, bytes) = packet, type == Self.packetType, bytes.count >= 20,
              Array(bytes[8..<12]) == Self.name else { return nil }
        self.init(ssrc: bytes.readUInt32(at: 4), source: bytes.readUInt32(at: 12),
                  lost: bytes.readUInt16(at: 16), runs: bytes.readUInt16(at: 18))
    }
}
