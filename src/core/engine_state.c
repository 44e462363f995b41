/* The engine's state operations, shared by its three parts (engine.c, cycle.c, execute.c, in
 * that order from the top): the clocks, its reused buffers, the idle back-off, completing a
 * blocking call, and failing the engine. Below all three, so that none of them calls up. */
#include "core/engine_impl.h"

#include "common/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void hvd__engine_note_idle(hvd_engine_t *e, int idle) {
    e->idle_cycles = idle ? e->idle_cycles + 1 : 0;
    int64_t v = e->cycle_us;
    if (idle) {
        if (v < 1000)
            v = 1000; /* a cycle time of 0 still backs off */
        for (unsigned k = e->idle_cycles; k > 0 && v < HVD_IDLE_INTERVAL_US; k--)
            v *= 2;
        if (v > HVD_IDLE_INTERVAL_US)
            v = HVD_IDLE_INTERVAL_US > e->cycle_us ? HVD_IDLE_INTERVAL_US : e->cycle_us;
    }
    __atomic_store_n(&e->bg_interval_us, v, __ATOMIC_RELAXED);
}

hvd_status_t hvd__engine_reserve(uint8_t **buf, size_t *cap, size_t need) {
    if (need <= *cap)
        return HVD_OK;
    /* an eighth of headroom: few regrowths, and the fusion buffer stays near its need */
    size_t c = need + need / 8 + 64;
    uint8_t *b = realloc(*buf, c);
    if (!b)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory in the engine");
    *buf = b;
    *cap = c;
    return HVD_OK;
}

int64_t hvd__engine_now_ms(void) {
    /* The coarse clock (a few ms of resolution, against deadlines and stall warnings of
     * seconds): the fine one cost ~30 ns a read here, twice in every blocking call. */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int hvd__engine_is_dead(hvd_engine_t *e) {
    return __atomic_load_n(&e->dead, __ATOMIC_ACQUIRE);
}

hvd_status_t hvd__engine_dead_error(hvd_engine_t *e) {
    pthread_mutex_lock(&e->state_lock);
    hvd_status_t st = e->dead_status;
    char reason[sizeof e->dead_reason];
    memcpy(reason, e->dead_reason, sizeof reason);
    pthread_mutex_unlock(&e->state_lock);
    return hvd__error_set(st, "%s", reason);
}

void hvd__engine_uneven_hint(const char *where, char *buf, size_t n) {
    snprintf(buf, n,
             "; this rank waits in %s: if the ranks ran different numbers of steps, give every "
             "rank the same number of batches (DistributedSampler with drop_last=True) or use "
             "hvd.join() or DDP's Join",
             where);
}

hvd_status_t hvd__engine_dead_error_for(hvd_engine_t *e, const char *what) {
    pthread_mutex_lock(&e->state_lock);
    if (!e->dead_uneven_head[0]) {
        pthread_mutex_unlock(&e->state_lock);
        return hvd__engine_dead_error(e);
    }
    hvd_status_t st = e->dead_status;
    char head[sizeof e->dead_uneven_head], tail[sizeof e->dead_uneven_tail], hint[512];
    memcpy(head, e->dead_uneven_head, sizeof head);
    memcpy(tail, e->dead_uneven_tail, sizeof tail);
    pthread_mutex_unlock(&e->state_lock);
    hvd__engine_uneven_hint(what, hint, sizeof hint);
    return hvd__error_set(st, "%s%s%s", head, hint, tail);
}

void hvd__engine_finish_blocking(hvd_engine_t *e, hvd_posted_t *p, hvd_status_t st,
                                 const char *message) {
    if (p->express) {
        /* Its caller runs this cycle: nobody else knows the call or waits for it. */
        p->status = st;
        if (st != HVD_OK)
            snprintf(p->error, sizeof p->error, "%s", message);
        p->done = 1;
        return;
    }
    pthread_mutex_lock(&e->state_lock);
    p->status = st;
    if (st == HVD_OK)
        p->error[0] = '\0'; /* (no snprintf for every call that succeeds) */
    else
        snprintf(p->error, sizeof p->error, "%s", message);
    if (e->posted == p)
        e->posted = NULL;
    __atomic_store_n(&p->done, 1, __ATOMIC_RELEASE);
    if (__atomic_load_n(&e->sleepers, __ATOMIC_RELAXED))
        pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->state_lock);
}

static void pend_clear(hvd_pend_list_t *l) {
    l->n = 0;
}

void hvd__engine_fail(hvd_engine_t *e, hvd_status_t st, const char *message, int tell_peers) {
    if (hvd__engine_is_dead(e))
        return;
    char msg[sizeof e->dead_reason];
    snprintf(msg, sizeof msg, "%s", message);
    hvd_transport_t *tp = e->ctx->tp;
    if (tell_peers && tp)
        tp->ops->abort(tp, st, msg);
    pthread_mutex_lock(&e->state_lock);
    e->dead_status = st;
    snprintf(e->dead_reason, sizeof e->dead_reason, "%s", msg);
    __atomic_store_n(&e->dead, 1, __ATOMIC_RELEASE);
    hvd_posted_t *p = e->posted;
    pthread_mutex_unlock(&e->state_lock);
    if (p)
        hvd__engine_finish_blocking(e, p, st, msg);
    pend_clear(&e->hits);
    pend_clear(&e->uncached);
    pend_clear(&e->invalid);
    e->join_entry = NULL;
    hvd__tq_fail_all(e->tq, st, msg, 1);
    pthread_mutex_lock(&e->state_lock);
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->state_lock);
}
