// Two ICE agents in one program, connected over loopback through real libnice, exchanging a
// few datagrams. Run: swift run ice-loopback
#if canImport(Glibc)
import Glibc
#endif
import CallNode

var offerer = IceConfiguration(role: .controlling)
offerer.localAddresses = ["127.0.0.1"]
var answerer = IceConfiguration(role: .controlled)
answerer.localAddresses = ["127.0.0.1"]

let a = try await IceAgent(configuration: offerer)
let b = try await IceAgent(configuration: answerer)

// Each side waits for its own connection in the background.
async let aConnected: Bool = a.events.contains { $0 == .stateChanged(.connected) }
async let bConnected: Bool = b.events.contains { $0 == .stateChanged(.connected) }

// In-process signaling: credentials and trickled candidates go straight to the other agent.
try await IceAgent.link(a, b)
guard await aConnected, await bConnected else {
    print("ICE did not connect")
    await a.close(); await b.close()
    exit(1)
}
print("connected: \(await a.selectedPair.map(String.init(describing:)) ?? "?")")

for i in 1...3 { try await a.send(Array("hello \(i)".utf8)) }
var received = 0
for await datagram in b.datagrams {
    print("b received: \(String(decoding: datagram.bytes, as: UTF8.self))")
    received += 1
    if received == 3 { break }
}
await a.close()
await b.close()
