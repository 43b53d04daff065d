import CallNode
import CallNodeTestKit
import CallNodeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A browser in the same AudioBridge room as two nodes, with Janus's own JavaScript library
/// (Debian's janus.js): nothing on the browser's side was written by us but the page's glue, so
/// the room, its mix and its media are checked against what people use. The browser hears both
/// nodes and not itself; each node hears the other and the browser. A screenshot of the page
/// is kept in `.build/artefacts/janus-browser/`.
extension RealTimeTests {
@Suite(.serialized, .realTimeAlone, .enabled(if: JanusServer.isInstalled && access("/usr/bin/chromium", X_OK) == 0, "needs janus and chromium (scripts/bootstrap installs them)"))
struct JanusBrowserTests {
    typealias Fixture = TwoNodeTests.Fixture
    static let room = 4500
    static let voices: [String: Double] = ["a": 440, "b": 620, "browser": 1170]
    static let janusJS = "/usr/share/javascript/janus-gateway/janus.js"
    static let artefacts: String = {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return root.appendingPathComponent(".build/artefacts/janus-browser").path
    }()

    /// As JanusRoomCallTests' `voices(in:)`, with the browser's tone among the voices.
    static func voices(in samples: ArraySlice<Int16>) -> Set<String> {
        let energy = samples.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(max(1, samples.count))
        guard energy > 100 else { return [] }
        return Set(voices.filter { Goertzel.share(of: $0.value, in: samples) > 0.05 }.keys)
    }

    /// What the page's analyser reads at each voice's frequency (dB, -200 for nothing), and
    /// whether its AudioContext runs.
    struct Levels: Decodable, CustomStringConvertible {
        var a: Double
        var b: Double
        var browser: Double
        var context: String

        /// A clear tone reads about −30…−50 dB and silence or codec noise below −100: −70 is far
        /// under either node's tone and far above nothing. The browser's own voice, were it in
        /// its mix, would read as loud as the nodes' (the same amplitude): 20 dB below both
        /// leaves room for Opus and the mix to bend the levels, and none for the voice.
        var hearsBothNodesAndNotItself: Bool {
            a > -70 && b > -70 && a - browser >= 20 && b - browser >= 20
        }

        var description: String {
            "440 Hz \(Int(a.rounded())) dB, 620 Hz \(Int(b.rounded())) dB, 1170 Hz \(Int(browser.rounded())) dB (context \(context))"
        }
    }

