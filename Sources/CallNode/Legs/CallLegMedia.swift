import AudioSession
import CallCore
import Calls
import Foundation
import DTLS
import ICE
import Logging
import Media
import Metrics
import SDP
import Signaling

extension TransportAddress {
    init(_ candidate: IceCandidate) {
        self.init(address: candidate.address, port: Int(candidate.port))
    }
}

extension IceEndpoint {
    /// The peer's endpoint, if its port is one.
    init?(_ endpoint: TransportAddress) {
        guard let port = UInt16(exactly: endpoint.port) else { return nil }
        self.init(address: endpoint.address, port: port)
    }
}

/// A leg's ICE events, its media's keys (DTLS or SDES), building and starting its media, media events.
extension CallLeg {
    func iceEvent(_ event: IceEvent) async {
        switch event {
        case let .selectedPair(pair):
            mark("pair-selected")
            selectedLocalBase = pair.local.type == .host ? pair.local.address : pair.local.relatedAddress
            broadcaster.send(.selectedPair(uuid, SelectedPairInfo(localType: pair.local.type, remoteType: pair.remote.type,
                                                                   transport: pair.local.transport,
                                                                   local: "\(pair.local.address):\(pair.local.port)",
                                                                   remote: "\(pair.remote.address):\(pair.remote.port)",
                                                                   usesICE: !(await ice.usesPlainRTP))))
        case .stateChanged(.connected):
            mark("ice-connected")
            await legEvent(.iceConnected)
        case .stateChanged(.disconnected):
            await legEvent(.iceDisconnected)
        case .stateChanged(.failed):
            if state.phase.iceHasConnected {
                logger.info("call \(uuid): the selected pair failed (consent expired); restarting ICE")
            }
            await legEvent(.iceFailed)
        default:
            break
        }
    }

    /// Tells the peer the pair this side's checks found (the state says when: while the call
    /// sets up its path).
    func tellPeerPath() async {
        guard let agent = await ice.agent, let pair = await agent.selectedPair else { return }
        let ufrag = await agent.localCredentials.ufrag
        await send(.pathFound(FoundPath(ufrag: ufrag, local: TransportAddress(pair.local), remote: TransportAddress(pair.remote))))
    }

    /// Takes the pair the peer's checks found, unless this round has found one (or the pair
    /// is not this round's).
    func adoptPeerPath(_ path: FoundPath) async {
        guard let agent = await ice.agent, let local = IceEndpoint(path.remote), let remote = IceEndpoint(path.local) else { return }
        if await agent.adoptPeerPair(local: local, remote: remote, peerUfrag: path.ufrag) {
            logger.info("call \(uuid): took the pair the peer's checks found (\(local) <-> \(remote)); this side's own had not")
            mark("peer-pair-taken")
        }
    }

    /// Starts building the call's media actor, off this actor (the state says when: with SDES
    /// while the connectivity checks run, with DTLS once ICE connected, since the handshake
    /// runs over the selected pair). Nothing is opened until it starts. The built media, or
    /// why it could not be built, comes back as ``LegInput/mediaPrepared(_:)``: nothing waits
    /// for the handshake (a hang-up does not).
    func prepareMedia() async {
        guard mediaPreparation == nil, let agent = await ice.agent, let negotiated else { return }
        // A SIP caller is named by its address (sip:alice@example.org), as Recents names it.
        let name = peerKind == .webPage ? "web-page" : peer.map { store.contacts.withFingerprint($0.hex)?.name ?? $0.short }
            ?? target?.description ?? dialectHandles.withLock { $0[uuid] } ?? "unknown"
        do {
            let (association, preparation) = try CallMediaFactory.prepare(
                negotiated: negotiated, over: agent, configuration: configuration, certificate: dtlsCertificate, clock: clock,
                systemSession: systemSession, appSession: appSession, webPage: peerKind == .webPage, frameKeys: frameKeys,
                ssrc: negotiation.announcedSSRC,
                audio: CallAudioRequest(call: uuid, outgoing: outgoing, peerName: name, peer: peer, started: configuration.wallClock(),
                                        format: AudioFormat(sampleRate: 48_000, channels: 1), codecRate: negotiated.encoding.clockRate))
            if association != nil { mark("dtls-started") }
            dtls = association
            mediaPreparation = preparation
            spawn { [weak self] in
                do {
                    self?.post(.mediaPrepared(.success(try await preparation.value)))
                } catch {
                    self?.post(.mediaPrepared(.failure(error)))
                }
            }
        } catch {
            post(.mediaPrepared(.failure(error)))
        }
    }

