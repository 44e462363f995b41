/* An allreduce's working values; see allreduce_work.h. */
#include "collectives/allreduce_work.h"

#include "collectives/dtype.h"
#include "collectives/reduce.h"

#include <string.h>

int hvd__allreduce_is_half(hvd_dtype_t d) {
    return d == HVD_FLOAT16 || d == HVD_BFLOAT16;
}

hvd_dtype_t hvd__allreduce_work_dtype(hvd_dtype_t d) {
    return hvd__allreduce_is_half(d) ? HVD_FLOAT32 : d;
}

void hvd__allreduce_to_work(void *work, const void *src, size_t n, hvd_dtype_t dtype,
                            double prescale) {
    if (hvd__allreduce_is_half(dtype)) {
        hvd__half_to_f32(work, src, n, dtype);
    } else if (work != src && n) {
        memcpy(work, src, n * hvd__dtype_size(dtype));
    }
    hvd__reduce_scale(work, n, hvd__allreduce_work_dtype(dtype), prescale);
}

void hvd__allreduce_finish(void *work, size_t n, hvd_dtype_t dtype, hvd_reduce_op_t op, int p,
                           double postscale) {
    hvd_dtype_t w = hvd__allreduce_work_dtype(dtype);
    if (op == HVD_AVERAGE && (w == HVD_FLOAT32 || w == HVD_FLOAT64)) {
        /* One multiplying pass, as Horovod makes an average a sum postscaled by 1/p: a
         * separate dividing pass cost as much CPU as the ring's reduction (perf, np 2). */
        hvd__reduce_scale(work, n, w, postscale / p);
    } else {
        if (op == HVD_AVERAGE)
            hvd__reduce_average(work, n, w, p);
        hvd__reduce_scale(work, n, w, postscale);
    }
}

void hvd__allreduce_to_out(void *out, const void *work, size_t n, hvd_dtype_t dtype) {
    if (hvd__allreduce_is_half(dtype))
        hvd__f32_to_half(out, work, n, dtype);
    else if (out != work && n)
        memcpy(out, work, n * hvd__dtype_size(dtype));
}

void hvd__allreduce_from_work(void *out, void *work, size_t n, hvd_dtype_t dtype,
                              hvd_reduce_op_t op, int p, double postscale) {
    hvd__allreduce_finish(work, n, dtype, op, p, postscale);
    hvd__allreduce_to_out(out, work, n, dtype);
}

void hvd__allreduce_combine(const uint8_t *const *blocks, int p, void *acc, void *recv,
                            size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op, double postscale) {
    hvd_dtype_t w = hvd__allreduce_work_dtype(dtype);
    if (w == dtype)
        acc = recv; /* (no rounding step: reduce straight into the output) */
    if (count)
        memcpy(acc, blocks[0], count * hvd__dtype_size(w));
    for (int r = 1; r < p; r++)
        hvd__reduce(acc, blocks[r], count, w, op);
    hvd__allreduce_from_work(recv, acc, count, dtype, op, p, postscale);
}
