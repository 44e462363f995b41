/* Groups of ranks and the signature agreement (group.h). */
#include "collectives/group.h"

#include <hvd/hvd.h>

#include "collectives/dtype.h"
#include "common/error.h"
#include "transport/shm_arena.h"
#include "wire/le.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

hvd_status_t hvd__group_init(hvd_group_t *g, hvd_transport_t *tp, const char *name,
                             const int *members, int size, int rank) {
    memset(g, 0, sizeof *g);
    g->tp = tp;
    snprintf(g->name, sizeof g->name, "%s", name);
    g->size = size;
    g->rank = rank;
    g->members = malloc((size_t)size * sizeof *g->members);
    g->sigs = malloc((size_t)size * sizeof *g->sigs);
    g->sigbuf = malloc((size_t)size * HVD_SIG_LEN);
    g->lens = malloc((size_t)size * sizeof *g->lens);
    g->offs = malloc((size_t)size * sizeof *g->offs);
    if (!g->members || !g->sigs || !g->sigbuf || !g->lens || !g->offs) {
        hvd__group_fini(g);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory creating the %s group", name);
    }
    memcpy(g->members, members, (size_t)size * sizeof *g->members);
    return HVD_OK;
}

void hvd__group_fini(hvd_group_t *g) {
    for (int i = 0; i < 3; i++)
        free(g->scratch[i]);
    free(g->xfers);
    free(g->members);
    free(g->sigs);
    free(g->sigbuf);
    free(g->lens);
    free(g->offs);
    free(g->vbuf);
    free(g->vpos);
    free(g->vblocks);
    free(g->arena_idx);
    free(g->hier_grid);
    free(g->cma_pids);
    memset(g, 0, sizeof *g);
}

struct hvd_arena *hvd__group_arena(hvd_group_t *g, const int **idx_p) {
    hvd_arena_t *a = g->tp && g->tp->ops->arena ? g->tp->ops->arena(g->tp) : NULL;
    if (!a || a->n != g->size)
        return NULL;
    if (!g->arena_looked) {
        g->arena_looked = 1;
        int *idx = malloc((size_t)g->size * sizeof *idx);
        int all = idx != NULL;
        for (int r = 0; all && r < g->size; r++) {
            idx[r] = -1;
            for (int i = 0; i < a->n; i++)
                if (a->ranks[i] == g->members[r])
                    idx[r] = i;
            all = idx[r] >= 0;
        }
        if (all)
            g->arena_idx = idx;
        else
            free(idx);
    }
    if (!g->arena_idx)
        return NULL;
    *idx_p = g->arena_idx;
    return a;
}

void *hvd__group_scratch(hvd_group_t *g, int slot, size_t bytes) {
    if (bytes == 0)
        bytes = 1;
    if (bytes > g->scratch_cap[slot]) {
        free(g->scratch[slot]);
        g->scratch[slot] = malloc(bytes);
        g->scratch_cap[slot] = g->scratch[slot] ? bytes : 0;
        if (!g->scratch[slot]) {
            hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for %zu bytes of collective scratch",
                           bytes);
            return NULL;
        }
    }
    return g->scratch[slot];
}

hvd_xfer_t *hvd__group_xfers(hvd_group_t *g, size_t n) {
    if (n == 0)
        n = 1; /* a group of one has nothing to transfer but still gets an array */
    if (n > g->xfers_cap) {
        hvd_xfer_t *x = realloc(g->xfers, n * sizeof *x);
        if (!x) {
            hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for %zu transfers", n);
            return NULL;
        }
        g->xfers = x;
        g->xfers_cap = n;
    }
    memset(g->xfers, 0, n * sizeof *g->xfers);
    return g->xfers;
}

hvd_status_t hvd__group_exchange(hvd_group_t *g, hvd_xfer_t *xfers, size_t n, const char *what) {
    if (n == 0)
        return HVD_OK;
    return g->tp->ops->exchange(g->tp, xfers, n, what);
}

