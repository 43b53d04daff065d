#ifndef CSSL_SHIM_H
#define CSSL_SHIM_H

/* OpenSSL for DTLS-SRTP (RFC 5763/5764). Several of the calls DTLS needs are macros over
   SSL_ctrl/BIO_ctrl that Swift cannot import; these helpers give them a typed shape. */
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/evp.h>

static inline int cssl_ctx_set_dtls12_only(SSL_CTX *ctx) {
    return SSL_CTX_set_min_proto_version(ctx, DTLS1_2_VERSION) == 1
        && SSL_CTX_set_max_proto_version(ctx, DTLS1_2_VERSION) == 1;
}

#include <string.h>

/* The fingerprint a peer's certificate must have (from its SDP's a=fingerprint), and the one it
   presented. Attached to the SSL as its app data. */
typedef struct {
    const EVP_MD *md;
    unsigned char expected[EVP_MAX_MD_SIZE];
    unsigned int expected_length;
    unsigned char presented[EVP_MAX_MD_SIZE];
    unsigned int presented_length;
    int mismatch;
} cssl_fingerprint_check;

/* Certificates are self-signed (RFC 5763 §5): no chain is trusted, only the fingerprint the
   signaling carried. Checked during the handshake, so a mismatch aborts it with an alert
   before this side sends its Finished. */
static int cssl_verify_fingerprint(int preverify_ok, X509_STORE_CTX *store) {
    (void)preverify_ok;
    if (X509_STORE_CTX_get_error_depth(store) != 0) return 1;
    SSL *ssl = (SSL *)X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx());
    cssl_fingerprint_check *check = ssl ? (cssl_fingerprint_check *)SSL_get_app_data(ssl) : NULL;
    X509 *certificate = X509_STORE_CTX_get_current_cert(store);
    if (check == NULL || certificate == NULL) return 0;
    unsigned int length = 0;
    if (!X509_digest(certificate, check->md, check->presented, &length)) return 0;
    check->presented_length = length;
    if (length != check->expected_length || memcmp(check->presented, check->expected, length) != 0) {
        check->mismatch = 1;
        X509_STORE_CTX_set_error(store, X509_V_ERR_CERT_REJECTED);
        return 0;
    }
    return 1;
}

static inline void cssl_require_fingerprint(SSL *ssl, cssl_fingerprint_check *check) {
    SSL_set_app_data(ssl, check);
    SSL_set_verify(ssl, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, cssl_verify_fingerprint);
}

/* Records are sized for the path MTU the node sets; OpenSSL must not ask the memory BIO. */
static inline void cssl_set_mtu(SSL *ssl, long mtu) {
    SSL_set_options(ssl, SSL_OP_NO_QUERY_MTU);
    DTLS_set_link_mtu(ssl, mtu);
    SSL_set_mtu(ssl, mtu);
}

/* An empty memory BIO means "no datagram yet", not end of file. */
static inline void cssl_bio_set_mem_eof_return(BIO *bio, int value) {
    BIO_set_mem_eof_return(bio, value);
}

static inline long cssl_bio_pending(BIO *bio) {
    return (long)BIO_ctrl_pending(bio);
}

/* The DTLS retransmission timer: 1 and the time left until it fires, or 0 when none runs. */
static inline int cssl_dtls_get_timeout(SSL *ssl, long *seconds, long *microseconds) {
    struct timeval left = {0, 0};
    int running = (int)DTLSv1_get_timeout(ssl, &left);
    *seconds = (long)left.tv_sec;
    *microseconds = (long)left.tv_usec;
    return running;
}

static inline int cssl_dtls_handle_timeout(SSL *ssl) {
    return (int)DTLSv1_handle_timeout(ssl);
}

/* Retransmission paced for lossy paths rather than OpenSSL's default (1 s doubling to 60 s, so a
 * handshake through heavy loss waits 1 + 2 + 4 + 8 s between tries and runs out of time): the
 * first flight is resent after 250 ms, then 500 ms, four times after 1 s, three after 2 s, then
 * every 5 s. OpenSSL gives a flight up after 12 resends: with this pacing that is 25.75 s, so a
 * peer whose path comes late (its ICE still checking, or restarting) is still answered within a
 * handshake's 30 s. The step is carried in the microseconds (1000001 is the second 1 s wait):
 * the callback sees only the last wait. */
static inline unsigned int cssl_dtls_timer(SSL *ssl, unsigned int previous_us) {
    (void)ssl;
    switch (previous_us) {
    case 0: return 250000;
    case 250000: return 500000;
    case 500000: return 1000000;
    case 1000000: return 1000001;
    case 1000001: return 1000002;
    case 1000002: return 1000003;
    case 1000003: return 2000000;
    case 2000000: return 2000001;
    case 2000001: return 2000002;
    default: return 5000000;
    }
}

static inline void cssl_set_dtls_timer(SSL *ssl) {
    DTLS_set_timer_cb(ssl, cssl_dtls_timer);
}

#endif
