/* The process-wide round state and the ready/assign exchange of an elastic hvd_init
 * (elastic_rendezvous.h). The state is one static struct under a mutex; the exchange runs without
 * it held, so other threads can read the round while it blocks. */
#include "core/elastic_rendezvous.h"

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int started; /* an elastic hvd_init ran in this process */
    int round;
    int sync;
    hvd_elastic_ready_t reason;
    int failed;
} rdv;

int hvd__elastic_rdv_round(void) {
    pthread_mutex_lock(&lock);
    int r = rdv.round;
    pthread_mutex_unlock(&lock);
    return r;
}

int hvd__elastic_rdv_sync(void) {
    pthread_mutex_lock(&lock);
    int s = rdv.sync;
    pthread_mutex_unlock(&lock);
    return s;
}

void hvd__elastic_rdv_set_reason(hvd_elastic_ready_t reason) {
    pthread_mutex_lock(&lock);
    rdv.reason = reason;
    pthread_mutex_unlock(&lock);
}

int hvd__elastic_rdv_failed(void) {
    pthread_mutex_lock(&lock);
    int f = rdv.failed;
    pthread_mutex_unlock(&lock);
    return f;
}

hvd_status_t hvd__elastic_rdv_check_abort(const hvd_store_scope_t *scope, int round) {
    const hvd_store_entry_t *e = hvd__store_scope_find(scope, HVD_ELASTIC_ABORT_KEY);
    if (!e)
        return HVD_OK;
    char text[HVD_ELASTIC_VALUE_MAX + 1];
    hvd__elastic_msg_printable((const char *)e->value, e->value_len, text, sizeof text);
    return hvd__error_set(HVD_ERR_PEER_LOST, "elastic round %d failed before it formed: %s", round,
                          text);
}

/* Say why this process left round (its ready record), wait for its place in round + 1 and
 * parse it. */
static hvd_status_t exchange(hvd_store_client_t *store, const hvd_params_t *p, int round,
                             hvd_elastic_ready_t reason, hvd_elastic_assign_t *a) {
    char slot[HVD_ELASTIC_NAME_MAX], scope[HVD_ELASTIC_NAME_MAX];
    hvd_status_t st = hvd__elastic_msg_slot(p->hostname, p->local_rank, slot);
    if (st != HVD_OK)
        return st;
    int64_t wait_s = (int64_t)p->elastic_timeout + p->gloo_timeout_seconds;
    int64_t deadline = hvd__clock_deadline_ms(wait_s * 1000);
    const char *why = hvd__elastic_msg_ready_str(reason);
    hvd__elastic_msg_scope(HVD_ELASTIC_SCOPE_READY, round, scope);
    st = hvd__store_put(store, scope, slot, why, strlen(why), deadline);
    if (st != HVD_OK)
        return hvd__error_wrap(st,
                               "(host %s, local rank %d) could not report leaving elastic round "
                               "%d to the rendezvous store at %s:%d",
                               p->hostname, p->local_rank, round, p->rendezvous_addr,
                               p->rendezvous_port);
    HVD_LOG_D("elastic: %s left round %d (%s); waiting for its place in round %d", slot, round, why,
              round + 1);
    hvd__elastic_msg_scope(HVD_ELASTIC_SCOPE_ASSIGN, round + 1, scope);
    uint8_t *value = NULL;
    size_t len = 0;
    st = hvd__store_get(store, scope, slot, 1, deadline, &value, &len);
    if (st == HVD_ERR_TIMEOUT)
        return hvd__error_set(HVD_ERR_TIMEOUT,
                              "(host %s, local rank %d) waited %lld s (HOROVOD_ELASTIC_TIMEOUT + "
                              "HOROVOD_GLOO_TIMEOUT_SECONDS) for its place in elastic round %d: "
                              "key %s/%s never appeared in the rendezvous store at %s:%d",
                              p->hostname, p->local_rank, (long long)wait_s, round + 1, scope, slot,
                              p->rendezvous_addr, p->rendezvous_port);
    if (st != HVD_OK)
        return hvd__error_wrap(st,
                               "(host %s, local rank %d) waiting for key %s/%s (elastic round %d) "
                               "at %s:%d",
                               p->hostname, p->local_rank, scope, slot, round + 1,
                               p->rendezvous_addr, p->rendezvous_port);
    st = hvd__elastic_msg_assign_parse((const char *)value, len, a);
    free(value);
    if (st != HVD_OK)
        return hvd__error_wrap(st, "key %s/%s", scope, slot);
    if (a->verdict == HVD_ELASTIC_REMOVED)
        return hvd__error_set(HVD_ERR_SHUT_DOWN,
                              "this worker (host %s, local rank %d) was removed from the elastic "
                              "job (it has no place in round %d)",
                              p->hostname, p->local_rank, round + 1);
    if (a->verdict == HVD_ELASTIC_STOP)
        return hvd__error_set(HVD_ERR_SHUT_DOWN, "the elastic driver stopped the job: %s",
                              a->message[0] ? a->message : "(no reason given)");
    return HVD_OK;
}

hvd_status_t hvd__elastic_rdv_enter(hvd_store_client_t *store, hvd_params_t *p) {
    pthread_mutex_lock(&lock);
    int first = !rdv.started, round = rdv.round;
    hvd_elastic_ready_t reason = rdv.reason;
    if (first) {
        rdv.started = 1;
        rdv.round = p->elastic_round;
        rdv.sync = 1; /* a new process always syncs on its first entry */
    }
    rdv.failed = 0;
    pthread_mutex_unlock(&lock);
    if (first)
        return HVD_OK;

    hvd_elastic_assign_t a;
    hvd_status_t st = exchange(store, p, round, reason, &a);
    pthread_mutex_lock(&lock);
    if (st != HVD_OK) {
        rdv.failed = 1;
    } else {
        rdv.round = round + 1;
        rdv.sync = a.sync;
        rdv.reason = HVD_ELASTIC_READY_FAILURE;
    }
    pthread_mutex_unlock(&lock);
    if (st != HVD_OK)
        return st;
    p->rank = a.rank;
    p->size = a.size;
    p->local_rank = a.local_rank;
    p->local_size = a.local_size;
    p->cross_rank = a.cross_rank;
    p->cross_size = a.cross_size;
    HVD_LOG_I("elastic: (host %s, local rank %d) is rank %d of %d in round %d%s", p->hostname,
              p->local_rank, a.rank, a.size, round + 1, a.sync ? " (state will be synced)" : "");
    return HVD_OK;
}
