import AudioSession
import Calls
import Foundation

/// The router's side of its legs: making them, what they report (``LegReport``), and the
/// bridge ports and audio activation that are the node's to give.
extension CallNode {
    /// A new leg for a call carried by `dialect`, known to the router from now on (and its
    /// connection, if it has one already).
    func makeLeg(_ uuid: UUID, outgoing: Bool, muted: Bool = false, dialect: any CallDialect, target: CallTarget? = nil,
                 connection: SignalingConnection? = nil, title: String? = nil, session: String? = nil,
                 startMuted: Bool = false) async -> CallLeg {
        let leg = CallLeg(uuid: uuid, outgoing: outgoing, muted: muted, dialect: dialect, target: target, peer: connection?.peer,
                          title: title, session: session, startMuted: startMuted, services: services)
        legs[uuid] = leg
        if let connection { legConnections[uuid] = connection.id }
        await availabilityChanged()
        // What arrives for the call goes to the leg from now on (queued until it runs).
        await dialect.start(DialectCall(leg: leg))
        // The leg's inputs and children run in its own group; the router keeps the task that
        // runs it until it is done, and waits for every one at shutdown.
        let weak = WeakNode(self)
        let run = Task {
            await leg.run()
            await weak.node?.legFinished(uuid)
        }
        legRuns[uuid] = run
        return leg
    }

    /// A leg's group has finished: nothing of that call runs any more.
    func legFinished(_ uuid: UUID) { legRuns[uuid] = nil }

    /// A leg the manager refused to start: it never ran anything, and goes.
    func discardLeg(_ uuid: UUID) async {
        legConnections[uuid] = nil
        envelopes[uuid] = nil
        await legs.removeValue(forKey: uuid)?.discard()
        await availabilityChanged()
        resumeNoCallsWaiters()
    }

    /// Those waiting for the last call to end (a drain) go on once none is left.
    func resumeNoCallsWaiters() {
        guard legs.isEmpty else { return }
        for waiter in noCallsWaiters { waiter.finish() }
        noCallsWaiters = []
    }

    /// What a leg tells the router, taken before the leg goes on.
    func legReport(_ uuid: UUID, _ report: LegReport) async {
        switch report {
        case let .connection(connection):
            guard legs[uuid] != nil else { return }
            legConnections[uuid] = connection.id
        case let .mediaPort(port):
            ports[uuid] = port
        case let .group(other):
            await regroup(uuid, with: other)
        case .awaitingAudio:
            await audioWanted(by: uuid)
        case let .transferRequested(request):
            await followTransfer(from: uuid, request)
        case let .ended(detail, duration, reason):
            // Kept before the leg releases what it holds, so the manager's end event finds it.
            guard legs.removeValue(forKey: uuid) != nil else { return }
            legConnections[uuid] = nil
            envelopes[uuid] = nil
            ports[uuid] = nil
            endDetails[uuid] = (detail, duration)
            if reason == .localEnded {
                // A peer resuming the call later (its end could not reach it) is told so.
                hungUpHere.append(uuid)
                if hungUpHere.count > 256 { hungUpHere.removeFirst() }
            }
            await availabilityChanged()
        case .released:
            dialectHandles.withLock { $0[uuid] = nil }
            // Refill the ICE pool, and release the app-owned session after the last call.
            icePool.fill()
            resumeNoCallsWaiters()
            if legs.isEmpty, let appSession, await appSession.isActive {
                try? await appSession.deactivate()
                audioActive = false
            }
        }
    }

    /// A call's media is ready: it starts once the audio session is active. System-owned, the
    /// provider activates it (``handle(_:)`` hears `didActivate`); app-owned, this node is the
    /// one owner and activates it now, once for all the calls that need it.
    func audioWanted(by uuid: UUID) async {
        guard legs[uuid] != nil else { return }
        guard let appSession, !audioActive else {
            if audioActive { tellAudioActive(uuid) }
            return
        }
        // Calls whose media is ready while the one activation runs wait for its outcome.
        waitingForAudio.append(uuid)
        guard waitingForAudio.count == 1 else { return }
        var failure: (any Error)?
        if await !appSession.isActive {
            do { _ = try await appSession.activate() } catch { failure = error }
        }
        audioActive = failure == nil
        let waiting = waitingForAudio
        waitingForAudio.removeAll()
        for call in waiting {
            if let failure {
                legs[call]?.post(.event(.end(.failed("audio could not start: \(failure)")), done: nil))
            } else {
                tellAudioActive(call)
            }
        }
    }

    /// Tells a call's leg that the audio session is active: at once, or (a simulation's
    /// ``CallNodeConfiguration/audioActivationDelay``) that long later, if the leg is still there.
    func tellAudioActive(_ uuid: UUID) {
        let delay = configuration.audioActivationDelay
        guard delay > .zero else {
            legs[uuid]?.post(.audioActive)
            return
        }
        let clock = configuration.clock, weak = WeakNode(self)
        _ = keepUntilDone {
            try? await clock.sleep(for: delay)
            await weak.node?.legs[uuid]?.post(.audioActive)
        }
    }

    /// A call joined `other`'s group (or left its group, `other` nil): the bridge joins their
    /// ports, or takes the call's out of its conference. A call without media yet joins when
    /// its media is built (its leg reports the group again then).
    func regroup(_ call: UUID, with other: UUID?) async {
        guard let port = ports[call] else { return }
        if let other {
            guard let otherPort = ports[other] else { return }
            if let systemSession { await systemSession.join([port, otherPort]) }
            if let appSession { await appSession.join([port, otherPort]) }
        } else {
            if let systemSession { await systemSession.leaveConference(port) }
            if let appSession { await appSession.leaveConference(port) }
        }
    }
}
