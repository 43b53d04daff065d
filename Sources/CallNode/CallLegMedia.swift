import AudioSession
import Calls
import Foundation
import DTLS
import ICE
import Logging
import Media
import Metrics
import SDP
import Signaling

/// A leg's ICE events, its media's keys (DTLS or SDES), building and starting its media, media events.
extension CallLeg {
    func watch(_ agent: any IcePath) {
        spawn { [weak self] in
            for await event in agent.events {
                await self?.iceEvent(event)
            }
        }
    }

    func iceEvent(_ event: IceEvent) async {
        guard !isTornDown else { return }
        switch event {
        case let .selectedPair(pair):
            mark("pair-selected")
            selectedLocalBase = pair.local.type == .host ? pair.local.address : pair.local.relatedAddress
            broadcaster.send(.selectedPair(uuid, SelectedPairInfo(localType: pair.local.type, remoteType: pair.remote.type,
                                                                   transport: pair.local.transport,
                                                                   local: "\(pair.local.address):\(pair.local.port)",
                                                                   remote: "\(pair.remote.address):\(pair.remote.port)")))
        case .stateChanged(.connected):
            mark("ice-connected")
            if state.phase.iceHasConnected == false {
                // DTLS starts on the pair at once, before the leg reports the connection.
                prepareMedia(iceConnected: true)
                await mediaConnected()
            } else {
                await legEvent(.iceConnected)
            }
        case .stateChanged(.disconnected):
            await legEvent(.iceDisconnected)
        case .stateChanged(.failed):
            if state.phase.iceHasConnected {
                // A pair that worked is gone (consent expired, RFC 7675): recover as from a
                // lost connection, by restarting ICE, instead of ending the call.
                logger.info("call \(uuid): the selected pair failed (consent expired); restarting ICE")
                await legEvent(.iceDisconnected)
            } else {
                await legEvent(.end(.failed("ICE failed: no candidate pair worked (try --stun or --turn)")))
            }
        default:
            break
        }
    }

    /// Starts building the call's media actor as soon as the offer and answer are done, off this
    /// actor and while the connectivity checks run, so that ICE connecting only has to start it.
    /// Nothing is opened until it starts. With DTLS-SRTP it waits for ICE to connect: the
    /// handshake runs over the selected pair, and a ClientHello sent before would only be lost
    /// and retransmitted a second later.
    func prepareMedia(iceConnected: Bool = false) {
        guard mediaPreparation == nil, let agent, let negotiated else { return }
        if negotiated.dtls != nil && !(iceConnected || state.phase.iceHasConnected) { return }
        var base = configuration.media
        let clock = self.clock
        // Browsers take one redundant copy per packet (libwebrtc's RED), nodes up to three.
        if origin == .webPage { base.maximumRedundancyDepth = 1 }
        let systemSession = self.systemSession, appSession = self.appSession, standIn = configuration.audioStandIn
        let playbackOnly = configuration.playbackOnly, frameKeys = self.frameKeys
        let own: CallAudio?
        do {
            own = try configuration.callAudio?(callAudioRequest())
        } catch {
            mediaPreparation = Task { throw error }
            return
        }
        let transport = IceMediaTransport(agent: agent)
        var association: DTLSAssociation?
        if let dtls = negotiated.dtls {
            do {
                association = try makeDTLS(dtls, over: transport)
            } catch {
                mediaPreparation = Task { throw error }
                return
            }
            self.dtls = association
            mark("dtls-started")
        }
        mediaPreparation = Task.detached { [association] in
            try await CallLeg.makeMedia(negotiated: negotiated, base: base, transport: transport, dtls: association, clock: clock,
                                     systemSession: systemSession, appSession: appSession, standIn: standIn, own: own,
                                     playbackOnly: playbackOnly, frameKeys: frameKeys)
        }
    }

