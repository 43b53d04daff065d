import CallNode
import Foundation

/// What a call being set up waits for, from the node's events about it: reaching the peer, its
/// ringing, the connectivity checks (and which round of them), the media's keys, the audio.
/// The terminal's status line says it once setup is slow, so that a call through a bad network
/// shows what it is doing rather than nothing.
public struct SetupStatus: Sendable, Equatable {
    public enum Step: Sendable, Equatable {
        /// The signaling: the peer (or its relay) is being reached, the invitation sent.
        case reaching
        /// The peer rings; the call waits for it to answer.
        case ringing
        /// The offer and answer are done: the connectivity checks look for a network path.
        case checks
        /// A pair was found (`pair`: its candidate types): the media's keys are agreed over it
        /// (the DTLS handshake), or the media keyed by the SDP starts on it.
        case keys(pair: String)
        /// The keys are agreed: the audio starts.
        case audio
    }

    public private(set) var step: Step = .reaching
    /// The round of connectivity checks (a fresh one starts when a round found no path).
    public private(set) var round = 1

    public init() {}

    /// Follows `event` if it is about `call`.
    public mutating func follow(_ event: NodeEvent, of call: UUID) {
        switch event {
        case let .ringing(uuid, _) where uuid == call:
            if step == .reaching { step = .ringing }
        case let .state(uuid, phase, _, _) where uuid == call && Self.negotiatedPhases.contains(phase):
            if step == .reaching || step == .ringing { step = .checks }
        case let .iceRestarted(uuid, _) where uuid == call:
            round += 1
            step = .checks
        case let .selectedPair(uuid, pair) where uuid == call:
            step = .keys(pair: pair.usesICE ? "\(pair.localType.rawValue)/\(pair.remoteType.rawValue)" : "plain RTP")
        case let .secured(uuid, _) where uuid == call:
            step = .audio
        default:
            break
        }
    }

    /// The call manager's phases that say the offer and answer are done.
    static let negotiatedPhases: Set<String> = ["offerReceived", "answerSent", "offerSent", "answerReceived"]

    /// Setup that has taken this long is slow enough for the status line to say what it waits for.
    public static let slowAfter: Duration = .seconds(1)

    /// What the status line says `elapsed` into the setup of the call with `peer`; nil before
    /// ``slowAfter``.
    public func text(peer: String, elapsed: Duration) -> String? {
        guard elapsed >= Self.slowAfter else { return nil }
        let what = switch step {
        case .reaching: "reaching \(peer)"
        case .ringing: "\(peer) is ringing"
        case .checks where round > 1: "finding a network path to \(peer): round \(round) of checks (the earlier found none)"
        case .checks: "finding a network path to \(peer): connectivity checks"
        case let .keys(pair): "securing the media with \(peer) over \(pair)"
        case .audio: "starting the audio with \(peer)"
        }
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        return "◌ setting up: \(what) · \(String(format: "%.0f", seconds.rounded(.down))) s"
    }
}
