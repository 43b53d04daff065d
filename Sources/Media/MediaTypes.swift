@_exported import AudioCodec
@_exported import AudioDevices
@_exported import FrameCrypto
import RTP
import Locking
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// How muting silences the microphone.
public enum MuteMode: String, Sendable, CaseIterable {
    /// Keep capturing and sending, but send silence (fast; the device stays open).
    case sendSilence
    /// Close the capture device while muted and reopen it on unmute.
    case restartDevice
    /// Zero the microphone input only: app audio mixed into the call is still sent.
    case inputMixer
}

/// When to send each frame again in the next packet (RFC 2198 redundant audio).
public enum RedundancyPolicy: String, Sendable, CaseIterable {
    /// Never (the peer may still send redundancy; it is always used when it arrives).
    case off
    /// From the first frame (a call's loss is not known before the peer's first reports, and
    /// its first words matter), then for as long as the peer reports loss in RTCP: it stops
    /// once reports have shown none for ``MediaConfiguration/redundancyHold``, and starts
    /// again with the first report of loss. A clean call goes back to the plain bitrate.
    case adaptive
    /// From the first frame.
    case always
}

/// Settings of one call's media.
public struct MediaConfiguration: Sendable, Equatable {
    /// The encoder profile. Its sample rate is replaced by the source's rate.
    public var opus: OpusConfiguration
    /// The RTP payload type of the audio (for Opus dynamic: 111 by default, RFC 7587; for
    /// G.711 the static 0 or 8).
    public var payloadType: UInt8
    /// The codec: Opus (the default), or G.711 for SIP peers that speak nothing else. G.711
    /// runs its RTP clock at 8 kHz, has no FEC and no redundancy, and its telephone events
    /// run at 8 kHz too.
    public var encoding: AudioEncoding = .opus
    public var jitterBuffer: JitterBufferConfiguration
    /// How often RTCP reports are sent.
    public var rtcpInterval: Duration
    /// Early feedback (RFC 4585 §3.5, as AVPF allows): when heavy loss starts on a path the
    /// peer last heard was (nearly) clean, a report goes out at once (after at least this many
    /// packets of the interval) instead of up to a whole interval later, so the sender's
    /// redundancy grows within a fraction of a second of the loss. Nil: reports only on the
    /// interval.
    public var earlyReportAfterPackets: Int? = 10
    /// How often a ``MediaEvent/statistics(_:)`` event is emitted.
    public var statisticsInterval: Duration
    public var muteMode: MuteMode
    /// The RTCP CNAME (an opaque per-node name).
    public var cname: String
    /// The SSRC this side sends with, when its SDP announced one (`a=ssrc`: media servers such
    /// as Janus drop packets of an SSRC they were not told of); nil: a random one.
    public var ssrc: UInt32?
    /// RFC 6464: each audio packet says its frame's level on this one-byte header extension id
    /// (the answer kept it: a mixer such as Janus's AudioBridge tells who talks from it).
    public var audioLevelExtension: UInt8?
    /// Whether FEC follows the loss the peer reports in RTCP (on by default; FEC costs quality
    /// on a clean network, so it is planned only for the loss actually seen).
    public var adaptiveFEC: Bool
    /// The RTP payload type of RFC 4733 telephone events (DTMF), 101 by default.
    public var telephoneEventPayloadType: UInt8
    /// How long each sent DTMF digit lasts.
    public var dtmfDuration: Duration
    /// Audio between two sent digits.
    public var dtmfGap: Duration
    /// How long nothing may arrive from the peer before ``MediaEvent/inboundStalled`` (the
    /// path is probably cut: a peer always sends at least a DTX frame every 400 ms and RTCP
    /// every second).
    public var stallTimeout: Duration = .seconds(1)
    /// The RTP payload type of RFC 2198 redundant audio (`red/48000/2`) both sides agreed on, or
    /// `nil` when the peer does not support it. Only then is redundancy sent or understood.
    public var redundancyPayloadType: UInt8?
    /// When to send redundancy, if the peer supports it. Each redundant packet carries the
    /// previous frame again, so a single lost packet is rebuilt at full quality from the next
    /// one, at the price of twice the payload bitrate while it is on. While it is on, Opus's
    /// in-band FEC plans for no loss: it would take bits from the primary encoding to protect
    /// the same single losses less well.
    public var redundancy: RedundancyPolicy = .adaptive
    /// Move the playout delay by time-stretching the decoded speech (a pitch period at a time,
    /// ``TimeStretcher``) rather than by dropping or inserting whole frames (default on).
    public var timeStretching = true
    /// Whether the encoder's complexity follows the media clock's load (default on): when the
    /// media threads run out of time, every call on the clock encodes with less work (down to
    /// the clock's minimum) rather than sending frames late, and goes back up as the load
    /// falls (``MediaClock/complexityCap``). Never above ``OpusConfiguration/complexity``.
    public var complexityFollowsLoad = true
    /// With ``RedundancyPolicy/adaptive``: how long after the start, or the last report of
    /// loss, redundancy stays on: 8 s, so a clean call is back at its plain bitrate within
    /// 10 s of its start (the first report after the hold turns it off).
    public static let redundancyHold: Duration = .seconds(8)
    /// With ``RedundancyPolicy/adaptive``: how long the peer's reports must ask for fewer
    /// copies before one is left out (more are added at once).
    public static let redundancyStepDown: Duration = .seconds(5)
    /// With ``RedundancyPolicy/adaptive``: the most earlier frames a packet carries again (1–5).
    /// Each copy more leaves only longer runs of losses to concealment (at 30 % random loss,
    /// 9 % of frames with one copy, 2.7 % with two, 0.8 % with three; at 50 %, 6.3 % with
    /// three, 1.6 % with five) and costs one more frame of payload (beyond three copies the
    /// frames are coded at a lower bitrate instead). Browsers take one; nodes take up to five.
    public var maximumRedundancyDepth = 5
    /// With redundancy on: the copies per packet from the first frame until the peer's first
    /// report, while the path's loss is not known (default 3; at most
    /// ``maximumRedundancyDepth``). A call loses most in its first second, before the reports
    /// have said anything; the first report sets the depth its loss wants at once (one copy
    /// on a clean path). Over 20 loss patterns from the first packet (`callnode-bench quality`),
    /// a first depth of 3 instead of 1 took 30 % random from PESQ-WB 3.28 to 3.47, and 10 %
    /// from 3.73 to 3.81.
    public var initialRedundancyDepth = 3

