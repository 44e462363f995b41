/* The TCP transport's host arena (tcp_impl.h, shm_arena.h): planning who creates it, mapping
 * what arrives with a WELCOME, and the agreement that every member mapped it. */
#include "transport/tcp_impl.h"

/* ---- the host arena ------------------------------------------------------------------ */

/* This rank's view of its host's arena: who the members are, and for the highest of them the
 * arena itself (mapped now; passed with the WELCOMEs). Failing to create it is no error:
 * the host's ranks then agree to go without (hvd__tcp_arena_join). */
hvd_status_t hvd__tcpx_arena_plan(tcp_t *t) {
    int n = 1;
    for (int r = 0; r < t->base.size; r++)
        n += t->local[r];
    if (n < 2 || n > HVD_ARENA_MAX_RANKS)
        return HVD_OK;
    if (!(t->arena_ranks = malloc((size_t)n * sizeof *t->arena_ranks)))
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for the host arena's %d ranks", n);
    for (int r = 0, i = 0; r < t->base.size; r++) {
        if (r == t->base.rank)
            t->arena_self = i;
        if (r == t->base.rank || t->local[r])
            t->arena_ranks[i++] = r;
    }
    t->arena_n = n;
    if (t->arena_ranks[n - 1] != t->base.rank)
        return HVD_OK;
    if (hvd__shm_create(hvd__arena_bytes(n, ARENA_DATA), "hvd-arena", &t->arena_fd) != HVD_OK) {
        HVD_LOG_D("rank %d: no shared-memory arena for this host: %s", t->base.rank,
                  hvd_last_error());
        hvd__error_clear();
        t->arena_fd = -1;
        return HVD_OK;
    }
    hvd__tcpx_arena_map(t, -1);
    return HVD_OK;
}

static hvd_status_t tcp_arena_check(void *ctx);

/* Map the arena (from: the rank whose WELCOME brought arena_in_fd, or -1 for the creator's
 * own fresh arena_fd, whose header it writes) and attach this rank's view. A bad arena is
 * logged and left unused. */
void hvd__tcpx_arena_map(tcp_t *t, int from) {
    size_t bytes = hvd__arena_bytes(t->arena_n, ARENA_DATA);
    int fd = from < 0 ? t->arena_fd : t->arena_in_fd;
    void *mem = NULL;
    hvd_status_t st = hvd__shm_map(fd, bytes, &mem);
    if (st == HVD_OK && from < 0)
        hvd__arena_format(mem, t->arena_n, ARENA_DATA);
    if (st == HVD_OK && (st = hvd__arena_attach(&t->arena, mem, bytes, t->arena_n, t->arena_self,
                                                ARENA_DATA)) != HVD_OK)
        hvd__shm_unmap(mem, bytes);
    int *owned = from >= 0 ? &t->arena_in_fd : st != HVD_OK ? &t->arena_fd : NULL;
    if (owned) { /* what arrived is mapped or unusable; an unusable own arena is not passed on */
        close(*owned);
        *owned = -1;
    }
    if (st != HVD_OK) {
        HVD_LOG_D("rank %d: the shared-memory arena from rank %d is unusable: %s", t->base.rank,
                  from, hvd_last_error());
        hvd__error_clear();
        return;
    }
    hvd_arena_t *a = &t->arena;
    a->ranks = t->arena_ranks;
    a->spin_us = t->busy_poll_us;
    a->yield = t->yield_when_idle;
    a->quiet = &t->base.quiet;
    a->timeout_ms = t->timeout_ms;
    a->check = tcp_arena_check;
    a->check_ctx = t;
    a->progressing = t->progressing;
    a->progress_ctx = t->progress_arg;
    __atomic_store_n(&t->arena_mem, mem, __ATOMIC_RELEASE);
}

/* The arena's liveness check: the transport not poisoned or interrupted, and no member this
 * rank is connected to gone (the highest member is connected to all, so a lost member is
 * noticed there and reaches the others through the abort record). */
static hvd_status_t tcp_arena_check(void *ctx) {
    tcp_t *t = ctx;
    if (t->poison != HVD_OK)
        return hvd__tcpx_tcp_health(&t->base);
    if (hvd__tcpx_is_interrupted(t))
        return hvd__tcpx_interrupt_error(t);
    for (int i = 0; i < t->arena_n; i++) {
        int r = t->arena_ranks[i];
        peer_t *p = &t->peers[r];
        if (r == t->base.rank || p->state != PEER_READY || !p->is_shm)
            continue;
        hvd__tcpx_drain_doorbell(p);
        if (p->hup)
            return hvd__tcpx_peer_lost(t, r, "exited during a collective in shared memory");
    }
    return HVD_OK;
}

hvd_arena_t *hvd__tcpx_tcp_arena(hvd_transport_t *base) {
    tcp_t *t = (tcp_t *)base;
    return t->arena_usable && t->poison == HVD_OK ? &t->arena : NULL;
}
