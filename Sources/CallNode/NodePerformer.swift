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

/// The performer (CallKit's provider delegate) and each call's state machine: actions from the
/// call manager, leg events in, leg actions out, the one ending of a call.
extension CallNode {
    // MARK: - The performer

    func handle(_ request: ProviderRequest) async {
        switch request {
        case let .perform(action):
            await perform(action)
        case let .timedOut(action):
            await legEvent(action.action.callUUID, .end(.actionTimedOut("\(action.action.kind) timed out")))
        case let .callEnded(uuid, reason):
            await legEvent(uuid, .end(.endedByManager(reason)))
        case .didActivate:
            audioActive = true
            for uuid in Array(legs.keys) { await startMediaIfReady(uuid) }
        case .didDeactivate:
            audioActive = false
        }
    }

    func perform(_ provider: ProviderAction) async {
        let uuid = provider.action.callUUID
        switch provider.action {
        case .start:
            guard legs[uuid] != nil else {
                try? await manager.report(.failed(provider.id, reason: "no such call"))
                return
            }
            legs[uuid]?.startAction = provider.id
            if let connection = legs[uuid]?.connection {
                // A session call: the join already made the connection.
                _ = await dialed(uuid, connection)
            } else {
                dial(uuid)
            }
        case .answer:
            await legEvent(uuid, .answering)
            do {
                try await sendOffer(uuid)
            } catch {
                legs[uuid]?.failure = "answering failed: \(error)"
                try? await manager.report(.failed(provider.id, reason: "\(error)"))
            }
        case .end:
            // Ending a call that still rings here declines it (the leg's state knows).
            await legEvent(uuid, .end(.hangUp))
            try? await manager.report(.fulfilled(provider.id))
        case let .setHeld(_, onHold):
            await legEvent(uuid, .setHeld(onHold))
            // The call is held here before the peer hears of it, so whoever sees the remote hold
            // (and answers it, say, by resuming) finds this side's state already changed.
            try? await manager.report(.fulfilled(provider.id))
            if let connection = legs[uuid]?.connection { try? await connection.send(.hold(onHold), call: uuid) }
        case let .setMuted(_, muted):
            let before = legs[uuid]?.state.muted ?? false
            if let error = await legEvent(uuid, .setMuted(muted)) {
                await legEvent(uuid, .setMuted(before))
                try? await manager.report(.failed(provider.id, reason: "\(error)"))
            } else {
                try? await manager.report(.fulfilled(provider.id))
            }
        case let .playDTMF(_, digits):
            do {
                try await legs[uuid]?.media?.sendDTMF(digits)
                try? await manager.report(.fulfilled(provider.id))
            } catch {
                try? await manager.report(.failed(provider.id, reason: "\(error)"))
            }
        case .setGroup:
            try? await manager.report(.fulfilled(provider.id))
        }
    }


    // MARK: - Ending

    func connectionClosed(_ uuid: UUID, error: (any Error)?) async {
        guard legs[uuid] != nil else { return }
        let detail = error.map { "\($0)" } ?? "the signaling connection closed"
        // Recorded first: failing the start action makes the manager end the call, and that
        // end may be handled before this one.
        let failure = legs[uuid]?.failure ?? detail
        legs[uuid]?.failure = failure
        if let action = legs[uuid]?.startAction, legs[uuid]?.connection == nil {
            try? await manager.report(.failed(action, reason: detail))
        }
        await legEvent(uuid, .end(.signalingClosed(detail)))
    }

    // MARK: - The leg's state machine

