import Foundation

/// How a transfer reads on SIP's wire (RFC 3515, RFC 3891): the Refer-To a REFER names, and the
/// status lines its NOTIFYs carry (`message/sipfrag`). Plain functions of text.
extension SIPWire {
    /// The address a REFER's Refer-To asks this side to call, and the Replaces header it names
    /// (an attended transfer: `sip:bob@host?Replaces=abc%40host%3Bto-tag%3D1%3Bfrom-tag%3D2`);
    /// nil for anything that is not a SIP address with a host (a `tel:` or `mailto:` URI, an
    /// empty or malformed one).
    public static func referTarget(_ referTo: String?) -> (uri: String, replaces: String?)? {
        guard var text = referTo?.trimmingCharacters(in: .whitespaces), !text.isEmpty else { return nil }
        if text.hasPrefix("<") {
            guard let close = text.firstIndex(of: ">") else { return nil }
            text = String(text[text.index(after: text.startIndex)..<close])
        }
        let parts = text.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let uri = String(parts[0])
        let lower = uri.lowercased()
        guard lower.hasPrefix("sip:") || lower.hasPrefix("sips:"),
              !uri.contains(where: { $0.isWhitespace || $0 == "<" || $0 == ">" || $0 == "\"" }) else { return nil }
        let rest = uri.drop { $0 != ":" }.dropFirst()
        let host = (rest.split(separator: "@", maxSplits: 1, omittingEmptySubsequences: false).last ?? "").prefix { $0 != ";" }
        guard !host.isEmpty, !host.hasPrefix(":") else { return nil }
        var replaces: String?
        if parts.count == 2 {
            for header in parts[1].split(separator: "&") {
                let pair = header.split(separator: "=", maxSplits: 1)
                guard pair.count == 2, pair[0].lowercased() == "replaces" else { continue }
                replaces = String(pair[1]).removingPercentEncoding
            }
        }
        return (uri, replaces)
    }

    /// The status a NOTIFY's `message/sipfrag` body carries (`SIP/2.0 180 Ringing`), or nil.
    public static func sipfragStatus(_ body: String?) -> (status: Int, phrase: String)? {
        guard let line = body?.split(whereSeparator: \.isNewline).first else { return nil }
        let fields = line.split(separator: " ", maxSplits: 2)
        guard fields.count >= 2, fields[0].uppercased().hasPrefix("SIP/"), let status = Int(fields[1]),
              (100..<700).contains(status) else { return nil }
        return (status, fields.count > 2 ? fields[2].trimmingCharacters(in: .whitespaces) : "")
    }
}
