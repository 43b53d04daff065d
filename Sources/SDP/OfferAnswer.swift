import enum RTP.AudioEncoding

/// What this node can send and would like to receive: the parameters it writes into an offer
/// or answer.
public struct AudioCapabilities: Sendable, Equatable {
    /// The codecs this node speaks, most wanted first: offers list them in this order, and an
    /// answer takes the first of them the offer has. Opus alone between nodes and with pages;
    /// SIP peers may get G.711 (PCMU, PCMA) too.
    public var codecs: [AudioEncoding] = [.opus]
    /// The payload type offered for Opus (answers reuse the offer's).
    public var opusPayloadType = 111
    /// Ask the peer for in-band FEC (`useinbandfec=1`).
    public var useInbandFEC = true
    /// Ask the peer to use DTX (`usedtx=1`).
    public var useDTX = false
    /// The most this node wants to receive, bit/s (`maxaveragebitrate`).
    public var maxAverageBitrate = 40_000
    /// Frame duration in ms (`a=ptime`).
    public var packetTime = 20
    /// RFC 4733 telephone events on Opus's 48 kHz clock, or `nil` to leave telephone events out.
    public var telephoneEventPayloadType: Int? = 101
    /// The payload type offered for telephone events on G.711's 8 kHz clock (offered when a
    /// G.711 codec is, and telephone events are at all).
    public var narrowbandTelephoneEventPayloadType = 100
    /// RFC 2198 redundant audio carrying Opus (`red/48000/2`, as browsers offer it), or `nil`
    /// to leave it out. Answers reuse the offer's payload type.
    public var redundancyPayloadType: Int? = 63
    /// SRTP suites in order of preference (RFC 4568 names).
    public var cryptoSuites = ["AES_CM_128_HMAC_SHA1_80", "AEAD_AES_128_GCM"]
    /// How this node's offers key SRTP. Answers follow the offer: either kind is answered
    /// when this node has what it needs (a certificate fingerprint, SDES keys).
    public var keyExchange: KeyExchange = .dtls
    /// Whether media may go unencrypted (plain RTP/AVP, for SIP peers that speak no SRTP).
    public var mediaEncryption: MediaEncryption = .required
    /// Offers RFC 6464's audio level in each packet's header on this extension id (a media
    /// server tells who talks from it), or `nil` to leave it out.
    public var audioLevelExtension: Int?

    public init() {}
}

/// Whether a call's media must be SRTP.
public enum MediaEncryption: String, Sendable, Equatable, CaseIterable {
    /// SRTP or nothing: an offer without it is refused (the default between nodes).
    case required
    /// Offers are SRTP; an offer of plain RTP (`RTP/AVP` without `a=crypto` or
    /// `a=fingerprint`) is answered in plain RTP.
    case preferred
    /// Offers are plain RTP; an offer with SRTP is still answered with it.
    case off
}

/// How SRTP is keyed.
public enum KeyExchange: String, Sendable, Equatable, CaseIterable {
    /// DTLS-SRTP (RFC 5763/5764): a handshake over the media path with ephemeral ECDH, so
    /// the keys never travel in signaling and a recorded call cannot be decrypted later even
    /// with both nodes' long-term keys (forward secrecy). What browsers speak.
    case dtls
    /// SDES (RFC 4568): keys inside the SDP (`a=crypto`), protected only by the signaling
    /// channel's TLS. No handshake on the media path, so media starts one round trip sooner.
    case sdes
}

/// `a=setup` (RFC 4145 / 5763): which side opens the DTLS handshake.
public enum DTLSSetup: String, Sendable, Equatable {
    /// Offers: either role (the answerer picks).
    case actpass
    /// Opens the handshake (the DTLS client).
    case active
    /// Waits for it (the DTLS server).
    case passive
}

/// What an offer and answer agreed for DTLS-SRTP, from one side's point of view.
public struct NegotiatedDTLS: Sendable, Equatable {
    /// This node's role: ``DTLSSetup/active`` (client) or ``DTLSSetup/passive`` (server).
    public var setup: DTLSSetup
    /// The peer's `a=fingerprint` value (`sha-256 AB:CD:…`): its certificate must match.
    public var remoteFingerprint: String

