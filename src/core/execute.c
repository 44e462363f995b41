/* Running what a cycle agreed (engine_impl.h): the posted blocking call and the responses,
 * with rank 0's timeline activities. */
#include "core/engine_impl.h"

#include "collectives/coll.h"
#include "collectives/allreduce_work.h"
#include "collectives/dtype.h"
#include "collectives/reduce.h"
#include "common/error.h"
#include "common/log.h"
#include "core/process_set.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Errors that concern one operation's arguments: the data plane is intact and in step
 * (the collectives detect them in their agreement, before moving data). */
static int op_error(hvd_status_t st) {
    return st == HVD_ERR_INVALID_ARG || st == HVD_ERR_MISMATCH;
}

static hvd_status_t run_coll(hvd_group_t *g, const hvd_blocking_op_t *o) {
    switch (o->coll) {
    case HVD_COLL_ALLREDUCE:
        return hvd__coll_allreduce(g, o->send, o->recv, o->count, o->dtype, o->op, o->prescale,
                                   o->postscale);
    case HVD_COLL_BROADCAST:
        return hvd__coll_broadcast(g, o->recv, o->count, o->dtype, o->root);
    case HVD_COLL_ALLGATHER:
        return hvd__coll_allgather(g, o->send, o->recv, NULL, o->count, o->dtype);
    case HVD_COLL_ALLGATHERV:
        return hvd__coll_allgather(g, o->send, o->recv, o->counts, 0, o->dtype);
    case HVD_COLL_ALLTOALL:
        return hvd__coll_alltoall(g, o->send, o->recv, o->count, o->dtype);
    case HVD_COLL_REDUCESCATTER:
        return hvd__coll_reducescatter(g, o->send, o->recv, o->count, o->dtype, o->op);
    case HVD_COLL_BARRIER:
        return hvd__coll_barrier(g);
    }
    return hvd__error_set(HVD_ERR_INVALID_ARG, "unknown collective %d", (int)o->coll);
}

/* The payload path: every member's input came in its cycle message. */
static hvd_status_t run_inline(hvd_engine_t *e, hvd_posted_t *p) {
    const hvd_blocking_op_t *o = &p->op;
    hvd_group_t *g = p->g;
    const uint8_t **blocks = e->blocks; /* reused: the messages were decoded already */
    for (int m = 0; m < g->size; m++)
        blocks[m] = e->msgs[g->members[m]].payload;
    switch (o->coll) {
    case HVD_COLL_ALLREDUCE: {
        /* A payload may sit at any offset of its cycle message: the kernels get aligned
         * copies of those not aligned for the working dtype (at most 64 KiB a rank; those
         * read in place from the host arena are aligned). */
        size_t len = p->payload_len, stride = (len + 63) & ~(size_t)63,
               align = hvd__dtype_size(hvd__allreduce_work_dtype(o->dtype));
        uint8_t *acc = hvd__group_scratch(g, 0, len), *copies = NULL;
        if (!acc)
            return hvd__error_pass(HVD_ERR_NO_MEMORY);
        for (int m = 0; m < g->size; m++) {
            if (e->msgs[g->members[m]].payload_len != len)
                return hvd__error_set(HVD_ERR_PROTOCOL, "allreduce: rank %d sent %u bytes",
                                      g->members[m], e->msgs[g->members[m]].payload_len);
            if (!len || (uintptr_t)blocks[m] % align == 0)
                continue;
            if (!copies && !(copies = hvd__group_scratch(g, 1, stride * (size_t)g->size)))
                return hvd__error_pass(HVD_ERR_NO_MEMORY);
            memcpy(copies + (size_t)m * stride, blocks[m], len);
            blocks[m] = copies + (size_t)m * stride;
        }
        hvd__allreduce_combine(blocks, g->size, acc, o->recv, o->count, o->dtype, o->op,
                               o->postscale);
        return HVD_OK;
    }
    case HVD_COLL_BROADCAST: {
        size_t bytes = o->count * hvd__dtype_size(o->dtype);
        const hvd_cycle_msg_t *rm = &e->msgs[g->members[o->root]];
        if (rm->payload_len != bytes)
            return hvd__error_set(HVD_ERR_PROTOCOL, "broadcast: root sent %u bytes, not %zu",
                                  rm->payload_len, bytes);
        if (g->rank != o->root && bytes)
            memcpy(o->recv, rm->payload, bytes);
        return HVD_OK;
    }
    case HVD_COLL_ALLGATHER: {
        size_t bytes = o->count * hvd__dtype_size(o->dtype);
        for (int m = 0; m < g->size; m++) {
            if (e->msgs[g->members[m]].payload_len != bytes)
                return hvd__error_set(HVD_ERR_PROTOCOL, "allgather: rank %d sent %u bytes",
                                      g->members[m], e->msgs[g->members[m]].payload_len);
            if (bytes)
                memcpy((uint8_t *)o->recv + (size_t)m * bytes, blocks[m], bytes);
        }
        return HVD_OK;
    }
    default: /* barrier: the cycle message was it */
        return HVD_OK;
    }
}

