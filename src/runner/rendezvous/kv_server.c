/* The store's HTTP server on libmicrohttpd (kv_server.h). Held requests sit in hash buckets (by
 * scope and key, or by scope) so that a store change releases exactly those it satisfies, and in a
 * deadline heap for the one timer thread, which also releases requests whose client hung up. */
#include "runner/rendezvous/kv_server.h"

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/hash.h"
#include "common/log.h"
#include "rendezvous/kv_auth.h"
#include "rendezvous/kv_protocol.h"

#include <arpa/inet.h>
#include <errno.h>
#include <malloc.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define REPLAY_CAPACITY (1u << 16)
/* libmicrohttpd's per-connection pool: the request head must fit (our heads are < 1 KiB).
 * At 32 KiB and below the pool comes from malloc; above, libmicrohttpd maps each pool on its
 * own and unmaps it at close, which cost a TLB shootdown per connection (3.4x slower
 * check-ins: 16,384 simulated ranks need 115,000 connections in seconds). malloc'd pools
 * leave freed heap resident after a burst (2 MiB after 10,000 bad requests and 1,000 idle
 * connections), so the timer thread gives it back (TRIM_AFTER_CLOSES). */
#define CONNECTION_MEMORY_LIMIT ((size_t)16 * 1024)
/* Connections closed since the last malloc_trim that make the timer thread trim again, at a
 * sweep that finds no more than this many open (the burst is over). */
#define TRIM_AFTER_CLOSES 64
/* Request bodies buffered at once, all connections together, at least this much. */
#define MIN_BODY_BUDGET ((size_t)64 << 20)
/* An oversize chunked body is read and dropped (to answer 413) up to this many bytes; a
 * client that sends more is cut off. */
#define DISCARD_LIMIT ((uint64_t)64 << 20)
#define WAIT_BUCKETS 4096u /* power of two */
/* How long stop lets held requests receive their 503. */
#define STOP_GRACE_MS 1000
/* How often the timer looks for held requests whose client hung up. */
#define SWEEP_INTERVAL_MS 1000
/* Refusals logged at WARNING per second; the rest are counted and summarised. */
#define REFUSAL_LOGS_PER_S 10

enum { M_OTHER = 0, M_GET, M_PUT, M_DELETE };

typedef struct request request_t;

struct hvd_kv_server {
    struct MHD_Daemon *daemon;
    int port;
    hvd_secret_t secret;
    hvd_kv_store_t *store;
    hvd_kv_replay_t *replay;
    size_t max_value;
    size_t body_budget;
    atomic_size_t body_in_use;
    atomic_int stopping;

    /* Held requests, under `lock`. Key waiters are hashed by scope and key, whole-scope
     * waiters by scope, so a PUT wakes exactly those it satisfies; the heap orders every held
     * request by deadline for the timer thread. Lock order: store lock, then this one, then
     * libmicrohttpd's own (inside MHD_suspend/resume_connection). */
    pthread_mutex_t lock;
    pthread_cond_t timer_cond; /* CLOCK_MONOTONIC: a new earliest deadline, or stop */
    pthread_cond_t idle_cond;  /* CLOCK_MONOTONIC: n_suspended dropped while stopping */
    request_t *key_waiters[WAIT_BUCKETS];
    request_t *scope_waiters[WAIT_BUCKETS];
    /* per scope bucket, no more than the least min_count of its waiters: a PUT that leaves
     * its scope short of that wakes nobody, found without walking the bucket (a check-in of
     * N ranks holds N requests in one bucket: walking it at every PUT is O(N^2)) */
    size_t scope_floor[WAIT_BUCKETS];
    request_t **heap;
    size_t heap_len, heap_cap;
    size_t n_suspended;   /* suspended, or resumed and not yet run again */
    atomic_size_t closes; /* connections closed since the timer thread last trimmed */
    atomic_size_t open;   /* connections open now */
    pthread_t timer;
    struct pollfd *sweep; /* timer thread only */
    size_t sweep_cap;

    /* The launcher's watcher of PUTs (hvd__kv_server_watch), under watch_lock: installed and
     * removed while requests are served, and never called after its removal returned. */
    pthread_mutex_t watch_lock;
    hvd_kv_server_watch_fn watch;
    void *watch_arg;

    /* Refusal log rate limit (daemon thread only). */
    int64_t log_window_ms;
    unsigned log_count, log_suppressed;
};

struct request {
    hvd_kv_server_t *server;
    struct MHD_Connection *conn;
    int fd;    /* the connection's socket, for the hang-up sweep */
    char *uri; /* the request target exactly as received */
    int method;
    int started;
    unsigned refuse; /* status decided while reading the body (413, 503); 0: none */
    uint8_t *body;
    size_t body_len, body_cap, reserved; /* reserved: bytes counted in body_in_use */
    uint64_t discarded;
    int checked; /* authenticated and parsed */
    char scope[HVD_KV_NAME_MAX + 1], key[HVD_KV_NAME_MAX + 1];
    size_t min_count;
    int count_only;      /* HVD_KV_COUNT_ONLY_HEADER: the count answer, not the scope */
    int64_t deadline_ms; /* 0: answer at once */
    /* held state, under server->lock */
    int held;
    int suspended;
    int peer_gone; /* the client hung up while held: answer at once */
    request_t **bucket;
    request_t *bnext, *bprev;
    size_t heap_pos;
};

static const char *const method_names[] = {"?", "GET", "PUT", "DELETE"};

