/* The rendezvous store's data, independent of HTTP: scopes of keys holding byte values.
 *
 * Scopes and keys live in chained hash tables (O(1) per operation, 1M keys without quadratic
 * work); a scope's byte-ordered key list is built on demand for snapshots and cached until the
 * scope's key set changes. Values and snapshots are immutable reference-counted blobs, so a
 * thousand readers of one scope share one encoding and a reader keeps its bytes even if the
 * key is overwritten meanwhile.
 *
 * Bounds (value size, total key+value bytes, number of keys) are checked before anything is
 * allocated. Predefined scopes (sized by the launcher's slot plan) follow Horovod's "finished"
 * DELETE semantics, per scope (see hvd__kv_store_delete).
 *
 * Thread safety: every function may be called from any thread; one mutex guards the store.
 * Every change bumps a version counter; PUTs and resets also call the notify callback and wake
 * hvd__kv_store_wait, which is how the HTTP server releases its held requests. */
#ifndef HVD_RUNNER_RENDEZVOUS_KV_STORE_H
#define HVD_RUNNER_RENDEZVOUS_KV_STORE_H

#include <hvd/types.h>

#include <stddef.h>
#include <stdint.h>

typedef struct hvd_kv_store hvd_kv_store_t;

typedef struct {
    size_t max_value_bytes; /* one value; at most UINT32_MAX (the snapshot encoding's field) */
    size_t max_total_bytes; /* keys + values of the whole store */
    size_t max_keys;        /* keys of the whole store */
} hvd_kv_limits_t;

/* An immutable byte string shared by reference (a stored value or an encoded scope). The
 * bytes are followed by a NUL that is not counted in the length. */
typedef struct hvd_kv_blob hvd_kv_blob_t;

const uint8_t *hvd__kv_blob_data(const hvd_kv_blob_t *blob);
size_t hvd__kv_blob_len(const hvd_kv_blob_t *blob);
/* Drop one reference; the last one frees the blob. NULL is a no-op. Any thread. */
void hvd__kv_blob_unref(hvd_kv_blob_t *blob);

/* Create an empty store. limits may be NULL; 0 fields take the defaults of kv_protocol.h.
 * HVD_ERR_INVALID_ARG if max_value_bytes exceeds UINT32_MAX, HVD_ERR_NO_MEMORY. The caller
 * owns the store and frees it with hvd__kv_store_destroy (NULL-safe), after every other
 * thread has stopped using it; outstanding blobs stay valid after the store is gone. */
hvd_status_t hvd__kv_store_create(const hvd_kv_limits_t *limits, hvd_kv_store_t **store_p);
void hvd__kv_store_destroy(hvd_kv_store_t *store);

/* Called with the store's lock held after every PUT (its scope and key, and the scope's key
 * count after it) and reset (scope and key NULL: everything may have changed), so that a
 * listener can wake exactly the readers the change satisfies. It must not call back into the
 * store. */
typedef void (*hvd_kv_store_notify_fn)(void *arg, const char *scope, const char *key,
                                       size_t scope_count);

/* Install the notify callback (NULL to remove). Set it before other threads use the store. */
void hvd__kv_store_set_notify(hvd_kv_store_t *store, hvd_kv_store_notify_fn fn, void *arg);

/* Store a copy of value[0..len) under scope/key, replacing any old value; the caller keeps
 * value. Statuses: HVD_ERR_INVALID_ARG (a name is not valid per kv_protocol.h),
 * HVD_ERR_TOO_LARGE (over the per-value limit), HVD_ERR_NO_MEMORY (the store's key or byte
 * limit would be exceeded, or malloc failed). Nothing changes on error. Does not block
 * beyond the store's lock. */
hvd_status_t hvd__kv_store_put(hvd_kv_store_t *store, const char *scope, const char *key,
                               const void *value, size_t len);

/* A malloc'd copy of the value (NUL-terminated, the NUL not counted in *len_p); the caller
 * frees it. HVD_ERR_NOT_FOUND, HVD_ERR_NO_MEMORY. */