    /// Feeds the call's state machine and performs what it returns, in order. Returns the
    /// error of a microphone change that failed (a device that would not reopen).
    @discardableResult
    func legEvent(_ uuid: UUID, _ event: LegEvent) async -> (any Error)? {
        guard var state = legs[uuid]?.state else { return nil }
        let actions = state.handle(event, now: configuration.clock.now)
        legs[uuid]?.state = state
        var failure: (any Error)?
        for action in actions {
            switch action {
            case let .send(message):
                guard let connection = legs[uuid]?.connection else { continue }
                try? await connection.send(message, call: message == .keepAlive ? nil : uuid)
            case let .arm(timer, delay):
                arm(uuid, timer, after: delay)
            case let .cancel(timer):
                legs[uuid]?.timers.removeValue(forKey: timer)?.task.cancel()
            case let .setMicrophone(muted):
                do { try await legs[uuid]?.media?.setMuted(muted) } catch { failure = failure ?? error }
            case let .startMedia(muted):
                await startMedia(uuid, microphoneMuted: muted)
            case .restartICE:
                do { try await restart(uuid) } catch { restartFailed(uuid, error) }
            case .reportConnectionLost:
                logger.info("call \(uuid): connection lost")
                try? await manager.report(.connectionLost(uuid))
                broadcaster.send(.connectionLost(uuid))
            case .reportConnectionRestored:
                logger.info("call \(uuid): connection restored")
                try? await manager.report(.connectionRestored(uuid))
                broadcaster.send(.connectionRestored(uuid))
            case .tearDown:
                await teardown(uuid)
            case let .reportEnded(reason):
                try? await manager.report(.callEnded(uuid, reason))
            }
        }
        return failure
    }

    /// Arms a leg timer on the node's clock; its firing comes back as an event.
    func arm(_ uuid: UUID, _ timer: LegTimer, after delay: Duration) {
        let clock = configuration.clock
        let deadline = clock.now + delay
        timerGeneration += 1
        let generation = timerGeneration
        let task = Task { [weak self] in
            do { try await clock.sleep(until: deadline) } catch { return }
            await self?.timerFired(uuid, timer, generation: generation)
        }
        legs[uuid]?.timers[timer]?.task.cancel()
        legs[uuid]?.timers[timer] = (generation, task)
    }

    func timerFired(_ uuid: UUID, _ timer: LegTimer, generation: UInt64) async {
        guard legs[uuid]?.timers[timer]?.generation == generation else { return }
        legs[uuid]?.timers[timer] = nil
        await legEvent(uuid, .timerFired(timer))
    }

    /// Stops the call's media and ICE and closes its signaling (the leg's state has ended).
    func teardown(_ uuid: UUID) async {
        guard let leg = legs.removeValue(forKey: uuid) else { return }
        let duration = leg.state.connectedSince.map { configuration.clock.now - $0 }
        var detail: String?
        if case let .ended(end) = leg.state.phase { detail = end.detail }
        endDetails[uuid] = (leg.failure ?? detail, duration)
        for (_, timer) in leg.timers { timer.task.cancel() }
        for task in leg.tasks { task.cancel() }
        leg.ice?.cancel()
        leg.mediaPreparation?.cancel()
        // close_notify goes out while the path is still there: a browser sees the end at once.
        await leg.dtls?.close()
        await leg.media?.stop()
        await leg.agent?.close()
        leg.connection?.close()
        leg.connectionTask?.cancel()
        fillICEPool()
        if legs.isEmpty, let appSession, await appSession.isActive {
            try? await appSession.deactivate()
            audioActive = false
        }
    }

    func managerEvent(_ event: CallEvent) async {
        switch event {
        case let .callEnded(uuid, reason):
            // Ends the manager performed itself (ring timeout, failed answer) reach us here too;
            // the leg's state ends the call once, whichever of the two comes first.
            await legEvent(uuid, .end(.endedByManager(reason)))
            let details = endDetails.removeValue(forKey: uuid)
            var detail = details?.detail
            if reason == .failed, let audioFailure {
                // The device is what the user can fix, so it comes first, whatever else failed in
                // the race that followed it (media that could not start, the peer hanging up).
                let audio = "the audio devices could not open: \(audioFailure)"
                if let other = detail, !other.contains(audioFailure) { detail = "\(audio); \(other)" } else if detail == nil { detail = audio }
            }
            broadcaster.send(.ended(uuid, reason: reason, detail: detail, duration: details?.duration))
            // A later call's failure must not be blamed on this one's devices.
            if legs.isEmpty { audioFailure = nil }
        case let .session(uuid, status):
            broadcaster.send(.session(uuid, status))
        case .audioActivated:
            audioFailure = nil
        case .incomingCall, .actionCompleted, .audioDeactivated, .doNotDisturbChanged, .ringtoneFailed:
            break
        case let .audioActivationFailed(reason):
            // The manager ends the calls that needed audio next; their end says why.
            audioFailure = reason
        }
    }
}