    public init(setup: DTLSSetup, remoteFingerprint: String) {
        self.setup = setup
        self.remoteFingerprint = remoteFingerprint
    }
}

/// What this node puts into its side of the exchange besides capabilities.
public struct LocalAudioParameters: Sendable, Equatable {
    public var iceUfrag: String
    public var icePwd: String
    /// `candidate:…` values known when the description is written (more may trickle).
    public var candidates: [String]
    public var endOfCandidates: Bool
    /// `inline:…` key parameters per suite name, for every suite this node may use.
    public var keys: [String: String]
    public var direction: MediaDirection
    /// The address for the `o=` and `c=` lines (ICE ignores it; `0.0.0.0` is fine).
    public var address: String
    /// This node's DTLS certificate fingerprint (`sha-256 AB:CD:…`), or `nil` without DTLS.
    public var fingerprint: String?
    /// `a=setup` in an offer: ``DTLSSetup/actpass`` at first; a later offer of the same call
    /// keeps the role the first exchange settled (RFC 5763 §5).
    public var offerSetup: DTLSSetup = .actpass
    /// `a=msid` and `a=ssrc … cname` for WebRTC peers: the stream, track and SSRC this node
    /// sends. `nil` leaves them out.
    public var stream: LocalStream?
    /// Without ICE (a SIP peer that does not speak it): where this node's RTP is, written in
    /// the `c=` and `m=` lines; the ICE lines are left out. `nil`: ICE.
    public var plainRTP: RTPEndpoint?

    public init(iceUfrag: String, icePwd: String, candidates: [String] = [], endOfCandidates: Bool = false,
                keys: [String: String], direction: MediaDirection = .sendrecv, address: String = "0.0.0.0",
                fingerprint: String? = nil) {
        self.fingerprint = fingerprint
        self.iceUfrag = iceUfrag
        self.icePwd = icePwd
        self.candidates = candidates
        self.endOfCandidates = endOfCandidates
        self.keys = keys
        self.direction = direction
        self.address = address
    }
}

/// Where RTP goes without ICE: the `c=` address and `m=` port of a description (RTP and RTCP
/// on that one port, `a=rtcp-mux`; symmetric RTP, RFC 4961).
public typealias RTPEndpoint = TransportAddress

/// An IP address and a port: where RTP goes without ICE (``RTPEndpoint``), an ICE candidate's
/// address as a peer names it.
public struct TransportAddress: Sendable, Hashable, Codable, CustomStringConvertible {
    public var address: String
    public var port: Int

    public init(address: String, port: Int) {
        self.address = address
        self.port = port
    }

    public var description: String { address.contains(":") ? "[\(address)]:\(port)" : "\(address):\(port)" }
}

/// The media stream this node sends, as WebRTC names it (RFC 8830 `a=msid`, RFC 5576 `a=ssrc`).
public struct LocalStream: Sendable, Equatable {
    public var streamID: String
    public var trackID: String
    public var ssrc: UInt32?
    public var cname: String

    public init(streamID: String, trackID: String, ssrc: UInt32? = nil, cname: String) {
        self.streamID = streamID
        self.trackID = trackID
        self.ssrc = ssrc
        self.cname = cname
    }
}

