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
        var headers: [(payloadType: UInt8, offset: UInt16, length: Int)] = []
        var index = 0
        while true {
            guard index < payload.count else { throw .truncated(needed: index + 1, available: payload.count) }
            let first = payload[index]
            if first & 0x80 == 0 {
                primaryPayloadType = first & 0x7F
                index += 1
                break
            }
            guard index + 4 <= payload.count else { throw .truncated(needed: index + 4, available: payload.count) }
            let offset = UInt16(payload[index + 1]) << 6 | UInt16(payload[index + 2] >> 2)
            let length = Int(payload[index + 2] & 0x03) << 8 | Int(payload[index + 3])
            headers.append((first & 0x7F, offset, length))
            index += 4
        }
        let needed = index + headers.reduce(0) { $0 + $1.length }
        guard needed <= payload.count else { throw .truncated(needed: needed, available: payload.count) }
        redundant = []
        redundant.reserveCapacity(headers.count)
        for header in headers {
            redundant.append(Block(payloadType: header.payloadType, timestampOffset: header.offset,
                                   payload: Array(payload[index..<(index + header.length)])))
            index += header.length
        }
        primary = Array(payload[index...])
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
            let length = UInt16(block.payload.count)
            out.append(0x80 | block.payloadType)
            out.append(UInt8(block.timestampOffset >> 6))
            out.append(UInt8((block.timestampOffset & 0x3F) << 2) | UInt8(length >> 8))
            out.append(UInt8(length & 0xFF))
        }
        out.append(primaryPayloadType & 0x7F)
        for block in blocks { out += block.payload }
        out += primary
        return out
    }
}
