/* Public entry points of the named asynchronous operations, join and the timeline: check
 * the arguments here, where the caller can still be told which one is wrong, then enqueue
 * to the engine. */
#include <hvd/hvd.h>

#include "collectives/coll.h"
#include "collectives/dtype.h"
#include "collectives/reduce.h"
#include "common/error.h"
#include "common/log.h"
#include "core/context.h"
#include "core/engine.h"
#include "core/process_set.h"
#include "wire/negotiate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static hvd_status_t check_name(const char *name, const void *handle_p, const char *op) {
    if (!handle_p)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: handle_p is NULL", op);
    if (!name || !*name)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: the name is NULL or empty", op);
    if (strlen(name) > HVD_NEG_NAME_MAX)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: name '%.40s...' is over %d bytes", op, name,
                              HVD_NEG_NAME_MAX);
    return HVD_OK;
}

static hvd_status_t check_dtype(hvd_dtype_t dtype, const char *what) {
    if (hvd__dtype_size(dtype) == 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: unknown dtype %d", what, (int)dtype);
    return HVD_OK;
}

/* Enqueue n checked entries. */
static hvd_status_t push(const hvd_entry_t *entries, size_t n, hvd_handle_t *handles) {
    hvd_context_t *c;
    hvd_status_t st = hvd__context_enter(&c);
    if (st != HVD_OK)
        return st;
    st = hvd__engine_push(c->engine, entries, n, handles);
    hvd__context_leave();
    return st;
}

static int job_size(void) {
    int s = hvd_size();
    return s > 0 ? s : 1;
}

/* "<opname> '<name>'" into what (size bytes, truncated), the operation as error messages
 * name it. Every enqueue writes it before knowing whether an error will need it, so it is
 * two copies rather than a snprintf, which cost a few hundred ns of each call. */
static void describe_op(char *what, size_t size, const char *opname, const char *name) {
    size_t n = 0;
    if (!size)
        return;
    const char *parts[] = {opname, " '", name, "'"};
    for (size_t k = 0; k < 4 && n + 1 < size; k++) {
        size_t len = strlen(parts[k]);
        if (len > size - 1 - n)
            len = size - 1 - n;
        memcpy(what + n, parts[k], len);
        n += len;
    }
    what[n] = '\0';
}

hvd_status_t hvd_allreduce_async_ex(const char *name, const void *sendbuf, void *recvbuf,
                                    size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op,
                                    double prescale, double postscale, hvd_handle_t *handle_p) {
    hvd_status_t st = check_name(name, handle_p, "allreduce");
    if (st != HVD_OK)
        return st;
    char what[1100];
    describe_op(what, sizeof what, "allreduce", name);
    size_t bytes;
    st =
        hvd__allreduce_check(sendbuf, recvbuf, count, dtype, op, prescale, postscale, what, &bytes);
    if (st != HVD_OK)
        return st;
    hvd_entry_t x = {.name = (char *)name,
                     .type = HVD_REQ_ALLREDUCE,
                     .dtype = dtype,
                     .op = op,
                     .send = sendbuf,
                     .recv = recvbuf,
                     .count = count,
                     .prescale = prescale,
                     .postscale = postscale};
    return push(&x, 1, handle_p);
}

hvd_status_t hvd_allreduce_async(const char *name, const void *sendbuf, void *recvbuf, size_t count,
                                 hvd_dtype_t dtype, hvd_reduce_op_t op, hvd_handle_t *handle_p) {
    return hvd_allreduce_async_ex(name, sendbuf, recvbuf, count, dtype, op, 1.0, 1.0, handle_p);
}

hvd_status_t hvd_grouped_allreduce_async(const char *name, size_t n, const void *const *sendbufs,
                                         void *const *recvbufs, const size_t *counts,
                                         hvd_dtype_t dtype, hvd_reduce_op_t op,
                                         hvd_handle_t *handles) {
    hvd_status_t st = check_name(name, handles, "grouped allreduce");
    if (st != HVD_OK)
        return st;
    if (n == 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "grouped allreduce '%s': no tensors", name);
    if (!sendbufs || !recvbufs || !counts)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "grouped allreduce '%s': sendbufs, recvbufs or counts is NULL", name);
    if (strlen(name) + 22 > HVD_NEG_NAME_MAX)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "grouped allreduce: name '%.40s...' too long",
                              name);
    hvd_entry_t *xs = calloc(n, sizeof *xs);
    char *names = malloc(n * (HVD_NEG_NAME_MAX + 1));
    if (!xs || !names) {
        free(xs);
        free(names);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "grouped allreduce '%s': out of memory", name);
    }
    for (size_t i = 0; i < n && st == HVD_OK; i++) {
        char *nm = names + i * (HVD_NEG_NAME_MAX + 1);
        snprintf(nm, HVD_NEG_NAME_MAX + 1, "%s.%zu", name, i);
        size_t bytes;
        char what[1100];
        snprintf(what, sizeof what, "grouped allreduce '%s' tensor %zu", name, i);
        st = hvd__allreduce_check(sendbufs[i], recvbufs[i], counts[i], dtype, op, 1.0, 1.0, what,
                                  &bytes);
        xs[i] = (hvd_entry_t){.name = nm,
                              .type = HVD_REQ_ALLREDUCE,
                              .dtype = dtype,
                              .op = op,
                              .send = sendbufs[i],
                              .recv = recvbufs[i],
                              .count = counts[i],
                              .prescale = 1.0,
                              .postscale = 1.0};
    }
    if (st == HVD_OK)
        st = push(xs, n, handles);
    free(xs);
    free(names);
    return st;
}