/// The outcome of an offer/answer exchange, from one side's point of view.
public struct NegotiatedAudio: Sendable, Equatable {
    /// The codec both sides use.
    public var encoding: AudioEncoding = .opus
    /// Its payload type.
    public var payloadType: Int
    /// The peer asked for in-band FEC: encode with it.
    public var sendInbandFEC: Bool
    /// The peer asked for DTX.
    public var sendDTX: Bool
    /// The peer's receive limit, if it gave one: keep the encoder at or under it.
    public var maxSendBitrate: Int?
    /// Frame duration, ms.
    public var packetTime: Int
    /// The agreed telephone-event payload type, if both sides support RFC 4733.
    public var telephoneEventPayloadType: Int?
    /// The SRTP suite both sides use (SDES; empty with DTLS, where the handshake picks it).
    public var cryptoSuite: String
    /// This node's key (it protects what it sends with it); SDES only.
    public var localKey: String
    /// The peer's key (it unprotects what arrives with it); SDES only.
    public var remoteKey: String
    public var remoteIceUfrag: String
    public var remoteIcePwd: String
    /// Candidates the peer's description carried; more may trickle.
    public var remoteCandidates: [String]
    public var remoteEndOfCandidates: Bool
    /// The direction of this node's media.
    public var direction: MediaDirection
    /// The agreed payload type of RFC 2198 redundant Opus, if both sides support it.
    public var redundancyPayloadType: Int?
    /// DTLS-SRTP's role and the peer's fingerprint, or `nil` when SDES keyed the call.
    public var dtls: NegotiatedDTLS?
    /// The media stream's `a=mid` (the offer's), for BUNDLE peers.
    public var mid: String?
    /// Plain RTP: nothing keyed, nothing protected (only where ``MediaEncryption`` allows).
    public var unencrypted = false
    /// The peer speaks no ICE (its description has no credentials): where its RTP goes, from its
    /// `c=` and `m=` lines. `nil` with ICE.
    public var remoteRTP: RTPEndpoint?
    /// Without ICE and without `a=rtcp-mux` from the peer: where its RTCP goes (its `a=rtcp`,
    /// else the port after its RTP's). `nil` when RTP and RTCP share the port.
    public var remoteRTCP: RTPEndpoint?
    /// The extension id RFC 6464's audio level goes on, when this side offered it and the answer kept it.
    public var audioLevelExtension: Int?
}

/// Why an offer or answer cannot be used.
public struct NegotiationError: Error, Sendable, Equatable, CustomStringConvertible {
    public var reason: String
    public init(_ reason: String) { self.reason = reason }
    public var description: String { "\(Self.prefix): \(reason)" }
    /// How every description begins.
    public static let prefix = "SDP negotiation failed"
}

/// RFC 3264 offer/answer for one audio stream (Opus, or G.711 with SIP peers) over ICE or plain
/// RTP, keyed by SDES or DTLS, or unencrypted where allowed.
public enum OfferAnswer {
    /// Writes an offer: every suite in `capabilities.cryptoSuites` that has a key in `local`,
    /// one `a=crypto` line each, in order of preference.
    ///
    /// With ``KeyExchange/dtls`` and a fingerprint in `local`, the offer is WebRTC's
    /// `UDP/TLS/RTP/SAVPF` with `a=fingerprint` and `a=setup` instead of `a=crypto` lines.
    public static func offer(sessionID: String, capabilities: AudioCapabilities, local: LocalAudioParameters) -> SessionDescription {
        let codecs = capabilities.codecs.map { Codec(encoding: $0, payloadType: $0.staticPayloadType ?? capabilities.opusPayloadType) }
        var events: [TelephoneEvents] = []
        if let events48k = capabilities.telephoneEventPayloadType {
            if capabilities.codecs.contains(.opus) { events.append(TelephoneEvents(payloadType: events48k, clockRate: 48_000)) }
            if capabilities.codecs.contains(where: \.isG711) {
                events.append(TelephoneEvents(payloadType: capabilities.narrowbandTelephoneEventPayloadType, clockRate: 8_000))
            }
        }
        let redundancy = capabilities.codecs.contains(.opus) ? capabilities.redundancyPayloadType : nil
        let keying: Keying
        if capabilities.mediaEncryption == .off {
            keying = .plain
        } else if capabilities.keyExchange == .dtls, let fingerprint = local.fingerprint {
            keying = .dtls(fingerprint: fingerprint, setup: local.offerSetup)
        } else {
            var cryptos: [SDPCrypto] = []
            for suite in capabilities.cryptoSuites {
                if let key = local.keys[suite] { cryptos.append(SDPCrypto(tag: cryptos.count + 1, suite: suite, keyParameters: key)) }
            }
            keying = .sdes(cryptos)
        }
        var description = describe(sessionID: sessionID, codecs: codecs, telephoneEvents: events, redundancy: redundancy,
                                   capabilities: capabilities, local: local, keying: keying, mid: "0")
        AudioLevelExtension.offer(capabilities.audioLevelExtension, in: &description)
        return description
    }

