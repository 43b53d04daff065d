import Foundation
import Locking
import Media
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A recording is a playable file at any moment (what a crash leaves), and a write that fails
/// stops it cleanly and says why.
@Suite struct RecordingTests {
    static func tone(_ count: Int, at start: Int) -> [Int16] {
        (0..<count).map { Int16(8_000 * sin(2 * Double.pi * 440 * Double(start + $0) / 48_000)) }
    }

    @Test func aRecordingStillBeingWrittenReadsUpToAboutTheLastSecond() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("callnode-recording-\(UUID()).wav").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let sink = WAVFileSink(path: path)
        try sink.start()
        // 2.5 s of 20 ms frames; the file is read as another process would, without stop():
        // what it holds now is what a kill -9 would leave (everything synced is in the kernel).
        for frame in 0..<125 { sink.write(Self.tone(960, at: frame * 960)) }
        let (format, samples) = try WAV.read(path: path)
        #expect(format == AudioFormat())
        #expect(samples.count >= 2 * 48_000 && samples.count <= 125 * 960, "\(samples.count) samples readable mid-recording")
        // What the header covers is the audio as written.
        #expect(samples == Self.tone(samples.count, at: 0))
        sink.stop()
        #expect(try WAV.read(path: path).samples.count == 125 * 960)
        #expect(sink.failure == nil)
    }

    @Test func aFullDiskStopsTheRecordingCleanlyAndSaysWhy() throws {
        // /dev/full takes writes into the buffer and fails them when they reach it (ENOSPC).
        let sink = WAVFileSink(path: "/dev/full")
        let heard = Locked<[String]>([])
        sink.onFailure { reason in heard.withLock { $0.append(reason) } }
        do {
            try sink.start()
            Issue.record("a recording on a full device started")
        } catch {
            #expect("\(error)".contains("No space left"), "\(error)")
        }
        // A disk that fills up mid-call: the writes fail at the next sync, once.
        let filling = FullAfterSink()
        for frame in 0..<150 { filling.sink.write(Self.tone(960, at: frame * 960)) }
        filling.sink.stop()
        #expect(filling.failures.count == 1, "\(filling.failures)")
        #expect(filling.failures.first?.contains("No space left") == true)
        #expect(filling.sink.failure != nil)
        _ = heard
    }
}

/// A WAV sink whose file sits on a device that fills after its header: writes go through
/// the descriptor of /dev/full swapped in after start (what a filesystem filling up does).
final class FullAfterSink: Sendable {
    let sink: WAVFileSink
    let path: String
    private let heard = Locked<[String]>([])
    var failures: [String] { heard.withLock { $0 } }

    init() {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("callnode-full-\(UUID()).wav").path
        sink = WAVFileSink(path: path)
        sink.onFailure { [heard] reason in heard.withLock { $0.append(reason) } }
        try? sink.start()
        // Every descriptor now writes into /dev/full: the file's own descriptor is replaced.
        let full = open("/dev/full", O_WRONLY)
        // Every open descriptor (a whole test run has many more than a few hundred).
        let descriptors = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd"))?.compactMap { Int32($0) } ?? []
        for descriptor in descriptors where descriptor > 2 && descriptor != full {
            var link = [CChar](repeating: 0, count: 512)
            let count = readlink("/proc/self/fd/\(descriptor)", &link, link.count - 1)
            if count > 0, String(decoding: link[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self) == path {
                dup2(full, descriptor)
            }
        }
        close(full)
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }
}
