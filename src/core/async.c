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

hvd_status_t hvd_allreduce_async_ex(const char *name, const void *sendbuf, void *recvbuf,
                                    size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op,
                                    double prescale, double postscale, hvd_handle_t *handle_p) {
    hvd_status_t st = check_name(name, handle_p, "allreduce");
    if (st != HVD_OK)
        return st;
    char what[1100];
    snprintf(what, sizeof what, "allreduce '%s'", name);
    size_t bytes;
    if (op == HVD_ADASUM)
        return hvd__error_set(HVD_ERR_UNSUPPORTED, "%s: Adasum is not available over TCP", what);
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
    if (op == HVD_ADASUM)
        return hvd__error_set(HVD_ERR_UNSUPPORTED,
                              "grouped allreduce '%s': Adasum is not available over TCP", name);
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
    snprintf(what, sizeof what, "broadcast '%s'", name);
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
    snprintf(what, sizeof what, "%s '%s'", opname, name);
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

hvd_status_t hvd_wait(hvd_handle_t handle) {
    hvd_context_t *c;
    hvd_status_t st = hvd__context_enter(&c);
    if (st != HVD_OK)
        return st;
    st = hvd__engine_wait(c->engine, handle);
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

hvd_status_t hvd_stop_timeline(void) {
    hvd_context_t *c;
    hvd_status_t st = hvd__context_enter(&c);
    if (st != HVD_OK)
        return st;
    st = hvd__engine_timeline(c->engine, NULL, 0);
    hvd__context_leave();
    return st;
}