    /// RFC 4733 telephone events: their payload type and the clock they run on (their codec's).
    struct TelephoneEvents: Equatable {
        var payloadType: Int
        var clockRate: Int
    }

    /// How a description keys SRTP.
    enum Keying {
        case sdes([SDPCrypto])
        case dtls(fingerprint: String, setup: DTLSSetup)
        /// Plain RTP/AVP: no keys at all.
        case plain
    }

    /// Whether a description's audio is plain RTP: no `a=fingerprint`, no `a=crypto`, an
    /// unsecured profile (`RTP/AVP`, `RTP/AVPF`).
    static func isPlain(_ description: SessionDescription, media: MediaDescription) -> Bool {
        dtlsOffer(in: description, media: media) == nil && media.cryptos.isEmpty && !media.proto.uppercased().contains("SAVP")
    }

    /// The peer's `a=fingerprint` (media level, else session level) and `a=setup`, if it offers DTLS.
    static func dtlsOffer(in description: SessionDescription, media: MediaDescription) -> (fingerprint: String, setup: DTLSSetup?)? {
        guard let fingerprint = media.attribute("fingerprint")?.value ?? description.attribute("fingerprint")?.value else { return nil }
        let setupValue = media.attribute("setup")?.value ?? description.attribute("setup")?.value
        return (fingerprint, setupValue.flatMap { DTLSSetup(rawValue: $0.lowercased()) })
    }

    /// Answers `offer`: keeps the offer's Opus payload type, picks the first offered suite this
    /// node supports, and answers the direction.
    ///
    /// - Throws: ``NegotiationError`` when the offer has no usable audio stream, no Opus, no ICE
    ///   credentials, or no SRTP suite in common.
    public static func answer(to offer: SessionDescription, sessionID: String, capabilities: AudioCapabilities,
                              local: LocalAudioParameters) throws(NegotiationError) -> (answer: SessionDescription, negotiated: NegotiatedAudio) {
        let media = try audio(in: offer)
        // This node's most wanted codec among the offered ones.
        let offered = codecs(in: media, speaking: capabilities.codecs)
        guard let codec = capabilities.codecs.lazy.compactMap({ wanted in offered.first { $0.encoding == wanted } }).first else {
            throw noCodec(in: media, speaking: capabilities.codecs)
        }
        let payloadType = codec.payloadType
        // How to key SRTP: DTLS when the offer carries a fingerprint (an offer's `actpass` or
        // `passive` makes this node the client, `active` the server), else the first offered
        // SDES suite this node supports.
        let keying: Keying
        var dtls: NegotiatedDTLS?
        var suite = "", localKey = "", remoteKey = ""
        var unencrypted = false
        if isPlain(offer, media: media) {
            guard capabilities.mediaEncryption != .required else {
                throw NegotiationError("the offer is plain RTP (\(media.proto) without a=crypto or a=fingerprint), and this node requires SRTP")
            }
            keying = .plain
            unencrypted = true
        } else if let offeredDTLS = dtlsOffer(in: offer, media: media) {
            guard let fingerprint = local.fingerprint else {
                throw NegotiationError("the offer keys SRTP with DTLS (a=fingerprint), and this node has no DTLS certificate")
            }
            // RFC 4145: an offer without a=setup is active, so this side waits for it.
            let setup: DTLSSetup = (offeredDTLS.setup ?? .active) == .active ? .passive : .active
            keying = .dtls(fingerprint: fingerprint, setup: setup)
            dtls = NegotiatedDTLS(setup: setup, remoteFingerprint: offeredDTLS.fingerprint)
        } else {
            guard let chosen = media.cryptos.first(where: { capabilities.cryptoSuites.contains($0.suite) && local.keys[$0.suite] != nil }) else {
                throw NegotiationError("no SRTP suite in common (offered: \(media.cryptos.map(\.suite).joined(separator: ", ")); supported: \(capabilities.cryptoSuites.joined(separator: ", ")))")
            }
            (suite, localKey, remoteKey) = (chosen.suite, local.keys[chosen.suite] ?? "", chosen.keyParameters)
            keying = .sdes([SDPCrypto(tag: chosen.tag, suite: chosen.suite, keyParameters: localKey)])
        }
        let telephoneEvent = capabilities.telephoneEventPayloadType == nil ? nil
            : telephoneEventPayloadType(in: media, clockRate: codec.encoding.clockRate)
        let redundancy = capabilities.redundancyPayloadType == nil || codec.encoding != .opus ? nil
            : redundancyPayloadType(in: media, opus: payloadType)
        var answerLocal = local
        // The answer's direction is the offer's, mirrored, narrowed by what this node wants.
        answerLocal.direction = media.direction.answer(wanting: local.direction)
        // RTP and RTCP on one port only if the offer asked for it (RFC 5761 §5.1.1).
        let answer = describe(sessionID: sessionID, codecs: [codec],
                              telephoneEvents: telephoneEvent.map { [TelephoneEvents(payloadType: $0, clockRate: codec.encoding.clockRate)] } ?? [],
                              redundancy: redundancy, capabilities: capabilities, local: answerLocal, keying: keying,
                              mid: media.mid, proto: media.proto, bundle: bundles(offer, media),
                              rtcpMux: media.attribute("rtcp-mux") != nil)
        var negotiated = try negotiate(remote: media, encoding: codec.encoding, payloadType: payloadType, capabilities: capabilities,
                                       telephoneEvent: telephoneEvent, suite: suite, localKey: localKey,
                                       remoteKey: remoteKey, direction: answerLocal.direction, session: offer.connection)
        negotiated.dtls = dtls
        negotiated.redundancyPayloadType = redundancy
        negotiated.unencrypted = unencrypted
        return (answer, negotiated)
    }

