/* The TCP transport (tcp.h). One thread drives everything: exchange() loops over the
 * transfers it was given, making every non-blocking send and receive that can progress, and
 * only when nothing can (after busy_poll_us of trying) sleeps in epoll_wait. Connection
 * set-up and the handshake of connections accepted from other ranks (or strangers) are
 * state machines stepped by the same loop, so a stranger who connects and stalls never
 * blocks the job. */
#include "transport/tcp_impl.h"

static void describe_waits(tcp_t *t, hvd_xfer_t *xfers, char *out, size_t out_size) {
    size_t n = 0;
    out[0] = '\0';
    for (int r = 0; r < t->base.size && n < out_size; r++) {
        peer_t *p = &t->peers[r];
        if (!p->active)
            continue;
        char name[128];
        hvd__tcpx_peer_name(t, r, name, sizeof name);
        const char *what = NULL;
        char buf[200];
        if (p->state == PEER_AWAIT)
            what = "to connect to this rank";
        else if (p->state != PEER_READY)
            what = "to complete the connection handshake";
        else if (p->recv_head != NONE) {
            hvd_xfer_t *x = &xfers[p->recv_head];
            snprintf(
                buf, sizeof buf, "to send data (%llu of %llu bytes of the frame received)",
                (unsigned long long)(p->in_frame ? p->frame_got : 0),
                (unsigned long long)(p->in_frame ? p->frame_len : hvd__tcpx_xfer_payload_len(x)));
            what = buf;
        } else if (p->send_head != NONE) {
            what = "to read the data this rank is sending";
        }
        if (!what)
            continue;
        /* a same-host peer blocked behind another rank says so in the arena */
        int via = -1;
        for (int i = 0; t->arena_usable && i < t->arena_n; i++)
            if (t->arena_ranks[i] == r && i != t->arena_self)
                via = hvd__arena_waits_for(&t->arena, i);
        char also[64] = "";
        if (via >= 0 && via != t->base.rank)
            snprintf(also, sizeof also, " (itself waiting for rank %d)", via);
        int w = snprintf(out + n, out_size - n, "%s%s %s%s", n ? "; " : "", name, what, also);
        if (w > 0)
            n += (size_t)w;
    }
}

/* The first peer the exchange still waits for, for this rank's wait record (-1: none). */
static int first_waited(tcp_t *t) {
    for (int r = 0; r < t->base.size; r++) {
        const peer_t *p = &t->peers[r];
        if (p->active && (p->state != PEER_READY || p->recv_head != NONE || p->send_head != NONE))
            return r;
    }
    return -1;
}

/* Peers asked at one look whether they still run: a wait on thousands of peers asks a few,
 * and goes on if one runs (the stopped one is then the last left, and fails the wait). */
#define WATCHED_MAX 64

/* Whether a same-host peer this wait waits for still runs (tcp.h, progressing). Every peer
 * asked takes a reading that the next look compares with. */
static int waited_peer_runs(tcp_t *t) {
    if (!t->progressing)
        return 0;
    int runs = 0, asked = 0;
    for (int r = 0; r < t->base.size && asked < WATCHED_MAX; r++) {
        const peer_t *p = &t->peers[r];
        if (!t->local[r] || !p->active ||
            (p->state == PEER_READY && p->recv_head == NONE && p->send_head == NONE))
            continue;
        asked++;
        runs |= t->progressing(t->progress_arg, r);
    }
    return runs;
}

/* Before the exchange sleeps: drop the doorbell bytes of its same-host peers and ask each to
 * ring when its ring moves the way this rank waits for. 1 when something can move already
 * (then do not sleep), also a hang-up, which the next read or write reports. */
static int shm_sleep(tcp_t *t, hvd_xfer_t *xfers, int nactive) {
    int ready = 0;
    for (int k = 0; k < nactive; k++) {
        peer_t *p = &t->peers[t->active[k]];
        if (p->state != PEER_READY || !p->is_shm)
            continue;
        hvd__tcpx_drain_doorbell(p);
        if (p->hup)
            ready = 1;
        if (p->recv_head != NONE && hvd__ring_reader_sleep(&p->rx))
            ready = 1;
        if (p->send_head != NONE) {
            const hvd_xfer_t *x = &xfers[p->send_head];
            if ((!x->after || x->after->done) && hvd__ring_writer_sleep(&p->tx))
                ready = 1;
        }
    }
    return ready;
}