const char *hvd__coll_name(unsigned c) {
    static const char *names[] = {"?",          "allreduce", "broadcast",     "allgather",
                                  "allgatherv", "alltoall",  "reducescatter", "barrier"};
    return c < sizeof names / sizeof *names ? names[c] : "?";
}

void hvd__sig_describe(const hvd_sig_t *s, char *out, size_t out_size) {
    if (s->flags & HVD_SIG_INVALID) {
        snprintf(out, out_size, "%s with invalid arguments (call #%u)", hvd__coll_name(s->coll),
                 s->seq);
        return;
    }
    const char *dt = hvd__dtype_name((hvd_dtype_t)s->dtype);
    switch (s->coll) {
    case HVD_COLL_ALLREDUCE:
    case HVD_COLL_REDUCESCATTER:
        snprintf(out, out_size, "%s(count %llu, %s, %s%s%s%s) as call #%u", hvd__coll_name(s->coll),
                 (unsigned long long)s->count, dt, hvd__reduce_op_name((hvd_reduce_op_t)s->op),
                 s->flags & HVD_SIG_PRESCALED ? ", prescaled" : "",
                 s->flags & HVD_SIG_CMA ? ", by cross-memory attach" : "",
                 s->flags & HVD_SIG_ORDERED ? ", in rank order: HVD_REPRODUCIBLE=1" : "", s->seq);
        break;
    case HVD_COLL_BROADCAST:
        snprintf(out, out_size, "broadcast(count %llu, %s, root %d) as call #%u",
                 (unsigned long long)s->count, dt, s->root, s->seq);
        break;
    case HVD_COLL_ALLGATHERV:
        snprintf(out, out_size, "allgatherv(total %llu, %s, counts digest %016llx) as call #%u",
                 (unsigned long long)s->count, dt, (unsigned long long)s->extra, s->seq);
        break;
    case HVD_COLL_BARRIER:
        snprintf(out, out_size, "barrier as call #%u", s->seq);
        break;
    default:
        snprintf(out, out_size, "%s(count %llu, %s) as call #%u", hvd__coll_name(s->coll),
                 (unsigned long long)s->count, dt, s->seq);
    }
}

/* "ranks 0-2, 5" from a membership test, at most ~120 characters. */
static void list_ranks(const hvd_sig_t *sigs, int size, const hvd_sig_t *like, char *out,
                       size_t out_size) {
    size_t n = 0;
    int count = 0;
    out[0] = '\0';
    for (int r = 0; r < size; r++) {
        if (!hvd__sig_equal(&sigs[r], like))
            continue;
        int end = r;
        while (end + 1 < size && hvd__sig_equal(&sigs[end + 1], like))
            end++;
        if (n + 24 >= out_size || n > 120) {
            snprintf(out + n, out_size - n, ", ...");
            return;
        }
        int w = end > r ? snprintf(out + n, out_size - n, "%s%d-%d", count ? ", " : "", r, end)
                        : snprintf(out + n, out_size - n, "%s%d", count ? ", " : "", r);
        n += (size_t)(w > 0 ? w : 0);
        count += end - r + 1;
        r = end;
    }
}

/* Every rank builds the same message from the same signatures: the distinct calls (up to
 * four) and the ranks that made each. */
hvd_status_t hvd__group_report_mismatch(hvd_group_t *g, const char *what) {
    char msg[1024];
    size_t n = (size_t)snprintf(msg, sizeof msg, "%s: ranks of the %s communicator disagree:", what,
                                g->name);
    int shown[4], nshown = 0;
    for (int r = 0; r < g->size && nshown < 4; r++) {
        int seen = 0;
        for (int i = 0; i < nshown; i++)
            seen |= hvd__sig_equal(&g->sigs[shown[i]], &g->sigs[r]);
        if (seen)
            continue;
        shown[nshown++] = r;
        char ranks[160], call[160];
        list_ranks(g->sigs, g->size, &g->sigs[r], ranks, sizeof ranks);
        hvd__sig_describe(&g->sigs[r], call, sizeof call);
        if (n < sizeof msg)
            n += (size_t)snprintf(msg + n, sizeof msg - n, "%s rank%s %s called %s",
                                  nshown > 1 ? ";" : "", strpbrk(ranks, ",-") ? "s" : "", ranks,
                                  call);
    }
    return hvd__error_set(HVD_ERR_MISMATCH, "%s", msg);
}

