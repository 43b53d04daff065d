import CallNode
import Foundation
import NodeControl

/// The terminal's status line for the call the keys act on, and how a call's end is worded.
extension CallRunner {
    func status(_ uuid: UUID, _ s: MediaStatistics) {
        let pair = lastPair[uuid].map { "\($0.localType.rawValue)/\($0.remoteType.rawValue)" } ?? "-"
        let rtt = s.roundTripTime.map { "\(EventJSON.milliseconds($0)) ms" } ?? "-"
        guard uuid == current, transferEntry == nil else { return }  // the line shows the call the keys act on
        let state = held ? "held" : heldByPeer.contains(uuid) ? "on hold by \(peers[uuid] ?? "the peer")" : nil
        let early = earlyMedia.contains(uuid) ? "early media, not answered yet" : nil
        let what = (state.map { muted ? "\($0), muted" : $0 } ?? early ?? (muted ? "muted" : "in call"))
            + (node.configuration.playbackOnly ? " (playback only: no microphone)" : "")
        let others = connectedCalls.count > 1 ? " (+\(connectedCalls.count - 1) call\(connectedCalls.count > 2 ? "s" : ""))" : ""
        let conference = node.conference(of: uuid)
        let with = heldByPeer.contains(uuid) ? ""
            : conference.count > 1 ? " in conference with \(conference.compactMap { peers[$0] }.sorted().joined(separator: ", "))"
            : peers[uuid].map { " with \($0)" } ?? ""
        let keys = !ringing.isEmpty ? "a e p d m h s c u 0-9 q" : connectedCalls.count > 1 ? "m h s c u 0-9 q" : "m h 0-9 o q"
        let e2e = securities[uuid].map { $0.frameEncryption ? "e2e \($0.securityCode ?? "")" : "no e2e" }
        let load = s.encoding == .opus ? Self.loadNote(configured: node.configuration.media, current: s.opusComplexity) : nil
        // Each part with its rank: on a narrow terminal the lowest-ranked go first, so who the
        // call is with, the keys and whether audio gets through stay (the security code was
        // printed when the call was secured). The keys outrank the busy-host note: on a loaded
        // host a 60-column terminal used to keep the note and lose the keys.
        let parts: [(text: String?, rank: Int)] = [
            ("● \(what)\(with)\(others)", 0), (e2e, 5), ("pair \(pair)", 7), ("RTT \(rtt)", 4),
            ("loss \(s.packetsLost)", 3), ("jitter \(EventJSON.milliseconds(s.jitter)) ms", 6),
            ("\(s.sendBitrate / 1000)/\(s.receiveBitrate / 1000) kbit/s" + (s.encoding == .opus ? "" : " \(s.encoding.rtpName)"), 8),
            ("level \(Int(s.sendLevel))/\(Int(s.receiveLevel)) dB", 9), (load, 2), (keys, 1),
        ]
        let line = Terminal.statusLine(parts.compactMap { part in part.text.map { ($0, part.rank) } }, columns: Terminal.columns())
        // One row, redrawn in place: a line wider than the terminal would wrap, and each redraw
        // would leave its first rows behind.
        FileHandle.standardOutput.write(Data(("\r\u{1B}[2K" + line).utf8))
        statusShown = true
    }

    /// A call's end as the terminal says it: where no network path was found, the flags that
    /// find one are named (the node's own words name none: embedders have no flags).
    static func hinted(_ detail: String) -> String {
        let noPath = detail.hasPrefix("ICE failed") || detail.contains("ICE did not connect")
        return noPath ? detail + " (try --stun or --turn)" : detail
    }

    /// Said on the status line while the node's own load keeps the encoder below the configured
    /// complexity (its media threads run late for their own work): why the audio sent is plainer.
    static func loadNote(configured: MediaConfiguration, current: Int) -> String? {
        guard configured.complexityFollowsLoad, current < configured.opus.complexity else { return nil }
        return "busy node: complexity \(current) of \(configured.opus.complexity)"
    }

    func clearStatus() {
        if statusShown {
            FileHandle.standardOutput.write(Data("\r\u{1B}[2K".utf8))
            statusShown = false
        }
    }

    // MARK: - While the placed call is set up

    /// Follows the placed call's setup; a tick every half second redraws it once it is slow.
    func beginSetupStatus(of call: UUID) {
        guard isTerminal, !json else { return }
        let continuation = self.continuation
        let ticker = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(500))
                continuation.yield(.setupTick)
            }
        }
        setup = (call, SetupStatus(), .now, ticker)
    }

    func followSetup(_ event: NodeEvent) {
        guard var current = setup else { return }
        switch event {
        case let .connected(uuid, _) where uuid == current.call, let .ended(uuid, _, _, _) where uuid == current.call:
            current.ticker.cancel()
            setup = nil
            clearStatus()
        default:
            current.status.follow(event, of: current.call)
            setup = current
        }
    }

    /// The status line says what a slow setup waits for (the call the keys act on only).
    func showSetup() {
        guard let setup, setup.call == current, transferEntry == nil,
              let text = setup.status.text(peer: peers[setup.call] ?? "the peer", elapsed: .now - setup.began) else { return }
        let line = Terminal.statusLine([(text, 0), ("q: hang up", 1)], columns: Terminal.columns())
        FileHandle.standardOutput.write(Data(("\r\u{1B}[2K" + line).utf8))
        statusShown = true
    }
}