hvd_status_t hvd__engine_run_blocking(hvd_engine_t *e, hvd_posted_t *p, int agreed) {
    if (!p->payload_path && agreed && p->op.coll == HVD_COLL_ALLREDUCE)
        p->g->agreed = 1; /* the cycle compared the full signatures already */
    hvd_status_t st = p->payload_path ? run_inline(e, p) : run_coll(p->g, &p->op);
    p->g->agreed = 0;
    if (st != HVD_OK && !op_error(st))
        return st; /* fails the engine, and this call with it */
    if (st == HVD_ERR_MISMATCH)
        HVD_LOG_E("%s", hvd_last_error()); /* decided here, the same on every rank */
    hvd__engine_finish_blocking(e, p, st, st == HVD_OK ? "" : hvd_last_error());
    return HVD_OK;
}

/* ---- responses ---- */

static void tl_all(hvd_engine_t *e, const hvd_response_t *r, const char *activity) {
    for (uint32_t i = 0; i < r->nnames; i++)
        hvd__timeline_begin(e->tl, r->names[i], activity);
}

static void tl_end_all(hvd_engine_t *e, const hvd_response_t *r, int with_args) {
    for (uint32_t i = 0; i < r->nnames; i++) {
        char args[128] = "";
        if (with_args)
            snprintf(args, sizeof args, "{\"dtype\": \"%s\", \"shape\": \"[%lld]\"}",
                     hvd__dtype_name((hvd_dtype_t)r->dtype),
                     (long long)(i < r->nsizes ? r->sizes[i] : 0));
        hvd__timeline_end(e->tl, r->names[i], with_args ? args : NULL);
    }
}

/* The in-flight entries of r's names (NULL where this rank, having joined, has none). */
static hvd_status_t find_entries(hvd_engine_t *e, const hvd_response_t *r, hvd_entry_t **out) {
    for (uint32_t i = 0; i < r->nnames; i++) {
        out[i] = hvd__tq_find(e->tq, r->names[i]);
        if (out[i] && !out[i]->taken)
            out[i] = NULL; /* enqueued after this cycle's intake: not part of this op */
        int reduce = r->type == HVD_REQ_ALLREDUCE;
        if (!out[i] && !(reduce && e->joined))
            return hvd__error_set(HVD_ERR_PROTOCOL,
                                  "the coordinator scheduled '%s', which rank %d has not enqueued",
                                  r->names[i], e->ctx->global.rank);
        if (out[i] && reduce && (i >= r->nsizes || (int64_t)out[i]->count != r->sizes[i]))
            return hvd__error_set(HVD_ERR_PROTOCOL, "'%s': agreed size differs from this rank's",
                                  r->names[i]);
    }
    return HVD_OK;
}