/* ---- small helpers ---- */

static request_t **key_bucket(hvd_kv_server_t *s, const char *scope, const char *key) {
    uint64_t h = hvd__hash_fnv1a(hvd__hash_fnv1a(HVD_HASH_FNV_BASIS, scope) ^ '/', key);
    return &s->key_waiters[(h ^ (h >> 29)) & (WAIT_BUCKETS - 1)];
}

static request_t **scope_bucket(hvd_kv_server_t *s, const char *scope) {
    uint64_t h = hvd__hash_fnv1a(HVD_HASH_FNV_BASIS, scope);
    return &s->scope_waiters[(h ^ (h >> 29)) & (WAIT_BUCKETS - 1)];
}

/* A printable, bounded copy of client-chosen text for the log. */
static void printable(const char *in, char *out, size_t size) {
    size_t i = 0;
    for (; in && in[i] && i + 4 < size; i++)
        out[i] = (in[i] > 0x20 && in[i] < 0x7f) ? in[i] : '?';
    if (in && in[i] && i + 4 >= size) {
        memcpy(out + i, "...", 3);
        i += 3;
    }
    out[i] = '\0';
}

static void peer_of(struct MHD_Connection *conn, char *out, size_t size) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    snprintf(out, size, "?");
    if (ci && ci->client_addr && ci->client_addr->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)(const void *)ci->client_addr;
        char ip[INET_ADDRSTRLEN];
        if (inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip))
            snprintf(out, size, "%s:%u", ip, (unsigned)ntohs(a->sin_port));
    }
}

/* Refusals are logged where they are decided, at most REFUSAL_LOGS_PER_S a second so that a
 * misbehaving client cannot flood the launcher's output. Daemon thread only. */
static void log_refusal(hvd_kv_server_t *s, request_t *r, unsigned status, const char *why) {
    int64_t now = hvd__clock_now_ms();
    if (now - s->log_window_ms >= 1000) {
        if (s->log_suppressed)
            HVD_LOG_W("rendezvous server: %u more refused requests not shown", s->log_suppressed);
        s->log_window_ms = now;
        s->log_count = 0;
        s->log_suppressed = 0;
    }
    if (s->log_count >= REFUSAL_LOGS_PER_S) {
        s->log_suppressed++;
        return;
    }
    s->log_count++;
    char target[80], peer[64];
    printable(r->uri, target, sizeof target);
    peer_of(r->conn, peer, sizeof peer);
    HVD_LOG_W("rendezvous server: refused %s %s from %s: %u %s",
              r->method ? method_names[r->method] : "(unsupported method)", target, peer, status,
              why);
}

/* ---- responses ---- */

static enum MHD_Result queue(struct MHD_Connection *conn, unsigned status,
                             struct MHD_Response *resp, const char *type) {
    if (!resp)
        return MHD_NO;
    if (type)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "HVD1");
    if (status == MHD_HTTP_NOT_IMPLEMENTED)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, PUT, DELETE");
    enum MHD_Result ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* A short static explanation (or nothing, for 200 and 404). */
static enum MHD_Result respond(request_t *r, unsigned status, const char *text) {
    size_t len = text ? strlen(text) : 0;
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)text, MHD_RESPMEM_PERSISTENT);
    /* While stopping, close after answering so that stop need not wait for idle clients. */
    if (resp && atomic_load(&r->server->stopping))
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    if (hvd__log_threshold <= HVD_LOG_TRACE) {
        char target[80];
        printable(r->uri, target, sizeof target);
        HVD_LOG_T("rendezvous server: %s %s -> %u", method_names[r->method], target, status);
    }
    return queue(r->conn, status, resp, len ? "text/plain" : NULL);
}

static void blob_done(void *blob) {
    hvd__kv_blob_unref(blob);
}

/* 200 with a value or a scope encoding; takes the caller's reference to blob. */
/* A value, or a scope's encoding with its age (kv_protocol.h) when age_ms is not NULL. */
static enum MHD_Result respond_blob(request_t *r, hvd_kv_blob_t *blob, const int64_t *age_ms) {
    struct MHD_Response *resp = MHD_create_response_from_buffer_with_free_callback_cls(
        hvd__kv_blob_len(blob), (void *)hvd__kv_blob_data(blob), blob_done, blob);
    if (!resp) {
        hvd__kv_blob_unref(blob);
        return MHD_NO;
    }
    if (age_ms) {
        char age[24];
        snprintf(age, sizeof age, "%lld", (long long)*age_ms);
        MHD_add_response_header(resp, HVD_KV_AGE_HEADER, age);
    }
    HVD_LOG_T("rendezvous server: GET /%s/%s -> 200 (%zu bytes)", r->scope, r->key,
              hvd__kv_blob_len(blob));
    return queue(r->conn, MHD_HTTP_OK, resp, "application/octet-stream");
}

/* ---- held requests (all under s->lock) ---- */

static void heap_set(hvd_kv_server_t *s, size_t i, request_t *r) {
    s->heap[i] = r;
    r->heap_pos = i;
}

static void heap_up(hvd_kv_server_t *s, size_t i) {
    request_t *r = s->heap[i];
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (s->heap[p]->deadline_ms <= r->deadline_ms)
            break;
        heap_set(s, i, s->heap[p]);
        i = p;
    }
    heap_set(s, i, r);
}

