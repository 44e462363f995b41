/* Public entry points of the blocking collectives: each is posted to the engine, which runs
 * it in a cycle once every rank of its communicator has posted it. Failures are logged once
 * where they are decided (the engine), not again on every later call. */
#include <hvd/hvd.h>

#include "common/error.h"
#include "core/context.h"
#include "core/engine.h"

static hvd_status_t run(const hvd_blocking_op_t *op) {
    hvd_context_t *c;
    hvd_status_t st = hvd__context_enter(&c);
    if (st != HVD_OK)
        return st;
    st = hvd__engine_blocking(c->engine, op);
    hvd__context_leave();
    return st;
}

hvd_status_t hvd_allreduce_ex(const void *sendbuf, void *recvbuf, size_t count, hvd_dtype_t dtype,
                              hvd_reduce_op_t op, double prescale, double postscale,
                              hvd_comm_t comm) {
    hvd_blocking_op_t o = {.coll = HVD_COLL_ALLREDUCE,
                           .comm = comm,
                           .send = sendbuf,
                           .recv = recvbuf,
                           .count = count,
                           .dtype = dtype,
                           .op = op,
                           .prescale = prescale,
                           .postscale = postscale};
    return run(&o);
}

hvd_status_t hvd_allreduce(const void *sendbuf, void *recvbuf, size_t count, hvd_dtype_t dtype,
                           hvd_reduce_op_t op) {
    return hvd_allreduce_ex(sendbuf, recvbuf, count, dtype, op, 1.0, 1.0, HVD_COMM_GLOBAL);
}

hvd_status_t hvd_broadcast(void *buf, size_t count, hvd_dtype_t dtype, int root) {
    hvd_blocking_op_t o = {
        .coll = HVD_COLL_BROADCAST, .recv = buf, .count = count, .dtype = dtype, .root = root};
    return run(&o);
}

hvd_status_t hvd_allgather(const void *sendbuf, size_t count, void *recvbuf, hvd_dtype_t dtype) {
    hvd_blocking_op_t o = {.coll = HVD_COLL_ALLGATHER,
                           .send = sendbuf,
                           .recv = recvbuf,
                           .count = count,
                           .dtype = dtype};
    return run(&o);
}

hvd_status_t hvd_allgatherv(const void *sendbuf, void *recvbuf, const size_t *recvcounts,
                            hvd_dtype_t dtype) {
    if (!recvcounts) {
        /* Without counts this rank cannot even describe its call to the others; it fails
         * alone (the others time out naming it). */
        return hvd__error_set(HVD_ERR_INVALID_ARG, "allgatherv: recvcounts is NULL");
    }
    hvd_blocking_op_t o = {.coll = HVD_COLL_ALLGATHERV,
                           .send = sendbuf,
                           .recv = recvbuf,
                           .counts = recvcounts,
                           .dtype = dtype};
    return run(&o);
}

hvd_status_t hvd_alltoall(const void *sendbuf, void *recvbuf, size_t count, hvd_dtype_t dtype) {
    hvd_blocking_op_t o = {.coll = HVD_COLL_ALLTOALL,
                           .send = sendbuf,
                           .recv = recvbuf,
                           .count = count,
                           .dtype = dtype};
    return run(&o);
}

hvd_status_t hvd_reducescatter(const void *sendbuf, void *recvbuf, size_t count, hvd_dtype_t dtype,
                               hvd_reduce_op_t op) {
    hvd_blocking_op_t o = {.coll = HVD_COLL_REDUCESCATTER,
                           .send = sendbuf,
                           .recv = recvbuf,
                           .count = count,
                           .dtype = dtype,
                           .op = op};
    return run(&o);
}

hvd_status_t hvd_barrier(void) {
    hvd_blocking_op_t o = {.coll = HVD_COLL_BARRIER};
    return run(&o);
}
