/* HMAC-SHA1 below keeps its keyed SHA-1 states as plain structs, copied per packet: the
 * SHA1_* calls are deprecated in OpenSSL 3, but every copy of an EVP digest context there
 * duplicates its provider context (an allocation per copy, several per packet). */
#define OPENSSL_SUPPRESS_DEPRECATED 1

#include "srtp_openssl.h"

#include <srtp2/srtp.h>
#include <srtp2/cipher.h>
#include <srtp2/auth.h>
#include <openssl/evp.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>

/* ---- Both ciphers: a state that starts with its EVP context ------------------------------ */

/* Allocates a cipher of `type` with a zeroed state of `state_size` octets whose first member
 * is an EVP_CIPHER_CTX pointer, made here. */
static srtp_err_status_t evp_cipher_alloc(srtp_cipher_t **cipher, const srtp_cipher_type_t *type, size_t state_size,
                                          int key_length, srtp_cipher_type_id_t algorithm) {
    srtp_cipher_t *c = calloc(1, sizeof *c);
    EVP_CIPHER_CTX **state = calloc(1, state_size);
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    if (c == NULL || state == NULL || ctx == NULL) {
        free(c);
        free(state);
        EVP_CIPHER_CTX_free(ctx);
        return srtp_err_status_alloc_fail;
    }
    *state = ctx;
    c->type = type;
    c->state = state;
    c->key_len = key_length;
    c->algorithm = algorithm;
    *cipher = c;
    return srtp_err_status_ok;
}

/* Frees what evp_cipher_alloc made, the state wiped first. */
static srtp_err_status_t evp_cipher_dealloc(srtp_cipher_t *c, size_t state_size) {
    EVP_CIPHER_CTX **state = c->state;
    if (state != NULL) {
        EVP_CIPHER_CTX_free(*state);
        OPENSSL_cleanse(state, state_size);
        free(state);
    }
    free(c);
    return srtp_err_status_ok;
}

/* ---- AES-ICM (RFC 3711 4.1.1) on AES-CTR ---------------------------------------------- */

typedef struct {
    EVP_CIPHER_CTX *ctx; /* first: see evp_cipher_alloc */
    uint8_t counter[16];
    uint8_t offset[16]; /* the salt, in the top 14 octets */
} icm_state;

static const srtp_cipher_type_t openssl_aes_icm_128;

static srtp_err_status_t icm_alloc(srtp_cipher_t **cipher, int key_length, int tag_length) {
    (void)tag_length;
    if (key_length != SRTP_AES_ICM_128_KEY_LEN_WSALT) return srtp_err_status_bad_param;
    return evp_cipher_alloc(cipher, &openssl_aes_icm_128, sizeof(icm_state), key_length, SRTP_AES_ICM_128);
}

static srtp_err_status_t icm_dealloc(srtp_cipher_t *c) { return evp_cipher_dealloc(c, sizeof(icm_state)); }

static srtp_err_status_t icm_init(void *s, const uint8_t *key) {
    icm_state *state = s;
    memset(state->counter, 0, sizeof state->counter);
    memset(state->offset, 0, sizeof state->offset);
    memcpy(state->counter, key + SRTP_AES_128_KEY_LEN, SRTP_SALT_LEN);
    memcpy(state->offset, key + SRTP_AES_128_KEY_LEN, SRTP_SALT_LEN);
    EVP_CIPHER_CTX_reset(state->ctx);
    if (EVP_EncryptInit_ex(state->ctx, EVP_aes_128_ctr(), NULL, key, NULL) != 1) return srtp_err_status_init_fail;
    return srtp_err_status_ok;
}

static srtp_err_status_t icm_set_iv(void *s, uint8_t *iv, srtp_cipher_direction_t direction) {
    (void)direction;
    icm_state *state = s;
    for (int i = 0; i < 16; i++) state->counter[i] = state->offset[i] ^ iv[i];
    if (EVP_EncryptInit_ex(state->ctx, NULL, NULL, NULL, state->counter) != 1) return srtp_err_status_init_fail;
    return srtp_err_status_ok;
}

/* The keystream goes on from where the last call left it (no final block). */
static srtp_err_status_t icm_encrypt(void *s, uint8_t *buffer, unsigned int *length) {
    icm_state *state = s;
    int out = 0;
    if (*length > 0 && EVP_EncryptUpdate(state->ctx, buffer, &out, buffer, (int)*length) != 1) return srtp_err_status_cipher_fail;
    *length = (unsigned int)out;
    return srtp_err_status_ok;
}