static int ensure_scratch(tcp_t *t, size_t n) {
    if (n <= t->next_cap)
        return 0;
    size_t *nx = realloc(t->next, n * sizeof *nx);
    if (!nx)
        return -1;
    t->next = nx;
    t->next_cap = n;
    return 0;
}

/* Advance peer r's send (is_send) or receive queue as far as it goes without blocking:
 * completed transfers leave the queue and run their on_done. Returns 1 if anything moved,
 * 0 if nothing could, or a negative status. */
static int drain_queue(tcp_t *t, int r, hvd_xfer_t *xfers, int is_send, size_t *remaining) {
    peer_t *p = &t->peers[r];
    size_t *head = is_send ? &p->send_head : &p->recv_head;
    int progressed = 0;
    while (*head != NONE) {
        hvd_xfer_t *x = &xfers[*head];
        if (is_send && x->after && !x->after->done)
            break;
        int rc = is_send ? hvd__tcpx_advance_send(t, r, x) : hvd__tcpx_advance_recv(t, r, x);
        if (rc < 0)
            return rc;
        if (rc == 0)
            break;
        progressed = 1;
        if (!x->done)
            break;
        *head = t->next[*head];
        (*remaining)--;
        if (x->on_done) {
            hvd_status_t st = x->on_done(x);
            if (st != HVD_OK)
                return st;
        }
    }
    return progressed;
}

hvd_status_t hvd__tcpx_tcp_exchange(hvd_transport_t *base, hvd_xfer_t *xfers, size_t n,
                                    const char *what) {
    tcp_t *t = (tcp_t *)base;
    if (t->poison != HVD_OK)
        return hvd__tcpx_tcp_health(base);
    int nactive = 0;
    int noted = 0; /* this rank's wait record in the host arena says whom it waits for */
    hvd_status_t st = HVD_OK;
    if (hvd__tcpx_is_interrupted(t)) {
        st = hvd__tcpx_interrupt_error(t);
        goto fail;
    }
    if (ensure_scratch(t, n) != 0)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "%s: out of memory", what);
    /* Build the per-peer queues (array order) and start missing connections. */
    for (size_t i = n; i-- > 0;) {
        hvd_xfer_t *x = &xfers[i];
        if (x->peer < 0 || x->peer >= base->size || x->peer == base->rank) {
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: transfer to invalid peer %d", what,
                                  x->peer);
        }
        x->done = 0;
        x->pos = 0;
        x->frame_len = 0;
        peer_t *p = &t->peers[x->peer];
        if (!p->active) {
            p->active = 1;
            p->send_head = p->recv_head = NONE;
            t->active[nactive++] = x->peer;
        }
        size_t *head = x->is_send ? &p->send_head : &p->recv_head;
        t->next[i] = *head;
        *head = i;
    }
    for (int k = 0; k < nactive; k++) {
        int r = t->active[k];
        if (t->peers[r].state == PEER_NONE && (st = hvd__tcpx_start_connection(t, r)) != HVD_OK)
            goto fail;
    }
    size_t remaining = n;
    int64_t last_progress = hvd__clock_now_us();
    const int64_t base_limit_us = (int64_t)t->timeout_ms * 1000;
    int64_t idle_limit_us = base_limit_us;
    int grace = 0, looked = 0;
    while (remaining > 0) {
        int progressed = 0;
        if (hvd__tcpx_is_interrupted(t)) {
            st = hvd__tcpx_interrupt_error(t);
            goto fail;
        }
        if (t->npending > 0)
            progressed |= hvd__tcpx_step_pending(t);
        for (int k = 0; k < nactive; k++) {
            int r = t->active[k];
            peer_t *p = &t->peers[r];
            if (p->state == PEER_AWAIT) {
                hvd__tcpx_accept_all(t);
                progressed |= hvd__tcpx_step_pending(t);
                if (p->state != PEER_READY)
                    continue;
            }
            while (p->state == PEER_CONNECTING || p->state == PEER_CHALLENGE ||
                   p->state == PEER_WELCOME) {
                int rc = hvd__tcpx_step_connect(t, r);
                if (rc < 0) {
                    st = rc;
                    goto fail;
                }
                if (rc == 0)
                    break;
                progressed = 1;
            }
            if (p->state != PEER_READY)
                continue;
            int sent = drain_queue(t, r, xfers, 1, &remaining);
            int got = sent < 0 ? 0 : drain_queue(t, r, xfers, 0, &remaining);
            int rc = sent < 0 ? sent : got < 0 ? got : (sent | got);
            if (rc < 0) {
                st = rc;
                goto fail;
            }
            progressed |= rc;
        }
        if (remaining == 0)
            break;
        int64_t now = hvd__clock_now_us();
        if (progressed) {
            last_progress = now;
            looked = 0;
            continue;
        }
        int64_t idle = now - last_progress;
        if (!looked && idle >= base_limit_us / 2) {
            /* half-way: the readings the look at the timeout compares with (a stopped peer
             * still fails the wait at the timeout, and the grace below keeps its meaning) */
            (void)waited_peer_runs(t);
            looked = 1;
        }
        if (idle >= idle_limit_us && !grace) {
            /* A peer blocked behind another rank (on its host, say) times out at about the
             * same moment and tells every peer whom it waited for: a moment for that cause
             * to arrive (it ends this wait, as any peer's failure does) before naming the
             * peer this rank waited for, who may only be blocked. */
            grace = 1;
            idle_limit_us += TIMEOUT_GRACE_US;
            continue;
        }
        if (idle >= idle_limit_us && waited_peer_runs(t)) {
            /* starved, not lost: another timeout (tcp.h, progressing) */
            last_progress = now;
            idle_limit_us = base_limit_us;
            grace = 0;
            continue;
        }
        if (idle >= idle_limit_us) {
            char waits[768];
            describe_waits(t, xfers, waits, sizeof waits);
            st = hvd__error_set(HVD_ERR_TIMEOUT,
                                "%s: no progress for %d s (HOROVOD_GLOO_TIMEOUT_SECONDS) waiting "
                                "for %s",
                                what, t->timeout_ms / 1000, waits);
            goto fail;
        }
        if (idle < t->busy_poll_us && !__atomic_load_n(&t->base.quiet, __ATOMIC_RELAXED)) {
            if (t->yield_when_idle || idle >= HVD_SPIN_ALONE_US)
                sched_yield();
            continue;
        }
        /* Nothing moved for the whole busy-poll budget: sleep until a socket changes. Every
         * socket was tried since its last event, so edge-triggered epoll cannot miss one;
         * same-host peers are asked to ring when their rings move. */
        if (shm_sleep(t, xfers, nactive))
            continue;
        hvd__tcpx_accept_all(t);
        if (t->arena_usable) {
            /* (rewritten every slice: a record that grows old means a stopped process) */
            hvd__arena_note_wait(&t->arena, first_waited(t));
            noted = 1;
        }
        struct epoll_event ev[32];
        int64_t left_ms = (idle_limit_us - idle) / 1000 + 1;
        int rc = epoll_wait(t->epfd, ev, 32, left_ms > 100 ? 100 : (int)left_ms);
        (void)rc;
    }
    for (int k = 0; k < nactive; k++)
        t->peers[t->active[k]].active = 0;
    if (noted)
        hvd__arena_note_wait(&t->arena, -1);
    return HVD_OK;

