/* The rendezvous store's HTTP server (protocol in kv_protocol.h), run inside horovodrun on
 * libmicrohttpd. One internal epoll thread serves every connection; a GET that waits for a
 * key is suspended (it costs no thread) and resumed by the PUT that satisfies it or by a
 * timer thread at its deadline. Every request is authenticated (kv_auth.h) before it can
 * read or change anything. */
#ifndef HVD_RENDEZVOUS_KV_SERVER_H
#define HVD_RENDEZVOUS_KV_SERVER_H

#include <hvd/types.h>

#include "crypto/secret.h"
#include "rendezvous/kv_store.h"

typedef struct {
    const char *bind_addr;      /* NULL or "": every IPv4 interface; else an IPv4 literal */
    int port;                   /* 0: a free port chosen by the kernel */
    const hvd_secret_t *secret; /* copied */
    hvd_kv_limits_t limits;     /* 0 fields: defaults of kv_protocol.h */
    unsigned max_connections;   /* 0: 8192 */
} hvd_kv_server_config_t;

typedef struct hvd_kv_server hvd_kv_server_t;

/* Bind, listen and start serving. HVD_ERR_IO names the address and port that failed. */
hvd_status_t hvd__kv_server_start(const hvd_kv_server_config_t *cfg, hvd_kv_server_t **server_p);

/* The port actually listened on. */
int hvd__kv_server_port(const hvd_kv_server_t *server);

/* Clear the store and declare the predefined scopes (global, local_<host>, cross_<lr>). */
hvd_status_t hvd__kv_server_reset(hvd_kv_server_t *server, const char *const *scopes,
                                  const int *sizes, size_t n);

/* Store a value as a PUT would (waking the requests waiting for it), for the launcher's own
 * writes. Statuses as hvd__kv_store_put. */
hvd_status_t hvd__kv_server_put(hvd_kv_server_t *server, const char *scope, const char *key,
                                const void *value, size_t len);

/* Answer every held request (503), stop serving and free everything. NULL is a no-op. */
void hvd__kv_server_stop(hvd_kv_server_t *server);

#endif
