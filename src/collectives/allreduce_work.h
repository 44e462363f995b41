/* An allreduce's working values: the dtype values travel and accumulate in (float32 for
 * float16 and bfloat16, which are rounded once at the end; every other dtype as it is), the
 * conversion of the (prescaled) input into it, the finishing steps (average, postscale,
 * rounding into the output), and the local reduction of every rank's block in rank order.
 * Below every allreduce algorithm (ring, arena, hierarchical, Adasum) and the core's small
 * allreduce inside its cycle message, which all share them. */
#ifndef HVD_COLLECTIVES_ALLREDUCE_WORK_H
#define HVD_COLLECTIVES_ALLREDUCE_WORK_H

#include <hvd/types.h>

#include <stddef.h>
#include <stdint.h>

/* Whether dtype travels as float32 (float16, bfloat16). */
int hvd__allreduce_is_half(hvd_dtype_t dtype);
/* The dtype an allreduce of dtype works in (float32 for the half types). */
hvd_dtype_t hvd__allreduce_work_dtype(hvd_dtype_t dtype);
/* work[0..count) = prescale * send in the working dtype (send may be work for non-half
 * types). */
void hvd__allreduce_to_work(void *work, const void *send, size_t count, hvd_dtype_t dtype,
                            double prescale);
/* work[0..count) = postscale * (work / p for AVERAGE), in the working dtype, in place. */
void hvd__allreduce_finish(void *work, size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op, int p,
                           double postscale);
/* out[0..count) = work rounded into dtype (a copy for the others; none when out is work). */
void hvd__allreduce_to_out(void *out, const void *work, size_t count, hvd_dtype_t dtype);
/* finish, then to_out: out = postscale * (work / p for AVERAGE), rounded once into dtype. */
void hvd__allreduce_from_work(void *out, void *work, size_t count, hvd_dtype_t dtype,
                              hvd_reduce_op_t op, int p, double postscale);
/* recv = the reduction of blocks[0..p) (each count elements of the working dtype) in rank
 * order, finished (acc: count working elements of scratch, unused when no rounding step is
 * needed). */
void hvd__allreduce_combine(const uint8_t *const *blocks, int p, void *acc, void *recv,
                            size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op, double postscale);

#endif