static void heap_down(hvd_kv_server_t *s, size_t i) {
    request_t *r = s->heap[i];
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= s->heap_len)
            break;
        if (c + 1 < s->heap_len && s->heap[c + 1]->deadline_ms < s->heap[c]->deadline_ms)
            c++;
        if (r->deadline_ms <= s->heap[c]->deadline_ms)
            break;
        heap_set(s, i, s->heap[c]);
        i = c;
    }
    heap_set(s, i, r);
}

/* Register r as held. -1 when the heap cannot grow (the caller answers instead). */
static int waiter_add(hvd_kv_server_t *s, request_t *r) {
    if (s->heap_len == s->heap_cap) {
        size_t cap = s->heap_cap ? 2 * s->heap_cap : 64;
        request_t **heap = realloc(s->heap, cap * sizeof *heap);
        if (!heap)
            return -1;
        s->heap = heap;
        s->heap_cap = cap;
    }
    s->heap_len++;
    heap_set(s, s->heap_len - 1, r);
    heap_up(s, s->heap_len - 1);
    r->bucket = r->key[0] ? key_bucket(s, r->scope, r->key) : scope_bucket(s, r->scope);
    if (!r->key[0]) {
        size_t *floor = &s->scope_floor[r->bucket - s->scope_waiters];
        if (!*r->bucket || r->min_count < *floor)
            *floor = r->min_count;
    }
    r->bprev = NULL;
    r->bnext = *r->bucket;
    if (r->bnext)
        r->bnext->bprev = r;
    *r->bucket = r;
    r->held = 1;
    if (r->heap_pos == 0)
        pthread_cond_signal(&s->timer_cond); /* a new earliest deadline */
    return 0;
}

static void waiter_unlink(hvd_kv_server_t *s, request_t *r) {
    if (!r->held)
        return;
    if (r->bprev)
        r->bprev->bnext = r->bnext;
    else
        *r->bucket = r->bnext;
    if (r->bnext)
        r->bnext->bprev = r->bprev;
    size_t i = r->heap_pos, last = --s->heap_len;
    if (i != last) {
        heap_set(s, i, s->heap[last]);
        heap_down(s, i);
        heap_up(s, i);
    }
    r->held = 0;
}

/* Let libmicrohttpd run r again; its handler re-evaluates and answers or holds it again. */
static void waiter_release(hvd_kv_server_t *s, request_t *r) {
    waiter_unlink(s, r);
    MHD_resume_connection(r->conn);
}

static void release_all(hvd_kv_server_t *s) {
    for (size_t b = 0; b < WAIT_BUCKETS; b++) {
        while (s->key_waiters[b])
            waiter_release(s, s->key_waiters[b]);
        while (s->scope_waiters[b])
            waiter_release(s, s->scope_waiters[b]);
    }
}

/* Store notification (store lock held, any thread): release exactly the held requests the
 * change satisfies; a reset (scope NULL) releases all of them to re-evaluate. */
static void on_store_change(void *arg, const char *scope, const char *key, size_t count) {
    hvd_kv_server_t *s = arg;
    if (scope) {
        pthread_mutex_lock(&s->watch_lock);
        if (s->watch)
            s->watch(s->watch_arg, scope, key);
        pthread_mutex_unlock(&s->watch_lock);
    }
    pthread_mutex_lock(&s->lock);
    if (!scope) {
        release_all(s);
    } else {
        request_t *r = *key_bucket(s, scope, key);
        while (r) {
            request_t *next = r->bnext;
            if (strcmp(r->scope, scope) == 0 && strcmp(r->key, key) == 0)
                waiter_release(s, r);
            r = next;
        }
        request_t **bucket = scope_bucket(s, scope);
        r = *bucket;
        if (count < s->scope_floor[bucket - s->scope_waiters] && strcmp(key, HVD_KV_ABORT_KEY))
            r = NULL;
        while (r) {
            request_t *next = r->bnext;
            if (strcmp(r->scope, scope) == 0 &&
                (r->min_count <= count || strcmp(key, HVD_KV_ABORT_KEY) == 0))
                waiter_release(s, r);
            r = next;
        }
    }
    pthread_mutex_unlock(&s->lock);
}

/* libmicrohttpd does not watch suspended sockets, so a client that dies while held would keep
 * its connection (and a slot of the connection limit) until the deadline, up to an hour.
 * Called locked, from the timer thread. */
static void sweep_hung_up(hvd_kv_server_t *s) {
    if (s->heap_len > s->sweep_cap) {
        struct pollfd *p = realloc(s->sweep, s->heap_len * sizeof *p);
        if (!p)
            return; /* try again next time */
        s->sweep = p;
        s->sweep_cap = s->heap_len;
    }
    size_t n = s->heap_len;
    for (size_t i = 0; i < n; i++)
        s->sweep[i] = (struct pollfd){.fd = s->heap[i]->fd, .events = POLLRDHUP};
    if (poll(s->sweep, n, 0) <= 0)
        return;
    request_t **gone = NULL;
    size_t n_gone = 0;
    /* Release after the scan: a release reorders the heap that indexes the poll array. */
    for (size_t i = 0; i < n; i++)
        if (s->sweep[i].revents & (POLLRDHUP | POLLHUP | POLLERR))
            s->sweep[n_gone++].fd = (int)i;
    if (n_gone && (gone = malloc(n_gone * sizeof *gone))) {
        for (size_t i = 0; i < n_gone; i++)
            gone[i] = s->heap[s->sweep[i].fd];
        for (size_t i = 0; i < n_gone; i++) {
            gone[i]->peer_gone = 1;
            waiter_release(s, gone[i]);
        }
        free(gone);
    }
}

