/* The process sets' public entry points (hvd.h): registering a set (every rank of the job
 * agrees on it through an allgather), removing one, and the queries. */
#include <hvd/hvd.h>

#include "common/error.h"
#include "common/hash.h"
#include "core/context.h"
#include "core/process_set.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Every rank must pass the same value: one allgather of it, compared. */
static hvd_status_t agree(uint64_t mine[2], const char *what_size, const char *what_values) {
    int p = hvd_size();
    uint64_t *all = malloc((size_t)(p > 0 ? p : 1) * 2 * sizeof *all);
    if (!all)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "process sets: out of memory");
    hvd_status_t st = hvd_allgather(mine, 2, all, HVD_INT64);
    for (int r = 0; st == HVD_OK && r < p; r++) {
        if (all[2 * r] != mine[0])
            st = hvd__error_set(HVD_ERR_MISMATCH, "%s (rank %d and rank %d differ)", what_size,
                                hvd_rank(), r);
        else if (all[2 * r + 1] != mine[1])
            st = hvd__error_set(HVD_ERR_MISMATCH, "%s (rank %d and rank %d differ)", what_values,
                                hvd_rank(), r);
    }
    free(all);
    return st;
}

hvd_status_t hvd_add_process_set(const int *ranks, int n, int *id_p) {
    if (!ranks || n <= 0 || !id_p)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "hvd_add_process_set: %s",
                              !id_p ? "id_p is NULL" : "no ranks");
    int size = hvd_size();
    if (size < 0)
        return hvd__error_set(HVD_ERR_SHUT_DOWN, "hvd is not initialised (call hvd_init first)");
    int *members = malloc((size_t)n * sizeof *members);
    if (!members)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "hvd_add_process_set: out of memory");
    memcpy(members, ranks, (size_t)n * sizeof *members);
    qsort(members, (size_t)n, sizeof *members, cmp_int);
    hvd_status_t st = HVD_OK;
    for (int i = 0; i < n && st == HVD_OK; i++) {
        if (members[i] < 0 || members[i] >= size)
            st = hvd__error_set(HVD_ERR_INVALID_ARG,
                                "hvd_add_process_set: rank %d is not a rank of the job of %d",
                                members[i], size);
        else if (i && members[i] == members[i - 1])
            st = hvd__error_set(HVD_ERR_INVALID_ARG, "hvd_add_process_set: rank %d is listed twice",
                                members[i]);
    }
    /* Collective even when this rank's list is bad, so the others fail too instead of
     * waiting for it. */
    uint64_t mine[2] = {
        st == HVD_OK ? (uint64_t)n : UINT64_MAX,
        hvd__hash_fnv1a_bytes(HVD_HASH_FNV_BASIS, members, (size_t)n * sizeof *members)};
    hvd_status_t agreed =
        agree(mine, "Attempted to register process set with mismatching size on different ranks",
              "Attempted to register process set with mismatching values on different ranks");
    if (st == HVD_OK)
        st = agreed;
    hvd_context_t *c;
    if (st != HVD_OK || (st = hvd__context_enter(&c)) != HVD_OK) {
        free(members);
        return st;
    }
    hvd__pset_table_lock();
    for (int i = 0; i < c->npsets && st == HVD_OK; i++)
        if (c->psets[i]->size == n && !memcmp(c->psets[i]->members, members, n * sizeof *members))
            st = hvd__error_set(HVD_ERR_INVALID_ARG,
                                "hvd_add_process_set: process set %d has these ranks already",
                                c->psets[i]->id);
    if (st == HVD_OK && n == size)
        st = hvd__error_set(HVD_ERR_INVALID_ARG,
                            "hvd_add_process_set: these are every rank: the global process set 0");
    hvd_pset_t *s = st == HVD_OK ? calloc(1, sizeof *s) : NULL;
    hvd_pset_t **grown = s ? realloc(c->psets, (size_t)(c->npsets + 1) * sizeof *grown) : NULL;
    if (st == HVD_OK && (!s || !grown))
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "hvd_add_process_set: out of memory");
    if (grown)
        c->psets = grown;
    if (st == HVD_OK) {
        s->id = ++c->next_pset;
        s->members = members;
        s->size = n;
        s->rank = -1;
        for (int i = 0; i < n; i++)
            if (members[i] == c->global.rank)
                s->rank = i;
        char name[32];
        snprintf(name, sizeof name, "process set %d", s->id);
        if (s->rank >= 0) {
            st = hvd__group_init(&s->group, c->tp, name, members, n, s->rank);
            s->group.ordered = c->params.reproducible;
        }
    }
    if (st == HVD_OK) {
        c->psets[c->npsets++] = s;
        *id_p = s->id;
    } else {
        free(s);
        free(members);
    }
    hvd__pset_table_unlock();
    hvd__context_leave();
    return st;
}

hvd_status_t hvd_remove_process_set(int id) {
    if (id == 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "the global process set 0 cannot be removed");
    uint64_t mine[2] = {(uint64_t)id, 0};
    hvd_status_t st = agree(mine, "ranks remove different process sets", "");
    hvd_context_t *c;
    if (st != HVD_OK || (st = hvd__context_enter(&c)) != HVD_OK)
        return st;
    hvd__pset_table_lock();
    int i = 0;
    while (i < c->npsets && c->psets[i]->id != id)
        i++;
    if (i == c->npsets) {
        st = hvd__error_set(HVD_ERR_INVALID_ARG, "process set %d does not exist", id);
    } else {
        hvd__pset_destroy(c->psets[i]);
        c->psets[i] = c->psets[--c->npsets];
    }
    hvd__pset_table_unlock();
    hvd__context_leave();
    return st;
}

hvd_status_t hvd_process_set_info(int id, int *rank_p, int *size_p) {
    hvd_context_t *c;
    hvd_status_t st = hvd__context_enter(&c);
    if (st != HVD_OK)
        return st;
    int rank = -1, size = 0;
    hvd__pset_group(c, id, &rank, &size);
    if (size == 0)
        st = hvd__error_set(HVD_ERR_INVALID_ARG, "process set %d does not exist", id);
    hvd__context_leave();
    if (st == HVD_OK) {
        if (rank_p)
            *rank_p = rank;
        if (size_p)
            *size_p = size;
    }
    return st;
}

hvd_status_t hvd_process_set_ranks(int id, int *ranks, int max, int *n_p) {
    int size;
    hvd_status_t st = hvd_process_set_info(id, NULL, &size);
    if (st != HVD_OK)
        return st;
    if (!n_p || (!ranks && max > 0))
        return hvd__error_set(HVD_ERR_INVALID_ARG, "hvd_process_set_ranks: a NULL output");
    hvd_context_t *c;
    if ((st = hvd__context_enter(&c)) != HVD_OK)
        return st;
    for (int r = 0; r < size && r < max; r++)
        ranks[r] = hvd__pset_member(c, id, r);
    hvd__context_leave();
    *n_p = size;
    return HVD_OK;
}

int hvd_process_set_ids(int *ids, int max) {
    hvd_context_t *c;
    hvd_status_t st = hvd__context_enter(&c);
    if (st != HVD_OK)
        return st;
    hvd__pset_table_lock();
    int n = c->npsets + 1;
    if (ids && max > 0)
        ids[0] = 0;
    for (int i = 0; i < c->npsets && ids && i + 1 < max; i++)
        ids[i + 1] = c->psets[i]->id;
    hvd__pset_table_unlock();
    hvd__context_leave();
    return n;
}
