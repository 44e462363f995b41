/* hvd_init / hvd_shutdown and the topology queries. */
#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "core/context.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static hvd_context_t ctx;
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;

static hvd_status_t check_topology(const hvd_params_t *p) {
    if (p->rank >= p->size)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "HOROVOD_RANK=%d is not below HOROVOD_SIZE=%d",
                              p->rank, p->size);
    if (p->local_rank >= p->local_size || p->local_size > p->size)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "HOROVOD_LOCAL_RANK=%d / HOROVOD_LOCAL_SIZE=%d are inconsistent "
                              "with HOROVOD_SIZE=%d",
                              p->local_rank, p->local_size, p->size);
    if (p->cross_rank >= p->cross_size || p->cross_size > p->size)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "HOROVOD_CROSS_RANK=%d / HOROVOD_CROSS_SIZE=%d are inconsistent "
                              "with HOROVOD_SIZE=%d",
                              p->cross_rank, p->cross_size, p->size);
    return HVD_OK;
}

/* Name up to a few ranks missing from a check-in scope, for the timeout message. */
static void describe_missing(const hvd_store_scope_t *s, int size, char *out, size_t out_size) {
    size_t n = 0;
    int missing = 0, listed = 0;
    out[0] = '\0';
    for (int r = 0; r < size; r++) {
        char key[32];
        snprintf(key, sizeof key, "rank_%d", r);
        if (hvd__store_scope_find(s, key))
            continue;
        missing++;
        if (listed < 16 && n < out_size) {
            int w = snprintf(out + n, out_size - n, "%s%d", listed ? ", " : "", r);
            if (w > 0)
                n += (size_t)w;
            listed++;
        }
    }
    if (missing > listed && n < out_size)
        snprintf(out + n, out_size - n, ", ... (%d of %d missing)", missing, size);
    else if (n < out_size)
        snprintf(out + n, out_size - n, " (%d of %d missing)", missing, size);
}

/* Every rank announces itself in the scope of this init generation and waits, in one
 * long-poll request, until all ranks have: after this, every rank knows the job is complete.
 * The scope is new for each generation so that a rank re-initialising early can never
 * disturb a slower rank still reading the previous generation. */
static hvd_status_t check_in(hvd_context_t *c) {
    const hvd_params_t *p = &c->params;
    char scope[64], key[32], value[512];
    snprintf(scope, sizeof scope, "init.%u", c->generation);
    snprintf(key, sizeof key, "rank_%d", p->rank);
    int n = snprintf(value, sizeof value, "host=%s pid=%ld", p->hostname, (long)getpid());
    int64_t deadline = hvd__clock_deadline_ms((int64_t)p->gloo_timeout_seconds * 1000);
    hvd_status_t st = hvd__store_put(c->store, scope, key, value, (size_t)n, deadline);
    if (st != HVD_OK)
        return hvd__error_wrap(st, "rank %d could not check in with the rendezvous store at %s:%d",
                               p->rank, p->rendezvous_addr, p->rendezvous_port);
    hvd_store_scope_t s;
    st = hvd__store_get_scope(c->store, scope, (size_t)p->size, deadline, &s);
    if (st == HVD_ERR_TIMEOUT) {
        char missing[256];
        describe_missing(&s, p->size, missing, sizeof missing);
        hvd__store_scope_fini(&s);
        return hvd__error_set(HVD_ERR_TIMEOUT,
                              "rank %d: rendezvous timed out after %d s waiting for ranks %s at "
                              "%s:%d; raise HOROVOD_GLOO_TIMEOUT_SECONDS if they are slow to "
                              "start",
                              p->rank, p->gloo_timeout_seconds, missing, p->rendezvous_addr,
                              p->rendezvous_port);
    }
    if (st != HVD_OK)
        return hvd__error_wrap(st, "rank %d could not complete the rendezvous", p->rank);
    hvd__store_scope_fini(&s);
    return HVD_OK;
}

