import AudioSession
import Calls
import Foundation
import DTLS
import ICE
import Logging
import Media
import Metrics
import SDP
import ServiceLifecycle
import Signaling
import Locking

/// ICE events, the media's keys (DTLS or SDES), building and starting media, media events.
extension CallNode {
    // MARK: - ICE and media

    func watch(_ uuid: UUID, _ agent: any IcePath) {
        own(uuid, Task { [weak self] in
            for await event in agent.events {
                await self?.iceEvent(uuid, event)
            }
        })
    }

    func iceEvent(_ uuid: UUID, _ event: IceEvent) async {
        guard legs[uuid] != nil else { return }
        switch event {
        case let .selectedPair(pair):
            broadcaster.send(.selectedPair(uuid, SelectedPairInfo(localType: pair.local.type, remoteType: pair.remote.type,
                                                                   transport: pair.local.transport,
                                                                   local: "\(pair.local.address):\(pair.local.port)",
                                                                   remote: "\(pair.remote.address):\(pair.remote.port)")))
        case .stateChanged(.connected):
            if legs[uuid]?.state.phase.iceHasConnected == false {
                await mediaConnected(uuid)
            } else {
                await legEvent(uuid, .iceConnected)
            }
        case .stateChanged(.disconnected):
            await legEvent(uuid, .iceDisconnected)
        case .stateChanged(.failed):
            await legEvent(uuid, .end(.failed("ICE failed: no candidate pair worked (try --stun or --turn)")))
        default:
            break
        }
    }

    /// Starts building the call's media actor as soon as the offer and answer are done, off this
    /// actor and while the connectivity checks run, so that ICE connecting only has to start it.
    /// Nothing is opened until it starts. With DTLS-SRTP it waits for ICE to connect: the
    /// handshake runs over the selected pair, and a ClientHello sent before would only be lost
    /// and retransmitted a second later.
    func prepareMedia(_ uuid: UUID) {
        guard let leg = legs[uuid], leg.mediaPreparation == nil, let agent = leg.agent, let negotiated = leg.negotiated else { return }
        if negotiated.dtls != nil && !leg.state.phase.iceHasConnected { return }
        let base = configuration.media, clock = self.clock
        let systemSession = self.systemSession, appSession = self.appSession
        let transport = IceMediaTransport(agent: agent)
        var association: DTLSAssociation?
        if let dtls = negotiated.dtls {
            do {
                association = try makeDTLS(dtls, over: transport)
            } catch {
                legs[uuid]?.mediaPreparation = Task { throw error }
                return
            }
            legs[uuid]?.dtls = association
        }
        legs[uuid]?.mediaPreparation = Task.detached { [association] in
            try await Self.makeMedia(negotiated: negotiated, base: base, transport: transport, dtls: association, clock: clock,
                                     systemSession: systemSession, appSession: appSession)
        }
    }

    /// A DTLS association over `transport` in the role the SDP settled, checking the
    /// peer's certificate against the fingerprint its SDP carried.
    func makeDTLS(_ dtls: NegotiatedDTLS, over transport: IceMediaTransport) throws -> DTLSAssociation {
        guard let fingerprint = DTLSFingerprint(sdp: dtls.remoteFingerprint) else {
            throw NegotiationError("the peer's a=fingerprint '\(dtls.remoteFingerprint)' is not a hash and hex digits")
        }
        let endpoint = try DTLSEndpoint(certificate: dtlsCertificate, role: dtls.setup == .active ? .client : .server,
                                        remoteFingerprint: fingerprint)
        let association = DTLSAssociation(endpoint: endpoint, handshakeTimeout: configuration.dtlsHandshakeTimeout) { [weak transport] datagram in
            await transport?.send(datagram)
        }
        transport.setDTLSHandler { datagram in association.receive(datagram) }
        return association
    }

    nonisolated static func makeMedia(negotiated: NegotiatedAudio, base: MediaConfiguration, transport: IceMediaTransport,
                                              dtls: DTLSAssociation?, clock: MediaClock,
                                              systemSession: AudioSessionOwner<SystemOwned>?,
                                              appSession: AudioSessionOwner<AppOwned>?) async throws -> any MediaPath {
        let keys: MediaKeys
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
        var media = base
        media.payloadType = UInt8(negotiated.payloadType)
        if let pt = negotiated.telephoneEventPayloadType { media.telephoneEventPayloadType = UInt8(pt) }
        // A peer's odd choice (a static type, one already in use) means no redundancy, not a failed call.
        media.redundancyPayloadType = negotiated.redundancyPayloadType.flatMap { media.isUsableRedundancyPayloadType($0) ? UInt8($0) : nil }
        if let limit = negotiated.maxSendBitrate { media.opus.bitrate = max(6_000, min(media.opus.bitrate, limit)) }
        media.opus.inbandFEC = negotiated.sendInbandFEC
        media.opus.discontinuousTransmission = negotiated.sendDTX
        let source: any AudioSource, sink: any AudioSink
        if let systemSession {
            source = try await systemSession.microphone()
            sink = try await systemSession.output()
        } else if let appSession {
            source = try await appSession.microphone()
            sink = try await appSession.output()
        } else {
            throw NegotiationError("no audio session")
        }
        return try MediaActor(configuration: media, transport: transport, keys: keys,
                              source: source, sink: sink, clock: clock)
    }

