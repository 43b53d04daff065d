import AudioDevices
import Foundation
import Locking
import TestingPrimitives

/// Listens to one call on one node: for each 20 ms frame played, which nodes' tones are in it.
///
/// Every node's microphone is a tone of its own frequency, so what a side hears says whose
/// microphone reached it: the peer's (or, through a conference, the others'). Frames are
/// numbered as they come; the simulation reads them after each step.
final class ToneProbe: AudioSink {
    let format = AudioFormat()
    private let frequencies: [Double]
    /// Per frame: a bit per node whose tone is in it.
    private let heard = Locked<[UInt8]>([])

    init(frequencies: [Double]) {
        self.frequencies = frequencies
    }

    func start() throws(AudioDeviceError) {}
    func stop() {}

    func write(_ frame: [Int16]) {
        var energy = 0.0
        for sample in frame { energy += Double(sample) * Double(sample) }
        var bits: UInt8 = 0
        // A tone at 0.3 of full scale decodes to a peak well above −40 dBFS; quiet noise and the
        // codec's residue do not count.
        if energy / Double(max(1, frame.count)) > 100 * 100 {
            for (index, frequency) in frequencies.enumerated() where Goertzel.power(of: frequency, in: frame) > 0.1 * energy {
                bits |= 1 << index
            }
        }
        heard.withLock { $0.append(bits) }
    }

    /// Frames heard since `start` (an index into everything heard).
    func frames(from start: Int) -> ArraySlice<UInt8> {
        heard.withLock { all in all[min(start, all.count)...] }
    }

    var count: Int { heard.withLock { $0.count } }
}
