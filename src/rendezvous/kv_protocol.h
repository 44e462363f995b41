/* The rendezvous store's HTTP protocol, shared by the server (launcher) and the store client
 * (libhvd). Reference section 4 describes Horovod's original; hvd keeps its URL layout and
 * status codes and adds authentication, waiting reads, whole-scope reads and size bounds.
 *
 *   Every request carries the Authorization header of kv_auth.h. Missing: 401; wrong: 403.
 *   Names: scope and key are 1..HVD_KV_NAME_MAX characters of [A-Za-z0-9_.:-]. Any other path
 *   (fewer or more than two segments, other characters, a query string) is 400.
 *
 *   PUT /<scope>/<key>     body = value (Content-Length required, else 411); stored, 200.
 *                          A value over the server's limit: 413, nothing stored. Store full
 *                          (total bytes or keys): 507, nothing stored.
 *   GET /<scope>/<key>     200 with the value, or 404. With header X-Hvd-Wait-Ms: N the server
 *                          holds the request until the key is PUT or N ms pass (then 404).
 *   GET /<scope>/          the whole scope in one response (HVD_KV_SCOPE_MAGIC encoding, keys
 *                          in byte order), 200 (an unknown scope is an empty one). With
 *                          X-Hvd-Wait-Ms: N and X-Hvd-Min-Count: C the server holds the request
 *                          until the scope has at least C keys or N ms pass, then answers 200
 *                          with what it has (the client sees which keys are missing). A key
 *                          named HVD_KV_ABORT_KEY ends the wait at once: the launcher's word
 *                          that the scope will never fill (its value says why). Every scope
 *                          answer carries HVD_KV_AGE_HEADER: the milliseconds since the last
 *                          PUT into the scope (-1: none), so that a client can time out
 *                          counting from the latest arrival. With X-Hvd-Count-Only: 1 the
 *                          answer (after the same wait) is the count encoding instead: a
 *                          rank of a big job waits for every rank without downloading
 *                          every record.
 *   DELETE /<scope>/<key>  200. In a predefined scope (sized by the slot plan) the key is a
 *                          rank that finished with the scope; when every rank has, the scope's
 *                          data and finished list are cleared. In other scopes the key is
 *                          removed.
 *   other methods          501.
 *
 * Scope encoding: "HVS1", u32le entry count, then per entry u32le key length, u32le value
 * length, key bytes, value bytes.
 * Count encoding: "HVC1", u32le keys in the scope, then a scope encoding holding only the
 * scope's HVD_KV_ABORT_KEY entry, or no entry. */
#ifndef HVD_RENDEZVOUS_KV_PROTOCOL_H
#define HVD_RENDEZVOUS_KV_PROTOCOL_H

#define HVD_KV_NAME_MAX 128
#define HVD_KV_WAIT_HEADER "X-Hvd-Wait-Ms"
#define HVD_KV_COUNT_HEADER "X-Hvd-Min-Count"
#define HVD_KV_SCOPE_MAGIC "HVS1"
#define HVD_KV_AGE_HEADER "X-Hvd-Scope-Age-Ms"
#define HVD_KV_ABORT_KEY "abort"
#define HVD_KV_COUNT_ONLY_HEADER "X-Hvd-Count-Only"
#define HVD_KV_COUNT_MAGIC "HVC1"

/* Server defaults (hvd_kv_server_config_t may change them). */
#define HVD_KV_DEFAULT_MAX_VALUE (1u << 20)   /* bytes per value */
#define HVD_KV_DEFAULT_MAX_TOTAL (256u << 20) /* bytes of keys + values in the store */
#define HVD_KV_DEFAULT_MAX_KEYS (1u << 20)
#define HVD_KV_MAX_WAIT_MS (3600 * 1000) /* longest honoured X-Hvd-Wait-Ms */

#include <stddef.h>

/* 1 when s[0..len) is a valid scope or key name (an empty one only with allow_empty). */
int hvd__kv_name_valid(const char *s, size_t len, int allow_empty);

#endif