    /// The media is built and keyed: the call takes it (its bridge port, its recording, its
    /// conference), and the state says when it counts as connected (once ICE is).
    func mediaPrepared(_ result: Result<PreparedMedia, any Error>) async {
        let prepared: PreparedMedia
        switch result {
        case let .success(made): prepared = made
        case let .failure(error):
            await legEvent(.end(.failed("media could not start: \(error)")))
            return
        }
        let actor = prepared.path
        media = actor
        bridgePort = prepared.port
        // A group's key that changed while the media was being built.
        if let keys = frames.keys { try? await actor.setFrameKeys(outbound: keys.outbound, inbound: keys.inbound) }
        if let recording = prepared.recording {
            await manager.setRecording(recording, of: uuid)
            // A recording that stops early (a full disk) is said, and the call goes on.
            if let sink = prepared.recordingSink {
                let broadcaster = self.broadcaster, manager = self.manager, logger = self.logger, uuid = self.uuid
                sink.onFailure { [weak self] reason in
                    logger.error("call \(uuid): \(reason)")
                    broadcaster.send(.recordingFailed(uuid, path: recording, reason: reason))
                    // A child of the call (the failure comes on a media thread).
                    self?.spawn { await manager.setRecordingProblem(reason, of: uuid) }
                }
            }
        }
        await report(.mediaPort(prepared.port))
        if let group, let other = group { await report(.group(other)) }
        spawn { [weak self] in
            for await event in actor.events {
                guard let self, self.post(media: event) else { return }
            }
        }
        await legEvent(.mediaReady)
    }

    /// Queues a media event as the leg's input. Not inlined: the input is built on the thread's
    /// stack, not kept in the frame of the task that waits for the media's events all call long.
    @inline(never)
    nonisolated func post(media event: MediaEvent) -> Bool {
        post(.media(event))
    }

    /// ICE connected and the media is keyed: tell the event stream how it is secured, the
    /// manager that media connected (which fulfils the answer and, in system-owned mode,
    /// activates audio), and the router that the call waits for the audio session.
    func reportMediaConnected() async {
        mark("media-secured")
        reportSecured()
        do {
            try await manager.report(.mediaConnected(uuid))
        } catch {
            logger.warning("media connected for call \(uuid), but: \(error)")
        }
        // Media starts when the router says the audio session is active: at once if it is,
        // when its one owner has activated it if not.
        await report(.awaitingAudio)
    }

    /// Tells the event stream how the call's media is keyed (once: early media told it first).
    func reportSecured() {
        guard !securityReported, let negotiated else { return }
        securityReported = true
        let dtls = dtls
        let suite = dtls?.established?.suite.rawValue ?? negotiated.cryptoSuite
        broadcaster.send(.secured(uuid, MediaSecurity(
            keyExchange: dtls == nil ? .sdes : .dtls, suite: suite, handshake: dtls?.handshakeTime,
            peerFingerprint: negotiated.dtls?.remoteFingerprint, frameEncryption: frameKeys != nil,
            securityCode: securityCode, unencrypted: negotiated.unencrypted)))
    }

    /// Starts the call's media with the microphone as the leg's state says: a mute or hold set
    /// before media existed (while the call rang) holds from the first frame.
    func startMedia(microphoneMuted: Bool) async {
        guard let media else { return }
        do {
            try await media.setMuted(microphoneMuted)
            // Early media started it already (the callee's announcements, or a greeting).
            if !mediaStarted { try await media.start() }
            mediaStarted = true
            let setup = configuration.clock.now - began
            mark("media-started")
            broadcaster.send(.connected(uuid, setup: setup))
            broadcaster.send(.setup(uuid, setupSteps))
            if startMuted { _ = try? await manager.controller.request(.setMuted(call: uuid, muted: true)) }
        } catch {
            post(.event(.end(.failed("audio could not start: \(error)")), done: nil))
        }
    }

    func mediaEvent(_ event: MediaEvent) async {
        switch event {
        case let .statistics(statistics):
            // The leg takes no input after its teardown, whose final figures an older periodic
            // one would undo.
            broadcaster.send(.statistics(uuid, statistics))
            quality.take(statistics, at: configuration.clock.now)
        case let .dtmf(digit): broadcaster.send(.dtmf(uuid, digit))
        case .firstAudio:
            // The pooled agent this call may have taken is replaced now, not while it was
            // being set up.
            icePool.fill()
            broadcaster.send(.firstAudio(uuid, after: configuration.clock.now - began))
        case .inboundStalled: await legEvent(.mediaStalled)
        case .inboundResumed: await legEvent(.mediaResumed)
        case let .playoutReset(reset): broadcaster.send(.playoutReset(uuid, reset))
        case .sourceEnded, .remoteEnded: break
        }
    }

    /// Makes the media and the call's bridge port do what the flow says (RFC 3264 hold).
    func apply(_ flow: MediaFlow) async -> (any Error)? {
        await CallMediaFactory.apply(flow, port: bridgePort, media: media, systemSession: systemSession, appSession: appSession,
                                     holdAudio: configuration.holdAudio)
    }
}
