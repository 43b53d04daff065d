// Voicemail: a swift-service-lifecycle Service that answers every call, plays the caller a
// greeting and a beep, records what the caller says after the beep to a file of its own (at most
// --max-seconds), then hangs up. Callers who call at the same time each get their own greeting
// from its start and their own message; `callnode recents --home HOME` lists the messages.
// SIGINT or SIGTERM shuts it down gracefully (hang up, stop media, release devices, sockets).
//
// Run: swift run answering-service [--greeting WAV] [--messages DIR] [--listen HOST:PORT]
//                                  [--max-seconds N] [--home DIR] [--bind ADDRESS]
// Then, from another terminal: callnode call HOST:PORT --input tone --duration 10
import CallNode
import Foundation
import Locking
import Logging
import ServiceLifecycle

/// The options, from the command line.
struct Options {
    var greeting = FileManager.default.temporaryDirectory.path + "/voicemail-greeting.wav"
    var messages = FileManager.default.temporaryDirectory.path + "/voicemail/"
    var listen = SignalAddress(host: "127.0.0.1", port: 7600)
    var maxSeconds = 30.0
    var home = FileManager.default.temporaryDirectory.path + "/answering-service"
    /// Media (ICE host candidates) only on this address.
    var bind: String?

    init(_ arguments: [String]) throws {
        var rest = arguments.dropFirst()
        while let flag = rest.popFirst() {
            guard let value = rest.popFirst() else { throw Failure("\(flag) needs a value") }
            switch flag {
            case "--greeting": greeting = value
            case "--messages": messages = value.hasSuffix("/") ? value : value + "/"
            case "--listen":
                guard let address = SignalAddress(value) else { throw Failure("--listen '\(value)' is not HOST:PORT") }
                listen = address
            case "--max-seconds":
                guard let seconds = Double(value), seconds > 0 else { throw Failure("--max-seconds must be a positive number") }
                maxSeconds = seconds
            case "--home": home = value
            case "--bind": bind = value
            default: throw Failure("unknown option \(flag) (--greeting, --messages, --listen, --max-seconds, --home, --bind)")
            }
        }
    }
}

struct Failure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// The greeting, then a 1 kHz beep of 0.4 s, then silence: what every caller hears, from its start.
func prompt(greeting: [Int16]) -> [Int16] {
    let beep = (0..<19_200).map { Int16(8_000 * sin(2 * Double.pi * 1_000 * Double($0) / 48_000)) }
    return greeting + [Int16](repeating: 0, count: 9_600) + beep
}

/// Writes a caller's message: nothing while the prompt plays, then at most `limit` samples.
final class MessageSink: AudioSink {
    let format: AudioFormat
    private let file: WAVFileSink
    private let counts: Locked<(skip: Int, left: Int)>

    init(path: String, format: AudioFormat, skip: Int, limit: Int) {
        self.format = format
        file = WAVFileSink(path: path, format: format)
        counts = Locked((skip, limit))
    }

    func start() throws(AudioDeviceError) { try file.start() }
    func stop() { file.stop() }

    func write(_ frame: [Int16]) {
        let part: ArraySlice<Int16> = counts.withLock { counts in
            let skipped = min(counts.skip, frame.count)
            counts.skip -= skipped
            let kept = min(counts.left, frame.count - skipped)
            counts.left -= kept
            return frame[skipped..<(skipped + kept)]
        }
        if !part.isEmpty { file.write(Array(part)) }
    }

    func fillSkipped(samples: Int) { write([Int16](repeating: 0, count: samples)) }
}

/// One line on stdout, at once (also when it goes to a log file).
func say(_ line: String) {
    print(line)
    fflush(nil)
}

let options: Options
do {
    options = try Options(CommandLine.arguments)
} catch {
    FileHandle.standardError.write(Data("answering-service: \(error)\n".utf8))
    exit(64)
}
if !FileManager.default.fileExists(atPath: options.greeting) {
    // No greeting given: synthesize a short speech-like one.
    try WAV.write(SyntheticSpeech.samples(seconds: 2), format: AudioFormat(), path: options.greeting)
}
let (greetingFormat, greetingSamples) = try WAV.read(path: options.greeting)
let spoken = prompt(greeting: WAV.monoResampled(greetingSamples, from: greetingFormat, to: 48_000))
try FileManager.default.createDirectory(atPath: options.messages, withIntermediateDirectories: true)

var configuration = CallNodeConfiguration(home: options.home)
configuration.displayName = "voicemail"
configuration.listenAddress = options.listen
configuration.autoAnswer = true
configuration.autoAnswerOthers = .keep  // every caller leaves a message of their own
configuration.acceptUnknownCallers = true  // a public answering service takes anyone's call
configuration.audio = NodeAudioBackend(input: .silence, output: .null)
if let bind = options.bind { configuration.ice.localAddresses = [bind] }
let messages = options.messages, limit = Int(options.maxSeconds * 48_000)
configuration.callAudio = { request throws(AudioDeviceError) in
    let path = messages + CallAudio.recordingName(for: request)
    return CallAudio(source: WAVFileSource(samples: spoken, format: request.format),
                     sink: MessageSink(path: path, format: request.format, skip: spoken.count, limit: limit),
                     recording: path)
}
let node = try await CallNode(configuration: configuration)
say("voicemail on \(node.listenAddress?.description ?? "?"), identity \(node.identity.fingerprint)")
say("greeting: \(options.greeting) (\(String(format: "%.1f", Double(spoken.count) / 48_000)) s with the beep); messages: \(options.messages), at most \(options.maxSeconds) s each")

/// Logs each call and hangs it up once its message is as long as allowed.
struct Mailbox: Service {
    let node: CallNode
    let callLength: Duration

    func run() async throws {
        try await withThrowingDiscardingTaskGroup { group in
            for await event in node.events().cancelOnGracefulShutdown() {
                switch event {
                case let .incoming(_, from, name, _):
                    say("call from \(name ?? from.short)")
                case let .connected(call, _):
                    say("answered \(call); greeting, beep, then recording")
                    let node = self.node, length = callLength
                    group.addTask {
                        try? await Task.sleep(for: length)
                        try? await node.hangUp(call)
                    }
                case let .ended(call, reason, _, duration):
                    say("call \(call) ended (\(reason)) after \(duration.map { "\($0)" } ?? "-")")
                default:
                    break
                }
            }
        }
    }
}

let callLength = Duration.milliseconds(Int64((Double(spoken.count) / 48_000 + options.maxSeconds) * 1_000))
let group = ServiceGroup(configuration: .init(
    services: [.init(service: node), .init(service: Mailbox(node: node, callLength: callLength))],
    gracefulShutdownSignals: [.sigint, .sigterm],
    logger: Logger(label: "answering-service")))
try await group.run()
