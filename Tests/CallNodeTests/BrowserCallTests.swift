@testable import CallNode
import CallNodeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A real browser as the peer: Debian's Chromium, headless, with a fake microphone playing a
/// WAV file, inside a network namespace (Chromium leaves loopback out of ICE), talking to a
/// node in this process over a veth pair. Nothing here was written by us on the browser's
/// side: its ICE, DTLS, SRTP and Opus check ours.
enum BrowserBed {
    static let chromium = "/usr/bin/chromium"

    /// Why the browser tests cannot run here, or nil.
    static let unavailableReason: String? = {
        if geteuid() != 0 { return "needs root for a network namespace" }
        if access(chromium, X_OK) != 0 { return "chromium is not installed (scripts/bootstrap installs it)" }
        return NetworkBed.unavailableReason
    }()

    static var isAvailable: Bool { unavailableReason == nil }
}

/// One namespace holding the browser, joined to this process's namespace by a veth pair:
/// the node at 10.99.0.2 here, the browser at 10.99.0.1 there.
final class BrowserNetwork {
    let namespace: String
    let directory: String
    let nodeAddress = "10.99.0.2"
    private let hostSide: String
    private var browser: ChildProcess?
    /// Chromium renders received audio only with a sound server; this one is the browser's own
    /// (a test that points the process's ALSA at its server, and stops it, must not take the
    /// browser's output with it).
    private var sound: PulseAudioServer?

    init(_ name: String) throws {
        let id = getpid() % 100_000
        namespace = "cnweb\(id)"
        hostSide = "cnw\(id)h"
        directory = "/tmp/callnode-browser-\(getpid())-\(name)"
        try? FileManager.default.removeItem(atPath: directory)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        teardown()
        Self.removeLeftovers(log: directory + "/ip-netns.log")
        let steps: [[String]] = [
            ["netns", "add", namespace],
            ["link", "add", hostSide, "type", "veth", "peer", "name", "cnw\(id)b"],
            ["link", "set", "cnw\(id)b", "netns", namespace],
            ["addr", "add", "\(nodeAddress)/24", "dev", hostSide],
            ["link", "set", hostSide, "up"],
            ["netns", "exec", namespace, "ip", "addr", "add", "10.99.0.1/24", "dev", "cnw\(id)b"],
            ["netns", "exec", namespace, "ip", "link", "set", "cnw\(id)b", "up"],
            ["netns", "exec", namespace, "ip", "link", "set", "lo", "up"],
        ]
        for step in steps {
            guard try ChildProcess.run("/usr/sbin/ip", step, output: directory + "/ip.log") == 0 else {
                let log = (try? String(contentsOfFile: directory + "/ip.log", encoding: .utf8)) ?? ""
                teardown()
                throw TestFailure("ip \(step.joined(separator: " ")) failed: \(log)")
            }
        }
    }

    /// Removes the namespaces of test processes that died without tearing theirs down (a
    /// crash): their host side holds the same subnet, and the browser would never reach the node.
    static func removeLeftovers(log: String) {
        guard (try? ChildProcess.run("/usr/sbin/ip", ["netns", "list"], output: log)) == 0,
              let list = try? String(contentsOfFile: log, encoding: .utf8) else { return }
        for line in list.split(separator: "\n") {
            guard let name = line.split(separator: " ").first, name.hasPrefix("cnweb"), let pid = Int32(name.dropFirst(5)),
                  pid != getpid() % 100_000, kill(pid, 0) != 0, errno == ESRCH else { continue }
            _ = try? ChildProcess.run("/usr/sbin/ip", ["netns", "del", String(name)], output: log)
            _ = try? ChildProcess.run("/usr/sbin/ip", ["link", "del", "cnw\(pid)h"], output: log)
        }
    }

