import Foundation
import Media
import SDP
import Signaling

/// End-to-end frame encryption for one call, as a plain value the call's leg keeps.
///
/// Between nodes, the offer (the callee's) and the answer (the caller's) each carry a key
/// share (``FrameKeyAttribute``) when their side encrypts frames; with both shares the two
/// sides derive the call's keys (``FrameKeyAgreement``). The SDP travels only inside the
/// pinned TLS connection (through a relay too), so the shares never leave it. A call page gets
/// keys made here over its own authenticated WebSocket and says whether it can use them. A side
/// set to `required` ends a call whose peer cannot, saying why in its own words.
struct FrameKeyExchange: Sendable {
    let policy: FrameEncryptionPolicy
    /// Tests replace the derived keys (a wrong key, say).
    let adjustment: (@Sendable (FrameKeys) -> FrameKeys)?
    let peerKind: DialectTraits.Peer
    let call: UUID
    let outgoing: Bool
    let own: Fingerprint
    /// This side's share, made for the first offer or answer.
    private var agreement: FrameKeyAgreement?
    /// The keys offered to a page (node to page, page to node).
    private var pageKeys: FrameKeys?
    /// The call's frame keys, once both shares are known (or, with a page, once it accepted).
    private(set) var keys: FrameKeys?

    /// - Parameter given: keys the call's dialect brings (an end-to-end encrypted group's), in
    ///   force from the start whatever the policy: nothing is agreed with the peer.
    init(policy: FrameEncryptionPolicy, adjustment: (@Sendable (FrameKeys) -> FrameKeys)?, peerKind: DialectTraits.Peer,
         call: UUID, outgoing: Bool, own: Fingerprint, given: FrameKeys? = nil) {
        self.policy = policy
        self.adjustment = adjustment
        self.peerKind = peerKind
        self.call = call
        self.outgoing = outgoing
        self.own = own
        self.given = given != nil
        keys = given.map { adjustment?($0) ?? $0 }
    }

    /// Whether the keys are the dialect's (a group's), not agreed here.
    private let given: Bool

    /// A group's key changed while the call runs (nil leaves one).
    mutating func rekey(outbound: FrameEncryptionKey?, inbound: FrameEncryptionKey?) {
        guard given, var keys else { return }
        if let outbound { keys.outbound = outbound }
        if let inbound { keys.inbound = inbound }
        self.keys = keys
    }

    /// Whether the call takes part in the exchange in its SDP (node peers only).
    private var negotiates: Bool { peerKind == .node && policy != .off }

    // MARK: The call page

    /// The keys for a page, made once per call (nil: this node does not encrypt frames).
    mutating func pageKeysValue() -> String? {
        guard peerKind == .webPage, policy != .off else { return nil }
        let keys = pageKeys ?? FrameKeys(outbound: .random(), inbound: .random())
        pageKeys = keys
        return PageFrameKeysAttribute.keys(keys.outbound.base64, keys.inbound.base64)
    }

    /// The page's offer or answer says whether it encrypts frames: the keys apply if it does.
    /// - Throws: ``NegotiationError`` when this node requires frame encryption and the page cannot.
    mutating func pageAccepted(_ value: String?) throws {
        guard peerKind == .webPage else { return }
        if value == PageFrameKeysAttribute.accept, let pageKeys {
            keys = adjustment?(pageKeys) ?? pageKeys
        } else if policy == .required {
            throw NegotiationError("the page cannot encrypt frames end to end (no encoded-transform API), and this node requires it (--frame-encryption required)")
        }
    }

    // MARK: Between nodes

    /// Our attribute for the first offer or answer (making our share on first use).
    mutating func ownKey() -> FrameKeyAttribute? {
        guard negotiates else { return nil }
        let agreement = self.agreement ?? FrameKeyAgreement()
        self.agreement = agreement
        return FrameKeyAttribute(share: agreement.share, required: policy == .required)
    }

    /// The caller, answering the callee's first offer: the attribute for the answer (nil: none).
    /// - Throws: ``NegotiationError`` when one side requires frame encryption and the other cannot.
    mutating func answerKey(offered: FrameKeyAttribute?, peer: Fingerprint?) throws -> FrameKeyAttribute? {
        try checkOtherPeer()
        guard peerKind == .node else { return nil }
        guard let offered else {
            if policy == .required {
                // Said the same on both sides (the callee hears it as the caller's reason): no "this node".
                throw NegotiationError("the callee does not encrypt frames end to end, and the caller requires it (--frame-encryption required)")
            }
            return nil
        }
        guard let own = ownKey() else {
            if offered.required {
                throw NegotiationError("the callee requires frames encrypted end to end, and the caller has frame encryption off")
            }
            return nil
        }
        try derive(peerShare: offered.share, peer: peer)
        return own
    }

    /// The callee, reading the caller's answer to its first offer.
    /// - Throws: ``NegotiationError`` when this node requires frame encryption and the caller cannot.
    mutating func accept(answered: FrameKeyAttribute?, offered: Bool, peer: Fingerprint?) throws {
        try checkOtherPeer()
        guard peerKind == .node else { return }
        guard offered, let answered else {
            if policy == .required {
                throw NegotiationError("the caller does not encrypt frames end to end, and the callee requires it (--frame-encryption required)")
            }
            return
        }
        try derive(peerShare: answered.share, peer: peer)
    }

    /// Another dialect's peer has no way to agree frame keys: a node that requires them says so.
    private func checkOtherPeer() throws {
        if peerKind == .other || peerKind == .room, policy == .required, !given {
            throw NegotiationError("this call's peer cannot encrypt frames end to end, and this node requires it (--frame-encryption required)")
        }
    }

    private mutating func derive(peerShare: String, peer: Fingerprint?) throws {
        guard let agreement, let peer else { return }
        let (caller, callee) = outgoing ? (own, peer) : (peer, own)
        do {
            let derived = try agreement.keys(peerShare: peerShare, call: call, caller: caller.hex, callee: callee.hex, isCaller: outgoing)
            keys = adjustment?(derived) ?? derived
        } catch {
            throw NegotiationError("\(error)")
        }
    }

    /// The code both people see: from both identities (for a page, its DTLS certificate's).
    func securityCode(peer: Fingerprint?, peerDTLSFingerprint: String?) -> String? {
        if peerKind == .webPage {
            guard let remote = peerDTLSFingerprint, let page = Fingerprint(dtlsFingerprint: remote) else { return nil }
            return SecurityCode.between(own, page)
        }
        return peer.map { SecurityCode.between(own, $0) }
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
