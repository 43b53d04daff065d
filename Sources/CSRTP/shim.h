#ifndef CSRTP_SHIM_H
#define CSRTP_SHIM_H

#include <srtp2/srtp.h>
#include <string.h>

/* The policy setters take the crypto policy by pointer inside a struct Swift would have to
   build field by field; these helpers keep the policy construction in one place. */
static inline void csrtp_policy_aes_cm_128_hmac_sha1_80(srtp_policy_t *policy) {
    memset(policy, 0, sizeof(*policy));
    srtp_crypto_policy_set_aes_cm_128_hmac_sha1_80(&policy->rtp);
    srtp_crypto_policy_set_aes_cm_128_hmac_sha1_80(&policy->rtcp);
}
static inline void csrtp_policy_aead_aes_128_gcm(srtp_policy_t *policy) {
    memset(policy, 0, sizeof(*policy));
    srtp_crypto_policy_set_aes_gcm_128_16_auth(&policy->rtp);
    srtp_crypto_policy_set_aes_gcm_128_16_auth(&policy->rtcp);
}
/* Retype the byte buffer for srtp_protect/unprotect (they take void *). */
static inline srtp_err_status_t csrtp_protect(srtp_t session, uint8_t *packet, int *length) {
    return srtp_protect(session, packet, length);
}
static inline srtp_err_status_t csrtp_unprotect(srtp_t session, uint8_t *packet, int *length) {
    return srtp_unprotect(session, packet, length);
}
static inline srtp_err_status_t csrtp_protect_rtcp(srtp_t session, uint8_t *packet, int *length) {
    return srtp_protect_rtcp(session, packet, length);
}
static inline srtp_err_status_t csrtp_unprotect_rtcp(srtp_t session, uint8_t *packet, int *length) {
    return srtp_unprotect_rtcp(session, packet, length);
}
static inline void csrtp_policy_set_ssrc_any_inbound(srtp_policy_t *policy) {
    policy->ssrc.type = ssrc_any_inbound;
}
static inline void csrtp_policy_set_ssrc_any_outbound(srtp_policy_t *policy) {
    policy->ssrc.type = ssrc_any_outbound;
}

/* The AES-ICM cipher type libsrtp registers (declared in its uninstalled crypto_kernel.h);
   allocated directly to check it against the RFC 3711 B.2 keystream. Key is 16 bytes + 14 salt. */
#include <srtp2/cipher.h>
extern const srtp_cipher_type_t srtp_aes_icm_128;
static inline srtp_err_status_t csrtp_aes_icm_128_alloc(srtp_cipher_t **cipher) {
    return srtp_cipher_type_alloc(&srtp_aes_icm_128, cipher, 30, 0);
}

#endif
