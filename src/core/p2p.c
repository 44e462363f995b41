/* Point-to-point messages (hvd.h: hvd_send_async ...): the public entry points, and the naming
 * that lets the engine negotiate them like every other named operation.
 *
 * Both sides of a message name it alike, without talking to each other: "p2p:<src>-><dst>:
 * tag=<tag>:#<n>", n counting the posts of that side on that (peer, tag) from 0. The n-th send
 * from a to b with tag t and the n-th receive at b from a with tag t therefore carry one name,
 * which is the MPI and torch.distributed matching rule. The coordinator pairs the two requests
 * (controller/coordinator.c), and every rank runs the agreed message in the agreed order
 * (execute.c), so a message waits for nothing but its partner's post, however many others are
 * outstanding, and failures, deadlines and the stall inspector apply as to any named
 * operation. */
#include <hvd/hvd.h>

#include "collectives/coll.h"
#include "collectives/dtype.h"
#include "common/error.h"
#include "core/context.h"
#include "core/engine_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Direction in bit 62, peer in bits 31..61, tag in bits 0..30: each fits (both are
 * non-negative ints). */
static uint64_t seq_key(int sending, int peer, int tag) {
    return ((uint64_t)(sending != 0) << 62) | ((uint64_t)(unsigned)peer << 31) |
           (uint64_t)(unsigned)tag;
}

static size_t seq_slot(const hvd_p2p_seq_t *v, size_t cap, uint64_t key) {
    uint64_t h = key * 0x9e3779b97f4a7c15ull;
    size_t i = (size_t)(h >> 17) & (cap - 1);
    while (v[i].key != HVD_P2P_NO_KEY && v[i].key != key)
        i = (i + 1) & (cap - 1);
    return i;
}

/* The counter of key, created at 0 (p2p_lock held). Grows the table at half full, so that
 * a probe ends soon. NULL when out of memory. */
static hvd_p2p_seq_t *seq_find(hvd_engine_t *e, uint64_t key) {
    if (2 * (e->p2p_used + 1) > e->p2p_cap) {
        size_t cap = e->p2p_cap ? 2 * e->p2p_cap : 64;
        hvd_p2p_seq_t *v = malloc(cap * sizeof *v);
        if (!v)
            return NULL;
        for (size_t i = 0; i < cap; i++)
            v[i].key = HVD_P2P_NO_KEY;
        for (size_t i = 0; i < e->p2p_cap; i++)
            if (e->p2p_seqs[i].key != HVD_P2P_NO_KEY)
                v[seq_slot(v, cap, e->p2p_seqs[i].key)] = e->p2p_seqs[i];
        free(e->p2p_seqs);
        e->p2p_seqs = v;
        e->p2p_cap = cap;
    }
    hvd_p2p_seq_t *s = &e->p2p_seqs[seq_slot(e->p2p_seqs, e->p2p_cap, key)];
    if (s->key == HVD_P2P_NO_KEY) {
        s->key = key;
        s->next = 0;
        e->p2p_used++;
    }
    return s;
}

hvd_status_t hvd__engine_push_p2p(hvd_engine_t *e, hvd_entry_t *x, int tag,
                                  hvd_handle_t *handle_p) {
    int me = e->ctx->global.rank;
    int src = x->p2p_send ? me : x->root, dst = x->p2p_send ? x->root : me;
    char name[96];
    /* Numbering and enqueueing under one lock: two threads posting on the same (peer, tag)
     * get consecutive numbers in the order their posts enter the queue, and a post that
     * fails to enqueue takes no number (the partner's n-th post would wait for it forever). */
    pthread_mutex_lock(&e->p2p_lock);
    hvd_p2p_seq_t *s = seq_find(e, seq_key(x->p2p_send, x->root, tag));
    hvd_status_t st = HVD_OK;
    if (!s) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "point-to-point: out of memory");
    } else {
        snprintf(name, sizeof name, "p2p:%d->%d:tag=%d:#%u", src, dst, tag, s->next);
        x->name = name;
        st = hvd__engine_push(e, x, 1, handle_p);
        if (st == HVD_OK)
            s->next++;
    }
    pthread_mutex_unlock(&e->p2p_lock);
    return st;
}