/* Releases held requests at their deadlines: one thread for all of them, asleep until the
 * earliest deadline (and at least once a second, so no wait is unbounded). Once a second it
 * also releases requests whose client hung up. */
static void *timer_main(void *arg) {
    hvd_kv_server_t *s = arg;
    int64_t next_sweep = hvd__clock_now_ms() + SWEEP_INTERVAL_MS;
    pthread_mutex_lock(&s->lock);
    while (!atomic_load(&s->stopping)) {
        int64_t now = hvd__clock_now_ms();
        while (s->heap_len && s->heap[0]->deadline_ms <= now)
            waiter_release(s, s->heap[0]);
        if (now >= next_sweep) {
            sweep_hung_up(s);
            next_sweep = now + SWEEP_INTERVAL_MS;
            /* only once the burst is over: trimming during one gives back pages that the
             * next connections fault in again, and stalls the server while it walks a heap
             * of thousands of open connections (16,384 check-ins took 45% to 3x longer) */
            size_t closes = atomic_load(&s->closes);
            if (closes >= TRIM_AFTER_CLOSES && atomic_load(&s->open) <= TRIM_AFTER_CLOSES) {
                atomic_fetch_sub(&s->closes, closes);
                pthread_mutex_unlock(&s->lock); /* (a trim takes milliseconds) */
                malloc_trim(0);
                pthread_mutex_lock(&s->lock);
                continue;
            }
        }
        int64_t wait = s->heap_len ? s->heap[0]->deadline_ms - now : SWEEP_INTERVAL_MS;
        if (wait > next_sweep - now)
            wait = next_sweep - now;
        struct timespec ts = hvd__clock_abstime(CLOCK_MONOTONIC, wait);
        pthread_cond_timedwait(&s->timer_cond, &s->lock, &ts);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

/* ---- request bodies ---- */

static int body_reserve(hvd_kv_server_t *s, request_t *r, size_t extra) {
    size_t used = atomic_fetch_add(&s->body_in_use, extra);
    if (used + extra > s->body_budget) {
        atomic_fetch_sub(&s->body_in_use, extra);
        return 0;
    }
    r->reserved += extra;
    return 1;
}

static void body_release(hvd_kv_server_t *s, request_t *r) {
    atomic_fetch_sub(&s->body_in_use, r->reserved);
    r->reserved = 0;
    free(r->body);
    r->body = NULL;
    r->body_len = r->body_cap = 0;
}

/* The body is dropped and the request will be answered `status` once it has been read. */
static void refuse_body(hvd_kv_server_t *s, request_t *r, unsigned status, size_t dropped) {
    body_release(s, r);
    r->refuse = status;
    r->discarded = dropped;
}

static enum MHD_Result take_body(hvd_kv_server_t *s, request_t *r, const char *data, size_t n) {
    if (r->refuse || r->method != M_PUT) {
        r->discarded += n;
        return r->discarded > DISCARD_LIMIT ? MHD_NO : MHD_YES;
    }
    if (n > s->max_value - r->body_len) {
        refuse_body(s, r, MHD_HTTP_CONTENT_TOO_LARGE, n);
        return MHD_YES;
    }
    if (r->body_len + n > r->body_cap) {
        /* only chunked bodies grow: a Content-Length body was allocated whole */
        size_t cap = r->body_cap ? 2 * r->body_cap : 4096;
        if (cap < r->body_len + n)
            cap = r->body_len + n;
        if (cap > s->max_value)
            cap = s->max_value;
        uint8_t *grown = NULL;
        if (!body_reserve(s, r, cap - r->body_cap) || !(grown = realloc(r->body, cap))) {
            refuse_body(s, r, MHD_HTTP_SERVICE_UNAVAILABLE, n);
            return MHD_YES;
        }
        r->body = grown;
        r->body_cap = cap;
    }
    memcpy(r->body + r->body_len, data, n);
    r->body_len += n;
    return MHD_YES;
}

/* ---- request handling ---- */

/* Digits only, at most 10 of them; -1 otherwise. */
static long long parse_count(const char *v) {
    size_t n = strlen(v);
    if (n == 0 || n > 10)
        return -1;
    long long x = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            return -1;
        x = x * 10 + (v[i] - '0');
    }
    return x;
}

/* "/scope/key", or "/scope/" for a whole-scope GET; 0 when valid. The raw target is parsed:
 * no URL decoding, and a query string fails because '?' is not a name character. */
static int parse_target(request_t *r) {
    const char *u = r->uri;
    if (u[0] != '/')
        return -1;
    const char *scope = u + 1, *slash = strchr(scope, '/');
    if (!slash || strchr(slash + 1, '/'))
        return -1;
    size_t sl = (size_t)(slash - scope), kl = strlen(slash + 1);
    if (!hvd__kv_name_valid(scope, sl, 0) || !hvd__kv_name_valid(slash + 1, kl, r->method == M_GET))
        return -1;
    memcpy(r->scope, scope, sl);
    r->scope[sl] = '\0';
    memcpy(r->key, slash + 1, kl + 1);
    return 0;
}

/* First call, with the request head: refuse what can be refused before reading a body. */
static enum MHD_Result start_request(hvd_kv_server_t *s, request_t *r, const char *method) {
    if (strcmp(method, "GET") == 0)
        r->method = M_GET;
    else if (strcmp(method, "PUT") == 0)
        r->method = M_PUT;
    else if (strcmp(method, "DELETE") == 0)
        r->method = M_DELETE;
    if (r->method == M_OTHER) {
        log_refusal(s, r, MHD_HTTP_NOT_IMPLEMENTED, "method not implemented");
        return respond(r, MHD_HTTP_NOT_IMPLEMENTED, "method not implemented\n");
    }
    struct MHD_Connection *conn = r->conn;
    const char *te =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    const char *cl =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (te) {
        if (strcasecmp(te, "chunked") != 0)
            return respond(r, MHD_HTTP_NOT_IMPLEMENTED, "unsupported transfer coding\n");
        if (r->method != M_PUT)
            return respond(r, MHD_HTTP_BAD_REQUEST, "a body where none belongs\n");
        return MHD_YES; /* read up to the limit as it comes */
    }
    unsigned long long n = 0;
    if (cl) {
        /* libmicrohttpd answers a malformed Content-Length itself; this is a second check */
        char *end;
        errno = 0;
        n = strtoull(cl, &end, 10);
        if (errno || end == cl || *end || cl[0] == '-')
            return respond(r, MHD_HTTP_BAD_REQUEST, "bad Content-Length\n");
    }
    if (n > s->max_value) {
        log_refusal(s, r, MHD_HTTP_CONTENT_TOO_LARGE, "announced body over the value limit");
        return respond(r, MHD_HTTP_CONTENT_TOO_LARGE, "value too large\n");
    }
    if (r->method != M_PUT)
        return n ? respond(r, MHD_HTTP_BAD_REQUEST, "a body where none belongs\n") : MHD_YES;
    if (!cl)
        return respond(r, MHD_HTTP_LENGTH_REQUIRED, "Content-Length required\n");
    if (!body_reserve(s, r, (size_t)n) || !(r->body = malloc(n ? (size_t)n : 1))) {
        log_refusal(s, r, MHD_HTTP_SERVICE_UNAVAILABLE, "request body buffers exhausted");
        return respond(r, MHD_HTTP_SERVICE_UNAVAILABLE, "busy, retry\n");
    }
    r->body_cap = (size_t)n;
    return MHD_YES;
}

/* Authenticate, then parse the target and the wait headers. Returns 0, or the status to
 * answer (nothing has been read from or written to the store). */
static unsigned check_request(hvd_kv_server_t *s, request_t *r) {
    const char *auth = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, HVD_KV_AUTH_HEADER);
    hvd_kv_auth_result_t a =
        hvd__kv_auth_verify(&s->secret, s->replay, auth, method_names[r->method], r->uri, r->body,
                            r->body_len, hvd__kv_auth_now_ms());
    if (a != HVD_KV_AUTH_OK) {
        unsigned status = a == HVD_KV_AUTH_MISSING ? MHD_HTTP_UNAUTHORIZED : MHD_HTTP_FORBIDDEN;
        log_refusal(s, r, status, hvd__kv_auth_result_str(a));
        return status;
    }
    if (parse_target(r) != 0) {
        log_refusal(s, r, MHD_HTTP_BAD_REQUEST, "invalid request path");
        return MHD_HTTP_BAD_REQUEST;
    }
    if (r->method == M_GET) {
        const char *w = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, HVD_KV_WAIT_HEADER);
        const char *c = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, HVD_KV_COUNT_HEADER);
        long long wait = w ? parse_count(w) : 0, count = c ? parse_count(c) : 0;
        if (wait < 0 || count < 0) {
            log_refusal(s, r, MHD_HTTP_BAD_REQUEST,
                        "bad " HVD_KV_WAIT_HEADER " or " HVD_KV_COUNT_HEADER " header");
            return MHD_HTTP_BAD_REQUEST;
        }
        const char *only =
            MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, HVD_KV_COUNT_ONLY_HEADER);
        if (only && (strcmp(only, "1") != 0 || r->key[0])) {
            log_refusal(s, r, MHD_HTTP_BAD_REQUEST,
                        "bad " HVD_KV_COUNT_ONLY_HEADER " header (\"1\", on a scope read)");
            return MHD_HTTP_BAD_REQUEST;
        }
        if (wait > HVD_KV_MAX_WAIT_MS)
            wait = HVD_KV_MAX_WAIT_MS;
        r->count_only = only != NULL;
        r->min_count = (size_t)count;
        r->deadline_ms = wait > 0 ? hvd__clock_now_ms() + wait : 0;
    }
    return 0;
}

