import CallCore
import Foundation
import ICE
import Media
import RTP
import SDP
import Signaling

extension FuzzTarget {
    /// Starting inputs, written by the node's own writers, so that the fuzzer begins from
    /// what the network really carries. `callnode-fuzz --write-seeds DIR` saves them as
    /// `DIR/<target>/<name>`; the repository keeps them in `Fuzz/corpus`.
    public var seeds: [(name: String, bytes: [UInt8])] {
        switch self {
        case .sdp: Self.sdpSeeds
        case .signaling: Self.signalingSeeds
        case .rtp: Self.rtpSeeds
        case .rtcp: Self.rtcpSeeds
        case .srtp: Self.srtpSeeds
        case .candidate: Self.candidateSeeds
        case .sip: Self.sipSeeds
        }
    }

    /// A SIP request as phones send them (CRLF lines, Content-Length of the body).
    static func sipRequest(_ method: String, _ uri: String, extra: [String] = [], body: String = "", type: String = "application/sdp") -> [UInt8] {
        var lines = [
            "\(method) \(uri) SIP/2.0",
            "Via: SIP/2.0/UDP 192.0.2.5:5060;rport;branch=z9hG4bK-seed-\(method.lowercased())",
            "Max-Forwards: 70",
            "From: \"Carol\" <sip:carol@example.org>;tag=seed1",
            "To: <\(uri)>",
            "Call-ID: seed-\(method.lowercased())@192.0.2.5",
            "CSeq: 1 \(method)",
            "Contact: <sip:carol@192.0.2.5:5060>",
        ] + extra
        if !body.isEmpty { lines.append("Content-Type: \(type)") }
        lines.append("Content-Length: \(body.utf8.count)")
        return Array((lines.joined(separator: "\r\n") + "\r\n\r\n" + body).utf8)
    }

    static var sipSeeds: [(name: String, bytes: [UInt8])] {
        let phone = [
            "v=0", "o=carol 1 1 IN IP4 192.0.2.5", "s=-", "c=IN IP4 192.0.2.5", "t=0 0",
            "m=audio 40000 RTP/AVP 0 8 101", "a=rtpmap:101 telephone-event/8000", "a=fmtp:101 0-16", "a=ptime:20", "a=sendrecv", "",
        ].joined(separator: "\r\n")
        let sdes = [
            "v=0", "o=carol 2 2 IN IP4 192.0.2.5", "s=-", "c=IN IP4 192.0.2.5", "t=0 0",
            "m=audio 40002 RTP/SAVP 96 0", "a=rtpmap:96 opus/48000/2", "a=fmtp:96 useinbandfec=1",
            "a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:\(String(repeating: "A", count: 40))", "a=rtcp:40003", "a=sendrecv", "",
        ].joined(separator: "\r\n")
        let uri = "sip:alice@192.0.2.9:5070"
        return [
            ("invite-g711", sipRequest("INVITE", uri, extra: ["Allow: INVITE, ACK, BYE, CANCEL, OPTIONS, INFO"], body: phone)),
            ("invite-ice", sipRequest("INVITE", uri, body: offer.serialized)),
            ("invite-sdes", sipRequest("INVITE", uri, extra: ["Subject: seed", "User-Agent: seed/1.0"], body: sdes)),
            ("options", sipRequest("OPTIONS", uri, extra: ["Accept: application/sdp"])),
            ("register", sipRequest("REGISTER", "sip:example.org", extra: ["Expires: 3600",
                "Authorization: Digest username=\"carol\", realm=\"example.org\", nonce=\"abc\", uri=\"sip:example.org\", response=\"0123456789abcdef0123456789abcdef\""])),
            ("bye", sipRequest("BYE", uri, extra: ["Reason: SIP;cause=200;text=\"Call completed elsewhere\""])),
            ("info-dtmf", sipRequest("INFO", uri, body: "Signal=5\r\nDuration=160\r\n", type: "application/dtmf-relay")),
            // What transfer, session timers and reliable provisionals bring into a dialog.
            ("refer", sipRequest("REFER", uri, extra: ["Refer-To: <sip:dave@example.org?Replaces=abc%40host%3Bto-tag%3D1%3Bfrom-tag%3D2>",
                                                         "Referred-By: <sip:carol@example.org>"])),
            ("notify-sipfrag", sipRequest("NOTIFY", uri, extra: ["Event: refer;id=7", "Subscription-State: terminated;reason=noresource"],
                                          body: "SIP/2.0 200 OK\r\n", type: "message/sipfrag;version=2.0")),
            ("update-session-timer", sipRequest("UPDATE", uri, extra: ["Session-Expires: 90;refresher=uac", "Min-SE: 90",
                                                                        "Supported: timer, 100rel"], body: sdes)),
            ("prack", sipRequest("PRACK", uri, extra: ["RAck: 1 1 INVITE"])),
            ("invite-100rel-replaces", sipRequest("INVITE", uri, extra: ["Require: 100rel", "Supported: timer, replaces",
                                                                          "Session-Expires: 30", "Replaces: abc@host;to-tag=1;from-tag=2"], body: phone)),
        ]
    }

