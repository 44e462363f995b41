/* The engine's threads, waiting and entry points (engine.h); its state's operations shared
 * with cycle.c and execute.c are in engine_state.c. */
#include "core/engine_impl.h"

#include "collectives/coll.h"
#include "collectives/allreduce_work.h"
#include "collectives/dtype.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "core/process_set.h"

#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int is_interrupted(hvd_engine_t *e) {
    return __atomic_load_n(&e->interrupted, __ATOMIC_ACQUIRE);
}

/* Fail the engine with the cause of hvd__engine_interrupt (prog_lock held). */
static void fail_interrupted(hvd_engine_t *e) {
    if (hvd__engine_is_dead(e))
        return;
    char reason[sizeof e->int_reason];
    pthread_mutex_lock(&e->state_lock);
    hvd_status_t st = e->int_status;
    memcpy(reason, e->int_reason, sizeof reason);
    pthread_mutex_unlock(&e->state_lock);
    HVD_LOG_D("%s", reason);
    hvd__engine_fail(e, st, reason, 1);
}

/* Count a cycle that ended and wake the threads waiting for one (wait_cycle_end). Called
 * after prog_lock is released: a thread that read the counter and then failed to take the
 * lock must find the lock's holder still in its cycle, whose end it then waits for. Counted
 * before the release, a thread reading the new count and failing on the lock a moment
 * later slept until the next cycle, which nobody might start: a background thread missed
 * a whole training step that way, its peer's cycle waiting for it (no overlap at all). */
static void count_cycle(hvd_engine_t *e) {
    /* Without the lock unless someone sleeps: the count and the sleepers are sequentially
     * consistent here and in wait_cycle_end (add a sleeper, then read the count), so either
     * this sees the sleeper or the sleeper sees the new count. A sleeper seen is woken under
     * the lock, which it holds until it waits. */
    __atomic_add_fetch(&e->cycles, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&e->sleepers, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&e->state_lock);
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->state_lock);
    }
}

/* How the thread running a cycle waits for the other ranks. */
enum {
    DRIVE_FULL,       /* busy-polls first: a waiter on its own critical path */
    DRIVE_BACKGROUND, /* the background thread's own cycle: quiet for the cycle messages,
                       * the data at full speed */
    DRIVE_RESTING     /* a resting waiter (hvd_wait_resting): quiet throughout */
};

/* Run one cycle (prog_lock held; the caller counts it after releasing the lock), its thread
 * waiting as mode (DRIVE_*) says. */
static hvd_status_t cycle_locked(hvd_engine_t *e, int mode) {
    hvd_status_t st = HVD_OK;
    if (!hvd__engine_is_dead(e) && is_interrupted(e)) {
        fail_interrupted(e);
        st = e->int_status;
    } else if (!hvd__engine_is_dead(e)) {
        __atomic_store_n(&e->last_cycle_us, hvd__clock_now_us(), __ATOMIC_RELAXED);
        /* While a thread of this process rests in its wait (the cores compute), every
         * cycle here rests: the background thread's too, when it joins another rank's. */
        int rest = mode == DRIVE_RESTING || __atomic_load_n(&e->resting_waiters, __ATOMIC_RELAXED);
        if (e->ctx->tp)
            __atomic_store_n(&e->ctx->tp->quiet, mode != DRIVE_FULL || rest, __ATOMIC_RELAXED);
        e->in_background = mode == DRIVE_BACKGROUND;
        e->resting = rest;
        st = hvd__engine_cycle(e, NULL);
        e->resting = 0;
        if (e->ctx->tp)
            __atomic_store_n(&e->ctx->tp->quiet, 0, __ATOMIC_RELAXED);
    }
    return st;
}

/* Run one cycle if no other thread is running one (else return 1 at once). */
static hvd_status_t try_cycle(hvd_engine_t *e, int mode) {
    if (pthread_mutex_trylock(&e->prog_lock) != 0)
        return 1;
    hvd_status_t st = cycle_locked(e, mode);
    pthread_mutex_unlock(&e->prog_lock);
    count_cycle(e);
    return st;
}

/* Sleep until the cycle counter moves past seen or *done (done may be NULL) is set: at
 * most 100 ms, a bound and not a poll, since cycles end with a broadcast. */
static void wait_cycle_end(hvd_engine_t *e, uint64_t seen, const int *done) {
    pthread_mutex_lock(&e->state_lock);
    __atomic_add_fetch(&e->sleepers, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&e->cycles, __ATOMIC_SEQ_CST) == seen &&
        !(done && __atomic_load_n(done, __ATOMIC_ACQUIRE))) {
        struct timespec ts = hvd__clock_abstime(CLOCK_REALTIME, 100);
        pthread_cond_timedwait(&e->cv, &e->state_lock, &ts);
    }
    __atomic_sub_fetch(&e->sleepers, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&e->state_lock);
}

