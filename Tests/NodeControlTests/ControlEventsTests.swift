import Locking
@testable import NodeControl
import Testing

/// Events nobody reads are not written as JSON (each call's statistics come every second), yet
/// numbered: a reader that comes later still sees, by the `id:` numbers, how many came before.
struct ControlEventsTests {
    @Test func eventsNobodyReadsAreNumberedNotWritten() async {
        let events = ControlEvents()
        #expect(events.readers == 0)
        let built = Locked(0)
        for _ in 0..<2 {
            events.publish({ () -> [String: Any]? in
                built.withLock { $0 += 1 }
                return ["event": "unread"]
            }())
        }
        #expect(built.withLock { $0 } == 0, "an event nobody reads is not even built")
        let (_, lines) = events.subscribe(call: nil, dropped: { _ in })
        #expect(events.readers == 1)
        events.publish(["event": "test"])
        var reading = lines.makeAsyncIterator()
        let line = await reading.next().map { String(decoding: $0, as: UTF8.self) }
        #expect(line?.hasPrefix("id: 3\ndata: {") == true, "\(line ?? "nothing")")
        #expect(line?.contains("\"event\":\"test\"") == true)
        events.finish()
    }
}
