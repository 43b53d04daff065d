#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Why a datagram is not a valid RTP or RTCP packet.
public enum RTPParseError: Error, Sendable, Equatable, CustomStringConvertible {
    /// Fewer bytes than the fixed header (or a declared part) needs.
    case truncated(needed: Int, available: Int)
    /// The version field is not 2.
    case unsupportedVersion(Int)
    /// The padding count is zero or larger than the payload.
    case invalidPadding(Int)
    /// An RTCP length field disagrees with the datagram.
    case invalidLength(String)
    /// A field holds a value the format does not allow.
    case invalidField(String)

    public var description: String {
        switch self {
        case let .truncated(needed, available): "truncated packet: needs \(needed) bytes, has \(available)"
        case let .unsupportedVersion(version): "unsupported RTP version \(version) (expected 2)"
        case let .invalidPadding(count): "invalid padding count \(count)"
        case let .invalidLength(detail): "invalid length: \(detail)"
        case let .invalidField(detail): "invalid field: \(detail)"
        }
    }
}

/// An RTP header extension (RFC 3550 §5.3.1): a profile-defined 16-bit value and whole 32-bit words.
public struct RTPHeaderExtension: Sendable, Equatable {
    public var profile: UInt16
    /// The extension body; its length must be a multiple of 4.
    public var data: [UInt8]

    public init(profile: UInt16, data: [UInt8]) {
        self.profile = profile
        self.data = data
    }
}

/// One RTP packet (RFC 3550 §5.1).
///
/// Parsing validates every length; serializing writes exactly what parsing reads, so
/// `RTPPacket(parsing: p.serialized()) == p` for every packet built through the initializer
/// (padding is reproduced from ``paddingLength``).
public struct RTPPacket: Sendable, Equatable {
    public var marker: Bool
    /// 0–127. Opus uses a dynamic type, 111 by default (RFC 7587).
    public var payloadType: UInt8
    public var sequenceNumber: UInt16
    public var timestamp: UInt32
    public var ssrc: UInt32
    public var csrcs: [UInt32]
    public var headerExtension: RTPHeaderExtension?
    public var payload: [UInt8]
    /// Padding bytes after the payload (0 for none); the last one holds the count.
    public var paddingLength: Int

    public init(
        payloadType: UInt8, sequenceNumber: UInt16, timestamp: UInt32, ssrc: UInt32,
        marker: Bool = false, csrcs: [UInt32] = [], headerExtension: RTPHeaderExtension? = nil,
        payload: [UInt8], paddingLength: Int = 0
    ) {
        self.marker = marker
        self.payloadType = payloadType
        self.sequenceNumber = sequenceNumber
        self.timestamp = timestamp
        self.ssrc = ssrc
        self.csrcs = csrcs
        self.headerExtension = headerExtension
        self.payload = payload
        self.paddingLength = paddingLength
    }

    /// The fixed header size.
    public static let headerSize = 12

    /// Parses a packet.
    ///
    /// - Throws: ``RTPParseError`` for a wrong version, a truncated header, CSRC list or
    ///   extension, or a padding count that does not fit.
    public init(parsing bytes: [UInt8]) throws(RTPParseError) {
        let header = try RTPHeader(parsing: bytes)
        marker = header.marker
        payloadType = header.payloadType
        sequenceNumber = header.sequenceNumber
        timestamp = header.timestamp
        ssrc = header.ssrc
        csrcs = header.csrcCount == 0 ? [] : (0..<header.csrcCount).map { bytes.readUInt32(at: Self.headerSize + 4 * $0) }
        headerExtension = header.headerExtension.map { ext in
            RTPHeaderExtension(profile: ext.profile, data: Array(bytes[ext.data]))
        }
        paddingLength = header.paddingLength
        payload = Array(bytes[header.payload])
    }

