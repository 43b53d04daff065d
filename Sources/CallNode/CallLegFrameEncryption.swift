import Foundation
import Media
import SDP
import Signaling

/// End-to-end frame encryption between nodes: the offer (the callee's) and the answer (the
/// caller's) each carry a key share (``FrameKeyAttribute``) when their side encrypts frames;
/// with both shares the two sides derive the call's keys (``FrameKeyAgreement``). The SDP
/// travels only inside the pinned TLS connection (through a relay too), so the shares never
/// leave it. A side set to `required` ends a call whose peer sends no share, saying why.
extension CallLeg {
    /// Whether this call takes part: node peers only (a page gets its keys over its WebSocket).
    var negotiatesFrameKeys: Bool { peerKind == .node && configuration.frameEncryption != .off }

    // MARK: The call page

    /// The keys for a page, made once per call (nil: this node does not encrypt frames).
    func pageFrameKeysValue() -> String? {
        guard peerKind == .webPage, configuration.frameEncryption != .off else { return nil }
        let keys = pageKeys ?? FrameKeys(outbound: .random(), inbound: .random())
        pageKeys = keys
        return PageFrameKeysAttribute.keys(keys.outbound.base64, keys.inbound.base64)
    }

    /// The page's offer or answer says whether it encrypts frames: the keys apply if it does.
    /// - Throws: ``NegotiationError`` when this node requires frame encryption and the page cannot.
    func pageAccepted(_ value: String?) throws {
        guard peerKind == .webPage else { return }
        if value == PageFrameKeysAttribute.accept, let keys = pageKeys {
            frameKeys = configuration.frameKeyAdjustment?(keys) ?? keys
        } else if configuration.frameEncryption == .required {
            throw NegotiationError("the page cannot encrypt frames end to end (no encoded-transform API), and this node requires it (--frame-encryption required)")
        }
    }

    /// Our attribute for the first offer or answer (making our share on first use).
    func ownFrameKey() -> FrameKeyAttribute? {
        guard negotiatesFrameKeys else { return nil }
        let agreement = frameAgreement ?? FrameKeyAgreement()
        frameAgreement = agreement
        return FrameKeyAttribute(share: agreement.share, required: configuration.frameEncryption == .required)
    }

    /// The caller, answering the callee's first offer: the attribute for the answer (nil: none).
    /// - Throws: ``NegotiationError`` when one side requires frame encryption and the other cannot.
    func answerFrameKey(offered: FrameKeyAttribute?) throws -> FrameKeyAttribute? {
        guard peerKind == .node else { return nil }
        guard let offered else {
            if configuration.frameEncryption == .required {
                throw NegotiationError("the callee does not encrypt frames end to end, and this node requires it (--frame-encryption required)")
            }
            return nil
        }
        guard let own = ownFrameKey() else {
            if offered.required {
                throw NegotiationError("the callee requires frames encrypted end to end, and this node has frame encryption off")
            }
            return nil
        }
        try deriveFrameKeys(peerShare: offered.share)
        return own
    }

    /// The callee, reading the caller's answer to its first offer.
    /// - Throws: ``NegotiationError`` when this node requires frame encryption and the caller cannot.
    func acceptFrameKey(answered: FrameKeyAttribute?, offered: Bool) throws {
        guard peerKind == .node else { return }
        guard offered, let answered else {
            if configuration.frameEncryption == .required {
                throw NegotiationError("the caller does not encrypt frames end to end, and this node requires it (--frame-encryption required)")
            }
            return
        }
        try deriveFrameKeys(peerShare: answered.share)
    }

    private func deriveFrameKeys(peerShare: String) throws {
        guard let agreement = frameAgreement, let peer else { return }
        let (caller, callee) = outgoing ? (identity.fingerprint, peer) : (peer, identity.fingerprint)
        do {
            let keys = try agreement.keys(peerShare: peerShare, call: uuid, caller: caller.hex, callee: callee.hex, isCaller: outgoing)
            frameKeys = configuration.frameKeyAdjustment?(keys) ?? keys
        } catch {
            throw NegotiationError("\(error)")
        }
    }

    /// The code both people see: from both identities (for a page, its DTLS certificate's).
    var securityCode: String? {
        if peerKind == .webPage {
            guard let remote = negotiated?.dtls?.remoteFingerprint, let page = Fingerprint(dtlsFingerprint: remote) else { return nil }
            return SecurityCode.between(identity.fingerprint, page)
        }
        return peer.map { SecurityCode.between(identity.fingerprint, $0) }
    }
}

extension Fingerprint {
    /// From an SDP `a=fingerprint` value (`sha-256 AB:CD:…`); nil for another hash or a bad value.
    init?(dtlsFingerprint value: String) {
        let parts = value.split(separator: " ")
        guard parts.count == 2, parts[0].lowercased() == "sha-256" else { return nil }
        self.init(parts[1].replacingOccurrences(of: ":", with: ""))
    }
}
