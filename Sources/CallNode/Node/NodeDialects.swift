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

    /// Whether an incoming call from `handle` may ring, for every dialect's calls: the
    /// admission ladder (``Admission/decide(_:)``) on what the node knows now, then the call
    /// manager's own filters (its block list, do-not-disturb, its limits), which hears of it as
    /// a new incoming call. Returns why the call is refused, nil when it is admitted.
    /// `knownCaller`: whether the caller is a contact (nil where a caller cannot be one).
    func admitIncoming(_ uuid: UUID, handle: CallHandle, name: String?, knownCaller: Bool?) async -> RejectReason? {
        if let refused = Admission.decide(admissionFacts(blocked: store.directory.isBlocked(handle), knownCaller: knownCaller)) {
            return refused
        }
        do {
            try await reportNewIncoming(uuid, handle: handle, name: name)
            return nil
        } catch {
            return Admission.refusal(managerFiltered: Self.managerRefusal(error))
        }
    }

    /// Tells the call manager of a new incoming call (which may refuse it).
    func reportNewIncoming(_ uuid: UUID, handle: CallHandle, name: String?) async throws(CallReportFailure) {
        try await manager.report(.newIncomingCall(uuid, CallUpdate(remoteHandle: handle, localizedCallerName: name,
                                                                  supportsGrouping: true, supportsUngrouping: true)))
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
        let refusal = await admitIncoming(uuid, handle: CallHandle(.generic, handle), name: invitation.displayName, knownCaller: nil)
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
