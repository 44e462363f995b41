/* The public elastic API (hvd.h, "Elastic training"): the training state and the run
 * wrapper that recovers from lost peers and host changes, as in Horovod. */
#include <hvd/hvd.h>

#include "collectives/dtype.h"
#include "common/error.h"
#include "common/log.h"
#include "core/context.h"
#include "core/elastic_agent.h"
#include "core/elastic_rendezvous.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_LEN 255

typedef struct {
    char *name;
    void *buf; /* the caller's */
    size_t count, bytes;
    hvd_dtype_t dtype;
    void *saved; /* the committed copy */
} buffer_t;

struct hvd_elastic_state {
    hvd_elastic_callbacks_t cb;
    buffer_t *bufs;
    size_t n, cap;
    int resets;
};

hvd_status_t hvd_elastic_state_create(const hvd_elastic_callbacks_t *callbacks,
                                      hvd_elastic_state_t **state_p) {
    if (!state_p)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "hvd_elastic_state_create: state_p is NULL");
    hvd_elastic_state_t *s = calloc(1, sizeof *s);
    if (!s)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for an elastic state");
    if (callbacks)
        s->cb = *callbacks;
    *state_p = s;
    return HVD_OK;
}

void hvd_elastic_state_destroy(hvd_elastic_state_t *s) {
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++) {
        free(s->bufs[i].name);
        free(s->bufs[i].saved);
    }
    free(s->bufs);
    free(s);
}

hvd_status_t hvd_elastic_state_add(hvd_elastic_state_t *s, const char *name, void *buf,
                                   size_t count, hvd_dtype_t dtype) {
    if (!s)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "hvd_elastic_state_add: state is NULL");
    if (!name || !*name || strlen(name) > NAME_MAX_LEN)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "hvd_elastic_state_add: the name is NULL, empty or over %d bytes",
                              NAME_MAX_LEN);
    size_t esize = hvd__dtype_size(dtype);
    if (!esize)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "hvd_elastic_state_add '%s': unknown dtype %d",
                              name, (int)dtype);
    if (!buf && count > 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "hvd_elastic_state_add '%s': buf is NULL", name);
    if (count > SIZE_MAX / esize)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "hvd_elastic_state_add '%s': count %zu overflows", name, count);
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->bufs[i].name, name) == 0)
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "hvd_elastic_state_add: '%s' is registered already", name);
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        buffer_t *b = realloc(s->bufs, cap * sizeof *b);
        if (!b)
            return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory registering '%s'", name);
        s->bufs = b;
        s->cap = cap;
    }
    buffer_t b = {.buf = buf, .count = count, .bytes = count * esize, .dtype = dtype};
    b.name = strdup(name);
    b.saved = malloc(b.bytes ? b.bytes : 1);
    if (!b.name || !b.saved) {
        free(b.name);
        free(b.saved);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory registering '%s' (%zu bytes)", name,
                              b.bytes);
    }
    if (b.bytes)
        memcpy(b.saved, buf, b.bytes);
    s->bufs[s->n++] = b;
    return HVD_OK;
}

hvd_status_t hvd_elastic_state_save(hvd_elastic_state_t *s) {
    if (!s)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "hvd_elastic_state_save: state is NULL");
    for (size_t i = 0; i < s->n; i++)
        if (s->bufs[i].bytes)
            memcpy(s->bufs[i].saved, s->bufs[i].buf, s->bufs[i].bytes);
    return s->cb.save ? s->cb.save(s->cb.user) : HVD_OK;
}

hvd_status_t hvd_elastic_state_restore(hvd_elastic_state_t *s) {
    if (!s)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "hvd_elastic_state_restore: state is NULL");
    for (size_t i = 0; i < s->n; i++)
        if (s->bufs[i].bytes)
            memcpy(s->bufs[i].buf, s->bufs[i].saved, s->bufs[i].bytes);
    return s->cb.restore ? s->cb.restore(s->cb.user) : HVD_OK;
}

hvd_status_t hvd_elastic_state_sync(hvd_elastic_state_t *s) {
    if (!s)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "hvd_elastic_state_sync: state is NULL");
    /* The live state, not the committed one (the reference broadcasts the committed values):
     * after a host change nothing was rolled back, and nothing since the commit is lost. */
    for (size_t i = 0; i < s->n; i++) {
        hvd_status_t st = hvd_broadcast(s->bufs[i].buf, s->bufs[i].count, s->bufs[i].dtype, 0);
        if (st != HVD_OK)
            return hvd__error_wrap(st, "syncing elastic state '%s' from rank 0", s->bufs[i].name);
    }
    if (s->cb.sync) {
        hvd_status_t st = s->cb.sync(s->cb.user, 0);
        if (st != HVD_OK)
            return st;
    }
    return hvd_elastic_state_save(s);
}