hvd_status_t hvd_broadcast_async(const char *name, void *buf, size_t count, hvd_dtype_t dtype,
                                 int root, hvd_handle_t *handle_p) {
    hvd_status_t st = check_name(name, handle_p, "broadcast");
    if (st != HVD_OK)
        return st;
    char what[1100];
    describe_op(what, sizeof what, "broadcast", name);
    size_t bytes;
    if ((st = check_dtype(dtype, what)) != HVD_OK ||
        (st = hvd__coll_bytes(count, hvd__dtype_size(dtype), what, &bytes)) != HVD_OK ||
        (st = hvd__coll_check_buf(buf, count, what, "buf")) != HVD_OK)
        return st;
    if (root < 0 || root >= job_size())
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: root %d is not a rank of %d", what, root,
                              job_size());
    hvd_entry_t x = {.name = (char *)name,
                     .type = HVD_REQ_BROADCAST,
                     .dtype = dtype,
                     .root = root,
                     .send = buf,
                     .recv = buf,
                     .count = count,
                     .prescale = 1.0,
                     .postscale = 1.0};
    return push(&x, 1, handle_p);
}

/* The checks of the operations whose receive buffer holds one block per rank. */
static hvd_status_t blockwise(const char *name, int type, const void *sendbuf, void *recvbuf,
                              size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op,
                              hvd_handle_t *handle_p, const char *opname) {
    hvd_status_t st = check_name(name, handle_p, opname);
    if (st != HVD_OK)
        return st;
    char what[1100];
    describe_op(what, sizeof what, opname, name);
    if ((st = check_dtype(dtype, what)) != HVD_OK)
        return st;
    size_t block, total;
    int p = job_size();
    if (type == HVD_REQ_ALLGATHER) {
        if ((st = hvd__coll_bytes(count, hvd__dtype_size(dtype), what, &block)) != HVD_OK ||
            (st = hvd__coll_bytes(block, (size_t)p, what, &total)) != HVD_OK ||
            (st = hvd__coll_check_buf(sendbuf, count, what, "sendbuf")) != HVD_OK ||
            (st = hvd__coll_check_buf(recvbuf, count, what, "recvbuf")) != HVD_OK)
            return st;
    } else if ((st = hvd__coll_check_blocks(sendbuf, recvbuf, count, hvd__dtype_size(dtype), p,
                                            what, &block, &total)) != HVD_OK) {
        return st;
    }
    if (type == HVD_REQ_REDUCESCATTER) {
        if (op != HVD_SUM && op != HVD_AVERAGE)
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "%s: Reducescatter currently only supports AVERAGE and SUM.",
                                  what);
        if ((st = hvd__reduce_check(dtype, op)) != HVD_OK)
            return st;
    }
    hvd_entry_t x = {.name = (char *)name,
                     .type = type,
                     .dtype = dtype,
                     .op = type == HVD_REQ_REDUCESCATTER ? op : HVD_SUM,
                     .send = sendbuf,
                     .recv = recvbuf,
                     .count = count,
                     .prescale = 1.0,
                     .postscale = 1.0};
    return push(&x, 1, handle_p);
}

