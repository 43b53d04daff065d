@testable import Media
import Testing

/// The media actor's inbox: datagrams lent by the transport are copied into buffers of
/// datagrams already handled, so a steady call allocates nothing per packet.
@Suite struct InboxTests {
    static func put(_ inbox: Inbox, _ bytes: [UInt8], at milliseconds: Int) {
        bytes.withUnsafeBytes { inbox.put($0, arrival: .milliseconds(milliseconds)) }
    }

    @Test func datagramsComeOutInOrderAsCopiesOfWhatWasLent() {
        let inbox = Inbox()
        var lent: [UInt8] = [0x80, 1, 2, 3]
        Self.put(inbox, lent, at: 20)
        lent[1] = 99  // the transport reuses its buffer at once
        Self.put(inbox, [0x81, 7], at: 40)
        var items: [Inbox.Datagram] = [], handled: [[UInt8]] = []
        inbox.take(&items, returning: &handled)
        #expect(items.map(\.bytes) == [[0x80, 1, 2, 3], [0x81, 7]])
        #expect(items.map(\.arrival) == [.milliseconds(20), .milliseconds(40)])
        var again: [Inbox.Datagram] = []
        inbox.take(&again, returning: &handled)
        #expect(again.isEmpty, "taken once")
    }

    @Test func aHandledDatagramsBufferCarriesTheNextAndHoldsOnlyItsBytes() {
        let inbox = Inbox()
        Self.put(inbox, [UInt8](repeating: 0xAA, count: 200), at: 20)
        var items: [Inbox.Datagram] = [], handled: [[UInt8]] = []
        inbox.take(&items, returning: &handled)
        let address = items[0].bytes.withUnsafeBufferPointer { UInt(bitPattern: $0.baseAddress) }
        handled.append(items.removeFirst().bytes)  // handled: the media actor holds it no more
        // Given back with the next take; the next datagram is copied into it.
        var none: [Inbox.Datagram] = []
        inbox.take(&none, returning: &handled)
        #expect(handled.isEmpty)
        Self.put(inbox, [1, 2, 3], at: 40)
        inbox.take(&items, returning: &handled)
        #expect(items.map(\.bytes) == [[1, 2, 3]], "the shorter datagram, none of the longer one's bytes")
        #expect(items[0].bytes.withUnsafeBufferPointer { UInt(bitPattern: $0.baseAddress) } == address,
                "the handled datagram's buffer was reused")
    }

    @Test func aBufferStillHeldElsewhereIsNotWrittenOver() {
        let inbox = Inbox()
        Self.put(inbox, [UInt8](repeating: 0xAA, count: 200), at: 20)
        var items: [Inbox.Datagram] = [], handled: [[UInt8]] = []
        inbox.take(&items, returning: &handled)
        let kept = items[0].bytes  // something kept the datagram after handling it
        handled.append(items.removeFirst().bytes)
        var none: [Inbox.Datagram] = []
        inbox.take(&none, returning: &handled)
        Self.put(inbox, [1, 2, 3], at: 40)
        inbox.take(&items, returning: &handled)
        #expect(items.map(\.bytes) == [[1, 2, 3]])
        #expect(kept == [UInt8](repeating: 0xAA, count: 200))
    }

    @Test func aStalledActorsInboxKeepsTheNewestDatagramsOnly() {
        let inbox = Inbox()
        for index in 0..<300 { Self.put(inbox, [UInt8(truncatingIfNeeded: index)], at: index) }
        var items: [Inbox.Datagram] = [], handled: [[UInt8]] = []
        inbox.take(&items, returning: &handled)
        #expect(items.count == Inbox.capacity)
        #expect(items.first?.arrival == .milliseconds(300 - Inbox.capacity))
        #expect(items.last?.bytes == [UInt8(truncatingIfNeeded: 299)])
    }

    @Test func overTheBoundTheDroppedDatagramsBufferCarriesTheNewOne() {
        let inbox = Inbox()
        Self.put(inbox, [UInt8](repeating: 0xAA, count: 200), at: 0)
        var items: [Inbox.Datagram] = [], handled: [[UInt8]] = []
        inbox.take(&items, returning: &handled)
        let address = items[0].bytes.withUnsafeBufferPointer { UInt(bitPattern: $0.baseAddress) }
        // Given back as a spare: the next datagram, the oldest once the inbox is full, takes it.
        handled.append(items.removeFirst().bytes)
        var none: [Inbox.Datagram] = []
        inbox.take(&none, returning: &handled)
        for index in 0..<Inbox.capacity { Self.put(inbox, [UInt8(truncatingIfNeeded: index)], at: index + 1) }
        Self.put(inbox, [7, 7, 7], at: 1_000)  // one over the bound: the oldest (in the spare) goes
        inbox.take(&items, returning: &handled)
        #expect(items.count == Inbox.capacity)
        #expect(items.first?.bytes == [1], "the oldest was dropped")
        #expect(items.last?.bytes == [7, 7, 7])
        #expect(items.last?.bytes.withUnsafeBufferPointer { UInt(bitPattern: $0.baseAddress) } == address,
                "the dropped datagram's buffer was reused, not freed")
    }
}
