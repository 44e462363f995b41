/* The rendezvous store's data, independent of HTTP: scopes of keys holding byte values,
 * with bounds checked before anything is allocated, and Horovod's "finished" semantics for
 * the predefined scopes that the launcher sizes from the slot plan. Thread safe. */
#ifndef HVD_RENDEZVOUS_KV_STORE_H
#define HVD_RENDEZVOUS_KV_STORE_H

#include <hvd/types.h>

#include <stddef.h>
#include <stdint.h>

typedef struct hvd_kv_store hvd_kv_store_t;

typedef struct {
    size_t max_value_bytes; /* one value */
    size_t max_total_bytes; /* keys + values of the whole store */
    size_t max_keys;        /* keys of the whole store */
} hvd_kv_limits_t;

/* 0 fields take the defaults of kv_protocol.h. */
hvd_status_t hvd__kv_store_create(const hvd_kv_limits_t *limits, hvd_kv_store_t **store_p);
void hvd__kv_store_destroy(hvd_kv_store_t *store);

/* Store a copy of value under scope/key (replacing any old value). HVD_ERR_TOO_LARGE when the
 * value exceeds the per-value limit, HVD_ERR_NO_MEMORY when the store's total limits would be
 * exceeded (nothing is stored in either case). */
hvd_status_t hvd__kv_store_put(hvd_kv_store_t *store, const char *scope, const char *key,
                               const void *value, size_t len);

/* A malloc'd copy of the value (NUL-terminated, the NUL not counted). HVD_ERR_NOT_FOUND. */
hvd_status_t hvd__kv_store_get(hvd_kv_store_t *store, const char *scope, const char *key,
                               uint8_t **value_p, size_t *len_p);

/* DELETE semantics: in a predefined scope, key is a rank finished with the scope; once every
 * rank of the scope's size has finished, the scope's data and its finished list are cleared
 * (only this scope's: Horovod's quirk of clearing every list is fixed). A repeated finish
 * counts once. In other scopes the key is removed, and the scope when it becomes empty. */
void hvd__kv_store_delete(hvd_kv_store_t *store, const char *scope, const char *key);

/* 1 when scope/key exists. */
int hvd__kv_store_has(hvd_kv_store_t *store, const char *scope, const char *key);

/* Number of keys in scope (0 for an unknown scope). */
size_t hvd__kv_store_count(hvd_kv_store_t *store, const char *scope);

/* The whole scope in the HVD_KV_SCOPE_MAGIC encoding (kv_protocol.h), keys in byte order;
 * *body_p is malloc'd. An unknown scope encodes as empty. */
hvd_status_t hvd__kv_store_snapshot(hvd_kv_store_t *store, const char *scope, uint8_t **body_p,
                                    size_t *len_p);

/* Clear everything and declare the predefined scopes with their sizes. */
hvd_status_t hvd__kv_store_reset(hvd_kv_store_t *store, const char *const *scopes, const int *sizes,
                                 size_t n);

#endif
