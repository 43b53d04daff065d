/// One `m=` section with its lines.
public struct MediaDescription: Sendable, Equatable {
    /// `audio`, `video`, `application`, …
    public var media: String
    public var port: Int
    public var portCount: Int?
    /// `UDP/TLS/RTP/SAVPF`, `RTP/SAVP`, `RTP/AVP`, …
    public var proto: String
    /// Payload types (as text, in preference order).
    public var formats: [String]
    public var connection: SDPConnection?
    public var bandwidths: [String] = []
    public var attributes: [SDPAttribute] = []

    public init(media: String = "audio", port: Int = 9, proto: String = "RTP/SAVP", formats: [String],
                connection: SDPConnection? = nil, attributes: [SDPAttribute] = []) {
        self.media = media
        self.port = port
        self.proto = proto
        self.formats = formats
        self.connection = connection
        self.attributes = attributes
    }

    init(parsing value: String, fail: (String) -> SDPParseError) throws(SDPParseError) {
        let parts = value.split(separator: " ").map(String.init)
        guard parts.count >= 3 else { throw fail("m= needs media, port, protocol and formats") }
        let portParts = parts[1].split(separator: "/", omittingEmptySubsequences: false)
        guard portParts.count <= 2, let port = Int(portParts[0]), (0...65_535).contains(port) else {
            throw fail("the port '\(parts[1])' is not a port number")
        }
        var portCount: Int?
        if portParts.count == 2 {
            guard let count = Int(portParts[1]), count > 0 else { throw fail("the port count in '\(parts[1])' is not a number") }
            portCount = count
        }
        self.init(media: parts[0], port: port, proto: parts[2], formats: Array(parts.dropFirst(3)))
        self.portCount = portCount
    }

    var serializedLines: [String] {
        let portText = portCount.map { "\(port)/\($0)" } ?? "\(port)"
        var lines = ["m=\(([media, portText, proto] + formats).joined(separator: " "))"]
        if let connection { lines.append("c=\(connection.serialized)") }
        lines += bandwidths.map { "b=\($0)" }
        lines += attributes.map { "a=\($0.serialized)" }
        return lines
    }

    // MARK: Typed views of the attributes

    public func attribute(_ name: String) -> SDPAttribute? { attributes.first { $0.name == name } }
    public func values(_ name: String) -> [String] { attributes.filter { $0.name == name }.compactMap(\.value) }
    public func has(_ name: String) -> Bool { attributes.contains { $0.name == name } }

    /// `a=rtpmap` lines that parse; malformed ones are left as plain attributes.
    public var rtpMaps: [RTPMap] { values("rtpmap").compactMap(RTPMap.init(parsing:)) }

    /// The `a=fmtp` parameters of `payloadType` (`useinbandfec=1;usedtx=1` → two entries).
    public func formatParameters(for payloadType: Int) -> [String: String] {
        for value in values("fmtp") {
            let parts = value.split(separator: " ", maxSplits: 1)
            guard parts.count == 2, Int(parts[0]) == payloadType else { continue }
            var result: [String: String] = [:]
            for item in parts[1].split(separator: ";") {
                let pair = item.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: " ") }
                guard let key = pair.first, !key.isEmpty else { continue }
                result[key] = pair.count == 2 ? pair[1] : ""
            }
            return result
        }
        return [:]
    }

    /// `a=ptime` in milliseconds.
    public var packetTime: Int? { attribute("ptime")?.value.flatMap { Int($0) } }
    public var iceUfrag: String? { attribute("ice-ufrag")?.value }
    public var icePwd: String? { attribute("ice-pwd")?.value }
    public var iceOptions: [String] { attribute("ice-options")?.value?.split(separator: " ").map(String.init) ?? [] }
    /// `a=candidate` values, prefixed `candidate:` as ICE parsers expect them.
    public var candidates: [String] { values("candidate").map { "candidate:" + $0 } }
    public var endOfCandidates: Bool { has("end-of-candidates") }
    public var rtcpMux: Bool { has("rtcp-mux") }
    public var mid: String? { attribute("mid")?.value }
    /// `a=crypto` lines that parse (RFC 4568).
    public var cryptos: [SDPCrypto] { values("crypto").compactMap(SDPCrypto.init(parsing:)) }
    /// The direction attribute; `sendrecv` when there is none (RFC 3264).
    public var direction: MediaDirection {
        attributes.lazy.compactMap { MediaDirection(rawValue: $0.name) }.first ?? .sendrecv
    }

    /// Replaces the direction attribute.
    public mutating func setDirection(_ direction: MediaDirection) {
        attributes.removeAll { MediaDirection(rawValue: $0.name) != nil }
        attributes.append(SDPAttribute(direction.rawValue))
    }
}

/// `a=rtpmap:<pt> <encoding>/<clock rate>[/<channels>]`
public struct RTPMap: Sendable, Equatable {
    public var payloadType: Int
    public var encoding: String
    public var clockRate: Int
    public var channels: Int?

    public init(payloadType: Int, encoding: String, clockRate: Int, channels: Int? = nil) {
        self.payloadType = payloadType
        self.encoding = encoding
        self.clockRate = clockRate
        self.channels = channels
    }

    public init?(parsing value: String) {
        let parts = value.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, let pt = Int(parts[0]), (0...127).contains(pt) else { return nil }
        let codec = parts[1].split(separator: "/")
        guard codec.count >= 2, let rate = Int(codec[1]) else { return nil }
        self.init(payloadType: pt, encoding: String(codec[0]), clockRate: rate, channels: codec.count > 2 ? Int(codec[2]) : nil)
    }

    public var attribute: SDPAttribute {
        SDPAttribute("rtpmap", "\(payloadType) \(encoding)/\(clockRate)" + (channels.map { "/\($0)" } ?? ""))
    }
}

/// `a=crypto:<tag> <suite> <key params> [<session params>]` (RFC 4568 SDES).
public struct SDPCrypto: Sendable, Equatable {
    public var tag: Int
    public var suite: String
    /// `inline:<base64>[|lifetime][|MKI:length]`
    public var keyParameters: String
    public var sessionParameters: [String]

    public init(tag: Int, suite: String, keyParameters: String, sessionParameters: [String] = []) {
        self.tag = tag
        self.suite = suite
        self.keyParameters = keyParameters
        self.sessionParameters = sessionParameters
    }

    public init?(parsing value: String) {
        let parts = value.split(separator: " ").map(String.init)
        guard parts.count >= 3, let tag = Int(parts[0]), parts[2].hasPrefix("inline:") else { return nil }
        self.init(tag: tag, suite: parts[1], keyParameters: parts[2], sessionParameters: Array(parts.dropFirst(3)))
    }

    public var attribute: SDPAttribute {
        SDPAttribute("crypto", ([String(tag), suite, keyParameters] + sessionParameters).joined(separator: " "))
    }
}

extension StringProtocol {
    func trimmingCharacters(in set: Character) -> String {
        var s = Substring(self)
        while s.first == set { s = s.dropFirst() }
        while s.last == set { s = s.dropLast() }
        return String(s)
    }
}
