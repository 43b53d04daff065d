import Calls
import Foundation
import Logging

/// Transfers (SIP's REFER, RFC 3515): this node asks a call's peer to call someone else
/// (``CallNode/transfer(_:to:)``), or follows its peer's request to: the target is admitted as
/// any call the node places (a blocked one is refused), the new call is placed, and the old
/// one ends once the new one connects (the peer hears how it goes from the dialect).
extension CallNode {
    /// Asks the peer of `call` to call `target` in this node's place (a blind transfer). The
    /// transfer's progress comes as ``NodeEvent/transfer(_:status:detail:)`` events; when the
    /// peer's new call connects, this call ends (`transferred to …`); when it fails, this one
    /// goes on.
    ///
    /// - Throws: ``CallNodeError/transfer(_:)`` for a call that is not answered, whose dialect
    ///   cannot transfer (calls between nodes: see the README), or a target that is not a SIP
    ///   address.
    public func transfer(_ call: UUID, to target: String) async throws(CallNodeError) {
        guard let leg = legs[call] else { throw .noSuchCall(call) }
        guard target.hasPrefix("sip:") || target.hasPrefix("sips:"), target.count > 5, !target.contains(where: \.isWhitespace) else {
            throw .transfer("'\(target)' is not a SIP address (sip:user@host[:port])")
        }
        if let refusal = await leg.dialect.transfer(to: target) { throw .transfer(refusal) }
    }

    /// The peer of `old` asks for its transfer (``TransferRequest``): refused if the target is
    /// blocked here or the node takes no new calls, else accepted (202) and placed; the old
    /// call ends when the new one connects.
    func followTransfer(from old: UUID, _ request: TransferRequest) async {
        let target = request.target
        let refusal: (Int, String)? = if store.directory.isBlocked(CallHandle(.generic, target)) {
            (403, "Forbidden (\(target) is blocked here)")
        } else if isDraining || isShutDown {
            (503, "Service Unavailable (this node is draining)")
        } else if legs[old] == nil {
            (481, "Call/Transaction Does Not Exist")
        } else {
            nil
        }
        if let (status, phrase) = refusal {
            logger.notice("call \(old): the peer's transfer to \(target) refused: \(status) \(phrase)")
            broadcaster.send(.transfer(old, status: status, detail: "the peer's transfer to \(target) was refused: \(phrase)"))
            await request.respond(status, phrase)
            return
        }
        await request.respond(202, "Accepted")
        broadcaster.send(.transfer(old, status: 202, detail: "the peer transfers the call to \(target): calling it"))
        // The events are read from before the call exists: its connection cannot be missed.
        let events = self.events()
        keepUntilDone { [weak self] in
            guard let self else { return }
            guard let dialect = await request.dialect() else {
                await request.settled()
                return
            }
            let placed: UUID
            do {
                placed = try await self.call(over: dialect, handle: target, title: nil)
            } catch {
                await self.transferFailed(old, target: target, reason: "\(error)")
                await request.settled()
                return
            }
            for await event in events {
                switch event {
                case .connected(placed, _):
                    await self.transferConnected(old, to: target)
                    await request.settled()
                    return
                case let .ended(placed2, _, detail, _) where placed2 == placed:
                    await self.transferFailed(old, target: target, reason: detail ?? "the call ended before it connected")
                    await request.settled()
                    return
                default:
                    continue
                }
            }
        }
    }

    /// The call placed for the transfer connected: the old one ends, saying so.
    private func transferConnected(_ old: UUID, to target: String) {
        broadcaster.send(.transfer(old, status: 200, detail: "\(target) answered: the transfer is done"))
        legs[old]?.post(.event(.end(.transferred("transferred to \(target) at the peer's request")), done: nil))
    }

    private func transferFailed(_ old: UUID, target: String, reason: String) {
        logger.notice("call \(old): the transfer to \(target) failed: \(reason)")
        broadcaster.send(.transfer(old, status: 500, detail: "the transfer to \(target) failed: \(reason)"))
    }
}
