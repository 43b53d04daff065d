import CallNode
import CallNodeTestSupport
import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A node and a real SIP softphone, baresip (Debian's `baresip-core`), on this machine: plain
/// SIP over UDP, no ICE (baresip's ice module refuses loopback), SRTP keyed by SDES (its
/// `srtp-mand`: RTP/SAVP with `a=crypto`) or plain RTP, Opus or G.711 (µ-law, A-law). Each side
/// plays a tone and what each heard is checked by frequency: the node records the call, baresip
/// dumps what it decoded (`sndfile`).
extension RealTimeTests {
@Suite(.serialized, .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/baresip"), "needs baresip (scripts/bootstrap installs it)"))
struct SIPInteropTests {
    typealias Fixture = TwoNodeTests.Fixture

    /// A baresip configuration in `directory`: listening on 127.0.0.1:`port`, auto-answering with
    /// `codec` only, playing a 550 Hz tone, dumping what it decodes into `directory/snd`. The account module
    /// comes after the codecs and SRTP it names; no stdio module (its stdin is not a terminal).
    /// With `stun` (HOST:PORT), baresip speaks ICE (its `ice` module, STUN from there, RTP and
    /// RTCP muxed) on `host`, an address of a test bed's namespace.
    /// `srtpModules` false: baresip's default modules only (no `srtp`, no `dtls_srtp`), as a
    /// newcomer's softphone has them. `console`: a UDP port on loopback where its `cons` module
    /// takes commands (``baresipCommand(_:port:)``), as typed at its prompt. `account`: its
    /// account line (a registration, its NAT handling) in place of the unregistered one, `codec`
    /// added.
    static func baresip(in directory: String, host: String = "127.0.0.1", port: Int, mediaEncryption: String = "srtp-mand",
                        codec: String = "opus/48000/2", stun: String? = nil, srtpModules: Bool = true, console: Int? = nil,
                        tone: Double = 550, account: String? = nil) throws {
        try FileManager.default.createDirectory(atPath: directory + "/snd", withIntermediateDirectories: true)
        // A certificate of its own for its TLS listener (port + 1), so requests over TLS reach it.
        let made = try ChildProcess.run("/usr/bin/openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                                                             "-nodes", "-keyout", directory + "/key.pem", "-out", directory + "/cert.pem",
                                                             "-days", "2", "-subj", "/CN=baresip"], output: directory + "/openssl.log")
        guard made == 0 else { throw TestFailure("openssl could not make baresip's certificate") }
        let pem = try String(contentsOfFile: directory + "/key.pem", encoding: .utf8) + String(contentsOfFile: directory + "/cert.pem", encoding: .utf8)
        try pem.write(toFile: directory + "/baresip.pem", atomically: true, encoding: .utf8)
        // Its media ports below the range servers in the suite are handed (``FreePort``): left
        // to itself it picks from 1024–49152 and can take a port just handed to a node.
        let ice = stun == nil ? "" : "module stun.so\nmodule ice.so\nrtcp_mux yes\n"
        let config = """
            sip_listen \(host):\(port)
            rtp_ports 10000-19998
            sip_certificate \(directory)/baresip.pem
            sip_verify_server no
            module_path /usr/lib/baresip/modules
            module menu.so
            module opus.so
            module g711.so
            module aufile.so
            \(srtpModules ? "module srtp.so\nmodule dtls_srtp.so\n" : "")\(ice)\(console.map { "module cons.so\ncons_listen 127.0.0.1:\($0)\n" } ?? "")module sndfile.so
            module account.so
            audio_source aufile,\(directory)/tone.wav
            audio_player aufile,\(directory)/played.wav
            snd_path \(directory)/snd
            """
        try config.write(toFile: directory + "/config", atomically: true, encoding: .utf8)
        let encryption = mediaEncryption.isEmpty ? "" : ";mediaenc=\(mediaEncryption)"
        let nat = stun.map { ";medianat=ice;stunserver=stun:\($0)" } ?? ""
        let account = (account.map { $0 + ";audio_codecs=\(codec)" } ?? "<sip:b@\(host):\(port)>;regint=0;answermode=auto\(encryption)\(nat);audio_codecs=\(codec)") + "\n"
        try account.write(toFile: directory + "/accounts", atomically: true, encoding: .utf8)
        // aufile takes the codec's own rate and channels: opus/48000/2's two, G.711's one at 8 kHz.
        let seconds = 12, rate = codec.hasPrefix("opus") ? 48_000 : 8_000, channels = codec.hasPrefix("opus") ? 2 : 1
        var samples: [Int16] = []
        samples.reserveCapacity(seconds * rate * channels)
        for i in 0..<(seconds * rate) {
            let value = Int16(8_000 * sin(2 * Double.pi * tone * Double(i) / Double(rate)))
            for _ in 0..<channels { samples.append(value) }
        }
        try WAV.write(samples, format: AudioFormat(sampleRate: rate, channels: channels), path: directory + "/tone.wav")
    }

    /// Types `command` at baresip's prompt through its `cons` module (a UDP datagram).
    static func baresipCommand(_ command: String, port: Int) {
        SIPProbe.send(command + "\n", port: port)
    }

    /// What baresip decoded (its `sndfile` dump, at the codec's rate), one channel.
    static func baresipHeard(in directory: String) throws -> (samples: [Int16], rate: Int) {
        let files = try FileManager.default.contentsOfDirectory(atPath: directory + "/snd").filter { $0.hasSuffix("-dec.wav") }
        let file = try #require(files.first, "baresip dumped nothing it decoded")
        let (format, samples) = try WAV.read(path: directory + "/snd/" + file)
        return (format.channels == 2 ? stride(from: 0, to: samples.count, by: 2).map { samples[$0] } : samples, format.sampleRate)
    }

    /// The second second of `samples` holds `frequency` far more than `other`.
    static func holds(_ samples: [Int16], _ frequency: Double, over other: Double, rate: Int = 48_000) -> Bool {
        guard samples.count > 2 * rate else { return false }
        let middle = samples[rate..<(2 * rate)]
        return Goertzel.power(of: frequency, in: middle, rate: Double(rate)) > 20 * Goertzel.power(of: other, in: middle, rate: Double(rate))
    }

    static func holds(_ heard: (samples: [Int16], rate: Int), _ frequency: Double, over other: Double) -> Bool {
        holds(heard.samples, frequency, over: other, rate: heard.rate)
    }

    /// baresip's codec name and the node's encoding for it.
    static let codecs: [String: AudioEncoding] = ["opus/48000/2": .opus, "PCMU/8000": .pcmu, "PCMA/8000": .pcma]

    /// baresip's SRTP (`srtp-mand`: RTP/SAVP with SDES keys) or none (RTP/AVP, which the node
    /// takes by default and says so), with Opus or G.711 (the only codec baresip offers); over
    /// UDP, or over TLS to the node's TLS port (the SDES keys inside the TLS).
    @Test(arguments: [("srtp-mand", "opus/48000/2", false), ("", "opus/48000/2", false), ("", "PCMU/8000", false),
                      ("srtp-mand", "PCMA/8000", false), ("srtp-mand", "opus/48000/2", true), ("srtp-mand", "PCMU/8000", true),
                      ("dtls_srtp", "opus/48000/2", false), ("dtls_srtp", "PCMU/8000", false)])
    func baresipCallsTheNodeAndEachHearsTheOther(baresipEncryption: String, codec: String, tls: Bool) async throws {
        let f = try Fixture()
        let phone = f.path("baresip"), phonePort = FreePort.udpAndTCPWithTLSNext()
        try Self.baresip(in: phone, port: phonePort, mediaEncryption: baresipEncryption, codec: codec)
        let node = try await f.node("bob", input: .tone(660), output: .wav(f.path("bob-out.wav")), keyExchange: .sdes)
        var settings = SIPListenSettings(host: "127.0.0.1", port: SIPCallTests.freePort(), user: "bob")
        if tls { settings.tlsPort = SIPCallTests.freePort() }
        let plainURI = try await node.listenSIP(settings)
        let uri = tls ? try #require(settings.tlsURI) : plainURI
        let events = node.events()
        let baresip = try ChildProcess("/usr/bin/baresip", ["-f", phone, "-4", "-e", "/dial \(uri)", "-t", "12"], output: f.path("baresip.log"),
                                       nullStdin: true)
        defer { baresip.stop() }
        guard case let .incoming(call, _, _, _) = try await TwoNodeTests.next(events, where: { if case .incoming = $0 { true } else { false } })
        else { return }
        #expect(node.handle(of: call) == "sip:b@127.0.0.1:\(phonePort)")
        guard case let .secured(_, security) = try await TwoNodeTests.next(events, where: { if case .secured(call, _) = $0 { true } else { false } })
        else { return }
        #expect(security.unencrypted == baresipEncryption.isEmpty, "\(security)")
        if !security.unencrypted { #expect(security.keyExchange == (baresipEncryption.hasPrefix("dtls") ? .dtls : .sdes), "\(security)") }
        let heard = try await SIPCallTests.hearing(events, beyond: 100)
        #expect(heard.packetsLost == 0)
        #expect(heard.encoding == Self.codecs[codec])
        if heard.encoding != .opus { #expect(heard.bytesReceived == heard.packetsReceived * 160, "G.711: 160 bytes a packet") }
        try await node.hangUp(call)
        _ = try await TwoNodeTests.next(events) { if case .ended(call, .localEnded, _, _) = $0 { true } else { false } }
        await node.shutdown()
        // baresip ends too when the BYE reaches it, and has dumped what it decoded.
        baresip.stop()
        #expect(Self.holds(try WAV.read(path: f.path("bob-out.wav")).samples, 550, over: 660), "the node did not hear baresip's 550 Hz")
        #expect(Self.holds(try Self.baresipHeard(in: phone), 660, over: 550), "baresip did not hear the node's 660 Hz")
    }

    @Test func aNodeThatRequiresSRTPRefusesBaresipsPlainRTPWith488() async throws {
        let f = try Fixture()
        let phone = f.path("baresip"), phonePort = FreePort.udpAndTCPWithTLSNext()
        try Self.baresip(in: phone, port: phonePort, mediaEncryption: "")
        let node = try await f.node("bob", input: .tone(660), keyExchange: .sdes)
        let uri = try await node.listenSIP(SIPListenSettings(host: "127.0.0.1", port: SIPCallTests.freePort(), user: "bob",
                                                             mediaEncryption: .required))
        let events = node.events()
        let baresip = try ChildProcess("/usr/bin/baresip", ["-f", phone, "-4", "-e", "/dial \(uri)", "-t", "5"], output: f.path("baresip.log"),
                                       nullStdin: true)
        defer { baresip.stop() }
        guard case let .ended(_, reason, detail, _) = try await TwoNodeTests.next(events, where: { if case .ended = $0 { true } else { false } })
        else { return }
        #expect(reason == .failed)
        #expect(detail?.contains("requires SRTP") == true, "\(detail ?? "-")")
        _ = await baresip.wait()
        let log = (try? String(contentsOfFile: f.path("baresip.log"), encoding: .utf8)) ?? ""
        #expect(log.contains("488"), "baresip was not told 488: \(log.suffix(300))")
        await node.shutdown()
    }

    /// A newcomer's first SIP call: `callnode call sip:b@HOST:PORT --input …` and nothing else
    /// to baresip with its default modules (no SRTP). The node picks its own SIP port on the
    /// address that routes there and says so; baresip refuses the SRTP offer (488) and the node
    /// offers again in plain RTP; the call connects and says, on the terminal or in `--json`,
    /// that its media is not encrypted; each side hears the other's tone.
    @Test(arguments: [("opus/48000/2", false), ("PCMU/8000", true)])
    func aNewcomersCallToAPlainSoftphoneConnectsWithTheDefaults(codec: String, json: Bool) async throws {
        let f = try Fixture()
        let phone = f.path("baresip"), phonePort = FreePort.udpAndTCPWithTLSNext()
        try Self.baresip(in: phone, port: phonePort, mediaEncryption: "", codec: codec, srtpModules: false)
        let baresipLog = f.path("baresip.log")
        let baresip = try ChildProcess("/usr/bin/baresip", ["-f", phone, "-4", "-t", "20"], output: baresipLog,
                                       nullStdin: true)
        defer { baresip.stop() }
        _ = try await CommandLineTests.waitForLine(in: baresipLog, process: baresip) { $0.contains("baresip is ready") }
        let log = f.path("call.log")
        let arguments = ["call", "sip:b@127.0.0.1:\(phonePort)", "--home", f.path("alice"), "--input", "tone:660",
                         "--output", "wav:" + f.path("alice-out.wav"), "--duration", "4"] + (json ? ["--json"] : [])
        let node = try ChildProcess(try BuildProducts.executable("callnode"), arguments, output: log)
        defer { node.stop() }
        let status = await node.wait()
        baresip.stop()
        let output = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(status == 0, "\(output)")
        if json {
            let events = CommandLineTests.jsonLines(output)
            let sip = events.first { $0["event"] as? String == "sip" }
            #expect((sip?["uri"] as? String)?.hasPrefix("sip:callnode@127.0.0.1:") == true && sip?["ephemeral"] as? Bool == true, "\(output)")
            let secured = events.first { $0["event"] as? String == "secured" }
            #expect(secured?["encrypted"] as? Bool == false, "\(output)")
        } else {
            #expect(output.contains("SIP: sip:callnode@127.0.0.1:") && output.contains("a port picked on the address that routes to the peer"), "\(output)")
            #expect(output.contains("NOT encrypted: plain RTP"), "\(output)")
        }
        let baresipSaw = (try? String(contentsOfFile: baresipLog, encoding: .utf8)) ?? ""
        #expect(Self.holds(try WAV.read(path: f.path("alice-out.wav")).samples, 550, over: 660), "the node did not hear baresip's 550 Hz")
        #expect(Self.holds(try Self.baresipHeard(in: phone), 660, over: 550), "baresip did not hear the node's 660 Hz: \(baresipSaw.suffix(400))")
    }

    /// A call that went plain because baresip takes no SRTP (488 to the encrypted offer, then
    /// the plain one) holds and resumes as any call: the hold's re-INVITE stays plain RTP, so
    /// baresip takes it and stops sending while held, and sends again once resumed. (Its later
    /// offers were RTP/SAVP without keys, which baresip cannot take: the hold never reached it.)
    @Test func aCallThatWentPlainForBaresipHoldsAndResumes() async throws {
        let f = try Fixture()
        let phone = f.path("baresip"), phonePort = FreePort.udpAndTCPWithTLSNext()
        try Self.baresip(in: phone, port: phonePort, mediaEncryption: "", srtpModules: false)
        let baresip = try ChildProcess("/usr/bin/baresip", ["-f", phone, "-4", "-t", "20"], output: f.path("baresip.log"), nullStdin: true)
        defer { baresip.stop() }
        _ = try await CommandLineTests.waitForLine(in: f.path("baresip.log"), process: baresip) { $0.contains("baresip is ready") }
        let node = try await f.node("alice", input: .tone(660), output: .null)
        _ = try await node.listenSIP(SIPListenSettings(host: "127.0.0.1", port: SIPCallTests.freePort(), user: "alice"))
        let events = node.events(), security = node.events()
        let call = try await node.call(.sip("sip:b@127.0.0.1:\(phonePort)"))
        _ = try await TwoNodeTests.next(events) { if case .connected(call, _) = $0 { true } else { false } }
        guard case let .secured(_, secured) = try await TwoNodeTests.next(security, where: { if case .secured(call, _) = $0 { true } else { false } })
        else { return }
        #expect(secured.unencrypted, "\(secured)")
        _ = try await SIPCallTests.hearing(events, beyond: 50)

        /// Packets from baresip in `seconds` of the call.
        func arriving(for seconds: Int) async throws -> Int {
            let before = try #require(await node.statistics(call), "the call ended").packetsReceived
            try await Task.sleep(for: .seconds(seconds))
            return try #require(await node.statistics(call), "the call ended").packetsReceived - before
        }
        try await node.setHeld(call, true)
        try await Task.sleep(for: .milliseconds(500))  // the re-INVITE and its answer
        let held = try await arriving(for: 1)
        try await node.setHeld(call, false)
        try await Task.sleep(for: .milliseconds(500))
        let resumed = try await arriving(for: 1)
        #expect(held < 5, "baresip kept sending while held: \(held) packets in a second (it never took the hold)")
        #expect(resumed > 40, "baresip did not send again after the resume: \(resumed) packets in a second")
        #expect(await node.liveCalls == [call])
        try await node.hangUp(call)
        await node.shutdown()
    }

    /// The node offers SRTP keyed by SDES, or (`--sip-media-encryption off`) plain RTP; Opus,
    /// µ-law and A-law, and baresip answers with the one it speaks; over UDP, or over TLS to
    /// baresip's TLS port (its own port + 1).
    /// With the node's key exchange DTLS, it offers DTLS-SRTP (UDP/TLS/RTP/SAVP) and baresip's
    /// `dtls_srtp` answers.
    @Test(arguments: [(MediaEncryption.preferred, "opus/48000/2", false, KeyExchange.sdes), (.off, "opus/48000/2", false, .sdes),
                      (.off, "PCMU/8000", false, .sdes), (.preferred, "PCMA/8000", false, .sdes), (.preferred, "opus/48000/2", true, .sdes),
                      (.preferred, "opus/48000/2", false, .dtls), (.required, "PCMA/8000", false, .dtls)])
    func theNodeCallsBaresipAndEachHearsTheOther(encryption: MediaEncryption, codec: String, tls: Bool, keyExchange: KeyExchange) async throws {
        let f = try Fixture()
        let phone = f.path("baresip"), phonePort = FreePort.udpAndTCPWithTLSNext()
        let baresipEncryption = encryption == .off ? "" : keyExchange == .dtls ? "dtls_srtp" : "srtp-mand"
        try Self.baresip(in: phone, port: phonePort, mediaEncryption: baresipEncryption, codec: codec)
        // baresip quits on its own after `-t` seconds: long enough for a loaded host, where its start
        // and the first INVITEs can take seconds (at 15 s a loaded run saw it quit mid-call).
        let baresip = try ChildProcess("/usr/bin/baresip", ["-f", phone, "-4", "-t", "60"], output: f.path("baresip.log"),
                                       nullStdin: true)
        defer { baresip.stop() }
        // On a loaded host baresip's start takes seconds: wait for it to say it listens, then
        // retry what still finds nothing there (its transports may open just after the line).
        _ = try await CommandLineTests.waitForLine(in: f.path("baresip.log"), process: baresip) { $0.contains("baresip is ready") }
        let node = try await f.node("alice", input: .tone(660), output: .wav(f.path("alice-out.wav")), keyExchange: keyExchange)
        var settings = SIPListenSettings(host: "127.0.0.1", port: SIPCallTests.freePort(), user: "alice", mediaEncryption: encryption)
        if tls { settings.tlsPort = SIPCallTests.freePort() }
        _ = try await node.listenSIP(settings)
        let target = tls ? "sip:b@127.0.0.1:\(phonePort + 1);transport=tls" : "sip:b@127.0.0.1:\(phonePort)"
        let events = node.events(), security = node.events()
        // baresip takes a moment to listen: the first INVITE may find nothing there yet.
        var call: UUID?, endings: [String] = []
        for _ in 0..<20 where call == nil {
            let attempt = try await node.call(.sip(target))
            let outcome = try await TwoNodeTests.next(events) {
                switch $0 {
                case .connected(attempt, _), .ended(attempt, _, _, _): true
                default: false
                }
            }
            if case .connected = outcome { call = attempt; break }
            if case let .ended(_, reason, _, _) = outcome { endings.append("\(reason)") }
            try await Task.sleep(for: .milliseconds(250))
        }
        guard let connected = call else {
            let log = (try? String(contentsOfFile: f.path("baresip.log"), encoding: .utf8))?.split(separator: "\n").suffix(15) ?? []
            throw TestFailure("baresip never answered: \(Set(endings).sorted()); baresip \(baresip.isRunning ? "runs" : "has exited"); its log ends:\n"
                              + log.joined(separator: "\n"))
        }
        guard case let .secured(_, secured) = try await TwoNodeTests.next(security, where: { if case .secured(connected, _) = $0 { true } else { false } })
        else { return }
        #expect(secured.unencrypted == (encryption == .off), "\(secured)")
        if !secured.unencrypted { #expect(secured.keyExchange == keyExchange, "\(secured)") }
        let heard: MediaStatistics
        do {
            heard = try await SIPCallTests.hearing(events, beyond: 100)
        } catch {
            let log = (try? String(contentsOfFile: f.path("baresip.log"), encoding: .utf8))?.split(separator: "\n").suffix(15) ?? []
            throw TestFailure("\(error); baresip \(baresip.isRunning ? "runs" : "has exited"); its log ends:\n" + log.joined(separator: "\n"))
        }
        #expect(heard.packetsLost == 0)
        #expect(heard.encoding == Self.codecs[codec])
        try await node.hangUp(connected)
        _ = try await TwoNodeTests.next(events) { if case .ended(connected, .localEnded, _, _) = $0 { true } else { false } }
        await node.shutdown()
        baresip.stop()
        #expect(Self.holds(try WAV.read(path: f.path("alice-out.wav")).samples, 550, over: 660), "the node did not hear baresip's 550 Hz")
        #expect(Self.holds(try Self.baresipHeard(in: phone), 660, over: 550), "baresip did not hear the node's 660 Hz")
    }
}
}