static void put_u32le(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* The count answer (kv_protocol.h): the scope's key count and, if present, its abort key, in
 * a few dozen bytes where the scope itself may be megabytes. */
static enum MHD_Result respond_count(hvd_kv_server_t *s, request_t *r) {
    hvd_kv_blob_t *abort_value = NULL;
    if (hvd__kv_store_get_blob(s->store, r->scope, HVD_KV_ABORT_KEY, &abort_value) != HVD_OK)
        abort_value = NULL;
    hvd__error_clear();
    /* counted after the abort key was read, so a count never misses an abort it includes */
    size_t count = hvd__kv_store_count(s->store, r->scope);
    int64_t age = hvd__kv_store_scope_age_ms(s->store, r->scope);
    size_t klen = sizeof HVD_KV_ABORT_KEY - 1,
           vlen = abort_value ? hvd__kv_blob_len(abort_value) : 0;
    size_t len = 16 + (abort_value ? 8 + klen + vlen : 0);
    uint8_t *body = malloc(len);
    if (!body) {
        hvd__kv_blob_unref(abort_value);
        return respond(r, MHD_HTTP_SERVICE_UNAVAILABLE, "out of memory, retry\n");
    }
    memcpy(body, HVD_KV_COUNT_MAGIC, 4);
    put_u32le(body + 4, count > UINT32_MAX ? UINT32_MAX : (uint32_t)count);
    memcpy(body + 8, HVD_KV_SCOPE_MAGIC, 4);
    put_u32le(body + 12, abort_value ? 1 : 0);
    if (abort_value) {
        put_u32le(body + 16, (uint32_t)klen);
        put_u32le(body + 20, (uint32_t)vlen);
        memcpy(body + 24, HVD_KV_ABORT_KEY, klen);
        memcpy(body + 24 + klen, hvd__kv_blob_data(abort_value), vlen);
        hvd__kv_blob_unref(abort_value);
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer_with_free_callback(len, body, free);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    char age_text[24];
    snprintf(age_text, sizeof age_text, "%lld", (long long)age);
    MHD_add_response_header(resp, HVD_KV_AGE_HEADER, age_text);
    HVD_LOG_T("rendezvous server: GET /%s/ -> 200 (count %zu)", r->scope, count);
    return queue(r->conn, MHD_HTTP_OK, resp, "application/octet-stream");
}

static enum MHD_Result serve_get(hvd_kv_server_t *s, request_t *r) {
    int whole = r->key[0] == '\0';
    uint64_t version;
    int ready =
        hvd__kv_store_ready(s->store, r->scope, whole ? NULL : r->key, r->min_count, &version);
    if (!ready && r->deadline_ms && hvd__clock_now_ms() < r->deadline_ms && !r->peer_gone) {
        pthread_mutex_lock(&s->lock);
        /* Checked under the lock: stop releases every held request under it, and
         * libmicrohttpd must never stop with a suspended connection. */
        if (atomic_load(&s->stopping) || waiter_add(s, r) != 0) {
            pthread_mutex_unlock(&s->lock);
            return respond(r, MHD_HTTP_SERVICE_UNAVAILABLE, "server stopping or busy\n");
        }
        MHD_suspend_connection(r->conn);
        r->suspended = 1;
        s->n_suspended++;
        /* A change between the check and the registration was not seen by the notification:
         * run again at once. */
        if (hvd__kv_store_version(s->store) != version)
            waiter_release(s, r);
        pthread_mutex_unlock(&s->lock);
        return MHD_YES;
    }
    if (r->count_only)
        return respond_count(s, r);
    hvd_kv_blob_t *blob;
    hvd_status_t st = whole ? hvd__kv_store_snapshot_blob(s->store, r->scope, &blob)
                            : hvd__kv_store_get_blob(s->store, r->scope, r->key, &blob);
    /* the age after the snapshot: a PUT in between makes the age younger than the snapshot
     * (the client waits a little longer), never older (it would give up early) */
    int64_t age = whole ? hvd__kv_store_scope_age_ms(s->store, r->scope) : -1;
    if (st == HVD_ERR_NOT_FOUND)
        return respond(r, MHD_HTTP_NOT_FOUND, NULL);
    if (st != HVD_OK)
        return respond(r, MHD_HTTP_SERVICE_UNAVAILABLE, "out of memory, retry\n");
    return respond_blob(r, blob, whole ? &age : NULL);
}

static enum MHD_Result serve(hvd_kv_server_t *s, request_t *r) {
    if (!r->checked) {
        unsigned status = check_request(s, r);
        if (status) {
            body_release(s, r);
            return respond(r, status,
                           status == MHD_HTTP_BAD_REQUEST ? "invalid request\n"
                           : status == MHD_HTTP_FORBIDDEN ? "authentication failed\n"
                                                          : "authentication required\n");
        }
        r->checked = 1;
    }
    if (atomic_load(&s->stopping)) {
        body_release(s, r);
        return respond(r, MHD_HTTP_SERVICE_UNAVAILABLE, "server stopping\n");
    }
    if (r->method == M_GET)
        return serve_get(s, r);
    if (r->key[0] == '\0') /* not reached: parse_target requires a key here */
        return respond(r, MHD_HTTP_BAD_REQUEST, "invalid request\n");
    if (r->method == M_DELETE) {
        hvd__kv_store_delete(s->store, r->scope, r->key);
        return respond(r, MHD_HTTP_OK, NULL);
    }
    hvd_status_t st = hvd__kv_store_put(s->store, r->scope, r->key, r->body, r->body_len);
    body_release(s, r);
    switch (st) {
    case HVD_OK:
        return respond(r, MHD_HTTP_OK, NULL);
    case HVD_ERR_TOO_LARGE:
        return respond(r, MHD_HTTP_CONTENT_TOO_LARGE, "value too large\n");
    case HVD_ERR_INVALID_ARG:
        return respond(r, MHD_HTTP_BAD_REQUEST, "invalid request\n");
    default:
        HVD_LOG_W("rendezvous server: PUT %s/%s refused: %s", r->scope, r->key, hvd_last_error());
        return respond(r, MHD_HTTP_INSUFFICIENT_STORAGE, "store full\n");
    }
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
    hvd_kv_server_t *s = cls;
    request_t *r = *con_cls;
    if (!r)
        return MHD_NO; /* on_uri ran out of memory: drop the connection */
    if (!r->started) {
        r->started = 1;
        return start_request(s, r, method);
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        return take_body(s, r, upload_data, n);
    }
    if (r->suspended) {
        pthread_mutex_lock(&s->lock);
        r->suspended = 0;
        s->n_suspended--;
        if (atomic_load(&s->stopping))
            pthread_cond_broadcast(&s->idle_cond);
        pthread_mutex_unlock(&s->lock);
    }
    if (r->refuse) {
        log_refusal(s, r, r->refuse,
                    r->refuse == MHD_HTTP_CONTENT_TOO_LARGE ? "body over the value limit"
                                                            : "request body buffers exhausted");
        return respond(r, r->refuse,
                       r->refuse == MHD_HTTP_CONTENT_TOO_LARGE ? "value too large\n"
                                                               : "busy, retry\n");
    }
    return serve(s, r);
}

/* Called with the raw request target before libmicrohttpd splits off a query string and
 * URL-decodes it: the signature covers the target as sent, and the protocol knows no
 * encoding. Its result is the request's context. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn) {
    request_t *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->server = cls;
    r->conn = conn;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    r->fd = ci ? ci->connect_fd : -1;
    /* bounded: the request line fits the connection's memory limit */
    if (!(r->uri = strdup(uri ? uri : ""))) {
        free(r);
        return NULL;
    }
    return r;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    hvd_kv_server_t *s = cls;
    request_t *r = *con_cls;
    if (!r)
        return;
    pthread_mutex_lock(&s->lock);
    waiter_unlink(s, r);
    if (r->suspended) {
        r->suspended = 0;
        s->n_suspended--;
        pthread_cond_broadcast(&s->idle_cond);
    }
    pthread_mutex_unlock(&s->lock);
    body_release(s, r);
    free(r->uri);
    free(r);
    *con_cls = NULL;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    hvd_kv_server_t *s = cls;
    (void)conn;
    (void)socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        atomic_fetch_add(&s->open, 1);
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        atomic_fetch_sub(&s->open, 1);
        atomic_fetch_add(&s->closes, 1);
    }
}

