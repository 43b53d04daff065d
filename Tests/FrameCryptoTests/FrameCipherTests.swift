@testable import FrameCrypto
import Testing

/// The frame cipher against AES-256-GCM's published test vectors, and its failure cases.
@Suite struct FrameCipherTests {
    static func hex(_ text: String) -> [UInt8] {
        var bytes: [UInt8] = []
        var index = text.startIndex
        while index < text.endIndex {
            let next = text.index(index, offsetBy: 2)
            bytes.append(UInt8(text[index..<next], radix: 16)!)
            index = next
        }
        return bytes
    }

    @Test func theFirstFrameIsAES256GCMWithAZeroNonceAsInTheGCMSpecification() throws {
        // GCM specification (McGrew & Viega), test case 14: 256-bit zero key, 96-bit zero IV,
        // one zero block. The first frame's nonce is 8 zero bytes and counter 0.
        let keys = FrameKeys(shared: try FrameEncryptionKey(bytes: [UInt8](repeating: 0, count: 32)))
        var cipher = FrameCipher(keys: keys)
        let sealed = try cipher.seal([UInt8](repeating: 0, count: 16))
        #expect(sealed == Self.hex("cea7403d4d606b6e074ec5d3baf39d18" + "d0d1c8a799996bf0265b98b5d48ab919" + "00000000"))
        #expect(cipher.open(sealed) == [UInt8](repeating: 0, count: 16))
    }

    /// Sealing into a kept buffer (the sender's path) writes what sealing into a new array does.
    @Test func aFrameSealedIntoAKeptBufferIsTheSameFrame() throws {
        let key = FrameEncryptionKey.random()
        var fresh = FrameCipher(keys: FrameKeys(shared: key)), kept = FrameCipher(keys: FrameKeys(shared: key))
        var buffer: [UInt8] = []
        for length in [1, 16, 17, 80, 160, 0] {
            let frame = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ length) }
            buffer.removeAll(keepingCapacity: true)
            buffer += [0xAA, 0xBB]  // what precedes it stays
            try kept.seal(frame[...], appendingTo: &buffer)
            #expect(buffer == [0xAA, 0xBB] + (try fresh.seal(frame)), "\(length) bytes")
            if length > 0 { #expect(fresh.open(Array(buffer.dropFirst(2))) == frame) }
        }
    }

    @Test func framesOpenInAnyOrderAndATamperedOrForeignFrameDoesNot() throws {
        let key = FrameEncryptionKey.random()
        var sender = FrameCipher(keys: FrameKeys(shared: key))
        let receiver = FrameCipher(keys: FrameKeys(shared: key))
        let frames = (0..<5).map { n in (0..<(20 + n * 31)).map { UInt8(truncatingIfNeeded: $0 * 7 + n) } }
        let sealed = try frames.map { try sender.seal($0) }
        // Each carries its counter: a later frame first, and a copy (redundancy) twice.
        #expect(receiver.open(sealed[3]) == frames[3])
        #expect(receiver.open(sealed[0]) == frames[0])
        #expect(receiver.open(sealed[0]) == frames[0])
        var tampered = sealed[1]
        tampered[2] ^= 1
        #expect(receiver.open(tampered) == nil)
        var wrongCounter = sealed[2]
        wrongCounter[wrongCounter.count - 1] ^= 1
        #expect(receiver.open(wrongCounter) == nil)
        #expect(FrameCipher(keys: FrameKeys(shared: .random())).open(sealed[4]) == nil)
        #expect(receiver.open(Array(sealed[4].prefix(FrameCipher.overhead))) == nil)
        // An empty frame seals to the overhead alone and opens back to nothing.
        let empty = try sender.seal([])
        #expect(empty.count == FrameCipher.overhead)
    }
}

/// A group's keys change while frames flow: a new inbound key opens the sender's new frames
/// and, for the frames still in flight, the one before it; a third key leaves the first behind.
@Suite struct FrameCipherRekeyTests {
    @Test func aNewInboundKeyStillOpensFramesSealedWithTheOneBeforeIt() throws {
        let first = FrameEncryptionKey.random(), second = FrameEncryptionKey.random(), third = FrameEncryptionKey.random()
        var sender = FrameCipher(keys: FrameKeys(shared: first))
        var receiver = FrameCipher(keys: FrameKeys(outbound: .random(), inbound: first))
        let early = try sender.seal([1, 2, 3])
        sender.rekey(outbound: second, inbound: nil)
        let late = try sender.seal([4, 5, 6])
        // The sender counts the new key's frames from 0: a new key, new nonces.
        #expect(late.suffix(4) == [0, 0, 0, 0])
        #expect(receiver.open(late) == nil)
        receiver.rekey(outbound: nil, inbound: second)
        #expect(receiver.open(late) == [4, 5, 6])
        #expect(receiver.open(early) == [1, 2, 3])
        receiver.rekey(outbound: nil, inbound: third)
        #expect(receiver.open(early) == nil, "a key two changes back still opened a frame")
        #expect(receiver.open(late) == [4, 5, 6])
        // The same key again changes nothing (the one before it stays the fallback).
        receiver.rekey(outbound: nil, inbound: third)
        #expect(receiver.open(late) == [4, 5, 6])
    }
}