    /// Opens `url` in headless Chromium inside the namespace, with `microphone` as its input.
    /// `hideAddresses` leaves Chromium's default on: its host candidates carry random mDNS
    /// names instead of addresses.
    func open(_ url: String, microphone: String, hideAddresses: Bool = false) throws {
        let origin = url.split(separator: "/").prefix(3).joined(separator: "/")
        let sound = try self.sound ?? PulseAudioServer(name: "-browser")
        self.sound = sound
        browser = try ChildProcess("/usr/sbin/ip", [
            "netns", "exec", namespace, "/usr/bin/env", "PULSE_SERVER=unix:\(sound.socket)", "PULSE_SINK=\(sound.sink)",
            BrowserBed.chromium,
            "--headless=new", "--no-sandbox", "--user-data-dir=\(directory)/profile", "--no-first-run", "--disable-gpu",
            "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream",
            "--use-file-for-fake-audio-capture=\(microphone)", "--autoplay-policy=no-user-gesture-required",
            "--unsafely-treat-insecure-origin-as-secure=\(origin)", "--enable-logging=stderr", "--v=0",
            // The node's identity certificate is self-signed: a person accepts it (comparing its
            // fingerprint); the test browser is told to.
            "--ignore-certificate-errors",
        ] + (hideAddresses ? [] : ["--disable-features=WebRtcHideLocalIpsWithMdns"]) + [url], output: directory + "/chromium.log")
    }

