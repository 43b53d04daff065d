import CallNode
import CallNodeTestKit
import CallNodeTestSupport
import Foundation
import Testing

/// One conference of calls from three dialects: Alice over SIP, Carol a node call, and a call
/// page. Bob merges them as they come; then everyone hears everyone else. It runs with no
/// other real-time suite beside it: with one, Bob's media ticks come late, and a member whose
/// tick is late holds the others' mix back (the bridge reads the mix only where every member
/// has played), so members miss one another for 100 ms blocks at a time — a limit of the
/// bridge under load, measured in `AudioBridgeTests.conferenceWithLateTicks`, not a test flake.
extension RealTimeTests {
@Suite(.serialized, .realTimeAlone) struct SIPConferenceTests {
    typealias Fixture = TwoNodeTests.Fixture
    /// Tones none of whose sums, differences or doubles is another's (a mix that clips makes them).
    static let voices: [String: Double] = ["alice": 440, "bob": 620, "carol": 830, "browser": 1_170]

    /// The voices in `samples`: those with at least 5 % of its energy at their frequency (a
    /// codec's residue and the clicks of a late frame spread some energy everywhere, 30 dB and
    /// more below the voices).
    static func voices(in samples: ArraySlice<Int16>) -> Set<String> {
        let energy = samples.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(max(1, samples.count))
        guard energy > 100 else { return [] }
        return Set(voices.filter { Goertzel.share(of: $0.value, in: samples) > 0.05 }.keys)
    }

    @Test func callsFromSIPANodeAndAPageAreMergedIntoOneConference() async throws {
        let f = try Fixture()
        let bob = try await f.node("bob", input: .tone(620), output: .wav(f.path("bob-out.wav")), acceptUnknown: true)
        let alice = try await f.node("alice", input: .tone(440), output: .wav(f.path("alice-out.wav")))
        let carol = try await f.node("carol", input: .tone(830), output: .wav(f.path("carol-out.wav")))
        let browser = try await f.node("browser", input: .tone(1_170), output: .wav(f.path("browser-out.wav")), keyExchange: .dtls)
        try await f.trust(carol, as: "carol", bob, as: "bob")
        let bobURI = try await bob.listenSIP(SIPListenSettings(host: "127.0.0.1", port: SIPCallTests.freePort(), user: "bob"))
        _ = try await alice.listenSIP(SIPListenSettings(host: "127.0.0.1", port: SIPCallTests.freePort(), user: "alice"))
        let bobEvents = bob.events()
        func answered() async throws -> UUID {
            guard case let .connected(call, _) = try await TwoNodeTests.next(bobEvents, where: { if case .connected = $0 { true } else { false } })
            else { throw TestFailure("no call connected") }
            return call
        }

        let aliceCall = try await alice.call(.sip(bobURI))
        let fromAlice = try await answered()
        let carolCall = try await carol.call(.contact("bob"))
        let fromCarol = try await answered()
        try await bob.merge(fromCarol, with: fromAlice)
        let page = InMemoryPage(browser: browser, servedBy: bob)
        let pageCall = try await page.call()
        let fromPage = try await answered()
        try await bob.merge(fromPage, with: fromAlice)
        #expect(Set(bob.conference(of: fromAlice)) == [fromAlice, fromCarol, fromPage])
        // Three seconds of conference, then everyone leaves.
        try await Task.sleep(for: .seconds(3))
        try await alice.hangUp(aliceCall)
        try await carol.hangUp(carolCall)
        try await browser.hangUp(pageCall)
        await page.close()
        for node in [alice, bob, carol, browser] { await node.shutdown() }

        // The last second before the hang-ups, each heard the three others.
        for (name, others) in [("alice", ["bob", "carol", "browser"]), ("carol", ["alice", "bob", "browser"]),
                               ("browser", ["alice", "bob", "carol"]), ("bob", ["alice", "carol", "browser"])] {
            let samples = try WAV.read(path: f.path("\(name)-out.wav")).samples
            #expect(samples.count > 96_000, "\(name) recorded \(samples.count) samples")
            let end = samples.count - 9_600
            let blocks = stride(from: max(0, end - 48_000), to: end - 4_799, by: 4_800).map { Self.voices(in: samples[$0..<($0 + 4_800)]) }
            let wrong = blocks.filter { $0 != Set(others) }
            #expect(wrong.count <= 2, "\(name) should hear \(others.sorted()), heard \(blocks.map { $0.sorted() })")
        }
    }
}
}
