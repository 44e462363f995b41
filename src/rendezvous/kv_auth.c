/* Signing and checking rendezvous requests (kv_auth.h). The replay guard is a ring of recent
 * (nonce, timestamp) pairs in arrival order, indexed by an open-addressing set keyed on the nonce's
 * own random bytes; the MAC is checked first, so only authentic requests can fill it. */
#include "rendezvous/kv_auth.h"

#include "common/error.h"
#include "crypto/hmac.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

static const char kDomain[] = "hvd-kv-v1\n";

int64_t hvd__kv_auth_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int compute_mac(const hvd_secret_t *secret, const char *method, const char *target,
                       const char *ts, const char *nonce_hex, const void *body, size_t body_len,
                       uint8_t *mac) {
    uint8_t digest[32];
    char digest_hex[65];
    if (hvd__sha256(body ? body : "", body_len, digest) != 0)
        return -1;
    hvd__hex_encode(digest, sizeof digest, digest_hex);
    const void *parts[] = {kDomain, method, "\n",      target, "\n",
                           ts,      "\n",   nonce_hex, "\n",   digest_hex};
    size_t lens[] = {sizeof kDomain - 1,
                     strlen(method),
                     1,
                     strlen(target),
                     1,
                     strlen(ts),
                     1,
                     strlen(nonce_hex),
                     1,
                     64};
    return hvd__hmac_sha256(secret->bytes, HVD_SECRET_LEN, parts, lens, 10, mac);
}

