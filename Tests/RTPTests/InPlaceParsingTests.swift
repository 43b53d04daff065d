import CallNodeTestSupport
import RTP
import Testing

/// The media path's per-packet parsing reads headers where they lie (``RTPHeader``,
/// ``RedundantAudio/parse(_:in:block:)``) and builds packets in one buffer: the same answers as
/// the copying parsers, bytes for bytes.
@Suite struct InPlaceParsingTests {
    /// A random packet as `RTPPacket` writes it, with every optional part now and then.
    static func randomPacket(_ rng: inout SplitMix64) -> RTPPacket {
        RTPPacket(payloadType: UInt8(rng.next() % 128), sequenceNumber: UInt16(truncatingIfNeeded: rng.next()),
                  timestamp: UInt32(truncatingIfNeeded: rng.next()), ssrc: UInt32(truncatingIfNeeded: rng.next()),
                  marker: rng.next() % 2 == 0,
                  csrcs: (0..<Int(rng.next() % 3)).map { _ in UInt32(truncatingIfNeeded: rng.next()) },
                  headerExtension: rng.next() % 4 == 0 ? RTPHeaderExtension(profile: 0xBEDE, data: [UInt8](repeating: 9, count: 4 * Int(rng.next() % 3))) : nil,
                  payload: (0..<Int(rng.next() % 40)).map { _ in UInt8(truncatingIfNeeded: rng.next()) },
                  paddingLength: rng.next() % 5 == 0 ? Int(rng.next() % 8) + 1 : 0)
    }

    @Test func theHeaderReadInPlaceAgreesWithTheCopyingParser() throws {
        var rng = SplitMix64(seed: 21)
        for _ in 0..<2_000 {
            let packet = Self.randomPacket(&rng)
            let bytes = packet.serialized()
            let header = try RTPHeader(parsing: bytes)
            #expect(header.marker == packet.marker && header.payloadType == packet.payloadType)
            #expect(header.sequenceNumber == packet.sequenceNumber && header.timestamp == packet.timestamp && header.ssrc == packet.ssrc)
            #expect(header.csrcCount == packet.csrcs.count && header.paddingLength == packet.paddingLength)
            #expect(Array(bytes[header.payload]) == packet.payload)
            #expect(header.headerExtension.map { Array(bytes[$0.data]) } == packet.headerExtension?.data)
        }
        // Arbitrary bytes: both parsers accept the same ones, or fail with the same error.
        for _ in 0..<20_000 {
            var bytes = (0..<Int(rng.next() % 30)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            if !bytes.isEmpty && rng.next() % 2 == 0 { bytes[0] = 0x80 | (bytes[0] & 0x3F) }  // version 2 half the time
            var headerError: RTPParseError?, packetError: RTPParseError?
            do { _ = try RTPHeader(parsing: bytes) } catch { headerError = error }
            do { _ = try RTPPacket(parsing: bytes) } catch { packetError = error }
            #expect(headerError == packetError, "\(bytes)")
        }
    }

    @Test func aHeaderAppendedBeforeAPayloadIsThePacketsWireForm() throws {
        let packet = RTPPacket(payloadType: 63, sequenceNumber: 65_535, timestamp: 0xFFFF_FF00, ssrc: 0xCAFE_F00D, marker: true, payload: [1, 2, 3])
        var out: [UInt8] = []
        RTPHeader.append(payloadType: 63, sequenceNumber: 65_535, timestamp: 0xFFFF_FF00, ssrc: 0xCAFE_F00D, marker: true, to: &out)
        out += [1, 2, 3]
        #expect(out == packet.serialized())
    }

    @Test func redBlocksReadInPlaceAgreeWithTheCopyingParser() throws {
        var rng = SplitMix64(seed: 22)
        var parsed = 0
        for _ in 0..<5_000 {
            // A red payload somewhere inside a larger buffer (as in a packet after its header).
            let blocks = (0..<Int(rng.next() % 4)).map { _ in
                RedundantAudio.Block(payloadType: UInt8(rng.next() % 128), timestampOffset: UInt16(rng.next() % 0x4000),
                                     payload: (0..<Int(rng.next() % 20)).map { _ in UInt8(truncatingIfNeeded: rng.next()) })
            }
            var payload = RedundantAudio(primaryPayloadType: UInt8(rng.next() % 128), primary: [7, 8, 9], redundant: blocks).serialized()
            if rng.next() % 3 == 0 { payload.removeLast(Int(rng.next() % UInt64(payload.count + 1))) }  // truncated now and then
            let prefix = [UInt8](repeating: 0xEE, count: Int(rng.next() % 13)), suffix: [UInt8] = rng.next() % 2 == 0 ? [0xDD] : []
            let buffer = prefix + payload + suffix
            var seen: [RedundantAudio.Block] = []
            let range = prefix.count..<(prefix.count + payload.count)
            let inPlace = Result { () throws(RTPParseError) in
                try RedundantAudio.parse(buffer, in: range) { type, offset, data in
                    seen.append(RedundantAudio.Block(payloadType: type, timestampOffset: offset, payload: Array(buffer[data])))
                }
            }
            switch (inPlace, Result { () throws(RTPParseError) in try RedundantAudio(parsing: payload) }) {
            case let (.success(primary), .success(copied)):
                parsed += 1
                #expect(primary.payloadType == copied.primaryPayloadType && Array(buffer[primary.range]) == copied.primary)
                #expect(seen == copied.redundant)
            case let (.failure(a), .failure(b)):
                #expect(a == b)
                #expect(seen.isEmpty, "nothing is reported for a payload that does not parse")
            default:
                Issue.record("the parsers disagree on \(payload)")
            }
        }
        #expect(parsed > 1_000)
    }
}