    /// The packet's wire form.
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(Self.headerSize + 4 * csrcs.count + (headerExtension.map { 4 + $0.data.count } ?? 0)
                            + payload.count + paddingLength)
        serialize(into: &out)
        return out
    }

    /// Appends the wire form to `out` (lets a caller reuse one buffer per packet).
    public func serialize(into out: inout [UInt8]) {
        precondition(payloadType < 128, "RTP payload type must be 0–127")
        precondition(csrcs.count < 16, "at most 15 CSRCs")
        precondition(paddingLength >= 0 && paddingLength < 256, "padding must be 0–255 bytes")
        var first: UInt8 = 0x80 | UInt8(csrcs.count)
        if paddingLength > 0 { first |= 0x20 }
        if headerExtension != nil { first |= 0x10 }
        out.append(first)
        out.append((marker ? 0x80 : 0) | payloadType)
        out.appendUInt16(sequenceNumber)
        out.appendUInt32(timestamp)
        out.appendUInt32(ssrc)
        for csrc in csrcs { out.appendUInt32(csrc) }
        if let ext = headerExtension {
            precondition(ext.data.count % 4 == 0, "extension data must be whole 32-bit words")
            out.appendUInt16(ext.profile)
            out.appendUInt16(UInt16(ext.data.count / 4))
            out.append(contentsOf: ext.data)
        }
        out.append(contentsOf: payload)
        if paddingLength > 0 {
            out.append(contentsOf: repeatElement(0, count: paddingLength - 1))
            out.append(UInt8(paddingLength))
        }
    }
}

/// An RTP packet's header read in place: its fields and where in the bytes the payload lies,
/// nothing copied (the media path's per-packet parse; ``RTPPacket`` copies the parts out).
public struct RTPHeader: Sendable, Equatable {
    public var marker: Bool
    public var payloadType: UInt8
    public var sequenceNumber: UInt16
    public var timestamp: UInt32
    public var ssrc: UInt32
    public var csrcCount: Int
    /// The extension's profile and where its data lies.
    public var headerExtension: (profile: UInt16, data: Range<Int>)?
    public var paddingLength: Int
    /// Where the payload lies in the parsed bytes.
    public var payload: Range<Int>

    /// Reads the header of `bytes`, checking it as ``RTPPacket/init(parsing:)`` does.
    public init(parsing bytes: [UInt8]) throws(RTPParseError) {
        guard bytes.count >= RTPPacket.headerSize else { throw .truncated(needed: RTPPacket.headerSize, available: bytes.count) }
        let version = Int(bytes[0] >> 6)
        guard version == 2 else { throw .unsupportedVersion(version) }
        let hasPadding = bytes[0] & 0x20 != 0
        let hasExtension = bytes[0] & 0x10 != 0
        csrcCount = Int(bytes[0] & 0x0F)
        marker = bytes[1] & 0x80 != 0
        payloadType = bytes[1] & 0x7F
        sequenceNumber = bytes.readUInt16(at: 2)
        timestamp = bytes.readUInt32(at: 4)
        ssrc = bytes.readUInt32(at: 8)

        var offset = RTPPacket.headerSize + 4 * csrcCount
        guard bytes.count >= offset else { throw .truncated(needed: offset, available: bytes.count) }
        if hasExtension {
            guard bytes.count >= offset + 4 else { throw .truncated(needed: offset + 4, available: bytes.count) }
            let profile = bytes.readUInt16(at: offset)
            let end = offset + 4 + 4 * Int(bytes.readUInt16(at: offset + 2))
            guard bytes.count >= end else { throw .truncated(needed: end, available: bytes.count) }
            headerExtension = (profile, (offset + 4)..<end)
            offset = end
        } else {
            headerExtension = nil
        }
        var end = bytes.count
        if hasPadding {
            let count = Int(bytes[bytes.count - 1])
            guard count > 0, count <= end - offset else { throw .invalidPadding(count) }
            end -= count
            paddingLength = count
        } else {
            paddingLength = 0
        }
        payload = offset..<end
    }

    public static func == (a: RTPHeader, b: RTPHeader) -> Bool {
        a.marker == b.marker && a.payloadType == b.payloadType && a.sequenceNumber == b.sequenceNumber
            && a.timestamp == b.timestamp && a.ssrc == b.ssrc && a.csrcCount == b.csrcCount
            && a.headerExtension?.profile == b.headerExtension?.profile && a.headerExtension?.data == b.headerExtension?.data
            && a.paddingLength == b.paddingLength && a.payload == b.payload
    }

