#include "rendezvous/kv_server.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "rendezvous/kv_auth.h"
#include "rendezvous/kv_protocol.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Seconds a client may take to send its request; held (suspended) requests are exempt. */
#define REQUEST_TIMEOUT_S 10
#define REPLAY_CAPACITY (1u << 16)

typedef struct request request_t;

struct hvd_kv_server {
    struct MHD_Daemon *daemon;
    int port;
    hvd_secret_t secret;
    hvd_kv_store_t *store;
    hvd_kv_replay_t *replay;
    size_t max_value;
    /* Held requests. The lock also covers store updates that wake them, so a request that
     * decides to wait can never miss the PUT that would have released it. */
    pthread_mutex_t lock;
    pthread_cond_t timer_cond;
    request_t *waiters; /* doubly linked */
    int stopping;
    pthread_t timer;
};

struct request {
    hvd_kv_server_t *server;
    struct MHD_Connection *conn;
    int method; /* 'G', 'P', 'D' or 0 for unsupported */
    uint8_t *body;
    size_t body_len, body_cap;
    int too_large;
    int authenticated;
    /* waiting state */
    char scope[HVD_KV_NAME_MAX + 1], key[HVD_KV_NAME_MAX + 1];
    long min_count;      /* whole-scope wait; -1: key wait */
    int64_t deadline_ms; /* 0: no wait */
    int waiting;         /* in the waiter list */
    request_t *prev, *next;
};

/* ---- responses ---- */