static uint64_t cycles_now(hvd_engine_t *e) {
    return __atomic_load_n(&e->cycles, __ATOMIC_SEQ_CST);
}

/* Wake the background thread (stop, or work after a backed-off interval). */
static void wake_thread(hvd_engine_t *e) {
    uint64_t one = 1;
    if (e->wake_fd >= 0 && write(e->wake_fd, &one, sizeof one) < 0 && errno != EAGAIN)
        HVD_LOG_D("cannot wake the background thread: %s", strerror(errno));
}

/* One step for a waiter whose completion flag is *done: run a cycle, or, while another
 * thread runs one, spin briefly and then sleep until that cycle ends (completions happen
 * only inside cycles, so nothing is missed). */
static void progress(hvd_engine_t *e, const int *done, int resting) {
    uint64_t seen = cycles_now(e);
    if (try_cycle(e, resting ? DRIVE_RESTING : DRIVE_FULL) != 1)
        return;
    for (int spin = 0; !resting && spin < 200; spin++) {
        /* The cycle in progress (the background thread's, waiting quietly) is now on a
         * waiter's critical path: let it busy-poll. */
        if (e->ctx->tp)
            __atomic_store_n(&e->ctx->tp->quiet, 0, __ATOMIC_RELAXED);
        if (__atomic_load_n(done, __ATOMIC_ACQUIRE))
            return;
        if (pthread_mutex_trylock(&e->prog_lock) == 0) {
            pthread_mutex_unlock(&e->prog_lock);
            return;
        }
        sched_yield();
    }
    wait_cycle_end(e, seen, done);
}

static hvd_status_t tq_progress(void *arg) {
    /* hvd__tq_wait re-checks its entry after each call; the entry's done flag is not known
     * here, so sleep at most until the next cycle ends. */
    static const int never = 0;
    progress(arg, &never, 0);
    return HVD_OK;
}

static hvd_status_t tq_progress_resting(void *arg) {
    static const int never = 0;
    progress(arg, &never, 1);
    return HVD_OK;
}

/* The background thread. It joins every cycle another rank starts as soon as that rank's
 * message arrives (the transport's wait descriptor polls readable), so a rank busy with its
 * own computation never holds the others' cycles up; and it starts a cycle itself one
 * interval after the latest cycle or push (engine_impl.h: bg_interval_us), waiting quietly
 * for the others, to move named operations that no thread waits for yet. */
