internal import CSpeexDSP

/// The same speexdsp calls a ``VoiceProcessor`` makes per 10 ms block — echo cancellation
/// against a reference, then the preprocessor with noise suppression, gain control and
/// residual echo suppression — with nothing around them: the anchor the voice benchmark
/// compares against.
@_spi(Benchmarks)
public enum BareVoiceProcessingBenchmark {
    /// Runs `microphone` (with `far` as the reference, both looped) through bare speexdsp in
    /// 10 ms blocks at 48 kHz and returns the process CPU time spent.
    public static func run(blocks: Int, microphone: [Int16], far: [Int16], tail: Int) -> Duration? {
        let block: Int32 = 480
        guard let echo = speex_echo_state_init(block, Int32(tail)),
              let preprocess = speex_preprocess_state_init(block, 48_000) else { return nil }
        defer { speex_preprocess_state_destroy(preprocess); speex_echo_state_destroy(echo) }
        var rate: Int32 = 48_000
        speex_echo_ctl(echo, SPEEX_ECHO_SET_SAMPLING_RATE, &rate)
        var on: Int32 = 1
        speex_preprocess_ctl(preprocess, SPEEX_PREPROCESS_SET_DENOISE, &on)
        speex_preprocess_ctl(preprocess, SPEEX_PREPROCESS_SET_AGC, &on)
        speex_preprocess_ctl(preprocess, SPEEX_PREPROCESS_SET_ECHO_STATE, UnsafeMutableRawPointer(echo))
        var output = [Int16](repeating: 0, count: Int(block))
        let start = BareMediaBenchmark.cpuTime()
        var offset = 0
        for _ in 0..<blocks {
            if offset + Int(block) > min(microphone.count, far.count) { offset = 0 }
            microphone.withUnsafeBufferPointer { mic in
                far.withUnsafeBufferPointer { played in
                    output.withUnsafeMutableBufferPointer { out in
                        speex_echo_cancellation(echo, mic.baseAddress! + offset, played.baseAddress! + offset, out.baseAddress)  // non-empty
                        _ = speex_preprocess_run(preprocess, out.baseAddress)
                    }
                }
            }
            offset += Int(block)
        }
        return BareMediaBenchmark.cpuTime() - start
    }
}