    /// Who this call's own audio is for.
    func callAudioRequest() -> CallAudioRequest {
        let name: String = if origin == .webPage {
            "web-page"
        } else if let peer {
            store.contacts.withFingerprint(peer.hex)?.name ?? peer.short
        } else {
            target?.description ?? "unknown"
        }
        return CallAudioRequest(call: uuid, outgoing: outgoing, peerName: name, peer: peer, started: Date(),
                                format: AudioFormat(sampleRate: 48_000, channels: 1))
    }

    /// A DTLS association over `transport` in the role the SDP settled, checking the
    /// peer's certificate against the fingerprint its SDP carried.
    func makeDTLS(_ dtls: NegotiatedDTLS, over transport: IceMediaTransport) throws -> DTLSAssociation {
        guard let fingerprint = DTLSFingerprint(sdp: dtls.remoteFingerprint) else {
            throw NegotiationError("the peer's a=fingerprint '\(dtls.remoteFingerprint)' is not a hash and hex digits")
        }
        let endpoint = try DTLSEndpoint(certificate: dtlsCertificate, role: dtls.setup == .active ? .client : .server,
                                        remoteFingerprint: fingerprint)
        let timers = configuration.clock
        let clock = DTLSClock(now: { timers.now }, sleep: { try await timers.sleep(until: timers.now + $0) })
        let association = DTLSAssociation(endpoint: endpoint, handshakeTimeout: configuration.dtlsHandshakeTimeout,
                                          clock: clock) { [weak transport] datagram in
            await transport?.send(datagram)
        }
        transport.setDTLSHandler { datagram in association.receive(datagram) }
        return association
    }

    /// ICE is ready: build the media actor on the session's devices, report media connected
    /// (which fulfils the answer and, in system-owned mode, activates audio).
    func mediaConnected() async {
        guard !isTornDown, agent != nil, negotiated != nil else {
            failure = "ICE connected before the offer and answer completed"
            return
        }
        await legEvent(.iceConnected)
        prepareMedia()
        do {
            guard let preparation = mediaPreparation else { throw NegotiationError("media was not prepared") }
            let prepared = try await preparation.value
            let actor = prepared.path
            guard !isTornDown else { return }  // ended meanwhile; the actor never started
            media = actor
            bridgePort = prepared.port
            if let recording = prepared.recording { await manager.setRecording(recording, of: uuid) }
            if let group, let other = group { await node?.regroup(uuid, with: other) }
            mark("media-secured")
            if let negotiated = negotiated {
                let dtls = dtls
                let suite = dtls?.established?.suite.rawValue ?? negotiated.cryptoSuite
                broadcaster.send(.secured(uuid, MediaSecurity(
                    keyExchange: dtls == nil ? .sdes : .dtls, suite: suite, handshake: dtls?.handshakeTime,
                    peerFingerprint: negotiated.dtls?.remoteFingerprint, frameEncryption: frameKeys != nil,
                    securityCode: securityCode)))
            }
            spawn { [weak self] in
                for await event in actor.events {
                    await self?.mediaEvent(event)
                }
            }
        } catch {
            await legEvent(.end(.failed("media could not start: \(error)")))
            return
        }
        await legEvent(.mediaReady)
        do {
            try await manager.report(.mediaConnected(uuid))
        } catch {
            logger.warning("media connected for call \(uuid), but: \(error)")
        }
        if let appSession, await !appSession.isActive {
            // CallKit-free mode: this node is the one owner of activation.
            do {
                _ = try await appSession.activate()
                await node?.setAudioActive(true)
            } catch {
                await legEvent(.end(.failed("audio could not start: \(error)")))
                return
            }
        } else if appSession != nil {
            await node?.setAudioActive(true)
        }
        await startMediaIfReady()
    }

    /// Media starts once it is ready and the audio session is active, whichever comes last.
    func startMediaIfReady() async {
        guard await node?.audioActive == true else { return }
        await legEvent(.audioActivated)
    }

