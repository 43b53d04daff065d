import AudioSession
import Clocks
import DTLS
import Foundation
import Media
import SDP

/// How a call's media is made from its offer and answer: keyed by DTLS (an association over
/// the call's ICE path) or by the SDES keys the SDP carried, with the negotiated payload types
/// and limits, on the audio session's devices (the call's own port on its bridge). Nothing here
/// keeps state: the leg calls it off its own actor and gets the media back as an input.
enum CallMediaFactory {
    /// Starts building a call's media over `agent` (a detached task; nothing is opened until it
    /// starts), with its DTLS association when the SDP keyed it by DTLS. The call's own audio
    /// (``CallNodeConfiguration/callAudio``) is asked for with `audio`.
    static func prepare(negotiated: NegotiatedAudio, over agent: any IcePath, configuration: CallNodeConfiguration,
                        certificate: DTLSCertificate, clock: MediaClock, systemSession: AudioSessionOwner<SystemOwned>?,
                        appSession: AudioSessionOwner<AppOwned>?, webPage: Bool, frameKeys: FrameKeys?, ssrc: UInt32? = nil,
                        audio: CallAudioRequest) throws -> (DTLSAssociation?, Task<PreparedMedia, any Error>) {
        var base = configuration.media
        if let ssrc { base.ssrc = ssrc }
        // Browsers take one redundant copy per packet (libwebrtc's RED), nodes up to three.
        if webPage { base.maximumRedundancyDepth = 1 }
        let own = try configuration.callAudio?(audio)
        let transport = IceMediaTransport(agent: agent)
        let association = try negotiated.dtls.map {
            try dtls($0, certificate: certificate, clock: configuration.clock, handshakeTimeout: configuration.dtlsHandshakeTimeout,
                     over: transport)
        }
        let standIn = configuration.audioStandIn, playbackOnly = configuration.playbackOnly
        let task = Task.detached {
            try await make(negotiated: negotiated, base: base, transport: transport, dtls: association, clock: clock,
                           systemSession: systemSession, appSession: appSession, standIn: standIn, own: own,
                           playbackOnly: playbackOnly, frameKeys: frameKeys)
        }
        return (association, task)
    }

    /// Makes the media and the call's bridge port do what the flow says (RFC 3264 hold): a call
    /// held here takes no microphone and plays nothing at the port, whatever arrives. Returns
    /// the error if the media could not follow.
    static func apply(_ flow: MediaFlow, port: BridgePortID?, media: (any MediaPath)?, systemSession: AudioSessionOwner<SystemOwned>?,
                      appSession: AudioSessionOwner<AppOwned>?, holdAudio: HoldAudio) async -> (any Error)? {
        if let port {
            let mode: BridgePortMode = flow.heldHere ? .held : .active
            if let systemSession { await systemSession.setMode(mode, of: port) }
            if let appSession { await appSession.setMode(mode, of: port) }
        }
        guard let media else { return nil }
        do {
            let hold = flow.heldHere && flow.sending ? try holdAudio.makeSource(format: media.captureFormat) : nil
            try await media.setDirection(sending: flow.sending, receiving: flow.receiving, holdAudio: hold)
            return nil
        } catch {
            return error
        }
    }

    /// A DTLS association over `transport` in the role the SDP settled, checking the
    /// peer's certificate against the fingerprint its SDP carried.
    static func dtls(_ dtls: NegotiatedDTLS, certificate dtlsCertificate: DTLSCertificate, clock timers: TimerClock,
                     handshakeTimeout: Duration, over transport: IceMediaTransport) throws -> DTLSAssociation {
        guard let fingerprint = DTLSFingerprint(sdp: dtls.remoteFingerprint) else {
            throw NegotiationError("the peer's a=fingerprint '\(dtls.remoteFingerprint)' is not a hash and hex digits")
        }
        let endpoint = try DTLSEndpoint(certificate: dtlsCertificate, role: dtls.setup == .active ? .client : .server,
                                        remoteFingerprint: fingerprint)
        let association = DTLSAssociation(endpoint: endpoint, handshakeTimeout: handshakeTimeout,
                                          clock: timers) { [weak transport] datagram in
            await transport?.send(datagram)
        }
        transport.setDTLSHandler { datagram in association.receive(datagram) }
        return association
    }

