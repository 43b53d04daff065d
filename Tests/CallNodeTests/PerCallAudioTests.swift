import CallNode
import Foundation
import Media
import Testing
import CallNodeTestSupport

/// A terminal node's per-call audio (`--input wav:…`, `--output wav:DIR/`) at the rate each
/// call's codec carries: a G.711 call reads and records 8 kHz, an Opus call 48 kHz, and the
/// input is converted once per rate, not per call or per frame.
@Suite struct PerCallAudioTests {
    static func request(codecRate: Int) -> CallAudioRequest {
        CallAudioRequest(call: UUID(), outgoing: true, peerName: "alice", peer: nil, started: Date(),
                         format: AudioFormat(sampleRate: 48_000, channels: 1), codecRate: codecRate)
    }

    @Test func eachCallsInputAndRecordingAreAtItsCodecsRate() throws {
        let tone = ToneSource(frequency: 1_000, amplitude: 0.3)
        var input = [Int16](repeating: 0, count: 48_000)
        _ = tone.read(into: &input)
        let directory = "/tmp/callnode-percall-\(getpid())/"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let provider = CallAudio.perCall(input: input, inputRate: 48_000, recordingsIn: directory)

        let g711 = try provider(Self.request(codecRate: 8_000))
        let narrow = try #require(g711.source)
        #expect(narrow.format == AudioFormat(sampleRate: 8_000, channels: 1))
        #expect(g711.sink?.format == AudioFormat(sampleRate: 8_000, channels: 1))
        var frame = [Int16](repeating: 0, count: 4_000)
        _ = narrow.read(into: &frame)
        _ = narrow.read(into: &frame)
        #expect(Goertzel.share(of: 1_000, in: frame, rate: 8_000) > 0.95, "the input's tone, at 8 kHz")

        let opus = try provider(Self.request(codecRate: 48_000))
        #expect(opus.source?.format == AudioFormat(sampleRate: 48_000, channels: 1))
        #expect(opus.sink?.format == AudioFormat(sampleRate: 48_000, channels: 1))

        // An 8 kHz file into a G.711 call: the very samples, nothing converted.
        let eight = (0..<8_000).map { Int16(truncatingIfNeeded: $0 &* 37) }
        let asIs = try CallAudio.perCall(input: eight, inputRate: 8_000, recordingsIn: nil)(Self.request(codecRate: 8_000))
        var read = [Int16](repeating: 0, count: 160)
        _ = try #require(asIs.source).read(into: &read)
        #expect(read == Array(eight.prefix(160)))
    }
}