hvd_status_t hvd__kv_auth_sign(const hvd_secret_t *secret, const char *method, const char *target,
                               const void *body, size_t body_len, char *out) {
    uint8_t nonce[HVD_KV_NONCE_LEN];
    char nonce_hex[2 * HVD_KV_NONCE_LEN + 1], ts[24], mac_hex[2 * HVD_HMAC_LEN + 1];
    uint8_t mac[HVD_HMAC_LEN];
    if (getrandom(nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce)
        return hvd__error_set(HVD_ERR_IO, "cannot draw a request nonce: %s", strerror(errno));
    hvd__hex_encode(nonce, sizeof nonce, nonce_hex);
    snprintf(ts, sizeof ts, "%" PRId64, hvd__kv_auth_now_ms());
    if (compute_mac(secret, method, target, ts, nonce_hex, body, body_len, mac) != 0)
        return hvd__error_set(HVD_ERR_IO, "HMAC-SHA256 failed while signing a request");
    hvd__hex_encode(mac, sizeof mac, mac_hex);
    snprintf(out, HVD_KV_AUTH_MAX, "HVD1 ts=%s,nonce=%s,mac=%s", ts, nonce_hex, mac_hex);
    return HVD_OK;
}

/* ---- replay guard: ring of (nonce, ts) in arrival order + open-addressing hash set ---- */

typedef struct {
    uint8_t nonce[HVD_KV_NONCE_LEN];
    int64_t ts;
} replay_entry_t;

struct hvd_kv_replay {
    pthread_mutex_t lock;
    size_t capacity, count, head; /* ring: oldest at head */
    replay_entry_t *ring;
    uint32_t *slots; /* hash set of ring indexes + 1; 0 = empty; 2x capacity, power of two */
    size_t nslots;
    int64_t window_ms;
    int64_t floor_ts; /* timestamps <= floor are refused (their nonces may have been evicted) */
};

hvd_status_t hvd__kv_replay_create(size_t capacity, int64_t window_ms, hvd_kv_replay_t **replay_p) {
    if (capacity == 0 || capacity > (1u << 24))
        return hvd__error_set(HVD_ERR_INVALID_ARG, "replay capacity %zu out of range", capacity);
    hvd_kv_replay_t *r = calloc(1, sizeof *r);
    if (!r)
        goto err_nomem;
    r->nslots = 1;
    while (r->nslots < 2 * capacity)
        r->nslots <<= 1;
    r->ring = calloc(capacity, sizeof *r->ring);
    r->slots = calloc(r->nslots, sizeof *r->slots);
    if (!r->ring || !r->slots)
        goto err_free;
    r->capacity = capacity;
    r->window_ms = window_ms;
    r->floor_ts = INT64_MIN;
    pthread_mutex_init(&r->lock, NULL);
    *replay_p = r;
    return HVD_OK;
err_free:
    free(r->ring);
    free(r->slots);
    free(r);
err_nomem:
    return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory creating the replay guard");
}

void hvd__kv_replay_destroy(hvd_kv_replay_t *r) {
    if (!r)
        return;
    pthread_mutex_destroy(&r->lock);
    free(r->ring);
    free(r->slots);
    free(r);
}

static size_t nonce_hash(const uint8_t *nonce, size_t mask) {
    uint64_t h;
    memcpy(&h, nonce, sizeof h); /* nonces are random: their bytes are already a hash */
    return (size_t)h & mask;
}

/* Slot holding nonce, or the empty slot where it would go. */
static size_t find_slot(hvd_kv_replay_t *r, const uint8_t *nonce) {
    size_t mask = r->nslots - 1, i = nonce_hash(nonce, mask);
    while (r->slots[i] && memcmp(r->ring[r->slots[i] - 1].nonce, nonce, HVD_KV_NONCE_LEN) != 0)
        i = (i + 1) & mask;
    return i;
}

/* Remove the slot at i from linear probing without leaving a hole in any probe chain. */
static void erase_slot(hvd_kv_replay_t *r, size_t i) {
    size_t mask = r->nslots - 1, j = i;
    r->slots[i] = 0;
    for (;;) {
        j = (j + 1) & mask;
        if (!r->slots[j])
            return;
        size_t k = nonce_hash(r->ring[r->slots[j] - 1].nonce, mask);
        /* move j back to i if its home k is not cyclically within (i, j] */
        if ((i <= j) ? (k <= i || k > j) : (k <= i && k > j)) {
            r->slots[i] = r->slots[j];
            r->slots[j] = 0;
            i = j;
        }
    }
}

static int replay_check_and_add(hvd_kv_replay_t *r, const uint8_t *nonce, int64_t ts) {
    int fresh = 0;
    pthread_mutex_lock(&r->lock);
    if (ts <= r->floor_ts)
        goto out;
    size_t slot = find_slot(r, nonce);
    if (r->slots[slot])
        goto out;
    size_t idx;
    if (r->count == r->capacity) {
        idx = r->head;
        replay_entry_t *old = &r->ring[idx];
        if (old->ts > r->floor_ts)
            r->floor_ts = old->ts;
        erase_slot(r, find_slot(r, old->nonce));
        r->head = (r->head + 1) % r->capacity;
        r->count--;
        slot = find_slot(r, nonce); /* the erase may have moved entries */
    } else {
        idx = (r->head + r->count) % r->capacity;
    }
    memcpy(r->ring[idx].nonce, nonce, HVD_KV_NONCE_LEN);
    r->ring[idx].ts = ts;
    r->slots[slot] = (uint32_t)idx + 1;
    r->count++;
    fresh = ts > r->floor_ts;
out:
    pthread_mutex_unlock(&r->lock);
    return fresh;
}

/* Parse "HVD1 ts=<digits>,nonce=<32 hex>,mac=<64 hex>" exactly. */
static int parse_header(const char *h, char *ts, size_t ts_size, char *nonce_hex, char *mac_hex) {
    if (strlen(h) >= HVD_KV_AUTH_MAX || strncmp(h, "HVD1 ts=", 8) != 0)
        return -1;
    const char *p = h + 8;
    size_t n = 0;
    while (p[n] >= '0' && p[n] <= '9')
        n++;
    if (n == 0 || n >= ts_size || strncmp(p + n, ",nonce=", 7) != 0)
        return -1;
    memcpy(ts, p, n);
    ts[n] = '\0';
    p += n + 7;
    if (strlen(p) != 2 * HVD_KV_NONCE_LEN + 5 + 2 * HVD_HMAC_LEN ||
        strncmp(p + 2 * HVD_KV_NONCE_LEN, ",mac=", 5) != 0)
        return -1;
    memcpy(nonce_hex, p, 2 * HVD_KV_NONCE_LEN);
    nonce_hex[2 * HVD_KV_NONCE_LEN] = '\0';
    memcpy(mac_hex, p + 2 * HVD_KV_NONCE_LEN + 5, 2 * HVD_HMAC_LEN);
    mac_hex[2 * HVD_HMAC_LEN] = '\0';
    return 0;
}

hvd_kv_auth_result_t hvd__kv_auth_verify(const hvd_secret_t *secret, hvd_kv_replay_t *replay,
                                         const char *header, const char *method, const char *target,
                                         const void *body, size_t body_len, int64_t now_ms) {
    char ts[20], nonce_hex[2 * HVD_KV_NONCE_LEN + 1], mac_hex[2 * HVD_HMAC_LEN + 1];
    uint8_t nonce[HVD_KV_NONCE_LEN], mac[HVD_HMAC_LEN], expect[HVD_HMAC_LEN];
    if (!header)
        return HVD_KV_AUTH_MISSING;
    if (parse_header(header, ts, sizeof ts, nonce_hex, mac_hex) != 0 ||
        hvd__hex_decode(nonce_hex, 2 * HVD_KV_NONCE_LEN, nonce) != 0 ||
        hvd__hex_decode(mac_hex, 2 * HVD_HMAC_LEN, mac) != 0)
        return HVD_KV_AUTH_MALFORMED;
    if (compute_mac(secret, method, target, ts, nonce_hex, body, body_len, expect) != 0 ||
        !hvd__crypto_equal(mac, expect, sizeof mac))
        return HVD_KV_AUTH_BAD_MAC;
    /* Only an authentic request may touch the replay guard, so strangers cannot fill it. */
    int64_t t = strtoll(ts, NULL, 10);
    int64_t window = replay ? replay->window_ms : HVD_KV_AUTH_WINDOW_MS;
    if (t < now_ms - window || t > now_ms + window)
        return HVD_KV_AUTH_STALE;
    if (replay && !replay_check_and_add(replay, nonce, t))
        return HVD_KV_AUTH_REPLAYED;
    return HVD_KV_AUTH_OK;
}

const char *hvd__kv_auth_result_str(hvd_kv_auth_result_t result) {
    switch (result) {
    case HVD_KV_AUTH_OK:
        return "authenticated";
    case HVD_KV_AUTH_MISSING:
        return "missing Authorization header";
    case HVD_KV_AUTH_MALFORMED:
        return "malformed Authorization header";
    case HVD_KV_AUTH_BAD_MAC:
        return "signature does not match the job secret";
    case HVD_KV_AUTH_STALE:
        return "request timestamp outside the accepted window";
    case HVD_KV_AUTH_REPLAYED:
        return "request replayed (nonce already used)";
    }
    return "unknown";
}
