import AudioDevices
import Foundation
import Media

/// Audio an embedder puts into a call or takes out of it while it runs: prompts played to the
/// peer (an answering service's greeting, a menu), recordings started and stopped on demand.
extension CallNode {
    /// Mixes `source` into what `call` sends, at `volume` (0–4, 1 = as it is), over the
    /// microphone; it replaces any source played before. `nil` stops what is playing.
    ///
    /// The source must be mono: a ``PromptSource`` reads files and makes tones. One at another
    /// rate than the call sends at (48 kHz, or 8 kHz for a G.711 call with its own source) is
    /// resampled as it plays. A held call sends no audio, so a prompt pauses while it is held.
    /// - Throws: ``CallNodeError/noSuchCall(_:)``, ``CallNodeError/noMedia(_:)`` before the
    ///   call has connected, ``CallNodeError/media(_:)`` for a source in the wrong format.
    public func play(_ source: (any AudioSource)?, into call: UUID, volume: Double = 1) async throws(CallNodeError) {
        guard let leg = legs[call] else {
            source?.stop()
            throw .noSuchCall(call)
        }
        let error = await leg.ask(fallback: CallNodeError.noSuchCall(call)) { .appAudio(source, volume: volume, $0) }
        if let error { throw error }
    }

    /// Records `call` into `sink` (mono at the call's rate) from now on: what this node hears,
    /// and with `mixingSent` what it sends as well, mixed. `nil` stops the recording and stops
    /// its sink (a ``WAVFileSink`` is then complete). The call's end stops it too.
    /// - Throws: ``CallNodeError/noSuchCall(_:)``, ``CallNodeError/noMedia(_:)`` before the
    ///   call has connected, ``CallNodeError/media(_:)`` when the sink cannot start.
    public func record(_ call: UUID, into sink: (any AudioSink)?, mixingSent: Bool = true) async throws(CallNodeError) {
        guard let leg = legs[call] else { throw .noSuchCall(call) }
        let error = await leg.ask(fallback: CallNodeError.noSuchCall(call)) { .recordingTap(sink, mixingSent: mixingSent, $0) }
        if let error { throw error }
    }

    /// Sets `call`'s microphone gain (what the peer hears of this node) and output gain (how
    /// loud the peer plays here), each 0–4 with 1 as it is; nil leaves one as it is. Returns
    /// both as they are now. A recording of the call is not changed by the output's gain.
    /// - Throws: ``CallNodeError/noSuchCall(_:)``, ``CallNodeError/noMedia(_:)`` before the
    ///   call has connected.
    @discardableResult
    public func setVolumes(_ call: UUID, microphone: Double? = nil, output: Double? = nil) async throws(CallNodeError) -> CallVolumes {
        guard let leg = legs[call] else { throw .noSuchCall(call) }
        let noCall = CallVolumes(microphone: -1, output: -1)
        let volumes = await leg.ask(fallback: noCall) { .volumes(microphone: microphone, output: output, $0) }
        guard let volumes else { throw .noMedia(call) }
        guard volumes != noCall else { throw .noSuchCall(call) }
        return volumes
    }
}
