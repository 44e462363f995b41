/* HMAC-SHA256 and constant-time comparison, over OpenSSL's libcrypto. */
#ifndef HVD_CRYPTO_HMAC_H
#define HVD_CRYPTO_HMAC_H

#include <stddef.h>
#include <stdint.h>

#define HVD_HMAC_LEN 32

/* mac_p[32] = HMAC-SHA256(key, concatenation of the n parts). Returns 0, or -1 on failure. */
int hvd__hmac_sha256(const uint8_t *key, size_t key_len, const void *const *parts,
                     const size_t *part_lens, size_t n, uint8_t *mac_p);

/* digest_p[32] = SHA-256(data). Returns 0, or -1 on failure. */
int hvd__sha256(const void *data, size_t len, uint8_t *digest_p);

/* Initialise libcrypto now (idempotent). Its exit-time cleanup is registered with atexit on
 * first use, so a module whose own atexit handler stops a thread that signs requests calls
 * this first: handlers run in reverse order, and libcrypto must outlive that thread. Returns
 * 0, or -1 on failure. */
int hvd__crypto_init(void);

/* 1 when the two buffers are equal, compared in time independent of their contents. */
int hvd__crypto_equal(const void *a, const void *b, size_t len);

#endif
