// An answering service: a swift-service-lifecycle Service that answers every call, plays a
// greeting and records the caller; SIGINT or SIGTERM shuts it down gracefully (hang up, stop
// media, release devices, close sockets).
// Run: swift run answering-service [GREETING.wav] [RECORDING.wav] [HOST:PORT]
// Then, from another terminal: callnode call HOST:PORT --input tone --duration 5
import CallNode
import Foundation
import Logging
import ServiceLifecycle

let arguments = CommandLine.arguments
let greeting = arguments.count > 1 ? arguments[1] : FileManager.default.temporaryDirectory.path + "/answering-greeting.wav"
let recording = arguments.count > 2 ? arguments[2] : FileManager.default.temporaryDirectory.path + "/answering-recording.wav"
let address = arguments.count > 3 ? SignalAddress(arguments[3]) : SignalAddress(host: "127.0.0.1", port: 7600)
if !FileManager.default.fileExists(atPath: greeting) {
    // No greeting given: synthesize a short speech-like one.
    try WAV.write(SyntheticSpeech.samples(seconds: 2), format: AudioFormat(), path: greeting)
}

var configuration = CallNodeConfiguration(home: FileManager.default.temporaryDirectory.path + "/answering-service")
configuration.displayName = "answering service"
configuration.listenAddress = address
configuration.autoAnswer = true
configuration.acceptUnknownCallers = true  // a public answering service takes anyone's call
configuration.audio = NodeAudioBackend(input: .wav(greeting), output: .wav(recording))
let node = try await CallNode(configuration: configuration)
print("answering service on \(node.listenAddress?.description ?? "?"), identity \(node.identity.fingerprint)")
print("greeting: \(greeting); recording callers to \(recording)")

/// Logs each call the node takes.
struct CallLog: Service {
    let node: CallNode
    func run() async throws {
        for await event in node.events().cancelOnGracefulShutdown() {
            switch event {
            case let .incoming(_, from, name, _): print("call from \(name ?? from.short)")
            case let .connected(_, setup): print("answered; connected in \(setup)")
            case let .ended(_, reason, _, duration): print("call ended (\(reason)) after \(duration.map { "\($0)" } ?? "-")")
            default: break
            }
        }
    }
}

let group = ServiceGroup(configuration: .init(
    services: [.init(service: node), .init(service: CallLog(node: node))],
    gracefulShutdownSignals: [.sigint, .sigterm],
    logger: Logger(label: "answering-service")))
try await group.run()
