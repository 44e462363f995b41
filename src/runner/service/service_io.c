/* The socket side of the service wire (service.h): a client with deadlines and a threaded
 * server. The server runs one accept thread and one thread per connection, at most
 * max_connections of them; stop wakes the accept thread through a pipe and every connection
 * thread by shutting its socket down, then joins them all. */
#include "runner/service/service.h"

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "os/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

static hvd_status_t random_nonce(uint8_t nonce[HVD_SVC_NONCE_LEN]) {
    size_t got = 0;
    while (got < HVD_SVC_NONCE_LEN) {
        ssize_t n = getrandom(nonce + got, HVD_SVC_NONCE_LEN - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return hvd__error_set(HVD_ERR_IO, "cannot read random bytes for a nonce: %s",
                                  strerror(errno));
        got += (size_t)n;
    }
    return HVD_OK;
}

/* Read exactly len bytes before deadline. A connection closed before the first byte gives
 * HVD_ERR_PEER_LOST with *clean_p = 1 (when clean_p is given); closed midway, *clean_p = 0. */
static hvd_status_t recv_exact(int fd, void *buf, size_t len, int64_t deadline_ms, const char *peer,
                               int *clean_p) {
    size_t have = 0;
    if (clean_p)
        *clean_p = 0;
    while (have < len) {
        size_t got = 0;
        hvd_status_t st =
            hvd__socket_recv_some(fd, (uint8_t *)buf + have, len - have, deadline_ms, peer, &got);
        if (st != HVD_OK)
            return st;
        if (got == 0) {
            if (clean_p)
                *clean_p = have == 0;
            return hvd__error_set(HVD_ERR_PEER_LOST, "%s closed the connection%s", peer,
                                  have ? " in the middle of a message" : "");
        }
        have += got;
    }
    return HVD_OK;
}

/* --- client ------------------------------------------------------------------------------- */

struct hvd_svc_client {
    int fd;
    uint32_t seq;
    uint8_t nonce_s[HVD_SVC_NONCE_LEN];
    hvd_secret_t secret;
    char peer[300];
};

hvd_status_t hvd__svc_client_open(const char *addr, int port, const hvd_secret_t *secret,
                                  int64_t deadline_ms, hvd_svc_client_t **client_p) {
    hvd_svc_client_t *c = calloc(1, sizeof *c);
    if (!c)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for a service client");
    snprintf(c->peer, sizeof c->peer, "%s:%d", addr, port);
    c->secret = *secret;
    hvd_status_t st = hvd__socket_connect(addr, port, deadline_ms, &c->fd);
    if (st != HVD_OK)
        goto err_free;
    uint8_t ch[HVD_SVC_CHALLENGE_LEN];
    st = recv_exact(c->fd, ch, sizeof ch, deadline_ms, c->peer, NULL);
    if (st == HVD_OK)
        st = hvd__svc_challenge_decode(ch, c->nonce_s);
    if (st != HVD_OK) {
        hvd__error_wrap(st, "no service challenge from %s", c->peer);
        goto err_close;
    }
    *client_p = c;
    return HVD_OK;
err_close:
    close(c->fd);
err_free:
    hvd__secret_wipe(&c->secret);
    free(c);
    return st;
}

hvd_status_t hvd__svc_client_call(hvd_svc_client_t *c, uint16_t type, const uint8_t *body,
                                  size_t len, int64_t deadline_ms, uint16_t *resp_type_p,
                                  uint8_t *resp, size_t resp_cap, size_t *resp_len_p) {
    if (len > HVD_SVC_MAX_BODY)
        return hvd__error_set(HVD_ERR_TOO_LARGE, "request to %s of %zu bytes over the limit of %u",
                              c->peer, len, HVD_SVC_MAX_BODY);
    hvd_svc_head_t h = {.type = type, .seq = c->seq, .len = (uint32_t)len};
    hvd_status_t st = random_nonce(h.nonce_c);
    if (st != HVD_OK)
        return st;
    uint8_t prefix[HVD_SVC_REQ_PREFIX_LEN];
    st = hvd__svc_request_encode(prefix, &h, body, c->nonce_s, &c->secret);
    if (st == HVD_OK)
        st = hvd__socket_send_all(c->fd, prefix, sizeof prefix, deadline_ms, c->peer);
    if (st == HVD_OK && len)
        st = hvd__socket_send_all(c->fd, body, len, deadline_ms, c->peer);
    if (st != HVD_OK)
        return st;

    uint8_t rprefix[HVD_SVC_RESP_PREFIX_LEN];
    hvd_svc_head_t rh;
    st = recv_exact(c->fd, rprefix, sizeof rprefix, deadline_ms, c->peer, NULL);
    if (st == HVD_OK)
        st = hvd__svc_response_head_decode(rprefix, &rh);
    if (st != HVD_OK)
        return hvd__error_wrap(st, "bad response from %s", c->peer);
    /* An ERROR response is read into a local buffer whatever resp_cap is. */
    char errbuf[2 + HVD_SVC_ERROR_MAX + 1];
    uint8_t *dst = resp;
    if (rh.type == HVD_SVC_ERROR) {
        if (rh.len > sizeof errbuf)
            return hvd__error_set(HVD_ERR_PROTOCOL, "%s sent an oversize error message", c->peer);
        dst = (uint8_t *)errbuf;
    } else if (rh.len > resp_cap) {
        return hvd__error_set(HVD_ERR_TOO_LARGE,
                              "response from %s of %u bytes, at most %zu bytes expected", c->peer,
                              rh.len, resp_cap);
    }
    if (rh.len) {
        st = recv_exact(c->fd, dst, rh.len, deadline_ms, c->peer, NULL);
        if (st != HVD_OK)
            return st;
    }
    st = hvd__svc_response_verify(rprefix, &rh, dst, c->nonce_s, h.nonce_c, h.seq, &c->secret);
    if (st != HVD_OK)
        return hvd__error_wrap(st, "response from %s rejected", c->peer);
    c->seq++;
    if (rh.type == HVD_SVC_ERROR) {
        char msg[HVD_SVC_ERROR_MAX + 1];
        hvd_svc_dec_t d;
        hvd__svc_dec_init(&d, dst, rh.len, "ERROR response");
        hvd__svc_dec_str(&d, "message", msg, sizeof msg);
        if (hvd__svc_dec_end(&d) != HVD_OK)
            return hvd__error_wrap(HVD_ERR_PROTOCOL, "from %s", c->peer);
        return hvd__error_set(HVD_ERR_STATE, "%s refused the request: %s", c->peer, msg);
    }
    *resp_type_p = rh.type;
    *resp_len_p = rh.len;
    return HVD_OK;
}

hvd_status_t hvd__svc_client_ping(hvd_svc_client_t *c, int64_t deadline_ms,
                                  char name_p[HVD_SVC_NAME_MAX], char source_p[16]) {
    uint8_t resp[2 + HVD_SVC_NAME_MAX + 2 + 16];
    uint16_t type = 0;
    size_t len = 0;
    hvd_status_t st =
        hvd__svc_client_call(c, HVD_SVC_PING, NULL, 0, deadline_ms, &type, resp, sizeof resp, &len);
    if (st != HVD_OK)
        return st;
    if (type != HVD_SVC_PONG)
        return hvd__error_set(HVD_ERR_PROTOCOL, "%s answered PING with message type %u", c->peer,
                              type);
    hvd_svc_dec_t d;
    char name[HVD_SVC_NAME_MAX], source[16];
    hvd__svc_dec_init(&d, resp, len, "PONG");
    hvd__svc_dec_str(&d, "service name", name, sizeof name);
    hvd__svc_dec_str(&d, "source address", source, sizeof source);
    if (hvd__svc_dec_end(&d) != HVD_OK)
        return hvd__error_wrap(HVD_ERR_PROTOCOL, "from %s", c->peer);
    memcpy(name_p, name, sizeof name);
    memcpy(source_p, source, sizeof source);
    return HVD_OK;
}

const char *hvd__svc_client_peer(const hvd_svc_client_t *c) {
    return c->peer;
}

void hvd__svc_client_close(hvd_svc_client_t *c) {
    if (!c)
        return;
    close(c->fd);
    hvd__secret_wipe(&c->secret);
    free(c);
}

/* --- server ------------------------------------------------------------------------------- */

enum { SLOT_FREE = 0, SLOT_RUNNING, SLOT_FINISHED };

typedef struct {
    struct hvd_svc_server *server;
    pthread_t thread;
    int state;         /* SLOT_*, under the server's lock */
    int fd;            /* -1 once the thread has closed it; under the server's lock */
    int join;          /* stop only: the thread is to be joined */
    int authed;        /* a request on it verified: never dropped to make room */
    int64_t opened_ms; /* when it was accepted (the oldest stranger is dropped first) */
    char addr[16];
    char peer[32]; /* addr:port */
} conn_slot_t;

struct hvd_svc_server {
    char name[HVD_SVC_NAME_MAX];
    hvd_secret_t secret;
    unsigned max_connections;
    int idle_ms;
    hvd_svc_handler_fn handler;
    void *handler_arg;
    int listen_fd, port;
    int wake[2]; /* stop writes to wake[1]; the accept thread polls wake[0] */
    pthread_t acceptor;
    pthread_mutex_t lock;
    int stopping;
    int full_logged; /* "too many connections" logged since the last free slot */
    conn_slot_t *slots;
    /* refusal log rate limit, under the lock: a barrage of bad messages must not become a
     * barrage of log lines */
    int64_t log_window_ms;
    unsigned log_count, log_suppressed;
};

#define LOG_WINDOW_MS 1000
#define LOG_PER_WINDOW 5

/* 1 when a refusal may be logged now; counts the ones that may not. */
static int may_log(hvd_svc_server_t *s, unsigned *suppressed_p) {
    pthread_mutex_lock(&s->lock);
    int64_t now = hvd__clock_now_ms();
    *suppressed_p = 0;
    if (now - s->log_window_ms >= LOG_WINDOW_MS) {
        *suppressed_p = s->log_suppressed;
        s->log_window_ms = now;
        s->log_count = s->log_suppressed = 0;
    }
    int ok = s->log_count < LOG_PER_WINDOW;
    if (ok)
        s->log_count++;
    else
        s->log_suppressed++;
    pthread_mutex_unlock(&s->lock);
    return ok;
}

static void reject(hvd_svc_server_t *s, const conn_slot_t *slot) {
    unsigned suppressed;
    if (!may_log(s, &suppressed))
        return;
    if (suppressed)
        HVD_LOG_W("%s: %u more messages were rejected (not logged one by one)", s->name,
                  suppressed);
    HVD_LOG_W("%s: rejected a message from %s: %s", s->name, slot->peer, hvd_last_error());
}

/* Send one response with its prefix; the body may be empty. */
static hvd_status_t send_response(hvd_svc_server_t *s, conn_slot_t *slot,
                                  const uint8_t nonce_s[HVD_SVC_NONCE_LEN],
                                  const hvd_svc_head_t *req, uint16_t type, const uint8_t *body,
                                  size_t len) {
    hvd_svc_head_t h = {.type = type, .seq = req->seq, .len = (uint32_t)len};
    uint8_t prefix[HVD_SVC_RESP_PREFIX_LEN];
    hvd_status_t st = hvd__svc_response_encode(prefix, &h, body, nonce_s, req->nonce_c, &s->secret);
    int64_t deadline = hvd__clock_deadline_ms(s->idle_ms);
    if (st == HVD_OK)
        st = hvd__socket_send_all(slot->fd, prefix, sizeof prefix, deadline, slot->peer);
    if (st == HVD_OK && len)
        st = hvd__socket_send_all(slot->fd, body, len, deadline, slot->peer);
    return st;
}

/* Answer one authenticated request into resp; returns the response type. */
static uint16_t dispatch(hvd_svc_server_t *s, conn_slot_t *slot, const hvd_svc_head_t *h,
                         const uint8_t *body, uint8_t *resp, size_t *resp_len_p) {
    hvd_svc_enc_t e;
    hvd__svc_enc_init(&e, resp, HVD_SVC_MAX_BODY);
    if (h->type == HVD_SVC_PING) {
        hvd__svc_enc_str(&e, s->name);
        hvd__svc_enc_str(&e, slot->addr);
        *resp_len_p = e.len;
        return HVD_SVC_PONG;
    }
    uint16_t type = HVD_SVC_ERROR;
    hvd_status_t st = HVD_ERR_UNSUPPORTED;
    if (s->handler)
        st = s->handler(s->handler_arg, slot->addr, h->type, body, h->len, &type, resp,
                        HVD_SVC_MAX_BODY, resp_len_p);
    else
        hvd__error_set(st, "message type %u is not served here", h->type);
    if (st == HVD_OK)
        return type;
    char msg[HVD_SVC_ERROR_MAX + 1];
    snprintf(msg, sizeof msg, "%s", hvd_last_error());
    HVD_LOG_W("%s: refused a request from %s: %s", s->name, slot->peer, msg);
    hvd__svc_enc_init(&e, resp, HVD_SVC_MAX_BODY);
    hvd__svc_enc_str(&e, msg);
    *resp_len_p = e.len;
    return HVD_SVC_ERROR;
}

static void serve_connection(hvd_svc_server_t *s, conn_slot_t *slot) {
    uint8_t nonce_s[HVD_SVC_NONCE_LEN], ch[HVD_SVC_CHALLENGE_LEN];
    if (random_nonce(nonce_s) != HVD_OK) {
        HVD_LOG_E("%s: %s", s->name, hvd_last_error());
        return;
    }
    hvd__svc_challenge_encode(ch, nonce_s);
    if (hvd__socket_send_all(slot->fd, ch, sizeof ch, hvd__clock_deadline_ms(s->idle_ms),
                             slot->peer) != HVD_OK)
        return;
    uint8_t *resp = NULL; /* allocated for the first verified request: strangers cost none */
    for (uint32_t seq = 0;; seq++) {
        /* The idle deadline covers the whole request, so a client trickling bytes cannot
         * hold the connection longer than one silent one. */
        int64_t deadline = hvd__clock_deadline_ms(s->idle_ms);
        uint8_t prefix[HVD_SVC_REQ_PREFIX_LEN];
        int clean = 0;
        hvd_status_t st = recv_exact(slot->fd, prefix, sizeof prefix, deadline, slot->peer, &clean);
        if (st != HVD_OK) {
            if (!clean)
                HVD_LOG_D("%s: dropped the connection of %s: %s", s->name, slot->peer,
                          hvd_last_error());
            break;
        }
        hvd_svc_head_t h;
        if (hvd__svc_request_head_decode(prefix, &h) != HVD_OK) {
            reject(s, slot);
            break;
        }
        /* h.len is bounded by HVD_SVC_MAX_BODY: checked by the decoder above. */
        uint8_t *body = malloc(h.len ? h.len : 1);
        if (!body) {
            HVD_LOG_E("%s: out of memory serving %s", s->name, slot->peer);
            break;
        }
        st = h.len ? recv_exact(slot->fd, body, h.len, deadline, slot->peer, NULL) : HVD_OK;
        if (st != HVD_OK) {
            HVD_LOG_D("%s: dropped the connection of %s: %s", s->name, slot->peer,
                      hvd_last_error());
            free(body);
            break;
        }
        if (hvd__svc_request_verify(prefix, &h, body, nonce_s, seq, &s->secret) != HVD_OK) {
            reject(s, slot);
            free(body);
            break;
        }
        if (seq == 0) {
            pthread_mutex_lock(&s->lock);
            slot->authed = 1;
            pthread_mutex_unlock(&s->lock);
            if (!(resp = malloc(HVD_SVC_MAX_BODY))) {
                HVD_LOG_E("%s: out of memory serving %s", s->name, slot->peer);
                free(body);
                break;
            }
        }
        size_t resp_len = 0;
        uint16_t type = dispatch(s, slot, &h, body, resp, &resp_len);
        free(body);
        if (send_response(s, slot, nonce_s, &h, type, resp, resp_len) != HVD_OK) {
            HVD_LOG_D("%s: could not answer %s: %s", s->name, slot->peer, hvd_last_error());
            break;
        }
    }
    free(resp);
}

static void *connection_main(void *arg) {
    conn_slot_t *slot = arg;
    hvd_svc_server_t *s = slot->server;
    serve_connection(s, slot);
    pthread_mutex_lock(&s->lock);
    int fd = slot->fd;
    slot->fd = -1;
    slot->state = SLOT_FINISHED;
    pthread_mutex_unlock(&s->lock);
    close(fd);
    return NULL;
}

/* A slot for a new connection (joining a finished thread), or NULL when all are busy.
 * Called with the lock held. */
static conn_slot_t *take_slot(hvd_svc_server_t *s) {
    for (unsigned i = 0; i < s->max_connections; i++) {
        conn_slot_t *slot = &s->slots[i];
        if (slot->state == SLOT_FINISHED) {
            pthread_join(slot->thread, NULL);
            slot->state = SLOT_FREE;
        }
        if (slot->state == SLOT_FREE)
            return slot;
    }
    return NULL;
}

/* Every slot is busy: make room by dropping the connection that has waited longest without
 * a verified request (a stranger, or a peer still to say its first word), so that idle
 * strangers can never lock the job's own tasks out; connections that authenticated are
 * never dropped. Returns the freed slot, or NULL when every connection authenticated. Called
 * with the lock held; releases it while the dropped connection's thread ends (at once: its
 * socket is shut down). */
static conn_slot_t *evict_stranger(hvd_svc_server_t *s, char *who, size_t who_size) {
    conn_slot_t *oldest = NULL;
    for (unsigned i = 0; i < s->max_connections; i++) {
        conn_slot_t *slot = &s->slots[i];
        if (slot->state == SLOT_RUNNING && !slot->authed && slot->fd >= 0 &&
            (!oldest || slot->opened_ms < oldest->opened_ms))
            oldest = slot;
    }
    if (!oldest)
        return NULL;
    snprintf(who, who_size, "%s", oldest->peer);
    shutdown(oldest->fd, SHUT_RDWR);
    /* its thread takes the lock to finish: join it outside (only this accept thread takes
     * or frees slots, so the slot stays ours meanwhile) */
    pthread_mutex_unlock(&s->lock);
    pthread_join(oldest->thread, NULL);
    pthread_mutex_lock(&s->lock);
    oldest->state = SLOT_FREE;
    return oldest;
}

static void accept_one(hvd_svc_server_t *s) {
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    int fd = accept4(s->listen_fd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
            HVD_LOG_W("%s: accept failed: %s", s->name, strerror(errno));
        if (errno == EMFILE || errno == ENFILE || errno == ENOMEM || errno == ENOBUFS)
            hvd__clock_sleep_ms(50); /* do not spin while the process is out of descriptors */
        return;
    }
    char addr[16] = "?";
    inet_ntop(AF_INET, &sa.sin_addr, addr, sizeof addr);
    pthread_mutex_lock(&s->lock);
    conn_slot_t *slot = take_slot(s);
    char dropped[32] = "";
    if (!slot && (slot = evict_stranger(s, dropped, sizeof dropped)) != NULL) {
        unsigned suppressed;
        pthread_mutex_unlock(&s->lock);
        if (may_log(s, &suppressed))
            HVD_LOG_W("%s: dropped the connection of %s, silent since it connected, to make "
                      "room for %s (%u connections are open)",
                      s->name, dropped, addr, s->max_connections);
        pthread_mutex_lock(&s->lock);
    }
    if (!slot) {
        int first = !s->full_logged;
        s->full_logged = 1;
        pthread_mutex_unlock(&s->lock);
        if (first)
            HVD_LOG_W("%s: refused a connection from %s:%u: %u connections are open already",
                      s->name, addr, ntohs(sa.sin_port), s->max_connections);
        close(fd);
        return;
    }
    s->full_logged = 0;
    slot->server = s;
    slot->fd = fd;
    slot->authed = 0;
    slot->opened_ms = hvd__clock_now_ms();
    snprintf(slot->addr, sizeof slot->addr, "%s", addr);
    snprintf(slot->peer, sizeof slot->peer, "%s:%u", addr, ntohs(sa.sin_port));
    slot->state = SLOT_RUNNING;
    if (pthread_create(&slot->thread, NULL, connection_main, slot) != 0) {
        slot->state = SLOT_FREE;
        slot->fd = -1;
        pthread_mutex_unlock(&s->lock);
        HVD_LOG_W("%s: no thread for the connection of %s", s->name, addr);
        close(fd);
        return;
    }
    pthread_mutex_unlock(&s->lock);
}

static void *accept_main(void *arg) {
    hvd_svc_server_t *s = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = s->listen_fd, .events = POLLIN},
                              {.fd = s->wake[0], .events = POLLIN}};
        /* the stop pipe wakes this poll; the timeout only bounds the wait */
        int r = poll(p, 2, 1000);
        pthread_mutex_lock(&s->lock);
        int stopping = s->stopping;
        pthread_mutex_unlock(&s->lock);
        if (stopping)
            break;
        if (r > 0 && (p[0].revents & POLLIN))
            accept_one(s);
    }
    return NULL;
}

