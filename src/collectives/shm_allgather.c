/* Allgather among exactly the ranks of one host, in its arena (shm_coll.h). */
#include "collectives/shm_coll.h"
#include "common/error.h"
#include "os/cma.h"

#include <errno.h>
#include <string.h>

/* From this many bytes in all, blocks move by process_vm_readv when the group may (a system
 * call and the page walk cost more than two memcpys of a small block). */
#define CMA_MIN_BYTES (256 * 1024)

hvd_status_t hvd__shm_cma_read(hvd_group_t *g, int r, uint64_t addr, void *dst, size_t len,
                               const char *what) {
    int err = hvd__cma_read((pid_t)g->cma_pids[r], addr, dst, len);
    if (err == ESRCH)
        return hvd__error_set(HVD_ERR_PEER_LOST, "%s: rank %d (pid %ld) is gone", what,
                              hvd__group_peer(g, r), g->cma_pids[r]);
    if (err)
        return hvd__error_set(HVD_ERR_IO, "%s: reading rank %d's memory (pid %ld): %s", what,
                              hvd__group_peer(g, r), g->cma_pids[r], strerror(err));
    return HVD_OK;
}

/* Every rank publishes where its block is, reads every other block straight from its owner
 * into place, and a second step keeps each block where it is until every rank has read it. */
static hvd_status_t by_cma(hvd_group_t *g, hvd_arena_t *a, const int *idx, uint8_t *recv,
                           const char *what) {
    uint64_t mine = (uint64_t)(uintptr_t)(recv + g->offs[g->rank]);
    memcpy(hvd__arena_data(a, a->self), &mine, sizeof mine);
    hvd_status_t st = hvd__arena_step(a);
    if (st != HVD_OK)
        return hvd__group_arena_failed(g, st, what);
    for (int r = 0; r < g->size && st == HVD_OK; r++) {
        if (r == g->rank || g->lens[r] == 0)
            continue;
        uint64_t addr;
        memcpy(&addr, hvd__arena_data(a, idx[r]), sizeof addr);
        st = hvd__shm_cma_read(g, r, addr, recv + g->offs[r], g->lens[r], what);
    }
    if (st != HVD_OK)
        return hvd__group_arena_failed(g, st, what);
    hvd__arena_flip(a);
    if ((st = hvd__arena_step(a)) != HVD_OK)
        return hvd__group_arena_failed(g, st, what);
    hvd__arena_flip(a);
    return HVD_OK;
}

/* A slot's worth of every block per step: each rank writes its own, reads the others. */
static hvd_status_t by_slots(hvd_group_t *g, hvd_arena_t *a, const int *idx, const uint8_t *own,
                             uint8_t *recv, const char *what) {
    size_t c = a->data_bytes, most = 0;
    for (int r = 0; r < g->size; r++)
        most = g->lens[r] > most ? g->lens[r] : most;
    size_t mine = g->lens[g->rank];
    for (size_t at = 0; at < most; at += c) {
        if (mine > at)
            memcpy(hvd__arena_data(a, a->self), own + at, mine - at < c ? mine - at : c);
        hvd_status_t st = hvd__arena_step(a);
        if (st != HVD_OK)
            return hvd__group_arena_failed(g, st, what);
        for (int r = 0; r < g->size; r++)
            if (r != g->rank && g->lens[r] > at)
                memcpy(recv + g->offs[r] + at, hvd__arena_data(a, idx[r]),
                       g->lens[r] - at < c ? g->lens[r] - at : c);
        hvd__arena_flip(a);
    }
    return HVD_OK;
}

hvd_status_t hvd__shm_allgather(hvd_group_t *g, hvd_arena_t *a, const int *idx, const void *send,
                                void *recv, size_t total, const char *what) {
    uint8_t *out = recv, *own = out + g->offs[g->rank];
    if (own != (const uint8_t *)send && g->lens[g->rank])
        memmove(own, send, g->lens[g->rank]);
    if (g->cma_pids && total >= CMA_MIN_BYTES)
        return by_cma(g, a, idx, out, what);
    return by_slots(g, a, idx, own, out, what);
}