    static let candidateLines = [
        "candidate:1 1 UDP 2130706431 192.0.2.1 5000 typ host",
        "candidate:2 1 UDP 1694498815 203.0.113.7 61000 typ srflx raddr 192.0.2.1 rport 5000",
        "candidate:3 1 UDP 16777215 198.51.100.9 49152 typ relay raddr 203.0.113.7 rport 61000 generation 0",
        "candidate:4 1 TCP 1015021823 2001:db8::1 9 typ host tcptype active",
        "candidate:5 1 TCP 1010827519 192.0.2.1 7000 typ host tcptype passive network-id 1",
        "a=candidate:6 1 udp 2122260223 4f2a1b3c-0000-4000-8000-000000000000.local 53000 typ host",
    ]

    static var candidateSeeds: [(name: String, bytes: [UInt8])] {
        candidateLines.enumerated().map { ("candidate-\($0.offset)", Array($0.element.utf8)) }
    }

    static var offer: SessionDescription {
        let local = LocalAudioParameters(iceUfrag: "abcd", icePwd: "0123456789abcdefghijklmn",
                                         candidates: Array(candidateLines.prefix(3)), endOfCandidates: true, keys: keys)
        return OfferAnswer.offer(sessionID: "4611731400430051336", capabilities: AudioCapabilities(), local: local)
    }

    static var sdpSeeds: [(name: String, bytes: [UInt8])] {
        var seeds = [("offer", Array(offer.serialized.utf8))]
        let answerer = LocalAudioParameters(iceUfrag: "wxyz", icePwd: "zyxwvutsrqponmlkjihgfedc", keys: keys, direction: .recvonly)
        if let (answer, _) = try? OfferAnswer.answer(to: offer, sessionID: "99", capabilities: AudioCapabilities(), local: answerer) {
            seeds.append(("answer-recvonly", Array(answer.serialized.utf8)))
        }
        var plain = AudioCapabilities()
        plain.redundancyPayloadType = nil
        plain.telephoneEventPayloadType = nil
        plain.cryptoSuites = ["AEAD_AES_128_GCM"]
        let gcm = OfferAnswer.offer(sessionID: "7", capabilities: plain,
                                    local: LocalAudioParameters(iceUfrag: "efgh", icePwd: "abcdefghijklmnopqrstuvwx", keys: keys, direction: .sendonly))
        seeds.append(("offer-gcm-sendonly", Array(gcm.serialized.utf8)))
        // The WebRTC dialect: DTLS-SRTP with a fingerprint and a=setup, BUNDLE, msid and ssrc.
        var dtlsLocal = LocalAudioParameters(iceUfrag: "dtls", icePwd: "0123456789abcdefghijklmn",
                                             candidates: [candidateLines[0]], endOfCandidates: true, keys: [:],
                                             fingerprint: "sha-256 " + (0..<32).map { String(format: "%02X", $0 * 5 + 3) }.joined(separator: ":"))
        dtlsLocal.stream = LocalStream(streamID: "callnode", trackID: "audio", ssrc: 305_419_896, cname: "callnode")
        let dtlsOffer = OfferAnswer.offer(sessionID: "11", capabilities: AudioCapabilities(), local: dtlsLocal)
        seeds.append(("offer-dtls", Array(dtlsOffer.serialized.utf8)))
        dtlsLocal.iceUfrag = "slt2"
        if let (answer, _) = try? OfferAnswer.answer(to: dtlsOffer, sessionID: "12", capabilities: AudioCapabilities(), local: dtlsLocal) {
            seeds.append(("answer-dtls", Array(answer.serialized.utf8)))
        }
        return seeds
    }

    static func frame(_ body: [UInt8]) -> [UInt8] {
        let n = UInt32(body.count)
        return [UInt8(n >> 24), UInt8(n >> 16 & 0xFF), UInt8(n >> 8 & 0xFF), UInt8(n & 0xFF)] + body
    }

    static var signalingSeeds: [(name: String, bytes: [UInt8])] {
        let call = UUID(uuidString: "C9817D01-E286-4543-B305-987898240600")
        let messages: [(String, SignalMessage)] = [
            ("invite", .invite(Invitation(displayName: "alice", title: "standup", session: nil))),
            ("ringing", .ringing),
            ("offer", .offer(sdp: offer.serialized)),
            ("candidates", .candidates(Array(candidateLines.prefix(2)), end: true)),
            ("hold", .hold(true)),
            ("end", .end(HangupReason.allCases[0])),
            ("reject", .reject(RejectReason.allCases[0])),
            ("error", .error("cannot use the offer")),
            ("keep-alive", .keepAlive),
            ("resume", .resume(ResumeRequest(token: String(repeating: "5a", count: 32), received: 4))),
            ("resumed", .resumed(received: 7)),
            ("resume-refused", .resumeRefused("no call C9817D01-E286-4543-B305-987898240600 here: it has ended")),
        ]
        // Keys sorted, so that the files do not change from run to run.
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        func body(_ message: SignalMessage) -> [UInt8] {
            (try? encoder.encode(SignalEnvelope(call: call, message))).map { Array($0) } ?? []
        }
        // The first byte is the read size (see `signaling`): 0 gives one byte per read.
        var seeds = messages.map { name, message in (name, [UInt8(name.count % 64)] + frame(body(message))) }
        seeds.append(("two-frames", [63] + messages.prefix(2).flatMap { frame(body($0.1)) }))
        // A call's numbered message, acknowledging the peer's (as nodes send them).
        let numbered = (try? encoder.encode(SignalEnvelope(call: call, .ringing, seq: 2, ack: 1))).map { Array($0) } ?? []
        seeds.append(("numbered", [9] + frame(numbered)))
        for message in [RelayMessage(op: "register", fingerprint: String(repeating: "ab", count: 32)),
                        RelayMessage(op: "connected"), RelayMessage(op: "paired", session: "s1", role: "client")] {
            seeds.append(("relay-\(message.op)", [7] + frame((try? encoder.encode(message)).map { Array($0) } ?? [])))
        }
        return seeds
    }

