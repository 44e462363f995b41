/* Element-wise reduction kernels for every dtype and reduce op of the public API.
 *
 * Integers wrap on overflow (computed in the unsigned type, so there is no undefined
 * behaviour); integer AVERAGE divides the sum once, rounding toward zero. BOOL reduces as
 * logic: SUM and MAX are or, MIN and PRODUCT are and. float16 and bfloat16 are computed in
 * float32; callers that combine many contributions use the float32 accumulator entry points
 * so that the result is rounded once. The loops are written for the vectoriser (restrict,
 * no calls, no branches but the op switch outside the loop); the file is built with -O3. */
#ifndef HVD_COLLECTIVES_REDUCE_H
#define HVD_COLLECTIVES_REDUCE_H

#include <hvd/types.h>

#include <stddef.h>

/* HVD_OK when op can reduce dtype; HVD_ERR_INVALID_ARG naming both otherwise (unknown enum
 * values, ADASUM, AVERAGE of BOOL). */
hvd_status_t hvd__reduce_check(hvd_dtype_t dtype, hvd_reduce_op_t op);

/* dst[i] = dst[i] op src[i] for count elements; dst and src must not overlap. AVERAGE sums
 * (finish with hvd__reduce_average). The pair must have passed hvd__reduce_check. */
void hvd__reduce(void *dst, const void *src, size_t count, hvd_dtype_t dtype, hvd_reduce_op_t op);

/* dst[i] = a[i] op src[i]: the same with a separate first operand (a may be dst; src must
 * not overlap dst), which saves the copy when the result must not overwrite the input. */
void hvd__reduce3(void *dst, const void *a, const void *src, size_t count, hvd_dtype_t dtype,
                  hvd_reduce_op_t op);

/* buf[i] /= n, the last step of AVERAGE (n >= 1). */
void hvd__reduce_average(void *buf, size_t count, hvd_dtype_t dtype, int n);

/* buf[i] *= factor: floats in their own precision (float32 for half types), integers in
 * double, truncated toward zero and saturated. BOOL is left alone. */
void hvd__reduce_scale(void *buf, size_t count, hvd_dtype_t dtype, double factor);

/* Half-precision accumulation in float32: acc[i] = acc[i] op (float)src[i]. dtype is
 * HVD_FLOAT16 or HVD_BFLOAT16. */
void hvd__reduce_acc_f32(float *acc, const void *src, size_t count, hvd_dtype_t dtype,
                         hvd_reduce_op_t op);

/* Conversions between a half type and float32 (round to nearest even on the way down). */
void hvd__half_to_f32(float *dst, const void *src, size_t count, hvd_dtype_t dtype);
void hvd__f32_to_half(void *dst, const float *src, size_t count, hvd_dtype_t dtype);

#endif