    /// Appends a 12-byte header without CSRCs, extension or padding (the media path's packets)
    /// to `out`, which then takes the payload.
    public static func append(payloadType: UInt8, sequenceNumber: UInt16, timestamp: UInt32, ssrc: UInt32,
                              marker: Bool = false, to out: inout [UInt8]) {
        precondition(payloadType < 128, "RTP payload type must be 0–127")
        out.append(0x80)
        out.append((marker ? 0x80 : 0) | payloadType)
        out.appendUInt16(sequenceNumber)
        out.appendUInt32(timestamp)
        out.appendUInt32(ssrc)
    }
}

extension RTPHeader {
    /// RFC 6464's audio level, as a one-byte header extension (RFC 8285): appended right after a
    /// 12-byte header ``append(payloadType:sequenceNumber:timestamp:ssrc:marker:to:)`` wrote at
    /// the start of `out`, whose X bit it sets. `level` is the frame's level in -dBov (0 the
    /// loudest, 127 silence); `voice` the sender's voice-activity flag.
    public static func appendAudioLevel(id: UInt8, level: UInt8, voice: Bool, to out: inout [UInt8]) {
        precondition((1...14).contains(id), "a one-byte extension id is 1–14")
        precondition(out.count == RTPPacket.headerSize, "the extension follows a bare 12-byte header")
        out[0] |= 0x10
        out.append(contentsOf: [0xBE, 0xDE, 0x00, 0x01, id << 4, (voice ? 0x80 : 0) | min(level, 127), 0, 0])
    }

    /// A frame's level for ``appendAudioLevel(id:level:voice:to:)``: -dBov of its RMS, 0–127.
    public static func audioLevel(of samples: [Int16]) -> UInt8 {
        guard !samples.isEmpty else { return 127 }
        var sum = 0.0
        for sample in samples { sum += Double(sample) * Double(sample) }
        let rms = (sum / Double(samples.count)).squareRoot() / 32_768
        guard rms > 0 else { return 127 }
        return UInt8(max(0, min(127, (-20 * log10(rms)).rounded())))
    }
}

/// RTP sequence-number arithmetic modulo 2^16 (RFC 3550 appendix A.1).
public enum SequenceNumber {
    /// Whether `a` comes after `b`, allowing for wrap-around.
    @inlinable public static func isNewer(_ a: UInt16, than b: UInt16) -> Bool {
        a != b && a &- b < 0x8000
    }

    /// Extends `sequence` to 64 bits, choosing the value closest to `reference`.
    @inlinable public static func extend(_ sequence: UInt16, near reference: Int64) -> Int64 {
        let base = reference & ~0xFFFF
        var candidate = base | Int64(sequence)
        if candidate - reference > 0x8000 { candidate -= 0x10000 }
        else if reference - candidate > 0x8000 { candidate += 0x10000 }
        return candidate
    }
}

/// How a datagram arriving on the shared ICE transport is classified (RFC 7983 by first byte,
/// RFC 5761 §4 by payload type to tell RTCP from RTP under rtcp-mux).
public enum DatagramKind: Sendable, Equatable {
    case stun, dtls, rtp, rtcp, unknown

    public init(classifying bytes: [UInt8]) {
        guard let first = bytes.first else { self = .unknown; return }
        switch first {
        case 0...3: self = .stun
        case 20...63: self = .dtls
        case 128...191:
            guard bytes.count >= 2 else { self = .unknown; return }
            // RTCP packet types 192–223 occupy the RTP marker+PT byte's 64–95 range (RFC 5761).
            self = (192...223).contains(bytes[1]) ? .rtcp : .rtp
        default: self = .unknown
        }
    }
}

extension [UInt8] {
    @inlinable func readUInt16(at offset: Int) -> UInt16 {
        UInt16(self[offset]) << 8 | UInt16(self[offset + 1])
    }
    @inlinable func readUInt32(at offset: Int) -> UInt32 {
        UInt32(self[offset]) << 24 | UInt32(self[offset + 1]) << 16 | UInt32(self[offset + 2]) << 8 | UInt32(self[offset + 3])
    }
    @inlinable mutating func appendUInt16(_ value: UInt16) {
        append(UInt8(value >> 8))
        append(UInt8(value & 0xFF))
    }
    @inlinable mutating func appendUInt32(_ value: UInt32) {
        append(UInt8(value >> 24))
        append(UInt8((value >> 16) & 0xFF))
        append(UInt8((value >> 8) & 0xFF))
        append(UInt8(value & 0xFF))
    }
}