    /// Whether the offer BUNDLEs the audio stream (`a=group:BUNDLE` naming its mid): the
    /// answer then groups it too.
    static func bundles(_ offer: SessionDescription, _ media: MediaDescription) -> Bool {
        guard let mid = media.mid else { return false }
        return offer.attributes.contains { attribute in
            guard attribute.name == "group", let value = attribute.value else { return false }
            let fields = value.split(separator: " ")
            return fields.first == "BUNDLE" && fields.dropFirst().contains(Substring(mid))
        }
    }

    /// The offerer's view once the answer arrives.
    ///
    /// - Throws: ``NegotiationError`` when the answer refuses the stream, changes the codec,
    ///   or picks a suite that was not offered.
    public static func accept(answer: SessionDescription, to offer: SessionDescription,
                              capabilities: AudioCapabilities) throws(NegotiationError) -> NegotiatedAudio {
        let offered = try audio(in: offer)
        let media = try audio(in: answer)
        // The answer's first codec of those offered (RFC 3264 §6.1), on the offered payload type.
        let offeredCodecs = codecs(in: offered, speaking: capabilities.codecs)
        guard let codec = codecs(in: media, speaking: offeredCodecs.map(\.encoding)).first else {
            throw noCodec(in: media, speaking: offeredCodecs.map(\.encoding))
        }
        let payloadType = codec.payloadType
        guard offeredCodecs.contains(where: { $0 == codec }) else {
            throw NegotiationError("the answer uses \(codec.encoding.rtpName) with payload type \(payloadType), not the offered one")
        }
        // How the answer keys SRTP: the DTLS role it picked, or the offered suite it chose.
        var dtls: NegotiatedDTLS?
        var suite = "", localKey = "", remoteKey = ""
        // A phone that takes no SRTP may answer an encrypted offer in plain RTP (the profile
        // changed, which RFC 3264 does not allow, but phones do it): where media may go
        // unencrypted, the call takes it, and says so.
        let unencrypted = isPlain(offer, media: offered)
            || (capabilities.mediaEncryption != .required && isPlain(answer, media: media))
        if unencrypted {
            // This side offered plain RTP; the answer keeps the offer's profile.
            guard isPlain(answer, media: media) else {
                throw NegotiationError("the offer was plain RTP, and the answer keys SRTP (\(media.proto))")
            }
        } else if dtlsOffer(in: offer, media: offered) != nil {
            guard let answered = dtlsOffer(in: answer, media: media) else {
                throw NegotiationError("the offer asked for DTLS-SRTP, and the answer has no a=fingerprint")
            }
            switch answered.setup ?? .active {
            case .active: dtls = NegotiatedDTLS(setup: .passive, remoteFingerprint: answered.fingerprint)
            case .passive: dtls = NegotiatedDTLS(setup: .active, remoteFingerprint: answered.fingerprint)
            case .actpass: throw NegotiationError("the answer says a=setup:actpass; an answer must pick active or passive")
            }
        } else {
            guard let chosen = media.cryptos.first else { throw NegotiationError("the answer has no a=crypto line") }
            guard let mine = offered.cryptos.first(where: { $0.tag == chosen.tag && $0.suite == chosen.suite }) else {
                throw NegotiationError("the answer picked \(chosen.suite) with tag \(chosen.tag), which was not offered")
            }
            (suite, localKey, remoteKey) = (chosen.suite, mine.keyParameters, chosen.keyParameters)
        }
        let clockRate = codec.encoding.clockRate
        let telephoneEvent = telephoneEventPayloadType(in: media, clockRate: clockRate).flatMap { pt in
            telephoneEventPayloadType(in: offered, clockRate: clockRate) == pt ? pt : nil
        }
        let direction: MediaDirection = switch media.direction {
        case .sendonly: .recvonly
        case .recvonly: .sendonly
        default: media.direction
        }
        var negotiated = try negotiate(remote: media, encoding: codec.encoding, payloadType: payloadType, capabilities: capabilities,
                                       telephoneEvent: telephoneEvent, suite: suite, localKey: localKey,
                                       remoteKey: remoteKey, direction: direction, session: answer.connection)
        negotiated.dtls = dtls
        negotiated.unencrypted = unencrypted
        // Redundancy only with Opus, if this side offered it and the answer kept the offered payload type.
        negotiated.redundancyPayloadType = codec.encoding != .opus ? nil : redundancyPayloadType(in: media, opus: payloadType).flatMap { pt in
            redundancyPayloadType(in: offered, opus: payloadType) == pt ? pt : nil
        }
        negotiated.audioLevelExtension = AudioLevelExtension.accepted(offer: offered, answer: media)
        return negotiated
    }

