/* host_hash (host_hash.h) from os/hostinfo.h's name and namespace list, hashed with SHA-256 where
 * the reference uses MD5. A namespace list too long for its buffer is used as far as it goes: the
 * hash stays deterministic. */
#include "runner/discovery/host_hash.h"

#include "common/error.h"
#include "crypto/hmac.h"
#include "crypto/secret.h"
#include "os/hostinfo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hvd__host_hash_compute(const char *hostname, const char *namespaces, const char *salt,
                            char *out, size_t out_size) {
    int with_salt = salt && *salt;
    size_t len = strlen(hostname) + 1 + strlen(namespaces) + (with_salt ? 1 + strlen(salt) : 0);
    char *text = malloc(len + 1);
    uint8_t digest[32] = {0};
    if (text) {
        snprintf(text, len + 1, "%s-%s%s%s", hostname, namespaces, with_salt ? "-" : "",
                 with_salt ? salt : "");
        hvd__sha256(text, len, digest);
        free(text);
    }
    char hex[2 * 16 + 1];
    hvd__hex_encode(digest, 16, hex);
    size_t short_len = strcspn(hostname, ".");
    snprintf(out, out_size, "%.*s-%s", (int)short_len, hostname, hex);
}

hvd_status_t hvd__host_hash(const char *salt, char *out, size_t out_size) {
    char name[256], ns[2048];
    hvd_status_t st = hvd__hostinfo_name(name, sizeof name);
    if (st != HVD_OK)
        return st;
    /* A namespace list that does not fit is used as far as it goes: still deterministic. */
    (void)hvd__hostinfo_namespaces(ns, sizeof ns);
    hvd__host_hash_compute(name, ns, salt, out, out_size);
    return HVD_OK;
}
