import CallNode
import CallNodeTestSupport
import Foundation
import NodeControl
import Testing

#if canImport(Glibc)
import Glibc
#endif

extension RealTimeTests {
/// The console in a real browser (Debian's Chromium, headless, driven over its DevTools pipe)
/// against a node with live calls on loopback: what an operator sees and does. Screenshots of
/// each step are kept in `.build/artefacts/console/`.
@Suite(.serialized, .realTimeAlone, .enabled(if: access("/usr/bin/chromium", X_OK) == 0, "chromium is not installed (scripts/bootstrap installs it)"))
struct ConsolePageTests {
    static let artefacts: String = {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return root.appendingPathComponent(".build/artefacts/console").path
    }()

    /// Rows the page shows for live calls.
    static let rows = "document.querySelectorAll('#calls tr[data-call]').length"

    /// The JavaScript for the row of `call`.
    static func row(_ call: UUID) -> String { "document.querySelector('#calls tr[data-call=\"\(call.uuidString)\"]')" }

    @Test func anOperatorSeesTheCallsActsOnThemAndTheConsoleOutlivesARestart() async throws {
        let fixture = try TwoNodeTests.Fixture()
        // Devices of their own (nodes in one process that share one are interrupted by each other).
        let bob = try await fixture.node("bob", output: .wav(fixture.path("bob.wav")), acceptUnknown: true)
        let alice = try await fixture.node("alice", input: .tone(440), output: .wav(fixture.path("alice.wav")))
        let carol = try await fixture.node("carol", input: .tone(880), output: .wav(fixture.path("carol.wav")))
        try await fixture.trust(alice, as: "alice", bob, as: "bob")
        try await fixture.trust(carol, as: "carol", bob, as: "bob")
        let token = "console-test-\(UUID().uuidString)"
        var server = try await ControlServer(api: ControlAPI(node: bob), address: .tcp(host: "127.0.0.1", port: 0), token: token)
        var serving = Task { [server] in await server.run() }
        guard case let .tcp(_, port) = server.address else { throw TestFailure("not TCP") }
        var bobEvents = bob.events()
        let aliceCall = try await alice.call(.contact("bob"))
        _ = try await TwoNodeTests.next(bobEvents) { if case .connected(aliceCall, _) = $0 { true } else { false } }
        let carolCall = try await carol.call(.contact("bob"))
        _ = try await TwoNodeTests.next(bobEvents) { if case .connected(carolCall, _) = $0 { true } else { false } }

        try FileManager.default.createDirectory(atPath: Self.artefacts, withIntermediateDirectories: true)
        let browser = try HeadlessChromium(profile: fixture.path("chromium-profile"), log: fixture.path("chromium.log"))
        defer { browser.close() }
        let page = try await browser.openPage("http://127.0.0.1:\(port)/console/")

        // Over TCP without the token, the page asks for it and shows nothing of the node.
        try await page.waitFor("!!document.querySelector('#login') && document.querySelector('#login').offsetParent !== null", what: "the sign-in form")
        #expect(try await page.evaluateInt(Self.rows) == 0)
        #expect(try await page.evaluateBool("!document.body.innerText.includes('\(bob.identity.fingerprint.hex.prefix(16))')"))
        try await page.screenshot(to: Self.artefacts + "/1-sign-in.png")

        // Signed in: both calls and their peers.
        try await page.type("#token", token)
        try await page.click("#login button[type=submit], #login button")
        try await page.waitFor("\(Self.rows) == 2", what: "two calls")
        let text = try await page.evaluateString("document.querySelector('#calls').innerText")
        #expect(text.contains("alice") && text.contains("carol"), "\(text)")
        #expect(!page.console.contains { $0.contains(token) }, "the token was logged")

        // A tone played into Carol's call (Alice's is held: Bob answered Carol's, holding hers)
        // moves the meter of what Bob sends.
        let sendLevel = "Number(\(Self.row(carolCall)).querySelector('.meter-send').dataset.level || -200)"
        try await page.waitFor("\(sendLevel) < -40", what: "a quiet send meter before the tone")
        let client = ControlClient(address: server.address, token: token)
        let played = try await client.send("POST", "/v1/calls/\(carolCall.uuidString)/play", body: ["tone": 440, "seconds": 6])
        #expect(played.succeeded, "\(played.object)")
        try await page.waitFor("\(sendLevel) > -30", what: "the send meter moving with the tone")
        // Sparklines have had their samples by now.
        #expect(try await page.evaluateBool("\(Self.row(carolCall)).querySelectorAll('.spark polyline').length >= 4"))
        try await page.screenshot(to: Self.artefacts + "/2-two-calls.png")

        // Recorded and hung up from the page: the node says the call ended, and Recents holds
        // the recording, playable in the page.
        try await page.click("\(Self.cssRow(carolCall)) button[data-action=record]")
        try await page.waitFor("\(Self.row(carolCall)).querySelector('.status').innerText.includes('recording')", what: "Carol's call recording")
        try await Task.sleep(for: .seconds(1))  // a second of it, to play back
        try await page.click("\(Self.cssRow(carolCall)) button[data-action=hangup]")
        _ = try await TwoNodeTests.next(bobEvents) { if case .ended(carolCall, _, _, _) = $0 { true } else { false } }
        try await page.waitFor("\(Self.rows) == 1", what: "Carol's call gone from the live calls")
        try await page.waitFor("!!document.querySelector('#recents tr[data-recent=\"\(carolCall.uuidString)\"] audio')", what: "Carol's recording in Recents")
        let fetched = try await page.evaluateString(
            "fetch(document.querySelector('#recents tr[data-recent=\"\(carolCall.uuidString)\"] audio').src).then(r => r.status + ' ' + r.headers.get('content-type'))")
        #expect(fetched == "200 audio/wav")

        // A third call appears without a reload.
        let dave = try await fixture.node("dave", input: .tone(330), output: .wav(fixture.path("dave.wav")))
        try await fixture.trust(dave, as: "dave", bob, as: "bob")
        let daveCall = try await dave.call(.contact("bob"))
        _ = try await TwoNodeTests.next(bobEvents) { if case .connected(daveCall, _) = $0 { true } else { false } }
        try await page.waitFor("\(Self.rows) == 2 && !!\(Self.row(daveCall))", what: "Dave's call, without a reload")
        #expect(try await page.evaluateString("\(Self.row(daveCall)).innerText").contains("dave"))
        try await page.screenshot(to: Self.artefacts + "/3-third-call.png")

        // Bad input from the console gets the node's reason on the page, and the node serves on:
        // digits DTMF cannot send (the operator's typing), and a hang-up of a call that ended
        // while the page missed the news (its events stream paused).
        _ = try await page.evaluate("window.prompt = () => '12x'")
        try await page.click("\(Self.cssRow(daveCall)) button[data-action=dtmf]")
        try await page.waitFor("document.querySelector('#error').innerText.includes('DTMF cannot send')", what: "the node's refusal of the digits")
        // (The page misses the news: once what it had on its way has come, its stream is closed
        // and its fetching of calls held.)
        try await page.waitFor("busy === 0", what: "the page's requests done")
        _ = try await page.evaluate("events.close(), window.heldLoadCalls = loadCalls, window.loadCalls = async () => {}, true")
        try await page.waitFor("busy === 0", what: "the page's requests done")
        try await dave.hangUp(daveCall)
        _ = try await TwoNodeTests.next(bobEvents) { if case .ended(daveCall, _, _, _) = $0 { true } else { false } }
        try await page.click("\(Self.cssRow(daveCall)) button[data-action=hangup]")
        try await page.waitFor("document.querySelector('#error').innerText.includes('no call')", what: "the node's answer for a call gone")
        try await page.screenshot(to: Self.artefacts + "/4-bad-input.png")
        _ = try await page.evaluate("window.loadCalls = heldLoadCalls, events = null, reconnect(), true")
        try await page.waitFor("!\(Self.row(daveCall))", what: "the call gone from the page once fetched afresh")
        for _ in 0..<100 where server.api.events.readers == 0 { try await Task.sleep(for: .milliseconds(50)) }
        #expect(server.api.events.readers == 1, "the page reads the events again")

        // The node restarts (same home, same port, same token): the page finds it again by
        // itself, still signed in, and shows the call placed to it next.
        serving.cancel()
        await server.close()
        await bob.shutdown()
        try await page.waitFor("\(Self.rows) == 0 || document.querySelector('#link').innerText.includes('reconnect')", what: "the node gone")
        let bobAgain = try await fixture.node("bob", output: .wav(fixture.path("bob-again.wav")), acceptUnknown: true)
        server = try await ControlServer(api: ControlAPI(node: bobAgain), address: .tcp(host: "127.0.0.1", port: port), token: token)
        serving = Task { [server] in await server.run() }
        bobEvents = bobAgain.events()
        try await fixture.trust(alice, as: "alice", bobAgain, as: "bob")
        try await page.waitFor("document.querySelector('#link').innerText.includes('live') && \(Self.rows) == 0", timeout: .seconds(30),
                               what: "the console live again, with no calls")
        let again = try await alice.call(.contact("bob"))
        _ = try await TwoNodeTests.next(bobEvents) { if case .connected(again, _) = $0 { true } else { false } }
        try await page.waitFor("!!\(Self.row(again))", what: "the call to the restarted node")
        #expect(try await page.evaluateBool("document.querySelector('#login').offsetParent === null"), "the restart asked for the token again")
        try await page.screenshot(to: Self.artefacts + "/5-after-restart.png")
        #expect(page.console.filter { $0.contains("callnode-console-error") }.isEmpty, "\(page.console.suffix(10))")

        serving.cancel()
        await server.close()
        for node in [alice, carol, dave, bobAgain] { await node.shutdown() }
    }