/* Tensors of at least this many bytes are reduced in their own buffers even inside a fused
 * response: they gain little from sharing a collective, and copying them in and out of the
 * fusion buffer costs more than their collective's latency. Measured at np=2 with 100
 * tensors per step: 4 KiB-1 MiB, 6.0 ms at 128 KiB against 9.2 ms fusing everything (one
 * buffer of the same bytes: 6.2 ms); 128-512 KiB, 8.6 ms against 13.7 ms fusing up to
 * 1 MiB. */
#define DIRECT_BYTES ((size_t)128 << 10)

/* Tensor i of r reduced in place in its own buffers (zeros for a joined rank). */
static hvd_status_t direct(hvd_engine_t *e, hvd_group_t *g, const hvd_response_t *r, uint32_t i,
                           hvd_entry_t *x) {
    hvd_dtype_t dt = (hvd_dtype_t)r->dtype;
    size_t n = (size_t)r->sizes[i], bytes = n * hvd__dtype_size(dt);
    const void *send;
    void *recv;
    if (x) {
        send = x->send;
        recv = x->recv;
    } else {
        hvd_status_t st = hvd__engine_reserve(&e->zeros, &e->zeros_cap, bytes + 1);
        if (st != HVD_OK)
            return st;
        memset(e->zeros, 0, bytes);
        send = recv = e->zeros;
    }
    if (e->tl)
        hvd__timeline_begin(e->tl, r->names[i], "TCP_ALLREDUCE");
    g->agreed = 1; /* negotiated: every member runs this very response */
    hvd_status_t st = hvd__coll_allreduce(g, send, recv, n, dt, (hvd_reduce_op_t)r->op, r->prescale,
                                          r->postscale);
    g->agreed = 0;
    if (e->tl)
        hvd__timeline_end(e->tl, r->names[i], NULL);
    return st;
}

/* Timeline activity on the fused tensors (those under DIRECT_BYTES). */
static void tl_fused(hvd_engine_t *e, const hvd_response_t *r, size_t es, const char *activity) {
    for (uint32_t i = 0; i < r->nnames; i++) {
        if ((size_t)r->sizes[i] * es >= DIRECT_BYTES)
            continue;
        if (activity)
            hvd__timeline_begin(e->tl, r->names[i], activity);
        else
            hvd__timeline_end(e->tl, r->names[i], NULL);
    }
}

static hvd_status_t allreduce(hvd_engine_t *e, hvd_group_t *g, const hvd_response_t *r,
                              hvd_entry_t **x) {
    hvd_dtype_t dt = (hvd_dtype_t)r->dtype;
    size_t es = hvd__dtype_size(dt), total = 0;
    uint32_t nfused = 0;
    for (uint32_t i = 0; i < r->nnames; i++) {
        if ((size_t)r->sizes[i] * es < DIRECT_BYTES) {
            total += (size_t)r->sizes[i];
            nfused++;
        }
    }
    hvd_status_t st = HVD_OK;
    for (uint32_t i = 0; i < r->nnames && st == HVD_OK; i++)
        if (nfused < 2 || (size_t)r->sizes[i] * es >= DIRECT_BYTES)
            st = direct(e, g, r, i, x[i]);
    if (nfused < 2 || st != HVD_OK)
        return st;
    st = hvd__engine_reserve(&e->fusion, &e->fusion_cap, total * es + 1);
    if (st != HVD_OK)
        return st;
    if (e->tl)
        tl_fused(e, r, es, "MEMCPY_IN_FUSION_BUFFER");
    size_t off = 0;
    for (uint32_t i = 0; i < r->nnames; i++) {
        size_t b = (size_t)r->sizes[i] * es;
        if (b >= DIRECT_BYTES)
            continue;
        if (x[i] && b)
            memcpy(e->fusion + off, x[i]->send, b);
        else if (b)
            memset(e->fusion + off, 0, b);
        off += b;
    }
    if (e->tl) {
        tl_fused(e, r, es, NULL);
        tl_fused(e, r, es, "TCP_ALLREDUCE");
    }
    g->agreed = 1;
    if (r->op == HVD_ADASUM) {
        /* each fused tensor is a vector of its own (adasum.h) */
        size_t *parts = malloc(nfused * sizeof *parts), k = 0;
        for (uint32_t i = 0; parts && i < r->nnames; i++)
            if ((size_t)r->sizes[i] * es < DIRECT_BYTES)
                parts[k++] = (size_t)r->sizes[i];
        st = parts ? hvd__coll_adasum(g, e->fusion, e->fusion, total, dt, r->prescale, r->postscale,
                                      parts, nfused)
                   : hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for a fused adasum");
        free(parts);
    } else {
        st = hvd__coll_allreduce(g, e->fusion, e->fusion, total, dt, (hvd_reduce_op_t)r->op,
                                 r->prescale, r->postscale);
    }
    g->agreed = 0;
    if (e->tl) {
        tl_fused(e, r, es, NULL);
        tl_fused(e, r, es, "MEMCPY_OUT_FUSION_BUFFER");
    }
    off = 0;
    for (uint32_t i = 0; st == HVD_OK && i < r->nnames; i++) {
        size_t b = (size_t)r->sizes[i] * es;
        if (b >= DIRECT_BYTES)
            continue;
        if (x[i] && b)
            memcpy(x[i]->recv, e->fusion + off, b);
        off += b;
    }
    if (e->tl)
        tl_fused(e, r, es, NULL);
    return st;
}