__attribute__((format(printf, 2, 0))) static void on_mhd_log(void *cls, const char *fmt,
                                                             va_list ap) {
    char msg[256];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    /* Reaching the connection limit is worth the operator's attention; the rest (clients
     * that send garbage or time out) is routine. */
    if (strstr(msg, "limit"))
        HVD_LOG_W("rendezvous server (libmicrohttpd): %s", msg);
    else
        HVD_LOG_D("rendezvous server (libmicrohttpd): %s", msg);
}

/* ---- start / stop ---- */

static hvd_status_t open_listener(const char *addr, int port, int *fd_p, int *port_p) {
    const char *shown = addr && *addr ? addr : "0.0.0.0";
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (addr && *addr && inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "rendezvous server: bind address '%s' is not an IPv4 address", addr);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return hvd__error_set(HVD_ERR_IO, "rendezvous server: socket() for %s:%d failed: %s", shown,
                              port, strerror(errno));
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0)
        HVD_LOG_D("rendezvous server: SO_REUSEADDR: %s", strerror(errno));
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        int e = errno;
        close(fd);
        return hvd__error_set(HVD_ERR_IO, "rendezvous server: cannot bind %s:%d: %s", shown, port,
                              strerror(e));
    }
    if (listen(fd, SOMAXCONN) != 0) {
        int e = errno;
        close(fd);
        return hvd__error_set(HVD_ERR_IO, "rendezvous server: cannot listen on %s:%d: %s", shown,
                              port, strerror(e));
    }
    socklen_t len = sizeof sa;
    if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
        int e = errno;
        close(fd);
        return hvd__error_set(HVD_ERR_IO, "rendezvous server: getsockname on %s:%d: %s", shown,
                              port, strerror(e));
    }
    *fd_p = fd;
    *port_p = ntohs(sa.sin_port);
    return HVD_OK;
}

