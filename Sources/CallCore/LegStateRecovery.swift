/// How a connected call loses its path or its signaling and gets them back: the timers a loss
/// arms, the restarts it starts, and the restore that cancels them.
extension LegState {
    /// `signal` (ICE, media, signaling) was lost: a connected call starts reconnecting (its
    /// give-up timer, its first ICE restart); one reconnecting already adds it to what it waits for.
    mutating func lose(_ signal: LegLossSignal, now: Duration) -> [LegAction] {
        switch phase {
        case let .connected(since):
            phase = .reconnecting(.init(connectedSince: since, lostAt: now, signals: [signal]))
            var actions: [LegAction] = [.arm(.connectionLost, after: timings.connectionLostTimeout)]
            armed.insert(.connectionLost)
            if pathUsesICE, let interval = timings.iceRestartInterval, interval > .zero {
                // The first restart after one interval: a path that comes back by itself is
                // kept. Either side restarts (a break in one direction is lost only on one
                // side); the caller waits half an interval longer, so that when both lost the
                // path the callee's offer goes first and the caller answers it.
                actions.append(.arm(.iceRestart, after: outgoing ? interval + interval / 2 : interval))
                armed.insert(.iceRestart)
            }
            actions.append(.reportConnectionLost)
            // Something on the signaling path now: a NAT that forgot its mappings drops what
            // comes in on a TCP connection until this side sends on it (a restart offer from
            // the peer would wait for the next keep-alive, seconds later).
            actions.append(.send(.keepAlive))
            return actions + peerMayBeGone()
        case var .reconnecting(lost):
            lost.signals.insert(signal)
            phase = .reconnecting(lost)
            return peerMayBeGone()
        case .earlyMedia, .awaitingAudio:
            // The media runs early or waits for the audio session: kept for the moment the
            // call connects (``lostBeforeConnected``), which recovers from it then.
            lostBeforeConnected.insert(signal)
            return []
        default:
            return []  // before media, a lost path is ICE's and the setup timeouts' business
        }
    }

    /// Clears `signal` (every signal when nil); restored when none is left.
    mutating func restore(_ lost: inout LegPhase.Reconnecting, clearing signal: LegLossSignal?) -> [LegAction] {
        if let signal { lost.signals.remove(signal) } else { lost.signals.removeAll() }
        guard lost.signals.isEmpty else {
            phase = .reconnecting(lost)
            return []
        }
        phase = .connected(since: lost.connectedSince)
        var actions: [LegAction] = []
        for timer in [LegTimer.connectionLost, .iceRestart, .peerGone] where armed.contains(timer) {
            armed.remove(timer)
            actions.append(.cancel(timer))
        }
        actions.append(.reportConnectionRestored)
        return actions
    }

    /// The signaling connection closed from the other end (it is being resumed) and the media
    /// has stopped: what a peer whose process died leaves (its kernel closes the connection,
    /// its media stops at once). A network that breaks closes nothing, and a relay that
    /// restarts leaves the media going: neither arms this. The call ends unless either comes
    /// back within ``LegTimings/peerGoneAfter``.
    mutating func peerMayBeGone() -> [LegAction] {
        guard !signaling.isUp, signalingClosedByPeer, case let .reconnecting(lost) = phase, lost.signals.contains(.media),
              !armed.contains(.peerGone) else { return [] }
        armed.insert(.peerGone)
        return [.arm(.peerGone, after: timings.peerGoneAfter)]
    }
}