/* Elements per row of the first dimension of a shaped entry. */
static size_t row_elements(const hvd_entry_t *x) {
    size_t row = 1;
    for (int d = 1; d < x->ndims; d++)
        row *= (size_t)x->dims[d];
    return row;
}

/* The output of an entry the library sizes: from the caller's allocator. */
static hvd_status_t allocate(hvd_entry_t *x, size_t total, const size_t *counts, int p) {
    x->recv = x->alloc(x->alloc_user, total, counts, p);
    if (!x->recv && total)
        return hvd__error_set(HVD_ERR_NO_MEMORY,
                              "'%s': the output of %zu elements could not be "
                              "allocated",
                              x->name, total);
    return HVD_OK;
}

/* Allgather of a shaped entry: every rank's first dimension came in the response. */
static hvd_status_t allgather_shaped(hvd_engine_t *e, hvd_group_t *g, const hvd_response_t *r,
                                     hvd_entry_t *x) {
    size_t row = row_elements(x), total = 0;
    if (r->nsizes != (uint32_t)g->size)
        return hvd__error_set(HVD_ERR_PROTOCOL, "'%s': the response has %u sizes for %d ranks",
                              x->name, r->nsizes, g->size);
    size_t *counts = malloc((size_t)g->size * sizeof *counts);
    if (!counts)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "'%s': out of memory", x->name);
    for (int m = 0; m < g->size; m++) {
        counts[m] = (size_t)r->sizes[m] * row;
        total += counts[m];
    }
    hvd_status_t st = x->alloc ? allocate(x, total, counts, g->size) : HVD_OK;
    if (st == HVD_OK)
        st = hvd__coll_allgather(g, x->send, x->recv, counts, 0, x->dtype);
    free(counts);
    (void)e;
    return st;
}

/* Alltoall with splits, or an output the library sizes: the ranks first tell each other
 * how much each sends where (an alltoall of the counts), then move the data. */
