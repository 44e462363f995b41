/* Element types of the public API: sizes, names, and the half-precision conversions that the
 * reductions use (float16 and bfloat16 are reduced in float32, then rounded to nearest even). */
#ifndef HVD_COLLECTIVES_DTYPE_H
#define HVD_COLLECTIVES_DTYPE_H

#include <hvd/types.h>

#include <stddef.h>
#include <stdint.h>

/* Bytes per element; 0 for a value outside hvd_dtype_t. */
size_t hvd__dtype_size(hvd_dtype_t dtype);

/* "float32", ...; "unknown" outside the enum. */
const char *hvd__dtype_name(hvd_dtype_t dtype);

/* "sum", ...; "unknown" outside the enum. */
const char *hvd__reduce_op_name(hvd_reduce_op_t op);

float hvd__fp16_to_fp32(uint16_t h);
uint16_t hvd__fp32_to_fp16(float f);
float hvd__bf16_to_fp32(uint16_t b);
uint16_t hvd__fp32_to_bf16(float f);

#endif
