@_spi(Simulation) @testable import CallNode
import CallNodeTestKit
import Foundation
import Testing

/// SIP calls between whole nodes on manual time, over the test kit's in-memory SIP network
/// (the stand-in for sofia-sip's transactions that the simulator drives): the node's SIP
/// dialect and dialog value, its media on in-memory ICE. The same calls run over sofia-sip in
/// `SIPCallTests`.
@Suite struct InMemorySIPTests {
    static func listen(_ node: CallNode, _ name: String) async throws {
        try await node.listenSIP(SIPListenSettings(host: "\(name).sim", port: 5060, offersICE: true))
    }

    static func uri(_ name: String) -> String { "sip:callnode@\(name).sim:5060" }

    /// Alice (a 440 Hz tone) and Bob (660 Hz), each listening for SIP on the in-memory network.
    static func aliceAndBob(_ f: InMemoryNodes, bobAnswers: Bool = true) async throws -> (CallNode, CallNode) {
        let alice = try await f.node("alice", input: .tone(440))
        let bob = try await f.node("bob", input: .tone(660), autoAnswer: bobAnswers)
        try await listen(alice, "alice")
        try await listen(bob, "bob")
        return (alice, bob)
    }

    /// Alice calls Bob, who answers: both IDs of the call, once Bob's side has connected.
    static func connect(_ f: InMemoryNodes, _ alice: CallNode, _ bob: CallNode) async throws -> (UUID, UUID) {
        let call = try await alice.call(.sip(uri("bob")))
        try await f.waitFor("bob", advancing: true, frames: 200, isConnected)
        return (call, try #require(await bob.liveCalls.first))
    }

    static func isConnected(_ event: NodeEvent) -> Bool { if case .connected = event { true } else { false } }
    static func isEnded(_ event: NodeEvent) -> Bool { if case .ended = event { true } else { false } }

    /// Alice hangs up `call`; it ends at Bob's too, no dialog is left up, and the nodes stop.
    static func aliceHangsUp(_ call: UUID, _ f: InMemoryNodes, _ alice: CallNode) async throws {
        try await alice.hangUp(call)
        try await f.waitFor("bob", advancing: true, frames: 50, isEnded)
        for _ in 0..<10 { await f.step() }
        #expect(f.sip.openDialogs() == [])
        await f.shutdown()
    }

    @Test func aCallConnectsCarriesAudioBothWaysHoldsAndEndsOnBothSides() async throws {
        let f = try InMemoryNodes()
        let (alice, bob) = try await Self.aliceAndBob(f)
        let call = try await alice.call(.sip(Self.uri("bob")))
        try await f.waitFor("alice", advancing: true, frames: 200, Self.isConnected)
        try await f.waitFor("bob", advancing: true, frames: 50, Self.isConnected)
        let bobCall = try #require(await bob.liveCalls.first)
        for _ in 0..<50 { await f.step() }
        #expect(try #require(await alice.statistics(call)).packetsReceived > 30)
        #expect(try #require(await bob.statistics(bobCall)).packetsReceived > 30)

        try await bob.setHeld(bobCall, true)
        try await f.waitFor("alice", advancing: true, frames: 50) { if case .remoteHold(_, true) = $0 { true } else { false } }
        try await bob.setHeld(bobCall, false)
        try await f.waitFor("alice", advancing: true, frames: 50) { if case .remoteHold(_, false) = $0 { true } else { false } }

        try await alice.hangUp(call)
        try await f.waitFor("bob", advancing: true, frames: 50, Self.isEnded)
        for _ in 0..<10 { await f.step() }
        #expect(f.sip.openDialogs() == [])
        #expect(f.sip.problems == [])
        #expect(f.sip.counts.dialogs == 1)
        #expect(f.sip.counts.invites == 3, "the INVITE, the hold's and the resume's re-INVITEs")
        await f.shutdown()
    }

    /// Both sides hold at the same instant, then resume at the same instant: their re-INVITEs
    /// cross (glare), each is refused with 491 and goes again after RFC 3261's random wait;
    /// the side waiting takes the other's offer and answers it with its own direction, so each
    /// side's wish stands: neither sends while both hold, both send again after both resume.
    @Test func reINVITEsThatCrossAreRefusedWith491AndBothSidesWishesStand() async throws {
        var conditions = InMemorySIPNetwork.Conditions()
        conditions.delay = 2...2
        let f = try InMemoryNodes(sipConditions: conditions)
        let (alice, bob) = try await Self.aliceAndBob(f)
        let (call, bobCall) = try await Self.connect(f, alice, bob)
        for _ in 0..<20 { await f.step() }

        async let aliceHolds: Void = alice.setHeld(call, true)
        async let bobHolds: Void = bob.setHeld(bobCall, true)
        _ = try await (aliceHolds, bobHolds)
        for _ in 0..<300 { await f.step() }
        #expect(f.sip.counts.crossings >= 1, "the two re-INVITEs did not cross")
        #expect(await alice.manager.state(of: call)?.isOnHold == true)
        #expect(await bob.manager.state(of: bobCall)?.isOnHold == true)
        let sentByAlice = try #require(await alice.statistics(call)).packetsSent
        let sentByBob = try #require(await bob.statistics(bobCall)).packetsSent
        for _ in 0..<50 { await f.step() }
        #expect(try #require(await alice.statistics(call)).packetsSent == sentByAlice, "alice sends while both hold")
        #expect(try #require(await bob.statistics(bobCall)).packetsSent == sentByBob, "bob sends while both hold")

        let crossings = f.sip.counts.crossings
        async let aliceResumes: Void = alice.setHeld(call, false)
        async let bobResumes: Void = bob.setHeld(bobCall, false)
        _ = try await (aliceResumes, bobResumes)
        for _ in 0..<300 { await f.step() }
        #expect(f.sip.counts.crossings > crossings, "the resumes' re-INVITEs did not cross")
        let heardByAlice = try #require(await alice.statistics(call)).packetsReceived
        let heardByBob = try #require(await bob.statistics(bobCall)).packetsReceived
        for _ in 0..<50 { await f.step() }
        #expect(try #require(await alice.statistics(call)).packetsReceived > heardByAlice + 40, "alice hears nothing after both resumed")
        #expect(try #require(await bob.statistics(bobCall)).packetsReceived > heardByBob + 40, "bob hears nothing after both resumed")
        #expect(f.sip.problems == [])
        try await Self.aliceHangsUp(call, f, alice)
    }

    /// The callee's process dies: the caller's next OPTIONS in the dialog finds its port closed,
    /// and the call ends as signaling lost, its dialog over on the side that is left.
    @Test func aPeerWhoseStackDiedIsNoticedByTheDialogsProbe() async throws {
        let f = try InMemoryNodes()
        let (alice, bob) = try await Self.aliceAndBob(f)
        _ = try await Self.connect(f, alice, bob)
        f.sip.crash(Self.uri("bob"))
        let (event, _) = try await f.waitFor("alice", advancing: true, frames: 2_500, Self.isEnded)
        guard case let .ended(_, reason, detail, _) = event else { return }
        #expect(reason == .failed)
        #expect(detail?.contains("gone") == true, "\(detail ?? "no detail")")
        for _ in 0..<10 { await f.step() }
        #expect(f.sip.openDialogs() == [])
        await f.shutdown()
    }

    /// What a peer other than a node sends and answers: its digit as INFO reaches the call as
    /// DTMF, its session refresh (an UPDATE without a body) and its 100 Trying to a re-INVITE
    /// change nothing, and a keep-alive OPTIONS answered 405 (a phone that does not do OPTIONS)
    /// keeps the call: only 481 or a closed port says the peer has gone.
    @Test func aForeignPeersInfoRefreshTryingAndRefusedProbeLeaveTheCallUp() async throws {
        var conditions = InMemorySIPNetwork.Conditions()
        conditions.optionsAnswer = 405
        conditions.trying = true
        let f = try InMemoryNodes(sipConditions: conditions)
        let alice = try await f.node("alice", input: .tone(440)) { $0.keepAliveInterval = .seconds(1) }
        let bob = try await f.node("bob", input: .tone(660), autoAnswer: true)
        try await Self.listen(alice, "alice")
        try await Self.listen(bob, "bob")
        let (call, bobCall) = try await Self.connect(f, alice, bob)
        try await f.waitFor("alice", advancing: true, frames: 50, Self.isConnected)
        let dialog = try #require(await alice.sipDialog(of: call))
        #expect(f.sip.peerSends(.info(digit: "7"), to: Self.uri("alice"), call: dialog))
        try await f.waitFor("alice", advancing: true, frames: 20) { if case .dtmf(call, "7") = $0 { true } else { false } }
        #expect(f.sip.peerSends(.refresh, to: Self.uri("alice"), call: dialog))
        // Three keep-alives answered 405, a hold whose re-INVITE is answered 100 first.
        for _ in 0..<200 { await f.step() }
        try await bob.setHeld(bobCall, true)
        try await f.waitFor("alice", advancing: true, frames: 50) { if case .remoteHold(_, true) = $0 { true } else { false } }
        #expect(await alice.liveCalls == [call] && f.sip.problems == [])
        #expect(!f.sip.peerSends(.refresh, to: Self.uri("alice"), call: dialog + 1), "a request into a dialog that does not exist")
        try await Self.aliceHangsUp(call, f, alice)
    }

    /// A phone that switches the call to fax offers T.38 and no audio in an UPDATE: the node
    /// cannot take it, answers 488 and the call goes on as it was (RFC 3261 §14.2), audio both
    /// ways; a refresh after it is taken as before. (The node used to end the call as failed.)
    @Test func anOfferTheCallCannotTakeIsRefusedWith488AndTheCallGoesOn() async throws {
        let f = try InMemoryNodes()
        let (alice, bob) = try await Self.aliceAndBob(f)
        let (call, bobCall) = try await Self.connect(f, alice, bob)
        try await f.waitFor("alice", advancing: true, frames: 50, Self.isConnected)
        let dialog = try #require(await alice.sipDialog(of: call))
        #expect(f.sip.peerSends(.reoffer(sdp: InMemorySIPNetwork.faxOffer), to: Self.uri("alice"), call: dialog))
        for _ in 0..<10 { await f.step() }
        #expect(f.sip.updateAnswers.map(\.status) == [488])
        let heardByAlice = try #require(await alice.statistics(call)).packetsReceived
        let heardByBob = try #require(await bob.statistics(bobCall)).packetsReceived
        for _ in 0..<50 { await f.step() }
        #expect(await alice.liveCalls == [call])
        #expect(try #require(await alice.statistics(call)).packetsReceived > heardByAlice + 40, "alice hears nothing after the refusal")
        #expect(try #require(await bob.statistics(bobCall)).packetsReceived > heardByBob + 40, "bob hears nothing after the refusal")
        #expect(f.sip.peerSends(.refresh, to: Self.uri("alice"), call: dialog))
        for _ in 0..<10 { await f.step() }
        #expect(f.sip.updateAnswers.map(\.status) == [488, 200])
        #expect(f.sip.problems == [])
        try await alice.hangUp(call)
        let (event, _) = try await f.waitFor("bob", advancing: true, frames: 50, Self.isEnded)
        if case let .ended(_, reason, _, _) = event { #expect(reason == .remoteEnded) }
        for _ in 0..<10 { await f.step() }
        #expect(f.sip.openDialogs() == [])
        await f.shutdown()
    }

    /// The callee's gathering ends late (a STUN server slow to answer), later than a round of
    /// ICE checks lasts: its 200 waits for the end of its candidates, and its leg starts no
    /// fresh round meanwhile (the restart's offer went into that 200, where the INVITE's answer
    /// was due). Once the gathering ends the answer leaves; a path that gave up meanwhile is
    /// restarted then, in a re-INVITE; the call connects and carries audio both ways.
    @Test func aCalleeWhoseGatheringEndsLateRestartsNothingBeforeItsAnswerLeaves() async throws {
        let f = try InMemoryNodes()
        let (alice, bob) = try await Self.aliceAndBob(f, bobAnswers: false)
        let call = try await alice.call(.sip(Self.uri("bob")))
        try await f.waitFor("bob", advancing: true, frames: 50) { if case .incoming = $0 { true } else { false } }
        let bobCall = try #require(await bob.liveCalls.first)
        f.network.holdGatherings()
        try await bob.answer(bobCall)
        for _ in 0..<300 { await f.step() }  // 6 s: two rounds of checks and more
        #expect(await alice.manager.state(of: call)?.phase != .connected, "connected before the callee's answer could leave")
        let restarted = { (name: String) in f.events(name).filter { if case .iceRestarted = $0 { true } else { false } } }
        #expect(restarted("bob").isEmpty, "bob restarted ICE before its answer left: \(f.story("bob"))")
        #expect(f.sip.counts.invites == 1)
        f.network.releaseGatherings()
        try await f.waitFor("alice", advancing: true, frames: 300, Self.isConnected)
        try await f.waitFor("bob", advancing: true, frames: 100, Self.isConnected)
        for _ in 0..<50 { await f.step() }
        #expect(f.sip.counts.invites == 1 + restarted("bob").count, "a restart after the answer goes in a re-INVITE")
        #expect(try #require(await alice.statistics(call)).packetsReceived > 30)
        #expect(try #require(await bob.statistics(bobCall)).packetsReceived > 30)
        #expect(f.sip.problems == [])
        try await Self.aliceHangsUp(call, f, alice)
    }

    /// Bob transfers alice to carol (a REFER): alice's node calls carol, tells bob how it goes
    /// by NOTIFY, and bob's call ends as transferred once carol's answers.
    @Test func aBlindTransferMovesTheCallerToTheTarget() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", input: .tone(440))
        let bob = try await f.node("bob", input: .tone(660))
        let carol = try await f.node("carol", input: .tone(880))
        for (node, name) in [(alice, "alice"), (bob, "bob"), (carol, "carol")] { try await Self.listen(node, name) }
        _ = try await alice.call(.sip(Self.uri("bob")))
        try await f.waitFor("bob", advancing: true, frames: 200, Self.isConnected)
        let bobCall = try #require(await bob.liveCalls.first)
        for _ in 0..<10 { await f.step() }
        try await bob.transfer(bobCall, to: Self.uri("carol"))
        try await f.waitFor("carol", advancing: true, frames: 300, Self.isConnected)
        let (ended, _) = try await f.waitFor("bob", advancing: true, frames: 200, Self.isEnded)
        guard case let .ended(_, reason, detail, _) = ended else { return }
        #expect(reason == .localEnded && detail == "transferred to \(Self.uri("carol"))", "\(ended)")
        for _ in 0..<20 { await f.step() }
        #expect(await alice.liveCalls.count == 1, "alice is on the call with carol")
        #expect(f.sip.counts.dialogs == 2)
        #expect(f.sip.problems == [])
        await f.shutdown()
        #expect(f.sip.openDialogs() == [])
    }

    /// A transferee with no room for another call refuses the REFER (503) rather than taking it
    /// and failing after: the transferor hears the refusal and its call goes on.
    @Test func aTransfereeWithNoRoomForAnotherCallRefusesTheTransfer() async throws {
        let f = try InMemoryNodes()
        let alice = try await f.node("alice", input: .tone(440)) { $0.provider.maximumCallGroups = 1 }
        let bob = try await f.node("bob", input: .tone(660))
        let carol = try await f.node("carol", input: .tone(880))
        for (node, name) in [(alice, "alice"), (bob, "bob"), (carol, "carol")] { try await Self.listen(node, name) }
        let (call, bobCall) = try await Self.connect(f, alice, bob)
        try await bob.transfer(bobCall, to: Self.uri("carol"))
        let (refused, _) = try await f.waitFor("bob", advancing: true, frames: 100) { if case .transfer(_, 503, _) = $0 { true } else { false } }
        guard case let .transfer(_, _, detail) = refused else { return }
        #expect(detail.contains("as many calls as it takes") && detail.contains("the call goes on"), "\(detail)")
        for _ in 0..<50 { await f.step() }
        #expect(f.events("carol").allSatisfy { if case .incoming = $0 { false } else { true } }, "carol was called")
        #expect(await alice.liveCalls == [call])
        #expect(await bob.liveCalls == [bobCall])
        #expect(f.sip.problems == [])
        await f.shutdown()
    }

    /// Every 180 arrives twice (a reliable provisional sent again before its PRACK, or a callee
    /// repeating itself): the caller hears it ring once, and the call connects when answered.
    @Test func aRepeatedRingingIsToldOnce() async throws {
        var conditions = InMemorySIPNetwork.Conditions()
        conditions.repeatedProvisionals = 1
        let f = try InMemoryNodes(sipConditions: conditions)
        let (alice, bob) = try await Self.aliceAndBob(f, bobAnswers: false)
        _ = try await alice.call(.sip(Self.uri("bob")))
        try await f.waitFor("alice", advancing: true, frames: 200) { if case .ringing = $0 { true } else { false } }
        for _ in 0..<20 { await f.step() }
        #expect(f.events("alice").filter { if case .ringing = $0 { true } else { false } }.count == 1)
        let bobCall = try #require(await bob.liveCalls.first)
        try await bob.answer(bobCall)
        try await f.waitFor("alice", advancing: true, frames: 200, Self.isConnected)
        #expect(f.sip.problems == [])
        await f.shutdown()
    }

    /// Bob's stack takes Alice's CANCEL as Bob's answer is decided, and tells him of it late
    /// (sofia-sip reports on its own thread; here 60 ms after): his 200 never leaves (the stack
    /// answered the INVITE 487), and his call ends as Alice's hang-up, not as a dialog lost.
    @Test func aCancelTheStackTookAsTheAnswerWasDecidedEndsTheCallAsTheCallersHangUp() async throws {
        var conditions = InMemorySIPNetwork.Conditions()
        conditions.delay = 1...1
        conditions.reportLag = 3
        let f = try InMemoryNodes(sipConditions: conditions)
        let (alice, bob) = try await Self.aliceAndBob(f, bobAnswers: false)
        let call = try await alice.call(.sip(Self.uri("bob")))
        try await f.waitFor("alice", advancing: true, frames: 200) { if case .ringing = $0 { true } else { false } }
        let bobCall = try #require(await bob.liveCalls.first)
        try await alice.hangUp(call)
        // The CANCEL reaches Bob's stack, which has not told Bob yet.
        for _ in 0..<2 { await f.step() }
        #expect(f.events("bob").allSatisfy { !Self.isEnded($0) })
        try await bob.answer(bobCall)
        let (ended, _) = try await f.waitFor("bob", advancing: true, frames: 200, Self.isEnded)
        guard case let .ended(_, reason, detail, _) = ended else { return }
        #expect(reason == .remoteEnded, "Bob's call ended \(reason): \(detail ?? "")")
        try await f.waitFor("alice", advancing: true, frames: 50, Self.isEnded)
        for _ in 0..<20 { await f.step() }
        #expect(f.events("bob").allSatisfy { !Self.isConnected($0) }, "Bob's call connected though its 200 never left")
        #expect(f.sip.openDialogs() == [])
        #expect(f.sip.problems == [])
        await f.shutdown()
    }

    /// A phone that takes no SRTP refuses the node's encrypted offer with 488 (at once, or
    /// after ringing); the node offers plain RTP in a new INVITE and the call connects,
    /// unencrypted and saying so. Its later offers stay plain: a hold, a resume and a fresh
    /// round of ICE go through, and audio flows both ways after them. (The later offers were
    /// RTP/SAVP without keys, and the callee failed the call: "no SRTP suite in common".)
    @Test(arguments: [InMemorySIPNetwork.Phone.refusesSRTP, .refusesSRTPAfterRinging])
    func aPhoneWithoutSRTPIsOfferedPlainRTPAndTheCallsLaterOffersStayPlain(phone: InMemorySIPNetwork.Phone) async throws {
        let f = try InMemoryNodes()
        let (alice, bob) = try await Self.aliceAndBob(f)
        let call = try await alice.call(.sip("sip:\(phone.rawValue)@bob.sim:5060"))
        try await f.waitFor("alice", advancing: true, frames: 200, Self.isConnected)
        let bobCall = try #require(await bob.liveCalls.first)
        #expect(f.sip.counts.dialogs == 2, "the refused INVITE's dialog, then the plain offer's")
        let secured = f.events("alice").compactMap { if case let .secured(_, security) = $0 { security } else { nil } }
        #expect(secured.first?.unencrypted == true, "\(secured)")
        #expect(f.events("alice").filter { if case .ringing = $0 { true } else { false } }.count == 1, "ringing is told once")

        try await alice.setHeld(call, true)
        try await f.waitFor("bob", advancing: true, frames: 50) { if case .remoteHold(_, true) = $0 { true } else { false } }
        try await alice.setHeld(call, false)
        try await f.waitFor("bob", advancing: true, frames: 50) { if case .remoteHold(_, false) = $0 { true } else { false } }
        for _ in 0..<20 { await f.step() }  // the resume's answer reaches Alice
        try await alice.restartICE(call)
        for _ in 0..<60 { await f.step() }
        #expect(await bob.liveCalls == [bobCall], "the call ended: \(f.events("bob").filter(Self.isEnded))")
        let heard = (try #require(await alice.statistics(call)).packetsReceived, try #require(await bob.statistics(bobCall)).packetsReceived)
        for _ in 0..<50 { await f.step() }
        #expect(try #require(await alice.statistics(call)).packetsReceived > heard.0 + 30)
        #expect(try #require(await bob.statistics(bobCall)).packetsReceived > heard.1 + 30)

        try await alice.hangUp(call)
        try await f.waitFor("bob", advancing: true, frames: 50, Self.isEnded)
        for _ in 0..<10 { await f.step() }
        #expect(f.sip.openDialogs() == [] && f.sip.problems == [])
        await f.shutdown()
    }

    /// A phone that answers without ringing first: the caller's 200 comes while it waits for a
    /// sign of life, and the call connects as any other.
    @Test func aPhoneThatAnswersWithoutRingingConnects() async throws {
        let f = try InMemoryNodes()
        let (alice, _) = try await Self.aliceAndBob(f)
        _ = try await alice.call(.sip("sip:\(InMemorySIPNetwork.Phone.answersAtOnce.rawValue)@bob.sim:5060"))
        try await f.waitFor("alice", advancing: true, frames: 200, Self.isConnected)
        try await f.waitFor("bob", advancing: true, frames: 50, Self.isConnected)
        #expect(!f.events("alice").contains { if case .ringing = $0 { true } else { false } })
        #expect(f.sip.problems == [])
        await f.shutdown()
    }
}