/* RFC 3711 B.2: the first two keystream blocks for its session key and salt. */
static const uint8_t icm_key[SRTP_AES_ICM_128_KEY_LEN_WSALT] = {
    0x2b, 0x7e, 0x15, 0x16, 0x28, 0xae, 0xd2, 0xa6, 0xab, 0xf7, 0x15, 0x88, 0x09, 0xcf, 0x4f, 0x3c,
    0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd};
static uint8_t icm_iv[16] = {0};
static const uint8_t icm_plaintext[32] = {0};
static const uint8_t icm_ciphertext[32] = {
    0xe0, 0x3e, 0xad, 0x09, 0x35, 0xc9, 0x5e, 0x80, 0xe1, 0x66, 0xb1, 0x6d, 0xd9, 0x2b, 0x4e, 0xb4,
    0xd2, 0x35, 0x13, 0x16, 0x2b, 0x02, 0xd0, 0xf7, 0x2a, 0x43, 0xa2, 0xfe, 0x4a, 0x5f, 0x97, 0xab};
static const srtp_cipher_test_case_t icm_test = {
    SRTP_AES_ICM_128_KEY_LEN_WSALT, icm_key, icm_iv, 32, icm_plaintext, 32, icm_ciphertext, 0, NULL, 0, NULL};

static const srtp_cipher_type_t openssl_aes_icm_128 = {
    icm_alloc, icm_dealloc, icm_init, NULL, icm_encrypt, icm_encrypt, icm_set_iv, NULL,
    "AES-128 counter mode (OpenSSL)", &icm_test, SRTP_AES_ICM_128};

/* ---- AEAD_AES_128_GCM (RFC 7714) -------------------------------------------------------- */

typedef struct {
    EVP_CIPHER_CTX *ctx; /* first: see evp_cipher_alloc */
    int tag_length;
    int encrypting; /* 1 encrypt, 0 decrypt, -1 no IV set yet */
} gcm_state;

static const srtp_cipher_type_t openssl_aes_gcm_128;

static srtp_err_status_t gcm_alloc(srtp_cipher_t **cipher, int key_length, int tag_length) {
    if (key_length != SRTP_AES_GCM_128_KEY_LEN_WSALT) return srtp_err_status_bad_param;
    if (tag_length != 16 && tag_length != 8) return srtp_err_status_bad_param;
    srtp_err_status_t status = evp_cipher_alloc(cipher, &openssl_aes_gcm_128, sizeof(gcm_state), key_length, SRTP_AES_GCM_128);
    if (status != srtp_err_status_ok) return status;
    gcm_state *state = (*cipher)->state;
    state->tag_length = tag_length;
    state->encrypting = -1;
    return srtp_err_status_ok;
}

static srtp_err_status_t gcm_dealloc(srtp_cipher_t *c) { return evp_cipher_dealloc(c, sizeof(gcm_state)); }

/* The key is the first 16 octets; libsrtp makes the IV from the salt itself. */
static srtp_err_status_t gcm_init(void *s, const uint8_t *key) {
    gcm_state *state = s;
    state->encrypting = -1;
    EVP_CIPHER_CTX_reset(state->ctx);
    if (EVP_CipherInit_ex(state->ctx, EVP_aes_128_gcm(), NULL, key, NULL, 1) != 1) return srtp_err_status_init_fail;
    return srtp_err_status_ok;
}

static srtp_err_status_t gcm_set_iv(void *s, uint8_t *iv, srtp_cipher_direction_t direction) {
    gcm_state *state = s;
    if (direction != srtp_direction_encrypt && direction != srtp_direction_decrypt) return srtp_err_status_bad_param;
    state->encrypting = direction == srtp_direction_encrypt;
    /* The default IV length of GCM is the 12 octets RFC 7714 uses. */
    if (EVP_CipherInit_ex(state->ctx, NULL, NULL, NULL, iv, state->encrypting) != 1) return srtp_err_status_init_fail;
    return srtp_err_status_ok;
}

static srtp_err_status_t gcm_set_aad(void *s, const uint8_t *aad, uint32_t length) {
    gcm_state *state = s;
    int out = 0;
    if (state->encrypting < 0) return srtp_err_status_bad_param;
    if (length > 0 && EVP_CipherUpdate(state->ctx, NULL, &out, aad, (int)length) != 1) return srtp_err_status_algo_fail;
    return srtp_err_status_ok;
}

static srtp_err_status_t gcm_encrypt(void *s, uint8_t *buffer, unsigned int *length) {
    gcm_state *state = s;
    int out = 0;
    if (state->encrypting != 1) return srtp_err_status_bad_param;
    if (*length > 0 && EVP_CipherUpdate(state->ctx, buffer, &out, buffer, (int)*length) != 1) return srtp_err_status_cipher_fail;
    *length = (unsigned int)out;
    return srtp_err_status_ok;
}

