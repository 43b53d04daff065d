import Foundation
import Signaling

/// What the peer says, as the call's leg takes it: progress and the offer and answer to the
/// negotiation, candidates and found pairs to ICE and the state, an end or a refusal to the state.
extension CallLeg {
    /// A signal from the peer.
    func received(_ signal: CallSignal) async {
        do {
            switch signal {
            case .invite, .keepAlive:
                break
            case .ringing:
                mark("ringing")
                await legEvent(.peerRinging)
                // A callee without a certificate (another dialect's: SIP, a line) is named by
                // the hash of the handle it was called at, as such callers are.
                if let callee = peer ?? target.map({ Fingerprint(certificateDER: Array($0.description.utf8)) }) {
                    broadcaster.send(.ringing(uuid, callee: callee))
                }
            case let .offer(sdp):
                try await offered(sdp: sdp)
            case let .answer(sdp):
                try await answered(sdp: sdp)
            case let .earlyAnswer(sdp):
                try await answered(sdp: sdp, early: true)
            case .accepted:
                mark("accepted")
                await legEvent(.peerAccepted)
            case let .candidates(candidates, end):
                await ice.add(candidates, end: end)
            case let .pathFound(path):
                await legEvent(.peerFoundPath(path))
            case let .end(reason):
                if reason == .failed, let text = peerErrorText {
                    // Another dialect's error says whose it is (the SIP peer's status).
                    await legEvent(.end(.failed(peerKind == .other || peerKind == .room ? text : "the other node ended the call: \(text)")))
                } else {
                    await legEvent(.end(.peerEnded(reason)))
                }
            case let .reject(reason):
                broadcaster.send(.rejected(uuid, reason))
                await legEvent(.end(.peerRejected(reason)))
            case let .error(text):
                peerErrorText = text
                broadcaster.send(.peerError("peer reports: \(text)"))
            }
        } catch {
            await negotiationFailed(error)
        }
    }
}