static enum MHD_Result respond(struct MHD_Connection *conn, unsigned status, void *body, size_t len,
                               enum MHD_ResponseMemoryMode mode) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, mode);
    if (!r)
        return MHD_NO;
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "HVD1");
    if (status == MHD_HTTP_NOT_IMPLEMENTED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, PUT, DELETE");
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result respond_empty(struct MHD_Connection *conn, unsigned status) {
    return respond(conn, status, NULL, 0, MHD_RESPMEM_PERSISTENT);
}

/* ---- waiters ---- */

static void waiter_add(hvd_kv_server_t *s, request_t *r) {
    r->prev = NULL;
    r->next = s->waiters;
    if (s->waiters)
        s->waiters->prev = r;
    s->waiters = r;
    r->waiting = 1;
    pthread_cond_signal(&s->timer_cond); /* it may be the new earliest deadline */
}

static void waiter_remove(hvd_kv_server_t *s, request_t *r) {
    if (!r->waiting)
        return;
    if (r->prev)
        r->prev->next = r->next;
    else
        s->waiters = r->next;
    if (r->next)
        r->next->prev = r->prev;
    r->waiting = 0;
}

/* Resume the held requests for scope (all of them when scope is NULL); called locked. */
static void wake(hvd_kv_server_t *s, const char *scope) {
    request_t *r = s->waiters;
    while (r) {
        request_t *next = r->next;
        if (!scope || strcmp(r->scope, scope) == 0) {
            waiter_remove(s, r);
            MHD_resume_connection(r->conn);
        }
        r = next;
    }
}

/* Resumes requests whose wait ran out. One thread for all of them, sleeping until the
 * earliest deadline. */
static void *timer_main(void *arg) {
    hvd_kv_server_t *s = arg;
    pthread_mutex_lock(&s->lock);
    while (!s->stopping) {
        int64_t now = hvd__clock_now_ms(), earliest = INT64_MAX;
        request_t *r = s->waiters;
        while (r) {
            request_t *next = r->next;
            if (r->deadline_ms <= now) {
                waiter_remove(s, r);
                MHD_resume_connection(r->conn);
            } else if (r->deadline_ms < earliest) {
                earliest = r->deadline_ms;
            }
            r = next;
        }
        /* wake at the earliest deadline, and at least once a second */
        int64_t wait = earliest == INT64_MAX ? 1000 : earliest - now;
        if (wait > 1000)
            wait = 1000;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += (wait + 1) / 1000;
        ts.tv_nsec += ((wait + 1) % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&s->timer_cond, &s->lock, &ts);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* ---- request handling ---- */

/* "/scope/key" or "/scope/" (key empty: the whole scope). */
static int split_path(const char *url, char *scope, char *key) {
    if (url[0] != '/')
        return -1;
    const char *a = url + 1, *slash = strchr(a, '/');
    if (!slash || strchr(slash + 1, '/'))
        return -1;
    size_t sn = (size_t)(slash - a), kn = strlen(slash + 1);
    if (!hvd__kv_name_valid(a, sn, 0) || !hvd__kv_name_valid(slash + 1, kn, 1))
        return -1;
    memcpy(scope, a, sn);
    scope[sn] = '\0';
    memcpy(key, slash + 1, kn + 1);
    return 0;
}

static long header_long(struct MHD_Connection *conn, const char *name, long dflt, long max) {
    const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, name);
    if (!v)
        return dflt;
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (errno || end == v || *end || n < 0)
        return -2;
    return n > max ? max : n;
}

static enum MHD_Result serve_get(hvd_kv_server_t *s, request_t *r) {
    struct MHD_Connection *conn = r->conn;
    int whole = r->key[0] == '\0';
    pthread_mutex_lock(&s->lock);
    if (s->stopping) {
        pthread_mutex_unlock(&s->lock);
        return respond_empty(conn, MHD_HTTP_SERVICE_UNAVAILABLE);
    }
    int ready = whole ? hvd__kv_store_count(s->store, r->scope) >= (size_t)r->min_count
                      : hvd__kv_store_has(s->store, r->scope, r->key);
    if (!ready && r->deadline_ms && hvd__clock_now_ms() < r->deadline_ms) {
        waiter_add(s, r);
        MHD_suspend_connection(conn);
        pthread_mutex_unlock(&s->lock);
        return MHD_YES;
    }
    pthread_mutex_unlock(&s->lock);
    uint8_t *body = NULL;
    size_t len = 0;
    hvd_status_t st = whole ? hvd__kv_store_snapshot(s->store, r->scope, &body, &len)
                            : hvd__kv_store_get(s->store, r->scope, r->key, &body, &len);
    if (st == HVD_ERR_NOT_FOUND)
        return respond_empty(conn, MHD_HTTP_NOT_FOUND);
    if (st != HVD_OK)
        return respond_empty(conn, MHD_HTTP_INTERNAL_SERVER_ERROR);
    return respond(conn, MHD_HTTP_OK, body, len, MHD_RESPMEM_MUST_FREE);
}

static enum MHD_Result serve(hvd_kv_server_t *s, request_t *r, const char *url) {
    struct MHD_Connection *conn = r->conn;
    if (!r->authenticated) {
        const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, HVD_KV_AUTH_HEADER);
        const char *method = r->method == 'G' ? "GET" : r->method == 'P' ? "PUT" : "DELETE";
        hvd_kv_auth_result_t a = hvd__kv_auth_verify(&s->secret, s->replay, auth, method, url,
                                                     r->body, r->body_len, hvd__kv_auth_now_ms());
        if (a != HVD_KV_AUTH_OK) {
            HVD_LOG_W("rendezvous: refused %s %s: %s", method, url, hvd__kv_auth_result_str(a));
            return respond_empty(conn, a == HVD_KV_AUTH_MISSING ? MHD_HTTP_UNAUTHORIZED
                                                                : MHD_HTTP_FORBIDDEN);
        }
        r->authenticated = 1;
        if (MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, NULL, NULL) > 0 ||
            split_path(url, r->scope, r->key) != 0)
            return respond_empty(conn, MHD_HTTP_BAD_REQUEST);
        if (r->method == 'G') {
            long wait = header_long(conn, HVD_KV_WAIT_HEADER, 0, HVD_KV_MAX_WAIT_MS);
            long count = header_long(conn, HVD_KV_COUNT_HEADER, 0, 1L << 30);
            if (wait == -2 || count == -2)
                return respond_empty(conn, MHD_HTTP_BAD_REQUEST);
            r->min_count = count;
            r->deadline_ms = wait > 0 ? hvd__clock_now_ms() + wait : 0;
        }
    }
    switch (r->method) {
    case 'G':
        return serve_get(s, r);
    case 'P': {
        if (r->key[0] == '\0')
            return respond_empty(conn, MHD_HTTP_BAD_REQUEST);
        pthread_mutex_lock(&s->lock);
        hvd_status_t st = hvd__kv_store_put(s->store, r->scope, r->key, r->body, r->body_len);
        if (st == HVD_OK)
            wake(s, r->scope);
        pthread_mutex_unlock(&s->lock);
        if (st == HVD_ERR_TOO_LARGE)
            return respond_empty(conn, MHD_HTTP_CONTENT_TOO_LARGE);
        if (st != HVD_OK)
            return respond_empty(conn, MHD_HTTP_INSUFFICIENT_STORAGE);
        return respond_empty(conn, MHD_HTTP_OK);
    }
    default:
        if (r->key[0] == '\0')
            return respond_empty(conn, MHD_HTTP_BAD_REQUEST);
        pthread_mutex_lock(&s->lock);
        hvd__kv_store_delete(s->store, r->scope, r->key);
        pthread_mutex_unlock(&s->lock);
        return respond_empty(conn, MHD_HTTP_OK);
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
    (void)version;
    hvd_kv_server_t *s = cls;
    request_t *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r)
            return MHD_NO;
        r->server = s;
        r->conn = conn;
        r->min_count = -1;
        *con_cls = r;
        if (strcmp(method, "GET") == 0)
            r->method = 'G';
        else if (strcmp(method, "PUT") == 0)
            r->method = 'P';
        else if (strcmp(method, "DELETE") == 0)
            r->method = 'D';
        else
            return respond_empty(conn, MHD_HTTP_NOT_IMPLEMENTED);
        if (r->method == 'P') {
            const char *cl =
                MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
            const char *te = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                         MHD_HTTP_HEADER_TRANSFER_ENCODING);
            if (!cl && !te)
                return respond_empty(conn, MHD_HTTP_LENGTH_REQUIRED);
            if (cl) {
                char *end;
                errno = 0;
                unsigned long long n = strtoull(cl, &end, 10);
                if (errno || end == cl || *end)
                    return respond_empty(conn, MHD_HTTP_BAD_REQUEST);
                /* Refuse an announced oversize body before reading a byte of it. */
                if (n > s->max_value)
                    return respond_empty(conn, MHD_HTTP_CONTENT_TOO_LARGE);
                r->body_cap = (size_t)n;
                r->body = malloc(r->body_cap ? r->body_cap : 1);
                if (!r->body)
                    return MHD_NO;
            }
        }
        return MHD_YES; /* wait for the body (or the end of the head) */
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (r->method != 'P' || r->too_large)
            return MHD_YES; /* a body where none belongs is read and dropped */
        if (r->body_len + n > s->max_value) {
            r->too_large = 1; /* chunked body over the limit: drop it, answer 413 */
            free(r->body);
            r->body = NULL;
            r->body_len = 0;
            return MHD_YES;
        }
        if (r->body_len + n > r->body_cap) {
            size_t cap = r->body_cap ? r->body_cap : 4096;
            while (cap < r->body_len + n)
                cap *= 2;
            if (cap > s->max_value)
                cap = s->max_value;
            uint8_t *grown = realloc(r->body, cap);
            if (!grown)
                return MHD_NO;
            r->body = grown;
            r->body_cap = cap;
        }
        memcpy(r->body + r->body_len, upload_data, n);
        r->body_len += n;
        return MHD_YES;
    }
    if (r->too_large)
        return respond_empty(conn, MHD_HTTP_CONTENT_TOO_LARGE);
    return serve(s, r, url);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)conn;
    (void)toe;
    hvd_kv_server_t *s = cls;
    request_t *r = *con_cls;
    if (!r)
        return;
    pthread_mutex_lock(&s->lock);
    waiter_remove(s, r);
    pthread_mutex_unlock(&s->lock);
    free(r->body);
    free(r);
    *con_cls = NULL;
}