static hvd_status_t alltoall_split(hvd_group_t *g, hvd_entry_t *x) {
    int p = g->size;
    uint64_t *out = malloc(2 * (size_t)p * sizeof *out);
    size_t *sc = malloc(2 * (size_t)p * sizeof *sc);
    if (!out || !sc) {
        free(out);
        free(sc);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "'%s': out of memory", x->name);
    }
    uint64_t *in = out + p;
    size_t *rc = sc + p;
    for (int m = 0; m < p; m++) {
        sc[m] = x->splits ? x->splits[m] : x->count / (size_t)p;
        out[m] = sc[m];
    }
    hvd_status_t st = hvd__coll_alltoall(g, out, in, 1, HVD_INT64);
    size_t total = 0;
    for (int m = 0; st == HVD_OK && m < p; m++) {
        rc[m] = (size_t)in[m];
        total += rc[m];
    }
    if (st == HVD_OK && x->alloc)
        st = allocate(x, total, rc, p);
    else if (st == HVD_OK && total != x->count)
        st = hvd__error_set(HVD_ERR_INVALID_ARG,
                            "'%s': alltoall receives %zu elements, but the output holds %zu",
                            x->name, total, x->count);
    if (st == HVD_OK)
        st = hvd__coll_alltoallv(g, x->send, sc, x->recv, rc, x->dtype);
    free(out);
    free(sc);
    return st;
}

/* Reducescatter of a shaped entry, split by rows as Horovod does (rank r gets dims[0] / p
 * rows, one more below dims[0] % p), with its scale factors. */
static hvd_status_t reducescatter_shaped(hvd_engine_t *e, hvd_group_t *g, hvd_entry_t *x) {
    int p = g->size;
    size_t row = row_elements(x), rows = (size_t)x->dims[0];
    size_t *counts = malloc((size_t)p * sizeof *counts);
    if (!counts)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "'%s': out of memory", x->name);
    for (int m = 0; m < p; m++)
        counts[m] = (rows / (size_t)p + ((size_t)m < rows % (size_t)p)) * row;
    const void *send = x->send;
    hvd_status_t st = HVD_OK;
    if (x->prescale != 1.0) {
        size_t bytes = x->count * hvd__dtype_size(x->dtype);
        st = hvd__engine_reserve(&e->zeros, &e->zeros_cap, bytes + 1);
        if (st == HVD_OK && bytes)
            memcpy(e->zeros, x->send, bytes);
        if (st == HVD_OK)
            hvd__reduce_scale(e->zeros, x->count, x->dtype, x->prescale);
        send = e->zeros;
    }
    if (st == HVD_OK)
        st = hvd__coll_reducescatterv(g, send, x->recv, counts, x->dtype, x->op);
    if (st == HVD_OK)
        hvd__reduce_scale(x->recv, counts[g->rank], x->dtype, x->postscale);
    free(counts);
    return st;
}

/* One tensor of a non-allreduce response. */
static hvd_status_t run_one(hvd_engine_t *e, hvd_group_t *g, const hvd_response_t *r,
                            hvd_entry_t *x) {
    switch (r->type) {
    case HVD_REQ_ALLGATHER:
        if (x->ndims)
            return allgather_shaped(e, g, r, x);
        return hvd__coll_allgather(g, x->send, x->recv, NULL, x->count, x->dtype);
    case HVD_REQ_BROADCAST:
        return hvd__coll_broadcast(g, x->recv, x->count, x->dtype, x->root);
    case HVD_REQ_ALLTOALL:
        if (x->splits || x->alloc)
            return alltoall_split(g, x);
        return hvd__coll_alltoall(g, x->send, x->recv, x->count, x->dtype);
    case HVD_REQ_REDUCESCATTER:
        if (x->ndims)
            return reducescatter_shaped(e, g, x);
        return hvd__coll_reducescatter(g, x->send, x->recv, x->count, x->dtype, x->op);
    default:
        return hvd__error_set(HVD_ERR_UNSUPPORTED, "'%s': operation type %d is not supported",
                              x->name, r->type);
    }
}

static const char *tcp_activity(int type) {
    switch (type) {
    case HVD_REQ_ALLGATHER:
        return "TCP_ALLGATHER";
    case HVD_REQ_BROADCAST:
        return "TCP_BCAST";
    case HVD_REQ_ALLTOALL:
        return "TCP_ALLTOALL";
    case HVD_REQ_REDUCESCATTER:
        return "TCP_REDUCESCATTER";
    default:
        return "TCP_ALLREDUCE";
    }
}