hvd_status_t hvd_allgather_async(const char *name, const void *sendbuf, size_t count, void *recvbuf,
                                 hvd_dtype_t dtype, hvd_handle_t *handle_p) {
    return blockwise(name, HVD_REQ_ALLGATHER, sendbuf, recvbuf, count, dtype, HVD_SUM, handle_p,
                     "allgather");
}

hvd_status_t hvd_alltoall_async(const char *name, const void *sendbuf, void *recvbuf, size_t count,
                                hvd_dtype_t dtype, hvd_handle_t *handle_p) {
    return blockwise(name, HVD_REQ_ALLTOALL, sendbuf, recvbuf, count, dtype, HVD_SUM, handle_p,
                     "alltoall");
}

hvd_status_t hvd_reducescatter_async(const char *name, const void *sendbuf, void *recvbuf,
                                     size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op,
                                     hvd_handle_t *handle_p) {
    return blockwise(name, HVD_REQ_REDUCESCATTER, sendbuf, recvbuf, count, dtype, op, handle_p,
                     "reducescatter");
}

int hvd_poll(hvd_handle_t handle) {
    hvd_context_t *c;
    if (hvd__context_enter(&c) != HVD_OK)
        return -1;
    int r = hvd__engine_poll(c->engine, handle);
    hvd__context_leave();
    return r;
}

static hvd_status_t wait_handle(hvd_handle_t handle, int resting) {
    hvd_context_t *c;
    hvd_status_t st = hvd__context_enter(&c);
    if (st != HVD_OK)
        return st;
    st = hvd__engine_wait(c->engine, handle, resting);
    hvd__context_leave();
    return st;
}

hvd_status_t hvd_wait(hvd_handle_t handle) {
    return wait_handle(handle, 0);
}

hvd_status_t hvd_wait_resting(hvd_handle_t handle) {
    return wait_handle(handle, 1);
}

hvd_status_t hvd_on_done(hvd_handle_t handle, hvd_done_fn fn, void *user) {
    hvd_context_t *c;
    hvd_status_t st = hvd__context_enter(&c);
    if (st != HVD_OK)
        return st;
    st = hvd__engine_on_done(c->engine, handle, fn, user);
    hvd__context_leave();
    return st;
}

hvd_status_t hvd_join(int *last_joined_rank_p) {
    hvd_context_t *c;
    hvd_status_t st = hvd__context_enter(&c);
    if (st != HVD_OK)
        return st;
    st = hvd__engine_join(c->engine, last_joined_rank_p);
    hvd__context_leave();
    return st;
}

hvd_status_t hvd_start_timeline(const char *path, int mark_cycles) {
    if (!path || !*path)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "hvd_start_timeline: path is NULL or empty");
    hvd_context_t *c;
    hvd_status_t st = hvd__context_enter(&c);
    if (st != HVD_OK)
        return st;
    st = hvd__engine_timeline(c->engine, path, mark_cycles);
    hvd__context_leave();
    return st;
}