hvd_status_t hvd__svc_server_start(const hvd_svc_server_config_t *cfg,
                                   hvd_svc_server_t **server_p) {
    if (!cfg->secret || !cfg->name || !*cfg->name)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "a service needs a name and the job secret");
    hvd_svc_server_t *s = calloc(1, sizeof *s);
    if (!s)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for the %s", cfg->name);
    hvd_status_t st = HVD_OK;
    snprintf(s->name, sizeof s->name, "%s", cfg->name);
    s->secret = *cfg->secret;
    s->max_connections =
        cfg->max_connections ? cfg->max_connections : HVD_SVC_DEFAULT_MAX_CONNECTIONS;
    s->idle_ms = cfg->idle_ms > 0 ? cfg->idle_ms : HVD_SVC_DEFAULT_IDLE_MS;
    s->handler = cfg->handler;
    s->handler_arg = cfg->handler_arg;
    s->slots = calloc(s->max_connections, sizeof *s->slots);
    if (!s->slots) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for the %s", cfg->name);
        goto err_free;
    }
    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        st = hvd__error_set(HVD_ERR_IO, "%s: cannot create a mutex", cfg->name);
        goto err_free;
    }
    if (pipe2(s->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        st = hvd__error_set(HVD_ERR_IO, "%s: pipe(): %s", cfg->name, strerror(errno));
        goto err_mutex;
    }
    st = hvd__socket_listen(cfg->bind_addr, 128, &s->listen_fd, &s->port);
    if (st != HVD_OK) {
        hvd__error_wrap(st, "%s", cfg->name);
        goto err_pipe;
    }
    if (pthread_create(&s->acceptor, NULL, accept_main, s) != 0) {
        st = hvd__error_set(HVD_ERR_IO, "%s: cannot start its accept thread", cfg->name);
        goto err_listen;
    }
    *server_p = s;
    return HVD_OK;
err_listen:
    close(s->listen_fd);
err_pipe:
    close(s->wake[0]);
    close(s->wake[1]);
err_mutex:
    pthread_mutex_destroy(&s->lock);
err_free:
    hvd__secret_wipe(&s->secret);
    free(s->slots);
    free(s);
    return st;
}