/* Fills g->sigbuf and stage in the rotated layout: position k holds group rank
 * (me + k) mod p; position 0 (this rank's block) is already there. */
/* Bruck: in round i every rank sends what it has gathered to rank - 2^i and receives from
 * rank + 2^i; ceil(log2 p) rounds. */
static hvd_status_t bruck_rounds(hvd_group_t *g, uint8_t *st, const size_t *lens,
                                 const char *what) {
    int p = g->size, me = g->rank;
    size_t total = lens ? lens[me] : 0;
    hvd_xfer_t *x = hvd__group_xfers(g, 2);
    if (!x)
        return hvd__error_pass(HVD_ERR_NO_MEMORY);
    for (int d = 1; d < p; d <<= 1) {
        int cnt = d < p - d ? d : p - d;
        /* bytes of positions [0, cnt) we send, and of [d, d + cnt) expected */
        size_t have = total, want = 0, send_bytes = 0;
        if (lens) {
            for (int k = 0; k < cnt; k++)
                send_bytes += lens[(me + k) % p];
            for (int k = d; k < d + cnt; k++)
                want += lens[(me + k) % p];
        }
        memset(x, 0, 2 * sizeof *x);
        x[0].peer = hvd__group_peer(g, me - d);
        x[0].is_send = 1;
        x[0].iov[0].iov_base = g->sigbuf;
        x[0].iov[0].iov_len = (size_t)cnt * HVD_SIG_LEN;
        x[0].iov[1].iov_base = st;
        x[0].iov[1].iov_len = send_bytes;
        x[0].iovcnt = 2;
        x[1].peer = hvd__group_peer(g, me + d);
        x[1].iov[0].iov_base = g->sigbuf + (size_t)d * HVD_SIG_LEN;
        x[1].iov[0].iov_len = (size_t)cnt * HVD_SIG_LEN;
        x[1].iov[1].iov_base = st ? st + have : NULL;
        x[1].iov[1].iov_len = want;
        x[1].iovcnt = 2;
        hvd_status_t s = hvd__group_exchange(g, x, 2, what);
        if (s != HVD_OK)
            return s;
        total = have + want;
    }
    return HVD_OK;
}

hvd_status_t hvd__group_judge(hvd_group_t *g, const hvd_sig_t *mine, const char *local_error,
                              const char *what) {
    int disagree = 0;
    for (int r = 0; r < g->size; r++)
        disagree |= !hvd__sig_equal(&g->sigs[r], mine);
    if (mine->flags & HVD_SIG_INVALID) {
        if (!disagree)
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s", local_error);
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s (and the other ranks' calls differ)",
                              local_error);
    }
    if (disagree)
        return hvd__group_report_mismatch(g, what);
    return HVD_OK;
}

hvd_status_t hvd__group_arena_failed(hvd_group_t *g, hvd_status_t st, const char *what) {
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", hvd_last_error());
    g->tp->ops->abort(g->tp, st, copy);
    return hvd__error_prefix(st, what);
}

/* The signatures' step in the arena (seq assigned by the caller). */
static hvd_status_t arena_sigs(hvd_group_t *g, hvd_arena_t *a, const int *idx, hvd_sig_t *mine,
                               const char *what) {
    char local_error[1024] = "";
    if (mine->flags & HVD_SIG_INVALID)
        snprintf(local_error, sizeof local_error, "%s", hvd_last_error());
    hvd__sig_encode(hvd__arena_head(a, a->self), mine);
    hvd_status_t st = hvd__arena_step(a);
    if (st != HVD_OK)
        return hvd__group_arena_failed(g, st, what);
    for (int r = 0; r < g->size; r++)
        hvd__sig_decode(hvd__arena_head(a, idx[r]), &g->sigs[r]);
    st = hvd__group_judge(g, mine, local_error, what);
    if (st != HVD_OK)
        hvd__arena_flip(a);
    return st;
}