hvd_status_t hvd_report_stragglers(int steps) {
    if (steps < 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "hvd_report_stragglers: steps is %d", steps);
    hvd_context_t *c;
    hvd_status_t st = hvd__context_enter(&c);
    if (st != HVD_OK)
        return st;
    st = hvd__engine_stragglers(c->engine, steps);
    hvd__context_leave();
    return st;
}

hvd_status_t hvd_stop_timeline(void) {
    hvd_context_t *c;
    hvd_status_t st = hvd__context_enter(&c);
    if (st != HVD_OK)
        return st;
    st = hvd__engine_timeline(c->engine, NULL, 0);
    hvd__context_leave();
    return st;
}

/* ---- hvd_enqueue: the shaped operations ---- */

void hvd_tensor_op_init(hvd_tensor_op_t *op) {
    if (!op)
        return;
    memset(op, 0, sizeof *op);
    op->dtype = HVD_FLOAT32;
    op->op = HVD_AVERAGE;
    op->prescale = 1.0;
    op->postscale = 1.0;
}

static const char *op_type_name(hvd_op_type_t type) {
    switch (type) {
    case HVD_OP_ALLREDUCE:
        return "allreduce";
    case HVD_OP_ALLGATHER:
        return "allgather";
    case HVD_OP_BROADCAST:
        return "broadcast";
    case HVD_OP_ALLTOALL:
        return "alltoall";
    case HVD_OP_REDUCESCATTER:
        return "reducescatter";
    }
    return NULL;
}

/* The shape of o into x (dims past HVD_ENTRY_MAX_DIMS folded into the last kept one) and its
 * element count, without overflow. */
static hvd_status_t entry_shape(const hvd_tensor_op_t *o, hvd_entry_t *x, const char *what) {
    if (o->ndim < 0 || (o->ndim > 0 && !o->shape))
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: ndim %d with %s shape", what, o->ndim,
                              o->shape ? "a" : "a NULL");
    size_t count = 1;
    x->ndims = 0;
    for (int d = 0; d < o->ndim; d++) {
        int64_t v = o->shape[d];
        if (v < 0)
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: dimension %d is %lld", what, d,
                                  (long long)v);
        if (v && count > ((size_t)1 << 48) / (size_t)v)
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: the tensor is too large", what);
        count *= (size_t)v;
        if (d < HVD_ENTRY_MAX_DIMS)
            x->dims[x->ndims++] = v;
        else
            x->dims[HVD_ENTRY_MAX_DIMS - 1] *= v;
    }
    x->count = count;
    return HVD_OK;
}

/* Rows per rank of an alltoall as element counts (x->splits, x->nsplits). */
static hvd_status_t alltoall_splits(const hvd_tensor_op_t *o, hvd_entry_t *x, int p,
                                    const char *what) {
    if (x->ndims == 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "%s: Process-set rank zero tried to ALLTOALL a rank-zero tensor.",
                              what);
    size_t rows = (size_t)x->dims[0], row = rows ? x->count / rows : 0;
    if (!o->splits) {
        if (rows % (size_t)p)
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "%s: splits not provided, but first dimension of tensor is not "
                                  "an even multiple of the number of workers.",
                                  what);
        return HVD_OK;
    }
    size_t *s = malloc((size_t)p * sizeof *s), sum = 0;
    if (!s)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "%s: out of memory", what);
    for (int r = 0; r < p; r++) {
        if (o->splits[r] < 0) {
            free(s);
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: splits[%d] is %lld", what, r,
                                  (long long)o->splits[r]);
        }
        sum += (size_t)o->splits[r];
        if (sum > rows) {
            free(s);
            return hvd__error_set(
                HVD_ERR_INVALID_ARG,
                "%s: Sum of splits entries is greater than the first dimension of tensor.", what);
        }
        s[r] = (size_t)o->splits[r] * row;
    }
    x->splits = s;
    x->nsplits = p;
    return HVD_OK;
}

