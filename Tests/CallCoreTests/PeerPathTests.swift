@testable import CallCore
import SDP
import Testing

/// While a call sets up its path, the pair one side's checks found goes to the other, which
/// takes it: through heavy loss one side's checks succeed while the other's keep failing for
/// seconds (their answers lost, libnice's tries further and further apart), and the DTLS
/// handshake cannot start until both have a pair.
@Suite struct PeerPathTests {
    static let path = FoundPath(ufrag: "abcd", local: TransportAddress(address: "100.64.2.2", port: 40_000),
                                remote: TransportAddress(address: "100.64.1.2", port: 50_000))

    static func checking(outgoing: Bool, ice: Bool = true) -> LegState {
        var state = LegState(outgoing: outgoing, timings: LegDecisionTests.timings)
        let start: [LegEvent] = outgoing ? [.signalingReady, .peerRinging] : [.signalingReady, .answering]
        _ = LegDecisionTests.feed(&state, start + [.negotiated(dtls: true, ice: ice)])
        return state
    }

    @Test(arguments: [true, false])
    func aSideWithoutAPairTakesThePeersAndTellsItsOwnWhenItFindsOne(outgoing: Bool) {
        var state = Self.checking(outgoing: outgoing)
        #expect(state.phase == .checking)
        #expect(state.handle(.peerFoundPath(Self.path), now: .milliseconds(700)) == [.adoptPeerPath(Self.path)])
        // Taking it connects ICE like a pair of its own: the peer hears of it (it has one, and
        // keeps it), and the handshake starts.
        #expect(state.handle(.iceConnected, now: .milliseconds(710)) == [.cancel(.setupRound), .tellPeerPath, .prepareMedia])
        // Securing: a later word of the peer's (a fresh round it found) is taken too — the
        // agent keeps a pair of this round it has.
        #expect(state.handle(.peerFoundPath(Self.path), now: .seconds(1)) == [.adoptPeerPath(Self.path)])
    }

    @Test func aCallWithItsPathLetsICEAloneDecide() {
        var state = LegDecisionTests.connected(outgoing: true, dtls: true)
        #expect(state.handle(.peerFoundPath(Self.path), now: .seconds(5)) == [])
        // Nor before the offer and answer are done (nothing to check yet).
        var early = LegState(outgoing: true, timings: LegDecisionTests.timings)
        _ = LegDecisionTests.feed(&early, [.signalingReady, .peerRinging])
        #expect(early.handle(.peerFoundPath(Self.path), now: .zero) == [])
    }

    @Test func aPlainRTPPathHasNoPairToTellOrTake() {
        var state = Self.checking(outgoing: true, ice: false)
        #expect(state.handle(.peerFoundPath(Self.path), now: .zero) == [])
        #expect(state.handle(.iceConnected, now: .milliseconds(10)) == [.prepareMedia])
    }
}