    /// Which earlier frames a packet carries at each depth, in frames back: the frames just
    /// before (1; 1, 2; 1, 2, 3; up to 1–5), or — when the peer's loss-run reports show losses
    /// coming in bursts — spread (1; 1, 3; 1, 3, 6; 1, 2, 4, 6; 1, 2, 3, 4, 6: never beyond
    /// ``deepestRedundantFrame``). Against random loss any copies do as well as any
    /// others (a frame is lost only when its packet and every packet with a copy are), and
    /// close ones need the least delay; against bursts, spread copies are what a burst rarely
    /// takes all of (10 % loss in bursts of 3 on average: 2.9 % of frames left to concealment
    /// with copies 1, 2, 3 back, 1.0 % with 1, 3, 6), at the price of delay while losses
    /// happen (the receiver holds the deepest copy's frames, six instead of three). A browser's
    /// RED takes the frame before only.
    public static func redundancyOffsets(depth: Int, spread: Bool = false) -> [Int] {
        switch (depth, spread) {
        case (...1, _): [1]
        case (2, false): [1, 2]
        case (2, true): [1, 3]
        case (3, false): [1, 2, 3]
        case (3, true): [1, 3, 6]
        case (4, false): [1, 2, 3, 4]
        case (4, true): [1, 2, 4, 6]
        case (_, false): [1, 2, 3, 4, 5]
        case (_, true): [1, 2, 3, 4, 6]
        }
    }

    /// Losses count as bursty when their runs are this many times longer than random loss of
    /// the same rate would make them (its mean run is 1 / (1 − loss)).
    public static let burstinessToSpread = 1.6

