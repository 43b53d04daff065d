/// CallNode: a peer-to-peer audio call node.
///
/// This umbrella module re-exports the node's parts so embedders write one import:
/// - `ICE`: ``IceAgent`` over libnice — gathering, trickle, TURN/STUN, restart, datagrams.
/// - `RTP`: RTP/RTCP packets, reception statistics, the adaptive jitter buffer.
/// - `Media`: Opus, SRTP, audio endpoints (ALSA, WAV, tone, manual) and ``MediaActor``;
///   ``IceMediaTransport`` runs a call's media over an ``IceAgent``.
/// - `MediaTiming`: the ``MediaClock`` that paces every call (real time on media threads of its
///   own, or manual in tests).
/// - `VoiceProcessing`: ``VoiceProcessor`` (echo cancellation, noise suppression, gain).
/// - `AudioSession`: ``AudioSessionOwner``, the one owner of the audio session, with the
///   ownership policy (system-owned or app-owned) in its type.
/// - `Calls`: ``CallManager`` (CallKit's provider and controller), the call directory, Recents.
/// - `SDP`: session descriptions (RFC 8866) with typed views of the attributes a call uses.
/// - `CallCore`: one call's state machine (``LegState``): every decision of a call, with no
///   networking, no media and no concurrency; the signals a call speaks (``CallSignal``).
/// - `DTLS`: DTLS-SRTP (RFC 5763/5764) over OpenSSL, keying SRTP on the media path.
/// - `Clocks`: ``TimerClock``, the one clock a node's timers run on (a node's configuration
///   takes one), and the helpers on `Duration`.
/// - `JanusRoom`: a Janus room's session as a plain value (``JanusRoomSession``) and a
///   room's address (``JanusRoomAddress``), which ``CallTarget/janus(_:pin:)`` takes.
/// Only this module re-exports: each of the others imports what it uses by name.
@_exported import AudioSession
@_exported import CallCore
@_exported import Calls
@_exported import Clocks
@_exported import DTLS
@_exported import ICE
@_exported import JanusRoom
@_exported import Media
@_exported import MediaTiming
@_exported import RTP
@_exported import SDP
@_exported import Signaling
@_exported import VoiceProcessing

/// The version of the CallNode library.
public enum CallNodeVersion {
    /// Semantic version string.
    public static let string = "0.1.0"
}