/* Only the thread running the group's collectives advances seq, but a caller validating its
 * arguments on another thread reads it for its messages (hvd__coll_what): atomic, relaxed. */
static uint32_t next_seq(hvd_group_t *g) {
    return __atomic_fetch_add(&g->seq, 1, __ATOMIC_RELAXED);
}

hvd_status_t hvd__group_arena_agree(hvd_group_t *g, hvd_arena_t *a, const int *idx, hvd_sig_t *mine,
                                    const char *what) {
    mine->seq = next_seq(g);
    g->agreed = 0;
    return arena_sigs(g, a, idx, mine, what);
}

hvd_status_t hvd__group_agree(hvd_group_t *g, hvd_sig_t *mine, const void *data, const size_t *lens,
                              const size_t *offs, void *gathered, void *stage, const char *what) {
    int p = g->size, me = g->rank;
    mine->seq = next_seq(g);
    int agreed = g->agreed;
    g->agreed = 0;
    if (agreed && !lens && !(mine->flags & HVD_SIG_INVALID))
        return HVD_OK;
    const int *idx;
    hvd_arena_t *a = hvd__group_arena(g, &idx);
    if (a) {
        /* Every collective of an arena group agrees there (one mechanism for all, or a
         * rank calling another collective would wait on the other path), the data with it
         * when every block fits a slot (it does for the small paths that pass data). */
        if (lens && lens[me] && lens[me] <= a->data_bytes)
            memcpy(hvd__arena_data(a, a->self), data, lens[me]);
        hvd_status_t s = arena_sigs(g, a, idx, mine, what);
        if (s != HVD_OK || !gathered) {
            if (s == HVD_OK)
                hvd__arena_flip(a);
            return s;
        }
        /* Agreed: every rank's lens are alike now, and so is this choice. */
        int fits = 1;
        for (int r = 0; r < p; r++)
            fits &= lens[r] <= a->data_bytes;
        for (int r = 0; fits && r < p; r++)
            if (lens[r])
                memcpy((uint8_t *)gathered + offs[r], hvd__arena_data(a, idx[r]), lens[r]);
        hvd__arena_flip(a);
        if (fits)
            return HVD_OK;
    }
    char local_error[1024] = "";
    if (mine->flags & HVD_SIG_INVALID)
        snprintf(local_error, sizeof local_error, "%s", hvd_last_error());
    /* Rotated layout: position k holds the block of group rank (me + k) mod p. */
    uint8_t *st = stage;
    hvd__sig_encode(g->sigbuf, mine);
    if (lens && lens[me])
        memcpy(st, data, lens[me]);
    hvd_status_t s = bruck_rounds(g, st, lens, what);
    if (s != HVD_OK)
        return s;
    for (int k = 0; k < p; k++)
        hvd__sig_decode(g->sigbuf + (size_t)k * HVD_SIG_LEN, &g->sigs[(me + k) % p]);
    s = hvd__group_judge(g, mine, local_error, what);
    if (s != HVD_OK)
        return s;
    if (gathered) {
        size_t pos = 0;
        for (int k = 0; k < p; k++) {
            int r = (me + k) % p;
            if (lens[r])
                memcpy((uint8_t *)gathered + offs[r], st + pos, lens[r]);
            pos += lens[r];
        }
    }
    return HVD_OK;
}

/* Variable allgather: Bruck's rounds again, but each message is a run of length-prefixed
 * blocks (u32 length, bytes) whose total only the sender knows, so the transport allocates
 * each receive after checking it against the bound. g->vbuf accumulates the run in the
 * rotated order (position k = group rank me + k); g->vpos[k] is where block k starts. */
