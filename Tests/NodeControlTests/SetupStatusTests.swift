@testable import CallNode
import Foundation
import NodeControl
import Testing

/// What the terminal's status line says while a placed call is set up: nothing in the first
/// second, then the step it waits for, with fresh rounds of checks counted.
@Suite struct SetupStatusTests {
    let call = UUID(), other = UUID()

    @Test func aSlowSetupSaysWhatItWaitsForStepByStep() {
        var status = SetupStatus()
        #expect(status.text(peer: "bob", elapsed: .milliseconds(900)) == nil, "not slow yet")
        #expect(status.text(peer: "bob", elapsed: .milliseconds(1_500)) == "◌ setting up: reaching bob · 1 s")

        status.follow(.ringing(call, callee: Fingerprint(certificateDER: [1, 2, 3])), of: call)
        #expect(status.text(peer: "bob", elapsed: .seconds(4)) == "◌ setting up: bob is ringing · 4 s")

        status.follow(.state(call, phase: "answerSent", held: false, muted: false), of: call)
        #expect(status.text(peer: "bob", elapsed: .seconds(5)) == "◌ setting up: finding a network path to bob: connectivity checks · 5 s")

        status.follow(.iceRestarted(call, byPeer: false), of: call)
        #expect(status.round == 2)
        #expect(status.text(peer: "bob", elapsed: .milliseconds(7_900))
            == "◌ setting up: finding a network path to bob: round 2 of checks (the earlier found none) · 7 s")

        let pair = SelectedPairInfo(localType: .serverReflexive, remoteType: .serverReflexive, transport: .udp,
                                    local: "100.64.1.2:5000", remote: "100.64.2.2:6000")
        status.follow(.selectedPair(call, pair), of: call)
        #expect(status.text(peer: "bob", elapsed: .seconds(8)) == "◌ setting up: securing the media with bob over srflx/srflx · 8 s")

        status.follow(.secured(call, MediaSecurity(keyExchange: .dtls, suite: "AEAD_AES_128_GCM")), of: call)
        #expect(status.step == .audio)
    }

    @Test func anotherCallsEventsAndLateRingingChangeNothing() {
        var status = SetupStatus()
        status.follow(.iceRestarted(other, byPeer: true), of: call)
        status.follow(.state(other, phase: "answerReceived", held: false, muted: false), of: call)
        #expect(status.step == .reaching && status.round == 1)
        // A phase that is not the offer and answer being done leaves the step.
        status.follow(.state(call, phase: "invitationSent", held: false, muted: false), of: call)
        #expect(status.step == .reaching)
        status.follow(.state(call, phase: "offerReceived", held: false, muted: false), of: call)
        #expect(status.step == .checks)
        // A ringing that comes after the checks started does not take the step back.
        status.follow(.ringing(call, callee: Fingerprint(certificateDER: [1])), of: call)
        #expect(status.step == .checks)
    }
}
