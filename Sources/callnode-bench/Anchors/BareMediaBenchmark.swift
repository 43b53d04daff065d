internal import COpus
internal import CSRTP
import Media

#if canImport(Glibc)
import Glibc
#endif

/// The same per-frame C work a call leg does — Opus encode, SRTP protect, SRTP unprotect,
/// Opus decode — with nothing around it: the anchor the media benchmark compares against.
@_spi(Benchmarks)
public enum BareMediaBenchmark {
    /// Runs `frames` frames of `pcm` (looped, 20 ms at 48 kHz mono) through the bare C calls
    /// and returns the process CPU time spent, or `nil` if libopus or libsrtp failed.
    ///
    /// - Parameter states: Encoder and decoder pairs the frames go through in turn (each with
    ///   its own place in the speech): one keeps its state in the cache as no real node with
    ///   many calls can; as many as a sweep's legs needs the memory those legs need.
    /// - Parameter paced: One frame every 20 ms of real time, sleeping between them, as a call
    ///   runs (the CPU time counted is the same work's; what pacing adds is the cost of starting
    ///   each frame on cold caches after a sleep, which every real-time program pays). With
    ///   several `states`, one frame of each every 20 ms and then the sleep, as a media lane
    ///   ticks that many legs (if a period's frames take longer than 20 ms, no sleep).
    public static func run(frames: Int, pcm: [Int16], bitrate: Int32, complexity: Int32, expectedLossPercent: Int32,
                           states: Int = 1, paced: Bool = false) -> Duration? {
        guard (try? SRTPLibrary.initialize()) != nil else { return nil }
        var error: Int32 = 0
        var codecs: [(encoder: OpaquePointer, decoder: OpaquePointer, offset: Int)] = []
        defer { for codec in codecs { opus_encoder_destroy(codec.encoder); opus_decoder_destroy(codec.decoder) } }
        for index in 0..<max(1, states) {
            guard let encoder = opus_encoder_create(48_000, 1, copus_application_voip(), &error) else { return nil }
            guard let decoder = opus_decoder_create(48_000, 1, &error) else {
                opus_encoder_destroy(encoder)
                return nil
            }
            _ = copus_set_bitrate(encoder, bitrate)
            _ = copus_set_complexity(encoder, complexity)
            _ = copus_set_inband_fec(encoder, 1)
            _ = copus_set_packet_loss_perc(encoder, expectedLossPercent)
            _ = copus_set_signal_voice(encoder)
            codecs.append((encoder, decoder, (index * 6_599 * 48) % max(960, pcm.count - 960) / 960 * 960))
        }

        var key = [UInt8](repeating: 7, count: 30)
        var sender: srtp_t?, receiver: srtp_t?
        var policy = srtp_policy_t()
        key.withUnsafeMutableBufferPointer { k in
            csrtp_policy_aes_cm_128_hmac_sha1_80(&policy)
            policy.key = k.baseAddress
            policy.window_size = 1024
            csrtp_policy_set_ssrc_any_outbound(&policy)
            _ = srtp_create(&sender, &policy)
            csrtp_policy_set_ssrc_any_inbound(&policy)
            _ = srtp_create(&receiver, &policy)
        }
        guard let sender, let receiver else { return nil }
        defer { srtp_dealloc(sender); srtp_dealloc(receiver) }

        var packet = [UInt8](repeating: 0, count: 1600)
        var out = [Int16](repeating: 0, count: 960)
        let start = cpuTime()
        var due = timespec()
        clock_gettime(CLOCK_MONOTONIC, &due)
        for i in 0..<frames {
            if paced && i % codecs.count == 0 {
                due.tv_nsec += 20_000_000
                if due.tv_nsec >= 1_000_000_000 { due.tv_nsec -= 1_000_000_000; due.tv_sec += 1 }
                while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, nil) == EINTR {}
            }
            let k = i % codecs.count
            if codecs[k].offset + 960 > pcm.count { codecs[k].offset = 0 }
            let (encoder, decoder, offset) = codecs[k]
            let length = pcm.withUnsafeBufferPointer { input in
                packet.withUnsafeMutableBufferPointer { p in
                    opus_encode(encoder, input.baseAddress! + offset, 960, p.baseAddress! + 12, 1400)  // non-empty buffers
                }
            }
            codecs[k].offset += 960
            guard length > 0 else { return nil }
            // A 12-byte RTP header in front, as a real packet has.
            packet[0] = 0x80; packet[1] = 111
            packet[2] = UInt8((i >> 8) & 0xFF); packet[3] = UInt8(i & 0xFF)
            packet[4] = 0; packet[5] = 0; packet[6] = 0; packet[7] = 0
            packet[8] = 1; packet[9] = 2; packet[10] = 3; packet[11] = 4
            var size = 12 + length
            let ok = packet.withUnsafeMutableBufferPointer { p -> Bool in
                guard csrtp_protect(sender, p.baseAddress!, &size) == srtp_err_status_ok,
                      csrtp_unprotect(receiver, p.baseAddress!, &size) == srtp_err_status_ok else { return false }
                return out.withUnsafeMutableBufferPointer { o in
                    opus_decode(decoder, p.baseAddress! + 12, size - 12, o.baseAddress!, 960, 0) == 960
                }
            }
            guard ok else { return nil }
        }
        return cpuTime() - start
    }

    /// CPU time of the whole process so far.
    public static func cpuTime() -> Duration {
        var ts = timespec()
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts)
        return .seconds(ts.tv_sec) + .nanoseconds(ts.tv_nsec)
    }
}