static hvd_status_t vbuf_append(hvd_group_t *g, size_t *used, const void *src, size_t n) {
    if (*used + n > g->vcap) {
        size_t cap = g->vcap ? g->vcap : 256;
        while (cap < *used + n)
            cap *= 2;
        uint8_t *b = realloc(g->vbuf, cap);
        if (!b)
            return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for %zu bytes of control data",
                                  cap);
        g->vbuf = b;
        g->vcap = cap;
    }
    memcpy(g->vbuf + *used, src, n);
    *used += n;
    return HVD_OK;
}

/* Index the blocks of a received run that should hold exactly cnt of them, each at most max
 * bytes, appending their starts (relative to base) to g->vpos from position first. */
static hvd_status_t index_run(hvd_group_t *g, const uint8_t *run, size_t len, int first, int cnt,
                              size_t base, size_t max, int from, const char *what) {
    size_t pos = 0;
    for (int k = 0; k < cnt; k++) {
        if (len - pos < 4)
            goto bad;
        uint32_t n = hvd__le32_get(run + pos);
        if (n > max || len - pos - 4 < n)
            goto bad;
        g->vpos[first + k] = base + pos;
        pos += 4 + (size_t)n;
    }
    if (pos == len)
        return HVD_OK;
bad:
    return hvd__error_set(HVD_ERR_PROTOCOL,
                          "%s: malformed control message of %zu bytes from rank %d (expected %d "
                          "blocks of at most %zu bytes)",
                          what, len, from, cnt, max);
}

/* Where a block of the arena's variable allgather lies: its length (u32) first in the box;
 * a block that fits follows it there (it moves with the step's own announcement), a longer
 * one is in the slot's data. */
#define BOX_INLINE (HVD_ARENA_BOX_BYTES - 4)

/* One step of the arena's variable allgather, this rank's block written already (len bytes,
 * in its box when it fits, else in its slot): blocks[r] then point where rank r's block
 * arrived, readable until this rank's next step. */
static hvd_status_t arena_exchange(hvd_group_t *g, hvd_arena_t *a, const int *idx, size_t len,
                                   size_t max, const uint8_t **blocks, size_t *lens,
                                   const char *what) {
    hvd__le32_put(hvd__arena_box_out(a), (uint32_t)len);
    hvd_status_t st = hvd__arena_step(a);
    if (st != HVD_OK)
        return hvd__group_arena_failed(g, st, what);
    for (int r = 0; r < g->size && st == HVD_OK; r++) {
        const uint8_t *in = hvd__arena_box_in(a, idx[r]);
        uint32_t n = hvd__le32_get(in);
        if (n > max)
            st = hvd__error_set(HVD_ERR_PROTOCOL, "%s: rank %d sent %u bytes (at most %zu)", what,
                                g->members[r], n, max);
        lens[r] = n;
        blocks[r] = n <= BOX_INLINE ? in + 4 : hvd__arena_data(a, idx[r]);
    }
    hvd__arena_flip(a);
    return st;
}

/* Where this rank writes a block of len bytes for arena_exchange. */
static uint8_t *block_out(const hvd_arena_t *a, size_t len) {
    return len <= BOX_INLINE ? hvd__arena_box_out(a) + 4 : hvd__arena_data(a, a->self);
}

/* (hvd__group_allgather_var's choice of the arena) */
static hvd_arena_t *box_arena(hvd_group_t *g, size_t len, size_t max, const int **idx) {
    hvd_arena_t *a = hvd__group_arena(g, idx);
    return a && max <= a->data_bytes && len <= max ? a : NULL;
}

uint8_t *hvd__group_box(hvd_group_t *g, size_t len, size_t max) {
    const int *idx;
    hvd_arena_t *a = box_arena(g, len, max, &idx);
    return a ? block_out(a, len) : NULL;
}

hvd_status_t hvd__group_box_exchange(hvd_group_t *g, size_t len, size_t max, const uint8_t **blocks,
                                     size_t *lens, const char *what) {
    const int *idx;
    hvd_arena_t *a = box_arena(g, len, max, &idx);
    if (!a)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: no arena for %zu bytes", what, len);
    return arena_exchange(g, a, idx, len, max, blocks, lens, what);
}