fail:
    for (int k = 0; k < nactive; k++)
        t->peers[t->active[k]].active = 0;
    if (st == HVD_OK)
        st = HVD_ERR_IO;
    {
        char copy[1024];
        snprintf(copy, sizeof copy, "%s", hvd_last_error());
        hvd__tcpx_tcp_abort(base, st, copy);
    }
    /* (only now: a host peer timing out meanwhile reads either the record or the abort) */
    if (noted)
        hvd__arena_note_wait(&t->arena, -1);
    return hvd__error_prefix(st, what);
}

static void tcp_destroy(hvd_transport_t *base) {
    tcp_t *t = (tcp_t *)base;
    if (!t)
        return;
    for (int r = 0; r < base->size; r++)
        hvd__tcpx_peer_reset(t, &t->peers[r]);
    for (int i = 0; i < t->npending; i++)
        close(t->pending[i].fd);
    if (t->listen_fd >= 0)
        close(t->listen_fd);
    if (t->ulisten_fd >= 0)
        close(t->ulisten_fd);
    if (t->epfd >= 0)
        close(t->epfd);
    if (t->rdfd >= 0)
        close(t->rdfd);
    if (t->int_fd >= 0)
        close(t->int_fd);
    pthread_mutex_destroy(&t->int_lock);
    if (t->arena_mem)
        hvd__shm_unmap(t->arena_mem, t->arena.bytes);
    if (t->arena_fd >= 0)
        close(t->arena_fd);
    if (t->arena_in_fd >= 0)
        close(t->arena_in_fd);
    free(t->arena_ranks);
    free(t->pending);
    hvd__secret_wipe(&t->secret);
    free(t->peers);
    free(t->local);
    free(t->addrs);
    free(t->next);
    free(t->active);
    free(t);
}

