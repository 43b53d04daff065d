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
        if let refusal = await leg.dialect.transfer(to: target, replacing: nil) { throw .transfer(refusal) }
    }

    /// Joins the peers of two calls and leaves them (an attended transfer, RFC 3891): the peer of
    /// `call` is asked to call the peer of `other` (this node's consultation call), its new call
    /// replacing `other` there without ringing. Both calls here end when it has: `call` once
    /// the peer reports success, `other` when the target ends it.
    ///
    /// - Throws: ``CallNodeError/transfer(_:)`` when either call is not an answered SIP call.
    public func transfer(_ call: UUID, replacing other: UUID) async throws(CallNodeError) {
        guard let leg = legs[call] else { throw .noSuchCall(call) }
        guard let consulted = legs[other], other != call else { throw .noSuchCall(other) }
        guard let target = handle(of: other), target.hasPrefix("sip:") || target.hasPrefix("sips:") else {
            throw .transfer("the consulted call is not a SIP call")
        }
        if let refusal = await leg.dialect.transfer(to: target, replacing: consulted.dialect) { throw .transfer(refusal) }
    }

    /// The peer of `old` asks for its transfer (``TransferRequest``): refused if the target is
    /// blocked here or the node takes no new calls, else accepted (202) and placed; the old
    /// call ends when the new one connects.
    func followTransfer(from old: UUID, _ request: TransferRequest) async {
        let target = request.target
        let room = await manager.hasRoomForAnotherCall
        let refusal: (Int, String)? = if store.directory.isBlocked(CallHandle(.generic, target)) {
            (403, "Forbidden (\(target) is blocked here)")
        } else if isDraining || isShutDown {
            (503, "Service Unavailable (this node is draining)")
        } else if legs[old] == nil {
            (481, "Call/Transaction Does Not Exist")
        } else if !room {
            // Decided before the 202: once the transfer is taken, only the call placed for it
            // tells the peer how it goes.
            (503, "Service Unavailable (this node has as many calls as it takes)")
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
        let asker = request.referredBy.map { " (asked by \($0))" } ?? ""
        broadcaster.send(.transfer(old, status: 202, detail: "the peer transfers the call to \(target)\(asker): calling it"))
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
                    self.broadcaster.send(.transfer(old, status: 200, detail: "\(target) answered: the transfer is done"))
                    await self.transferConnected(old, detail: "transferred to \(target) at the peer's request")
                    await request.settled()
                    return
                case .ended(placed, _, let detail, _):
                    await self.transferFailed(old, target: target, reason: detail ?? "the call ended before it connected")
                    await request.settled()
                    return
                default:
                    continue
                }
            }
        }
    }

    /// A call that replaces `old` (an attended transfer's INVITE with Replaces, RFC 3891):
    /// answered at once, without ringing, and `old` ends once it connects.
    func replace(_ old: UUID, with dialect: some CallDialect, handle: String, invitation: CallInvitation) async -> UUID? {
        let events = self.events()
        guard let new = await admit(dialect, handle: handle, invitation: invitation, replacing: old) else { return nil }
        logger.info("call \(new) from \(handle) replaces call \(old)")
        do {
            try await answer(new, others: .keep)
        } catch {
            logger.warning("call \(new) replacing \(old) could not be answered: \(error)")
        }
        keepUntilDone { [weak self] in
            for await event in events {
                switch event {
                case .connected(new, _):
                    await self?.transferConnected(old, detail: "replaced by the call from \(handle)")
                    return
                case .ended(new, _, _, _):
                    return
                default:
                    continue
                }
            }
        }
        return new
    }

    /// The call placed for the transfer connected: the old one ends, saying so.
    private func transferConnected(_ old: UUID, detail: String) {
        legs[old]?.post(.event(.end(.transferred(detail)), done: nil))
    }

    private func transferFailed(_ old: UUID, target: String, reason: String) {
        logger.notice("call \(old): the transfer to \(target) failed: \(reason)")
        broadcaster.send(.transfer(old, status: 500, detail: "the transfer to \(target) failed: \(reason)"))
    }
}
