/// An RFC 2198 redundant audio payload ("red"): earlier frames sent again beside the current one,
/// so a lost packet's audio is rebuilt at full quality from the packet after it.
///
/// ```
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// |1|   block PT  |  timestamp offset         |   block length    |   one per redundant block
/// |0|   block PT  |                                                   the primary's, last
/// | redundant block data … | primary data …
/// ```
///
/// The redundant blocks come oldest first; each one's timestamp is the packet's minus its offset.
public struct RedundantAudio: Sendable, Equatable {
    /// One earlier frame carried again.
    public struct Block: Sendable, Equatable {
        public var payloadType: UInt8
        /// How far before the packet's timestamp this frame's timestamp lies (14 bits).
        public var timestampOffset: UInt16
        /// At most 1 023 bytes (10 bits of length).
        public var payload: [UInt8]

        public init(payloadType: UInt8, timestampOffset: UInt16, payload: [UInt8]) {
            self.payloadType = payloadType
            self.timestampOffset = timestampOffset
            self.payload = payload
        }

        /// Whether the block header can say this block: a 7-bit payload type, a 14-bit
        /// timestamp offset and a 10-bit length.
        public var fitsHeader: Bool {
            payloadType <= 127 && timestampOffset <= RedundantAudio.maximumTimestampOffset && payload.count <= RedundantAudio.maximumBlockLength
        }
    }

    /// Redundant blocks, oldest first.
    public var redundant: [Block]
    public var primaryPayloadType: UInt8
    public var primary: [UInt8]

    /// The largest timestamp offset and block length the header can carry.
    public static let maximumTimestampOffset: UInt16 = 0x3FFF
    public static let maximumBlockLength = 0x3FF

    public init(primaryPayloadType: UInt8, primary: [UInt8], redundant: [Block] = []) {
        self.primaryPayloadType = primaryPayloadType
        self.primary = primary
        self.redundant = redundant
    }

    /// Parses a red payload.
    ///
    /// - Throws: ``RTPParseError/truncated(needed:available:)`` when the headers or the blocks
    ///   they announce run past the payload (an empty payload included).
    public init(parsing payload: [UInt8]) throws(RTPParseError) {
        var blocks: [Block] = []
        let primary = try Self.parse(payload, in: payload.indices) { payloadType, offset, range in
            blocks.append(Block(payloadType: payloadType, timestampOffset: offset, payload: Array(payload[range])))
        }
        primaryPayloadType = primary.payloadType
        self.primary = Array(payload[primary.range])
        redundant = blocks
    }

    /// Reads the red payload in `bytes[range]` in place: `block` sees each redundant block
    /// (payload type, timestamp offset, where its data lies), oldest first, and the primary's
    /// type and place are returned. Nothing is copied; nothing is reported for a payload that
    /// does not parse.
    ///
    /// - Throws: as ``init(parsing:)``.
    public static func parse(_ bytes: [UInt8], in range: Range<Int>,
                             block: (UInt8, UInt16, Range<Int>) -> Void) throws(RTPParseError) -> (payloadType: UInt8, range: Range<Int>) {
        // First the headers, to find where the data starts and that it is all there.
        var index = range.lowerBound, total = 0, count = 0
        let primaryType: UInt8
        while true {
            guard index < range.upperBound else { throw .truncated(needed: index - range.lowerBound + 1, available: range.count) }
            let first = bytes[index]
            if first & 0x80 == 0 {
                primaryType = first & 0x7F
                index += 1
                break
            }
            guard index + 4 <= range.upperBound else { throw .truncated(needed: index - range.lowerBound + 4, available: range.count) }
            total += Int(bytes[index + 2] & 0x03) << 8 | Int(bytes[index + 3])
            count += 1
            index += 4
        }
        guard index + total <= range.upperBound else { throw .truncated(needed: index + total - range.lowerBound, available: range.count) }
        var data = index
        for k in 0..<count {
            let header = range.lowerBound + 4 * k
            let offset = UInt16(bytes[header + 1]) << 6 | UInt16(bytes[header + 2] >> 2)
            let length = Int(bytes[header + 2] & 0x03) << 8 | Int(bytes[header + 3])
            block(bytes[header] & 0x7F, offset, data..<(data + length))
            data += length
        }
        return (primaryType, data..<range.upperBound)
    }

    /// Appends one redundant block's header (RFC 2198) to `out`; the data follows all headers.
    public static func appendBlockHeader(payloadType: UInt8, timestampOffset: UInt16, length: Int, to out: inout [UInt8]) {
        precondition(payloadType <= 127 && timestampOffset <= maximumTimestampOffset && length <= maximumBlockLength,
                     "the block does not fit its header")
        out.append(0x80 | payloadType)
        out.append(UInt8(timestampOffset >> 6))
        out.append(UInt8((timestampOffset & 0x3F) << 2) | UInt8(length >> 8))
        out.append(UInt8(length & 0xFF))
    }

    /// Whether every block fits the header's fields (offset ≤ 16 383, length ≤ 1 023, type ≤ 127).
    public var isRepresentable: Bool {
        primaryPayloadType <= 127 && redundant.allSatisfy(\.fitsHeader)
    }

    /// The payload bytes. Blocks that do not fit the header (see ``isRepresentable``) are left out.
    public func serialized() -> [UInt8] {
        let blocks = redundant.filter(\.fitsHeader)
        var out: [UInt8] = []
        out.reserveCapacity(1 + primary.count + blocks.reduce(0) { $0 + 4 + $1.payload.count })
        for block in blocks {
            Self.appendBlockHeader(payloadType: block.payloadType, timestampOffset: block.timestampOffset,
                                   length: block.payload.count, to: &out)
        }
        out.append(primaryPayloadType & 0x7F)
        for block in blocks { out += block.payload }
        out += primary
        return out
    }
}