/* Ends the encryption and writes the tag. */
static srtp_err_status_t gcm_get_tag(void *s, uint8_t *tag, uint32_t *length) {
    gcm_state *state = s;
    uint8_t rest[16];
    int out = 0;
    if (state->encrypting != 1) return srtp_err_status_bad_param;
    if (EVP_CipherFinal_ex(state->ctx, rest, &out) != 1) return srtp_err_status_algo_fail;
    if (EVP_CIPHER_CTX_ctrl(state->ctx, EVP_CTRL_GCM_GET_TAG, state->tag_length, tag) != 1) return srtp_err_status_algo_fail;
    *length = (uint32_t)state->tag_length;
    return srtp_err_status_ok;
}

/* Decrypts in place what precedes the tag at the buffer's end and checks the tag. */
static srtp_err_status_t gcm_decrypt(void *s, uint8_t *buffer, unsigned int *length) {
    gcm_state *state = s;
    uint8_t rest[16];
    int out = 0, final = 0;
    if (state->encrypting != 0) return srtp_err_status_bad_param;
    if (*length < (unsigned int)state->tag_length) return srtp_err_status_bad_param;
    unsigned int payload = *length - (unsigned int)state->tag_length;
    if (EVP_CIPHER_CTX_ctrl(state->ctx, EVP_CTRL_GCM_SET_TAG, state->tag_length, buffer + payload) != 1) return srtp_err_status_auth_fail;
    if (payload > 0 && EVP_CipherUpdate(state->ctx, buffer, &out, buffer, (int)payload) != 1) return srtp_err_status_auth_fail;
    if (EVP_CipherFinal_ex(state->ctx, rest, &final) != 1) return srtp_err_status_auth_fail;
    *length = payload;
    return srtp_err_status_ok;
}

/* RFC 7714 16.1.1's key, IV, AAD and plaintext; the sealed output from an independent AES-GCM. */
static const uint8_t gcm_key[SRTP_AES_GCM_128_KEY_LEN_WSALT] = {
    0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f,
    0x51, 0x75, 0x3c, 0x65, 0x80, 0xc2, 0x72, 0x6f, 0x20, 0x71, 0x84, 0x14};
static uint8_t gcm_iv[12] = {0x51, 0x75, 0x3c, 0x65, 0x80, 0xc2, 0x72, 0x6f, 0x20, 0x71, 0x84, 0x14};
static const uint8_t gcm_aad[12] = {0x80, 0x40, 0xf1, 0x7b, 0x80, 0x41, 0xf8, 0xd3, 0x55, 0x01, 0xa0, 0xb2};
static const uint8_t gcm_plaintext[25] = {
    0x47, 0x61, 0x6c, 0x6c, 0x69, 0x61, 0x20, 0x65, 0x73, 0x74, 0x20, 0x6f, 0x6d,
    0x6e, 0x69, 0x73, 0x20, 0x64, 0x69, 0x76, 0x69, 0x73, 0x61, 0x20, 0x69};
static const uint8_t gcm_ciphertext[41] = {
    0xf2, 0x4d, 0xe3, 0xa3, 0xfb, 0x34, 0xde, 0x6c, 0xac, 0xba, 0x86, 0x1c, 0x9d, 0x7e,
    0x4b, 0xca, 0xbe, 0x63, 0x3b, 0xd5, 0x0d, 0x29, 0x4e, 0x6f, 0x42, 0xa4, 0x62, 0x3d,
    0x88, 0x0d, 0x36, 0x70, 0x56, 0xe9, 0xed, 0x11, 0xc0, 0x6d, 0xf1, 0x26, 0x21};
static const srtp_cipher_test_case_t gcm_test = {
    SRTP_AES_GCM_128_KEY_LEN_WSALT, gcm_key, gcm_iv, 25, gcm_plaintext, 41, gcm_ciphertext, 12, gcm_aad, 16, NULL};

static const srtp_cipher_type_t openssl_aes_gcm_128 = {
    gcm_alloc, gcm_dealloc, gcm_init, gcm_set_aad, gcm_encrypt, gcm_decrypt, gcm_set_iv, gcm_get_tag,
    "AES-128 GCM (OpenSSL)", &gcm_test, SRTP_AES_GCM_128};

/* ---- HMAC-SHA1 (RFC 2104) --------------------------------------------------------------- */

typedef struct {
    SHA_CTX inner; /* after the key XOR ipad block */
    SHA_CTX outer; /* after the key XOR opad block */
    SHA_CTX message;
} hmac_state;

static const srtp_auth_type_t openssl_hmac_sha1;