hvd_status_t hvd__group_box_keep(hvd_group_t *g, const uint8_t **blocks, const size_t *lens) {
    if (!g->vpos && !(g->vpos = malloc(((size_t)g->size + 1) * sizeof *g->vpos)))
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    size_t used = 0;
    for (int r = 0; r < g->size; r++) {
        g->vpos[r] = used;
        hvd_status_t st = vbuf_append(g, &used, blocks[r], lens[r]);
        if (st != HVD_OK)
            return st;
    }
    for (int r = 0; r < g->size; r++)
        blocks[r] = g->vbuf + g->vpos[r];
    return HVD_OK;
}

/* hvd__group_allgather_var in the arena: one step; the blocks are then copied out into the
 * group's buffer (boxes and slots are rewritten two steps on, and the caller keeps the
 * blocks until the group's next call). */
static hvd_status_t arena_allgather_var(hvd_group_t *g, hvd_arena_t *a, const int *idx,
                                        const void *mine, size_t len, size_t max,
                                        const uint8_t **blocks, size_t *lens, const char *what) {
    if (len)
        memcpy(block_out(a, len), mine, len);
    hvd_status_t st = arena_exchange(g, a, idx, len, max, blocks, lens, what);
    return st != HVD_OK ? st : hvd__group_box_keep(g, blocks, lens);
}

/* hvd__group_allgather_var on a job of several hosts with their arenas (g->hier_grid): the
 * blocks cross hosts first, between the ranks of equal local rank (Bruck over the hosts),
 * then each rank's collection, its bundle, goes to the rest of its host through the arena.
 * On 3 hosts x 2 ranks that is two rounds between hosts instead of three, and a third of
 * the messages, where most of a small call's time went. A bundle is the hosts' blocks in
 * host order, each as u32 length and bytes; its length travels in the rank's mailbox and
 * the bundle in its slot, in as many steps as the longest bundle of the host needs (every
 * rank reads the lengths after the first step, so all take the same number). */

/* Append the H blocks of local rank j's bundle (total bytes at in) to g->vbuf. */
static hvd_status_t unbundle(hvd_group_t *g, int j, const uint8_t *in, size_t total, size_t max,
                             size_t *used, size_t *lens, const char *what) {
    int L = g->hier_local->size, H = g->hier_cross->size;
    size_t pos = 0;
    for (int h = 0; h < H; h++) {
        int r = g->hier_grid[h * L + j];
        uint32_t bl = total - pos >= 4 ? hvd__le32_get(in + pos) : UINT32_MAX;
        if (bl > max || total - pos - 4 < bl)
            return hvd__error_set(HVD_ERR_PROTOCOL,
                                  "%s: malformed control bundle of %zu bytes from rank %d", what,
                                  total, g->hier_local->members[j]);
        g->vpos[r] = *used;
        lens[r] = bl;
        hvd_status_t st = vbuf_append(g, used, in + pos + 4, bl);
        if (st != HVD_OK)
            return st;
        pos += 4 + (size_t)bl;
    }
    return HVD_OK;
}

