/* The TCP transport's connections (tcp_impl.h): accepting and authenticating what arrives on
 * the listeners, and connecting to a peer, each a state machine the exchange loop steps. */
#include "transport/tcp_impl.h"

/* ---- accepting and authenticating ---------------------------------------------------- */

static void pending_drop(tcp_t *t, int i, const char *why) {
    if (why)
        HVD_LOG_W("rank %d: dropped a data connection from %s: %s", t->base.rank,
                  t->pending[i].from, why);
    hvd__tcpx_close_fd(t, t->pending[i].fd);
    t->pending[i] = t->pending[--t->npending];
}

/* The connection waiting longest for its HELLO: the one to give up when the list is full. A
 * peer answers its CHALLENGE within a round trip, so under a flood the strangers that came
 * before it are the oldest; dropping slot 0 instead could hit a peer, because removing an
 * entry moves the newest one there. */
static int oldest_pending(const tcp_t *t) {
    int oldest = 0;
    for (int i = 1; i < t->npending; i++)
        if (t->pending[i].seq < t->pending[oldest].seq)
            oldest = i;
    return oldest;
}

/* Accept what waits on one listener (is_unix: the same-host one) and send each its
 * CHALLENGE. */
static void accept_on(tcp_t *t, int lfd, int is_unix) {
    if (lfd < 0)
        return;
    for (;;) {
        struct sockaddr_storage sa;
        socklen_t len = sizeof sa;
        int fd = accept4(lfd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return; /* EAGAIN, or a transient error the next loop retries */
        if (t->npending == t->max_pending)
            pending_drop(t, oldest_pending(t), "too many unauthenticated connections");
        pending_t *pd = &t->pending[t->npending];
        memset(pd, 0, sizeof *pd);
        pd->fd = fd;
        pd->is_unix = is_unix;
        pd->since_ms = hvd__clock_now_ms();
        pd->seq = t->accepted++;
        if (is_unix) {
            pd->pid = hvd__socket_peer_pid(fd);
            if (pd->pid > 0)
                snprintf(pd->from, sizeof pd->from, "this host's unix socket (pid %ld)", pd->pid);
            else
                snprintf(pd->from, sizeof pd->from, "this host's unix socket");
            (void)hvd__proc_still_runs(pd->pid, &pd->run_ns, 0); /* the first reading */
        } else {
            const struct sockaddr_in *in = (const struct sockaddr_in *)&sa;
            char ip[16] = "?";
            inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
            snprintf(pd->from, sizeof pd->from, "%s:%d", ip, ntohs(in->sin_port));
        }
        uint8_t ch[HVD_CHALLENGE_LEN];
        if (getrandom(pd->nonce_a, HVD_NONCE_LEN, 0) != HVD_NONCE_LEN) {
            close(fd);
            continue;
        }
        hvd__frame_challenge_encode(ch, pd->nonce_a);
        /* A fresh socket's buffer always takes 24 bytes; anything else means it is gone. */
        if (send(fd, ch, sizeof ch, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof ch) {
            close(fd);
            continue;
        }
        if (!is_unix) {
            hvd__socket_tune_data(fd);
            hvd__socket_set_congestion(fd, t->congestion);
        }
        hvd__tcpx_epoll_add(t, fd);
        t->npending++;
    }
}

void hvd__tcpx_accept_all(tcp_t *t) {
    accept_on(t, t->listen_fd, 0);
    accept_on(t, t->ulisten_fd, 1);
}

/* Whether a same-host connector that sent no HELLO within handshake_ms is still at it: a
 * thread of its process waits for a core or ran since the last look. With thousands of
 * ranks on a few cores a rank may wait longer than that for its turn to answer the
 * CHALLENGE; it gets another handshake_ms, a stopped or idle one is dropped. (Strangers
 * that keep running cannot crowd peers out: the oldest pending connection makes room.) */
static int connector_runs(pending_t *pd) {
    return pd->is_unix && hvd__proc_still_runs(pd->pid, &pd->run_ns, 1) > 0;
}

/* Step every accepted connection's handshake. Returns 1 if anything happened. */
int hvd__tcpx_step_pending(tcp_t *t) {
    int progressed = 0;
    int64_t now = hvd__clock_now_ms();
    for (int i = 0; i < t->npending;) {
        pending_t *pd = &t->pending[i];
        ssize_t n = recv(pd->fd, pd->buf + pd->got, HVD_HELLO_LEN - pd->got, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            pending_drop(t, i, NULL); /* closed before authenticating: nothing to say */
            progressed = 1;
            continue;
        }
        if (n < 0) {
            if (now - pd->since_ms > t->handshake_ms && connector_runs(pd)) {
                pd->since_ms = now;
            } else if (now - pd->since_ms > t->handshake_ms) {
                char why[64];
                snprintf(why, sizeof why, "no authentication within %d ms", t->handshake_ms);
                pending_drop(t, i, why);
                progressed = 1;
                continue;
            }
            i++;
            continue;
        }
        progressed = 1;
        pd->got += (size_t)n;
        /* Reject garbage on its first bytes instead of waiting for a full message. */
        if (pd->got >= 4 && memcmp(pd->buf, "HVDH", 4) != 0) {
            pending_drop(t, i, "not an hvd HELLO (wrong magic)");
            continue;
        }
        if (pd->got < HVD_HELLO_LEN) {
            i++;
            continue;
        }
        hvd_hello_t h;
        hvd_status_t st = hvd__frame_hello_decode(pd->buf, pd->nonce_a, &t->secret, &h);
        if (st != HVD_OK) {
            pending_drop(t, i, hvd_last_error());
            continue;
        }
        if (h.to != (uint32_t)t->base.rank || h.from >= (uint32_t)t->base.rank ||
            h.generation != t->generation) {
            char why[160];
            snprintf(why, sizeof why,
                     "HELLO from rank %u to rank %u of generation %u (this is rank %d of "
                     "generation %u)",
                     h.from, h.to, h.generation, t->base.rank, t->generation);
            pending_drop(t, i, why);
            continue;
        }
        peer_t *p = &t->peers[h.from];
        if (p->state == PEER_READY) {
            pending_drop(t, i, "a second connection from an already connected rank");
            continue;
        }
        if (pd->is_unix && !t->local[h.from]) {
            pending_drop(t, i, "a same-host connection from a rank on another host");
            continue;
        }
        /* A same-host peer gets the pair's shared memory with the WELCOME. */
        int shm_fd = -1;
        if (pd->is_unix &&
            hvd__shm_create(hvd__tcpx_shm_bytes(t), "hvd-rings", &shm_fd) != HVD_OK) {
            pending_drop(t, i, hvd_last_error());
            continue;
        }
        uint8_t w[HVD_WELCOME_LEN];
        ssize_t sent = -1;
        int fds[2] = {shm_fd, t->arena_fd};
        if (hvd__frame_welcome_encode(w, &h, &t->secret) == HVD_OK)
            sent = shm_fd >= 0 ? hvd__socket_send_with_fds(pd->fd, w, sizeof w, fds,
                                                           t->arena_fd >= 0 ? 2 : 1)
                               : send(pd->fd, w, sizeof w, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (sent != (ssize_t)sizeof w) {
            if (shm_fd >= 0)
                close(shm_fd);
            pending_drop(t, i, "could not send WELCOME");
            continue;
        }
        /* The connection becomes rank from's; it leaves the pending list without closing. */
        int fd = pd->fd;
        t->pending[i] = t->pending[--t->npending];
        if (p->fd >= 0)
            hvd__tcpx_close_fd(t, p->fd);
        p->fd = fd;
        p->state = PEER_READY;
        hvd__tcpx_rd_add(t, fd);
        p->stage = malloc(STAGE_SIZE);
        if (!p->stage) {
            if (shm_fd >= 0)
                close(shm_fd);
            hvd__tcpx_tcp_abort(&t->base, HVD_ERR_NO_MEMORY,
                                "out of memory for a connection buffer");
            return 1;
        }
        if (shm_fd >= 0 && hvd__tcpx_shm_attach(t, (int)h.from, p, shm_fd) != HVD_OK) {
            char copy[512];
            snprintf(copy, sizeof copy, "%s", hvd_last_error());
            hvd__tcpx_tcp_abort(&t->base, HVD_ERR_IO, copy);
            return 1;
        }
        HVD_LOG_D("rank %d: accepted data connection from rank %u%s", t->base.rank, h.from,
                  p->is_shm ? " through shared memory" : "");
    }
    return progressed;
}

/* ---- connecting ----------------------------------------------------------------------- */

/* Step the connector's side of peer r's set-up. Returns 1 progressed, 0 nothing, or an
 * error status (negative). */
int hvd__tcpx_step_connect(tcp_t *t, int r) {
    peer_t *p = &t->peers[r];
    if (p->state == PEER_CONNECTING) {
        struct pollfd pf = {.fd = p->fd, .events = POLLOUT};
        if (poll(&pf, 1, 0) <= 0)
            return 0;
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
            char what[160];
            snprintf(what, sizeof what, "refused the data connection (%s): is it still running?",
                     strerror(err));
            return hvd__tcpx_peer_lost(t, r, what);
        }
        p->state = PEER_CHALLENGE;
        p->hs_got = 0;
        return 1;
    }
    size_t want = p->state == PEER_CHALLENGE ? HVD_CHALLENGE_LEN : HVD_WELCOME_LEN;
    ssize_t n;
    if (p->is_shm && p->state == PEER_WELCOME) {
        /* The pair's rings, and from the host's highest rank the arena too. */
        int fds[2] = {p->shm_fd, t->arena_in_fd};
        n = hvd__socket_recv_with_fds(p->fd, p->hs + p->hs_got, want - p->hs_got, fds,
                                      t->arena_n && r == t->arena_ranks[t->arena_n - 1] ? 2 : 1);
        p->shm_fd = fds[0];
        t->arena_in_fd = fds[1];
    } else {
        n = recv(p->fd, p->hs + p->hs_got, want - p->hs_got, MSG_DONTWAIT);
    }
    if (n == 0)
        return hvd__tcpx_peer_lost(t, r,
                                   "closed the data connection during the handshake (a different "
                                   "job on that port, or the rank exited?)");
    if (n < 0)
        return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                   ? 0
                   : hvd__tcpx_peer_lost(t, r, strerror(errno));
    p->hs_got += (size_t)n;
    if (p->hs_got < want)
        return 1;
    hvd_status_t st;
    if (p->state == PEER_CHALLENGE) {
        memset(&p->hello, 0, sizeof p->hello);
        st = hvd__frame_challenge_decode(p->hs, p->hello.nonce_a);
        if (st != HVD_OK)
            return hvd__error_wrap(HVD_ERR_PROTOCOL, "rank %d (%s:%d)", r, t->addrs[r].addr,
                                   t->addrs[r].port);
        p->hello.from = (uint32_t)t->base.rank;
        p->hello.to = (uint32_t)r;
        p->hello.generation = t->generation;
        if (getrandom(p->hello.nonce_c, HVD_NONCE_LEN, 0) != HVD_NONCE_LEN)
            return hvd__error_set(HVD_ERR_IO, "getrandom failed");
        uint8_t hello[HVD_HELLO_LEN];
        st = hvd__frame_hello_encode(hello, &p->hello, &t->secret);
        if (st != HVD_OK)
            return st;
        if (send(p->fd, hello, sizeof hello, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof hello)
            return hvd__tcpx_peer_lost(t, r, "closed the data connection during the handshake");
        p->state = PEER_WELCOME;
        p->hs_got = 0;
        return 1;
    }
    st = hvd__frame_welcome_check(p->hs, &p->hello, &t->secret);
    if (st != HVD_OK)
        return hvd__error_wrap(HVD_ERR_AUTH, "rank %d (%s:%d)", r, t->addrs[r].addr,
                               t->addrs[r].port);
    p->stage = malloc(STAGE_SIZE);
    if (!p->stage)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for a connection buffer");
    if (p->is_shm) {
        int fd = p->shm_fd;
        p->shm_fd = -1;
        p->is_shm = 0; /* until attached */
        if (fd < 0)
            return hvd__error_set(HVD_ERR_PROTOCOL,
                                  "rank %d (host %s) sent no shared memory with its WELCOME", r,
                                  t->addrs[r].host);
        st = hvd__tcpx_shm_attach(t, r, p, fd);
        if (st != HVD_OK)
            return st;
        if (t->arena_in_fd >= 0 && !t->arena_mem)
            hvd__tcpx_arena_map(t, r);
    }
    p->state = PEER_READY;
    hvd__tcpx_rd_add(t, p->fd);
    HVD_LOG_D("rank %d: connected to rank %d%s", t->base.rank, r,
              p->is_shm ? " through shared memory" : "");
    return 1;
}

/* Fill t->addrs[r] (a planned check-in leaves addresses to be learnt, tcp.h). */
hvd_status_t hvd__tcpx_resolve(tcp_t *t, int r) {
    return t->resolve ? t->resolve(t->resolve_arg, r, t->addrs)
                      : hvd__error_set(HVD_ERR_INVALID_ARG, "rank %d's address is not known", r);
}

hvd_status_t hvd__tcpx_start_connection(tcp_t *t, int r) {
    peer_t *p = &t->peers[r];
    if (r < t->base.rank) {
        p->state = PEER_AWAIT;
        return HVD_OK;
    }
    /* (a keyed name needs no address: a same-host peer is reached without the store) */
    if (t->addrs[r].port == 0 && !(t->local[r] && t->keyed_unix_names)) {
        hvd_status_t st = hvd__tcpx_resolve(t, r);
        if (st != HVD_OK)
            return st;
    }
    if (t->local[r]) {
        char name[HVD_TCP_UNIX_NAME_MAX];
        size_t len = hvd__tcp_unix_name(t->keyed_unix_names ? &t->secret : NULL, t->generation, r,
                                        t->addrs[r].addr, t->addrs[r].port, name);
        if (len && hvd__socket_unix_connect(name, len, &p->fd) == HVD_OK) {
            p->is_shm = 1; /* once the WELCOME brings the memory */
            hvd__tcpx_epoll_add(t, p->fd);
            p->state = PEER_CONNECTING;
            return HVD_OK;
        }
        /* Not reachable that way (a host name shared across network namespaces, or no
         * listener): TCP, as to any other host. */
        HVD_LOG_D("rank %d: rank %d is not reachable over this host's unix socket (%s); using "
                  "TCP",
                  t->base.rank, r, hvd_last_error());
        hvd__error_clear();
        t->local[r] = 0;
        if (t->addrs[r].port == 0) {
            hvd_status_t st = hvd__tcpx_resolve(t, r);
            if (st != HVD_OK)
                return st;
        }
    }
    hvd_status_t st = hvd__socket_connect_start(t->addrs[r].addr, t->addrs[r].port, &p->fd);
    if (st != HVD_OK) {
        char name[128];
        return hvd__error_wrap(st, "connecting to %s",
                               hvd__tcpx_peer_name(t, r, name, sizeof name));
    }
    if (hvd__socket_set_congestion(p->fd, t->congestion) != 0)
        HVD_LOG_D("rank %d: TCP congestion control '%s' refused; using the system's", t->base.rank,
                  t->congestion);
    hvd__tcpx_epoll_add(t, p->fd);
    p->state = PEER_CONNECTING;
    return HVD_OK;
}

size_t hvd__tcp_unix_name(const hvd_secret_t *secret, uint32_t generation, int rank,
                          const char *addr, int port, char out[HVD_TCP_UNIX_NAME_MAX]) {
    int n;
    if (secret) {
        static const char label[] = "hvd unix listener";
        uint8_t gen[4], who[4], mac[HVD_HMAC_LEN];
        hvd__le32_put(gen, generation);
        hvd__le32_put(who, (uint32_t)rank);
        const void *parts[] = {label, gen, who};
        const size_t lens[] = {sizeof label - 1, sizeof gen, sizeof who};
        if (hvd__hmac_sha256(secret->bytes, sizeof secret->bytes, parts, lens, 3, mac) != 0)
            return 0;
        /* 96 bits: no guess lands on a name before its rank binds it */
        n = snprintf(out, HVD_TCP_UNIX_NAME_MAX, "hvd-data-");
        for (int i = 0; i < 12; i++)
            n += snprintf(out + n, HVD_TCP_UNIX_NAME_MAX - (size_t)n, "%02x", mac[i]);
    } else {
        n = snprintf(out, HVD_TCP_UNIX_NAME_MAX, "hvd-data-%s:%d", addr, port);
    }
    return n > 0 && n < HVD_TCP_UNIX_NAME_MAX ? (size_t)n : 0;
}