    /// How long the stream being played must have been quiet before a packet of another
    /// source (a new SSRC) takes the playout over: a peer that restarts its stream stops the
    /// old one, while two streams interleaved on one port (forked early media, a stray
    /// sender) would otherwise restart the playout at every packet and play nothing.
    public static let sourceTakeover: Duration = .milliseconds(60)

    /// The deepest copy a packet carries or a receiver takes, in frames back.
    public static let deepestRedundantFrame = 6
    /// The most bytes a packet's payload may take with its redundant copies (older ones are
    /// left out first).
    public var redundancyBudget = 1_000

    public init(opus: OpusConfiguration = OpusConfiguration(), payloadType: UInt8 = 111,
                jitterBuffer: JitterBufferConfiguration = JitterBufferConfiguration(),
                rtcpInterval: Duration = .seconds(1), statisticsInterval: Duration = .seconds(1),
                muteMode: MuteMode = .sendSilence, cname: String = "callnode", adaptiveFEC: Bool = true,
                telephoneEventPayloadType: UInt8 = 101, dtmfDuration: Duration = .milliseconds(100),
                dtmfGap: Duration = .milliseconds(60)) {
        self.telephoneEventPayloadType = telephoneEventPayloadType
        self.dtmfDuration = dtmfDuration
        self.dtmfGap = dtmfGap
        self.opus = opus
        self.payloadType = payloadType
        self.jitterBuffer = jitterBuffer
        self.rtcpInterval = rtcpInterval
        self.statisticsInterval = statisticsInterval
        self.muteMode = muteMode
        self.cname = cname
        self.adaptiveFEC = adaptiveFEC
    }
}

extension MediaConfiguration {
    /// Whether `red` can carry redundant audio here: a dynamic payload type (35–63 or 96–127)
    /// that neither Opus nor telephone events use.
    public func isUsableRedundancyPayloadType(_ red: Int) -> Bool {
        ((35...63).contains(red) || (96...127).contains(red)) && red != Int(payloadType) && red != Int(telephoneEventPayloadType)
    }

    /// Why ``redundancyPayloadType`` cannot be used, or `nil` if it can (or is not set).
    var redundancyProblem: String? {
        guard let red = redundancyPayloadType, !isUsableRedundancyPayloadType(Int(red)) else { return nil }
        return "redundant audio needs its own dynamic payload type (35–63 or 96–127), got \(red)"
    }
}

/// The keys of a call: our SRTP key protects what we send, the peer's checks what we receive;
/// optional frame keys add end-to-end encryption of every frame under SRTP.
public struct MediaKeys: Sendable, Equatable {
    /// SRTP's keys each way; both nil: plain RTP, nothing protected (``unencrypted``).
    public var outbound: SRTPKey?
    public var inbound: SRTPKey?
    /// When set, frames are sealed end to end under SRTP (``FrameKeyAgreement``).
    public var frameEncryption: FrameKeys?

    /// Plain RTP and RTCP, in the clear: for a SIP peer that speaks no SRTP, when allowed.
    public static let unencrypted = MediaKeys(outbound: nil, inbound: nil)

    public init(outbound: SRTPKey?, inbound: SRTPKey?, frameEncryption: FrameKeys? = nil) {
        self.outbound = outbound
        self.inbound = inbound
        self.frameEncryption = frameEncryption
    }
}

/// Why media could not start or run.
public enum MediaError: Error, Sendable, Equatable, CustomStringConvertible {
    case invalidConfiguration(String)
    case device(AudioDeviceError)
    case codec(String)
    case crypto(String)
    /// ``MediaActor/start()`` after ``MediaActor/stop()``.
    case stopped
    /// DTMF digits other than 0–9, *, #, A–D.
    case invalidDTMF(String)

    public var description: String {
        switch self {
        case let .invalidConfiguration(detail): "invalid media configuration: \(detail)"
        case let .device(error): error.description
        case let .codec(detail): "codec error: \(detail)"
        case let .crypto(detail): "SRTP error: \(detail)"
        case .stopped: "media already stopped"
        case let .invalidDTMF(digits): "DTMF digits must be 0–9, *, # or A–D, got '\(digits)'"
        }
    }
}