static hvd_status_t execute_one(hvd_engine_t *e, const hvd_response_t *r, hvd_entry_t **x) {
    if (r->type == HVD_RESP_ERROR) {
        for (uint32_t i = 0; i < r->nnames; i++) {
            hvd_entry_t *y = hvd__tq_find(e->tq, r->names[i]);
            if (y && y->taken)
                hvd__tq_complete(e->tq, y,
                                 r->status == HVD_NEG_FAIL_TIMEOUT ? HVD_ERR_TIMEOUT
                                                                   : HVD_ERR_MISMATCH,
                                 r->error);
        }
        return HVD_OK;
    }
    if (r->type == HVD_REQ_JOIN) {
        pthread_mutex_lock(&e->state_lock);
        e->last_joined = r->last_joined_rank;
        pthread_mutex_unlock(&e->state_lock);
        e->joined = 0;
        if (e->join_entry)
            hvd__tq_complete(e->tq, e->join_entry, HVD_OK, NULL);
        e->join_entry = NULL;
        return HVD_OK;
    }
    /* a process set's response concerns its members only */
    hvd_group_t *g = hvd__pset_group(e->ctx, r->pset, NULL, NULL);
    if (!g) {
        hvd__error_clear();
        return HVD_OK;
    }
    hvd_status_t st = find_entries(e, r, x);
    if (st != HVD_OK)
        return st;
    if (e->tl)
        tl_all(e, r, hvd__neg_type_name(r->type));
    if (r->type == HVD_REQ_ALLREDUCE) {
        st = allreduce(e, g, r, x);
    } else {
        /* fused reducescatters (and anything else) run tensor by tensor */
        for (uint32_t i = 0; i < r->nnames; i++) {
            if (e->tl)
                hvd__timeline_begin(e->tl, r->names[i], tcp_activity(r->type));
            hvd_status_t s = run_one(e, g, r, x[i]);
            if (e->tl)
                hvd__timeline_end(e->tl, r->names[i], NULL);
            if (s != HVD_OK && !op_error(s))
                return s;
            if (s != HVD_OK) {
                hvd__tq_complete(e->tq, x[i], s, hvd_last_error());
                x[i] = NULL;
            }
        }
    }
    if (e->tl)
        tl_end_all(e, r, 1);
    if (st != HVD_OK && !op_error(st))
        return st;
    const char *msg = st == HVD_OK ? NULL : hvd_last_error();
    for (uint32_t i = 0; i < r->nnames; i++)
        if (x[i])
            hvd__tq_complete(e->tq, x[i], st, msg);
    return HVD_OK;
}

/* ---- point-to-point ---- */

/* This rank's entry of p2p response r (NULL when this rank is not one of its pair), checked
 * against what the coordinator agreed. */
static hvd_status_t p2p_entry(hvd_engine_t *e, const hvd_response_t *r, hvd_entry_t **x_p) {
    int me = e->ctx->global.rank;
    *x_p = NULL;
    if (r->nnames != 1 || r->nsizes != 3)
        return hvd__error_set(HVD_ERR_PROTOCOL,
                              "a point-to-point response has %u names and %u sizes", r->nnames,
                              r->nsizes);
    int src = (int)r->sizes[1], dst = (int)r->sizes[2];
    if (me != src && me != dst)
        return HVD_OK;
    hvd_entry_t *x = hvd__tq_find(e->tq, r->names[0]);
    int sending = me == src;
    if (!x || !x->taken || x->type != HVD_REQ_P2P || x->p2p_send != sending ||
        x->root != (sending ? dst : src))
        return hvd__error_set(HVD_ERR_PROTOCOL,
                              "the coordinator scheduled '%s' (rank %d to rank %d), which rank %d "
                              "has not posted",
                              r->names[0], src, dst, me);
    if ((int64_t)(x->count * hvd__dtype_size(x->dtype)) != r->sizes[0])
        return hvd__error_set(HVD_ERR_PROTOCOL, "'%s': agreed size differs from this rank's",
                              r->names[0]);
    *x_p = x;
    return HVD_OK;
}

