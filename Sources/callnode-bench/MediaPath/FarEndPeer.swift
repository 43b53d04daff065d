import CallNode
import Synchronization

/// A conference party's phone as the node meets it when the phone is another machine: its
/// packets arrive, SRTP-protected, a frame every period, and what the node sends it goes
/// nowhere. Here it is a replay of speech encoded once beforehand (each packet protected as it
/// goes, with its own sequence and time), so that the process spends its time on the node's
/// side of each call alone: `callnode-bench media --conference N --far-ends`.
final class FarEndPeer: MediaClockClient {
    private struct Sending {
        var index: Int
        var sequence: UInt16 = 0
        var timestamp: UInt32 = 0
        var packet: [UInt8] = []
        let srtp: SRTPSession
    }

    private let transport: any MediaTransport
    private let payloads: [[UInt8]]
    private let payloadType: UInt8
    private let ssrc = UInt32.random(in: 1...UInt32.max)
    private let sending: Mutex<Sending>
    private let samplesPerFrame: UInt32
    /// Datagrams the node sent it (counted, not decoded).
    var received: Int { receivedCount.value.load(ordering: .relaxed) }
    private let receivedCount = Count()

    private final class Count: Sendable {
        let value = Atomic<Int>(0)
    }

    /// - Parameters:
    ///   - payloads: One frame's encoded audio each, replayed in a loop from `offset`; a
    ///     discontinuous-transmission frame (two bytes or fewer) is not sent, as a phone sends
    ///     nothing in a pause.
    init(transport: any MediaTransport, key: SRTPKey, payloads: [[UInt8]], offset: Int, payloadType: UInt8, samplesPerFrame: Int) throws {
        precondition(!payloads.isEmpty, "something to replay")
        self.transport = transport
        self.payloads = payloads
        self.payloadType = payloadType
        self.samplesPerFrame = UInt32(samplesPerFrame)
        sending = Mutex(Sending(index: offset % payloads.count, srtp: try SRTPSession(key: key, direction: .outbound)))
        transport.setReceiveHandler { [receivedCount] _ in receivedCount.value.add(1, ordering: .relaxed) }
    }

    /// The frames of `speech`, encoded as the node's legs encode (its Opus settings).
    static func payloads(of speech: [Int16], opus: OpusConfiguration) throws -> [[UInt8]] {
        let encoder = try OpusEncoder(configuration: opus)
        let frame = opus.samplesPerFrame * opus.channels
        return try stride(from: 0, to: speech.count - frame + 1, by: frame).map { start in
            Array(try encoder.encode(Array(speech[start..<start + frame])))
        }
    }

    func tick(now: Duration) async {
        let packet = sending.withLock { state -> [UInt8]? in
            let payload = payloads[state.index]
            state.index = (state.index + 1) % payloads.count
            defer { state.timestamp &+= samplesPerFrame }
            guard payload.count > 2 else { return nil }
            state.packet.removeAll(keepingCapacity: true)
            RTPPacket(payloadType: payloadType, sequenceNumber: state.sequence, timestamp: state.timestamp, ssrc: ssrc, payload: payload)
                .serialize(into: &state.packet)
            state.sequence &+= 1
            do { try state.srtp.protect(inPlace: &state.packet) } catch { return nil }
            return state.packet
        }
        if let packet { await transport.send(packet) }
    }
}
