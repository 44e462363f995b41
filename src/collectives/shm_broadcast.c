/* Broadcast in the host arena (shm_coll.h). */
#include "collectives/shm_coll.h"

#include <string.h>

hvd_status_t hvd__shm_broadcast(hvd_group_t *g, hvd_arena_t *a, const int *idx, hvd_sig_t *sig,
                                void *buf, size_t bytes, int root, const char *what) {
    int valid = !(sig->flags & HVD_SIG_INVALID);
    size_t off = 0;
    do {
        size_t n = valid && bytes - off < a->data_bytes ? bytes - off : valid ? a->data_bytes : 0;
        if (n && g->rank == root)
            memcpy(hvd__arena_data(a, a->self), (const uint8_t *)buf + off, n);
        hvd_status_t st;
        if (off == 0) {
            if ((st = hvd__group_arena_agree(g, a, idx, sig, what)) != HVD_OK)
                return st;
        } else if ((st = hvd__arena_step(a)) != HVD_OK) {
            return hvd__group_arena_failed(g, st, what);
        }
        if (n && g->rank != root)
            memcpy((uint8_t *)buf + off, hvd__arena_data(a, idx[root]), n);
        hvd__arena_flip(a);
        off += n;
    } while (off < bytes);
    return HVD_OK;
}
