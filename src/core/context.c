/* The context (context.h): the one global, its locks, and the queries and API guards that
 * every module above uses. hvd_init and hvd_shutdown (init.c) fill and empty it. */
#include "core/context.h"

#include <hvd/hvd.h>

#include "common/error.h"

#include <pthread.h>
#include <stddef.h>

hvd_context_t hvd__ctx;
/* (what each lock guards: context.h) */
pthread_mutex_t hvd__ctx_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_rwlock_t hvd__ctx_use_lock = PTHREAD_RWLOCK_INITIALIZER;
pthread_mutex_t hvd__ctx_life_lock = PTHREAD_MUTEX_INITIALIZER;

hvd_status_t hvd__context_enter(hvd_context_t **ctx_p) {
    pthread_rwlock_rdlock(&hvd__ctx_use_lock);
    if (!hvd__ctx.initialized) {
        pthread_rwlock_unlock(&hvd__ctx_use_lock);
        return hvd__error_set(HVD_ERR_SHUT_DOWN, "hvd is not initialised (call hvd_init first)");
    }
    *ctx_p = &hvd__ctx;
    return HVD_OK;
}

void hvd__context_leave(void) {
    pthread_rwlock_unlock(&hvd__ctx_use_lock);
}

hvd_group_t *hvd__context_group(hvd_context_t *c, int comm) {
    switch (comm) {
    case HVD_COMM_GLOBAL:
        return &c->global;
    case HVD_COMM_LOCAL:
        return &c->local;
    case HVD_COMM_CROSS:
        return &c->cross;
    }
    return NULL;
}

int hvd__context_elastic(int *round_p) {
    pthread_mutex_lock(&hvd__ctx_lock);
    int elastic = hvd__ctx.initialized && hvd__ctx.elastic;
    if (round_p)
        *round_p = hvd__ctx.round;
    pthread_mutex_unlock(&hvd__ctx_lock);
    return elastic;
}

int hvd_is_initialized(void) {
    pthread_mutex_lock(&hvd__ctx_lock);
    int v = hvd__ctx.initialized;
    pthread_mutex_unlock(&hvd__ctx_lock);
    return v;
}

/* Topology fields are written only under the lock in init/shutdown; reading one int under
 * the same lock keeps the queries race-free without a second synchronisation scheme. */
static int topology_field(size_t offset) {
    pthread_mutex_lock(&hvd__ctx_lock);
    int v = hvd__ctx.initialized ? *(const int *)((const char *)&hvd__ctx.params + offset) : -1;
    pthread_mutex_unlock(&hvd__ctx_lock);
    return v;
}

int hvd_is_homogeneous(void) {
    pthread_mutex_lock(&hvd__ctx_lock);
    int v = hvd__ctx.initialized ? hvd__ctx.homogeneous : -1;
    pthread_mutex_unlock(&hvd__ctx_lock);
    return v;
}

int hvd_rank(void) {
    return topology_field(offsetof(hvd_params_t, rank));
}
int hvd_size(void) {
    return topology_field(offsetof(hvd_params_t, size));
}
int hvd_local_rank(void) {
    return topology_field(offsetof(hvd_params_t, local_rank));
}
int hvd_local_size(void) {
    return topology_field(offsetof(hvd_params_t, local_size));
}
int hvd_cross_rank(void) {
    return topology_field(offsetof(hvd_params_t, cross_rank));
}
int hvd_cross_size(void) {
    return topology_field(offsetof(hvd_params_t, cross_size));
}
