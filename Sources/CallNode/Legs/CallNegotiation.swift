import Foundation
import Media
import SDP

/// One call's offers and answers as a plain value: what this side offered last, what was
/// agreed, and how later offers (ICE restarts, holds, resumes) keep the media as it is.
///
/// It writes and reads SDP and checks it; it does no I/O and holds no ICE agent: the leg gives
/// it this side's ICE parameters (``LocalAudioParameters``) and sends what it returns.
struct CallNegotiation: Sendable {
    /// What this node offers: from its configuration, adjusted for the peer.
    let base: AudioCapabilities
    let peerKind: DialectTraits.Peer
    /// Frames encrypted end to end (a page then goes without redundancy).
    let encryptsFrames: Bool
    /// The SSRC this side's SDP announces to a room (a media server drops an SSRC it was not
    /// told of); the call's media sends with it.
    let announcedSSRC: UInt32?
    /// This side's last offer.
    private(set) var offer: SessionDescription?
    /// The caller's answer to the first offer (its SDP origin is what its own later offers continue).
    private(set) var localAnswer: SessionDescription?
    /// What this side's later offer (a restart's, a hold's or a resume's) was written with, for its answer.
    private var reofferCapabilities: AudioCapabilities?
    /// The media agreed, once the first offer was answered.
    private(set) var negotiated: NegotiatedAudio?

    init(configuration: CallNodeConfiguration, peerKind: DialectTraits.Peer, mediaEncryption: MediaEncryption = .required,
         codecs: [AudioEncoding] = [.opus]) {
        var capabilities = AudioCapabilities()
        capabilities.codecs = codecs.isEmpty ? [.opus] : codecs
        let media = configuration.media
        capabilities.opusPayloadType = Int(media.payloadType)
        capabilities.maxAverageBitrate = media.opus.bitrate
        capabilities.packetTime = Int(media.opus.frameDuration / .milliseconds(1))
        capabilities.useDTX = media.opus.discontinuousTransmission
        capabilities.telephoneEventPayloadType = Int(media.telephoneEventPayloadType)
        capabilities.keyExchange = configuration.keyExchange
        capabilities.mediaEncryption = mediaEncryption
        base = capabilities
        self.peerKind = peerKind
        encryptsFrames = configuration.frameEncryption != .off
        announcedSSRC = peerKind == .room ? UInt32.random(in: 1...UInt32.max) : nil
    }

    /// The capabilities for the call's peer: a web page gets DTLS whatever this node's own
    /// preference (browsers speak nothing else), and WebRTC's stream ids in `local`.
    func capabilities(local: inout LocalAudioParameters) -> AudioCapabilities {
        var capabilities = base
        if peerKind == .room {
            // A media server speaks WebRTC as browsers do: DTLS only.
            capabilities.keyExchange = .dtls
            local.stream = LocalStream(streamID: "callnode", trackID: "callnode-audio", ssrc: announcedSSRC, cname: "callnode")
            // The room tells who talks from each packet's audio level (RFC 6464).
            capabilities.audioLevelExtension = 1
        }
        if peerKind == .webPage {
            capabilities.keyExchange = .dtls
            // A browser's encoded transform sees its RED payload whole, not frame by frame:
            // with frames encrypted end to end, calls with pages go without redundancy.
            if encryptsFrames { capabilities.redundancyPayloadType = nil }
            local.stream = LocalStream(streamID: "callnode", trackID: "callnode-audio", cname: "callnode")
        }
        return capabilities
    }

    /// The capabilities of a later offer for a running call (a restart's, a hold's): its media
    /// as it was agreed, whichever side offered first — payload types, key exchange, the SDES
    /// suite and key — and the DTLS role the first exchange settled (RFC 5763 §5).
    func runningCallCapabilities(_ current: NegotiatedAudio, local: inout LocalAudioParameters) -> AudioCapabilities {
        if let settled = current.dtls?.setup { local.offerSetup = settled }
        var capabilities = self.capabilities(local: &local)
        capabilities.codecs = [current.encoding]
        if current.encoding == .opus {
            capabilities.opusPayloadType = current.payloadType
            capabilities.telephoneEventPayloadType = current.telephoneEventPayloadType
        } else {
            // G.711's events on its 8 kHz clock, on the payload type agreed (or none).
            if let agreed = current.telephoneEventPayloadType { capabilities.narrowbandTelephoneEventPayloadType = agreed }
            capabilities.telephoneEventPayloadType = current.telephoneEventPayloadType
        }
        capabilities.redundancyPayloadType = current.redundancyPayloadType
        if current.unencrypted {
            // The call went without SRTP (its peer takes none): its later offers stay plain RTP.
            capabilities.mediaEncryption = .off
            return capabilities
        }
        capabilities.keyExchange = current.dtls == nil ? .sdes : .dtls
        if current.dtls == nil {
            capabilities.cryptoSuites = [current.cryptoSuite]
            local.keys = [current.cryptoSuite: current.localKey]
        }
        return capabilities
    }

    // MARK: - The first exchange

