import Foundation
import Locking
import Metrics

/// Turns a node's events into swift-metrics: whatever backend the process bootstrapped
/// (Prometheus for `callnode --metrics`) sees calls, setup times, ICE pairs, loss and rejects.
///
/// A plain recorder with no task of its own: the node feeds it every event it sends
/// (``CallNode/start()``), and tests feed it events directly with their own factory.
///
/// Metrics (Prometheus names):
/// - `callnode_calls_total{direction}`: calls placed (`outgoing`) and received (`incoming`).
/// - `callnode_calls{state}`: calls now `ringing`, `connecting`, `connected` or `held`.
/// - `callnode_calls_ended_total{reason}`: ended calls by ``CallEndReason``.
/// - `callnode_calls_missed_total`: incoming calls nobody answered (the caller gave up, or the ring timed out).
/// - `callnode_call_setup_seconds`: dial or answer to connected media (histogram).
/// - `callnode_ice_selected_pairs_total{local,remote}`: selected pairs by candidate type.
/// - `callnode_ice_restarts_total{by}`, `callnode_connection_lost_total`, `callnode_signaling_lost_total`.
/// - `callnode_call_loss_ratio{call}`, `callnode_call_jitter_seconds{call}`,
///   `callnode_call_rtt_seconds{call}`, `callnode_call_concealed_frames{call}`,
///   `callnode_call_srtp_rejects{call}`: each live call's latest figures, removed when it ends.
/// - `callnode_rejected_total{reason}`: calls of this node's that the peer refused.
/// - `callnode_refused_total{reason}`: incoming calls this node refused (blocked, unknown caller, busy…).
/// - `callnode_signaling_errors_total`: malformed or refused signaling from peers.
/// - `callnode_dtls_failures_total`: calls that ended because DTLS did not complete.
/// - `callnode_relay_registrations_total`, `callnode_relay_lost_total`.
/// - `callnode_recording_failures_total`: recordings that failed (the call went on).
///
/// Every counter is exported at 0 from the start, with each value its label can take.
/// `contrib/prometheus/callnode-alerts.yml` alerts on them and `contrib/grafana` charts them.
public final class NodeMetrics: Sendable {
    private let factory: any MetricsFactory
    private let state = Locked<State>(State())

    private struct State {
        var phases: [UUID: String] = [:]
        var perCall: [UUID: PerCall] = [:]
        /// Incoming calls not yet ended (an unanswered one is a missed call).
        var incoming: Set<UUID> = []
        var stateMeters: [String: Meter] = [:]
    }

    private struct PerCall {
        let loss: Meter
        let jitter: Meter
        let rtt: Meter
        let concealed: Meter
        let rejects: Meter
        var all: [Meter] { [loss, jitter, rtt, concealed, rejects] }
    }

    private static let states = ["ringing", "connecting", "connected", "held"]

    /// - Parameter factory: the metrics backend (default: the process's bootstrapped one).
    public init(factory: any MetricsFactory = MetricsSystem.factory) {
        self.factory = factory
        let meters = Dictionary(uniqueKeysWithValues: Self.states.map {
            ($0, Meter(label: "callnode_calls", dimensions: [("state", $0)], factory: factory))
        })
        for meter in meters.values { meter.set(0) }
        state.withLock { $0.stateMeters = meters }
        // Counters appear at 0 before the first call, so a scrape shows them (and rates work).
        for direction in ["incoming", "outgoing"] { counter("callnode_calls_total", [("direction", direction)]).increment(by: 0) }
        for name in ["callnode_signaling_errors_total", "callnode_dtls_failures_total", "callnode_relay_registrations_total",
                     "callnode_relay_lost_total", "callnode_connection_lost_total", "callnode_signaling_lost_total",
                     "callnode_recording_failures_total", "callnode_calls_missed_total"] {
            counter(name).increment(by: 0)
        }
        // Labelled ones too, for every value their label takes: a series born at 1 shows no
        // increase, so an alert on the first failed or refused call after a start would miss it.
        for reason in CallEndReason.allCases { counter("callnode_calls_ended_total", [("reason", reason.rawValue)]).increment(by: 0) }
        for reason in RejectReason.allCases {
            counter("callnode_refused_total", [("reason", reason.rawValue)]).increment(by: 0)
            counter("callnode_rejected_total", [("reason", reason.rawValue)]).increment(by: 0)
        }
        for side in ["local", "peer"] { counter("callnode_ice_restarts_total", [("by", side)]).increment(by: 0) }
    }

    private func counter(_ label: String, _ dimensions: [(String, String)] = []) -> Counter {
        Counter(label: label, dimensions: dimensions, factory: factory)
    }