static int cond_init_monotonic(pthread_cond_t *c) {
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca) != 0)
        return -1;
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int rc = pthread_cond_init(c, &ca);
    pthread_condattr_destroy(&ca);
    return rc == 0 ? 0 : -1;
}

unsigned hvd__kv_server_connections_for(size_t ranks) {
    size_t n = ranks + 1024;
    if (n < HVD_KV_SERVER_DEFAULT_MAX_CONNECTIONS)
        n = HVD_KV_SERVER_DEFAULT_MAX_CONNECTIONS;
    return n > (1u << 20) ? (1u << 20) : (unsigned)n;
}

hvd_status_t hvd__kv_server_start(const hvd_kv_server_config_t *cfg, hvd_kv_server_t **server_p) {
    if (!cfg || !cfg->secret)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "rendezvous server: no job secret given");
    if (cfg->port < 0 || cfg->port > 65535)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "rendezvous server: port %d out of range",
                              cfg->port);
    hvd_kv_server_t *s = calloc(1, sizeof *s);
    if (!s)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "rendezvous server: out of memory");
    hvd_status_t st;
    hvd_kv_limits_t lim = {.max_value_bytes = cfg->max_value_bytes,
                           .max_total_bytes = cfg->max_total_bytes,
                           .max_keys = cfg->max_keys};
    st = hvd__kv_store_create(&lim, &s->store);
    if (st != HVD_OK)
        goto err_free;
    s->secret = *cfg->secret;
    s->max_value = cfg->max_value_bytes ? cfg->max_value_bytes : HVD_KV_DEFAULT_MAX_VALUE;
    s->body_budget = s->max_value > MIN_BODY_BUDGET / 4 ? 4 * s->max_value : MIN_BODY_BUDGET;
    atomic_init(&s->body_in_use, 0);
    atomic_init(&s->stopping, 0);
    s->watch_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    st = hvd__kv_replay_create(REPLAY_CAPACITY, HVD_KV_AUTH_WINDOW_MS, &s->replay);
    if (st != HVD_OK)
        goto err_store;
    st = hvd__error_set(HVD_ERR_NO_MEMORY, "rendezvous server: cannot create its locks");
    if (pthread_mutex_init(&s->lock, NULL) != 0)
        goto err_replay;
    if (cond_init_monotonic(&s->timer_cond) != 0)
        goto err_mutex;
    if (cond_init_monotonic(&s->idle_cond) != 0)
        goto err_timer_cond;
    int fd = -1;
    st = open_listener(cfg->bind_addr, cfg->port, &fd, &s->port);
    if (st != HVD_OK)
        goto err_idle_cond;
    hvd__kv_store_set_notify(s->store, on_store_change, s);
    int rc = pthread_create(&s->timer, NULL, timer_main, s);
    if (rc != 0) {
        close(fd);
        st = hvd__error_set(HVD_ERR_IO,
                            "rendezvous server on port %d: cannot start its timer "
                            "thread: %s",
                            s->port, strerror(rc));
        goto err_idle_cond;
    }
    unsigned max_conn =
        cfg->max_connections ? cfg->max_connections : HVD_KV_SERVER_DEFAULT_MAX_CONNECTIONS;
    /* From here libmicrohttpd owns fd (it closes it on its own failure paths). */
    s->daemon = MHD_start_daemon(
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG, 0, NULL, NULL,
        on_request, s, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)HVD_KV_SERVER_REQUEST_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT, max_conn,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, CONNECTION_MEMORY_LIMIT, MHD_OPTION_URI_LOG_CALLBACK,
        on_uri, s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION,
        on_connection, s, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s, MHD_OPTION_END);
    if (!s->daemon) {
        st =
            hvd__error_set(HVD_ERR_IO, "rendezvous server: libmicrohttpd failed to start on %s:%d",
                           cfg->bind_addr && *cfg->bind_addr ? cfg->bind_addr : "0.0.0.0", s->port);
        goto err_timer;
    }
    HVD_LOG_D("rendezvous server listening on %s:%d",
              cfg->bind_addr && *cfg->bind_addr ? cfg->bind_addr : "0.0.0.0", s->port);
    *server_p = s;
    return HVD_OK;