hvd_status_t hvd__kv_store_get(hvd_kv_store_t *store, const char *scope, const char *key,
                               uint8_t **value_p, size_t *len_p);

/* The stored value itself, with one reference for the caller (release with
 * hvd__kv_blob_unref). HVD_ERR_NOT_FOUND. */
hvd_status_t hvd__kv_store_get_blob(hvd_kv_store_t *store, const char *scope, const char *key,
                                    hvd_kv_blob_t **blob_p);

/* DELETE semantics (kv_protocol.h). In a predefined scope, key is a rank (decimal, below the
 * scope's size) that finished with the scope; once every rank has, the scope's data and its
 * own finished list are cleared (Horovod cleared every scope's list: fixed). A repeated
 * finish counts once; a key that is not such a rank is ignored. In any other scope the key is
 * removed, and the scope with its last key. A missing key or scope is not an error.
 * HVD_ERR_INVALID_ARG for invalid names. */
hvd_status_t hvd__kv_store_delete(hvd_kv_store_t *store, const char *scope, const char *key);

/* 1 when scope/key exists. */
int hvd__kv_store_has(hvd_kv_store_t *store, const char *scope, const char *key);

/* Number of keys in scope (0 for an unknown scope). */
size_t hvd__kv_store_count(hvd_kv_store_t *store, const char *scope);

/* Milliseconds since the last PUT into scope; -1 when it has none since it was created or
 * cleared. */
int64_t hvd__kv_store_scope_age_ms(hvd_kv_store_t *store, const char *scope);

/* Keys and key+value bytes in the whole store. */
void hvd__kv_store_usage(hvd_kv_store_t *store, size_t *keys_p, size_t *bytes_p);

/* The whole scope in the HVD_KV_SCOPE_MAGIC encoding (kv_protocol.h), keys in byte order. An
 * unknown scope encodes as empty. The encoding is cached per scope until the scope changes.
 * _blob gives a reference to the shared encoding; the other a malloc'd copy the caller frees.
 * HVD_ERR_NO_MEMORY. */
hvd_status_t hvd__kv_store_snapshot_blob(hvd_kv_store_t *store, const char *scope,
                                         hvd_kv_blob_t **blob_p);
hvd_status_t hvd__kv_store_snapshot(hvd_kv_store_t *store, const char *scope, uint8_t **body_p,
                                    size_t *len_p);

/* Clear every scope, key and finished list, then declare the predefined scopes names[i] with
 * sizes[i] ranks (launcher: global, local_<host>, cross_<local_rank>). The arguments are
 * checked first (valid distinct names, sizes > 0): HVD_ERR_INVALID_ARG leaves the store as it
 * was. HVD_ERR_NO_MEMORY leaves it cleared. Wakes every waiter. */
hvd_status_t hvd__kv_store_reset(hvd_kv_store_t *store, const char *const *names, const int *sizes,
                                 size_t n);

/* Monotonic change counter: bumped by every PUT, DELETE and reset. */
uint64_t hvd__kv_store_version(hvd_kv_store_t *store);

/* 1 when a reader would be satisfied now: key != NULL: the key exists; key == NULL: the scope
 * has at least min_count keys, or holds HVD_KV_ABORT_KEY. *version_p (may be NULL) receives the
 * version the answer holds for: a waiter that registers and then still sees this version cannot
 * miss the change that satisfies it, because that change bumps the version before it notifies. */
int hvd__kv_store_ready(hvd_kv_store_t *store, const char *scope, const char *key, size_t min_count,
                        uint64_t *version_p);

/* Block until hvd__kv_store_ready(scope, key, min_count) or deadline_ms (hvd__clock
 * milliseconds) passes: HVD_OK or HVD_ERR_TIMEOUT naming what was missing. For the launcher's
 * own threads; the HTTP server never blocks on it. */
hvd_status_t hvd__kv_store_wait(hvd_kv_store_t *store, const char *scope, const char *key,
                                size_t min_count, int64_t deadline_ms);

#endif
