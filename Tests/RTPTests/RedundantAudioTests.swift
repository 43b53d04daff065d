import CallNodeTestSupport
import RTP
import Testing

@Suite struct RedundantAudioTests {
    @Test func theHeaderLayoutIsRFC2198s() throws {
        // One redundant block (type 111, offset 960, 3 bytes), then the primary (type 111, 2 bytes).
        let red = RedundantAudio(primaryPayloadType: 111, primary: [0xAA, 0xBB], redundant: [
            RedundantAudio.Block(payloadType: 111, timestampOffset: 960, payload: [1, 2, 3]),
        ])
        let bytes = red.serialized()
        // F=1|PT=111, offset 960 = 0b00_0011_1100_0000 in 14 bits, then 10 bits of length 3.
        #expect(bytes == [0x80 | 111, 0x0F, 0x00, 0x03, 111, 1, 2, 3, 0xAA, 0xBB])
        #expect(try RedundantAudio(parsing: bytes) == red)
    }

    @Test func blocksRoundTripAtTheFieldLimits() throws {
        let red = RedundantAudio(primaryPayloadType: 96, primary: [UInt8](repeating: 7, count: 1500), redundant: [
            RedundantAudio.Block(payloadType: 127, timestampOffset: 0x3FFF, payload: [UInt8](repeating: 1, count: 1023)),
            RedundantAudio.Block(payloadType: 0, timestampOffset: 0, payload: []),
        ])
        #expect(red.isRepresentable)
        #expect(try RedundantAudio(parsing: red.serialized()) == red)
        // A primary alone is one header byte and the data.
        let bare = RedundantAudio(primaryPayloadType: 111, primary: [9])
        #expect(bare.serialized() == [111, 9])
        #expect(try RedundantAudio(parsing: [111, 9]) == bare)
    }

    @Test func aBlockTooLongForItsHeaderIsLeftOutRatherThanCorrupted() throws {
        let red = RedundantAudio(primaryPayloadType: 111, primary: [5], redundant: [
            RedundantAudio.Block(payloadType: 111, timestampOffset: 960, payload: [UInt8](repeating: 1, count: 1024)),
        ])
        #expect(!red.isRepresentable)
        #expect(try RedundantAudio(parsing: red.serialized()) == RedundantAudio(primaryPayloadType: 111, primary: [5]))
    }

    @Test func truncatedPayloadsAreTypedErrors() {
        #expect(throws: RTPParseError.truncated(needed: 1, available: 0)) { try RedundantAudio(parsing: []) }
        // A redundant header needs four bytes.
        #expect(throws: RTPParseError.truncated(needed: 4, available: 3)) { try RedundantAudio(parsing: [0x80 | 111, 0x0F, 0x00]) }
        // Headers only, with no primary header after them.
        #expect(throws: RTPParseError.truncated(needed: 5, available: 4)) { try RedundantAudio(parsing: [0x80 | 111, 0x0F, 0x00, 0x00]) }
        // A block longer than what follows.
        #expect(throws: RTPParseError.truncated(needed: 15, available: 8)) {
            try RedundantAudio(parsing: [0x80 | 111, 0x0F, 0x00, 0x0A, 111, 1, 2, 3])
        }
    }

    @Test func arbitraryBytesNeverTrap() {
        var rng = SplitMix64(seed: 11)
        var parsed = 0
        for _ in 0..<20_000 {
            let count = Int(rng.next() % 24)
            let bytes = (0..<count).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            if let red = try? RedundantAudio(parsing: bytes) {
                parsed += 1
                // What parses serializes back to the same bytes.
                #expect(red.serialized() == bytes)
            }
        }
        #expect(parsed > 1000)
    }
}
