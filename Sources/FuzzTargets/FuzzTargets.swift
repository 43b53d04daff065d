import Foundation
import ICE
import Media
import NIOCore
import NIOEmbedded
import RTP
import SDP
import SIP
import SIPDialog
@_spi(Fuzzing) import Signaling

/// The parsers a node runs on bytes from the network, each as a fuzz target: any input must
/// come back as a value or a typed error, never a trap, and what parses must survive its own
/// round trip. A broken round trip is reported with `preconditionFailure`, which the fuzzer
/// counts as a crash and saves.
///
/// `callnode-fuzz` drives these under libFuzzer; the test suite replays every seed and every
/// saved crash through them.
public enum FuzzTarget: String, CaseIterable, Sendable {
    /// Session descriptions, then an answer to them as an offer.
    case sdp
    /// The signaling byte stream: frames, then envelopes and relay control messages.
    case signaling
    /// RTP packets and the payloads inside them (RFC 2198 redundancy, RFC 4733 events).
    case rtp
    /// RTCP compound packets.
    case rtcp
    /// SRTP and SRTCP unprotect of arbitrary and of tampered packets.
    case srtp
    /// ICE candidate attributes.
    case candidate
    /// SIP requests as sofia-sip's parser reads them off the wire, then an INVITE's offer through
    /// what a SIP call negotiates (G.711 too, plain RTP, SRTP only preferred).
    case sip

    /// Runs one input. Returns normally for every input that is handled correctly.
    public func run(_ bytes: [UInt8]) {
        switch self {
        case .sdp: Self.sdp(bytes)
        case .signaling: Self.signaling(bytes)
        case .rtp: Self.rtp(bytes)
        case .rtcp: Self.rtcp(bytes)
        case .srtp: Self.srtp(bytes)
        case .candidate: Self.candidate(bytes)
        case .sip: Self.sip(bytes)
        }
    }

    // MARK: - SIP

    /// What a node's SIP calls may use (``SIPListenSettings``' defaults).
    static var sipCapabilities: AudioCapabilities {
        var capabilities = AudioCapabilities()
        capabilities.codecs = [.opus, .pcmu, .pcma]
        capabilities.mediaEncryption = .preferred
        capabilities.keyExchange = .sdes
        return capabilities
    }

    static func sip(_ bytes: [UInt8]) {
        guard let (method, event) = SIPAgent.parse(bytes) else { return }
        check(!method.isEmpty, "a request without a method")
        dialogs(take: method, event)
        guard method == "INVITE", let text = event.sdp, let offer = try? SessionDescription(parsing: text) else { return }
        // As a SIP call answers: without ICE, from a plain RTP port, when the offer has none.
        var local = LocalAudioParameters(iceUfrag: "fuzz", icePwd: "fuzzfuzzfuzzfuzzfuzzfuzz", keys: keys)
        if !offer.audioUsesICE { local.plainRTP = RTPEndpoint(address: "192.0.2.9", port: 41000) }
        let capabilities = sipCapabilities
        guard let (answer, negotiated) = try? OfferAnswer.answer(to: offer, sessionID: "1", capabilities: capabilities, local: local) else { return }
        check(capabilities.codecs.contains(negotiated.encoding), "a codec this node does not speak was agreed")
        check(negotiated.encoding == .opus || negotiated.redundancyPayloadType == nil, "redundancy agreed with G.711")
        do { _ = try SessionDescription(parsing: answer.serialized) } catch {
            preconditionFailure("this node's answer to a SIP offer does not parse: \(error)")
        }
    }

    /// The request as an event of a dialog in each of its phases: whatever it says, the call
    /// hears of its end at most once and nothing after it.
    static func dialogs(take method: String, _ event: SIPEvent) {
        let input: SIPDialogInput? = switch method {
        case "INVITE": .invite(sdp: event.sdp)
        case "ACK": .ack(sdp: event.sdp)
        case "BYE": .bye
        case "CANCEL": .cancel(reason: event.reason)
        case "INFO": .info(contentType: event.contentType, body: event.body)
        case "UPDATE": .update(sdp: event.sdp)
        case "REFER": .refer(target: event.body)
        case "NOTIFY": .notified(body: event.body)
        default: nil
        }
        guard let input else { return }
        let offer = "v=0\r\no=- 1 1 IN IP4 192.0.2.9\r\ns=-\r\nc=IN IP4 192.0.2.9\r\nt=0 0\r\nm=audio 41000 RTP/AVP 0\r\n"
        let incoming = SIPDialogState(outgoing: false)
        var confirmed = SIPDialogState(outgoing: true, uri: "sip:carol@192.0.2.5")
        _ = confirmed.handle(.call(.offer(sdp: offer)), now: .zero)
        _ = confirmed.handle(.call(.candidates([], end: true)), now: .zero)
        _ = confirmed.handle(.response(status: 200, phrase: "OK", sdp: offer), now: .zero)
        // The confirmed dialog has a transfer of its own out too: a NOTIFY may be its news.
        var transferring = confirmed
        _ = transferring.handle(.transfer(to: "sip:dave@192.0.2.6"), now: .zero)
        for var dialog in [incoming, confirmed, transferring] {
            var ends = 0, follows = 0, transferred = 0
            for step in [input, input, .bye, .terminated] {
                for action in dialog.handle(step, now: .zero) {
                    switch action {
                    case .deliver(.end), .deliver(.reject), .signalingLost: ends += 1
                    case .deliver: check(ends == 0, "a signal delivered after the call's end (\(method))")
                    case let .followTransfer(target, _):
                        follows += 1
                        check(target.lowercased().hasPrefix("sip"), "a transfer followed to what is not a SIP address: \(target)")
                    case .transferred: transferred += 1
                    default: break
                    }
                }
            }
            check(ends <= 1, "the call heard of its end \(ends) times (\(method))")
            check(follows <= 1, "a REFER followed \(follows) times while the first was (\(method))")
            check(transferred <= 1, "the call was transferred \(transferred) times (\(method))")
        }
    }

