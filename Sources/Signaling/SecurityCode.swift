import Crypto

/// A short code both people on a call see, derived from both identities (certificate
/// fingerprints): read aloud and compared, it shows that nobody sits between them.
public enum SecurityCode {
    /// 12 digits in groups of three (`041 772 590 318`), the same whichever side computes it.
    public static func between(_ a: [UInt8], _ b: [UInt8]) -> String {
        let (first, second) = a.lexicographicallyPrecedes(b) ? (a, b) : (b, a)
        return digits(Array(SHA256.hash(data: Array("callnode security code v1".utf8) + first + second)))
    }

    /// The code every member of a group sees, from all their identities (in any order): one
    /// member more or less, or another identity in its place, and the digits differ.
    public static func group(_ members: some Sequence<Fingerprint>) -> String {
        let sorted = Set(members).sorted()
        return digits(Array(SHA256.hash(data: Array("callnode group security code v1".utf8) + sorted.flatMap(\.bytes))))
    }

    /// 12 digits in groups of three from a digest.
    private static func digits(_ digest: [UInt8]) -> String {
        let number = digest.prefix(8).reduce(UInt64(0)) { $0 << 8 | UInt64($1) } % 1_000_000_000_000
        let digits = String(number).leftPadded(to: 12)
        return stride(from: 0, to: 12, by: 3).map { start in
            String(digits[digits.index(digits.startIndex, offsetBy: start)..<digits.index(digits.startIndex, offsetBy: start + 3)])
        }.joined(separator: " ")
    }

    /// The code between two node identities.
    public static func between(_ a: Fingerprint, _ b: Fingerprint) -> String { between(a.bytes, b.bytes) }
}

extension String {
    fileprivate func leftPadded(to length: Int) -> String {
        count >= length ? self : String(repeating: "0", count: length - count) + self
    }
}