int hvd__svc_server_port(const hvd_svc_server_t *s) {
    return s->port;
}

void hvd__svc_server_stop(hvd_svc_server_t *s) {
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->stopping = 1;
    pthread_mutex_unlock(&s->lock);
    ssize_t w = write(s->wake[1], "x", 1);
    (void)w;
    pthread_join(s->acceptor, NULL);
    close(s->listen_fd);
    /* No new connection threads from here on. Wake the running ones: a socket shut down for
     * reading makes their pending read return at once, while a response already being made
     * is still sent (the driver service stops as soon as it has told the last task DONE: with
     * both directions shut, that answer could be lost, and its task retried a listener that
     * was gone until its deadline, failing its host's ranks). */
    pthread_mutex_lock(&s->lock);
    for (unsigned i = 0; i < s->max_connections; i++) {
        conn_slot_t *slot = &s->slots[i];
        if (slot->state == SLOT_RUNNING && slot->fd >= 0)
            shutdown(slot->fd, SHUT_RD);
        slot->join = slot->state != SLOT_FREE;
    }
    pthread_mutex_unlock(&s->lock);
    for (unsigned i = 0; i < s->max_connections; i++)
        if (s->slots[i].join)
            pthread_join(s->slots[i].thread, NULL);
    close(s->wake[0]);
    close(s->wake[1]);
    pthread_mutex_destroy(&s->lock);
    hvd__secret_wipe(&s->secret);
    free(s->slots);
    free(s);
}