    @Test func aReaderTheNodeDropsSaysSoAndReconnects() async throws {
        let fixture = try TwoNodeTests.Fixture()
        let bob = try await fixture.node("bob")
        let token = "console-test-\(UUID().uuidString)"
        // A reader falls behind after a few events (512 in a node).
        let server = try await ControlServer(api: ControlAPI(node: bob, events: ControlEvents(readerLimit: 4)),
                                             address: .tcp(host: "127.0.0.1", port: 0), token: token)
        let serving = Task { await server.run() }
        guard case let .tcp(_, port) = server.address else { throw TestFailure("not TCP") }
        let browser = try HeadlessChromium(profile: fixture.path("chromium-profile"), log: fixture.path("chromium.log"))
        defer { browser.close() }
        let page = try await browser.openPage("http://127.0.0.1:\(port)/console/")
        try await page.waitFor("document.querySelector('#login').offsetParent !== null", what: "the sign-in form")
        try await page.type("#token", token)
        try await page.click("#login button")
        try await page.waitFor("document.querySelector('#link').innerText.includes('live')", what: "the console live")
        let readers = server.api.events.readers
        for n in 0..<200 { server.api.events.publish(["event": "test-burst", "n": n]) }
        try await page.waitFor("document.querySelector('#error').innerText.includes('dropped')", what: "the drop said on the page")
        #expect(server.api.events.droppedReaders >= 1)
        try await page.waitFor("document.querySelector('#link').innerText.includes('live')", what: "the console live again")
        #expect(server.api.events.readers == readers, "the page reads events again")
        try await page.screenshot(to: Self.artefacts + "/6-dropped.png")
        serving.cancel()
        await server.close()
        await bob.shutdown()
    }

    static func cssRow(_ call: UUID) -> String { "#calls tr[data-call=\"\(call.uuidString)\"]" }
}
}