    /// This side's first offer (the leg adds what rides in it, such as frame key shares, with
    /// ``record(offer:)``).
    ///
    /// `unencrypted`: plain RTP, whatever the node's key exchange (the peer refused SRTP and the
    /// dialect lets the call go without it).
    func firstOffer(local: LocalAudioParameters, unencrypted: Bool = false) -> SessionDescription {
        var local = local
        var capabilities = capabilities(local: &local)
        if unencrypted { capabilities.mediaEncryption = .off }
        return OfferAnswer.offer(sessionID: Self.sessionID(), capabilities: capabilities, local: local)
    }

    mutating func record(offer: SessionDescription) {
        self.offer = offer
    }

    /// The answer to the peer's first offer and the media it agrees (not kept until
    /// ``agree(_:answer:)``: the leg may still refuse it).
    func answer(first offer: SessionDescription, local: LocalAudioParameters) throws -> (SessionDescription, NegotiatedAudio) {
        var local = local
        return try OfferAnswer.answer(to: offer, sessionID: Self.sessionID(), capabilities: capabilities(local: &local), local: local)
    }

    /// The first exchange is done: `negotiated` is the call's media (`answer`: this side's).
    mutating func agree(_ negotiated: NegotiatedAudio, answer: SessionDescription? = nil) {
        self.negotiated = negotiated
        if let answer { localAnswer = answer }
    }

    /// What an answer to this side's offer means.
    enum Answered {
        /// The first offer's answer: the call's media.
        case first(NegotiatedAudio)
        /// A later offer's: the same media; `iceChanged` after a restart (new credentials).
        case later(NegotiatedAudio, iceChanged: Bool)
    }

    /// Reads the peer's answer to this side's last offer; a later one must keep the media.
    mutating func accept(answer: SessionDescription) throws -> Answered {
        guard let offer else { throw NegotiationError("an answer came to no offer of ours") }
        let next = try OfferAnswer.accept(answer: answer, to: offer, capabilities: reofferCapabilities ?? base)
        guard let current = negotiated else { return .first(next) }
        try Self.checkSameMedia(next, as: current)
        negotiated = next
        return .later(next, iceChanged: next.remoteIceUfrag != current.remoteIceUfrag || next.remoteIcePwd != current.remoteIcePwd)
    }

    // MARK: - Later exchanges

    /// An offer for the running call with `local`'s ICE (new credentials for a restart) and
    /// direction: the same keys, DTLS role and payload types; the SDP origin continued.
    mutating func laterOffer(local: LocalAudioParameters) throws -> SessionDescription {
        guard let previous = offer ?? localAnswer else { throw NegotiationError("the call has no offer to follow") }
        var local = local
        let capabilities = negotiated.map { runningCallCapabilities($0, local: &local) } ?? self.capabilities(local: &local)
        var next = OfferAnswer.offer(sessionID: previous.origin.sessionID, capabilities: capabilities, local: local)
        next.origin.sessionVersion = max(previous.origin.sessionVersion, offer?.origin.sessionVersion ?? 0) + 1
        offer = next
        reofferCapabilities = capabilities
        return next
    }

    /// Whether the peer's later `offer` restarts ICE (new credentials); it must keep the media.
    func restarts(_ offer: SessionDescription, local: LocalAudioParameters) throws -> Bool {
        guard let current = negotiated else { throw NegotiationError("a new offer came before the first was answered") }
        var local = local
        let peek = try OfferAnswer.answer(to: offer, sessionID: Self.sessionID(), capabilities: capabilities(local: &local), local: local).negotiated
        try Self.checkSameMedia(peek, as: current)
        return peek.remoteIceUfrag != current.remoteIceUfrag || peek.remoteIcePwd != current.remoteIcePwd
    }

    /// The answer to the peer's later offer, which becomes what is agreed.
    mutating func answer(later offer: SessionDescription, local: LocalAudioParameters, outgoing: Bool) throws -> (SessionDescription, NegotiatedAudio) {
        var local = local
        let (answer, agreed) = try OfferAnswer.answer(to: offer, sessionID: Self.sessionID(), capabilities: capabilities(local: &local), local: local)
        negotiated = agreed
        if outgoing { localAnswer = answer }
        return (answer, agreed)
    }

    /// A later offer or answer may change ICE, not the media: the same suite and keys, the
    /// same payload types.
    static func checkSameMedia(_ next: NegotiatedAudio, as current: NegotiatedAudio) throws {
        guard next.cryptoSuite == current.cryptoSuite, next.localKey == current.localKey, next.remoteKey == current.remoteKey else {
            throw NegotiationError("a new offer or answer may not change the SRTP keys of a running call")
        }
        guard next.dtls == current.dtls else {
            throw NegotiationError("a new offer or answer may not change the DTLS certificate or role of a running call")
        }
        guard next.payloadType == current.payloadType else {
            throw NegotiationError("a new offer or answer may not change the Opus payload type of a running call")
        }
    }

    static func sessionID() -> String { String(UInt64.random(in: 1...UInt64(Int64.max))) }
}