/* A run of n consecutive p2p responses: every rank sees the same run, and each rank's part of
 * it (the messages it sends or receives) goes in one exchange, so the run's messages move at
 * once (a ring exchange takes one step, not n) and two ranks' transfers between each other
 * keep the run's order on both sides. Ranks outside a pair pass it. A failure of the data
 * plane fails the engine (the peers are told); the entries complete when their bytes have
 * moved. */
static hvd_status_t execute_p2p(hvd_engine_t *e, const hvd_response_t *rs, uint32_t n) {
    hvd_group_t *g = &e->ctx->global;
    hvd_entry_t **mine = malloc(n * sizeof *mine);
    hvd_xfer_t *xf = mine ? hvd__group_xfers(g, n) : NULL;
    if (!xf) {
        free(mine);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory in the engine");
    }
    hvd_status_t st = HVD_OK;
    size_t nmine = 0, nx = 0;
    for (uint32_t k = 0; k < n && st == HVD_OK; k++) {
        hvd_entry_t *x;
        st = p2p_entry(e, &rs[k], &x);
        if (st != HVD_OK || !x)
            continue;
        mine[nmine++] = x;
        size_t bytes = (size_t)rs[k].sizes[0];
        if (e->tl)
            hvd__timeline_begin(e->tl, x->name, x->p2p_send ? "P2P_SEND" : "P2P_RECV");
        if (!bytes)
            continue; /* both sides agreed on nothing to move */
        hvd_xfer_t *t = &xf[nx++];
        t->peer = x->root;
        t->is_send = x->p2p_send;
        t->iov[0].iov_base = x->p2p_send ? (void *)x->send : x->recv;
        t->iov[0].iov_len = bytes;
        t->iovcnt = 1;
    }
    if (st == HVD_OK && nx) {
        char what[1200];
        snprintf(what, sizeof what, "point-to-point '%s'%s", mine[0]->name,
                 nmine > 1 ? " and the messages posted with it" : "");
        st = hvd__group_exchange(g, xf, nx, what);
    }
    for (size_t k = 0; st == HVD_OK && k < nx; k++)
        if (!xf[k].is_send && xf[k].frame_len != xf[k].iov[0].iov_len)
            st = hvd__error_set(
                HVD_ERR_PROTOCOL, "point-to-point: rank %d sent %llu bytes where %zu were agreed",
                xf[k].peer, (unsigned long long)xf[k].frame_len, xf[k].iov[0].iov_len);
    if (e->tl)
        for (size_t k = 0; k < nmine; k++)
            hvd__timeline_end(e->tl, mine[k]->name, NULL);
    for (size_t k = 0; st == HVD_OK && k < nmine; k++)
        hvd__tq_complete(e->tq, mine[k], HVD_OK, NULL);
    free(mine);
    return st;
}

hvd_status_t hvd__engine_execute(hvd_engine_t *e, const hvd_response_list_t *l) {
    hvd_entry_t *small[64], **x = small;
    uint32_t most = 0;
    for (uint32_t i = 0; i < l->count; i++)
        most = l->items[i].nnames > most ? l->items[i].nnames : most;
    if (most > 64 && !(x = malloc(most * sizeof *x)))
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory in the engine");
    hvd_status_t st = HVD_OK;
    for (uint32_t i = 0; i < l->count && st == HVD_OK;) {
        uint32_t j = i;
        while (j < l->count && l->items[j].type == HVD_REQ_P2P)
            j++;
        if (j > i) {
            st = execute_p2p(e, &l->items[i], j - i);
            i = j;
        } else {
            st = execute_one(e, &l->items[i++], x);
        }
    }
    if (x != small)
        free(x);
    return st;
}
