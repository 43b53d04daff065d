import CallNode
import Foundation

/// The JSON objects that describe a node's events: the lines `--json` prints and what the
/// control API streams, one shape for both.
public enum EventJSON {
    /// The object for `event` (its `event` key names it), or nil for one that has none.
    public static func object(_ event: NodeEvent) -> [String: Any]? {
        switch event {
        case let .listening(address): return ["event": "listening", "address": address.description]
        case let .dialing(uuid, target): return ["event": "dialing", "call": uuid.uuidString, "target": target.description]
        case let .incoming(uuid, from, name, known):
            return ["event": "incoming", "call": uuid.uuidString, "fingerprint": from.hex, "name": name ?? NSNull(), "contact": known]
        case let .ringing(uuid, callee): return ["event": "ringing", "call": uuid.uuidString, "fingerprint": callee.hex]
        case let .state(uuid, phase, held, muted):
            return ["event": "state", "call": uuid.uuidString, "state": phase, "held": held, "muted": muted]
        case let .webPage(connected, from):
            return ["event": "web-page", "connected": connected, "from": from]
        case let .secured(uuid, security):
            var object: [String: Any] = ["event": "secured", "call": uuid.uuidString, "encrypted": !security.unencrypted,
                                         "key_exchange": security.unencrypted ? "none" : security.keyExchange.rawValue,
                                         "suite": security.suite]
            if let handshake = security.handshake { object["handshake_ms"] = milliseconds(handshake) }
            if let fingerprint = security.peerFingerprint { object["peer_fingerprint"] = fingerprint }
            object["frame_encryption"] = security.frameEncryption
            if let code = security.securityCode { object["security_code"] = code }
            return object
        case let .selectedPair(uuid, pair):
            return ["event": "selected-pair", "call": uuid.uuidString, "local_type": pair.localType.rawValue,
                    "remote_type": pair.remoteType.rawValue, "transport": pair.transport.rawValue,
                    "local": pair.local, "remote": pair.remote, "ice": pair.usesICE]
        case let .connected(uuid, setup):
            return ["event": "connected", "call": uuid.uuidString, "setup_ms": milliseconds(setup)]
        case let .statistics(uuid, s):
            return ["event": "stats", "call": uuid.uuidString, "codec": s.encoding.rtpName, "packets_sent": s.packetsSent, "packets_received": s.packetsReceived,
                    "packets_lost": s.packetsLost, "jitter_ms": milliseconds(s.jitter),
                    "rtt_ms": s.roundTripTime.map { milliseconds($0) as Any } ?? NSNull(),
                    "send_bitrate": s.sendBitrate, "receive_bitrate": s.receiveBitrate,
                    "send_level_db": s.sendLevel, "receive_level_db": s.receiveLevel,
                    "fec_recovered": s.jitterBuffer.fecRecovered, "concealed": s.jitterBuffer.concealed,
                    "redundancy_recovered": s.jitterBuffer.redundancyRecovered, "sending_redundancy": s.sendingRedundancy, "redundancy_depth": s.redundancyDepth, "opus_complexity": s.opusComplexity, "opus_bitrate": s.opusBitrate,
                    "redundancy_spread": s.redundancySpread, "fec_loss_plan": s.fecExpectedLossPercent,
                    "late": s.jitterBuffer.late, "stretched": s.jitterBuffer.stretched, "shrunk": s.jitterBuffer.shrunk,
                    "expanded": s.jitterBuffer.expanded, "compressed": s.jitterBuffer.compressed,
                    "skipped": s.jitterBuffer.skipped, "playout_resets": s.jitterBuffer.playoutResets,
                    "buffer_delay_ms": milliseconds(s.jitterBuffer.currentDelay)]
        case let .remoteHold(uuid, on): return ["event": "remote-hold", "call": uuid.uuidString, "hold": on]
        case let .dtmf(uuid, digit): return ["event": "dtmf", "call": uuid.uuidString, "digit": String(digit)]
        case let .connectionLost(uuid): return ["event": "connection-lost", "call": uuid.uuidString]
        case let .connectionRestored(uuid): return ["event": "connection-restored", "call": uuid.uuidString]
        case let .signalingLost(uuid): return ["event": "signaling-lost", "call": uuid.uuidString]
        case let .recordingFailed(uuid, path, reason):
            return ["event": "recording-failed", "call": uuid.uuidString, "path": path, "reason": reason]
        case let .signalingResumed(uuid): return ["event": "signaling-resumed", "call": uuid.uuidString]
        case let .audioRouteChanged(reason, route):
            var event: [String: Any] = ["event": "route-change", "input": route?.input ?? NSNull(), "output": route?.output ?? NSNull()]
            switch reason {
            case let .oldDeviceUnavailable(device): event["reason"] = "old-device-unavailable"; event["device"] = device.name
            case let .newDeviceAvailable(device): event["reason"] = "new-device-available"; event["device"] = device.name
            case .override: event["reason"] = "override"
            case .categoryChange: event["reason"] = "category-change"
            }
            return event
        case let .audioInterrupted(by): return ["event": "audio-interrupted", "by": by]
        case .audioInterruptionEnded: return ["event": "audio-interruption-ended"]
        case let .audioDeviceFailed(message): return ["event": "audio-device-failed", "message": message]
        case let .hostNetworkChanged(added, removed, routeChanged):
            return ["event": "network-changed", "added": added, "removed": removed, "route_changed": routeChanged]
        case let .playoutReset(uuid, reset):
            return ["event": "playout-reset", "call": uuid.uuidString, "reason": reset.reason.rawValue,
                    "jump_ms": milliseconds(reset.jump)]
        case let .iceRestarted(uuid, byPeer): return ["event": "ice-restart", "call": uuid.uuidString, "by_peer": byPeer]
        case let .firstAudio(uuid, after): return ["event": "first-audio", "call": uuid.uuidString, "after_ms": milliseconds(after)]
        case let .earlyMedia(uuid): return ["event": "early-media", "call": uuid.uuidString]
        case let .transfer(uuid, status, detail): return ["event": "transfer", "call": uuid.uuidString, "status": status, "detail": detail]
        case let .rejected(uuid, reason): return ["event": "rejected", "call": uuid.uuidString, "reason": reason.rawValue]
        case let .refused(uuid, from, reason):
            return ["event": "refused", "call": uuid.uuidString, "fingerprint": from.hex, "reason": reason.rawValue]
        case let .setup(uuid, steps):
            return ["event": "setup", "call": uuid.uuidString,
                    "steps": steps.map { ["step": $0.name, "ms": milliseconds($0.at)] as [String: Any] }]
        case let .ended(uuid, reason, detail, duration):
            return ["event": "ended", "call": uuid.uuidString, "reason": reason.rawValue, "detail": detail ?? NSNull(),
                    "duration_s": duration.map { seconds($0) as Any } ?? NSNull()]
        case let .peerError(text): return ["event": "peer-error", "message": text]
        case let .registered(relay): return ["event": "registered", "relay": relay.description]
        case let .sipRegistration(state):
            switch state {
            case let .registered(aor, expires):
                return ["event": "sip-registered", "address": aor, "expires_s": Int(expires.components.seconds)]
            case let .failed(aor, status, reason, retry):
                return ["event": "sip-registration-failed", "address": aor, "status": status, "reason": reason,
                        "retry_s": Int(retry.components.seconds)]
            case let .unregistered(aor):
                return ["event": "sip-unregistered", "address": aor]
            }
        case let .relayLost(reason): return ["event": "relay-lost", "reason": reason]
        case let .sessionWaiting(id): return ["event": "session-waiting", "session": id]
        case let .sessionFailed(reason): return ["event": "session-failed", "reason": reason]
        case let .session(uuid, status): return ["event": "session", "call": uuid.uuidString, "status": status.rawValue]
        case let .room(uuid, event): return room(uuid, event)
        case let .conferenceRoom(address, status):
            var object: [String: Any] = ["event": "conference-room", "room": address.description]
            switch status {
            case .joining: object["status"] = "joining"
            case let .joined(call): object["status"] = "joined"; object["call"] = call.uuidString
            case let .lost(reason, retryIn): object["status"] = "lost"; object["reason"] = reason; object["retry_in_ms"] = milliseconds(retryIn)
            case .left: object["status"] = "left"
            }
            return object
        }
    }