    static func check(_ condition: Bool, _ message: @autoclosure () -> String) {
        if !condition { preconditionFailure(message()) }
    }

    // MARK: - SDP

    /// Fixed keys, so that seeds and saved inputs replay the same way.
    static let keys = Dictionary(uniqueKeysWithValues: SRTPSuite.allCases.map { ($0.rawValue, fixedKey($0).inlineKeyParameter) })

    static func sdp(_ bytes: [UInt8]) {
        let text = String(decoding: bytes, as: UTF8.self)
        guard let parsed = try? SessionDescription(parsing: text) else { return }
        // What this node writes, it reads back the same.
        let written = parsed.serialized
        let reread: SessionDescription
        do { reread = try SessionDescription(parsing: written) } catch {
            preconditionFailure("a parsed description does not parse once serialized: \(error)")
        }
        check(reread.serialized == written, "serializing a parsed description is not stable")
        // Every key and candidate an offer can carry, then the whole negotiation.
        for media in parsed.media {
            for crypto in media.cryptos {
                _ = try? SRTPKey(cryptoAttribute: "\(crypto.tag) \(crypto.suite) \(crypto.keyParameters)")
            }
            for candidate in media.candidates { _ = try? IceCandidate(parsing: candidate) }
        }
        let local = LocalAudioParameters(iceUfrag: "fuzz", icePwd: "fuzzfuzzfuzzfuzzfuzzfuzz", keys: keys)
        guard let (answer, negotiated) = try? OfferAnswer.answer(to: parsed, sessionID: "1", capabilities: AudioCapabilities(), local: local) else { return }
        if let suite = SRTPSuite(rawValue: negotiated.cryptoSuite) {
            _ = try? SRTPKey(suite: suite, inlineKeyParameter: negotiated.remoteKey)
        }
        // The answer this node wrote is one it accepts itself.
        do { _ = try SessionDescription(parsing: answer.serialized) } catch {
            preconditionFailure("this node's answer does not parse: \(error)")
        }
    }

    // MARK: - Signaling

    static func signaling(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        // The first byte picks how the stream is cut into reads: 1 to 64 bytes at a time.
        let chunk = Int(first % 64) + 1
        let stream = bytes.dropFirst()
        let channel = EmbeddedChannel(handler: ByteToMessageHandler(FrameDecoder(maximum: 4096)))
        var offset = stream.startIndex
        var frames: [ByteBuffer] = []
        decoding: while offset < stream.endIndex {
            let end = min(offset + chunk, stream.endIndex)
            var buffer = channel.allocator.buffer(capacity: end - offset)
            buffer.writeBytes(stream[offset..<end])
            offset = end
            do {
                try channel.writeInbound(buffer)
            } catch {
                // Oversized frame: the connection is refused from here on.
                break decoding
            }
            while let frame = try? channel.readInbound(as: ByteBuffer.self) { frames.append(frame) }
        }
        _ = try? channel.finish()
        for frame in frames {
            let body = Array(frame.readableBytesView)
            check(body.count <= 4096, "a frame over the limit got through")
            if let envelope = try? SignalEnvelope.decode(body) {
                let again: SignalEnvelope
                do { again = try SignalEnvelope.decode(envelope.encoded()) } catch {
                    preconditionFailure("a decoded envelope does not decode once encoded: \(error)")
                }
                check(again == envelope, "an envelope changed in its round trip")
            }
            _ = RelayMessage.decode(frame)
        }
    }

    // MARK: - RTP and RTCP