/* The set rank of global rank root in set id, or -1. */
static int set_rank_of(hvd_context_t *c, int id, int size, int root) {
    for (int r = 0; r < size; r++)
        if (hvd__pset_member(c, id, r) == root)
            return r;
    return -1;
}

/* Check one operation and describe it in x (x->splits malloc'd for alltoall). */
static hvd_status_t tensor_entry(hvd_context_t *c, hvd_op_type_t type, const hvd_tensor_op_t *o,
                                 hvd_entry_t *x, char *what, size_t what_size) {
    const char *opname = op_type_name(type);
    hvd_status_t st = check_name(o->name, x /* the handle comes later */, opname);
    if (st != HVD_OK)
        return st;
    describe_op(what, what_size, opname, o->name);
    int p = 0, me = -1;
    if (!hvd__pset_group(c, o->process_set, &me, &p))
        return hvd__error_wrap(HVD_ERR_INVALID_ARG, "%s", what);
    *x = (hvd_entry_t){.name = (char *)o->name,
                       .type = (int)type,
                       .dtype = o->dtype,
                       .op = HVD_SUM,
                       .send = o->send,
                       .recv = o->recv,
                       .prescale = 1.0,
                       .postscale = 1.0,
                       .pset = o->process_set,
                       .pset_size = o->process_set ? p : 0};
    if ((st = check_dtype(o->dtype, what)) != HVD_OK || (st = entry_shape(o, x, what)) != HVD_OK)
        return st;
    size_t bytes;
    switch (type) {
    case HVD_OP_ALLREDUCE:
        x->op = o->op;
        x->prescale = o->prescale;
        x->postscale = o->postscale;
        return hvd__allreduce_check(o->send, o->recv, x->count, o->dtype, o->op, o->prescale,
                                    o->postscale, what, &bytes);
    case HVD_OP_BROADCAST:
        /* the root is a global rank; the set's group counts its own ranks */
        x->root = o->process_set ? set_rank_of(c, o->process_set, p, o->root) : o->root;
        if (x->root < 0 || x->root >= p)
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: root %d is not a rank of %s", what,
                                  o->root, o->process_set ? "the process set" : "the job");
        x->send = o->recv;
        return hvd__coll_check_buf(o->recv, x->count, what, "recv");
    case HVD_OP_ALLGATHER:
        if (x->ndims == 0)
            return hvd__error_set(
                HVD_ERR_INVALID_ARG,
                "%s: Process-set rank zero tried to ALLGATHER a rank-zero tensor.", what);
        x->alloc = o->alloc;
        x->alloc_user = o->alloc_user;
        if (!o->alloc && (st = hvd__coll_check_buf(o->recv, x->count, what, "recv")) != HVD_OK)
            return st;
        return hvd__coll_check_buf(o->send, x->count, what, "send");
    case HVD_OP_ALLTOALL:
        x->alloc = o->alloc;
        x->alloc_user = o->alloc_user;
        if ((st = hvd__coll_check_buf(o->send, x->count, what, "send")) != HVD_OK ||
            (!o->alloc && (st = hvd__coll_check_buf(o->recv, x->count, what, "recv")) != HVD_OK))
            return st;
        if (!o->alloc && o->splits)
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "%s: an alltoall with splits needs an allocator for its output",
                                  what);
        return alltoall_splits(o, x, p, what);
    case HVD_OP_REDUCESCATTER: {
        if (o->op != HVD_SUM && o->op != HVD_AVERAGE)
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "%s: Reducescatter currently only supports AVERAGE and SUM.",
                                  what);
        if (x->ndims == 0)
            return hvd__error_set(
                HVD_ERR_INVALID_ARG,
                "%s: Process-set rank zero tried to REDUCESCATTER a rank-zero tensor.", what);
        if ((st = hvd__reduce_check(o->dtype, o->op)) != HVD_OK)
            return st;
        if ((o->prescale != 1.0 || o->postscale != 1.0) && o->dtype == HVD_BOOL)
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: scale factors need a numeric dtype",
                                  what);
        x->op = o->op;
        x->prescale = o->prescale;
        x->postscale = o->postscale;
        size_t rows = (size_t)x->dims[0];
        size_t mine =
            (rows / (size_t)p + ((size_t)me < rows % (size_t)p)) * (rows ? x->count / rows : 0);
        if ((st = hvd__coll_check_buf(o->send, x->count, what, "send")) != HVD_OK)
            return st;
        return hvd__coll_check_buf(o->recv, mine, what, "recv");
    }
    }
    return hvd__error_set(HVD_ERR_INVALID_ARG, "hvd_enqueue: unknown operation type %d", (int)type);
}

