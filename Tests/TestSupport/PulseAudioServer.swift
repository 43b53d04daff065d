#if canImport(Glibc)
import Glibc
#endif

/// A private PulseAudio server with one null sink: a real-time paced sound device reachable
/// through ALSA's `pulse` PCM, whose monitor source records what was played.
public final class PulseAudioServer {
    public let directory: String
    public let socket: String
    public let sink = "callnode_test"
    private let process: ChildProcess

    /// - Parameter name: tells this server's directory from other servers' in the same process.
    public init(name: String = "") throws {
        directory = "/tmp/callnode-pulse-\(getpid())\(name)"
        mkdir(directory, 0o700)
        socket = "\(directory)/native"
        unlink(socket)
        guard access("/usr/bin/pulseaudio", X_OK) == 0 else {
            throw TestFailure("pulseaudio is not installed: run scripts/bootstrap")
        }
        process = try ChildProcess("/usr/bin/env", [
            "PULSE_RUNTIME_PATH=\(directory)", "HOME=\(directory)", "XDG_RUNTIME_DIR=\(directory)",
            "/usr/bin/pulseaudio", "--daemonize=no", "--exit-idle-time=-1", "-n", "--use-pid-file=no",
            "--system=false", "--disable-shm=yes", "--log-level=info",
            "--load=module-native-protocol-unix socket=\(socket) auth-anonymous=1",
            "--load=module-null-sink sink_name=\(sink) rate=48000 channels=1",
        ], output: "\(directory)/log")
        let deadline = ContinuousClock.now + .seconds(15)
        while access(socket, F_OK) != 0 {
            guard process.isRunning, ContinuousClock.now < deadline else {
                process.stop(grace: .zero)
                throw TestFailure("pulseaudio did not start (log: \(directory)/log)")
            }
            usleep(20_000)
        }
    }

    /// Points this process's ALSA `pulse` PCM at the server: playback into the null sink,
    /// capture from its monitor.
    public func useForALSA() {
        setenv("PULSE_SERVER", "unix:\(socket)", 1)
        setenv("PULSE_SINK", sink, 1)
        setenv("PULSE_SOURCE", "\(sink).monitor", 1)
    }

    public func stop() { process.stop(grace: .zero) }
}

