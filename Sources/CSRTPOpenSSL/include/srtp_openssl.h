#ifndef CSRTP_OPENSSL_H
#define CSRTP_OPENSSL_H

/* libsrtp's ciphers on OpenSSL's EVP contexts.
 *
 * Debian's libsrtp2 is built on NSS, whose contexts it makes and destroys for every packet
 * (a dozen allocations and a context setup each way, most of SRTP's cost). libsrtp lets a
 * program replace a cipher or authentication type with its own; these keep one OpenSSL
 * context per key, keyed once, and set only the IV per packet, as libsrtp's own OpenSSL
 * build does. libsrtp keeps everything else (key derivation, rollover counter, replay
 * window, packet layout). */

/* Replaces AES-ICM-128, AES-GCM-128 and HMAC-SHA1 in libsrtp's crypto kernel. Call once,
 * after srtp_init and before any session. libsrtp checks each replacement against its own
 * test vectors and those of the type it replaces, and refuses it if one fails; returns 0
 * when all three are in use, otherwise the libsrtp status of the first refusal (libsrtp's
 * own types then stay in use). */
int csrtp_use_openssl(void);

#endif
