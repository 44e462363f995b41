/* HMAC-SHA256, SHA-256 and constant-time comparison (hmac.h) on OpenSSL 3's EVP_MAC and EVP_Digest.
 * hvd__crypto_init runs one digest so that all of libcrypto's first-use set-up, its atexit
 * registration included, happens before the caller's own. */
#include "crypto/hmac.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/crypto.h>

int hvd__hmac_sha256(const uint8_t *key, size_t key_len, const void *const *parts,
                     const size_t *part_lens, size_t n, uint8_t *mac_p) {
    int rc = -1;
    EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (!mac)
        return -1;
    EVP_MAC_CTX *ctx = EVP_MAC_CTX_new(mac);
    if (!ctx)
        goto err_free_mac;
    char digest[] = "SHA256";
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string("digest", digest, 0),
                           OSSL_PARAM_construct_end()};
    if (!EVP_MAC_init(ctx, key, key_len, params))
        goto err_free_ctx;
    for (size_t i = 0; i < n; i++)
        if (part_lens[i] && !EVP_MAC_update(ctx, parts[i], part_lens[i]))
            goto err_free_ctx;
    size_t out_len = 0;
    if (!EVP_MAC_final(ctx, mac_p, &out_len, HVD_HMAC_LEN) || out_len != HVD_HMAC_LEN)
        goto err_free_ctx;
    rc = 0;
err_free_ctx:
    EVP_MAC_CTX_free(ctx);
err_free_mac:
    EVP_MAC_free(mac);
    return rc;
}

int hvd__sha256(const void *data, size_t len, uint8_t *digest_p) {
    unsigned int out_len = 0;
    if (!EVP_Digest(data, len, digest_p, &out_len, EVP_sha256(), NULL) || out_len != 32)
        return -1;
    return 0;
}

int hvd__crypto_equal(const void *a, const void *b, size_t len) {
    return CRYPTO_memcmp(a, b, len) == 0;
}

int hvd__crypto_init(void) {
    /* Options that are not done yet: OPENSSL_init_crypto(0) returns at once without
     * registering anything. Then one digest, so that the first use of SHA-256 (which fetches
     * the algorithm, once) is over too. */
    uint8_t d[32];
    if (OPENSSL_init_crypto(OPENSSL_INIT_LOAD_CONFIG | OPENSSL_INIT_LOAD_CRYPTO_STRINGS, NULL) != 1)
        return -1;
    return hvd__sha256("", 0, d);
}