static int tcp_wait_fd(hvd_transport_t *base) {
    return ((tcp_t *)base)->rdfd;
}

static int tcp_buffered(hvd_transport_t *base) {
    tcp_t *t = (tcp_t *)base;
    for (int r = 0; r < base->size; r++) {
        const peer_t *p = &t->peers[r];
        if (p->state == PEER_READY && (p->stage_end > p->stage_pos || p->hdr_got || p->in_frame))
            return 1;
    }
    /* Same-host peers write into rings, which poll cannot see: ask each to ring when it
     * writes (the engine polls tcp_wait_fd next), then look. */
    int any = 0;
    for (int r = 0; r < base->size; r++) {
        peer_t *p = &t->peers[r];
        if (p->state != PEER_READY || !p->is_shm)
            continue;
        hvd__tcpx_drain_doorbell(p);
        any |= hvd__ring_reader_sleep(&p->rx) || p->hup;
    }
    return any;
}

static const hvd_transport_ops_t TCP_OPS = {
    .name = "tcp",
    .exchange = hvd__tcpx_tcp_exchange,
    .wait_fd = tcp_wait_fd,
    .buffered = tcp_buffered,
    .abort = hvd__tcpx_tcp_abort,
    .interrupt = hvd__tcpx_tcp_interrupt,
    .health = hvd__tcpx_tcp_health,
    .arena = hvd__tcpx_tcp_arena,
    .destroy = tcp_destroy,
};

hvd_status_t hvd__tcp_create(const hvd_tcp_config_t *cfg, hvd_transport_t **t_p) {
    tcp_t *t = calloc(1, sizeof *t);
    if (!t) {
        close(cfg->listen_fd);
        if (cfg->local && cfg->unix_listen_fd >= 0)
            close(cfg->unix_listen_fd);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory creating the tcp transport");
    }
    t->base.ops = &TCP_OPS;
    t->base.rank = cfg->rank;
    t->base.size = cfg->size;
    t->listen_fd = cfg->listen_fd;
    t->ulisten_fd = cfg->local ? cfg->unix_listen_fd : -1;
    t->epfd = epoll_create1(EPOLL_CLOEXEC);
    t->rdfd = epoll_create1(EPOLL_CLOEXEC);
    t->int_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    t->arena_fd = t->arena_in_fd = -1;
    pthread_mutex_init(&t->int_lock, NULL);
    t->secret = *cfg->secret;
    t->generation = cfg->generation;
    t->timeout_ms = cfg->timeout_ms;
    t->busy_poll_us = cfg->busy_poll_us;
    t->yield_when_idle = cfg->yield_when_idle;
    snprintf(t->congestion, sizeof t->congestion, "%s", cfg->congestion ? cfg->congestion : "");
    t->addrs = calloc((size_t)cfg->size, sizeof *t->addrs);
    t->peers = calloc((size_t)cfg->size, sizeof *t->peers);
    t->active = calloc((size_t)cfg->size, sizeof *t->active);
    t->local = calloc((size_t)cfg->size, 1);
    t->max_pending = MAX_PENDING + cfg->size;
    t->handshake_ms =
        cfg->timeout_ms > 0 && cfg->timeout_ms < HANDSHAKE_MS ? cfg->timeout_ms : HANDSHAKE_MS;
    t->pending = calloc((size_t)t->max_pending, sizeof *t->pending);
    if (t->epfd < 0 || t->rdfd < 0 || t->int_fd < 0 || !t->addrs || !t->peers || !t->active ||
        !t->local || !t->pending) {
        tcp_destroy(&t->base);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "cannot create the tcp transport");
    }
    memcpy(t->addrs, cfg->peers, (size_t)cfg->size * sizeof *t->addrs);
    t->resolve = cfg->resolve;
    t->keyed_unix_names = cfg->keyed_unix_names;
    t->progressing = cfg->progressing;
    t->progress_arg = cfg->progress_arg;
    t->resolve_arg = cfg->resolve_arg;
    int nlocal = 0;
    for (int r = 0; r < cfg->size; r++) {
        t->peers[r].fd = t->peers[r].shm_fd = -1;
        t->peers[r].send_head = t->peers[r].recv_head = NONE;
        t->local[r] = cfg->local && cfg->local[r] && r != cfg->rank;
        nlocal += t->local[r];
    }
    t->ring_cap = hvd__tcp_ring_cap(nlocal + 1);
    if (cfg->local && hvd__tcpx_arena_plan(t) != HVD_OK) {
        tcp_destroy(&t->base);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "cannot create the tcp transport");
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.fd = t->listen_fd};
    epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->listen_fd, &ev);
    hvd__tcpx_rd_add(t, t->listen_fd);
    if (t->ulisten_fd >= 0) {
        struct epoll_event uev = {.events = EPOLLIN | EPOLLET, .data.fd = t->ulisten_fd};
        epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->ulisten_fd, &uev);
        hvd__tcpx_rd_add(t, t->ulisten_fd);
    }
    /* Level-triggered in both sets: once interrupted, every later wait returns at once. */
    struct epoll_event iev = {.events = EPOLLIN, .data.fd = t->int_fd};
    epoll_ctl(t->epfd, EPOLL_CTL_ADD, t->int_fd, &iev);
    epoll_ctl(t->rdfd, EPOLL_CTL_ADD, t->int_fd, &iev);
    *t_p = &t->base;
    return HVD_OK;
}

