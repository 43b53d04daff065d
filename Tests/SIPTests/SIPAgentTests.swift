import CallNodeTestSupport
import Foundation
import SIP
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The SIP agent on sofia-sip, on loopback: dialogs between two agents, what a stranger's
/// request gets, and that nothing a peer sends stops it serving.
@Suite(.serialized) struct SIPAgentTests {
    /// A UDP port on 127.0.0.1 free a moment ago (and its TCP twin).
    static func freePort() -> Int { FreePort.udpAndTCP() }

    /// Reads `agent`'s events until one matches, or fails after `timeout`.
    final class Events: Sendable {
        private let stream: AsyncStream<SIPEvent>
        private let iterator: Iterator
        final class Iterator: @unchecked Sendable {  // used by one test task at a time
            var base: AsyncStream<SIPEvent>.Iterator
            init(_ base: AsyncStream<SIPEvent>.Iterator) { self.base = base }
        }
        init(_ agent: SIPAgent) {
            stream = agent.events
            iterator = Iterator(stream.makeAsyncIterator())
        }

        func next(_ kind: SIPEvent.Kind, status: Int? = nil, line: Int = #line) async throws -> SIPEvent {
            let iterator = self.iterator
            return try await withThrowingTaskGroup(of: SIPEvent?.self) { group in
                group.addTask {
                    while let event = await iterator.base.next() {
                        if event.kind == kind && (status == nil || event.status == status) { return event }
                    }
                    return nil
                }
                group.addTask {
                    try await Task.sleep(for: .seconds(10))
                    return nil
                }
                defer { group.cancelAll() }
                guard let found = try await group.next(), let event = found else {
                    throw TestFailure("no \(kind) \(status.map(String.init) ?? "") event (line \(line))")
                }
                return event
            }
        }
    }

    static let offer = "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 40000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n"
    static let answer = "v=0\r\no=- 2 2 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 40002 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n"

    static func agent(_ user: String, port: Int) async throws -> SIPAgent {
        try await SIPAgent.start(listening: "sip:127.0.0.1:\(port)", from: "<sip:\(user)@127.0.0.1:\(port)>")
    }

    /// An agent listening on a port free a moment ago: another process of the suite can take
    /// that port before the agent binds it, so a port taken meanwhile is left for another.
    static func listening(_ user: String) async throws -> (agent: SIPAgent, port: Int) {
        var lastError: (any Error)?
        for _ in 0..<5 {
            let port = freePort()
            do { return (try await agent(user, port: port), port) } catch { lastError = error }
        }
        throw lastError!
    }

    @Test func aDialogRingsIsAnsweredWithSDPAndEndsByBye() async throws {
        let (alice, alicePort) = try await Self.listening("alice")
        let (bob, bobPort) = try await Self.listening("bob")
        let aliceEvents = Events(alice), bobEvents = Events(bob)

        let call = alice.newCall()
        alice.invite(call, to: "sip:bob@127.0.0.1:\(bobPort)", displayName: "Alice", sdp: Self.offer)
        let invite = try await bobEvents.next(.invite)
        #expect(invite.sdp == Self.offer)
        #expect(invite.fromURI == "sip:alice@127.0.0.1:\(alicePort)")
        #expect(invite.fromDisplay?.contains("Alice") == true, "\(invite.fromDisplay ?? "-")")
        #expect(invite.call > 0)

        bob.respond(invite.call, status: 180, phrase: "Ringing")
        let ringing = try await aliceEvents.next(.response, status: 180)
        #expect(ringing.call == call)
        bob.respond(invite.call, status: 200, sdp: Self.answer)
        let answered = try await aliceEvents.next(.response, status: 200)
        #expect(answered.sdp == Self.answer)
        _ = try await bobEvents.next(.ack)

        // A re-INVITE (a hold) is the same call at Bob.
        let held = Self.offer.replacingOccurrences(of: "a=rtpmap:0 PCMU/8000\r\n", with: "a=rtpmap:0 PCMU/8000\r\na=sendonly\r\n")
        alice.invite(call, sdp: held)
        let reinvite = try await bobEvents.next(.invite)
        #expect(reinvite.call == invite.call)
        #expect(reinvite.sdp?.contains("a=sendonly") == true)
        bob.respond(invite.call, status: 200, sdp: Self.answer.replacingOccurrences(of: "PCMU/8000\r\n", with: "PCMU/8000\r\na=recvonly\r\n"))
        let reanswered = try await aliceEvents.next(.response, status: 200)
        #expect(reanswered.sdp?.contains("a=recvonly") == true)

        alice.bye(call)
        _ = try await bobEvents.next(.bye)
        _ = try await bobEvents.next(.terminated)
        _ = try await aliceEvents.next(.terminated)
        await alice.stop()
        await bob.stop()
    }

