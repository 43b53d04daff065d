import ArgumentParser
import CallNode
import Foundation

/// `callnode-bench opus-pcap`: a tone as Opus RTP in a capture file (libpcap, IPv4 over
/// Ethernet), packet by packet 20 ms apart, for SIPp to replay into calls
/// (`play_pcap_audio`): `scripts/measure-calls-per-core --opus` loads a node with Opus calls so.
struct OpusCaptureBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "opus-pcap",
        abstract: "Write a tone as Opus RTP (payload type 111, mono, the node's default settings) into a pcap file for SIPp's play_pcap_audio.")

    @Argument(help: "The capture file to write.")
    var output: String

    @Option(help: "Seconds of audio.")
    var seconds = 30

    @Option(help: "The tone's frequency in Hz.")
    var tone = 700.0

    func validate() throws {
        guard seconds > 0, seconds <= 3_600, tone > 0, tone < 20_000 else { throw ValidationError("seconds 1–3600, a tone under 20 kHz") }
    }

    func run() throws {
        let opus = OpusConfiguration()
        let encoder = try OpusEncoder(configuration: opus)
        let frame = opus.samplesPerFrame
        var file = Self.globalHeader()
        let ssrc = UInt32.random(in: 1...UInt32.max)
        for index in 0..<(seconds * 1_000 / 20) {
            let pcm = (0..<frame).map { sample -> Int16 in
                let t = Double(index * frame + sample) / Double(opus.sampleRate)
                return Int16(8_000 * sin(2 * Double.pi * tone * t))
            }
            let payload = Array(try encoder.encode(pcm))
            let rtp = RTPPacket(payloadType: 111, sequenceNumber: UInt16(truncatingIfNeeded: index), timestamp: UInt32(truncatingIfNeeded: index * frame),
                                ssrc: ssrc, marker: index == 0, payload: payload).serialized()
            file += Self.record(rtp, at: index * 20_000)
        }
        try Data(file).write(to: URL(fileURLWithPath: output))
        print("opus-pcap: \(seconds * 50) packets of a \(Int(tone)) Hz tone written to \(output)")
    }

    /// libpcap's file header: microsecond stamps, Ethernet frames.
    static func globalHeader() -> [UInt8] {
        little(UInt32(0xA1B2_C3D4)) + little(UInt16(2)) + little(UInt16(4)) + little(UInt32(0)) + little(UInt32(0))
            + little(UInt32(65_535)) + little(UInt32(1))
    }

    /// One packet: its record header, then Ethernet, IPv4 (127.0.0.1 to itself) and UDP
    /// (port 20000 to 20000) around `payload`, `microseconds` after the first.
    static func record(_ payload: [UInt8], at microseconds: Int) -> [UInt8] {
        let udpLength = 8 + payload.count, ipLength = 20 + udpLength
        var ip: [UInt8] = [0x45, 0, UInt8(ipLength >> 8), UInt8(ipLength & 0xFF), 0, 0, 0x40, 0, 64, 17, 0, 0, 127, 0, 0, 1, 127, 0, 0, 1]
        var sum = 0
        for word in stride(from: 0, to: 20, by: 2) { sum += Int(ip[word]) << 8 | Int(ip[word + 1]) }
        while sum > 0xFFFF { sum = (sum & 0xFFFF) + (sum >> 16) }
        let checksum = ~UInt16(sum)
        ip[10] = UInt8(checksum >> 8)
        ip[11] = UInt8(checksum & 0xFF)
        let udp: [UInt8] = [0x4E, 0x20, 0x4E, 0x20, UInt8(udpLength >> 8), UInt8(udpLength & 0xFF), 0, 0]
        let ethernet: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x08, 0x00]
        let frame = ethernet + ip + udp + payload
        return little(UInt32(microseconds / 1_000_000)) + little(UInt32(microseconds % 1_000_000))
            + little(UInt32(frame.count)) + little(UInt32(frame.count)) + frame
    }

    static func little<T: FixedWidthInteger>(_ value: T) -> [UInt8] {
        withUnsafeBytes(of: value.littleEndian) { Array($0) }
    }
}