err_timer:
    pthread_mutex_lock(&s->lock);
    atomic_store(&s->stopping, 1);
    pthread_cond_signal(&s->timer_cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->timer, NULL);
err_idle_cond:
    pthread_cond_destroy(&s->idle_cond);
err_timer_cond:
    pthread_cond_destroy(&s->timer_cond);
err_mutex:
    pthread_mutex_destroy(&s->lock);
err_replay:
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

void hvd__kv_server_watch(hvd_kv_server_t *server, hvd_kv_server_watch_fn fn, void *arg) {
    pthread_mutex_lock(&server->watch_lock);
    server->watch = fn;
    server->watch_arg = arg;
    pthread_mutex_unlock(&server->watch_lock);
}

hvd_kv_store_t *hvd__kv_server_store(hvd_kv_server_t *server) {
    return server->store;
}

hvd_status_t hvd__kv_server_reset(hvd_kv_server_t *server, const char *const *scopes,
                                  const int *sizes, size_t n) {
    /* the store's notification releases every held request to re-evaluate */
    return hvd__kv_store_reset(server->store, scopes, sizes, n);
}

void hvd__kv_server_stop(hvd_kv_server_t *s) {
    if (!s)
        return;
    int64_t deadline = hvd__clock_deadline_ms(STOP_GRACE_MS);
    pthread_mutex_lock(&s->lock);
    atomic_store(&s->stopping, 1);
    release_all(s);
    pthread_cond_signal(&s->timer_cond);
    /* Let the daemon thread answer the released requests (503) before it closes them. */
    while (s->n_suspended > 0 && hvd__clock_remaining_ms(deadline) > 0) {
        struct timespec ts = hvd__clock_abstime(CLOCK_MONOTONIC, hvd__clock_remaining_ms(deadline));
        pthread_cond_timedwait(&s->idle_cond, &s->lock, &ts);
    }
    size_t unanswered = s->n_suspended;
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->timer, NULL);
    if (unanswered)
        HVD_LOG_D("rendezvous server: %zu held requests not answered before stop", unanswered);
    /* Accept nothing new, and give queued answers a moment to leave. */
    MHD_socket lfd = MHD_quiesce_daemon(s->daemon);
    for (;;) {
        const union MHD_DaemonInfo *info =
            MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
        if (!info || info->num_connections == 0 || hvd__clock_remaining_ms(deadline) == 0)
            break;
        hvd__clock_sleep_ms(5);
    }
    MHD_stop_daemon(s->daemon);
    if (lfd != MHD_INVALID_SOCKET)
        close(lfd);
    hvd__kv_store_destroy(s->store);
    hvd__kv_replay_destroy(s->replay);
    pthread_cond_destroy(&s->idle_cond);
    pthread_cond_destroy(&s->timer_cond);
    pthread_mutex_destroy(&s->lock);
    free(s->heap);
    free(s->sweep);
    hvd__secret_wipe(&s->secret);
    free(s);
}
