// Two CallNodes embedded in one program call each other over loopback: real TLS signaling,
// libnice ICE, SRTP and Opus. Alice sends a tone; Bob records it. Run: swift run two-nodes
import CallNode
import Foundation

func node(_ name: String, input: NodeAudioInput, output: NodeAudioOutput) async throws -> CallNode {
    var configuration = CallNodeConfiguration(home: FileManager.default.temporaryDirectory.path + "/two-nodes-\(getpid())/\(name)")
    configuration.displayName = name
    configuration.listenAddress = SignalAddress(host: "127.0.0.1", port: 0)
    configuration.ice.localAddresses = ["127.0.0.1"]
    configuration.audio = NodeAudioBackend(input: input, output: output)
    configuration.autoAnswer = true
    return try await CallNode(configuration: configuration)
}

let recording = FileManager.default.temporaryDirectory.path + "/two-nodes-\(getpid())-bob.wav"
let alice = try await node("alice", input: .tone(440), output: .null)
let bob = try await node("bob", input: .silence, output: .wav(recording))
// Each trusts the other: a contact is a name, a fingerprint, and where to reach it.
try await alice.store.contacts.add(Contact(name: "bob", fingerprint: bob.identity.fingerprint.hex, address: bob.listenAddress?.description))
try await bob.store.contacts.add(Contact(name: "alice", fingerprint: alice.identity.fingerprint.hex))
await alice.start()
await bob.start()

let events = alice.events()
let call = try await alice.call(.contact("bob"))
var hungUp = false
for await event in events {
    switch event {
    case let .selectedPair(_, pair): print("alice: ICE pair \(pair.local) ↔ \(pair.remote)")
    case let .connected(_, setup): print("alice: connected in \(setup)")
    case let .statistics(_, stats) where stats.packetsSent >= 100 && !hungUp:
        // Once: the call's last figures come again as it ends.
        hungUp = true
        print("alice: sent \(stats.packetsSent) packets; hanging up")
        try await alice.hangUp(call)
    case let .ended(_, reason, _, duration):
        print("alice: ended (\(reason)) after \(duration.map { "\($0)" } ?? "-")")
    default: continue
    }
    if case .ended = event { break }
}
await alice.shutdown()
await bob.shutdown()
print("bob recorded \(try WAV.read(path: recording).samples.count / 48) ms of audio to \(recording)")