/* One byte to or from peer, as a whole exchange's transfer. */
static void byte_xfer(hvd_xfer_t *x, int peer, int is_send, uint8_t *b) {
    memset(x, 0, sizeof *x);
    x->peer = peer;
    x->is_send = is_send;
    x->iov[0].iov_base = b;
    x->iov[0].iov_len = 1;
    x->iovcnt = 1;
}

hvd_status_t hvd__tcp_arena_join(hvd_transport_t *base, const int *members, int n) {
    tcp_t *t = (tcp_t *)base;
    if (n < 2 || n > HVD_ARENA_MAX_RANKS)
        return HVD_OK;
    int top = members[0];
    for (int i = 1; i < n; i++)
        top = members[i] > top ? members[i] : top;
    const char *what = "setting up the host's shared-memory arena";
    hvd_status_t st;
    if (base->rank != top) {
        /* Connect to the creator (its WELCOME brings the arena), say whether it is mapped,
         * learn whether every member's is. */
        uint8_t hello = 0, mine, all = 0;
        hvd_xfer_t x[2];
        byte_xfer(&x[0], top, 0, &hello);
        if ((st = hvd__tcpx_tcp_exchange(base, x, 1, what)) != HVD_OK)
            return st;
        mine = t->arena_mem != NULL && t->arena_n == n;
        byte_xfer(&x[0], top, 1, &mine);
        byte_xfer(&x[1], top, 0, &all);
        if ((st = hvd__tcpx_tcp_exchange(base, x, 2, what)) != HVD_OK)
            return st;
        t->arena_usable = all == 1 && mine;
    } else {
        hvd_xfer_t *x = calloc((size_t)n, sizeof *x);
        uint8_t *got = calloc((size_t)n, 1), one = 1, all;
        if (!x || !got) {
            free(x);
            free(got);
            return hvd__error_set(HVD_ERR_NO_MEMORY, "%s: out of memory", what);
        }
        int k = 0;
        for (int i = 0; i < n; i++)
            if (members[i] != top)
                byte_xfer(&x[k++], members[i], 1, &one);
        st = hvd__tcpx_tcp_exchange(base, x, (size_t)k, what);
        for (int i = 0, j = 0; st == HVD_OK && i < n; i++)
            if (members[i] != top)
                byte_xfer(&x[j], members[i], 0, &got[j]), j++;
        if (st == HVD_OK)
            st = hvd__tcpx_tcp_exchange(base, x, (size_t)k, what);
        all = t->arena_mem != NULL && t->arena_n == n;
        for (int j = 0; j < k; j++)
            all &= got[j] == 1;
        for (int i = 0, j = 0; st == HVD_OK && i < n; i++)
            if (members[i] != top)
                byte_xfer(&x[j++], members[i], 1, &all);
        if (st == HVD_OK)
            st = hvd__tcpx_tcp_exchange(base, x, (size_t)k, what);
        free(x);
        free(got);
        if (st != HVD_OK)
            return st;
        t->arena_usable = all;
    }
    HVD_LOG_D("rank %d: %s collectives among this host's %d ranks", base->rank,
              t->arena_usable ? "shared-memory arena for" : "no shared-memory arena for", n);
    return HVD_OK;
}