    /// A room event: `room-joined` (this side's id and the others), `participant-joined`,
    /// `participant-left`, `talking` and `participant-muted` (who, with `on`), `group-secured`
    /// (an end-to-end encrypted group's security code and size) and `sender-key` (a member
    /// heard as silence for want of its key, with the reason, or heard again: `missing` null).
    static func room(_ uuid: UUID, _ event: RoomEvent) -> [String: Any] {
        func who(_ participant: RoomParticipant) -> [String: Any] {
            ["id": participant.id, "name": participant.name ?? NSNull(), "muted": participant.muted]
        }
        let call = uuid.uuidString
        return switch event {
        case let .joined(room, me, others): ["event": "room-joined", "call": call, "room": room, "id": me, "participants": others.map(who)]
        case let .participantJoined(participant): ["event": "participant-joined", "call": call, "participant": who(participant)]
        case let .participantLeft(participant): ["event": "participant-left", "call": call, "participant": who(participant)]
        case let .talking(participant, on): ["event": "talking", "call": call, "participant": who(participant), "on": on]
        case let .participantMuted(participant, on): ["event": "participant-muted", "call": call, "participant": who(participant), "on": on]
        case let .groupSecured(code, members): ["event": "group-secured", "call": call, "securityCode": code, "members": members]
        case let .senderKey(participant, missing):
            ["event": "sender-key", "call": call, "participant": who(participant), "missing": missing ?? NSNull()]
        }
    }

    public static func milliseconds(_ d: Duration) -> Double {
        (seconds(d) * 10_000).rounded() / 10
    }

    public static func seconds(_ d: Duration) -> Double {
        Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }
}
