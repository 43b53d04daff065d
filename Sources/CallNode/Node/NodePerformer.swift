import AudioSession
import Calls
import Foundation
import DTLS
import ICE
import Logging
import Media
import Metrics
import SDP
import ServiceLifecycle
import Signaling
import Locking

/// The performer (CallKit's provider delegate) as a router: each action goes to its call's leg,
/// audio activation to every leg, and the manager's ends to the legs and the event stream.
extension CallNode {
    func handle(_ request: ProviderRequest) async {
        switch request {
        case let .perform(action):
            guard let leg = legs[action.action.callUUID] else {
                // A leg that has just ended (the peer hung up as the user did) is on its way to
                // telling the manager why: that end completes an end action too. Failing it here
                // would end the call as failed first.
                if case .end = action.action, endDetails[action.action.callUUID] != nil { return }
                try? await manager.report(.failed(action.id, reason: "no such call"))
                return
            }
            if case .answer = action.action { await configuration.audioStandIn?.answerActionPerformed() }
            leg.post(.perform(action))
        case let .timedOut(action):
            legs[action.action.callUUID]?.post(.event(.end(.actionTimedOut("\(action.action.kind) timed out")), done: nil))
        case let .callEnded(uuid, reason):
            legs[uuid]?.post(.event(.end(.endedByManager(reason)), done: nil))
        case .didActivate:
            await configuration.audioStandIn?.providerDidActivate()
            audioActive = true
            for uuid in legs.keys { tellAudioActive(uuid) }
        case .didDeactivate:
            audioActive = false
        }
    }

    func managerEvent(_ event: CallEvent) async {
        switch event {
        case let .callEnded(uuid, reason):
            // Ends the manager performed itself (ring timeout, failed answer) reach us here too;
            // the leg's state ends the call once, whichever of the two comes first. The leg has
            // taken it when this returns, so its end's details are here.
            await legs[uuid]?.deliver(.end(.endedByManager(reason)))
            let details = endDetails.removeValue(forKey: uuid)
            var detail = details?.detail
            if reason == .failed, let audioFailure {
                // The device is what the user can fix, so it comes first, whatever else failed in
                // the race that followed it (media that could not start, the peer hanging up).
                let audio = "the audio devices could not open: \(audioFailure)"
                if let other = detail, !other.contains(audioFailure) { detail = "\(audio); \(other)" } else if detail == nil { detail = audio }
            }
            broadcaster.send(.ended(uuid, reason: reason, detail: detail, duration: details?.duration))
            // A later call's failure must not be blamed on this one's devices.
            if legs.isEmpty { audioFailure = nil }
        case let .session(uuid, status):
            broadcaster.send(.session(uuid, status))
        case .audioActivated:
            audioFailure = nil
        case .incomingCall, .actionCompleted, .audioDeactivated, .doNotDisturbChanged, .ringtoneFailed:
            break
        case let .audioActivationFailed(reason):
            // The manager ends the calls that needed audio next; their end says why.
            audioFailure = reason
        }
    }
}