static srtp_err_status_t hmac_alloc(srtp_auth_t **auth, int key_length, int out_length) {
    if (key_length < 0 || key_length > 20 || out_length < 0 || out_length > 20) return srtp_err_status_bad_param;
    srtp_auth_t *a = calloc(1, sizeof *a);
    hmac_state *state = calloc(1, sizeof *state);
    if (a == NULL || state == NULL) {
        free(a);
        free(state);
        return srtp_err_status_alloc_fail;
    }
    a->type = &openssl_hmac_sha1;
    a->state = state;
    a->out_len = out_length;
    a->key_len = key_length;
    a->prefix_len = 0;
    *auth = a;
    return srtp_err_status_ok;
}

static srtp_err_status_t hmac_dealloc(srtp_auth_t *a) {
    if (a->state != NULL) {
        OPENSSL_cleanse(a->state, sizeof(hmac_state));
        free(a->state);
    }
    free(a);
    return srtp_err_status_ok;
}

/* Keys are at most 20 octets, shorter than SHA-1's 64-octet block: no key hashing. */
static srtp_err_status_t hmac_init(void *s, const uint8_t *key, int key_length) {
    hmac_state *state = s;
    uint8_t pad[64];
    if (key_length < 0 || key_length > 20) return srtp_err_status_bad_param;
    memset(pad, 0x36, sizeof pad);
    for (int i = 0; i < key_length; i++) pad[i] ^= key[i];
    if (SHA1_Init(&state->inner) != 1 || SHA1_Update(&state->inner, pad, sizeof pad) != 1) return srtp_err_status_init_fail;
    memset(pad, 0x5c, sizeof pad);
    for (int i = 0; i < key_length; i++) pad[i] ^= key[i];
    if (SHA1_Init(&state->outer) != 1 || SHA1_Update(&state->outer, pad, sizeof pad) != 1) return srtp_err_status_init_fail;
    OPENSSL_cleanse(pad, sizeof pad);
    state->message = state->inner;
    return srtp_err_status_ok;
}

/* A new message under the same key. */
static srtp_err_status_t hmac_start(void *s) {
    hmac_state *state = s;
    state->message = state->inner;
    return srtp_err_status_ok;
}

static srtp_err_status_t hmac_update(void *s, const uint8_t *buffer, int length) {
    hmac_state *state = s;
    if (length > 0 && SHA1_Update(&state->message, buffer, (size_t)length) != 1) return srtp_err_status_auth_fail;
    return srtp_err_status_ok;
}

static srtp_err_status_t hmac_compute(void *s, const uint8_t *buffer, int length, int tag_length, uint8_t *tag) {
    hmac_state *state = s;
    uint8_t digest[SHA_DIGEST_LENGTH];
    SHA_CTX outer = state->outer;
    if (tag_length < 0 || tag_length > SHA_DIGEST_LENGTH) return srtp_err_status_bad_param;
    if (hmac_update(state, buffer, length) != srtp_err_status_ok) return srtp_err_status_auth_fail;
    if (SHA1_Final(digest, &state->message) != 1 || SHA1_Update(&outer, digest, sizeof digest) != 1 ||
        SHA1_Final(digest, &outer) != 1) return srtp_err_status_auth_fail;
    memcpy(tag, digest, (size_t)tag_length);
    OPENSSL_cleanse(digest, sizeof digest);
    state->message = state->inner;
    return srtp_err_status_ok;
}

/* RFC 2202 test case 1. */
static const uint8_t hmac_key[20] = {
    0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b, 0x0b};
static const uint8_t hmac_data[8] = {'H', 'i', ' ', 'T', 'h', 'e', 'r', 'e'};
static const uint8_t hmac_tag[20] = {
    0xb6, 0x17, 0x31, 0x86, 0x55, 0x05, 0x72, 0x64, 0xe2, 0x8b, 0xc0, 0xb6, 0xfb, 0x37, 0x8c, 0x8e, 0xf1, 0x46, 0xbe, 0x00};
static const srtp_auth_test_case_t hmac_test = {20, hmac_key, 8, hmac_data, 20, hmac_tag, NULL};

static const srtp_auth_type_t openssl_hmac_sha1 = {
    hmac_alloc, hmac_dealloc, hmac_init, hmac_compute, hmac_update, hmac_start,
    "HMAC-SHA1 (OpenSSL)", &hmac_test, SRTP_HMAC_SHA1};

int csrtp_use_openssl(void) {
    srtp_err_status_t status = srtp_replace_auth_type(&openssl_hmac_sha1, SRTP_HMAC_SHA1);
    if (status != srtp_err_status_ok) return status;
    status = srtp_replace_cipher_type(&openssl_aes_icm_128, SRTP_AES_ICM_128);
    if (status != srtp_err_status_ok) return status;
    return srtp_replace_cipher_type(&openssl_aes_gcm_128, SRTP_AES_GCM_128);
}