    static var rtpSeeds: [(name: String, bytes: [UInt8])] {
        let opus: [UInt8] = [0x78, 0x0B, 0xE4, 0xC1, 0x36, 0xEC, 0xC5, 0x8D]
        let red = RedundantAudio(primaryPayloadType: 111, primary: opus,
                                 redundant: [.init(payloadType: 111, timestampOffset: 960, payload: Array(opus.reversed()))])
        let packets: [(String, RTPPacket)] = [
            ("opus", RTPPacket(payloadType: 111, sequenceNumber: 1, timestamp: 960, ssrc: 0x1234_5678, marker: true, payload: opus)),
            ("red", RTPPacket(payloadType: 63, sequenceNumber: 2, timestamp: 1920, ssrc: 0x1234_5678, payload: red.serialized())),
            ("event", RTPPacket(payloadType: 101, sequenceNumber: 3, timestamp: 2880, ssrc: 0x1234_5678,
                                payload: TelephoneEvent(event: 5, isEnd: true, duration: 1600).serialized())),
            ("extension-csrc-padding", RTPPacket(payloadType: 111, sequenceNumber: 65535, timestamp: 0, ssrc: 1, csrcs: [7, 8],
                                                 headerExtension: RTPHeaderExtension(profile: 0xBEDE, data: [0x10, 0xAA, 0, 0]),
                                                 payload: opus, paddingLength: 4)),
        ]
        return packets.map { ($0.0, $0.1.serialized()) }
    }

    static var rtcpSeeds: [(name: String, bytes: [UInt8])] {
        let block = ReportBlock(ssrc: 0x1234_5678, fractionLost: 25, cumulativeLost: -3, extendedHighestSequence: 70_000,
                                jitter: 480, lastSenderReport: 0xABCD_0000, delaySinceLastSenderReport: 6553)
        let compounds: [(String, [RTCPPacket])] = [
            ("sr-sdes", [.senderReport(SenderReport(ssrc: 1, ntpTimestamp: 0xE000_0000_8000_0000, rtpTimestamp: 96000,
                                                     packetCount: 100, octetCount: 8000, reports: [block])),
                         .sourceDescription([SDESChunk(ssrc: 1, cname: "alice@callnode")])]),
            ("rr-bye", [.receiverReport(ReceiverReport(ssrc: 2, reports: [block, block])), .bye(ssrcs: [2], reason: "hang-up")]),
            ("app", [.receiverReport(ReceiverReport(ssrc: 3)), .other(packetType: 204, bytes: [0x80, 204, 0, 2, 0, 0, 0, 3, 0x61, 0x62, 0x63, 0x64])]),
        ]
        return compounds.map { ($0.0, RTCPPacket.serializeCompound($0.1)) }
    }

    static var srtpSeeds: [(name: String, bytes: [UInt8])] {
        var seeds: [(name: String, bytes: [UInt8])] = []
        let plain = rtpSeeds[0].bytes, rtcp = rtcpSeeds[0].bytes
        for (index, suite) in SRTPSuite.allCases.enumerated() {
            let high = UInt8(index) << 7
            // Mode 0: a stranger's packet; a protected one, to start close to valid.
            if let sender = try? SRTPSession(key: fixedKey(suite), direction: .outbound), let wire = try? sender.protect(plain) {
                seeds.append(("\(suite.rawValue)-stranger", [high] + wire))
            }
            // Modes 1 and 2 (RTP, RTCP) untouched, and with bit 2 set, one bit flipped.
            seeds.append(("\(suite.rawValue)-rtp", [high | 1, 0, 5, 3] + plain))
            seeds.append(("\(suite.rawValue)-rtp-tampered", [high | 5, 0, 20, 6] + plain))
            seeds.append(("\(suite.rawValue)-rtcp", [high | 2, 0, 0, 0] + rtcp))
            seeds.append(("\(suite.rawValue)-rtcp-tampered", [high | 6, 0, 9, 1] + rtcp))
        }
        return seeds
    }
}
