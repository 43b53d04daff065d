import Media
import CALSA
import COpus
import CSRTP
import CallNodeTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// The system-library targets link and their shim helpers do what they claim.
@Suite struct CBindingsTests {
    @Test func opusControlHelpersSetAndReadBack() throws {
        var error: Int32 = 0
        let encoder = try #require(opus_encoder_create(48_000, 1, copus_application_voip(), &error))
        defer { opus_encoder_destroy(encoder) }
        #expect(error == OPUS_OK)
        #expect(copus_set_bitrate(encoder, 24_000) == OPUS_OK)
        #expect(copus_set_complexity(encoder, 5) == OPUS_OK)
        #expect(copus_set_inband_fec(encoder, 1) == OPUS_OK)
        #expect(copus_set_packet_loss_perc(encoder, 10) == OPUS_OK)
        var bitrate: Int32 = 0, complexity: Int32 = 0, fec: Int32 = 0
        #expect(copus_get_bitrate(encoder, &bitrate) == OPUS_OK)
        #expect(copus_get_complexity(encoder, &complexity) == OPUS_OK)
        #expect(copus_get_inband_fec(encoder, &fec) == OPUS_OK)
        #expect(bitrate == 24_000 && complexity == 5 && fec == 1)
        #expect(copus_set_bitrate(encoder, -5) == OPUS_BAD_ARG)

        // A 20 ms 440 Hz tone encodes and decodes to a signal with energy.
        let pcm: [Int16] = (0..<960).map { Int16(8000 * sin(2 * Double.pi * 440 * Double($0) / 48_000)) }
        var packet = [UInt8](repeating: 0, count: 1500)
        let length = opus_encode(encoder, pcm, 960, &packet, 1500)
        #expect(length > 0)
        let decoder = try #require(opus_decoder_create(48_000, 1, &error))
        defer { opus_decoder_destroy(decoder) }
        var out = [Int16](repeating: 0, count: 960)
        #expect(opus_decode(decoder, packet, length, &out, 960, 0) == 960)
        #expect(out.contains { $0 != 0 })
    }

    @Test func srtpPolicyHelpersProtectAndUnprotect() throws {
        try SRTPLibrary.initialize()  // srtp_init once per process, shared with the media tests
        #expect(!String(cString: srtp_get_version_string()).isEmpty)
        var key = [UInt8](0..<30)
        var sender: srtp_t?, receiver: srtp_t?
        var policy = srtp_policy_t()
        try key.withUnsafeMutableBufferPointer { keyBuffer in
            csrtp_policy_aes_cm_128_hmac_sha1_80(&policy)
            policy.key = keyBuffer.baseAddress
            policy.window_size = 128
            csrtp_policy_set_ssrc_any_outbound(&policy)
            #expect(srtp_create(&sender, &policy) == srtp_err_status_ok)
            csrtp_policy_set_ssrc_any_inbound(&policy)
            #expect(srtp_create(&receiver, &policy) == srtp_err_status_ok)
            _ = try #require(sender)
        }
        defer { srtp_dealloc(sender); srtp_dealloc(receiver) }
        // RTP header (V=2, PT 111, seq 1, ts 0, SSRC 0x11223344) + 20 payload bytes, room for the tag.
        let plain: [UInt8] = [0x80, 111, 0, 1, 0, 0, 0, 0, 0x11, 0x22, 0x33, 0x44] + Array(repeating: 0x5A, count: 20)
        var packet = plain + Array(repeating: 0, count: 16)
        var length = Int32(plain.count)
        #expect(csrtp_protect(sender, &packet, &length) == srtp_err_status_ok)
        #expect(length == Int32(plain.count + 10))
        #expect(Array(packet[12..<32]) != Array(plain[12...]))
        var tampered = packet
        tampered[20] ^= 1
        var tamperedLength = length
        #expect(csrtp_unprotect(receiver, &tampered, &tamperedLength) == srtp_err_status_auth_fail)
        #expect(csrtp_unprotect(receiver, &packet, &length) == srtp_err_status_ok)
        #expect(Array(packet.prefix(Int(length))) == plain)
    }

    @Test func alsaErrorHandlerAndMissingDevice() async {
        await ALSATestLock.withLock {
            #expect(calsa_silence_errors() == 0)
            defer { _ = calsa_restore_errors() }
            var pcm: OpaquePointer?
            let rc = snd_pcm_open(&pcm, "hw:97,0", SND_PCM_STREAM_PLAYBACK, 0)
            #expect(rc < 0)
            #expect(pcm == nil)
            #expect(!String(cString: snd_strerror(rc)).isEmpty)
            let params = calsa_hw_params_new()
            #expect(params != nil)
            snd_pcm_hw_params_free(params)
        }
    }
}