/* Check one side's arguments (what: "hvd_send_async"), then enqueue it (with a deadline of
 * timeout_ms when > 0). */
static hvd_status_t post(const char *what, int sending, const void *buf, size_t count,
                         hvd_dtype_t dtype, int peer, int tag, int timeout_ms,
                         hvd_handle_t *handle_p) {
    const char *role = sending ? "dst" : "src";
    if (!handle_p)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: handle_p is NULL", what);
    if (timeout_ms < 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: timeout_ms %d is negative", what,
                              timeout_ms);
    if (hvd__dtype_size(dtype) == 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: unknown dtype %d", what, (int)dtype);
    if (tag < 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: tag %d is negative", what, tag);
    size_t bytes;
    hvd_status_t st = hvd__coll_bytes(count, hvd__dtype_size(dtype), what, &bytes);
    if (st == HVD_OK)
        st = hvd__coll_check_buf(buf, count, what, "buf");
    if (st != HVD_OK)
        return st;
    hvd_context_t *c;
    if ((st = hvd__context_enter(&c)) != HVD_OK)
        return st;
    int me = c->global.rank, size = c->global.size;
    if (peer < 0 || peer >= size)
        st = hvd__error_set(HVD_ERR_INVALID_ARG, "%s: %s %d is not a rank of the job of %d", what,
                            role, peer, size);
    else if (peer == me)
        st = hvd__error_set(HVD_ERR_INVALID_ARG,
                            "%s: %s %d is this rank itself (a message to oneself is a copy)", what,
                            role, peer);
    if (st == HVD_OK) {
        hvd_entry_t x = {.type = HVD_REQ_P2P,
                         .dtype = dtype,
                         .op = HVD_SUM,
                         .root = peer,
                         .p2p_send = sending,
                         .send = sending ? buf : NULL,
                         .recv = sending ? NULL : (void *)buf,
                         .count = count,
                         .prescale = 1.0,
                         .postscale = 1.0,
                         .timeout_ms = (uint32_t)timeout_ms};
        st = hvd__engine_push_p2p(c->engine, &x, tag, handle_p);
    }
    hvd__context_leave();
    return st;
}

hvd_status_t hvd_send_async(const void *buf, size_t count, hvd_dtype_t dtype, int dst, int tag,
                            hvd_handle_t *handle_p) {
    return post("hvd_send_async", 1, buf, count, dtype, dst, tag, 0, handle_p);
}

hvd_status_t hvd_recv_async(void *buf, size_t count, hvd_dtype_t dtype, int src, int tag,
                            hvd_handle_t *handle_p) {
    return post("hvd_recv_async", 0, buf, count, dtype, src, tag, 0, handle_p);
}

hvd_status_t hvd_send_async_ex(const void *buf, size_t count, hvd_dtype_t dtype, int dst, int tag,
                               int timeout_ms, hvd_handle_t *handle_p) {
    return post("hvd_send_async_ex", 1, buf, count, dtype, dst, tag, timeout_ms, handle_p);
}

hvd_status_t hvd_recv_async_ex(void *buf, size_t count, hvd_dtype_t dtype, int src, int tag,
                               int timeout_ms, hvd_handle_t *handle_p) {
    return post("hvd_recv_async_ex", 0, buf, count, dtype, src, tag, timeout_ms, handle_p);
}

hvd_status_t hvd_send(const void *buf, size_t count, hvd_dtype_t dtype, int dst, int tag) {
    hvd_handle_t h;
    hvd_status_t st = post("hvd_send", 1, buf, count, dtype, dst, tag, 0, &h);
    return st == HVD_OK ? hvd_wait(h) : st;
}

hvd_status_t hvd_recv(void *buf, size_t count, hvd_dtype_t dtype, int src, int tag) {
    hvd_handle_t h;
    hvd_status_t st = post("hvd_recv", 0, buf, count, dtype, src, tag, 0, &h);
    return st == HVD_OK ? hvd_wait(h) : st;
}