static hvd_status_t open_listener(const char *addr, int port, int *fd_p, int *port_p) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return hvd__error_set(HVD_ERR_IO, "rendezvous server: socket(): %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (addr && *addr && inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
        close(fd);
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "rendezvous server: '%s' is not an IPv4 "
                              "address",
                              addr);
    }
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 4096) != 0) {
        int e = errno;
        close(fd);
        return hvd__error_set(HVD_ERR_IO, "rendezvous server: cannot listen on %s:%d: %s",
                              addr && *addr ? addr : "0.0.0.0", port, strerror(e));
    }
    socklen_t len = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &len);
    *fd_p = fd;
    *port_p = ntohs(sa.sin_port);
    return HVD_OK;
}

hvd_status_t hvd__kv_server_start(const hvd_kv_server_config_t *cfg, hvd_kv_server_t **server_p) {
    hvd_kv_server_t *s = calloc(1, sizeof *s);
    if (!s)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory starting the rendezvous server");
    hvd_status_t st = hvd__kv_store_create(&cfg->limits, &s->store);
    if (st != HVD_OK)
        goto err_free;
    st = hvd__kv_replay_create(REPLAY_CAPACITY, HVD_KV_AUTH_WINDOW_MS, &s->replay);
    if (st != HVD_OK)
        goto err_store;
    s->secret = *cfg->secret;
    s->max_value =
        cfg->limits.max_value_bytes ? cfg->limits.max_value_bytes : HVD_KV_DEFAULT_MAX_VALUE;
    pthread_mutex_init(&s->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->timer_cond, &ca);
    pthread_condattr_destroy(&ca);
    int fd = -1;
    st = open_listener(cfg->bind_addr, cfg->port, &fd, &s->port);
    if (st != HVD_OK)
        goto err_sync;
    if (pthread_create(&s->timer, NULL, timer_main, s) != 0) {
        close(fd);
        st = hvd__error_set(HVD_ERR_IO, "rendezvous server: cannot start its timer thread");
        goto err_sync;
    }
    s->daemon = MHD_start_daemon(
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME, 0, NULL, NULL, on_request, s,
        MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)REQUEST_TIMEOUT_S,
        MHD_OPTION_CONNECTION_LIMIT, cfg->max_connections ? cfg->max_connections : 8192u,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)32768, MHD_OPTION_NOTIFY_COMPLETED,
        on_completed, s, MHD_OPTION_END);
    if (!s->daemon) {
        close(fd);
        st = hvd__error_set(HVD_ERR_IO,
                            "rendezvous server: libmicrohttpd failed to start on "
                            "port %d",
                            s->port);
        goto err_timer;
    }
    *server_p = s;
    return HVD_OK;