    @Test func aCallerCancelsWhileItRingsAndARefusalIsItsStatus() async throws {
        let (alice, _) = try await Self.listening("alice")
        let (bob, bobPort) = try await Self.listening("bob")
        let aliceEvents = Events(alice), bobEvents = Events(bob)

        let first = alice.newCall()
        alice.invite(first, to: "sip:bob@127.0.0.1:\(bobPort)", sdp: Self.offer)
        let invite = try await bobEvents.next(.invite)
        bob.respond(invite.call, status: 180)
        _ = try await aliceEvents.next(.response, status: 180)
        alice.cancel(first)
        _ = try await bobEvents.next(.cancel)
        // The stack answers the INVITE itself: 487.
        let terminated = try await aliceEvents.next(.response, status: 487)
        #expect(terminated.call == first)

        let second = alice.newCall()
        alice.invite(second, to: "sip:bob@127.0.0.1:\(bobPort)", sdp: Self.offer)
        let again = try await bobEvents.next(.invite)
        #expect(again.call != invite.call)
        bob.respond(again.call, status: 486, phrase: "Busy Here")
        let busy = try await aliceEvents.next(.response, status: 486)
        #expect(busy.call == second && busy.phrase == "Busy Here", "\(busy.phrase)")
        await alice.stop()
        await bob.stop()
    }

    @Test func aPortInUseIsAClearError() async throws {
        let (first, port) = try await Self.listening("first")
        await #expect(throws: SIPError.self) { _ = try await Self.agent("second", port: port) }
        await first.stop()
    }

    @Test func optionsAreAnsweredAndHostileRequestsGetAnswersWhileTheAgentServesOn() async throws {
        let (bob, port) = try await Self.listening("bob")
        let bobEvents = Events(bob)
        let options = try #require(await SIPProbe.exchange(SIPProbe.request("OPTIONS", port: port), port: port))
        #expect(options.hasPrefix("SIP/2.0 200"), "\(options.prefix(80))")
        #expect(options.contains("INVITE"), "the Allow header names INVITE")

        // Garbage, a huge header, a Content-Length longer than the body, an INVITE whose SDP
        // has no media: each gets an answer or is dropped, and none stops the agent.
        _ = await SIPProbe.exchange("\u{1}\u{2}not sip at all\r\n\r\n", port: port)
        let huge = await SIPProbe.exchange(SIPProbe.request("OPTIONS", port: port, headers: ["X-Huge: " + String(repeating: "a", count: 30_000)]), port: port)
        #expect(huge == nil || huge!.hasPrefix("SIP/2.0"), "\(huge?.prefix(80) ?? "-")")
        let short = await SIPProbe.exchange(SIPProbe.request("OPTIONS", port: port, body: "v=0", contentLength: 500), port: port)
        #expect(short == nil || short!.hasPrefix("SIP/2.0 4"), "\(short?.prefix(80) ?? "-")")
        _ = await SIPProbe.exchange(SIPProbe.request("INVITE", port: port, headers: ["Contact: <sip:probe@127.0.0.1:5999>", "Content-Type: application/sdp"],
                                       body: "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\n"), port: port)
        let noMedia = try await bobEvents.next(.invite)
        #expect(noMedia.sdp?.contains("m=") == false)
        bob.respond(noMedia.call, status: 488, phrase: "Not Acceptable Here")

        let again = try #require(await SIPProbe.exchange(SIPProbe.request("OPTIONS", port: port), port: port))
        #expect(again.hasPrefix("SIP/2.0 200"), "the agent still serves: \(again.prefix(80))")
        await bob.stop()
    }
}