static void *thread_main(void *arg) {
    hvd_engine_t *e = arg;
    hvd_transport_t *tp = e->ctx->tp;
    int wfd = tp && tp->ops->wait_fd ? tp->ops->wait_fd(tp) : -1;
    int solo = e->ctx->global.size == 1;
    int64_t join_delay_us = e->cycle_us > 200 ? e->cycle_us : 200, driven_sleep_us = join_delay_us;
    uint64_t express_seen = 0, pushes_seen = 0, callbacks_cycled = 0;
    while (!__atomic_load_n(&e->stop_thread, __ATOMIC_ACQUIRE)) {
        if (is_interrupted(e) && !hvd__engine_is_dead(e)) {
            /* Nobody may be running cycles (the training code computes): fail the engine
             * here, so that later calls fail at once. A cycle in progress ends promptly,
             * its transport being interrupted too. */
            pthread_mutex_lock(&e->prog_lock);
            fail_interrupted(e);
            pthread_mutex_unlock(&e->prog_lock);
            continue;
        }
        int dead = hvd__engine_is_dead(e);
        /* While a thread of ours waits, ran a cycle within the join delay, or ran express
         * cycles since the last look (a loop of blocking calls), that thread runs the cycles
         * and joins the others' itself: this thread would only compete with it for each
         * cycle, and starts none of its own. */
        int64_t recent = __atomic_load_n(&e->last_cycle_us, __ATOMIC_RELAXED) + join_delay_us;
        uint64_t express = __atomic_load_n(&e->express_calls, __ATOMIC_RELAXED);
        int driven = __atomic_load_n(&e->drivers, __ATOMIC_ACQUIRE) > 0 ||
                     hvd__clock_now_us() < recent || express != express_seen;
        express_seen = express;
        uint64_t seen = cycles_now(e);
        /* Bytes a peer sent that an earlier exchange already read: poll cannot see them. */
        if (!dead && !driven && wfd >= 0 && pthread_mutex_trylock(&e->prog_lock) == 0) {
            int buffered = tp->ops->buffered && tp->ops->buffered(tp);
            if (buffered)
                cycle_locked(e, DRIVE_FULL);
            pthread_mutex_unlock(&e->prog_lock);
            if (buffered) {
                count_cycle(e);
                continue;
            }
        }
        uint64_t pushes = __atomic_load_n(&e->pushes, __ATOMIC_SEQ_CST);
        int64_t last = __atomic_load_n(&e->last_cycle_us, __ATOMIC_RELAXED),
                pushed = __atomic_load_n(&e->last_push_us, __ATOMIC_RELAXED),
                interval = __atomic_load_n(&e->bg_interval_us, __ATOMIC_RELAXED);
        if (pushed > last)
            last = pushed;
        int64_t now = hvd__clock_now_us();
        int idle = dead || (solo && hvd__tq_in_flight(e->tq) == 0);
        /* Operations registered with hvd_on_done since this thread's last cycle: now, at full
         * speed, unless a waiter drives the cycles (hvd__engine_on_done says why). */
        uint64_t callbacks = __atomic_load_n(&e->callbacks, __ATOMIC_SEQ_CST);
        int urgent =
            callbacks != callbacks_cycled && __atomic_load_n(&e->drivers, __ATOMIC_ACQUIRE) == 0;
        if (!idle && (urgent || (!driven && now >= last + interval))) {
            callbacks_cycled = callbacks;
            if (try_cycle(e, urgent ? DRIVE_FULL : DRIVE_BACKGROUND) == 1)
                wait_cycle_end(e, seen, NULL);
            continue;
        }
        int64_t wait_us = idle ? 1000000 : last + interval - now;
        if (driven && !dead) {
            /* Look again later, later each time while the waiters keep driving (they start
             * the cycles, this thread none: its interval does not count). While operations
             * keep coming, look again one join delay on: a push then finds this thread due
             * within its cycle time and need not wake it (engine_push). */
            if (pushes != pushes_seen)
                driven_sleep_us = join_delay_us;
            wait_us = driven_sleep_us;
            if (driven_sleep_us < HVD_IDLE_INTERVAL_US && pushes == pushes_seen)
                driven_sleep_us *= 2;
        } else {
            driven_sleep_us = join_delay_us;
        }
        pushes_seen = pushes;
        /* A push wakes this thread only when it would sleep past the push's cycle time. The
         * deadline is published before the pushes are looked at again, and a push counts
         * before it reads the deadline: one of the two sees the other, so no push is left
         * to a long sleep decided before it. */
        __atomic_store_n(&e->bg_wake_at_us, now + wait_us, __ATOMIC_SEQ_CST);
        if (wait_us > e->cycle_us && __atomic_load_n(&e->pushes, __ATOMIC_SEQ_CST) != pushes)
            continue;
        if (__atomic_load_n(&e->callbacks, __ATOMIC_SEQ_CST) != callbacks)
            continue; /* (hvd__engine_on_done saw the old deadline: it may not have woken us) */
        struct timespec ts = {.tv_sec = wait_us / 1000000, .tv_nsec = (wait_us % 1000000) * 1000};
        struct pollfd fds[2] = {{.fd = e->wake_fd, .events = POLLIN},
                                {.fd = dead || driven ? -1 : wfd, .events = POLLIN}};
        int rc = ppoll(fds, 2, &ts, NULL);
        if (rc > 0 && (fds[0].revents & POLLIN)) {
            uint64_t v;
            if (read(e->wake_fd, &v, sizeof v) < 0 && errno != EAGAIN)
                HVD_LOG_D("wake-up read failed: %s", strerror(errno));
        }
        if (rc > 0 && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            /* A peer started a cycle: join it now, at full speed (someone waits on it). */
            if (try_cycle(e, DRIVE_FULL) == 1)
                wait_cycle_end(e, seen, NULL);
            continue;
        }
        /* Waiters drove cycles all along (a blocking call drives its own) and no named
         * operation of ours needs the thread: start cycles less often; a push brings the
         * cycle time back. */
        if (rc == 0 && !idle && __atomic_load_n(&e->last_cycle_us, __ATOMIC_RELAXED) > last &&
            hvd__tq_in_flight(e->tq) == 0 && interval < HVD_IDLE_INTERVAL_US)
            __atomic_store_n(&e->bg_interval_us, interval * 2 + 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

/* The coordinator's view of process-set membership (hvd__coord_set_members). */
static int pset_member(void *ctx, int pset, int set_rank) {
    return hvd__pset_member(ctx, pset, set_rank);
}

/* Autotune's parameter manager for this job (rank 0). A knob the user set (its variable is
 * in the environment: horovodrun exports only the flags given) is pinned. The engine tunes
 * the fusion threshold, the cycle time and, on a job whose hosts form a grid (init.c,
 * plan_hierarchical), hierarchical allreduce and allgather, and the response cache (unless
 * HOROVOD_CACHE_CAPACITY was given, 0 included). */
static hvd_status_t tune_create(hvd_engine_t *e) {
    const hvd_params_t *pa = &e->ctx->params;
    const hvd_group_t *g = &e->ctx->global;
    hvd_tune_config_t cfg = {
        .warmup_samples = pa->autotune_warmup_samples,
        .steps_per_sample = pa->autotune_steps_per_sample,
        .max_samples = pa->autotune_bayes_opt_max_samples,
        .noise = pa->autotune_gaussian_process_noise,
        .pin_fusion = getenv("HOROVOD_FUSION_THRESHOLD") != NULL,
        .pin_cycle = getenv("HOROVOD_CYCLE_TIME") != NULL,
        .pin_cache = getenv("HOROVOD_CACHE_CAPACITY") != NULL || pa->cache_capacity <= 0,
        .pin_hier_allreduce = getenv("HOROVOD_HIERARCHICAL_ALLREDUCE") != NULL,
        .pin_hier_allgather = getenv("HOROVOD_HIERARCHICAL_ALLGATHER") != NULL || !g->hier_grid,
        .multi_host = g->hier_local != NULL,
        .log_path = pa->autotune_log};
    hvd_tune_params_t initial = {
        .fusion_threshold = e->fusion_threshold,
        .cycle_time_ms = pa->cycle_time_ms,
        .cache_enabled = pa->cache_capacity > 0,
        .hierarchical_allreduce = g->hier_local && g->hier_min_bytes != SIZE_MAX,
        .hierarchical_allgather = g->hier_grid && g->hier_ag_min_bytes != SIZE_MAX};
    return hvd__tune_create(&cfg, &initial, &e->tune);
}

hvd_status_t hvd__engine_create(hvd_context_t *ctx, hvd_engine_t **e_p) {
    const hvd_params_t *pa = &ctx->params;
    hvd_engine_t *e = calloc(1, sizeof *e);
    if (!e)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for the engine");
    e->ctx = ctx;
    int p = ctx->global.size, rank = ctx->global.rank;
    e->fusion_threshold = (size_t)pa->fusion_threshold;
    e->cycle_us = (int64_t)(pa->cycle_time_ms * 1000.0);
    e->bg_interval_us = e->cycle_us;
    e->timeout_ms = (int64_t)pa->gloo_timeout_seconds * 1000;
    e->stall_warn_ms = pa->stall_check_disable ? 0 : (int64_t)pa->stall_check_time_seconds * 1000;
    e->last_joined = -1;
    pthread_mutex_init(&e->prog_lock, NULL);
    pthread_mutex_init(&e->state_lock, NULL);
    pthread_mutex_init(&e->blocking_lock, NULL);
    pthread_mutex_init(&e->p2p_lock, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    hvd_status_t st = e->wake_fd >= 0 ? hvd__tq_create(&e->tq)
                                      : hvd__error_set(HVD_ERR_IO,
                                                       "cannot create the engine's wake-up "
                                                       "descriptor: %s",
                                                       strerror(errno));
    if (st == HVD_OK && pa->cache_capacity > 0)
        st = hvd__cache_create((uint32_t)pa->cache_capacity, &e->cache);
    /* (every rank: any may be told to turn a hierarchical knob on) */
    e->hier_ar_on_bytes = ctx->global.hier_min_bytes != SIZE_MAX ? ctx->global.hier_min_bytes : 0;
    e->hier_ag_on_bytes =
        ctx->global.hier_ag_min_bytes != SIZE_MAX ? ctx->global.hier_ag_min_bytes : 0;
    if (st == HVD_OK && rank == 0 && pa->autotune && p > 1)
        st = tune_create(e);
    if (st == HVD_OK && rank == 0) {
        st = hvd__coord_create(p, &e->coord);
        if (st == HVD_OK) {
            hvd__coord_set_members(e->coord, pset_member, ctx);
            hvd__coord_set_hosts(e->coord, (const char *const *)ctx->hosts, ctx->pids);
        }
    }
    if (st == HVD_OK && rank == 0 && !pa->stall_check_disable && pa->stall_check_time_seconds > 0) {
        /* (it warns when the shutdown time is below the warning time) */
        st = hvd__stall_create(p, (const char *const *)ctx->hosts, pa->stall_check_time_seconds,
                               pa->stall_shutdown_time_seconds, &e->stall);
        if (st == HVD_OK) {
            hvd__stall_set_members(e->stall, pset_member, ctx);
            hvd__stall_set_describer(e->stall, hvd__engine_describe_rank, e);
        }
    }
    if (st == HVD_OK && rank == 0 && pa->straggler_steps > 0)
        st = hvd__straggler_create(p, (const char *const *)ctx->hosts, pa->straggler_steps,
                                   &e->strag);
    e->msgs = calloc((size_t)p, sizeof *e->msgs);
    e->blocks = calloc((size_t)p, sizeof *e->blocks);
    e->block_lens = calloc((size_t)p, sizeof *e->block_lens);
    if (st == HVD_OK && (!e->msgs || !e->blocks || !e->block_lens))
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for the engine");
    /* HOROVOD_TIMELINE=DYNAMIC (Horovod's word): no file now, hvd_start_timeline later */
    if (st == HVD_OK && rank == 0 && pa->timeline && *pa->timeline &&
        strcmp(pa->timeline, "DYNAMIC") != 0) {
        st = hvd__timeline_open(pa->timeline, &e->tl);
        e->mark_cycles = pa->timeline_mark_cycles;
    }
    if (st == HVD_OK) {
        e->last_cycle_us = hvd__clock_now_us();
        int rc = pthread_create(&e->thread, NULL, thread_main, e);
        if (rc != 0)
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "cannot start the background thread: %s",
                                strerror(rc));
        else
            e->thread_started = 1;
    }
    if (st != HVD_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", hvd_last_error());
        hvd__engine_destroy(e);
        return hvd__error_set(st, "%s", msg);
    }
    *e_p = e;
    return HVD_OK;
}

static void stop_thread(hvd_engine_t *e) {
    if (!e->thread_started)
        return;
    __atomic_store_n(&e->stop_thread, 1, __ATOMIC_RELEASE);
    wake_thread(e);
    pthread_join(e->thread, NULL);
    e->thread_started = 0;
}

void hvd__engine_interrupt(hvd_engine_t *e, hvd_status_t status, const char *message) {
    if (status >= 0)
        status = HVD_ERR_PEER_LOST;
    pthread_mutex_lock(&e->state_lock);
    int first = !e->interrupted;
    if (first) {
        e->int_status = status;
        snprintf(e->int_reason, sizeof e->int_reason, "%s", message ? message : "interrupted");
        __atomic_store_n(&e->interrupted, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&e->state_lock);
    if (!first)
        return;
    hvd_transport_t *tp = e->ctx->tp;
    if (tp && tp->ops->interrupt)
        tp->ops->interrupt(tp, status, e->int_reason);
    wake_thread(e);
}

static void stop(hvd_engine_t *e, int exiting) {
    stop_thread(e);
    pthread_mutex_lock(&e->prog_lock);
    /* Interrupted: the round is over and its peers may be gone, so there is no last cycle
     * to run with them. */
    if (is_interrupted(e))
        fail_interrupted(e);
    if (!hvd__engine_is_dead(e)) {
        /* One last cycle carries the shutdown flag to every rank; the cycle itself fails
         * the engine with HVD_ERR_SHUT_DOWN once it has run what was agreed. */
        e->shutdown_requested = 1;
        e->exiting = exiting;
        e->in_background = 0;
        if (e->ctx->tp)
            e->ctx->tp->quiet = 1;
        hvd__engine_cycle(e, NULL);
        if (e->ctx->tp)
            e->ctx->tp->quiet = 0;
        char msg[256];
        snprintf(msg, sizeof msg, "%s on rank %d",
                 exiting ? "the program exited without calling hvd_shutdown"
                         : "hvd_shutdown was called",
                 e->ctx->global.rank);
        hvd__engine_fail(e, HVD_ERR_SHUT_DOWN, msg, 0);
    }
    pthread_mutex_unlock(&e->prog_lock);
}

void hvd__engine_stop(hvd_engine_t *e) {
    stop(e, 0);
}

void hvd__engine_exit(hvd_engine_t *e) {
    stop(e, 1);
}

void hvd__engine_destroy(hvd_engine_t *e) {
    if (!e)
        return;
    stop_thread(e);
    hvd__tq_destroy(e->tq);
    hvd__cache_destroy(e->cache);
    hvd__tune_destroy(e->tune);
    free(e->tune_marker);
    if (e->coord)
        hvd__coord_destroy(e->coord);
    if (e->stall)
        hvd__stall_destroy(e->stall);
    hvd__straggler_destroy(e->strag);
    hvd__timeline_close(e->tl);
    free(e->hits.v);
    free(e->uncached.v);
    free(e->invalid.v);
    free(e->msg);
    free(e->words);
    free(e->msgs);
    free(e->blocks);
    free(e->block_lens);
    free(e->fusion);
    free(e->zeros);
    free(e->payload);
    hvd__engine_tl_reset(e);
    free(e->tl_open);
    pthread_cond_destroy(&e->cv);
    if (e->wake_fd >= 0)
        close(e->wake_fd);
    pthread_mutex_destroy(&e->blocking_lock);
    free(e->p2p_seqs);
    pthread_mutex_destroy(&e->p2p_lock);
    pthread_mutex_destroy(&e->state_lock);
    pthread_mutex_destroy(&e->prog_lock);
    free(e);
}

hvd_status_t hvd__engine_push(hvd_engine_t *e, const hvd_entry_t *entries, size_t n,
                              hvd_handle_t *handles) {
    if (hvd__engine_is_dead(e)) {
        char what[240];
        snprintf(what, sizeof what, "'%s'%s", n && entries[0].name ? entries[0].name : "?",
                 n > 1 ? " and more" : "");
        return hvd__engine_dead_error_for(e, what);
    }
    hvd_status_t st = hvd__tq_push_many(e->tq, entries, n, handles);
    if (st != HVD_OK)
        return st;
    int64_t now = hvd__clock_now_us();
    __atomic_store_n(&e->last_push_us, now, __ATOMIC_RELAXED);
    /* Work: the background thread's interval is the cycle time again. */
    if (__atomic_load_n(&e->bg_interval_us, __ATOMIC_RELAXED) > e->cycle_us)
        __atomic_store_n(&e->bg_interval_us, e->cycle_us, __ATOMIC_RELAXED);
    __atomic_add_fetch(&e->pushes, 1, __ATOMIC_SEQ_CST);
    /* Wake it only when it sleeps past this push's cycle time (idle, backed off, or
     * leaving the cycles to waiters). A loop of named calls each waited for at once finds
     * it due within a cycle time after the first wake (thread_main): waking it on every
     * push cost two context switches per call, ~8 us of a 10 us call at np 2 on 2 cores. */
    if (__atomic_load_n(&e->bg_wake_at_us, __ATOMIC_SEQ_CST) > now + e->cycle_us)
        wake_thread(e);
    return HVD_OK;
}

int hvd__engine_poll(hvd_engine_t *e, hvd_handle_t h) {
    return hvd__tq_poll(e->tq, h);
}

hvd_status_t hvd__engine_wait(hvd_engine_t *e, hvd_handle_t h, int resting) {
    __atomic_add_fetch(&e->drivers, 1, __ATOMIC_ACQ_REL);
    if (resting)
        __atomic_add_fetch(&e->resting_waiters, 1, __ATOMIC_ACQ_REL);
    hvd_status_t st = hvd__tq_wait(e->tq, h, resting ? tq_progress_resting : tq_progress, e);
    if (resting)
        __atomic_sub_fetch(&e->resting_waiters, 1, __ATOMIC_ACQ_REL);
    __atomic_sub_fetch(&e->drivers, 1, __ATOMIC_ACQ_REL);
    return st;
}

hvd_status_t hvd__engine_on_done(hvd_engine_t *e, hvd_handle_t h, hvd_done_fn fn, void *user) {
    /* No thread waits to drive the cycles, but a framework's kernel waits for the callback:
     * the background thread starts a cycle for it at once, as a waiter would, rather than a
     * cycle time after the push (an eager TensorFlow allreduce took 1.4 ms at np 2, the
     * cycle time and a quiet cycle; 80-100 us this way). */
    hvd_status_t st = hvd__tq_on_done(e->tq, h, fn, user);
    if (st == HVD_OK) {
        __atomic_add_fetch(&e->callbacks, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&e->bg_wake_at_us, __ATOMIC_SEQ_CST) > hvd__clock_now_us())
            wake_thread(e);
    }
    return st;
}

hvd_status_t hvd__engine_join(hvd_engine_t *e, int *last_joined_rank_p) {
    hvd_entry_t j = {.name = "join.noname", .type = HVD_REQ_JOIN};
    hvd_handle_t h;
    hvd_status_t st = hvd__engine_push(e, &j, 1, &h);
    if (st != HVD_OK)
        return st;
    st = hvd__engine_wait(e, h, 0);
    if (st == HVD_OK && last_joined_rank_p) {
        pthread_mutex_lock(&e->state_lock);
        *last_joined_rank_p = e->last_joined;
        pthread_mutex_unlock(&e->state_lock);
    }
    return st;
}

/* Describe a blocking call in its signature and, when it can run on the cycle messages
 * alone (small allreduce, allgather and broadcast, barrier), prepare this rank's payload.
 * An argument error is recorded in the signature (HVD_SIG_INVALID), so that every rank
 * falls back to the collective's own agreement, which reports it everywhere. */
static hvd_status_t prepare(hvd_engine_t *e, hvd_posted_t *p) {
    const hvd_blocking_op_t *o = &p->op;
    hvd_group_t *g = p->g;
    hvd_sig_t *s = &p->sig;
    *s = (hvd_sig_t){.coll = (uint8_t)o->coll,
                     .dtype = (uint8_t)o->dtype,
                     .op = (uint8_t)o->op,
                     .root = o->root,
                     .count = o->count};
    if (o->coll == HVD_COLL_ALLREDUCE && g->ordered)
        s->flags |= HVD_SIG_ORDERED; /* as hvd__coll_allreduce's own signature */
    /* The checks below only decide: an invalid call's collective checks again and reports
     * the error under the call's name, so none is made here (making it on every call took
     * ~4 % of an 8-byte allreduce at np 2, perf). */
    switch (o->coll) {
    case HVD_COLL_ALLREDUCE: {
        size_t wbytes;
        uint64_t scales[2];
        memcpy(&scales[0], &o->prescale, 8);
        memcpy(&scales[1], &o->postscale, 8);
        s->extra = scales[0] * 0x9e3779b97f4a7c15ull ^ scales[1];
        hvd_blocking_op_t *m = &e->memo;
        if (e->memo_bytes && m->comm == o->comm && m->count == o->count && m->dtype == o->dtype &&
            m->op == o->op && !memcmp(&m->prescale, &o->prescale, 8) &&
            !memcmp(&m->postscale, &o->postscale, 8) && (!o->count || (o->send && o->recv))) {
            wbytes = e->memo_bytes - 1; /* the last call's checks hold for this one */
        } else {
            if (hvd__allreduce_check(o->send, o->recv, o->count, o->dtype, o->op, o->prescale,
                                     o->postscale, "", &wbytes) != HVD_OK) {
                s->flags |= HVD_SIG_INVALID;
                return HVD_OK;
            }
            /* (Adasum is no reduction of blocks: it runs its own tree) */
            if (wbytes > hvd__allreduce_inline_limit(g) || o->op == HVD_ADASUM)
                return HVD_OK;
            *m = *o;
            e->memo_bytes = wbytes + 1;
        }
        hvd_status_t st = hvd__engine_reserve(&e->payload, &e->payload_cap, wbytes + 1);
        if (st != HVD_OK)
            return st;
        p->payload = e->payload;
        hvd__allreduce_to_work(p->payload, o->send, o->count, o->dtype, o->prescale);
        p->payload_len = wbytes;
        p->payload_path = 1;
        return HVD_OK;
    }
    case HVD_COLL_BARRIER:
        p->payload_path = 1;
        return HVD_OK;
    case HVD_COLL_ALLGATHER:
    case HVD_COLL_BROADCAST: {
        size_t esize = hvd__dtype_size(o->dtype), bytes;
        int root_ok = o->coll != HVD_COLL_BROADCAST || (o->root >= 0 && o->root < g->size);
        const void *buf = o->coll == HVD_COLL_BROADCAST ? o->recv : o->send;
        if (!esize || !root_ok || hvd__coll_bytes(o->count, esize, "", &bytes) != HVD_OK ||
            (o->count && (!buf || !o->recv))) {
            s->flags |= HVD_SIG_INVALID;
            return HVD_OK;
        }
        if (bytes > HVD_SMALL_BYTES)
            return HVD_OK;
        p->payload_path = 1;
        if (o->coll == HVD_COLL_BROADCAST && o->root != g->rank)
            return HVD_OK;
        hvd_status_t st = hvd__engine_reserve(&e->payload, &e->payload_cap, bytes + 1);
        if (st != HVD_OK)
            return st;
        p->payload = e->payload;
        if (bytes)
            memcpy(p->payload, buf, bytes);
        p->payload_len = bytes;
        return HVD_OK;
    }
    default:
        return HVD_OK;
    }
}

/* Run the cycle that carries the caller's call p at once, in the calling thread, when no
 * other thread runs one: no posting, no hand-over between threads. When every rank has
 * posted the same call, that cycle completes it (cycle.c: a uniform cycle). Returns whether
 * it ran; p may still be pending after it (a rank had not posted it yet). */
static int express(hvd_engine_t *e, hvd_posted_t *p) {
    if (pthread_mutex_trylock(&e->prog_lock) != 0)
        return 0;
    int ran = !hvd__engine_is_dead(e) && !is_interrupted(e);
    if (ran) {
        /* (written under prog_lock only: no read-modify-write needed) */
        __atomic_store_n(&e->express_calls, e->express_calls + 1, __ATOMIC_RELAXED);
        e->in_background = 0;
        p->express = 1;
        hvd__engine_cycle(e, p);
        p->express = 0;
    }
    pthread_mutex_unlock(&e->prog_lock);
    if (ran)
        count_cycle(e);
    return ran;
}

hvd_status_t hvd__engine_blocking(hvd_engine_t *e, const hvd_blocking_op_t *op) {
    hvd_group_t *g = hvd__context_group(e->ctx, (int)op->comm);
    if (!g)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "unknown communicator %d", (int)op->comm);
    pthread_mutex_lock(&e->blocking_lock);
    if (hvd__engine_is_dead(e)) {
        pthread_mutex_unlock(&e->blocking_lock);
        hvd_sig_t sig = {.coll = (uint8_t)op->coll,
                         .dtype = (uint8_t)op->dtype,
                         .op = (uint8_t)op->op,
                         .root = op->root,
                         .count = op->count};
        char call[160], what[200];
        hvd__sig_describe(&sig, call, sizeof call);
        snprintf(what, sizeof what, "the blocking call %s", call);
        return hvd__engine_dead_error_for(e, what);
    }
    /* (not zero-filled: the error text is written only on failure) */
    hvd_posted_t p;
    p.op = *op;
    p.g = g;
    p.payload_path = p.express = p.done = 0;
    p.payload = NULL;
    p.payload_len = 0;
    p.status = HVD_OK;
    p.error[0] = '\0';
    hvd_status_t st = prepare(e, &p);
    if (st != HVD_OK) {
        pthread_mutex_unlock(&e->blocking_lock);
        return st;
    }
    p.sig.seq = e->blocking_seq[op->comm]++;
    p.posted_ms = 0; /* (read when the call outlives its express cycle: no clock before) */
    if (!p.payload_path || !express(e, &p) || !p.done) {
        if (!p.posted_ms)
            p.posted_ms = hvd__engine_now_ms();
        pthread_mutex_lock(&e->state_lock);
        if (e->dead) {
            p.done = 1;
            p.status = e->dead_status;
            snprintf(p.error, sizeof p.error, "%s", e->dead_reason);
            if (e->dead_uneven_head[0]) { /* (hvd__engine_dead_error_for's message) */
                char call[160], where[200], hint[512];
                hvd__sig_describe(&p.sig, call, sizeof call);
                snprintf(where, sizeof where, "the blocking call %s", call);
                hvd__engine_uneven_hint(where, hint, sizeof hint);
                if (snprintf(p.error, sizeof p.error, "%s%s%s", e->dead_uneven_head, hint,
                             e->dead_uneven_tail) < 0)
                    p.error[0] = '\0';
            }
        } else {
            e->posted = &p;
        }
        pthread_mutex_unlock(&e->state_lock);
        __atomic_add_fetch(&e->drivers, 1, __ATOMIC_ACQ_REL);
        while (!__atomic_load_n(&p.done, __ATOMIC_ACQUIRE))
            progress(e, &p.done, 0);
        __atomic_sub_fetch(&e->drivers, 1, __ATOMIC_ACQ_REL);
    }
    pthread_mutex_unlock(&e->blocking_lock);
    if (p.status != HVD_OK)
        return hvd__error_set(p.status, "%s", p.error);
    return HVD_OK;
}

hvd_status_t hvd__engine_stragglers(hvd_engine_t *e, int steps) {
    if (e->ctx->global.rank != 0)
        return HVD_OK;
    hvd_straggler_t *s = NULL;
    if (steps > 0) {
        hvd_status_t st = hvd__straggler_create(e->ctx->global.size,
                                                (const char *const *)e->ctx->hosts, steps, &s);
        if (st != HVD_OK)
            return st;
    }
    pthread_mutex_lock(&e->prog_lock);
    hvd_straggler_t *old = e->strag;
    e->strag = s;
    pthread_mutex_unlock(&e->prog_lock);
    hvd__straggler_destroy(old);
    return HVD_OK;
}

hvd_status_t hvd__engine_timeline(hvd_engine_t *e, const char *path, int mark_cycles) {
    if (e->ctx->global.rank != 0)
        return HVD_OK;
    hvd_timeline_t *tl = NULL;
    if (path) {
        hvd_status_t st = hvd__timeline_open(path, &tl);
        if (st != HVD_OK)
            return st;
    }
    pthread_mutex_lock(&e->prog_lock);
    hvd_timeline_t *old = e->tl;
    e->tl = tl;
    e->mark_cycles = mark_cycles;
    hvd__engine_tl_reset(e);
    pthread_mutex_unlock(&e->prog_lock);
    hvd__timeline_close(old);
    return HVD_OK;
}
