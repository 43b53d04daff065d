import Calls
import Foundation
import Logging

/// Early media: a call's media running before it is answered. The caller plays what the
/// callee sends with its early answer (SIP's 183: announcements, ringback), its microphone
/// silent; a callee sends its greeting before it answers or declines (``CallNode/progress(_:)``).
/// The state (``LegState/earlyMedia``) decides; the manager hears of the call's answer only when
/// the call is taken.
extension CallLeg {
    /// The media is keyed on an early answer: the event stream hears how, and the router is
    /// asked for the audio session (the manager is not told: the call is unanswered).
    func reportEarlyMedia() async {
        mark("early-media-keyed")
        reportSecured()
        await report(.awaitingAudio)
    }

    /// Starts the media before the call is answered (the audio session is active).
    func startEarlyMedia(microphoneMuted: Bool) async {
        guard let media else { return }
        do {
            try await media.setMuted(microphoneMuted)
            try await media.start()
            mediaStarted = true
            mark("early-media-started")
            logger.info("call \(uuid): early media \(outgoing ? "from the callee" : "to the caller") before the call is answered")
            broadcaster.send(.earlyMedia(uuid))
        } catch {
            post(.event(.end(.failed("audio could not start: \(error)")), done: nil))
        }
    }

    /// The early answer stands now the call is taken: the manager hears of the offer and answer
    /// it was not told of while the call was unanswered.
    func reportAnswered() async {
        do {
            try await manager.report(.progress(uuid, outgoing ? .answerReceived : .answerSent))
        } catch {
            logger.warning("call \(uuid): answered after early media, but: \(error)")
        }
    }
}

/// Why the leg did not do what it was asked (early media the state refused, digits with no
/// media to carry them), in words for the embedder.
struct LegRefusal: Error, CustomStringConvertible {
    let description: String
}
