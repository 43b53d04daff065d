import AudioSession
import Foundation

// MARK: Audio session (system-owned mode)

/// In system-owned mode the manager is the provider that activates the audio session: when
/// the first call needs audio, and off again when the last call ends.
extension CallManager {

    func activateAudioIfNeeded() async {
        guard case let .systemOwned(owner) = audioOwnership, !audioActive, !activating,
              calls.values.contains(where: \.needsAudio) else { return }
        activating = true
        defer { activating = false }
        do throws(AudioSessionError) {
            let route = try await owner.providerActivate()
            audioActive = true
            requestsContinuation.yield(.didActivate(route))
            broadcaster.send(.audioActivated(route))
        } catch {
            broadcaster.send(.audioActivationFailed(error.description))
            // No call may go on without its audio: end the ones that needed the session.
            for uuid in order where calls[uuid]?.needsAudio == true {
                endCall(uuid, reason: .failed, status: .connectionClosed, notify: true)
            }
            return
        }
        if calls.isEmpty { await deactivateAudioIfIdle() }
    }

    func deactivateAudioIfIdle() async {
        guard case let .systemOwned(owner) = audioOwnership, audioActive, !activating, calls.isEmpty else { return }
        audioActive = false
        try? await owner.providerDeactivate()
        requestsContinuation.yield(.didDeactivate)
        broadcaster.send(.audioDeactivated)
    }

    func deactivationFinished() { deactivation = nil }

    func audioSessionDidReport(_ event: AudioSessionEvent) async {
        switch event {
        case .interruptionBegan:
            audioActive = false
        case .interruptionEnded:
            await activateAudioIfNeeded()
        default:
            break
        }
    }
}
