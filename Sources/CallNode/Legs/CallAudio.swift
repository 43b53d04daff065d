import AudioSession
import Foundation
import Locking
import Media
import Signaling

/// Whom a call's own audio is for (see ``CallNodeConfiguration/callAudio``).
public struct CallAudioRequest: Sendable {
    public let call: UUID
    public let outgoing: Bool
    /// The peer as a person names it: its contact name, else the name it gave, else the short
    /// form of its fingerprint.
    public let peerName: String
    /// The peer's proven identity (nil for a web page).
    public let peer: Fingerprint?
    /// When the call's media was built.
    public let started: Date
    /// The call's audio format.
    public let format: AudioFormat
    /// The rate the call's codec carries (8 000 Hz for G.711, 48 000 for Opus): all a call can
    /// hear or send. A sink made at this rate (a G.711 call's recording at 8 kHz) takes the
    /// decoded frames as they are, with no resampling and a sixth of the samples to write; a
    /// source made at it is coded as it is read (hold audio and app audio then come at it too,
    /// or are resampled to it).
    public let codecRate: Int

    public init(call: UUID, outgoing: Bool, peerName: String, peer: Fingerprint?, started: Date, format: AudioFormat,
                codecRate: Int? = nil) {
        self.call = call
        self.outgoing = outgoing
        self.peerName = peerName
        self.peer = peer
        self.started = started
        self.format = format
        self.codecRate = codecRate ?? format.sampleRate
    }
}

/// Audio a call has of its own, instead of the session's microphone (its source) or speaker
/// (its sink): an answering service greets each caller from the start of its prompt and
/// records each message to its own file. Either may be nil (that side stays on the session's
/// bridge). Media still starts only when the audio session's owner activates the session.
public struct CallAudio: Sendable {
    public var source: (any AudioSource)?
    public var sink: (any AudioSink)?
    /// Where the sink records, shown on the call's Recents row (`callnode recents`).
    public var recording: String?

    public init(source: (any AudioSource)? = nil, sink: (any AudioSink)? = nil, recording: String? = nil) {
        self.source = source
        self.sink = sink
        self.recording = recording
    }
}

/// Makes a call's own audio when its media is built; an error fails the call with its reason.
public typealias CallAudioProvider = @Sendable (CallAudioRequest) throws(AudioDeviceError) -> CallAudio

extension CallAudio {
    /// A terminal node's per-call audio: each call plays `input` (mono, at `inputRate`) from its
    /// start (looped), and records into its own WAV file in `directory`
    /// (``recordingName(for:)``). Both run at the rate of what the call carries: a G.711
    /// call's input is resampled to 8 kHz once, for every such call, and its recording is
    /// written as decoded (a sixth of the size); no frame of the call is resampled. Either may
    /// be nil.
    ///
    /// The input is converted here to each rate in `rates` (what G.711 and Opus carry), so a
    /// call's setup converts nothing (a minute of speech takes tens of milliseconds); a call
    /// at another rate converts it the first time.
    public static func perCall(input: [Int16]?, inputRate: Int = 48_000, rates: [Int] = [8_000, 48_000],
                               recordingsIn directory: String?) -> CallAudioProvider {
        var ready: [Int: [Int16]] = [:]
        if let input {
            for rate in rates { ready[rate] = resampled(input, from: inputRate, to: rate, looping: true) }
        }
        let converted = Locked(ready)
        return { request throws(AudioDeviceError) in
            var audio = CallAudio()
            if let input {
                let rate = min(request.format.sampleRate, request.codecRate)
                let samples = try converted.withLock { byRate throws(AudioDeviceError) -> [Int16] in
                    if let done = byRate[rate] { return done }
                    guard let made = resampled(input, from: inputRate, to: rate, looping: true) else {
                        throw .unsupportedFormat("the input at \(inputRate) Hz cannot be resampled to \(rate) Hz")
                    }
                    byRate[rate] = made
                    return made
                }
                audio.source = WAVFileSource(samples: samples, format: AudioFormat(sampleRate: rate, channels: 1), loops: true)
            }
            if let directory {
                let path = (directory.hasSuffix("/") ? directory : directory + "/") + recordingName(for: request)
                let rate = min(request.format.sampleRate, request.codecRate)
                audio.sink = WAVFileSink(path: path, format: AudioFormat(sampleRate: rate, channels: request.format.channels))
                audio.recording = path
            }
            return audio
        }
    }

    /// `2026-11-24_14-03-07_alice_in_1F2E3D4C.wav`: when (local time), with whom, which way, and
    /// the call ID's start, so a person can tell the recordings apart and two at once never clash.
    public static func recordingName(for request: CallAudioRequest) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.dateFormat = "yyyy-MM-dd_HH-mm-ss"
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")
        var peer = String(request.peerName.map { allowed.contains($0) ? $0 : "-" }.prefix(40))
        while peer.contains("--") { peer = peer.replacingOccurrences(of: "--", with: "-") }
        peer = peer.trimmingCharacters(in: CharacterSet(charactersIn: "-"))
        return "\(formatter.string(from: request.started))_\(peer.isEmpty ? "unknown" : peer)_\(request.outgoing ? "out" : "in")_\(request.call.uuidString.prefix(8)).wav"
    }
}
