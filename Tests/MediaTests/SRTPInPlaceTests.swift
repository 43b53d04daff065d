@testable import Media
import Testing

/// SRTP protecting and opening packets where they lie (the media path's per-packet calls): the
/// same bytes and the same drops as the copying calls.
@Suite struct SRTPInPlaceTests {
    @Test(arguments: SRTPSuite.allCases)
    func inPlaceProtectionMatchesTheCopyingCalls(_ suite: SRTPSuite) throws {
        let key = SRTPKey.random(suite: suite)
        let copying = try SRTPSession(key: key, direction: .outbound), inPlace = try SRTPSession(key: key, direction: .outbound)
        let receiver = try SRTPSession(key: key, direction: .inbound)
        for sequence in 0..<50 {
            let plain: [UInt8] = [0x80, 111, 0, UInt8(sequence), 0, 0, 3, 0xC0, 0xCA, 0xFE, 0xBA, 0xBE] + (0..<(sequence * 7 % 200)).map { UInt8($0 & 0xFF) }
            var packet = plain
            packet.reserveCapacity(plain.count + 64)
            try inPlace.protect(inPlace: &packet)
            #expect(packet == (try copying.protect(plain)))
            #expect(receiver.unprotect(inPlace: &packet) == nil)
            #expect(packet == plain)
        }
    }

    @Test(arguments: SRTPSuite.allCases)
    func inPlaceOpeningDropsWhatTheCopyingCallDrops(_ suite: SRTPSuite) throws {
        let key = SRTPKey.random(suite: suite)
        let sender = try SRTPSession(key: key, direction: .outbound), receiver = try SRTPSession(key: key, direction: .inbound)
        let plain: [UInt8] = [0x80, 111, 0, 1, 0, 0, 3, 0xC0, 0xCA, 0xFE, 0xBA, 0xBE, 1, 2, 3, 4]
        let protected = try sender.protect(plain)
        var tampered = protected
        tampered[13] ^= 1
        #expect(receiver.unprotect(inPlace: &tampered) == .authenticationFailed)
        var short: [UInt8] = Array(protected[0..<8])
        #expect(receiver.unprotect(inPlace: &short) == .malformed)
        var first = protected, again = protected
        #expect(receiver.unprotect(inPlace: &first) == nil && first == plain)
        #expect(receiver.unprotect(inPlace: &again) == .replayed)
    }
}
