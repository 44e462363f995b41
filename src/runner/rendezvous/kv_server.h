/* The rendezvous store's HTTP server (protocol in kv_protocol.h), run inside horovodrun on
 * libmicrohttpd.
 *
 * One internal epoll thread serves every connection. A GET that waits for a key (or for a
 * scope to fill) is suspended, so thousands of held requests cost no threads; it is resumed
 * by the store change that satisfies it (a PUT over HTTP or a direct write to the store) or by
 * a timer thread at its deadline. Every request is authenticated (kv_auth.h) before it can read
 * or change anything; a refused request changes nothing.
 *
 * Order of checks: method (501), body framing (Content-Length over the value limit: 413 before
 * a byte is read; PUT without a length: 411; a body on GET/DELETE: 400), then the body is read
 * up to the limit (a longer chunked body: 413), then authentication (401/403), then the path
 * (400), then the operation. Resources are bounded: connections (max_connections), header
 * bytes per connection, seconds to send a request, and the bytes of request bodies buffered at
 * once (over that budget a PUT is answered 503 and the client retries). */
#ifndef HVD_RUNNER_RENDEZVOUS_KV_SERVER_H
#define HVD_RUNNER_RENDEZVOUS_KV_SERVER_H

#include <hvd/types.h>

#include "crypto/secret.h"
#include "runner/rendezvous/kv_store.h"

#include <stddef.h>

/* Seconds a client may stay silent while sending a request (the reference's 3 s). Held
 * requests are exempt while they are held. */
#define HVD_KV_SERVER_REQUEST_TIMEOUT_S 3
#define HVD_KV_SERVER_DEFAULT_MAX_CONNECTIONS 4096u

typedef struct {
    const char *bind_addr;      /* NULL or "": every IPv4 interface; else an IPv4 literal */
    int port;                   /* 0: a free port chosen by the kernel */
    const hvd_secret_t *secret; /* required; copied */
    size_t max_value_bytes, max_total_bytes, max_keys; /* 0: defaults of kv_protocol.h */
    unsigned max_connections; /* 0: HVD_KV_SERVER_DEFAULT_MAX_CONNECTIONS */
} hvd_kv_server_config_t;

typedef struct hvd_kv_server hvd_kv_server_t;

/* Bind, listen and start serving; returns once the port accepts connections. cfg and what it
 * points to are copied. Statuses: HVD_ERR_INVALID_ARG (no secret, a port outside 0..65535,
 * bind_addr not an IPv4 literal, limits the store refuses), HVD_ERR_IO (socket, bind or listen
 * failed, or libmicrohttpd or a thread did not start: the message names the address and port),
 * HVD_ERR_NO_MEMORY. *server_p is written only on success. Thread safe. */
hvd_status_t hvd__kv_server_start(const hvd_kv_server_config_t *cfg, hvd_kv_server_t **server_p);

/* The connection limit for a job of `ranks` ranks: each rank holds at most one request at a
 * time (its held check-in poll included), plus room for the launcher's own clients and for
 * connections still closing. Never below HVD_KV_SERVER_DEFAULT_MAX_CONNECTIONS. The process
 * must allow as many descriptors (RLIMIT_NOFILE); libmicrohttpd refuses connections past it. */
unsigned hvd__kv_server_connections_for(size_t ranks);

/* The port actually listened on (the kernel's choice when cfg->port was 0). Never blocks. */
int hvd__kv_server_port(const hvd_kv_server_t *server);

/* Clear the store and declare the predefined scopes (global, local_<host>, cross_<lr>) with
 * their sizes; held requests re-evaluate against the new contents. Statuses and arguments as
 * hvd__kv_store_reset. Any thread; blocks only on the store's lock. */
hvd_status_t hvd__kv_server_reset(hvd_kv_server_t *server, const char *const *scopes,
                                  const int *sizes, size_t n);

/* The server's store, owned by the server and valid until hvd__kv_server_stop. The launcher
 * may read and write it directly from any thread; a write wakes the held requests it
 * satisfies exactly as a PUT over HTTP would. */
hvd_kv_store_t *hvd__kv_server_store(hvd_kv_server_t *server);

/* Called after every PUT (over HTTP or directly to the store) with its scope and key, with the
 * store's lock held: it must not call into the store or block (the elastic driver notes
 * heartbeats and wakes its loop; the static launch notes the latest check-in generation).
 * Install or replace it at any time; NULL removes it, and once that call returned the old
 * watcher is not running and never called again. */
typedef void (*hvd_kv_server_watch_fn)(void *arg, const char *scope, const char *key);
void hvd__kv_server_watch(hvd_kv_server_t *server, hvd_kv_server_watch_fn fn, void *arg);

/* Stop: no new connections are accepted, every held request is answered 503 (a client that
 * does not read its answer within about a second is dropped), the daemon and timer threads are
 * joined and everything is freed, the store included. NULL is a no-op. Call once, from a thread
 * that is not a callback of the server, after other threads stopped using the store. */
void hvd__kv_server_stop(hvd_kv_server_t *server);

#endif