    /// What the page wrote on the console: `console.log` lines, errors included.
    var console: [String] {
        let text = (try? String(contentsOfFile: directory + "/chromium.log", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").filter { $0.contains(":CONSOLE") }.map(String.init)
    }

    /// The page's JavaScript errors: anything it reported as `callnode-error`, and uncaught ones.
    var pageErrors: [String] {
        console.filter { $0.contains("callnode-error") || $0.contains("Uncaught") }
    }

    /// The page's `callnode-stats` objects, in order.
    var stats: [[String: Any]] {
        console.compactMap { line -> [String: Any]? in
            guard let start = line.range(of: "callnode-stats ") else { return nil }
            var json = String(line[start.upperBound...])
            // The console line ends with `", source: URL (line)`.
            if let end = json.range(of: "\", source:", options: .backwards) { json = String(json[..<end.lowerBound]) }
            json = json.replacingOccurrences(of: "\\\"", with: "\"")
            return (try? JSONSerialization.jsonObject(with: Data(json.utf8))) as? [String: Any]
        }
    }

    /// The node's next incoming call (the page's), within 30 s; when none comes, the error
    /// carries the end of Chromium's log (a page that never loaded says why there).
    func incoming(_ events: AsyncStream<NodeEvent>) async throws -> NodeEvent {
        do {
            return try await RealTimeTests.TwoNodeTests.next(events, within: .seconds(30), where: { if case .incoming = $0 { true } else { false } })
        } catch {
            let log = (try? String(contentsOfFile: directory + "/chromium.log", encoding: .utf8)) ?? "(no log)"
            throw TestFailure("\(error); Chromium's log ends:\n" + log.split(separator: "\n").suffix(25).joined(separator: "\n"))
        }
    }

    /// The first console line containing `text`, waiting up to `timeout`.
    func waitForConsole(_ text: String, timeout: Duration = .seconds(20)) async throws {
        let deadline = ContinuousClock.now + timeout
        while !console.contains(where: { $0.contains(text) }) {
            guard ContinuousClock.now < deadline else {
                throw TestFailure("the page never logged '\(text)'; console:\n" + console.suffix(20).joined(separator: "\n"))
            }
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    func closeBrowser() {
        browser?.stop(grace: .seconds(1))
        browser = nil
    }

    /// Kills whatever runs in the namespace and removes it (the veth pair goes with it).
    func teardown() {
        closeBrowser()
        sound?.stop()
        sound = nil
        _ = try? ChildProcess.run("/bin/sh", ["-c", "for p in $(ip netns pids \(namespace) 2>/dev/null); do kill -9 $p; done; ip netns del \(namespace) 2>/dev/null; ip link del \(hostSide) 2>/dev/null; true"])
    }

    deinit { teardown() }
}

extension RealTimeTests {
@Suite(.serialized, .realTimeAlone, .enabled(if: BrowserBed.isAvailable, "needs root, network namespaces and chromium"))
struct BrowserCallTests {
    static let secret = "browser-test-secret"

    /// A node for the browser: ICE on the veth address, the web port there too, speech in,
    /// a WAV recording out, answering at once.
    static func node(_ network: BrowserNetwork, speech: String, recording: String, https: Bool = false,
                     configure: (inout CallNodeConfiguration) -> Void = { _ in }) async throws -> (CallNode, SignalAddress) {
        var configuration = CallNodeConfiguration(home: network.directory + "/home")
        configuration.displayName = "node"
        configuration.listenAddress = nil
        configuration.ice.localAddresses = [network.nodeAddress]
        configuration.audio = NodeAudioBackend(input: .wav(speech), output: .wav(recording))
        configuration.autoAnswer = true
        configure(&configuration)
        let node = try await CallNode(configuration: configuration)
        await node.start()
        let web = try await node.serveWeb(host: network.nodeAddress, port: 0, secret: Self.secret,
                                          https: https ? try WebPageCertificate(identity: node.identity) : nil)
        return (node, web)
    }

    static func speech(_ path: String, seed: UInt64) throws -> String {
        try WAV.write(SyntheticSpeech.samples(seconds: 3, seed: seed), format: AudioFormat(), path: path)
        return path
    }

    /// What the browser heard from the node, by its own `getStats()`.
    /// `received`: packets the page's last inbound statistics must count (Chromium counts
    /// anew after a hold: the inbound stream's statistics end when the call goes inactive).
    static func checkBrowserHeard(_ network: BrowserNetwork, nodeSuite: String, received: Int = 100) throws {
        let last = try #require(network.stats.last, "the page reported no statistics")
        print("browser stats: \(last)")
        #expect((last["packetsReceived"] as? Int ?? 0) >= received, "the browser received too few packets: \(last)")
        #expect((last["totalAudioEnergy"] as? Double ?? 0) > 0.001, "the browser heard no energy: \(last)")
        #expect((last["packetsSent"] as? Int ?? 0) >= 100)
        // The transport while the call ran (a node's hang-up closes DTLS before the last figures).
        let connected = try #require(network.stats.last { $0["dtlsState"] as? String == "connected" }, "DTLS never connected in the browser")
        // Both ends name the same SRTP profile (each in its own words).
        let browserName = ["AES_CM_128_HMAC_SHA1_80": "SRTP_AES128_CM_HMAC_SHA1_80", "AEAD_AES_128_GCM": "SRTP_AEAD_AES_128_GCM"][nodeSuite]
        #expect(browserName != nil && connected["srtpCipher"] as? String == browserName, "node \(nodeSuite), browser \(connected["srtpCipher"] ?? "none")")
        #expect(last["codec"] as? String == "audio/opus")
    }

    @Test func aBrowserCallsTheNodeOverDTLSSRTPAndEachHearsTheOther() async throws {
        let network = try BrowserNetwork("calls")
        defer { network.teardown() }
        let browserSpeech = try Self.speech(network.directory + "/browser-in.wav", seed: 21)
        let nodeSpeech = try Self.speech(network.directory + "/node-in.wav", seed: 22)
        let recording = network.directory + "/node-out.wav"
        let (node, web) = try await Self.node(network, speech: nodeSpeech, recording: recording)
        let events = node.events()
        try network.open("http://\(web)/#secret=\(Self.secret)&call=1&stats=1&raw=1&hangup=7&name=chromium", microphone: browserSpeech)

        guard case let .incoming(call, from, name, _) = try await network.incoming(events) else { return }
        #expect(from == WebSignalingServer.pagePeer && name == "chromium")
        guard case let .secured(_, security) = try await TwoNodeTests.next(events, where: { if case .secured(call, _) = $0 { true } else { false } })
        else { return }
        // The node (the callee) offered actpass, the browser answered active: the node is the
        // DTLS server and picks its first choice, AES-GCM.
        #expect(security.keyExchange == .dtls && security.handshake != nil && security.suite == "AEAD_AES_128_GCM")
        print("node: \(security)")
        // Frames are encrypted end to end with the page too, and the page shows the node's code.
        #expect(security.frameEncryption)
        let code = try #require(security.securityCode)
        try await network.waitForConsole("callnode-security")
        #expect(network.console.contains { $0.contains("callnode-security") && $0.contains(code) && $0.contains("true") },
                "node code \(code); page: \(network.console.filter { $0.contains("callnode-security") })")
        // The page hangs up after 7 s connected.
        guard case let .ended(_, reason, detail, duration) = try await TwoNodeTests.next(events, within: .seconds(30), where: {
            if case .ended(call, _, _, _) = $0 { true } else { false }
        }) else { return }
        #expect(reason == .remoteEnded, "ended: \(reason) \(detail ?? "")")
        #expect((duration ?? .zero) > .seconds(5))
        try await network.waitForConsole("state Call hung up")
        network.closeBrowser()
        try Self.checkBrowserHeard(network, nodeSuite: security.suite)
        #expect(network.pageErrors.isEmpty, "the page had JavaScript errors: \(network.pageErrors)")
        let pageStats = try #require(network.stats.last)
        #expect(pageStats["frameEncryption"] as? Bool == true && pageStats["frameDecryptionFailures"] as? Int == 0, "\(pageStats)")

        // The node's recording holds what the browser's microphone played.
        let sent = try WAV.read(path: browserSpeech).samples, heard = try WAV.read(path: recording).samples
        let correlation = AudioAlignment.piecewise(sent: sent, received: heard, from: 48_000, to: 48_000 * 6)
        print("browser → node: recording correlates \(String(format: "%.2f", correlation)) with the browser's input")
        #expect(correlation >= 0.6, "the node's recording does not hold the browser's speech (\(correlation))")
        await node.shutdown()
    }

    /// A node whose frame key for the page's frames is wrong hears nothing (each frame counted as
    /// a failure) while the page, whose key for the node's frames is right, still hears the node.
    @Test func aNodeWithAWrongFrameKeyHearsNothingFromThePage() async throws {
        let network = try BrowserNetwork("wrongkey")
        defer { network.teardown() }
        let browserSpeech = try Self.speech(network.directory + "/browser-in.wav", seed: 25)
        let nodeSpeech = try Self.speech(network.directory + "/node-in.wav", seed: 26)
        let recording = network.directory + "/node-out.wav"
        let (node, web) = try await Self.node(network, speech: nodeSpeech, recording: recording) { configuration in
            configuration.frameKeyAdjustment = { keys in FrameKeys(outbound: keys.outbound, inbound: .random()) }
        }
        let events = node.events()
        try network.open("http://\(web)/#secret=\(Self.secret)&call=1&stats=1&raw=1&hangup=5&name=wrong", microphone: browserSpeech)
        guard case let .incoming(call, _, _, _) = try await network.incoming(events) else { return }
        guard case let .statistics(_, heard) = try await TwoNodeTests.next(events, within: .seconds(30), where: {
            if case let .statistics(call2, s) = $0 { call2 == call && s.packetsReceived > 100 } else { false }
        }) else { return }
        #expect(heard.frameDecryptionFailures >= 100, "\(heard.frameDecryptionFailures) failures")
        #expect(heard.receiveLevel < -60, "the node heard the page: \(heard.receiveLevel) dB")
        _ = try await TwoNodeTests.next(events, within: .seconds(30)) { if case .ended(call, _, _, _) = $0 { true } else { false } }
        try await network.waitForConsole("state Call hung up")
        network.closeBrowser()
        let pageStats = try #require(network.stats.last)
        #expect(pageStats["frameDecryptionFailures"] as? Int == 0 && (pageStats["totalAudioEnergy"] as? Double ?? 0) > 0.001, "\(pageStats)")
        await node.shutdown()
    }

    /// The page over HTTPS with the node's identity certificate (what a browser on another
    /// machine needs for its microphone): it loads, calls, and both sides hear each other.
    @Test func aBrowserCallsTheNodeOverHTTPS() async throws {
        let network = try BrowserNetwork("https")
        defer { network.teardown() }
        let browserSpeech = try Self.speech(network.directory + "/browser-in.wav", seed: 23)
        let nodeSpeech = try Self.speech(network.directory + "/node-in.wav", seed: 24)
        let recording = network.directory + "/node-out.wav"
        let (node, web) = try await Self.node(network, speech: nodeSpeech, recording: recording, https: true)
        let events = node.events()
        try network.open("https://\(web)/#secret=\(Self.secret)&call=1&stats=1&raw=1&hangup=5&name=secure", microphone: browserSpeech)
        guard case let .incoming(call, _, name, _) = try await network.incoming(events) else { return }
        #expect(name == "secure")
        guard case let .secured(_, security) = try await TwoNodeTests.next(events, where: { if case .secured(call, _) = $0 { true } else { false } })
        else { return }
        guard case let .ended(_, reason, detail, _) = try await TwoNodeTests.next(events, within: .seconds(30), where: {
            if case .ended(call, _, _, _) = $0 { true } else { false }
        }) else { return }
        #expect(reason == .remoteEnded, "ended: \(reason) \(detail ?? "")")
        try await network.waitForConsole("state Call hung up")
        network.closeBrowser()
        try Self.checkBrowserHeard(network, nodeSuite: security.suite, received: 60)
        #expect(network.pageErrors.isEmpty, "the page had JavaScript errors: \(network.pageErrors)")
        let sent = try WAV.read(path: browserSpeech).samples, heard = try WAV.read(path: recording).samples
        let correlation = AudioAlignment.piecewise(sent: sent, received: heard, from: 48_000, to: 48_000 * 4)
        #expect(correlation >= 0.6, "the node's recording does not hold the browser's speech (\(correlation))")
        await node.shutdown()
    }

    /// Chromium as people run it (mDNS hiding left on; a page holding the microphone gets
    /// real addresses anyway, so `.local` names are tested in DTLSCallTests).
    @Test func theNodeRingsThePageWhichAnswersAndTheNodeHangsUp() async throws {
        let network = try BrowserNetwork("rings")
        defer { network.teardown() }
        let browserSpeech = try Self.speech(network.directory + "/browser-in.wav", seed: 31)
        let nodeSpeech = try Self.speech(network.directory + "/node-in.wav", seed: 32)
        let recording = network.directory + "/node-out.wav"
        let (node, web) = try await Self.node(network, speech: nodeSpeech, recording: recording)
        let events = node.events()
        await #expect(throws: CallNodeError.noWebPage) { try await node.call(.webPage) }
        try network.open("http://\(web)/#secret=\(Self.secret)&answer=1&stats=1&raw=1", microphone: browserSpeech, hideAddresses: true)
        _ = try await TwoNodeTests.next(events, within: .seconds(30)) { if case .webPage(connected: true, _) = $0 { true } else { false } }

        let call = try await node.call(.webPage)
        _ = try await TwoNodeTests.next(events) { $0 == .ringing(call, callee: WebSignalingServer.pagePeer) }
        guard case let .secured(_, security) = try await TwoNodeTests.next(events, where: { if case .secured(call, _) = $0 { true } else { false } })
        else { return }
        // Here the page offered: the node answered active and the browser, as DTLS server, chose.
        #expect(security.keyExchange == .dtls)
        print("node: \(security)")
        // Audio from the browser reaches the node with a level.
        _ = try await TwoNodeTests.next(events) {
            if case let .statistics(call2, s) = $0 { call2 == call && s.packetsReceived >= 150 && s.receiveLevel > -40 } else { false }
        }
        // Hold as RFC 3264 says, offered by the node (the answerer of this call) to the page:
        // the page shows it, and its browser stops sending; resume brings its audio back.
        try await node.setHeld(call, true)
        try await network.waitForConsole("The node put the call on hold")
        try await Task.sleep(for: .milliseconds(500))  // what was on the wire before the answer
        let beforeHold = try #require(await node.statistics(call)).packetsReceived
        try await Task.sleep(for: .seconds(2))
        let duringHold = try #require(await node.statistics(call)).packetsReceived - beforeHold
        #expect(duringHold <= 5, "the browser sent \(duringHold) packets in 2 s of hold")
        try await node.setHeld(call, false)
        try await network.waitForConsole("The node resumed the call")
        _ = try await TwoNodeTests.next(events) {
            if case let .statistics(call2, s) = $0 { call2 == call && s.packetsReceived >= beforeHold + duringHold + 50 && s.receiveLevel > -40 } else { false }
        }
        try await node.hangUp(call)
        try await network.waitForConsole("state Call ended by the node")
        network.closeBrowser()
        // What the page heard after the resume (about a second).
        try Self.checkBrowserHeard(network, nodeSuite: security.suite, received: 40)
        #expect(network.pageErrors.isEmpty, "the page had JavaScript errors: \(network.pageErrors)")
        await node.shutdown()
    }
}
}