    static func rtp(_ bytes: [UInt8]) {
        guard let packet = try? RTPPacket(parsing: bytes) else { return }
        let reparsed: RTPPacket
        do { reparsed = try RTPPacket(parsing: packet.serialized()) } catch {
            preconditionFailure("a parsed RTP packet does not parse once serialized: \(error)")
        }
        check(reparsed == packet, "an RTP packet changed in its round trip")
        if let redundant = try? RedundantAudio(parsing: packet.payload) {
            _ = try? RedundantAudio(parsing: redundant.serialized())
        }
        if let event = try? TelephoneEvent(parsing: packet.payload) {
            check((try? TelephoneEvent(parsing: event.serialized())) == event, "a telephone event changed in its round trip")
        }
    }

    static func rtcp(_ bytes: [UInt8]) {
        guard let packets = try? RTCPPacket.parseCompound(bytes) else { return }
        let written = RTCPPacket.serializeCompound(packets)
        _ = try? RTCPPacket.parseCompound(written)
    }

    // MARK: - SRTP

    nonisolated(unsafe) static var inbound: [SRTPSession] = {
        SRTPSuite.allCases.compactMap { suite in try? SRTPSession(key: Self.fixedKey(suite), direction: .inbound) }
    }()

    static func fixedKey(_ suite: SRTPSuite) -> SRTPKey {
        try! SRTPKey(suite: suite, material: (0..<suite.keyLength).map { UInt8($0 &* 7 &+ 1) })  // length from the suite
    }

    static func srtp(_ bytes: [UInt8]) {
        guard let mode = bytes.first else { return }
        let body = Array(bytes.dropFirst())
        let suite = SRTPSuite.allCases[Int(mode >> 7)]
        switch mode & 3 {
        case 0:
            // Arbitrary bytes at a long-lived session, as a stranger would send them.
            _ = inbound[Int(mode >> 7)].unprotect(body)
            _ = inbound[Int(mode >> 7)].unprotectRTCP(body)
        default:
            // A packet this node protected, then changed in transit (or not).
            guard body.count >= 3, let sender = try? SRTPSession(key: fixedKey(suite), direction: .outbound),
                  let receiver = try? SRTPSession(key: fixedKey(suite), direction: .inbound) else { return }
            let flip = Int(body[0]) << 8 | Int(body[1]), bit = body[2] & 7
            let plain = Array(body.dropFirst(3))
            let rtcp = mode & 3 == 2
            guard let protected = rtcp ? try? sender.protectRTCP(plain) : try? sender.protect(plain) else { return }
            var wire = protected
            let tamper = mode & 4 != 0
            if tamper { wire[flip % wire.count] ^= 1 << bit }
            let result = rtcp ? receiver.unprotectRTCP(wire) : receiver.unprotect(wire)
            if tamper {
                if case .success = result { preconditionFailure("a tampered SRTP\(rtcp ? "C" : "") packet was accepted") }
            } else {
                check((try? result.get()) == plain, "an untouched SRTP\(rtcp ? "C" : "") packet did not decrypt to what was sent")
                if case .success = rtcp ? receiver.unprotectRTCP(wire) : receiver.unprotect(wire) {
                    preconditionFailure("a replayed SRTP\(rtcp ? "C" : "") packet was accepted")
                }
            }
        }
    }

    // MARK: - ICE candidates

    static func candidate(_ bytes: [UInt8]) {
        guard let parsed = try? IceCandidate(parsing: String(decoding: bytes, as: UTF8.self)) else { return }
        let again: IceCandidate
        do { again = try IceCandidate(parsing: parsed.description) } catch {
            preconditionFailure("a parsed candidate does not parse once written: \(error)")
        }
        check(again == parsed, "a candidate changed in its round trip")
        check(parsed.sdpLine == "a=" + parsed.description, "the SDP line is not the attribute")
    }
}

extension FuzzTarget {
    /// Whether `bytes` gets past the first parser of `target` (for checking seeds).
    public static func parses(_ target: FuzzTarget, _ bytes: [UInt8]) -> Bool {
        switch target {
        case .sdp: (try? SessionDescription(parsing: String(decoding: bytes, as: UTF8.self))) != nil
        case .candidate: (try? IceCandidate(parsing: String(decoding: bytes, as: UTF8.self))) != nil
        case .rtp: (try? RTPPacket(parsing: bytes)) != nil
        case .rtcp: (try? RTCPPacket.parseCompound(bytes)) != nil
        case .signaling:
            bytes.count > 5 && {
                let length = bytes[1...4].reduce(0) { $0 << 8 | Int($1) }
                let body = Array(bytes.dropFirst(5).prefix(length))
                return (try? SignalEnvelope.decode(body)) != nil || RelayMessage.decode(ByteBuffer(bytes: body)) != nil
            }()
        case .srtp: true
        case .sip: SIPAgent.parse(bytes) != nil
        }
    }
}
