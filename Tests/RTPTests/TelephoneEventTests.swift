import RTP
import Testing

@Suite struct TelephoneEventTests {
    @Test func parsesAndSerializesTheRFC4733Layout() throws {
        // Digit 5, end bit, volume 10, duration 800 (100 ms at 8 kHz).
        let bytes: [UInt8] = [0x05, 0x8A, 0x03, 0x20]
        let event = try TelephoneEvent(parsing: bytes)
        #expect(event == TelephoneEvent(event: 5, isEnd: true, volume: 10, duration: 800))
        #expect(event.serialized() == bytes)
        #expect(throws: RTPParseError.truncated(needed: 4, available: 3)) { try TelephoneEvent(parsing: [1, 2, 3]) }
    }

    @Test func digitsMapToEventCodesBothWays() {
        let digits = Array("0123456789*#ABCD")
        for (code, digit) in digits.enumerated() {
            #expect(TelephoneEvent.code(for: digit) == UInt8(code))
            #expect(TelephoneEvent.digit(for: UInt8(code)) == digit)
        }
        #expect(TelephoneEvent.code(for: "b") == 13)
        #expect(TelephoneEvent.code(for: "x") == nil)
        #expect(TelephoneEvent.digit(for: 16) == nil)
    }
}
