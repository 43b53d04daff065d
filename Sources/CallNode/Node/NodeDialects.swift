import Calls
import Foundation
import Signaling

/// Calls carried by dialects other than the node's own envelopes: an embedder's wire, a test
/// kit's, the next round's SIP. The node admits and places them as it does its own.
extension CallNode {
    /// Places a call over `dialect` to `handle` (what the call manager and Recents show). Returns
    /// its UUID at once; follow ``events()``.
    ///
    /// - Throws: ``CallNodeError`` when the node is not running or the manager refuses the start
    ///   (the maximum of calls).
    public func call(over dialect: some CallDialect, handle: String, title: String? = nil) async throws(CallNodeError) -> UUID {
        guard isStarted, !isShutDown else { throw .notRunning }
        let uuid = UUID()
        dialectHandles.withLock { $0[uuid] = handle }
        _ = await makeLeg(uuid, outgoing: true, dialect: dialect, target: .handle(handle), title: title)
        do {
            _ = try await manager.controller.request(.start(call: uuid, handle: CallHandle(.generic, handle)))
        } catch {
            dialectHandles.withLock { $0[uuid] = nil }
            await discardLeg(uuid)
            await dialect.close()
            throw .request(error)
        }
        try? await manager.report(.callUpdated(uuid, CallUpdate(remoteHandle: CallHandle(.generic, handle),
                                                                supportsGrouping: true, supportsUngrouping: true)))
        broadcaster.send(.dialing(uuid, .handle(handle)))
        return uuid
    }

    /// What admission (``Admission/decide(_:)``) knows of this node now, and of a caller.
    func admissionFacts(blocked: Bool, knownCaller: Bool?) -> Admission.Facts {
        Admission.Facts(accepting: isStarted && !isShutDown, draining: isDraining, calls: legs.count, maximumCalls: configuration.maximumCalls,
                        blocked: blocked, knownCaller: knownCaller, acceptUnknownCallers: configuration.acceptUnknownCallers)
    }

    /// How the call manager's refusal of a new incoming call is told to the caller.
    static func managerRefusal(_ failure: CallReportFailure) -> Admission.ManagerRefusal {
        switch failure {
        case .incoming(.filteredByBlockList): .blockList
        case .incoming(.filteredByDoNotDisturb): .doNotDisturb
        default: .other  // the maximum of calls, a UUID in use, an unsupported handle, shutting down
        }
    }

    /// An incoming call that `dialect` carries, from `handle`: admitted as any other (the
    /// block list, do-not-disturb, the maximum of calls), then it rings (or is answered, with
    /// auto-answer). A refused call is told why through its dialect, which is then closed.
    ///
    /// - Returns: the call's UUID, or nil when it was refused.
    @discardableResult
    public func admit(_ dialect: some CallDialect, handle: String, invitation: CallInvitation) async -> UUID? {
        await admit(dialect, handle: handle, invitation: invitation, replacing: nil)
    }

    /// As ``admit(_:handle:invitation:)``; a call `replacing` another (an attended transfer's)
    /// does not ring: ``replace(_:with:handle:invitation:)`` answers it.
    func admit(_ dialect: some CallDialect, handle: String, invitation: CallInvitation, replacing: UUID?) async -> UUID? {
        let uuid = UUID()
        let callHandle = CallHandle(.generic, handle)
        var refusal = Admission.decide(admissionFacts(blocked: store.directory.isBlocked(callHandle), knownCaller: nil))
        if refusal == nil {
            do {
                try await manager.report(.newIncomingCall(uuid, CallUpdate(remoteHandle: callHandle, localizedCallerName: invitation.displayName,
                                                                          supportsGrouping: true, supportsUngrouping: true)))
            } catch {
                refusal = Admission.refusal(managerFiltered: Self.managerRefusal(error))
            }
        }
        // Events name a caller by a fingerprint: a handle without one is named by its hash.
        let from = Fingerprint(certificateDER: Array(handle.utf8))
        if let refusal {
            logger.info("refused call from \(handle): \(refusal.rawValue)")
            await dialect.send(.reject(refusal))
            await dialect.close()
            broadcaster.send(.refused(uuid, from: from, refusal))
            return nil
        }
        dialectHandles.withLock { $0[uuid] = handle }
        let leg = await makeLeg(uuid, outgoing: false, dialect: dialect, title: invitation.title)
        broadcaster.send(.incoming(uuid, from: from, name: invitation.displayName, known: false))
        leg.post(.invited(ring: replacing == nil))
        if configuration.autoAnswer, replacing == nil {
            do {
                try await answer(uuid, others: configuration.autoAnswerOthers)
            } catch {
                _ = try? await manager.controller.request(.answer(call: uuid))
            }
        }
        return uuid
    }
}
