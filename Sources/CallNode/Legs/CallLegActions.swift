@_spi(Simulation) import CallCore
import Calls
import Logging

/// What performing one of the state's actions came to.
enum ActionOutcome {
    case done
    /// It failed; the actions after it are still performed.
    case failed(any Error)
    /// It failed, and the actions after it depend on it: they are not performed.
    case failedAndStopped(any Error)
}

/// Performing the state's actions (``CallLeg/legEvent(_:)``), one group of them to an async
/// function: an async function's frame holds a slot for what every one of its cases keeps
/// across a suspension, and it is taken from the task's allocator at every call. With all
/// forty cases in one function, each event the leg took cost a 26 KiB frame, held for as long
/// as its slowest action (the media's start); in groups, an action holds its group's frame only.
extension CallLeg {
    /// Carries out one action (never `.settle`: ``legEvent(_:)`` settles, with the failures before it).
    func carryOut(_ action: LegAction) async -> ActionOutcome {
        switch action {
        case .send, .closeSignaling, .reconnectSignaling, .reportSignaling, .arm, .cancel, .restartICE, .tellPeerPath,
             .adoptPeerPath, .restartRefused:
            await carryOutPathAction(action)
        case .renegotiate, .makeOffer, .answerFirstOffer, .answerPeerOffer, .takeAnswer:
            await carryOutNegotiationAction(action)
        case .setMicrophone, .sendDTMF, .startMedia, .prepareMedia, .startEarlyMedia, .setFlow, .earlyMediaRefused:
            await carryOutMediaAction(action)
        case .reportProgress, .reportMediaConnected, .reportEarlyMedia, .reportAnswered, .fulfil, .fail, .failStart,
             .reportHeldByPeer, .reportConnectionLost, .reportConnectionRestored, .tearDown, .reportEnded:
            await carryOutReportAction(action)
        case .settle:
            // It reads the failures of the actions before it: ``legEvent(_:)`` settles.
            preconditionFailure("a settle is the event's own, not an action performed alone")
        }
    }

    /// The signaling, the timers and the ICE path.
    private func carryOutPathAction(_ action: LegAction) async -> ActionOutcome {
        switch action {
        case let .send(signal):
            await send(signal)
        case .closeSignaling:
            await dialect.dropConnection()
        case .reconnectSignaling:
            await dialect.reconnect()
        case let .reportSignaling(lost):
            broadcaster.send(lost ? .signalingLost(uuid) : .signalingResumed(uuid))
        case let .arm(timer, delay):
            arm(timer, after: delay)
        case let .cancel(timer):
            timers.cancel(timer)
        case .restartICE:
            if await ice.gatheringPending {
                // This side's candidates have not all gone (a STUN or TURN server slow to
                // answer; SIP's offer or answer waits for their end): the round has not had
                // its chance, and a restart's offer now would cross the answer still due.
                logger.info("call \(uuid): no fresh round of ICE yet: this side's gathering has not ended")
                post(.event(.restartSettled, done: nil))
                return .done
            }
            do {
                try await restart()
                post(.event(.restartOffered, done: nil))
            } catch {
                logger.warning("call \(uuid): ICE restart failed: \(error)")
                post(.event(.restartSettled, done: nil))
                return .failed(error)
            }
        case .tellPeerPath:
            await tellPeerPath()
        case let .adoptPeerPath(path):
            await adoptPeerPath(path)
        case let .restartRefused(reason):
            return .failed(NegotiationError(reason))
        default:
            preconditionFailure("\(action) is not a path action")
        }
        return .done
    }