    /// Starts the call's media with the microphone as the leg's state says: a mute or hold set
    /// before media existed (while the call rang) holds from the first frame.
    func startMedia(microphoneMuted: Bool) async {
        guard !isTornDown, let media else { return }
        do {
            try await media.setMuted(microphoneMuted)
            try await media.start()
            mediaStarted = true
            let setup = ContinuousClock.now - began
            mark("media-started")
            broadcaster.send(.connected(uuid, setup: setup))
            broadcaster.send(.setup(uuid, setupSteps))
            if startMuted { _ = try? await manager.controller.request(.setMuted(call: uuid, muted: true)) }
        } catch {
            await legEvent(.end(.failed("audio could not start: \(error)")))
        }
    }

    func mediaEvent(_ event: MediaEvent) async {
        switch event {
        case let .statistics(statistics):
            // After the teardown's final figures, an older periodic one would undo them.
            if !isTornDown { broadcaster.send(.statistics(uuid, statistics)) }
        case let .dtmf(digit): broadcaster.send(.dtmf(uuid, digit))
        case .firstAudio:
            // The pooled agent this call may have taken is replaced now, not while it was
            // being set up.
            await node?.fillICEPool()
            broadcaster.send(.firstAudio(uuid, after: ContinuousClock.now - began))
        case .inboundStalled: await legEvent(.mediaStalled)
        case .inboundResumed: await legEvent(.mediaResumed)
        case let .playoutReset(reset): broadcaster.send(.playoutReset(uuid, reset))
        case .sourceEnded, .remoteEnded: break
        }
    }

    /// A call's media actor on the session's devices, keyed by DTLS or by the SDES keys the
    /// offer and answer carried, with the negotiated payload types and limits.
    nonisolated static func makeMedia(negotiated: NegotiatedAudio, base: MediaConfiguration, transport: IceMediaTransport,
                                              dtls: DTLSAssociation?, clock: MediaClock,
                                              systemSession: AudioSessionOwner<SystemOwned>?,
                                              appSession: AudioSessionOwner<AppOwned>?,
                                              standIn: (any AudioOwnerStandIn)? = nil, own: CallAudio? = nil,
                                              playbackOnly: Bool = false, frameKeys: FrameKeys? = nil) async throws -> PreparedMedia {
        var keys: MediaKeys
        if let dtls {
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
        media.payloadType = UInt8(negotiated.payloadType)
        if let pt = negotiated.telephoneEventPayloadType { media.telephoneEventPayloadType = UInt8(pt) }
        // A peer's odd choice (a static type, one already in use) means no redundancy, not a failed call.
        media.redundancyPayloadType = negotiated.redundancyPayloadType.flatMap { media.isUsableRedundancyPayloadType($0) ? UInt8($0) : nil }
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
                             port: port, recording: own?.recording)
    }

    /// Makes the media and the call's bridge port do what the flow says (RFC 3264 hold): a
    /// call held here takes no microphone and plays nothing at the port, whatever arrives.
    func apply(_ flow: MediaFlow) async -> (any Error)? {
        if let port = bridgePort {
            let mode: BridgePortMode = flow.heldHere ? .held : .active
            if let systemSession { await systemSession.setMode(mode, of: port) }
            if let appSession { await appSession.setMode(mode, of: port) }
        }
        guard let media else { return nil }
        do {
            let hold = flow.heldHere && flow.sending ? try configuration.holdAudio.makeSource(format: AudioFormat(sampleRate: 48_000, channels: 1)) : nil
            try await media.setDirection(sending: flow.sending, receiving: flow.receiving, holdAudio: hold)
            return nil
        } catch {
            return error
        }
    }
}

/// A call's media, built, with its port on the session's bridge.
struct PreparedMedia: Sendable {
    let path: any MediaPath
    let port: BridgePortID?
    /// Where the call's own sink records, if it has one.
    let recording: String?
}
