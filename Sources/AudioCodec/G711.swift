/// ITU-T G.711: 16-bit linear samples to 8-bit µ-law or A-law and back, one byte a sample.
///
/// Stateless; decoding is a table look-up (256 entries per law), encoding a few shifts.
public enum G711 {
    public enum Law: Sendable, Equatable {
        /// µ-law (PCMU), North America and Japan.
        case mu
        /// A-law (PCMA), elsewhere.
        case a
    }

    /// Encodes `samples` into `bytes` (replacing its contents, keeping its capacity).
    /// Inlinable, so a caller's concrete collection is walked directly rather than through the
    /// generic collection's witnesses (which cost more than the coding itself).
    @inlinable
    public static func encode(_ samples: some Collection<Int16>, law: Law, into bytes: inout [UInt8]) {
        bytes.removeAll(keepingCapacity: true)
        switch law {
        case .mu: for sample in samples { bytes.append(muLaw(sample)) }
        case .a: for sample in samples { bytes.append(aLaw(sample)) }
        }
    }

    /// Decodes `bytes` into `samples` (replacing its contents, keeping its capacity).
    @inlinable
    public static func decode(_ bytes: some Collection<UInt8>, law: Law, into samples: inout [Int16]) {
        samples.removeAll(keepingCapacity: true)
        let table = law == .mu ? muLawTable : aLawTable
        for byte in bytes { samples.append(table[Int(byte)]) }
    }

    /// One sample to µ-law: sign, a 3-bit segment (the magnitude's octave) and 4 bits within it,
    /// inverted (G.711 §3; the bias of 132 makes the segments start at powers of two).
    @inlinable
    public static func muLaw(_ sample: Int16) -> UInt8 {
        let value = Int(sample)
        let sign = value < 0 ? 0x80 : 0
        let magnitude = min(abs(value), 32_635) + 0x84
        // The highest set bit is between 7 and 14: the segment is how far above 7 it is.
        let segment = (Int.bitWidth - 1 - magnitude.leadingZeroBitCount) - 7
        let mantissa = (magnitude >> (segment + 3)) & 0x0F
        return UInt8(truncatingIfNeeded: ~(sign | segment << 4 | mantissa))
    }

    /// One sample to A-law: 13-bit magnitude, segment and 4 bits, even bits inverted (G.711 §2).
    @inlinable
    public static func aLaw(_ sample: Int16) -> UInt8 {
        var value = Int(sample) >> 3
        let mask: Int
        if value >= 0 {
            mask = 0xD5
        } else {
            mask = 0x55
            value = -value - 1
        }
        guard value <= 0xFFF else { return UInt8(0x7F ^ mask) }
        // Segment 0 covers 0–31 (like segment 1, 32–63, in steps of 2); then one per octave.
        let segment = value < 32 ? 0 : (Int.bitWidth - 1 - value.leadingZeroBitCount) - 4
        let mantissa = segment < 2 ? (value >> 1) & 0x0F : (value >> segment) & 0x0F
        return UInt8(truncatingIfNeeded: (segment << 4 | mantissa) ^ mask)
    }

    @usableFromInline static let muLawTable: [Int16] = (0...255).map { byte in
        let inverted = ~byte & 0xFF
        let segment = (inverted >> 4) & 0x07, mantissa = inverted & 0x0F
        let magnitude = ((mantissa << 3) + 0x84) << segment
        return Int16(inverted & 0x80 != 0 ? 0x84 - magnitude : magnitude - 0x84)
    }

    @usableFromInline static let aLawTable: [Int16] = (0...255).map { byte in
        let value = byte ^ 0x55
        let segment = (value & 0x70) >> 4
        var magnitude = (value & 0x0F) << 4
        switch segment {
        case 0: magnitude += 8
        case 1: magnitude += 0x108
        default: magnitude = (magnitude + 0x108) << (segment - 1)
        }
        return Int16(value & 0x80 != 0 ? magnitude : -magnitude)
    }
}