err_timer:
    pthread_mutex_lock(&s->lock);
    s->stopping = 1;
    pthread_cond_signal(&s->timer_cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->timer, NULL);
err_sync:
    pthread_cond_destroy(&s->timer_cond);
    pthread_mutex_destroy(&s->lock);
    hvd__kv_replay_destroy(s->replay);
err_store:
    hvd__kv_store_destroy(s->store);
err_free:
    hvd__secret_wipe(&s->secret);
    free(s);
    return st;
}

int hvd__kv_server_port(const hvd_kv_server_t *server) {
    return server->port;
}

hvd_status_t hvd__kv_server_reset(hvd_kv_server_t *s, const char *const *scopes, const int *sizes,
                                  size_t n) {
    pthread_mutex_lock(&s->lock);
    hvd_status_t st = hvd__kv_store_reset(s->store, scopes, sizes, n);
    wake(s, NULL); /* held requests re-evaluate against the new contents */
    pthread_mutex_unlock(&s->lock);
    return st;
}

hvd_status_t hvd__kv_server_put(hvd_kv_server_t *s, const char *scope, const char *key,
                                const void *value, size_t len) {
    pthread_mutex_lock(&s->lock);
    hvd_status_t st = hvd__kv_store_put(s->store, scope, key, value, len);
    if (st == HVD_OK)
        wake(s, scope);
    pthread_mutex_unlock(&s->lock);
    return st;
}

void hvd__kv_server_stop(hvd_kv_server_t *s) {
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->stopping = 1;
    wake(s, NULL); /* every held request is answered 503 before the daemon goes */
    pthread_cond_signal(&s->timer_cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->timer, NULL);
    MHD_stop_daemon(s->daemon);
    pthread_cond_destroy(&s->timer_cond);
    pthread_mutex_destroy(&s->lock);
    hvd__kv_replay_destroy(s->replay);
    hvd__kv_store_destroy(s->store);
    hvd__secret_wipe(&s->secret);
    free(s);
}
