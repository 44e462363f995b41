/* The elastic round's outcomes; see worker_registry.h. */
#include "runner/elastic/worker_registry.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>

void hvd__registry_init(hvd_worker_registry_t *r) {
    memset(r, 0, sizeof *r);
}

void hvd__registry_fini(hvd_worker_registry_t *r) {
    for (size_t i = 0; i < r->count; i++)
        free(r->slots[i].host);
    free(r->slots);
    memset(r, 0, sizeof *r);
}

hvd_status_t hvd__registry_reset(hvd_worker_registry_t *r, int round, const char *const *hosts,
                                 const int *local_ranks, size_t count) {
    hvd__registry_fini(r);
    r->round = round;
    if (count == 0)
        return HVD_OK;
    r->slots = calloc(count, sizeof *r->slots);
    if (!r->slots)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for %zu workers", count);
    for (size_t i = 0; i < count; i++) {
        r->slots[i].host = strdup(hosts[i]);
        r->slots[i].local_rank = local_ranks[i];
        r->count = i + 1;
        if (!r->slots[i].host) {
            hvd__registry_fini(r);
            return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for %zu workers", count);
        }
    }
    return HVD_OK;
}

int hvd__registry_record(hvd_worker_registry_t *r, size_t i, hvd_worker_state_t state) {
    if (i >= r->count || state == HVD_WORKER_PENDING)
        return 0;
    hvd_worker_state_t *cur = &r->slots[i].state;
    if (*cur == HVD_WORKER_PENDING) {
        *cur = state;
        r->recorded++;
        return 1;
    }
    /* a survivor that dies before the next round: it cannot be part of it */
    if (*cur == HVD_WORKER_READY && state == HVD_WORKER_FAILURE) {
        *cur = state;
        return 1;
    }
    return 0;
}

bool hvd__registry_complete(const hvd_worker_registry_t *r) {
    return r->recorded == r->count;
}

size_t hvd__registry_count(const hvd_worker_registry_t *r, hvd_worker_state_t state) {
    size_t n = 0;
    for (size_t i = 0; i < r->count; i++)
        n += r->slots[i].state == state;
    return n;
}

hvd_round_outcome_t hvd__registry_outcome(const hvd_worker_registry_t *r,
                                          bool (*blacklisted)(void *arg, const char *host),
                                          void *arg) {
    if (hvd__registry_count(r, HVD_WORKER_SUCCESS) > 0)
        return HVD_ROUND_STOP_SUCCESS;
    if (hvd__registry_count(r, HVD_WORKER_FAILURE) == r->count)
        return HVD_ROUND_STOP_ALL_FAILED;
    for (size_t i = 0; i < r->count; i++)
        if (!blacklisted(arg, r->slots[i].host))
            return HVD_ROUND_RESUME;
    return HVD_ROUND_STOP_BLACKLISTED;
}

const char *hvd__registry_state_name(hvd_worker_state_t state) {
    switch (state) {
    case HVD_WORKER_PENDING:
        return "pending";
    case HVD_WORKER_READY:
        return "ready";
    case HVD_WORKER_SUCCESS:
        return "success";
    case HVD_WORKER_FAILURE:
        return "failure";
    }
    return "?";
}
