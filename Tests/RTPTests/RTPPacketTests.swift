import CallNodeTestSupport
import Foundation
import RTP
import Testing

@Suite struct RTPPacketTests {
    @Test func everyHeaderFieldRoundTrips() throws {
        let packet = RTPPacket(
            payloadType: 111, sequenceNumber: 0xFFFF, timestamp: 0xFFFF_FFF0, ssrc: 0xDEAD_BEEF, marker: true,
            csrcs: [1, 0xCAFE_BABE], headerExtension: RTPHeaderExtension(profile: 0xBEDE, data: [1, 2, 3, 4, 5, 6, 7, 8]),
            payload: Array(0..<50), paddingLength: 3)
        let bytes = packet.serialized()
        #expect(bytes.count == 12 + 8 + 4 + 8 + 50 + 3)
        #expect(bytes[0] == 0b1011_0010)  // V=2, P, X, CC=2
        #expect(bytes[1] == 0x80 | 111)
        let parsed = try RTPPacket(parsing: bytes)
        #expect(parsed == packet)
    }

    @Test func minimalPacketMatchesHandBuiltBytes() throws {
        let bytes: [UInt8] = [0x80, 0x6F, 0x12, 0x34, 0x00, 0x00, 0x03, 0xC0, 0x01, 0x02, 0x03, 0x04, 0xAA]
        let packet = try RTPPacket(parsing: bytes)
        #expect(packet.payloadType == 111)
        #expect(packet.sequenceNumber == 0x1234)
        #expect(packet.timestamp == 960)
        #expect(packet.ssrc == 0x0102_0304)
        #expect(!packet.marker)
        #expect(packet.payload == [0xAA])
        #expect(packet.serialized() == bytes)
    }

    @Test("malformed packets are typed errors", arguments: [
        ([UInt8](), RTPParseError.truncated(needed: 12, available: 0)),
        ([0x80, 0x6F, 0, 1, 0, 0, 0, 0, 0, 0, 0], .truncated(needed: 12, available: 11)),
        ([0x40, 0x6F, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0], .unsupportedVersion(1)),
        ([0x83, 0x6F, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1], .truncated(needed: 24, available: 16)),
        ([0x90, 0x6F, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0xBE, 0xDE, 0, 2, 1, 2, 3, 4], .truncated(needed: 24, available: 20)),
        ([0xA0, 0x6F, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 0], .invalidPadding(0)),
        ([0xA0, 0x6F, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 9], .invalidPadding(9)),
    ] as [([UInt8], RTPParseError)])
    func malformed(_ bytes: [UInt8], _ error: RTPParseError) {
        #expect(throws: error) { try RTPPacket(parsing: bytes) }
    }

    @Test func randomBytesNeverCrashTheParsers() {
        var rng = SplitMix64(seed: 7)
        for _ in 0..<20_000 {
            let length = Int(rng.next() % 80)
            var bytes = (0..<length).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
            if !bytes.isEmpty && rng.next() % 2 == 0 { bytes[0] = 0x80 | (bytes[0] & 0x3F) }
            _ = try? RTPPacket(parsing: bytes)
            _ = try? RTCPPacket.parseCompound(bytes)
            _ = DatagramKind(classifying: bytes)
        }
    }

    @Test func sequenceArithmeticWraps() {
        #expect(SequenceNumber.isNewer(0, than: 0xFFFF))
        #expect(!SequenceNumber.isNewer(0xFFFF, than: 0))
        #expect(SequenceNumber.isNewer(100, than: 50))
        #expect(SequenceNumber.extend(2, near: 0xFFFE) == 0x1_0002)
        #expect(SequenceNumber.extend(0xFFFE, near: 0x1_0002) == 0xFFFE)
        #expect(SequenceNumber.extend(500, near: 400) == 500)
    }

    @Test func datagramsAreDemultiplexedByRFC7983AndRFC5761() {
        #expect(DatagramKind(classifying: [0x00, 0x01, 0, 0]) == .stun)
        #expect(DatagramKind(classifying: [22, 0xFE, 0xFD]) == .dtls)
        #expect(DatagramKind(classifying: [0x80, 111]) == .rtp)
        #expect(DatagramKind(classifying: [0x80, 0x80 | 111]) == .rtp)  // marker set
        #expect(DatagramKind(classifying: [0x80, 200]) == .rtcp)
        #expect(DatagramKind(classifying: [0x81, 201]) == .rtcp)
        #expect(DatagramKind(classifying: [0x80]) == .unknown)
        #expect(DatagramKind(classifying: []) == .unknown)
        #expect(DatagramKind(classifying: [0xFF, 0]) == .unknown)
    }
}

@Suite struct RTCPTests {
    static let block = ReportBlock(
        ssrc: 0x1111_2222, fractionLost: 25, cumulativeLost: -3, extendedHighestSequence: 0x0001_0005,
        jitter: 480, lastSenderReport: 0xAABB_CCDD, delaySinceLastSenderReport: 0x0001_8000)

    @Test func compoundPacketRoundTrips() throws {
        let packets: [RTCPPacket] = [
            .senderReport(SenderReport(ssrc: 42, ntpTimestamp: 0xE000_0000_8000_0000, rtpTimestamp: 96_000,
                                       packetCount: 100, octetCount: 6400, reports: [Self.block])),
            .sourceDescription([SDESChunk(ssrc: 42, cname: "node-a@callnode")]),
            .receiverReport(ReceiverReport(ssrc: 43, reports: [Self.block, Self.block])),
            .bye(ssrcs: [42], reason: "hang up"),
        ]
        let bytes = RTCPPacket.serializeCompound(packets)
        #expect(bytes.count % 4 == 0)
        #expect(try RTCPPacket.parseCompound(bytes) == packets)
    }

