/* The workers' client of the rendezvous store (protocol in kv_protocol.h). Every request is
 * signed with the job secret (kv_auth.h). Transient failures (connection refused or reset,
 * 5xx other than 507) are retried with growing pauses until the caller's deadline, so a
 * worker that starts before the launcher's server is listening still gets through; the
 * final error names the store's address, the scope and key, and what went wrong. */
#ifndef HVD_RENDEZVOUS_STORE_CLIENT_H
#define HVD_RENDEZVOUS_STORE_CLIENT_H

#include <hvd/types.h>

#include "crypto/secret.h"

#include <stddef.h>
#include <stdint.h>

typedef struct hvd_store_client hvd_store_client_t;

typedef struct {
    char *key;
    uint8_t *value;
    size_t value_len;
} hvd_store_entry_t;

typedef struct {
    hvd_store_entry_t *entries; /* sorted by key */
    size_t count;
    size_t total;   /* keys the scope held at the answer: count, or hvd__store_count_scope's */
    int64_t age_ms; /* hvd__store_get_scope: ms since the scope's last PUT at the answer, or -1 */
} hvd_store_scope_t;

/* Create a client for the store at host:port. Copies its arguments. */
hvd_status_t hvd__store_client_create(const char *host, int port, const hvd_secret_t *secret,
                                      hvd_store_client_t **client_p);
void hvd__store_client_destroy(hvd_store_client_t *client);

/* Store value under scope/key. */
hvd_status_t hvd__store_put(hvd_store_client_t *c, const char *scope, const char *key,
                            const void *value, size_t len, int64_t deadline_ms);

/* Read scope/key. With wait, hold until the key exists or deadline_ms (then HVD_ERR_TIMEOUT
 * naming the key); without, a missing key is HVD_ERR_NOT_FOUND. *value_p is malloc'd and
 * NUL-terminated (the NUL not counted in *len_p); the caller frees it. */
hvd_status_t hvd__store_get(hvd_store_client_t *c, const char *scope, const char *key, int wait,
                            int64_t deadline_ms, uint8_t **value_p, size_t *len_p);

/* Remove scope/key (in a predefined scope: mark this rank finished with it). */
hvd_status_t hvd__store_delete(hvd_store_client_t *c, const char *scope, const char *key,
                               int64_t deadline_ms);

/* Read the whole scope in one request, waiting until it holds at least min_count keys or
 * HVD_KV_ABORT_KEY (HVD_OK: the caller looks for that key), or deadline_ms passes. When it is
 * still short at the deadline, *scope_p holds what there was and the status is
 * HVD_ERR_TIMEOUT (the caller names what is missing). Release with hvd__store_scope_fini. */
hvd_status_t hvd__store_get_scope(hvd_store_client_t *c, const char *scope, size_t min_count,
                                  int64_t deadline_ms, hvd_store_scope_t *scope_p);

/* The same wait, answered with the scope's key count (in total) instead of its contents:
 * entries hold at most HVD_KV_ABORT_KEY. A few dozen bytes however large the scope. */
hvd_status_t hvd__store_count_scope(hvd_store_client_t *c, const char *scope, size_t min_count,
                                    int64_t deadline_ms, hvd_store_scope_t *scope_p);

void hvd__store_scope_fini(hvd_store_scope_t *scope);

/* Decode a scope body (HVD_KV_SCOPE_MAGIC encoding). Exposed for tests and fuzzing. */
hvd_status_t hvd__store_scope_decode(const uint8_t *body, size_t len, hvd_store_scope_t *scope_p);

/* Decode a count answer (HVD_KV_COUNT_MAGIC encoding: total, and at most the abort key in
 * entries). Exposed for tests and fuzzing. */
hvd_status_t hvd__store_count_decode(const uint8_t *body, size_t len, hvd_store_scope_t *scope_p);

/* The entry for key, or NULL. */
const hvd_store_entry_t *hvd__store_scope_find(const hvd_store_scope_t *scope, const char *key);

#endif