static hvd_status_t hier_allgather_var(hvd_group_t *g, const void *mine, size_t len, size_t max,
                                       const uint8_t **blocks, size_t *lens, const char *what) {
    hvd_group_t *lg = g->hier_local, *cg = g->hier_cross;
    int L = lg->size, H = cg->size;
    const int *idx;
    hvd_arena_t *a = hvd__group_arena(lg, &idx);
    if (!a) /* every host's arena was agreed on at init (core/init.c, plan_hierarchical) */
        return hvd__error_set(HVD_ERR_PROTOCOL, "%s: the host's arena is gone", what);
    if (!cg->vblocks && !(cg->vblocks = malloc((size_t)H * sizeof *cg->vblocks)))
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    /* The cross group's block lengths go to cg->lens, and the local ranks' bundle lengths to
     * lg->lens: both free between those groups' own collectives. (A failure between hosts
     * names the peer and its host already.) */
    hvd_status_t st = hvd__group_allgather_var(cg, mine, len, max, cg->vblocks, cg->lens, what);
    if (st != HVD_OK)
        return st;
    size_t S = a->data_bytes, n = 0, bound = (size_t)H * (max + 4);
    for (int h = 0; h < H; h++)
        n += 4 + cg->lens[h];
    /* the bundle, built in the first step's slot when it fits (the usual case), else on the
     * heap */
    uint8_t *slot = hvd__arena_data(a, a->self), *bundle = n <= S ? slot : malloc(n);
    if (!bundle)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "%s: out of memory", what);
    for (size_t h = 0, at = 0; h < (size_t)H; h++) {
        hvd__le32_put(bundle + at, (uint32_t)cg->lens[h]);
        if (cg->lens[h])
            memcpy(bundle + at + 4, cg->vblocks[h], cg->lens[h]);
        at += 4 + cg->lens[h];
    }
    if (bundle != slot)
        memcpy(slot, bundle, S);
    hvd__le32_put(hvd__arena_box_out(a), (uint32_t)n);
    st = hvd__arena_step(a);
    size_t most = 0, used = 0, sum = 0, *tot = lg->lens;
    uint8_t *staged = NULL;
    if (st != HVD_OK)
        goto arena_failed;
    /* Past the first step a local failure must end the host's other ranks' wait too, so every
     * error below aborts through the arena. */
    for (int j = 0; j < L; j++) {
        tot[j] = hvd__le32_get(hvd__arena_box_in(a, idx[j]));
        if (tot[j] > bound) {
            st = hvd__error_set(HVD_ERR_PROTOCOL, "%s: rank %d announced a %zu-byte control bundle",
                                what, lg->members[j], tot[j]);
            goto arena_failed;
        }
        most = tot[j] > most ? tot[j] : most;
        sum += tot[j];
    }
    if (most <= S) {
        for (int j = 0; j < L && st == HVD_OK; j++)
            st = unbundle(g, j, hvd__arena_data(a, idx[j]), tot[j], max, &used, lens, what);
    } else {
        /* A bundle longer than a slot: every rank's bundle is staged, a slot at a time. */
        if (!(staged = malloc(sum))) {
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "%s: out of memory", what);
            goto arena_failed;
        }
        for (size_t at = 0;; at += S) {
            for (size_t j = 0, off = 0; j < (size_t)L; off += tot[j], j++)
                if (tot[j] > at)
                    memcpy(staged + off + at, hvd__arena_data(a, idx[j]),
                           tot[j] - at < S ? tot[j] - at : S);
            if (at + S >= most)
                break;
            hvd__arena_flip(a);
            if (n > at + S)
                memcpy(hvd__arena_data(a, a->self), bundle + at + S,
                       n - at - S < S ? n - at - S : S);
            if ((st = hvd__arena_step(a)) != HVD_OK)
                goto arena_failed;
        }
        for (size_t j = 0, off = 0; j < (size_t)L && st == HVD_OK; off += tot[j], j++)
            st = unbundle(g, (int)j, staged + off, tot[j], max, &used, lens, what);
    }
    if (st != HVD_OK)
        goto arena_failed;
    hvd__arena_flip(a);
    free(staged);
    if (bundle != slot)
        free(bundle);
    for (int r = 0; r < g->size; r++)
        blocks[r] = g->vbuf + g->vpos[r];
    return HVD_OK;

arena_failed:
    free(staged);
    if (bundle != slot)
        free(bundle);
    return hvd__group_arena_failed(lg, st, what);
}

/* Before the first Bruck allgather: one byte to and from every peer of its rounds (me -/+ d
 * for d = 1, 2, 4, ...), in one exchange, so that their connections' handshakes overlap
 * instead of one round's starting when the previous round's data arrives. Where ranks far
 * outnumber cores every handshake waits for its processes' turns on a core, and 2,048 ranks
 * would wait for eleven such rounds one after the other. */