    /// Records one event.
    public func record(_ event: NodeEvent) {
        switch event {
        case let .dialing(uuid, _):
            counter("callnode_calls_total", [("direction", "outgoing")]).increment()
            setPhase(uuid, "connecting")
        case let .incoming(uuid, _, _, _):
            counter("callnode_calls_total", [("direction", "incoming")]).increment()
            state.withLock { _ = $0.incoming.insert(uuid) }
            setPhase(uuid, "ringing")
        case let .state(uuid, phase, held, _):
            if let bucket = Self.bucket(phase) { setPhase(uuid, held ? "held" : bucket) } else { end(uuid) }
        case let .connected(uuid, setup):
            Metrics.Timer(label: "callnode_call_setup_seconds", factory: factory).record(duration: setup)
            setPhase(uuid, "connected")
        case let .selectedPair(_, pair):
            counter("callnode_ice_selected_pairs_total",
                    [("local", pair.localType.rawValue), ("remote", pair.remoteType.rawValue)]).increment()
        case let .iceRestarted(_, byPeer):
            counter("callnode_ice_restarts_total", [("by", byPeer ? "peer" : "local")]).increment()
        case .connectionLost:
            counter("callnode_connection_lost_total").increment()
        case .recordingFailed:
            counter("callnode_recording_failures_total").increment()
        case .signalingLost:
            counter("callnode_signaling_lost_total").increment()
        case let .statistics(uuid, statistics):
            update(uuid, statistics)
        case let .rejected(_, reason):
            counter("callnode_rejected_total", [("reason", reason.rawValue)]).increment()
        case let .refused(_, _, reason):
            counter("callnode_refused_total", [("reason", reason.rawValue)]).increment()
        case .peerError:
            counter("callnode_signaling_errors_total").increment()
        case let .ended(uuid, reason, detail, _):
            counter("callnode_calls_ended_total", [("reason", reason.rawValue)]).increment()
            if state.withLock({ $0.incoming.remove(uuid) }) != nil, reason == .unanswered {
                counter("callnode_calls_missed_total").increment()
            }
            if reason == .failed, let detail, detail.localizedCaseInsensitiveContains("DTLS") {
                counter("callnode_dtls_failures_total").increment()
            }
            end(uuid)
        case .registered:
            counter("callnode_relay_registrations_total").increment()
        case .relayLost:
            counter("callnode_relay_lost_total").increment()
        default:
            break
        }
    }

    /// A call phase (``CallPhase``'s description) as one of the four states counted; nil once ended.
    static func bucket(_ phase: String) -> String? {
        if phase.hasPrefix("ended") { return nil }
        switch phase {
        case "invitationSent", "invitationReceived": return "ringing"
        case "connected": return "connected"
        default: return "connecting"
        }
    }

    private func setPhase(_ uuid: UUID, _ phase: String) {
        let meters = state.withLock { state -> [String: Meter] in
            state.phases[uuid] = phase
            return state.stateMeters
        }
        recount(meters)
    }

    private func recount(_ meters: [String: Meter]) {
        let counts = state.withLock { state in
            Dictionary(grouping: state.phases.values, by: { $0 }).mapValues(\.count)
        }
        for (name, meter) in meters { meter.set(counts[name] ?? 0) }
    }

    private func update(_ uuid: UUID, _ statistics: MediaStatistics) {
        let figures = state.withLock { state -> PerCall in
            if let existing = state.perCall[uuid] { return existing }
            let call = [("call", uuid.uuidString.lowercased())]
            let made = PerCall(
                loss: Meter(label: "callnode_call_loss_ratio", dimensions: call, factory: factory),
                jitter: Meter(label: "callnode_call_jitter_seconds", dimensions: call, factory: factory),
                rtt: Meter(label: "callnode_call_rtt_seconds", dimensions: call, factory: factory),
                concealed: Meter(label: "callnode_call_concealed_frames", dimensions: call, factory: factory),
                rejects: Meter(label: "callnode_call_srtp_rejects", dimensions: call, factory: factory))
            state.perCall[uuid] = made
            return made
        }
        let expected = statistics.packetsReceived + statistics.packetsLost
        figures.loss.set(expected > 0 ? Double(statistics.packetsLost) / Double(expected) : 0)
        figures.jitter.set(Self.seconds(statistics.jitter))
        figures.rtt.set(statistics.roundTripTime.map(Self.seconds) ?? 0)
        figures.concealed.set(statistics.jitterBuffer.concealed)
        figures.rejects.set(statistics.authenticationFailures + statistics.replaysDropped + statistics.malformedDropped)
    }

    private func end(_ uuid: UUID) {
        let (removed, meters) = state.withLock { state in
            state.phases.removeValue(forKey: uuid)
            return (state.perCall.removeValue(forKey: uuid), state.stateMeters)
        }
        recount(meters)
        for meter in removed?.all ?? [] { meter.destroy() }
    }

    private static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}
