/* Authentication of rendezvous requests with the job secret.
 *
 * The secret itself never travels: each request carries
 *   Authorization: HVD1 ts=<unix ms>,nonce=<32 hex>,mac=<64 hex>
 * where mac = HMAC-SHA256(secret, "hvd-kv-v1\n" METHOD "\n" TARGET "\n" ts "\n" nonce "\n"
 * hex(SHA-256(body))). TARGET is the request path with its query string. The server rejects a
 * timestamp outside its window and a nonce it has seen, so a captured request cannot be
 * replayed. Responses to a request without the header are 401; to a bad one, 403. */
#ifndef HVD_RENDEZVOUS_KV_AUTH_H
#define HVD_RENDEZVOUS_KV_AUTH_H

#include "crypto/secret.h"

#include <stddef.h>
#include <stdint.h>

#define HVD_KV_AUTH_HEADER "Authorization"
/* Upper bound of the header value; longer values are malformed. */
#define HVD_KV_AUTH_MAX 192
#define HVD_KV_NONCE_LEN 16
/* Default accepted clock difference between client and server. */
#define HVD_KV_AUTH_WINDOW_MS (120 * 1000)

typedef enum {
    HVD_KV_AUTH_OK = 0,
    HVD_KV_AUTH_MISSING,   /* no header: 401 */
    HVD_KV_AUTH_MALFORMED, /* 403 */
    HVD_KV_AUTH_BAD_MAC,   /* 403 */
    HVD_KV_AUTH_STALE,     /* timestamp outside the window: 403 */
    HVD_KV_AUTH_REPLAYED   /* nonce seen before: 403 */
} hvd_kv_auth_result_t;

/* Wall-clock milliseconds since the epoch (the timestamp the scheme signs). */
int64_t hvd__kv_auth_now_ms(void);

/* Write the header value for a request into out[HVD_KV_AUTH_MAX]. A fresh random nonce is
 * drawn. Returns HVD_OK, or HVD_ERR_IO if no randomness or HMAC is available. */
hvd_status_t hvd__kv_auth_sign(const hvd_secret_t *secret, const char *method, const char *target,
                               const void *body, size_t body_len, char *out);

/* Remembers recently seen nonces within a bounded capacity. When full, the oldest entry is
 * evicted and its timestamp becomes a floor: anything signed at or before it is refused, so
 * an evicted nonce can never be replayed. Thread safe. */
typedef struct hvd_kv_replay hvd_kv_replay_t;

hvd_status_t hvd__kv_replay_create(size_t capacity, int64_t window_ms, hvd_kv_replay_t **replay_p);
void hvd__kv_replay_destroy(hvd_kv_replay_t *replay);

/* Check a request's header value (NULL when absent) against the secret and the replay guard.
 * now_ms is hvd__kv_auth_now_ms() (a parameter so tests can move the clock). */
hvd_kv_auth_result_t hvd__kv_auth_verify(const hvd_secret_t *secret, hvd_kv_replay_t *replay,
                                         const char *header, const char *method, const char *target,
                                         const void *body, size_t body_len, int64_t now_ms);

/* Human-readable reason ("missing Authorization header", ...). */
const char *hvd__kv_auth_result_str(hvd_kv_auth_result_t result);

#endif
