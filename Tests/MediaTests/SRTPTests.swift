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

    /// libsrtp here runs on OpenSSL's ciphers (one context per key), not the NSS ones Debian
    /// builds it with; libsrtp itself accepted them against its test vectors.
    @Test func libsrtpRunsOnOpenSSLsCiphers() throws {
        try SRTPLibrary.initialize()
        #expect(SRTPLibrary.openSSLCiphers == true)
    }

    /// Packets protected by libsrtp on its own (NSS) ciphers, recorded once: the OpenSSL ones
    /// must give the same bytes, RTP and RTCP, for both suites, two packets each (the second
    /// uses the kept context again with a new IV).
    static let sharedKey = hex("01080f161d242b323940474e555c636a71787f868d949ba2a9b0b7bec5cc")
    static let recorded: [(SRTPSuite, rtcp: Bool, [String])] = [
        (.aesCM128HmacSHA1_80, false, [
            "806f1234000003c0deadbeef307ca8731b9418b638af2103ae8dc939685530e98be323a723b34ee9cb32820bf759c294c07d537bfd149300d7f8b942598f",
            "806f1235000003c0deadbeefac0a445d0e34f749115e19e1063916e919bc8c347eabf0db1de4a8a4e52b920fffea0237a7e0fbd6e2f065af4247f1f1ddbd"]),
        (.aesCM128HmacSHA1_80, true, [
            "80c80006deadbeef25779513ad4c060626dfd5df0c74ae4475bb579980000001f838bce367c8c629dd47",
            "80c80006deadbeef6fc9e7467bb639950783a8c90d7b12ce65ce3cdc8000000241ff0ec4f6b35152ce12"]),
        (.aeadAES128GCM, false, [
            "806f1234000003c0deadbeefa9e2f88b5e6436134cef361530844ad92db0c751ec969b8c18825b1c348b7379aa1919c42ebe300b3e24ddc08fd2f9b1a1dfa129beba0314",
            "806f1235000003c0deadbeefdf8043b035b3427c0ff9e0d9fbdff71e10584cdcf8323a150de2faeebf6535ec35159c2e203c0ab6f653e3697895cdf64f255411dbda9f43"]),
        (.aeadAES128GCM, true, [
            "80c80006deadbeef47f6535502084a2d17d9c24f28eef13a8bebbd4ed2463d5df309fcc938d63c41f48c005380000001",
            "80c80006deadbeefa52faaee1b68bba71fa949ca51ee3c5135bb695a9ef8e93b837880fe81b58ec30cfe2ecf80000002"]),
    ]

    @Test func protectedPacketsMatchWhatLibsrtpsOwnCiphersMade() throws {
        for (suite, rtcp, expected) in Self.recorded {
            let key = try SRTPKey(suite: suite, material: Array(Self.sharedKey.prefix(suite.keyLength)))
            let sender = try SRTPSession(key: key, direction: .outbound)
            let receiver = try SRTPSession(key: key, direction: .inbound)
            for (n, hex) in expected.enumerated() {
                let made: [UInt8]
                let plain: [UInt8]
                if rtcp {
                    plain = [0x80, 200, 0, 6, 0xde, 0xad, 0xbe, 0xef] + (0..<20).map { UInt8($0 * 5) }
                    made = try sender.protectRTCP(plain)
                    #expect(try receiver.unprotectRTCP(made).get() == plain)
                } else {
                    plain = [0x80, 111, 0x12, UInt8(0x34 + n), 0, 0, 0x03, 0xc0, 0xde, 0xad, 0xbe, 0xef] + (0..<40).map { UInt8($0 * 3) }
                    made = try sender.protect(plain)
                    #expect(try receiver.unprotect(made).get() == plain)
                }
                #expect(made == Self.hex(hex), "\(suite) \(rtcp ? "RTCP" : "RTP") packet \(n)")
            }
        }
    }
}
