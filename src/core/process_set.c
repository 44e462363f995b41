/* The process sets' table (process_set.h); the public entry points that edit it are in
 * process_set_api.c, above the collectives they agree through. */
#include <hvd/hvd.h>

#include "common/error.h"
#include "common/hash.h"
#include "core/context.h"
#include "core/process_set.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Guards the context's table of sets: the engine's thread reads it while user threads
 * register and remove sets. */
static pthread_mutex_t pset_lock = PTHREAD_MUTEX_INITIALIZER;

hvd_pset_t *hvd__pset_find_locked(hvd_context_t *c, int id) {
    for (int i = 0; i < c->npsets; i++)
        if (c->psets[i]->id == id)
            return c->psets[i];
    return NULL;
}

hvd_group_t *hvd__pset_group(hvd_context_t *c, int id, int *rank_p, int *size_p) {
    if (id == 0) {
        if (rank_p)
            *rank_p = c->global.rank;
        if (size_p)
            *size_p = c->global.size;
        return &c->global;
    }
    pthread_mutex_lock(&pset_lock);
    hvd_pset_t *s = hvd__pset_find_locked(c, id);
    hvd_group_t *g = s && s->rank >= 0 ? &s->group : NULL;
    if (rank_p)
        *rank_p = s ? s->rank : -1;
    if (size_p)
        *size_p = s ? s->size : 0;
    pthread_mutex_unlock(&pset_lock);
    if (!s)
        hvd__error_set(HVD_ERR_INVALID_ARG,
                       "process set %d does not exist, or has not been registered", id);
    else if (!g)
        hvd__error_set(HVD_ERR_INVALID_ARG, "rank %d is not a member of process set %d",
                       c->global.rank, id);
    return g;
}

int hvd__pset_member(hvd_context_t *c, int id, int r) {
    if (id == 0)
        return r >= 0 && r < c->global.size ? r : -1;
    pthread_mutex_lock(&pset_lock);
    hvd_pset_t *s = hvd__pset_find_locked(c, id);
    int g = s && r >= 0 && r < s->size ? s->members[r] : -1;
    pthread_mutex_unlock(&pset_lock);
    return g;
}

void hvd__pset_destroy(hvd_pset_t *s) {
    if (s->rank >= 0)
        hvd__group_fini(&s->group);
    free(s->members);
    free(s);
}

void hvd__psets_free(hvd_context_t *c) {
    pthread_mutex_lock(&pset_lock);
    for (int i = 0; i < c->npsets; i++)
        hvd__pset_destroy(c->psets[i]);
    free(c->psets);
    c->psets = NULL;
    c->npsets = 0;
    c->next_pset = 0;
    pthread_mutex_unlock(&pset_lock);
}

void hvd__pset_table_lock(void) {
    pthread_mutex_lock(&pset_lock);
}

void hvd__pset_table_unlock(void) {
    pthread_mutex_unlock(&pset_lock);
}
