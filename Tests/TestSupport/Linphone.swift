import Foundation
import Locking

#if canImport(Glibc)
import Glibc
#endif

/// linphone's console phone (`linphonec`, Debian's `linphone-cli` 5.1) as a SIP peer in tests:
/// listening on 127.0.0.1:`port` (UDP only), one codec, auto-answering, its microphone a WAV
/// file, what it receives recorded. Driven by commands on its standard input (a pipe this object
/// keeps open: at end of input linphonec hangs instead of exiting); what it says is read from its
/// output file.
///
/// What linphonec needs and does (5.1): its config file is rewritten by it, so a fresh one is
/// written here each time; `[storage]` at `null` (with a fresh home it cannot open its database
/// and never starts); IPv6 off needs `ipv6_migration_done=1`; the RTP bind address keeps its
/// SDP on 127.0.0.1. A recording (`record PATH`, before the call) is 16-bit mono at the codec's
/// clock rate, its header written when the stream stops, appended to if the file exists. Lines
/// to wait for: `Call N with URI connected.`, `Media streams established with URI for call N`,
/// `Call N has been paused by URI`, `Receiving tone D from URI`, `Call N with URI ended`.
public final class LinphonePhone: Sendable {
    public static let executable = "/usr/bin/linphonec"
    public static var isInstalled: Bool { access(executable, X_OK) == 0 }

    public let directory: String
    public let port: Int
    public var outputPath: String { directory + "/out.log" }
    public var uri: String { "sip:lp@127.0.0.1:\(port)" }
    private let child: ChildProcess
    private let input: Int32
    private let stopped = Locked(false)

    /// A codec as linphonerc names it.
    public struct Codec: Sendable {
        public var mime: String, rate: Int, channels: Int
        public static let pcmu = Codec(mime: "PCMU", rate: 8_000, channels: 1)
        public static let opus = Codec(mime: "opus", rate: 48_000, channels: 2)
    }

    /// Starts linphonec in `directory` and waits for its prompt.
    /// - Parameters:
    ///   - mediaEncryption: `none`, `srtp` (SDES) or `dtls`; `mandatory` refuses anything else.
    ///   - tone: the WAV it plays as its microphone (and as its hold music).
    public init(directory: String, port: Int, rtpPort: Int, codec: Codec, mediaEncryption: String = "none",
                mandatory: Bool = false, tone: String) async throws {
        self.directory = directory
        self.port = port
        try FileManager.default.createDirectory(atPath: directory + "/home", withIntermediateDirectories: true)
        let config = """
            [sip]
            sip_port=\(port)
            sip_tcp_port=0
            sip_tls_port=0
            bind_address=127.0.0.1
            contact="lp" <sip:lp@127.0.0.1>
            guess_hostname=0
            use_ipv6=0
            ipv6_migration_done=1
            media_encryption=\(mediaEncryption)
            media_encryption_mandatory=\(mandatory ? 1 : 0)
            [rtp]
            audio_rtp_port=\(rtpPort)
            bind_address=127.0.0.1
            [video]
            capture=0
            display=0
            [storage]
            uri=null
            call_logs_db_uri=null
            zrtp_secrets_db_uri=null
            [misc]
            add_missing_audio_codecs=0
            [audio_codec_0]
            mime=\(codec.mime)
            rate=\(codec.rate)
            channels=\(codec.channels)
            [sound]
            hold_music=\(tone)

            """
        try config.write(toFile: directory + "/linphonerc", atomically: true, encoding: .utf8)
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else { throw TestFailure("pipe: \(String(cString: strerror(errno)))") }
        // Neither end leaks into other children (the spawn gives linphonec the read end as stdin).
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        input = ends[1]
        do {
            child = try ChildProcess(Self.executable, ["-c", directory + "/linphonerc", "-a"], output: directory + "/out.log", stdin: ends[0],
                                     environment: ["HOME": directory + "/home"])
        } catch {
            close(ends[0])
            close(ends[1])
            throw error
        }
        close(ends[0])
        guard await waitFor("linphonec> ", timeout: .seconds(15)) else {
            stop()
            throw TestFailure("linphonec did not start: \(output.suffix(500))")
        }
        send("soundcard use files")
        send("play \(tone)")
    }

    /// One command line (`call URI`, `terminate`, `pause`, `resume`, digits to send as DTMF).
    public func send(_ command: String) {
        let line = Array((command + "\n").utf8)
        _ = line.withUnsafeBytes { write(input, $0.baseAddress, $0.count) }
    }

    /// Everything linphonec printed so far.
    public var output: String { (try? String(contentsOfFile: outputPath, encoding: .utf8)) ?? "" }

    /// Waits until linphonec's output holds `text` at least `count` times; false at the deadline.
    public func waitFor(_ text: String, count: Int = 1, timeout: Duration = .seconds(20)) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if output.components(separatedBy: text).count - 1 >= count { return true }
            guard child.isRunning else { return false }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return false
    }

    /// Quits linphonec (its calls end, its recordings are closed); kills it if it lingers.
    public func stop() {
        guard !stopped.withLock({ state in defer { state = true }; return state }) else { return }
        send("quit")
        let deadline = ContinuousClock.now + .seconds(5)
        while child.isRunning && ContinuousClock.now < deadline { usleep(50_000) }
        child.stop()
        close(input)
    }
}