    /// ICE is ready: build the media actor on the session's devices, report media connected
    /// (which fulfils the answer and, in system-owned mode, activates audio).
    func mediaConnected(_ uuid: UUID) async {
        guard let leg = legs[uuid], leg.agent != nil, leg.negotiated != nil else {
            legs[uuid]?.failure = "ICE connected before the offer and answer completed"
            return
        }
        await legEvent(uuid, .iceConnected)
        prepareMedia(uuid)
        do {
            guard let preparation = legs[uuid]?.mediaPreparation else { throw NegotiationError("media was not prepared") }
            let actor = try await preparation.value
            guard legs[uuid] != nil else { return }  // ended meanwhile; the actor never started
            legs[uuid]?.media = actor
            if let negotiated = legs[uuid]?.negotiated {
                let dtls = legs[uuid]?.dtls
                let suite = dtls?.established?.suite.rawValue ?? negotiated.cryptoSuite
                broadcaster.send(.secured(uuid, MediaSecurity(
                    keyExchange: dtls == nil ? .sdes : .dtls, suite: suite, handshake: dtls?.handshakeTime,
                    peerFingerprint: negotiated.dtls?.remoteFingerprint)))
            }
            own(uuid, Task { [weak self] in
                for await event in actor.events {
                    await self?.mediaEvent(uuid, event)
                }
            })
        } catch {
            await legEvent(uuid, .end(.failed("media could not start: \(error)")))
            return
        }
        await legEvent(uuid, .mediaReady)
        do {
            try await manager.report(.mediaConnected(uuid))
        } catch {
            logger.warning("media connected for call \(uuid), but: \(error)")
        }
        if let appSession, await !appSession.isActive {
            // CallKit-free mode: this node is the one owner of activation.
            do {
                _ = try await appSession.activate()
                audioActive = true
            } catch {
                await legEvent(uuid, .end(.failed("audio could not start: \(error)")))
                return
            }
        } else if appSession != nil {
            audioActive = true
        }
        await startMediaIfReady(uuid)
    }

    /// Media starts once it is ready and the audio session is active, whichever comes last.
    func startMediaIfReady(_ uuid: UUID) async {
        guard audioActive else { return }
        await legEvent(uuid, .audioActivated)
    }

    /// Starts the call's media with the microphone as the leg's state says: a mute or hold set
    /// before media existed (while the call rang) holds from the first frame.
    func startMedia(_ uuid: UUID, microphoneMuted: Bool) async {
        guard let leg = legs[uuid], let media = leg.media else { return }
        do {
            try await media.setMuted(microphoneMuted)
            try await media.start()
            let setup = ContinuousClock.now - leg.began
            setupTimer.recordNanoseconds(Int64(setup.components.seconds) * 1_000_000_000 + setup.components.attoseconds / 1_000_000_000)
            broadcaster.send(.connected(uuid, setup: setup))
            if leg.startMuted { _ = try? await manager.controller.request(.setMuted(call: uuid, muted: true)) }
        } catch {
            await legEvent(uuid, .end(.failed("audio could not start: \(error)")))
        }
    }

    func mediaEvent(_ uuid: UUID, _ event: MediaEvent) async {
        switch event {
        case let .statistics(statistics): broadcaster.send(.statistics(uuid, statistics))
        case let .dtmf(digit): broadcaster.send(.dtmf(uuid, digit))
        case .firstAudio:
            // The pooled agent this call may have taken is replaced now, not while it was
            // being set up.
            fillICEPool()
            if let began = legs[uuid]?.began { broadcaster.send(.firstAudio(uuid, after: ContinuousClock.now - began)) }
        case .inboundStalled: await legEvent(uuid, .mediaStalled)
        case .inboundResumed: await legEvent(uuid, .mediaResumed)
        case let .playoutReset(reset): broadcaster.send(.playoutReset(uuid, reset))
        case .sourceEnded, .remoteEnded: break
        }
    }
}
