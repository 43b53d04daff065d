import CallNode
import Foundation
import Locking

/// What the node's events said of each live call that its list does not hold: when it started
/// and connected, whether its media is encrypted and how, its codec. The API answers with them
/// (`GET /v1/calls`), so a reader that joins mid-call (the console after a reload) sees what the
/// events it missed said.
final class ControlCallFacts: Sendable {
    struct Facts: Sendable, Equatable {
        var started: Date?
        var connected: Date?
        var encrypted: Bool?
        var keyExchange: String?
        var codec: String?
    }

    private let facts = Locked<[UUID: Facts]>([:])

    /// Takes what `event` says; a call's end forgets it.
    func take(_ event: NodeEvent, at now: Date = Date()) {
        switch event {
        case let .dialing(call, _), let .incoming(call, _, _, _):
            facts.withLock { $0[call, default: Facts()].started = $0[call]?.started ?? now }
        case let .connected(call, _):
            facts.withLock { $0[call, default: Facts()].connected = now }
        case let .secured(call, security):
            facts.withLock {
                $0[call, default: Facts()].encrypted = !security.unencrypted
                $0[call, default: Facts()].keyExchange = security.unencrypted ? "none" : security.keyExchange.rawValue
            }
        case let .statistics(call, statistics):
            facts.withLock { $0[call, default: Facts()].codec = statistics.encoding.rtpName }
        case let .ended(call, _, _, _):
            _ = facts.withLock { $0.removeValue(forKey: call) }
        default:
            break
        }
    }

    subscript(call: UUID) -> Facts? { facts.withLock { $0[call] } }

    /// The JSON keys `GET /v1/calls` adds for `call` (nulls for what no event said yet).
    func object(_ call: UUID) -> [String: Any] {
        let known = self[call] ?? Facts()
        return ["started": known.started.map { $0.timeIntervalSince1970 as Any } ?? NSNull(),
                "connected": known.connected.map { $0.timeIntervalSince1970 as Any } ?? NSNull(),
                "encrypted": known.encrypted.map { $0 as Any } ?? NSNull(),
                "key_exchange": known.keyExchange ?? NSNull(), "codec": known.codec ?? NSNull()]
    }

    /// What kind of peer a call's handle names: `sip` (a SIP address), `node` (a node's
    /// certificate fingerprint, 64 hex digits) or `page` (a browser's call page).
    static func peerKind(_ handle: String) -> String {
        let lowered = handle.lowercased()
        if lowered.hasPrefix("sip:") || lowered.hasPrefix("sips:") { return "sip" }
        if lowered.count == 64, lowered.allSatisfy(\.isHexDigit) { return "node" }
        return "page"
    }
}