    // MARK: - Pieces

    static func audio(in description: SessionDescription) throws(NegotiationError) -> MediaDescription {
        guard let media = description.media.first(where: { $0.media == "audio" }) else {
            throw NegotiationError("no m=audio line")
        }
        guard media.port != 0 else { throw NegotiationError("the audio stream is refused (port 0)") }
        return media.inheriting(from: description)
    }

    /// The codecs of `media` among `speaking`, in the description's order (its `m=` formats, most
    /// wanted first): an `a=rtpmap` names a format, else RFC 3551's static types (0 PCMU, 8 PCMA).
    static func codecs(in media: MediaDescription, speaking: [AudioEncoding]) -> [Codec] {
        var found: [Codec] = []
        let maps = media.rtpMaps
        for format in media.formats {
            guard let payloadType = Int(format), (0...127).contains(payloadType) else { continue }
            let encoding: AudioEncoding?
            if let map = maps.first(where: { $0.payloadType == payloadType }) {
                encoding = AudioEncoding.allCases.first { $0.rtpName.lowercased() == map.encoding.lowercased() && $0.clockRate == map.clockRate }
            } else {
                encoding = AudioEncoding.forStaticPayloadType(payloadType)
            }
            if let encoding, speaking.contains(encoding), !found.contains(where: { $0.encoding == encoding }) {
                found.append(Codec(encoding: encoding, payloadType: payloadType))
            }
        }
        return found
    }

    /// One codec of a description and its payload type.
    struct Codec: Equatable {
        var encoding: AudioEncoding
        var payloadType: Int
    }

    static func noCodec(in media: MediaDescription, speaking: [AudioEncoding]) -> NegotiationError {
        NegotiationError("no \(speaking.map(\.description).joined(separator: " or ")) among the audio formats \(media.formats.joined(separator: " "))")
    }

    static func telephoneEventPayloadType(in media: MediaDescription, clockRate: Int) -> Int? {
        let offered = Set(media.formats.compactMap { Int($0) })
        // RFC 4733 events run on the audio codec's clock: Opus's 48 kHz, G.711's 8 kHz.
        return media.rtpMaps.first {
            $0.encoding.lowercased() == "telephone-event" && $0.clockRate == clockRate && offered.contains($0.payloadType)
        }?.payloadType
    }

