/* Allgather and allgatherv: small totals ride in the agreement rounds themselves (a Bruck
 * allgather), larger ones take the ring (each rank forwards each block it receives). */
#include "collectives/coll.h"
#include "collectives/dtype.h"
#include "collectives/ring.h"
#include "collectives/shm_coll.h"
#include "common/error.h"

#include <string.h>

/* FNV-1a over the counts, so ranks that pass different recvcounts disagree visibly. */
static uint64_t counts_digest(const size_t *counts, int p) {
    uint64_t h = 1469598103934665603ull;
    for (int r = 0; r < p; r++)
        for (int b = 0; b < 8; b++) {
            h ^= (uint64_t)((counts[r] >> (8 * b)) & 0xff);
            h *= 1099511628211ull;
        }
    return h;
}

hvd_status_t hvd__coll_allgather(hvd_group_t *g, const void *send, void *recv, const size_t *counts,
                                 size_t fixed_count, hvd_dtype_t dtype) {
    char what[128];
    hvd__coll_what(g, counts ? "allgatherv" : "allgather", what, sizeof what);
    int p = g->size, me = g->rank;
    size_t es = hvd__dtype_size(dtype), total = 0;
    hvd_sig_t sig = {.coll = counts ? HVD_COLL_ALLGATHERV : HVD_COLL_ALLGATHER,
                     .dtype = (uint8_t)dtype};
    hvd_status_t st =
        es ? HVD_OK : hvd__error_set(HVD_ERR_INVALID_ARG, "%s: unknown dtype %d", what, (int)dtype);
    for (int r = 0; st == HVD_OK && r < p; r++) {
        size_t c = counts ? counts[r] : fixed_count, b = 0;
        st = hvd__coll_bytes(c, es, what, &b);
        g->lens[r] = b;
        g->offs[r] = total;
        total += b;
        if (total > ((size_t)1 << 48))
            st = hvd__error_set(HVD_ERR_INVALID_ARG, "%s: total size is too large", what);
    }
    if (st == HVD_OK)
        st = hvd__coll_check_buf(send, g->lens[me], what, "sendbuf");
    if (st == HVD_OK)
        st = hvd__coll_check_buf(recv, total, what, "recvbuf");
    if (st == HVD_OK) {
        sig.count = counts ? total / es : fixed_count;
        sig.extra = counts ? counts_digest(counts, p) : 0;
    } else {
        sig.flags |= HVD_SIG_INVALID;
        for (int r = 0; r < p; r++)
            g->lens[r] = g->offs[r] = 0;
        total = 0;
    }
    if (total <= HVD_SMALL_BYTES || p == 1) {
        void *stage = hvd__group_scratch(g, 2, total);
        if (!stage)
            return hvd__error_pass(HVD_ERR_NO_MEMORY);
        return hvd__group_agree(g, &sig, send, g->lens, g->offs, recv, stage, what);
    }
    st = hvd__group_agree(g, &sig, NULL, NULL, NULL, NULL, NULL, what);
    if (st != HVD_OK)
        return st;
    if (g->hier_grid && total >= g->hier_ag_min_bytes)
        return hvd__shm_hier_allgather(g, send, recv, what, hvd__coll_allgather);
    const int *idx;
    hvd_arena_t *a = hvd__group_arena(g, &idx);
    if (a)
        return hvd__shm_allgather(g, a, idx, send, recv, total, what);
    /* The ring moves whole elements; blocks are laid out in bytes, so use a byte dtype. */
    char *own = (char *)recv + g->offs[me];
    if (own != (const char *)send && g->lens[me])
        memmove(own, send, g->lens[me]);
    hvd_ring_t ring = {
        .g = g, .seg_off = g->offs, .seg_len = g->lens, .own = me, .out = recv, .osize = 1};
    return hvd__ring_run(&ring, what);
}
