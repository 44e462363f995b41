/* Public entry points of the blocking collectives: enter the context, pick the group, run
 * the collective, and log a failure once where it is decided. */
#include <hvd/hvd.h>

#include "collectives/coll.h"
#include "common/error.h"
#include "common/log.h"
#include "core/context.h"

static hvd_status_t done(hvd_status_t st) {
    if (st != HVD_OK && st != HVD_ERR_INVALID_ARG)
        HVD_LOG_E("%s", hvd_last_error());
    hvd__context_leave();
    return st;
}

static hvd_group_t *group_of(hvd_context_t *c, hvd_comm_t comm) {
    switch (comm) {
    case HVD_COMM_GLOBAL:
        return &c->global;
    case HVD_COMM_LOCAL:
        return &c->local;
    case HVD_COMM_CROSS:
        return &c->cross;
    }
    return NULL;
}

hvd_status_t hvd_allreduce_ex(const void *sendbuf, void *recvbuf, size_t count, hvd_dtype_t dtype,
                              hvd_reduce_op_t op, double prescale, double postscale,
                              hvd_comm_t comm) {
    hvd_context_t *c;
    hvd_status_t st = hvd__context_enter(&c);
    if (st != HVD_OK)
        return st;
    hvd_group_t *g = group_of(c, comm);
    if (!g) {
        hvd__context_leave();
        return hvd__error_set(HVD_ERR_INVALID_ARG, "allreduce: unknown communicator %d", (int)comm);
    }
    return done(hvd__coll_allreduce(g, sendbuf, recvbuf, count, dtype, op, prescale, postscale));
}

hvd_status_t hvd_allreduce(const void *sendbuf, void *recvbuf, size_t count, hvd_dtype_t dtype,
                           hvd_reduce_op_t op) {
    return hvd_allreduce_ex(sendbuf, recvbuf, count, dtype, op, 1.0, 1.0, HVD_COMM_GLOBAL);
}

hvd_status_t hvd_broadcast(void *buf, size_t count, hvd_dtype_t dtype, int root) {
    hvd_context_t *c;
    hvd_status_t st = hvd__context_enter(&c);
    if (st != HVD_OK)
        return st;
    return done(hvd__coll_broadcast(&c->global, buf, count, dtype, root));
}

hvd_status_t hvd_allgather(const void *sendbuf, size_t count, void *recvbuf, hvd_dtype_t dtype) {
    hvd_context_t *c;
    hvd_status_t st = hvd__context_enter(&c);
    if (st != HVD_OK)
        return st;
    return done(hvd__coll_allgather(&c->global, sendbuf, recvbuf, NULL, count, dtype));
}

hvd_status_t hvd_allgatherv(const void *sendbuf, void *recvbuf, const size_t *recvcounts,
                            hvd_dtype_t dtype) {
    hvd_context_t *c;
    hvd_status_t st = hvd__context_enter(&c);
    if (st != HVD_OK)
        return st;
    if (!recvcounts) {
        /* Without counts this rank cannot even describe its call to the others; it fails
         * alone (the others time out naming it). */
        hvd__context_leave();
        return hvd__error_set(HVD_ERR_INVALID_ARG, "allgatherv: recvcounts is NULL");
    }
    return done(hvd__coll_allgather(&c->global, sendbuf, recvbuf, recvcounts, 0, dtype));
}

hvd_status_t hvd_alltoall(const void *sendbuf, void *recvbuf, size_t count, hvd_dtype_t dtype) {
    hvd_context_t *c;
    hvd_status_t st = hvd__context_enter(&c);
    if (st != HVD_OK)
        return st;
    return done(hvd__coll_alltoall(&c->global, sendbuf, recvbuf, count, dtype));
}

hvd_status_t hvd_reducescatter(const void *sendbuf, void *recvbuf, size_t count, hvd_dtype_t dtype,
                               hvd_reduce_op_t op) {
    hvd_context_t *c;
    hvd_status_t st = hvd__context_enter(&c);
    if (st != HVD_OK)
        return st;
    return done(hvd__coll_reducescatter(&c->global, sendbuf, recvbuf, count, dtype, op));
}

hvd_status_t hvd_barrier(void) {
    hvd_context_t *c;
    hvd_status_t st = hvd__context_enter(&c);
    if (st != HVD_OK)
        return st;
    return done(hvd__coll_barrier(&c->global));
}
