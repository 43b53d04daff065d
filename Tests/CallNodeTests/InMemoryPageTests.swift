import CallNode
import CallNodeTestKit
import CallNodeTestSupport
import Foundation
import Testing

/// Calls between a node and its call page on manual time: the test kit's ``InMemoryPage``
/// speaks the page's wire to the node's page entry, and a second node plays the browser's
/// WebRTC. Chromium's own calls stay in ``BrowserCallTests``; these are the call logic.
@Suite struct InMemoryPageTests {
    /// Bob serves the page; the browser (a 440 Hz tone) opens it.
    static func page(_ f: InMemoryNodes, browserAnswers: Bool = true) async throws -> (bob: CallNode, page: InMemoryPage) {
        let bob = try await f.node("bob", input: .tone(660))
        let browser = try await f.node("browser", input: .tone(440), autoAnswer: browserAnswers, keyExchange: .dtls)
        let page = InMemoryPage(browser: browser, servedBy: bob)
        try await f.waitFor("bob") { $0 == .webPage(connected: true, from: "page:1") }
        return (bob, page)
    }

    static func heard(_ node: CallNode, _ call: UUID) async -> MediaStatistics? { await node.statistics(call) }

    @Test func aPageCallsTheNodeAndEachHearsTheOtherOverDTLS() async throws {
        let f = try InMemoryNodes()
        let (bob, page) = try await Self.page(f)
        let pageCall = try await page.call()
        let incoming = try await f.waitFor("bob", advancing: true) { if case .incoming = $0 { true } else { false } }
        guard case let .incoming(bobCall, _, name, known) = incoming.event else { return }
        #expect(name == "browser" && !known, "\(String(describing: name)), known \(known)")
        try await f.waitFor("bob", advancing: true) { if case .connected(bobCall, _) = $0 { true } else { false } }
        try await f.waitFor("browser", advancing: true) { if case .connected(pageCall, _) = $0 { true } else { false } }
        // Pages take DTLS-SRTP only: the call is secured by a DTLS handshake on both sides.
        #expect(f.events("bob").contains { if case .secured(bobCall, _) = $0 { true } else { false } }, "\(f.story("bob"))")
        for _ in 0..<100 { await f.step() }
        let atBob = try #require(await Self.heard(bob, bobCall)), atPage = try #require(await Self.heard(page.browser, pageCall))
        #expect(atBob.packetsReceived >= 90 && atPage.packetsReceived >= 90, "\(atBob.packetsReceived) and \(atPage.packetsReceived) packets")
        #expect(atBob.receiveLevel > -30 && atPage.receiveLevel > -30, "levels \(atBob.receiveLevel), \(atPage.receiveLevel)")
        // The page hangs up.
        try await page.browser.hangUp(pageCall)
        try await f.waitFor("bob", advancing: true) { if case .ended(bobCall, .remoteEnded, _, _) = $0 { true } else { false } }
        #expect(await bob.liveCalls.isEmpty)
        await page.close()
        await f.shutdown()
    }

    @Test func theNodeRingsThePageWhichAnswersAndTheNodeHangsUp() async throws {
        let f = try InMemoryNodes()
        let bob = try await f.node("bob", input: .tone(660))
        // No page connected: nobody to ring.
        await #expect(throws: CallNodeError.noWebPage) { _ = try await bob.call(.webPage) }
        let browser = try await f.node("browser", input: .tone(440), keyExchange: .dtls)
        let page = InMemoryPage(browser: browser, servedBy: bob)
        try await f.waitFor("bob") { $0 == .webPage(connected: true, from: "page:1") }
        let call = try await bob.call(.webPage)
        // The page's one connection carries this call: a second has no free page.
        await #expect(throws: CallNodeError.noWebPage) { _ = try await bob.call(.webPage) }
        let rang = try await f.waitFor("browser", advancing: true) { if case .incoming = $0 { true } else { false } }
        guard case let .incoming(pageCall, _, _, _) = rang.event else { return }
        try await f.waitFor("bob", advancing: true) { if case .connected(call, _) = $0 { true } else { false } }
        for _ in 0..<50 { await f.step() }
        let atPage = try #require(await browser.statistics(pageCall)), atBob = try #require(await bob.statistics(call))
        #expect(atPage.receiveLevel > -30 && atBob.receiveLevel > -30, "levels \(atPage.receiveLevel), \(atBob.receiveLevel)")
        try await bob.hangUp(call)
        try await f.waitFor("browser", advancing: true) { if case .ended(pageCall, .remoteEnded, _, _) = $0 { true } else { false } }
        try await f.waitFor("bob", advancing: true) { if case .ended(call, _, _, _) = $0 { true } else { false } }
        // Free again once the call is over.
        // The page stays connected between calls, and can be rung again at once.
        #expect(await bob.connectedWebPages == 1)
        let again = try await bob.call(.webPage)
        try await f.waitFor("bob", advancing: true) { if case .connected(again, _) = $0 { true } else { false } }
        try await bob.hangUp(again)
        await page.close()
        await f.shutdown()
    }

    @Test func aPageThatDeclinesIsARefusalAndAClosedPageEndsItsCall() async throws {
        let f = try InMemoryNodes()
        let (bob, page) = try await Self.page(f, browserAnswers: false)
        let call = try await bob.call(.webPage)
        let rang = try await f.waitFor("browser", advancing: true) { if case .incoming = $0 { true } else { false } }
        guard case let .incoming(pageCall, _, _, _) = rang.event else { return }
        try await f.waitFor("bob", advancing: true) { if case .ringing(call, _) = $0 { true } else { false } }
        try await page.browser.hangUp(pageCall)  // "Decline"
        try await f.waitFor("bob", advancing: true) { $0 == .rejected(call, .declined) }
        try await f.waitFor("bob", advancing: true) { if case .ended(call, _, _, _) = $0 { true } else { false } }

        // A call in progress when the page goes away ends at the node, and the page is gone.
        let second = try await bob.call(.webPage)
        let rangAgain = try await f.waitFor("browser", advancing: true) {
            if case let .incoming(uuid, _, _, _) = $0 { uuid != pageCall } else { false }
        }
        guard case let .incoming(secondAtPage, _, _, _) = rangAgain.event else { return }
        try await page.browser.answer(secondAtPage)
        try await f.waitFor("bob", advancing: true) { if case .connected(second, _) = $0 { true } else { false } }
        await page.close()
        try await f.waitFor("bob", advancing: true) { if case .ended(second, _, _, _) = $0 { true } else { false } }
        try await f.waitFor("bob") { $0 == .webPage(connected: false, from: "page:1") }
        #expect(await bob.liveCalls.isEmpty)
        #expect(await bob.connectedWebPages == 0)
        await f.shutdown()
    }
}
