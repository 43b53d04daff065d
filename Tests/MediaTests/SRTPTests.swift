@_spi(Testing) import Media
import Testing

@Suite struct SRTPTests {
    static func hex(_ s: String) -> [UInt8] {
        var out: [UInt8] = []
        var chars = Array(s.filter { !$0.isWhitespace })
        while chars.count >= 2 {
            out.append(UInt8(String(chars[0..<2]), radix: 16)!)  // test literal, valid hex
            chars.removeFirst(2)
        }
        return out
    }

    @Test func aesCounterModeMatchesRFC3711AppendixB2() throws {
        let keystream = try aesCounterModeKeystream(
            key: Self.hex("2B7E151628AED2A6ABF7158809CF4F3C"), salt: Self.hex("F0F1F2F3F4F5F6F7F8F9FAFBFCFD"), length: 48)
        #expect(keystream == Self.hex("""
            E03EAD0935C95E80E166B16DD92B4EB4
            D23513162B02D0F72A43A2FE4A5F97AB
            41E95B3BB0A2E8DD477901E4FCA894C0
            """))
    }

    // libsrtp's own known-answer packet for AES_CM_128_HMAC_SHA1_80.
    static let key = hex("e1f97a0d3e018be0d64fa32c06de41390ec675ad498afeebb6960b3aabe6")
    static let plaintext = hex("800f1234decafbadcafebabe" + String(repeating: "ab", count: 16))
    static let ciphertext = hex("800f1234decafbadcafebabe4e55dc4ce79978d88ca4d215949d2402b78d6acc99ea179b8dbb")

    @Test func protectProducesTheKnownAnswer() throws {
        let sender = try SRTPSession(key: SRTPKey(suite: .aesCM128HmacSHA1_80, material: Self.key), direction: .outbound)
        #expect(try sender.protect(Self.plaintext) == Self.ciphertext)
        let receiver = try SRTPSession(key: SRTPKey(suite: .aesCM128HmacSHA1_80, material: Self.key), direction: .inbound)
        #expect(receiver.unprotect(Self.ciphertext) == .success(Self.plaintext))
    }

    @Test(arguments: SRTPSuite.allCases)
    func tamperedAndReplayedPacketsAreDropped(_ suite: SRTPSuite) throws {
        let key = SRTPKey.random(suite: suite)
        let sender = try SRTPSession(key: key, direction: .outbound)
        let receiver = try SRTPSession(key: key, direction: .inbound)
        let packets = try (0..<5).map { i in
            try sender.protect([0x80, 111, 0, UInt8(i), 0, 0, 0, UInt8(i), 1, 2, 3, 4] + [UInt8](repeating: UInt8(i), count: 40))
        }
        var tampered = packets[0]
        tampered[20] ^= 0x01
        #expect(receiver.unprotect(tampered) == .failure(.authenticationFailed))
        // A failed authentication does not burn the index: the genuine packet still passes.
        #expect(try receiver.unprotect(packets[0]).get().count == 52)
        #expect(receiver.unprotect(packets[0]) == .failure(.replayed))
        #expect(try receiver.unprotect(packets[2]).get()[3] == 2)
        #expect(try receiver.unprotect(packets[1]).get()[3] == 1)  // reordered within the window
        #expect(receiver.unprotect(packets[1]) == .failure(.replayed))
        #expect(receiver.unprotect([1, 2, 3]) == .failure(.malformed))

        let rtcp = try sender.protectRTCP([0x80, 201, 0, 1, 0, 0, 0, 9])
        #expect(try receiver.unprotectRTCP(rtcp).get() == [0x80, 201, 0, 1, 0, 0, 0, 9])
        #expect(receiver.unprotectRTCP(rtcp) == .failure(.replayed))
    }

    @Test func aWrongKeyFailsAuthentication() throws {
        let sender = try SRTPSession(key: .random(), direction: .outbound)
        let receiver = try SRTPSession(key: .random(), direction: .inbound)
        let packet = try sender.protect(Self.plaintext)
        #expect(receiver.unprotect(packet) == .failure(.authenticationFailed))
    }

    @Test func keysTravelAsRFC4568InlineParameters() throws {
        let key = try SRTPKey(suite: .aesCM128HmacSHA1_80, material: Self.key)
        #expect(key.inlineKeyParameter == "inline:4fl6DT4Bi+DWT6MsBt5BOQ7Gda1Jiv7rtpYLOqvm")
        #expect(try SRTPKey(suite: .aesCM128HmacSHA1_80, inlineKeyParameter: key.inlineKeyParameter) == key)
        #expect(try SRTPKey(cryptoAttribute: "1 AES_CM_128_HMAC_SHA1_80 inline:4fl6DT4Bi+DWT6MsBt5BOQ7Gda1Jiv7rtpYLOqvm|2^20|1:4") == key)
        let gcm = SRTPKey.random(suite: .aeadAES128GCM)
        #expect(try SRTPKey(cryptoAttribute: "2 AEAD_AES_128_GCM \(gcm.inlineKeyParameter)") == gcm)
        #expect(!key.description.contains("4fl6"), "keys never print")
    }

    @Test func badKeysAreTypedErrors() {
        #expect(throws: SRTPKeyError.unknownSuite("F8_128_HMAC_SHA1_80")) {
            try SRTPKey(cryptoAttribute: "1 F8_128_HMAC_SHA1_80 inline:AAAA")
        }
        #expect(throws: SRTPKeyError.malformed("expected 'inline:' followed by base64")) {
            try SRTPKey(suite: .aesCM128HmacSHA1_80, inlineKeyParameter: "key:abcd")
        }
        #expect(throws: SRTPKeyError.malformed("not valid base64")) {
            try SRTPKey(suite: .aesCM128HmacSHA1_80, inlineKeyParameter: "inline:@@@@")
        }
        #expect(throws: SRTPKeyError.wrongLength(expected: 30, got: 3)) {
            try SRTPKey(suite: .aesCM128HmacSHA1_80, inlineKeyParameter: "inline:AAAA")
        }
        #expect(throws: SRTPKeyError.malformed("expected '<tag> <suite> inline:<key>'")) { try SRTPKey(cryptoAttribute: "1") }
    }
}