    /// The page: janus.js with a stand-in for webrtc-adapter (Debian ships none; janus.js only
    /// asks it which browser this is), joining `room` as "browser" and analysing what the room
    /// sends it. `window.state` says how far it got ("joined", "media", or "error: …"),
    /// `window.participants` whom the room named, `window.levels()` what it hears.
    static func page(server: String, room: Int) -> String {
        #"""
        <!doctype html>
        <html><head><meta charset="utf-8"><title>Janus room from a browser</title>
        <script src="file://\#(janusJS)"></script>
        </head><body>
        <h1>AudioBridge room \#(room) from a browser</h1>
        <pre id="status">loading</pre>
        <audio id="remote" autoplay></audio>
        <script>
        const FREQUENCIES = {a: 440, b: 620, browser: 1170};
        window.state = "loading";
        window.participants = [];
        const names = {};
        let handle = null, context = null, analyser = null, peerUp = false, offered = false;

        function setState(state) { window.state = state; console.log("janus-browser state " + state); }
        function describe(error) {
          if (!error) return String(error);
          if (typeof error === "string") return error;
          return error.message || error.name || JSON.stringify(error);
        }
        function fail(what, error) { setState("error: " + what + ": " + describe(error)); }
        function maybeMedia() {
          if (analyser && peerUp && context && context.state === "running" && !window.state.startsWith("error")) setState("media");
        }
        function note(list) {
          for (const p of list || []) names[p.id] = p.display || String(p.id);
          window.participants = Object.values(names).sort();
        }
        // Each voice's level: the loudest of the nearest bin and its two neighbours (a tone
        // resampled on the way may sit between bins).
        window.levels = function () {
          const out = {context: context ? context.state : "none"};
          const bins = analyser ? new Float32Array(analyser.frequencyBinCount) : null;
          if (analyser) analyser.getFloatFrequencyData(bins);
          for (const [name, frequency] of Object.entries(FREQUENCIES)) {
            let level = -200;
            if (analyser) {
              const k = Math.round(frequency * analyser.fftSize / context.sampleRate);
              for (const i of [k - 1, k, k + 1]) if (Number.isFinite(bins[i])) level = Math.max(level, bins[i]);
            }
            out[name] = level;
          }
          return out;
        };
        setInterval(() => {
          document.getElementById("status").textContent = "state: " + window.state + "\nparticipants: " +
            window.participants.join(", ") + "\nlevels: " + JSON.stringify(window.levels());
        }, 500);

        function listen(track) {
          const stream = new MediaStream([track]);
          // Chromium decodes a remote track only for a sink that plays it: the audio element.
          const element = document.getElementById("remote");
          element.srcObject = stream;
          element.play().catch(e => console.log("janus-browser play: " + describe(e)));
          context = new AudioContext();
          analyser = context.createAnalyser();
          analyser.fftSize = 8192;
          context.createMediaStreamSource(stream).connect(analyser);
          // Pulled through to the output (silently), so the graph runs whatever Chromium prunes.
          const silent = context.createGain();
          silent.gain.value = 0;
          analyser.connect(silent).connect(context.destination);
          context.resume().then(() => { console.log("janus-browser context " + context.state); maybeMedia(); },
                                e => fail("audio context", e));
          context.onstatechange = maybeMedia;
        }

        function offer() {
          handle.createOffer({
            // The fake microphone as it is: nothing to bend or suppress a steady tone.
            tracks: [{type: "audio", recv: true,
                      capture: {echoCancellation: false, noiseSuppression: false, autoGainControl: false}}],
            success: jsep => handle.send({message: {request: "configure", muted: false}, jsep: jsep,
                                          error: e => fail("configure", e)}),
            error: e => fail("offer", e),
          });
        }

        if (typeof Janus === "undefined") {
          setState("error: janus.js did not load from \#(janusJS)");
        } else {
          Janus.init({
            debug: ["warn", "error"],
            dependencies: Janus.useDefaultDependencies({adapter: {browserDetails: {browser: "chrome", version: 120, minVersion: 0}}}),
            callback: () => {
              const janus = new Janus({
                server: "\#(server)",
                iceServers: [],
                success: () => janus.attach({
                  plugin: "janus.plugin.audiobridge",
                  opaqueId: "janus-browser-test",
                  success: h => {
                    handle = h;
                    setState("attached");
                    handle.send({message: {request: "join", room: \#(room), display: "browser"}, error: e => fail("join", e)});
                  },
                  error: e => fail("attach", e),
                  iceState: s => console.log("janus-browser ice " + s),
                  webrtcState: (up, reason) => {
                    console.log("janus-browser webrtc " + up + " " + (reason || ""));
                    peerUp = up;
                    if (up) maybeMedia(); else fail("PeerConnection down", reason);
                  },
                  onmessage: (msg, jsep) => {
                    console.log("janus-browser message " + JSON.stringify(msg));
                    if (msg.error) fail("audiobridge", msg.error_code + " " + msg.error);
                    if (msg.audiobridge === "joined" || msg.audiobridge === "event") note(msg.participants);
                    if (msg.leaving) { delete names[msg.leaving]; window.participants = Object.values(names).sort(); }
                    if (msg.audiobridge === "joined" && !offered) {
                      offered = true;
                      setState("joined");
                      offer();
                    }
                    if (jsep) handle.handleRemoteJsep({jsep: jsep, error: e => fail("answer", e)});
                  },
                  onremotetrack: (track, mid, on) => {
                    console.log("janus-browser remote " + track.kind + " " + mid + " " + on);
                    if (on && track.kind === "audio" && !analyser) listen(track);
                  },
                }),
                error: e => fail("session", e),
              });
            },
          });
        }
        </script>
        </body></html>
        """#
    }

    @Test func aBrowserWithJanusJSHearsTheNodesInTheRoomAndIsHeard() async throws {
        let f = try Fixture()
        let janus = try await JanusRoomCallTests.janus(f, rooms: [.init(id: Self.room, samplingRate: 48_000)])
        defer { janus.stop() }
        var nodes: [String: CallNode] = [:]
        var calls: [String: UUID] = [:]
        for (name, frequency) in [("a", 440.0), ("b", 620.0)] {
            let node = try await f.node(name, input: .tone(frequency), output: .wav(f.path("\(name)-out.wav")), iceAddresses: [janus.mediaAddress])
            let events = node.events()
            let call = try await node.call(JanusRoomCallTests.room(janus, Self.room))
            try await JanusRoomCallTests.connected(events, call, janus: janus)
            nodes[name] = node
            calls[name] = call
        }

        // The browser's microphone: a 1 170 Hz tone at the nodes' amplitude (0.3), whole periods
        // in its second so that Chromium's looping of the file leaves no click.
        let microphone = f.path("browser-in.wav")
        let tone = (0..<48_000).map { Int16((0.3 * 32_767 * sin(2 * Double.pi * 1_170 * Double($0) / 48_000)).rounded()) }
        try WAV.write(tone, format: AudioFormat(), path: microphone)
        // Chromium renders received audio only with a sound server (see BrowserNetwork): one of
        // its own, given through a wrapper since the helper starts Chromium with this
        // process's environment.
        let sound = try PulseAudioServer(name: "-janus-browser")
        defer { sound.stop() }
        let wrapper = f.path("chromium.sh")
        try """
            #!/bin/sh
            exec /usr/bin/env PULSE_SERVER=unix:\(sound.socket) PULSE_SINK=\(sound.sink) /usr/bin/chromium "$@"

            """.write(toFile: wrapper, atomically: true, encoding: .utf8)
        _ = chmod(wrapper, 0o755)
        let pagePath = f.path("janus-browser.html")
        try Self.page(server: janus.url, room: Self.room).write(toFile: pagePath, atomically: true, encoding: .utf8)

        try FileManager.default.createDirectory(atPath: Self.artefacts, withIntermediateDirectories: true)
        let browser = try HeadlessChromium(chromium: wrapper, profile: f.path("chromium-profile"), log: f.path("chromium.log"), extraArguments: [
            "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream",
            "--use-file-for-fake-audio-capture=\(microphone)", "--autoplay-policy=no-user-gesture-required",
            // Janus resolves no mDNS names: the browser's candidates carry its addresses.
            "--disable-features=WebRtcHideLocalIpsWithMdns",
        ])
        defer { browser.close() }
        // Janus's HTTP API answers any origin, a file's too.
        let page = try await browser.openPage(URL(fileURLWithPath: pagePath).absoluteString)
        /// What a failure quotes: the page's console and the end of Chromium's log.
        func report() -> String {
            let log = (try? String(contentsOfFile: browser.log, encoding: .utf8)) ?? "(no log)"
            return "the page's console ends:\n" + page.console.suffix(30).joined(separator: "\n")
                + "\nChromium's log ends:\n" + log.split(separator: "\n").suffix(15).joined(separator: "\n")
        }

        do {
            try await page.waitFor("window.state === 'media' || String(window.state).startsWith('error')",
                                   timeout: .seconds(20), what: "the room's audio playing")
        } catch {
            try? await page.screenshot(to: Self.artefacts + "/no-media.png")
            throw TestFailure("\(error)\n\(report())")
        }
        let state = try await page.evaluateString("String(window.state)")
        guard state == "media" else {
            try? await page.screenshot(to: Self.artefacts + "/no-media.png")
            throw TestFailure("the page: \(state)\n\(report())")
        }
        // The room named the two nodes to the browser, and Janus lists all three.
        #expect(try await page.evaluateString("window.participants.join(',')") == "a,b", "\(report())")
        #expect(try await janus.participants(room: Self.room).sorted() == ["a", "b", "browser"])

        // A few seconds for the mix to flow and the analyser (smoothed) to settle; then the
        // browser hears both nodes and not itself (the AudioBridge sends each participant
        // the mix less its own voice). One reading of five may be caught mid-glitch.
        try await Task.sleep(for: .seconds(3))
        var readings: [Levels] = []
        for _ in 0..<5 {
            let json = try await page.evaluateString("JSON.stringify(window.levels())")
            readings.append(try JSONDecoder().decode(Levels.self, from: Data(json.utf8)))
            try await Task.sleep(for: .milliseconds(400))
        }
        try? await page.screenshot(to: Self.artefacts + "/hearing.png")
        let heard = readings.filter(\.hearsBothNodesAndNotItself).count
        #expect(heard >= 4, "the browser should hear a and b and not itself: \(readings)\n\(report())")

        for (name, node) in nodes.sorted(by: { $0.key < $1.key }) { try await node.hangUp(try #require(calls[name])) }
        browser.close()
        for node in nodes.values { await node.shutdown() }

        // The last second and a half before the hang-ups, each node heard the other and the
        // browser, and not itself.
        for (name, others) in [("a", Set(["b", "browser"])), ("b", Set(["a", "browser"]))] {
            let blocks = try JanusRoomCallTests.lastBlocks(f, name, voices: Self.voices(in:))
            #expect(blocks.count == 15, "\(name) recorded too little: \(blocks.count) blocks")
            let wrong = blocks.filter { $0 != others }
            #expect(wrong.count <= 2, "\(name) should hear \(others.sorted()), heard \(blocks.map { $0.sorted() })")
        }
    }
}
}