/// A snapshot of one call's media.
public struct MediaStatistics: Sendable, Equatable {
    /// The call's codec.
    public var encoding: AudioEncoding = .opus
    public var packetsSent = 0
    public var bytesSent = 0
    public var packetsReceived = 0
    public var bytesReceived = 0
    /// Payload bitrate over the last statistics interval, bit/s.
    public var sendBitrate = 0
    public var receiveBitrate = 0
    /// Packets lost from the peer (RFC 3550 cumulative count) and the peer's view of ours.
    public var packetsLost = 0
    public var remoteFractionLost = 0.0
    /// Interarrival jitter of what we receive.
    public var jitter = Duration.zero
    /// From RTCP SR/RR; `nil` until the first report with LSR comes back.
    public var roundTripTime: Duration?
    /// RMS level of what was sent and played over the last 200 ms, in dBFS (−100 for digital
    /// silence). A single 20 ms frame of speech is below −40 dBFS about half the time.
    public var sendLevel = -100.0
    public var receiveLevel = -100.0
    public var jitterBuffer = JitterBufferStatistics()
    /// Inbound packets dropped by SRTP: failed authentication (tampered), replayed, malformed.
    public var authenticationFailures = 0
    public var replaysDropped = 0
    public var malformedDropped = 0
    /// Packets of a stream not played: a second source's while the one played still sends, or
    /// this node's own coming back beside the peer's (``MediaConfiguration/sourceTakeover``).
    public var otherSourcesDropped = 0
    /// Payloads that passed SRTP but failed frame decryption (wrong or missing frame key).
    public var frameDecryptionFailures = 0
    /// DTX frames the encoder asked not to send.
    public var framesNotSent = 0
    /// The loss in-band FEC currently plans for, in percent.
    public var fecExpectedLossPercent = 0
    /// Whether each packet currently carries earlier frames again (RFC 2198).
    public var sendingRedundancy = false
    /// How many earlier frames each packet carries again now (0–5).
    public var redundancyDepth = 0
    /// Whether those copies are spread (the peer reports losses in bursts):
    /// ``MediaConfiguration/redundancyOffsets(depth:spread:)``.
    public var redundancySpread = false
    /// The complexity the encoder uses now (below the configured one while the node is loaded).
    public var opusComplexity = 0
    /// The bitrate Opus codes each frame at, bit/s (lower while five or four copies go out;
    /// 0 for G.711).
    public var opusBitrate = 0
    /// DTMF digits sent and received (RFC 4733 events).
    public var dtmfSent = 0
    public var dtmfReceived = 0
    /// Times nothing arrived from the peer for the stall timeout, and whether that is so now.
    public var inboundStalls = 0
    public var inboundStalled = false

    public init() {}
}

/// What a call's media reports.
public enum MediaEvent: Sendable, Equatable {
    case statistics(MediaStatistics)
    /// The source ended (a WAV file without looping); silence is sent from here on.
    case sourceEnded
    /// The peer sent RTCP BYE.
    case remoteEnded
    /// The peer sent a DTMF digit (RFC 4733), reported once per event.
    case dtmf(Character)
    /// Nothing authentic arrived from the peer for ``MediaConfiguration/stallTimeout``.
    case inboundStalled
    /// Authentic packets arrive again after ``inboundStalled``.
    case inboundResumed
    /// The first frame of the peer's audio was decoded and handed to the sink (once per call).
    case firstAudio
    /// Playout moved to a new place on the peer's stream: this node stalled, the peer's
    /// timestamps jumped, its stream fell behind, or it started a new one.
    case playoutReset(PlayoutReset)
}

/// A call's two gains: the microphone's (what the peer hears of it) and the output's (how loud
/// the peer plays here), each 0–4 with 1 as it is.
public struct CallVolumes: Sendable, Equatable {
    public var microphone: Double
    public var output: Double

    public init(microphone: Double = 1, output: Double = 1) {
        self.microphone = microphone
        self.output = output
    }

    /// The gain in decibels (-inf for 0).
    public static func decibels(_ gain: Double) -> Double { 20 * log10(gain) }
}