    @Test func senderReportHasTheRFC3550Layout() {
        let bytes = RTCPPacket.serializeCompound([.senderReport(SenderReport(
            ssrc: 1, ntpTimestamp: 2 << 32 | 3, rtpTimestamp: 4, packetCount: 5, octetCount: 6, reports: [Self.block]))])
        #expect(bytes.count == 52)
        #expect(Array(bytes[0..<4]) == [0x81, 200, 0, 12])  // RC=1, PT=200, length 12 words − 1
        #expect(Array(bytes[32..<36]) == [25, 0xFF, 0xFF, 0xFD])  // fraction 25, cumulative −3 as 24 bits
    }

    @Test func unknownPacketTypesAreKeptWhole() throws {
        let app: [UInt8] = [0x80, 204, 0, 2, 0, 0, 0, 1, 0x41, 0x42, 0x43, 0x44]
        let rr = RTCPPacket.serializeCompound([.receiverReport(ReceiverReport(ssrc: 9))])
        let parsed = try RTCPPacket.parseCompound(rr + app)
        #expect(parsed == [.receiverReport(ReceiverReport(ssrc: 9)), .other(packetType: 204, bytes: app)])
    }

    @Test func malformedCompoundPacketsAreTypedErrors() {
        #expect(throws: RTPParseError.truncated(needed: 4, available: 2)) { try RTCPPacket.parseCompound([0x80, 200]) }
        #expect(throws: RTPParseError.unsupportedVersion(0)) { try RTCPPacket.parseCompound([0x00, 200, 0, 0]) }
        #expect(throws: RTPParseError.self) { try RTCPPacket.parseCompound([0x80, 201, 0, 9, 0, 0, 0, 1]) }  // length overruns
        #expect(throws: RTPParseError.self) { try RTCPPacket.parseCompound([0x81, 201, 0, 1, 0, 0, 0, 1]) }  // RC=1, no block
        #expect(throws: RTPParseError.self) { try RTCPPacket.parseCompound([0x81, 202, 0, 2, 0, 0, 0, 1, 1, 9, 0x41, 0x41]) }  // SDES item overruns
    }

    @Test func roundTripTimeIsArrivalMinusLSRMinusDLSR() {
        // LSR at t = 10 s, the peer held it 0.25 s, the report arrived at 10.35 s: RTT 100 ms.
        let lsr = NTPTime.short(.seconds(10))
        var block = Self.block
        block.lastSenderReport = lsr
        block.delaySinceLastSenderReport = NTPTime.short(.milliseconds(250))
        let rtt = block.roundTripTime(arrivalNTP: NTPTime.short(.milliseconds(10_350)))
        #expect(rtt.map { abs(($0 - .milliseconds(100)).seconds) < 0.0001 } == true)
        block.lastSenderReport = 0
        #expect(block.roundTripTime(arrivalNTP: 1234) == nil)
    }

    @Test func negativeDurationsCountAsZero() {
        // Arrival stamped on one thread a moment after "now" was read on another.
        #expect(NTPTime.short(.milliseconds(-3)) == 0)
        #expect(NTPTime.timestamp(sinceUnixEpoch: .seconds(-1)) == NTPTime.unixOffset << 32)
        var stats = ReceptionStatistics(clockRate: 48_000)
        stats.record(sequence: 1, timestamp: 0, ssrc: 1, arrival: .seconds(2))
        stats.recordSenderReport(ntpTimestamp: 1 << 32, arrival: .seconds(2))
        #expect(stats.makeReportBlock(now: .milliseconds(1999))?.delaySinceLastSenderReport == 0)
    }
}

/// RFC 6464's audio level in a one-byte header extension (RFC 8285), as a mixer reads it.
@Suite struct AudioLevelExtensionTests {
    @Test func theLevelRidesInAOneByteExtensionThatParsesBack() throws {
        var packet: [UInt8] = []
        RTPHeader.append(payloadType: 111, sequenceNumber: 7, timestamp: 960, ssrc: 0x1234_5678, to: &packet)
        RTPHeader.appendAudioLevel(id: 1, level: 10, voice: true, to: &packet)
        packet += [0xAA, 0xBB]
        let parsed = try RTPPacket(parsing: packet)
        #expect(parsed.payload == [0xAA, 0xBB])
        #expect(parsed.sequenceNumber == 7 && parsed.ssrc == 0x1234_5678)
        let ext = try #require(parsed.headerExtension)
        #expect(ext.profile == 0xBEDE)
        // One element: id 1, length 1 (stored as 0), V set, level 10; then padding.
        #expect(ext.data == [0x10, 0x80 | 10, 0, 0])
    }

    @Test func aFramesLevelIsMinusDBovOfItsRMSFromLoudToSilent() {
        #expect(RTPHeader.audioLevel(of: [Int16](repeating: 0, count: 960)) == 127)
        #expect(RTPHeader.audioLevel(of: []) == 127)
        // A full-scale square wave is 0 dBov; a tenth of full scale −20 dBov; 0.3 of full scale ≈ −10.5.
        #expect(RTPHeader.audioLevel(of: (0..<960).map { $0 % 2 == 0 ? 32_767 : -32_767 }) == 0)
        #expect(RTPHeader.audioLevel(of: [Int16](repeating: 3_277, count: 960)) == 20)
        let tone = (0..<960).map { Int16(9_830 * sin(2 * Double.pi * 440 * Double($0) / 48_000)) }
        #expect((12...14).contains(RTPHeader.audioLevel(of: tone)))
    }
}
