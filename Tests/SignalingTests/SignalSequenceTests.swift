import Foundation
import Signaling
import Testing

/// A call's numbered messages: every message arrives once, in order, across connections.
@Suite struct SignalSequenceTests {
    let call = UUID()

    @Test func messagesAreNumberedKeptUntilAcknowledgedAndRepeatsDropped() throws {
        var alice = SignalSequence(), bob = SignalSequence()
        let invite = try alice.stamp(.invite(Invitation()), call: call)
        let offer = try alice.stamp(.offer(sdp: "v=0"), call: call)
        #expect(invite.seq == 1 && offer.seq == 2 && invite.ack == 0)
        #expect(alice.unacknowledged.count == 2)
        let first = bob.accept(invite), second = bob.accept(offer), repeated = bob.accept(offer)
        #expect(first && second)
        #expect(!repeated, "a repeat is dropped")
        #expect(bob.received == 2)
        // Bob's next message acknowledges both.
        let answer = try bob.stamp(.answer(sdp: "v=0"), call: call)
        #expect(answer.ack == 2)
        let took = alice.accept(answer)
        #expect(took)
        #expect(alice.unacknowledged.isEmpty)
        // Connection-level messages are not numbered or kept.
        let keepAlive = try alice.stamp(.keepAlive, call: call)
        #expect(keepAlive.seq == nil && keepAlive.ack == 1 && alice.unacknowledged.isEmpty)
    }

    @Test func aResumptionSendsAgainOnlyWhatThePeerMissedInOrder() throws {
        var alice = SignalSequence(), bob = SignalSequence()
        let sent = try (1...5).map { try alice.stamp(.candidates(["c\($0)"], end: false), call: call) }
        // The old connection delivered the first two, then died.
        let one = bob.accept(sent[0]), two = bob.accept(sent[1])
        #expect(one && two)
        let again = alice.resend(after: bob.received)
        #expect(again.map(\.seq) == [3, 4, 5])
        #expect(again.map(\.message) == sent[2...].map(\.message))
        // The old connection's late copies and the new one's are each taken once.
        var taken = 0
        for envelope in again + sent { if bob.accept(envelope) { taken += 1 } }
        #expect(taken == 3 && bob.received == 5)
    }

    @Test func aPeerThatNeverAcknowledgesFillsTheBacklogWithAClearError() throws {
        var alice = SignalSequence(limit: 3)
        for n in 0..<3 { _ = try alice.stamp(.candidates(["c\(n)"], end: false), call: call) }
        #expect(throws: SignalSequence.BacklogFull(limit: 3)) {
            var full = alice
            _ = try full.stamp(.end(.hangup), call: call)
        }
    }

    @Test func theEnvelopeCarriesItsNumbersAndTheResumeMessagesRoundTrip() throws {
        let envelopes = [
            SignalEnvelope(call: call, .offer(sdp: "v=0"), seq: 7, ack: 3),
            SignalEnvelope(call: call, .resume(ResumeRequest(token: "abc", received: 4)), ack: 4),
            SignalEnvelope(call: call, .resumed(received: 9)),
            SignalEnvelope(call: call, .resumeRefused("wrong resume token")),
            SignalEnvelope(call: call, .invite(Invitation(displayName: "a", resumeToken: "t"))),
        ]
        for envelope in envelopes {
            #expect(try SignalEnvelope.decode(envelope.encoded()) == envelope)
        }
        // Numbers that cannot be are malformed, not trusted.
        for bad in [#"{"v":1,"type":"ringing","call":"\#(call)","seq":0}"#, #"{"v":1,"type":"ringing","call":"\#(call)","ack":-1}"#,
                    #"{"v":1,"type":"resume","call":"\#(call)","token":"x","received":-2}"#, #"{"v":1,"type":"resume","call":"\#(call)"}"#] {
            #expect(throws: SignalingError.self) { try SignalEnvelope.decode(Array(bad.utf8)) }
        }
    }

    /// A group member's key and its receipt: connection-level messages (never numbered or sent
    /// again), and a grant without its key is malformed.
    @Test func aGroupKeyAndItsReceiptRoundTripOutsideAnyCall() throws {
        let grant = GroupKeyGrant(room: "5200", epoch: 2, key: "AAEC")
        for envelope in [SignalEnvelope(call: nil, .groupKey(grant)), SignalEnvelope(call: nil, .groupKeyTaken(epoch: 2, refused: nil)),
                         SignalEnvelope(call: nil, .groupKeyTaken(epoch: 2, refused: "no such group"))] {
            #expect(try SignalEnvelope.decode(envelope.encoded()) == envelope)
            #expect(envelope.message.isConnectionLevel)
        }
        for bad in [#"{"v":1,"type":"group-key","grant":{"room":"5200","epoch":1}}"#, #"{"v":1,"type":"group-key-taken"}"#] {
            #expect(throws: SignalingError.self) { try SignalEnvelope.decode(Array(bad.utf8)) }
        }
    }
}