static hvd_status_t link_peers(hvd_group_t *g, const char *what) {
    int p = g->size, me = g->rank, n = 0;
    for (int d = 1; d < p; d <<= 1)
        n += 2;
    hvd_xfer_t *x = hvd__group_xfers(g, (size_t)n);
    if (!x)
        return hvd__error_pass(HVD_ERR_NO_MEMORY);
    uint8_t out = 1, *in = calloc((size_t)n / 2, 1);
    if (!in)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "%s: out of memory", what);
    memset(x, 0, (size_t)n * sizeof *x);
    int k = 0;
    for (int d = 1; d < p; d <<= 1, k += 2) {
        x[k].peer = hvd__group_peer(g, me - d);
        x[k].is_send = 1;
        x[k].iov[0] = (struct iovec){.iov_base = &out, .iov_len = 1};
        x[k].iovcnt = 1;
        x[k + 1].peer = hvd__group_peer(g, me + d);
        x[k + 1].iov[0] = (struct iovec){.iov_base = &in[k / 2], .iov_len = 1};
        x[k + 1].iovcnt = 1;
    }
    hvd_status_t st = hvd__group_exchange(g, x, (size_t)n, what);
    free(in);
    if (st == HVD_OK)
        g->vpeers_linked = 1;
    return st;
}

hvd_status_t hvd__group_allgather_var(hvd_group_t *g, const void *mine, size_t len, size_t max,
                                      const uint8_t **blocks, size_t *lens, const char *what) {
    int p = g->size, me = g->rank;
    if (len > max || len > UINT32_MAX)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: control message of %zu bytes over %zu",
                              what, len, max);
    if (!g->vpos && !(g->vpos = malloc(((size_t)p + 1) * sizeof *g->vpos)))
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    const int *idx;
    hvd_arena_t *a = hvd__group_arena(g, &idx);
    if (a && max <= a->data_bytes)
        return arena_allgather_var(g, a, idx, mine, len, max, blocks, lens, what);
    if (g->hier_grid && g->hier_cross->size * (max + 4) <= UINT32_MAX)
        return hier_allgather_var(g, mine, len, max, blocks, lens, what);
    if (p > 2 && !g->vpeers_linked) {
        hvd_status_t st = link_peers(g, what);
        if (st != HVD_OK)
            return st;
    }
    size_t used = 0;
    uint8_t pre[4];
    hvd__le32_put(pre, (uint32_t)len);
    hvd_status_t st = vbuf_append(g, &used, pre, 4);
    if (st == HVD_OK && len)
        st = vbuf_append(g, &used, mine, len);
    if (st != HVD_OK)
        return st;
    g->vpos[0] = 0;
    int have = 1;
    hvd_xfer_t *x = hvd__group_xfers(g, 2);
    if (!x)
        return hvd__error_pass(HVD_ERR_NO_MEMORY);
    for (int d = 1; d < p; d <<= 1) {
        int cnt = d < p - d ? d : p - d;
        memset(x, 0, 2 * sizeof *x);
        x[0].peer = hvd__group_peer(g, me - d);
        x[0].is_send = 1;
        x[0].iov[0].iov_base = g->vbuf;
        x[0].iov[0].iov_len = cnt < have ? g->vpos[cnt] : used;
        x[0].iovcnt = 1;
        x[1].peer = hvd__group_peer(g, me + d);
        x[1].alloc_max = (size_t)cnt * (max + 4);
        st = hvd__group_exchange(g, x, 2, what);
        uint8_t *run = x[1].iov[0].iov_base;
        size_t run_len = x[1].iov[0].iov_len;
        if (st == HVD_OK)
            st = index_run(g, run, run_len, have, cnt, used, max, hvd__group_peer(g, me + d), what);
        if (st == HVD_OK)
            st = vbuf_append(g, &used, run, run_len);
        free(run);
        if (st != HVD_OK)
            return st;
        have += cnt;
    }
    for (int k = 0; k < p; k++) {
        int r = (me + k) % p;
        lens[r] = hvd__le32_get(g->vbuf + g->vpos[k]);
        blocks[r] = g->vbuf + g->vpos[k] + 4;
    }
    return HVD_OK;
}