    /// The payload type of `red/48000/2` whose `a=fmtp` names only `opus` blocks (`63 111/111`).
    static func redundancyPayloadType(in media: MediaDescription, opus: Int) -> Int? {
        let offered = Set(media.formats.compactMap { Int($0) })
        for map in media.rtpMaps where map.encoding.lowercased() == "red" && map.clockRate == 48_000 && offered.contains(map.payloadType) {
            for value in media.values("fmtp") {
                let parts = value.split(separator: " ", maxSplits: 1)
                guard parts.count == 2, Int(parts[0]) == map.payloadType else { continue }
                let blocks = parts[1].split(separator: "/").map { Int($0.trimmingCharacters(in: " ")) }
                if !blocks.isEmpty, blocks.allSatisfy({ $0 == opus }) { return map.payloadType }
            }
        }
        return nil
    }

    static func negotiate(remote media: MediaDescription, encoding: AudioEncoding, payloadType: Int, capabilities: AudioCapabilities, telephoneEvent: Int?,
                          suite: String, localKey: String, remoteKey: String,
                          direction: MediaDirection, session: SDPConnection? = nil) throws(NegotiationError) -> NegotiatedAudio {
        // Without ICE credentials the peer's RTP is where its c= and m= lines say (a SIP peer
        // without ICE); a description with neither says nowhere to send.
        var remoteRTP: RTPEndpoint?
        if media.iceUfrag == nil || media.icePwd == nil {
            guard let connection = media.connection ?? session, !connection.address.isEmpty,
                  connection.address != "0.0.0.0" || !direction.sends else {
                throw NegotiationError("no a=ice-ufrag / a=ice-pwd in the audio stream, and no c= address to send RTP to")
            }
            // "a.b.c.d/ttl" for multicast: the address alone.
            let address = String(connection.address.split(separator: "/").first ?? Substring(connection.address))
            remoteRTP = RTPEndpoint(address: address, port: media.port)
        }
        // RFC 3605 `a=rtcp:PORT [IN IP4 ADDRESS]`, else the next port, unless muxed.
        var remoteRTCP: RTPEndpoint?
        if let rtp = remoteRTP, media.attribute("rtcp-mux") == nil {
            let fields = media.attribute("rtcp")?.value?.split(separator: " ").map(String.init) ?? []
            let port = fields.first.flatMap { Int($0) } ?? rtp.port + 1
            remoteRTCP = RTPEndpoint(address: fields.count >= 4 ? fields[3] : rtp.address, port: port)
        }
        let fmtp = encoding == .opus ? media.formatParameters(for: payloadType) : [:]
        return NegotiatedAudio(
            encoding: encoding,
            payloadType: payloadType,
            sendInbandFEC: fmtp["useinbandfec"] == "1",
            sendDTX: fmtp["usedtx"] == "1",
            maxSendBitrate: fmtp["maxaveragebitrate"].flatMap { Int($0) },
            packetTime: media.packetTime ?? capabilities.packetTime,
            telephoneEventPayloadType: telephoneEvent,
            cryptoSuite: suite, localKey: localKey, remoteKey: remoteKey,
            remoteIceUfrag: media.iceUfrag ?? "", remoteIcePwd: media.icePwd ?? "",
            remoteCandidates: remoteRTP == nil ? media.candidates : [], remoteEndOfCandidates: media.endOfCandidates || remoteRTP != nil,
            direction: direction, mid: media.mid, remoteRTP: remoteRTP, remoteRTCP: remoteRTCP)
    }