    /// A call's media actor on the session's devices, keyed by DTLS or by the SDES keys the
    /// offer and answer carried, with the negotiated payload types and limits.
    static func make(negotiated: NegotiatedAudio, base: MediaConfiguration, transport: IceMediaTransport,
                     dtls: DTLSAssociation?, clock: MediaClock,
                     systemSession: AudioSessionOwner<SystemOwned>?,
                     appSession: AudioSessionOwner<AppOwned>?,
                     standIn: (any AudioOwnerStandIn)? = nil, own: CallAudio? = nil,
                     playbackOnly: Bool = false, frameKeys: FrameKeys? = nil) async throws -> PreparedMedia {
        var keys: MediaKeys
        if negotiated.unencrypted {
            keys = .unencrypted  // plain RTP, as the offer and answer agreed (only where allowed)
        } else if let dtls {
            let exported = try await dtls.keys()
            keys = MediaKeys(outbound: exported.outbound, inbound: exported.inbound)
        } else {
            guard let suite = SRTPSuite(rawValue: negotiated.cryptoSuite) else {
                throw NegotiationError("unsupported SRTP suite \(negotiated.cryptoSuite)")
            }
            keys = MediaKeys(outbound: try SRTPKey(suite: suite, inlineKeyParameter: negotiated.localKey),
                             inbound: try SRTPKey(suite: suite, inlineKeyParameter: negotiated.remoteKey))
        }
        keys.frameEncryption = frameKeys
        var media = base
        media.encoding = negotiated.encoding
        media.payloadType = UInt8(negotiated.payloadType)
        media.audioLevelExtension = negotiated.audioLevelExtension.map(UInt8.init)
        if let pt = negotiated.telephoneEventPayloadType { media.telephoneEventPayloadType = UInt8(pt) }
        // A peer's odd choice (a static type, one already in use) means no redundancy, not a failed call.
        media.redundancyPayloadType = negotiated.encoding != .opus ? nil
            : negotiated.redundancyPayloadType.flatMap { media.isUsableRedundancyPayloadType($0) ? UInt8($0) : nil }
        if let limit = negotiated.maxSendBitrate { media.opus.bitrate = max(6_000, min(media.opus.bitrate, limit)) }
        media.opus.inbandFEC = negotiated.sendInbandFEC
        media.opus.discontinuousTransmission = negotiated.sendDTX
        let source: any AudioSource, sink: any AudioSink
        var port: BridgePortID?
        if let standIn {
            let endpoints = try await standIn.callEndpoints()
            source = endpoints.microphone
            sink = endpoints.output
        } else if playbackOnly, let systemSession {
            // No microphone in the playback category: the call sends silence.
            let output = try await systemSession.output()
            (source, sink, port) = (SilenceSource(), output, output.port.id)
        } else if playbackOnly, let appSession {
            let output = try await appSession.output()
            (source, sink, port) = (SilenceSource(), output, output.port.id)
        } else if let systemSession {
            // The call's own port on the session's bridge: it hears the whole microphone and is
            // summed with other calls on the output.
            let endpoints = try await systemSession.port()
            (source, sink, port) = (endpoints.source, endpoints.sink, endpoints.id)
        } else if let appSession {
            let endpoints = try await appSession.port()
            (source, sink, port) = (endpoints.source, endpoints.sink, endpoints.id)
        } else {
            throw NegotiationError("no audio session")
        }
        return PreparedMedia(path: try MediaActor(configuration: media, transport: transport, keys: keys,
                                                  source: own?.source ?? source, sink: own?.sink ?? sink, clock: clock),
                             port: port, recording: own?.recording, recordingSink: own?.sink as? WAVFileSink)
    }
}

/// A call's media, built, with its port on the session's bridge.
struct PreparedMedia: Sendable {
    let path: any MediaPath
    let port: BridgePortID?
    /// Where the call's own sink records, if it has one.
    let recording: String?
    /// That sink, when it is a WAV file (to hear if it fails).
    var recordingSink: WAVFileSink? = nil
}
