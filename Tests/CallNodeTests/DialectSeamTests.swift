import CallNode
import CallNodeTestKit
import Foundation
import Testing

/// The call core's dialect seam, proven with a third wire: the test kit's ``LineDialect`` (text
/// lines on an in-memory pipe) carries whole calls between two in-memory nodes on manual time,
/// through the same legs, states, admission and media as node envelopes and the call page.
@Suite struct DialectSeamTests {
    static func isConnected(_ event: NodeEvent) -> Bool { if case .connected = event { true } else { false } }
    static func isEnded(_ event: NodeEvent) -> Bool { if case .ended = event { true } else { false } }

    @Test func everySignalSurvivesItsLine() {
        let signals: [CallSignal] = [
            .invite(CallInvitation(displayName: "Alice", title: "a title\nwith a newline")), .invite(CallInvitation()),
            .ringing, .offer(sdp: "v=0\r\no=- 1 1 IN IP4 10.0.0.1\r\n"), .answer(sdp: "v=0\r\n"),
            .candidates(["candidate:1 1 udp 2130706431 10.77.0.1 5000 typ host"], end: false), .candidates([], end: true),
            .end(.hangup), .end(.failed), .reject(.busy), .reject(.doNotDisturb), .error("bad things"), .keepAlive,
        ]
        for signal in signals {
            let line = LineDialect.encode(signal)
            #expect(!line.contains("\n"), "\(signal) is one line")
            #expect(LineDialect.decode(line) == signal, "\(line)")
        }
        for bad in ["", "HELLO", "OFFER !!!", "END sometime", "REJECT maybe", "CANDIDATES +%%", "INVITE", "INVITE - - -", "INVITE !! -"] {
            #expect(LineDialect.decode(bad) == nil, "\(bad)")
        }
    }

    /// Either side may offer first (node envelopes: the callee; SIP: the caller, with its
    /// invitation): the same call, hold and end either way.
    @Test(arguments: [FirstOffer.byCallee, .byCaller])
    func aWholeCallRunsOverALineHoldsAndEndsOnce(firstOffer: FirstOffer) async throws {
        let nodes = try InMemoryNodes()
        let alice = try await nodes.node("alice", input: .tone(440))
        let bob = try await nodes.node("bob", input: .tone(660))
        let (a, b) = LinePipe.make()
        let accepted = Task { await LineListener.accept(b, from: "line:alice", on: bob, firstOffer: firstOffer) }
        let call = try await alice.call(over: LineDialect(a, firstOffer: firstOffer), handle: "line:bob", title: "over a line")
        try await nodes.waitFor("alice", advancing: true, Self.isConnected)
        try await nodes.waitFor("bob", advancing: true, Self.isConnected)
        let bobCall = try #require(await accepted.value)
        for _ in 0..<100 { await nodes.step() }  // two seconds of the call

        let aliceHeard = try #require(await alice.statistics(call))
        let bobHeard = try #require(await bob.statistics(bobCall))
        #expect(aliceHeard.packetsReceived > 50 && bobHeard.packetsReceived > 50, "\(aliceHeard) \(bobHeard)")
        #expect(aliceHeard.receiveLevel > -40, "alice hears bob at \(aliceHeard.receiveLevel) dB")
        #expect(bobHeard.receiveLevel > -40, "bob hears alice at \(bobHeard.receiveLevel) dB")

        // Hold and resume go as re-offers over the line, as they do over envelopes.
        try await alice.setHeld(call, true)
        try await nodes.waitFor("bob", advancing: true) { if case .remoteHold(_, true) = $0 { true } else { false } }
        try await alice.setHeld(call, false)
        try await nodes.waitFor("bob", advancing: true) { if case .remoteHold(_, false) = $0 { true } else { false } }

        try await alice.hangUp(call)
        try await nodes.waitFor("alice", advancing: true, Self.isEnded)
        let (ended, _) = try await nodes.waitFor("bob", advancing: true, Self.isEnded)
        guard case let .ended(_, reason, _, _) = ended else { return }
        #expect(reason == .remoteEnded)
        for _ in 0..<10 { await nodes.step() }
        #expect(nodes.events("alice").filter(Self.isEnded).count == 1)
        #expect(nodes.events("bob").filter(Self.isEnded).count == 1)
        // Each side's Recents has the call, under the handle its dialect named.
        try await alice.store.flush()
        try await bob.store.flush()
        let aliceRecent = try #require(try await alice.store.recents().first { $0.id == call })
        #expect(aliceRecent.handle == "line:bob")
        let bobRecent = try #require(try await bob.store.recents().first { $0.id == bobCall })
        #expect(bobRecent.handle == "line:alice")
        await nodes.shutdown()
    }

    @Test func aBlockedHandleIsRefusedOverItsLineAndTheCallerHearsWhy() async throws {
        let nodes = try InMemoryNodes()
        let mallory = try await nodes.node("mallory")
        let bob = try await nodes.node("bob")
        try await bob.store.directory.block(CallHandle(.generic, "line:mallory"))
        let (a, b) = LinePipe.make()
        let accepted = Task { await LineListener.accept(b, from: "line:mallory", on: bob) }
        _ = try await mallory.call(over: LineDialect(a), handle: "line:bob")
        let (ended, _) = try await nodes.waitFor("mallory", advancing: true, Self.isEnded)
        #expect(await accepted.value == nil)
        guard case let .ended(_, _, detail, _) = ended else { return }
        #expect(detail == "rejected: blocked", "\(String(describing: detail))")
        #expect(!nodes.events("bob").contains { if case .incoming = $0 { true } else { false } })
        await nodes.shutdown()
    }

    @Test func aLineThatSaysNonsenseIsAnsweredAndTheCallGoesOn() async throws {
        let nodes = try InMemoryNodes()
        let bob = try await nodes.node("bob", input: .tone(660))
        let (a, b) = LinePipe.make()
        a.send(LineDialect.encode(.invite(CallInvitation(displayName: "a script"))))
        let accepted = Task { await LineListener.accept(b, from: "line:script", on: bob) }
        let call = try #require(await accepted.value)
        // The script's side is bare lines: whatever bob sends it, it reads.
        a.send("NONSENSE ?")
        var heard: [String] = []
        for _ in 0..<50 {
            await nodes.step()
            if heard.contains(where: { $0.hasPrefix("ERROR") }) { break }
            while let line = a.poll() { heard.append(line) }
        }
        #expect(heard.contains { $0.hasPrefix("ERROR") }, "\(heard)")
        #expect(await bob.liveCalls.contains(call), "one bad line does not end the call")
        a.send(LineDialect.encode(.end(.hangup)))
        try await nodes.waitFor("bob", advancing: true, Self.isEnded)
        await nodes.shutdown()
    }
}
