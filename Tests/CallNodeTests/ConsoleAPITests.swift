import CallNode
import CallNodeTestKit
import CallNodeTestSupport
import Foundation
@testable import NodeControl
import Testing

/// What the console reads through the API besides the calls' actions: each live call's facts
/// (its peer's kind, when it started and connected, its encryption and codec, which a page that
/// joins mid-call never saw in events), recordings made without naming a file, and Recents with
/// each call's quality and recording.
@Suite struct ConsoleAPITests {
    @Test func aLiveCallSaysWhatItsEventsSaidAndItsRecentsRowKeepsItsQualityAndRecording() async throws {
        let (f, api, events, call) = try await ControlAPITests.connectedCall(alice: .tone(440), bob: .tone(660))
        defer { events.task.cancel() }
        let alice = try #require(f.nodes["alice"])
        let bob = try #require(f.nodes["bob"])
        // (The first figures come a second into the call, and the reader takes events as they come.)
        #expect(await ControlAPITests.step(f, frames: 150) { !events.named("stats").isEmpty && !events.named("secured").isEmpty })
        let live = await ControlAPITests.send(api, "GET", "/v1/calls/\(call.uuidString)")
        #expect(live.status == 200)
        #expect(live.object["peer_kind"] as? String == "node" && live.object["peer"] as? String == alice.identity.fingerprint.hex)
        // What the events said, which a reader that came later did not see.
        let secured = try #require(events.named("secured").first), stats = try #require(events.named("stats").last)
        #expect(live.object["codec"] as? String == stats["codec"] as? String && live.object["codec"] is String, "\(live.object)")
        #expect(live.object["encrypted"] as? Bool == secured["encrypted"] as? Bool && live.object["encrypted"] is Bool, "\(live.object)")
        #expect(live.object["key_exchange"] as? String == secured["key_exchange"] as? String, "\(live.object)")
        let started = try #require(live.object["started"] as? Double), connected = try #require(live.object["connected"] as? Double)
        #expect(started <= connected && abs(connected - Date().timeIntervalSince1970) < 60)

        // A recording with no file named goes to the node's recordings folder; Recents names it.
        let recording = await ControlAPITests.send(api, "POST", "/v1/calls/\(call.uuidString)/record", [:])
        #expect(recording.status == 201, "\(recording.object)")
        let path = try #require(recording.object["path"] as? String)
        #expect(path.hasPrefix(bob.configuration.home + "/recordings/") && path.hasSuffix(".wav"))
        for _ in 0..<150 { await f.step() }
        try await alice.hangUp(call)
        try await f.waitFor("bob", advancing: true) { if case .ended(call, _, _, _) = $0 { true } else { false } }
        #expect(await ControlAPITests.step(f, frames: 50) { events.named("recording-stopped").count == 1 })
        try await bob.store.flush()

        let list = await ControlAPITests.send(api, "GET", "/v1/recents?limit=5")
        let rows = try #require(list.object["recents"] as? [[String: Any]], "\(list.status): \(list.object)")
        let row = try #require(rows.first)
        #expect(row["id"] as? String == call.uuidString && row["direction"] as? String == "incoming")
        #expect(row["name"] as? String == "alice" && row["recording"] as? Bool == true && row["quality"] as? Bool == true, "\(row)")
        // (Its duration is the wall clock's: these nodes run on manual time, so it is only there.)
        #expect((row["duration_s"] as? Double).map { $0 >= 0 } == true && row["outcome"] as? String == "remoteEnded", "\(row)")

        // Its quality: samples a second apart, and the summary `recents show` prints.
        let quality = await ControlAPITests.send(api, "GET", "/v1/recents/\(call.uuidString.prefix(8))/quality")
        #expect(quality.status == 200)
        let samples = try #require(quality.object["samples"] as? [[String: Any]])
        #expect(samples.count >= 2 && samples.allSatisfy { ($0["receiveKbps"] as? Int ?? 0) > 0 }, "\(samples)")
        #expect((quality.object["summary"] as? [String])?.first?.hasPrefix("quality over") == true)
        // As a picture: an SVG document of the plot's size.
        let picture = await api.respond(to: ControlRequest(method: "GET", uri: "/v1/recents/\(call.uuidString)/quality.svg"))
        #expect(picture.status == 200 && picture.contentType == "image/svg+xml")
        let svg = String(decoding: picture.body, as: UTF8.self)
        #expect(svg.hasPrefix("<?xml") && svg.contains("<svg") && svg.contains("width=\"\(QualityPlot.width)\"") && svg.contains("</svg>"), "\(svg.prefix(200))")
        // Its recording: the WAV file the call was recorded into, both sides heard.
        let wav = await api.respond(to: ControlRequest(method: "GET", uri: "/v1/recents/\(call.uuidString)/recording"))
        #expect(wav.status == 200 && wav.contentType == "audio/wav")
        #expect(Data(wav.body) == FileManager.default.contents(atPath: path))
        #expect(try ControlAPITests.share(of: 440, in: path, from: 0.5, to: 2.5) > 0.2)
        await f.shutdown()
    }

    @Test func recentsRequestsThatNameNothingGetAReason() async throws {
        let (f, api, events, call) = try await ControlAPITests.connectedCall(alice: .tone(440), bob: .tone(660))
        defer { events.task.cancel() }
        let alice = try #require(f.nodes["alice"])
        // Live, not yet recent: its recording does not exist.
        try await alice.hangUp(call)
        try await f.waitFor("bob", advancing: true) { if case .ended(call, _, _, _) = $0 { true } else { false } }
        try await f.nodes["bob"]!.store.flush()
        for limit in ["0", "501", "many"] {
            let answer = await ControlAPITests.send(api, "GET", "/v1/recents?limit=\(limit)")
            #expect(answer.status == 400 && (answer.object["error"] as? String)?.contains("limit") == true, "\(limit): \(answer)")
        }
        let unknown = await ControlAPITests.send(api, "GET", "/v1/recents/\(UUID().uuidString)/quality")
        #expect(unknown.status == 404 && (unknown.object["error"] as? String)?.contains("no recent call") == true)
        let notRecorded = await ControlAPITests.send(api, "GET", "/v1/recents/\(call.uuidString)/recording")
        #expect(notRecorded.status == 404 && (notRecorded.object["error"] as? String)?.contains("was not recorded") == true, "\(notRecorded)")
        // The API serves on.
        #expect(await ControlAPITests.send(api, "GET", "/v1/recents").status == 200)
        await f.shutdown()
    }
}