static hvd_status_t init_locked(void) {
    hvd_status_t st = hvd__params_load(&ctx.params, NULL, NULL);
    if (st != HVD_OK)
        return st;
    hvd_params_t *p = &ctx.params;
    hvd__log_configure(p->log_level, p->log_hide_time, p->size > 1 ? p->rank : -1);
    st = check_topology(p);
    if (st != HVD_OK)
        goto err_params;
    if (!p->rendezvous_addr || !*p->rendezvous_addr) {
        if (p->size != 1) {
            st = hvd__error_set(HVD_ERR_INVALID_ARG,
                                "HOROVOD_SIZE=%d but HOROVOD_GLOO_RENDEZVOUS_ADDR is not set: "
                                "start the job with horovodrun",
                                p->size);
            goto err_params;
        }
        return HVD_OK;
    }
    if (p->rendezvous_port <= 0) {
        st = hvd__error_set(HVD_ERR_INVALID_ARG,
                            "HOROVOD_GLOO_RENDEZVOUS_ADDR is set but HOROVOD_GLOO_RENDEZVOUS_PORT "
                            "is not a valid port");
        goto err_params;
    }
    if (!p->secret_key) {
        st = hvd__error_set(HVD_ERR_AUTH, "%s is not set: workers must be started by horovodrun",
                            HVD_SECRET_ENV);
        goto err_params;
    }
    st = hvd__secret_from_hex(p->secret_key, &ctx.secret);
    if (st != HVD_OK)
        goto err_params;
    st = hvd__store_client_create(p->rendezvous_addr, p->rendezvous_port, &ctx.secret, &ctx.store);
    if (st != HVD_OK)
        goto err_wipe_secret;
    st = check_in(&ctx);
    if (st != HVD_OK)
        goto err_destroy_store;
    return HVD_OK;

err_destroy_store:
    hvd__store_client_destroy(ctx.store);
    ctx.store = NULL;
err_wipe_secret:
    hvd__secret_wipe(&ctx.secret);
err_params:
    hvd__params_fini(&ctx.params);
    return st;
}

hvd_status_t hvd_init(void) {
    pthread_mutex_lock(&ctx_lock);
    hvd_status_t st;
    if (ctx.initialized) {
        st = hvd__error_set(HVD_ERR_STATE, "hvd_init: already initialised (call hvd_shutdown "
                                           "first)");
    } else {
        st = init_locked();
        if (st == HVD_OK)
            ctx.initialized = 1;
        else
            HVD_LOG_E("hvd_init failed: %s", hvd_last_error());
        /* A failed attempt still used a generation on the ranks that got further. */
        ctx.generation++;
    }
    pthread_mutex_unlock(&ctx_lock);
    return st;
}

hvd_status_t hvd_shutdown(void) {
    pthread_mutex_lock(&ctx_lock);
    if (!ctx.initialized) {
        pthread_mutex_unlock(&ctx_lock);
        return hvd__error_set(HVD_ERR_SHUT_DOWN, "hvd_shutdown: hvd is not initialised");
    }
    hvd__store_client_destroy(ctx.store);
    ctx.store = NULL;
    hvd__secret_wipe(&ctx.secret);
    hvd__params_fini(&ctx.params);
    ctx.initialized = 0;
    pthread_mutex_unlock(&ctx_lock);
    return HVD_OK;
}

int hvd_is_initialized(void) {
    pthread_mutex_lock(&ctx_lock);
    int v = ctx.initialized;
    pthread_mutex_unlock(&ctx_lock);
    return v;
}

/* Topology fields are written only under the lock in init/shutdown; reading one int under
 * the same lock keeps the queries race-free without a second synchronisation scheme. */
static int topology_field(size_t offset) {
    pthread_mutex_lock(&ctx_lock);
    int v = ctx.initialized ? *(const int *)((const char *)&ctx.params + offset) : -1;
    pthread_mutex_unlock(&ctx_lock);
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