void hvd_enqueue_opts_init(hvd_enqueue_opts_t *opts) {
    if (opts)
        memset(opts, 0, sizeof *opts);
}

hvd_status_t hvd_enqueue(hvd_op_type_t type, const hvd_tensor_op_t *ops, size_t n,
                         hvd_handle_t *handles) {
    return hvd_enqueue_ex(type, ops, n, NULL, handles);
}

hvd_status_t hvd_enqueue_ex(hvd_op_type_t type, const hvd_tensor_op_t *ops, size_t n,
                            const hvd_enqueue_opts_t *opts, hvd_handle_t *handles) {
    if (!ops || !handles || n == 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "hvd_enqueue: %s",
                              n == 0 ? "no operations" : "ops or handles is NULL");
    if (opts && opts->timeout_ms < 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "hvd_enqueue_ex: timeout_ms %d is negative",
                              opts->timeout_ms);
    for (size_t k = 0; opts && opts->keys && k < n; k++) {
        size_t len = opts->keys[k] ? strlen(opts->keys[k]) : 0;
        if (len > HVD_NEG_NAME_MAX)
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "hvd_enqueue_ex: key %zu is %zu bytes (at most %d)", k, len,
                                  HVD_NEG_NAME_MAX);
    }
    hvd_context_t *c;
    hvd_status_t st = hvd__context_enter(&c);
    if (st != HVD_OK)
        return st;
    hvd_entry_t *xs = calloc(n, sizeof *xs);
    if (!xs) {
        hvd__context_leave();
        return hvd__error_set(HVD_ERR_NO_MEMORY, "hvd_enqueue: out of memory");
    }
    /* Names are per process set, as in Horovod, where each set negotiates on its own: a
     * set's names carry its id inside the core ("<name>@ps<id>"), so the same name may be in
     * flight in several sets. */
    char *qualified = NULL;
    for (size_t k = 0; k < n && !qualified; k++)
        if (ops[k].process_set && !(qualified = malloc(n * (HVD_NEG_NAME_MAX + 1))))
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "hvd_enqueue: out of memory");
    size_t i;
    for (i = 0; i < n && st == HVD_OK; i++) {
        char what[1100];
        st = tensor_entry(c, type, &ops[i], &xs[i], what, sizeof what);
        if (st == HVD_OK && ops[i].process_set) {
            char *q = qualified + i * (HVD_NEG_NAME_MAX + 1);
            int len = snprintf(q, HVD_NEG_NAME_MAX + 1, "%s@ps%d", ops[i].name, ops[i].process_set);
            if (len > HVD_NEG_NAME_MAX)
                st = hvd__error_set(HVD_ERR_INVALID_ARG, "%s: the name is too long", what);
            xs[i].name = q;
        }
        if (st == HVD_OK && opts) {
            xs[i].timeout_ms = (uint32_t)opts->timeout_ms;
            /* (the queue copies the key at push) */
            xs[i].key =
                opts->keys && opts->keys[i] && *opts->keys[i] ? (char *)opts->keys[i] : NULL;
        }
    }
    if (st == HVD_OK)
        st = hvd__engine_push(c->engine, xs, n, handles); /* the queue copies the splits */
    hvd__context_leave();
    for (size_t k = 0; k < i; k++)
        free(xs[k].splits);
    free(xs);
    free(qualified);
    return st;
}