    /// Writes one audio stream. Offers BUNDLE their one stream (as browsers do); answers
    /// BUNDLE it when the offer did, and keep the offer's `mid` and transport protocol.
    static func describe(sessionID: String, codecs: [Codec], telephoneEvents: [TelephoneEvents], redundancy: Int?,
                         capabilities: AudioCapabilities, local: LocalAudioParameters, keying: Keying,
                         mid: String?, proto: String? = nil, bundle: Bool = true, rtcpMux: Bool = true) -> SessionDescription {
        var formats = codecs.map { String($0.payloadType) }
        let opus = codecs.first { $0.encoding == .opus }?.payloadType
        let redundancy = opus == nil ? nil : redundancy
        if let redundancy { formats.append(String(redundancy)) }
        formats += telephoneEvents.map { String($0.payloadType) }
        let defaultProto: String = switch keying {
        case .sdes: "RTP/SAVP"
        case .dtls: "UDP/TLS/RTP/SAVPF"
        case .plain: "RTP/AVP"
        }
        let address = local.plainRTP?.address ?? local.address
        let addressType = address.contains(":") ? "IP6" : "IP4"
        var media = MediaDescription(media: "audio", port: local.plainRTP?.port ?? 9, proto: proto ?? defaultProto, formats: formats)
        media.connection = SDPConnection(addressType: addressType, address: address)
        var fmtp = "useinbandfec=\(capabilities.useInbandFEC ? 1 : 0);usedtx=\(capabilities.useDTX ? 1 : 0)"
        fmtp += ";maxaveragebitrate=\(capabilities.maxAverageBitrate)"
        if let mid { media.attributes.append(SDPAttribute("mid", mid)) }
        for codec in codecs {
            media.attributes.append(RTPMap(payloadType: codec.payloadType, encoding: codec.encoding.rtpName,
                                           clockRate: codec.encoding.clockRate, channels: codec.encoding.rtpChannels).attribute)
            if codec.encoding == .opus { media.attributes.append(SDPAttribute("fmtp", "\(codec.payloadType) \(fmtp)")) }
        }
        if let redundancy, let opus {
            media.attributes.append(RTPMap(payloadType: redundancy, encoding: "red", clockRate: 48_000, channels: 2).attribute)
            media.attributes.append(SDPAttribute("fmtp", "\(redundancy) \(opus)/\(opus)"))
        }
        for events in telephoneEvents {
            media.attributes.append(RTPMap(payloadType: events.payloadType, encoding: "telephone-event", clockRate: events.clockRate).attribute)
            media.attributes.append(SDPAttribute("fmtp", "\(events.payloadType) 0-15"))
        }
        media.attributes.append(SDPAttribute("ptime", String(capabilities.packetTime)))
        if local.plainRTP == nil {
            media.attributes.append(SDPAttribute("ice-ufrag", local.iceUfrag))
            media.attributes.append(SDPAttribute("ice-pwd", local.icePwd))
            media.attributes.append(SDPAttribute("ice-options", "trickle"))
            for candidate in local.candidates {
                let value = candidate.hasPrefix("candidate:") ? String(candidate.dropFirst("candidate:".count)) : candidate
                media.attributes.append(SDPAttribute("candidate", value))
            }
            if local.endOfCandidates { media.attributes.append(SDPAttribute("end-of-candidates")) }
        }
        switch keying {
        case let .sdes(cryptos):
            for crypto in cryptos { media.attributes.append(crypto.attribute) }
        case let .dtls(fingerprint, setup):
            media.attributes.append(SDPAttribute("fingerprint", fingerprint))
            media.attributes.append(SDPAttribute("setup", setup.rawValue))
        case .plain:
            break
        }
        if rtcpMux { media.attributes.append(SDPAttribute("rtcp-mux")) }
        // Without ICE, RTCP comes to the RTP port too, muxed or not (RFC 3605).
        if let plain = local.plainRTP { media.attributes.append(SDPAttribute("rtcp", String(plain.port))) }
        media.setDirection(local.direction)
        if let stream = local.stream {
            media.attributes.append(SDPAttribute("msid", "\(stream.streamID) \(stream.trackID)"))
            if let ssrc = stream.ssrc { media.attributes.append(SDPAttribute("ssrc", "\(ssrc) cname:\(stream.cname)")) }
        }
        var description = SessionDescription(origin: SDPOrigin(sessionID: sessionID, addressType: addressType, address: address),
                                             sessionName: "-", media: [media])
        if bundle, let mid {
            description.attributes.append(SDPAttribute("group", "BUNDLE \(mid)"))
        }
        if local.stream != nil { description.attributes.append(SDPAttribute("msid-semantic", " WMS *")) }
        return description
    }
}