hvd_status_t hvd_elastic_check_host_updates(hvd_elastic_state_t *s) {
    if (!s)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "hvd_elastic_check_host_updates: state is NULL");
    if (!hvd_is_initialized())
        return hvd__error_set(HVD_ERR_SHUT_DOWN,
                              "hvd_elastic_check_host_updates: hvd is not initialised");
    int round;
    if (!hvd__context_elastic(&round))
        return HVD_OK; /* a static job's hosts never change */
    /* Only rank 0's view counts, and every rank learns it in the same collective, so all
     * raise the interrupt at the same commit (the agents of other ranks may see the event a
     * little earlier or later). */
    int64_t flag = hvd_rank() == 0 ? hvd__elastic_agent_hosts_updated(round) : 0;
    hvd_status_t st = hvd_broadcast(&flag, 1, HVD_INT64, 0);
    if (st != HVD_OK)
        return st;
    if (flag)
        return hvd__error_set(HVD_ERR_HOSTS_UPDATED,
                              "the elastic driver announced a host change in round %d", round);
    return HVD_OK;
}

hvd_status_t hvd_elastic_commit(hvd_elastic_state_t *s) {
    hvd_status_t st = hvd_elastic_state_save(s);
    return st == HVD_OK ? hvd_elastic_check_host_updates(s) : st;
}

int hvd_elastic_resets(const hvd_elastic_state_t *s) {
    return s ? s->resets : 0;
}

static int recoverable(hvd_status_t st) {
    return st == HVD_ERR_PEER_LOST || st == HVD_ERR_TIMEOUT;
}

/* Leave the round and join the driver's next one, again and again while a new round fails
 * as it forms (Horovod issue #2995: recovery must not abort on a second failure); each
 * attempt is bounded by the deadlines of hvd_init. Then the reset callback. */
static hvd_status_t reinit(hvd_elastic_state_t *s, hvd_elastic_ready_t reason) {
    for (;;) {
        hvd_shutdown(); /* completes with peers gone; not initialised after a failed init */
        hvd__elastic_rdv_set_reason(reason);
        hvd_status_t st = hvd_init();
        if (st == HVD_OK) {
            s->resets++;
            if (!s->cb.reset)
                return HVD_OK;
            st = s->cb.reset(s->cb.user);
            if (st == HVD_OK || !recoverable(st))
                return st;
        } else if (hvd__elastic_rdv_failed() || !recoverable(st)) {
            return st; /* removed, stopped, or no answer from the driver */
        }
        HVD_LOG_W("elastic: the new round failed as it formed (%s); trying again",
                  hvd_last_error());
        reason = HVD_ELASTIC_READY_FAILURE;
    }
}

hvd_status_t hvd_elastic_run(hvd_elastic_state_t *s, hvd_elastic_fn fn, void *arg) {
    if (!s || !fn)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "hvd_elastic_run: state or fn is NULL");
    if (!hvd_is_initialized())
        return hvd__error_set(HVD_ERR_SHUT_DOWN, "hvd_elastic_run: call hvd_init first");
    /* The first entry syncs (a new process must get the others' state, and the others sync
     * with it); after a reset the driver's flag, the same on every worker, decides. */
    int sync = 1;
    for (;;) {
        hvd_status_t st = sync ? hvd_elastic_state_sync(s) : HVD_OK;
        if (st == HVD_OK)
            st = fn(s, arg);
        if (st == HVD_OK)
            return HVD_OK;
        hvd_elastic_ready_t reason;
        if (recoverable(st)) {
            reason = HVD_ELASTIC_READY_FAILURE;
        } else if (st == HVD_ERR_HOSTS_UPDATED) {
            reason = HVD_ELASTIC_READY_UPDATE; /* the state was just committed: keep it */
        } else {
            return st;
        }
        if (!hvd__context_elastic(NULL))
            return st; /* a static job has no next round to go to */
        HVD_LOG_W("elastic: %s; re-initialising in the driver's next round", hvd_last_error());
        if (reason == HVD_ELASTIC_READY_FAILURE) {
            hvd_status_t rst = hvd_elastic_state_restore(s);
            if (rst != HVD_OK)
                return rst;
        }
        st = reinit(s, reason);
        if (st != HVD_OK)
            return st;
        sync = hvd__elastic_rdv_sync();
    }
}