    /// Offers and answers.
    private func carryOutNegotiationAction(_ action: LegAction) async -> ActionOutcome {
        switch action {
        case .renegotiate:
            do {
                try await renegotiate()
            } catch {
                logger.warning("call \(uuid): the hold or resume offer could not be sent: \(error)")
                post(.event(.renegotiationSettled, done: nil))
            }
        case .makeOffer:
            do {
                try await sendOffer()
            } catch where outgoing {
                await negotiationFailed(error)  // the caller's offer (SIP)
            } catch {
                self.failure = "answering failed: \(error)"
                if let answerAction { try? await manager.report(.failed(answerAction, reason: "\(error)")) }
            }
        case let .answerFirstOffer(offer):
            offersTaken += 1
            do { try await answer(first: offer) } catch { await negotiationFailed(error) }
        case let .answerPeerOffer(offer):
            offersTaken += 1
            do {
                try await answer(offer)
            } catch let refused as LaterOfferRefused where dialect.traits.refusesLaterOffers {
                // Refused on the wire (SIP: 488); the call goes on with what it has.
                logger.warning("call \(uuid): the peer's new offer could not be taken, refused (the call goes on as it was): \(refused)")
                broadcaster.send(.peerError("call \(uuid): the peer's new offer was refused: \(refused)"))
                await send(.error(refused.detail))
            } catch {
                await negotiationFailed(error)
            }
        case let .takeAnswer(answer):
            do { try await take(answer) } catch { await negotiationFailed(error) }
        default:
            preconditionFailure("\(action) is not a negotiation action")
        }
        return .done
    }

    /// The call's media: its start, its microphone and its flow.
    private func carryOutMediaAction(_ action: LegAction) async -> ActionOutcome {
        switch action {
        case let .setMicrophone(muted):
            var outcome = ActionOutcome.done
            do { try await media?.setMuted(muted) } catch { outcome = .failed(error) }
            await dialect.microphoneMuted(muted)
            return outcome
        case let .sendDTMF(digits):
            do {
                guard let media else { throw LegRefusal(description: "the call has no media") }
                try await media.sendDTMF(digits)
            } catch {
                return .failed(error)
            }
        case let .startMedia(muted):
            await startMedia(microphoneMuted: muted)
        case .prepareMedia:
            await prepareMedia()
        case let .startEarlyMedia(muted):
            await startEarlyMedia(microphoneMuted: muted)
        case let .setFlow(flow):
            if let error = await apply(flow) { return .failed(error) }
        case let .earlyMediaRefused(reason):
            return .failed(LegRefusal(description: reason))
        default:
            preconditionFailure("\(action) is not a media action")
        }
        return .done
    }

    /// What the manager, the router and the event stream are told.
    private func carryOutReportAction(_ action: LegAction) async -> ActionOutcome {
        switch action {
        case let .reportProgress(progress):
            do {
                try await manager.report(.progress(uuid, progress))
            } catch {
                // What follows (the offer or answer going out) depends on the manager knowing.
                return .failedAndStopped(error)
            }
        case .reportMediaConnected:
            await reportMediaConnected()
        case .reportEarlyMedia:
            await reportEarlyMedia()
        case .reportAnswered:
            await reportAnswered()
        case let .fulfil(id):
            if let action = requests.removeValue(forKey: id) { try? await manager.report(.fulfilled(action)) }
        case let .fail(id, reason):
            if let action = requests.removeValue(forKey: id) { try? await manager.report(.failed(action, reason: reason)) }
        case let .failStart(reason):
            if let startAction { try? await manager.report(.failed(startAction, reason: reason)) }
        case let .reportHeldByPeer(on):
            // A peer that only ever sends (a room's feed) holds nothing by saying sendonly.
            guard !dialect.traits.receivesOnly else { return .done }
            logger.info("call \(uuid): \(on ? "held" : "resumed") by the peer")
            broadcaster.send(.remoteHold(uuid, on))
        case .reportConnectionLost:
            logger.info("call \(uuid): connection lost")
            try? await manager.report(.connectionLost(uuid))
            broadcaster.send(.connectionLost(uuid))
        case .reportConnectionRestored:
            logger.info("call \(uuid): connection restored")
            try? await manager.report(.connectionRestored(uuid))
            broadcaster.send(.connectionRestored(uuid))
        case .tearDown:
            await teardown()
        case let .reportEnded(reason):
            try? await manager.report(.callEnded(uuid, reason))
        default:
            preconditionFailure("\(action) is not a report action")
        }
        return .done
    }
}
