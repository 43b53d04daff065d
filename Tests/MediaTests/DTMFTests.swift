import Media
import RTP
import Testing

/// RFC 4733 digits through two calls' media on the in-memory link.
@Suite struct DTMFTests {
    static func digits(from events: AsyncStream<MediaEvent>, count: Int) async -> String {
        var received = ""
        for await event in events {
            if case let .dtmf(digit) = event { received.append(digit) }
            if received.count == count { break }
        }
        return received
    }

    @Test func digitsArriveOnceEachInOrder() async throws {
        let call = try MediaActorTests.makeCall(source: ToneSource(), sink: NullSink())
        try await call.a.start()
        try await call.b.start()
        let sent = "159#*D0"
        let received = Task { await Self.digits(from: call.b.events, count: sent.count) }
        try await call.a.sendDTMF(sent)
        // 100 ms tone + three end packets + 60 ms gap = 11 frames a digit.
        await call.clock.advance(frames: 11 * sent.count + 10)
        #expect(await call.a.pendingDTMF == 0)
        await call.a.stop()
        await call.b.stop()
        #expect(await received.value == sent)
        let a = await call.a.statistics, b = await call.b.statistics
        #expect(a.dtmfSent == sent.count && b.dtmfReceived == sent.count)
        #expect(b.malformedDropped == 0)
        #expect(b.packetsLost == 0, "telephone-event packets count as received, not lost")
    }

    @Test func digitsSurviveALostFirstPacket() async throws {
        // 20 % loss: each digit has five tone packets and three end packets, any one is enough.
        let call = try MediaActorTests.makeCall(source: ToneSource(), sink: NullSink(), conditions: LinkConditions(loss: 0.2), seed: 7)
        try await call.a.start()
        try await call.b.start()
        let received = Task { await Self.digits(from: call.b.events, count: 4) }
        try await call.a.sendDTMF("2468")
        await call.clock.advance(frames: 60)
        await call.a.stop()
        await call.b.stop()
        #expect(await received.value == "2468")
    }

    @Test func invalidDigitsAreRefusedAndNothingIsQueued() async throws {
        let call = try MediaActorTests.makeCall(source: ToneSource(), sink: NullSink())
        await #expect(throws: MediaError.invalidDTMF("12x")) { try await call.a.sendDTMF("12x") }
        await #expect(throws: MediaError.invalidDTMF("")) { try await call.a.sendDTMF("") }
        #expect(await call.a.pendingDTMF == 0)
    }
}
