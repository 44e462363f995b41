/* The reduction kernels (reduce.h): one loop per op and type, stamped out by macros so that each is
 * a plain loop the vectoriser can take. Half types go through float32 in blocks of 256 elements on
 * the stack; integer scaling saturates instead of overflowing. */
#include "collectives/reduce.h"

#include "collectives/dtype.h"
#include "common/error.h"

#include <stdint.h>

hvd_status_t hvd__reduce_check(hvd_dtype_t dtype, hvd_reduce_op_t op) {
    if (hvd__dtype_size(dtype) == 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "unknown dtype %d", (int)dtype);
    switch (op) {
    case HVD_SUM:
    case HVD_MIN:
    case HVD_MAX:
    case HVD_PRODUCT:
        return HVD_OK;
    case HVD_AVERAGE:
        if (dtype == HVD_BOOL)
            return hvd__error_set(HVD_ERR_INVALID_ARG, "reduce op average is not defined for "
                                                       "bool (use sum for or, min for and)");
        return HVD_OK;
    case HVD_ADASUM:
        /* not elementwise: allreduce runs it (hvd__adasum_check), nothing else takes it */
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "reduce op adasum is supported by allreduce only");
    }
    return hvd__error_set(HVD_ERR_INVALID_ARG, "unknown reduce op %d", (int)op);
}

/* Wrapping arithmetic for signed integers: done in the unsigned type, converted back (GCC
 * defines the conversion as modular). */
#define WRAP_ADD(T, U, a, b) ((T)((U)(a) + (U)(b)))
#define WRAP_MUL(T, U, a, b) ((T)((U)(a) * (U)(b)))
#define PLAIN_ADD(T, U, a, b) ((a) + (b))
#define PLAIN_MUL(T, U, a, b) ((a) * (b))

#define DEFINE_REDUCE(NAME, T, U, ADD, MUL)                                                        \
    static void NAME(T *d, const T *a, const T *restrict s, size_t n, hvd_reduce_op_t op) {        \
        switch (op) {                                                                              \
        case HVD_SUM:                                                                              \
        case HVD_AVERAGE:                                                                          \
            for (size_t i = 0; i < n; i++)                                                         \
                d[i] = ADD(T, U, a[i], s[i]);                                                      \
            break;                                                                                 \
        case HVD_MIN:                                                                              \
            for (size_t i = 0; i < n; i++)                                                         \
                d[i] = s[i] < a[i] ? s[i] : a[i];                                                  \
            break;                                                                                 \
        case HVD_MAX:                                                                              \
            for (size_t i = 0; i < n; i++)                                                         \
                d[i] = s[i] > a[i] ? s[i] : a[i];                                                  \
            break;                                                                                 \
        case HVD_PRODUCT:                                                                          \
            for (size_t i = 0; i < n; i++)                                                         \
                d[i] = MUL(T, U, a[i], s[i]);                                                      \
            break;                                                                                 \
        case HVD_ADASUM:                                                                           \
            break;                                                                                 \
        }                                                                                          \
    }

DEFINE_REDUCE(reduce_u8, uint8_t, uint8_t, WRAP_ADD, WRAP_MUL)
DEFINE_REDUCE(reduce_i8, int8_t, uint8_t, WRAP_ADD, WRAP_MUL)
DEFINE_REDUCE(reduce_u16, uint16_t, uint16_t, WRAP_ADD, WRAP_MUL)
DEFINE_REDUCE(reduce_i16, int16_t, uint16_t, WRAP_ADD, WRAP_MUL)
DEFINE_REDUCE(reduce_i32, int32_t, uint32_t, WRAP_ADD, WRAP_MUL)
DEFINE_REDUCE(reduce_i64, int64_t, uint64_t, WRAP_ADD, WRAP_MUL)
DEFINE_REDUCE(reduce_f32, float, float, PLAIN_ADD, PLAIN_MUL)
DEFINE_REDUCE(reduce_f64, double, double, PLAIN_ADD, PLAIN_MUL)

static void reduce_bool(uint8_t *d, const uint8_t *a, const uint8_t *restrict s, size_t n,
                        hvd_reduce_op_t op) {
    if (op == HVD_MIN || op == HVD_PRODUCT) {
        for (size_t i = 0; i < n; i++)
            d[i] = (uint8_t)((a[i] != 0) & (s[i] != 0));
    } else {
        for (size_t i = 0; i < n; i++)
            d[i] = (uint8_t)((a[i] != 0) | (s[i] != 0));
    }
}

/* Half types in blocks through float32 so the conversions and the float loop vectorise. */
#define HALF_BLOCK 256

static void reduce_half(uint16_t *d, const uint16_t *x, const uint16_t *s, size_t n,
                        hvd_dtype_t dtype, hvd_reduce_op_t op) {
    float a[HALF_BLOCK], b[HALF_BLOCK];
    for (size_t off = 0; off < n; off += HALF_BLOCK) {
        size_t m = n - off < HALF_BLOCK ? n - off : HALF_BLOCK;
        hvd__half_to_f32(a, x + off, m, dtype);
        hvd__half_to_f32(b, s + off, m, dtype);
        reduce_f32(a, a, b, m, op);
        hvd__f32_to_half(d + off, a, m, dtype);
    }
}

void hvd__reduce(void *dst, const void *src, size_t n, hvd_dtype_t dtype, hvd_reduce_op_t op) {
    hvd__reduce3(dst, dst, src, n, dtype, op);
}

void hvd__reduce3(void *dst, const void *a, const void *src, size_t n, hvd_dtype_t dtype,
                  hvd_reduce_op_t op) {
    switch (dtype) {
    case HVD_UINT8:
        reduce_u8(dst, a, src, n, op);
        break;
    case HVD_INT8:
        reduce_i8(dst, a, src, n, op);
        break;
    case HVD_UINT16:
        reduce_u16(dst, a, src, n, op);
        break;
    case HVD_INT16:
        reduce_i16(dst, a, src, n, op);
        break;
    case HVD_INT32:
        reduce_i32(dst, a, src, n, op);
        break;
    case HVD_INT64:
        reduce_i64(dst, a, src, n, op);
        break;
    case HVD_FLOAT32:
        reduce_f32(dst, a, src, n, op);
        break;
    case HVD_FLOAT64:
        reduce_f64(dst, a, src, n, op);
        break;
    case HVD_BOOL:
        reduce_bool(dst, a, src, n, op);
        break;
    case HVD_FLOAT16:
    case HVD_BFLOAT16:
        reduce_half(dst, a, src, n, dtype, op);
        break;
    }
}

#define DEFINE_DIVIDE(NAME, T)                                                                     \
    static void NAME(T *restrict d, size_t n, int by) {                                            \
        for (size_t i = 0; i < n; i++)                                                             \
            d[i] = (T)(d[i] / by);                                                                 \
    }
DEFINE_DIVIDE(divide_u8, uint8_t)
DEFINE_DIVIDE(divide_i8, int8_t)
DEFINE_DIVIDE(divide_u16, uint16_t)
DEFINE_DIVIDE(divide_i16, int16_t)
DEFINE_DIVIDE(divide_i32, int32_t)
DEFINE_DIVIDE(divide_i64, int64_t)
DEFINE_DIVIDE(divide_f32, float)
DEFINE_DIVIDE(divide_f64, double)

/* The divisor stays an int: small types are promoted, so e.g. 300 ranks of uint8 divide
 * correctly instead of by a truncated divisor. */
void hvd__reduce_average(void *buf, size_t n, hvd_dtype_t dtype, int by) {
    switch (dtype) {
    case HVD_UINT8:
        divide_u8(buf, n, by);
        break;
    case HVD_INT8:
        divide_i8(buf, n, by);
        break;
    case HVD_UINT16:
        divide_u16(buf, n, by);
        break;
    case HVD_INT16:
        divide_i16(buf, n, by);
        break;
    case HVD_INT32:
        divide_i32(buf, n, by);
        break;
    case HVD_INT64:
        divide_i64(buf, n, by);
        break;
    case HVD_FLOAT32:
        divide_f32(buf, n, by);
        break;
    case HVD_FLOAT64:
        divide_f64(buf, n, by);
        break;
    case HVD_FLOAT16:
    case HVD_BFLOAT16: {
        float a[HALF_BLOCK];
        for (size_t off = 0; off < n; off += HALF_BLOCK) {
            size_t m = n - off < HALF_BLOCK ? n - off : HALF_BLOCK;
            hvd__half_to_f32(a, (uint16_t *)buf + off, m, dtype);
            divide_f32(a, m, by);
            hvd__f32_to_half((uint16_t *)buf + off, a, m, dtype);
        }
        break;
    }
    case HVD_BOOL:
        break;
    }
}

void hvd__half_to_f32(float *restrict dst, const void *src, size_t n, hvd_dtype_t dtype) {
    const uint16_t *restrict s = src;
    if (dtype == HVD_FLOAT16) {
        for (size_t i = 0; i < n; i++)
            dst[i] = hvd__fp16_to_fp32(s[i]);
    } else {
        for (size_t i = 0; i < n; i++)
            dst[i] = hvd__bf16_to_fp32(s[i]);
    }
}

void hvd__f32_to_half(void *dst, const float *restrict src, size_t n, hvd_dtype_t dtype) {
    uint16_t *restrict d = dst;
    if (dtype == HVD_FLOAT16) {
        for (size_t i = 0; i < n; i++)
            d[i] = hvd__fp32_to_fp16(src[i]);
    } else {
        for (size_t i = 0; i < n; i++)
            d[i] = hvd__fp32_to_bf16(src[i]);
    }
}

void hvd__reduce_acc_f32(float *acc, const void *src, size_t n, hvd_dtype_t dtype,
                         hvd_reduce_op_t op) {
    float b[HALF_BLOCK];
    for (size_t off = 0; off < n; off += HALF_BLOCK) {
        size_t m = n - off < HALF_BLOCK ? n - off : HALF_BLOCK;
        hvd__half_to_f32(b, (const uint16_t *)src + off, m, dtype);
        reduce_f32(acc + off, acc + off, b, m, op);
    }
}

/* Integers are scaled in double and truncated toward zero; out-of-range results saturate
 * (a plain conversion would be undefined behaviour). */
#define DEFINE_SCALE_INT(NAME, T, LO, HI)                                                          \
    static void NAME(T *restrict b, size_t n, double f) {                                          \
        for (size_t i = 0; i < n; i++) {                                                           \
            double v = (double)b[i] * f;                                                           \
            b[i] = v <= (double)(LO) ? (LO) : v >= (double)(HI) ? (HI) : (T)v;                     \
        }                                                                                          \
    }
DEFINE_SCALE_INT(scale_u8, uint8_t, 0, UINT8_MAX)
DEFINE_SCALE_INT(scale_i8, int8_t, INT8_MIN, INT8_MAX)
DEFINE_SCALE_INT(scale_u16, uint16_t, 0, UINT16_MAX)
DEFINE_SCALE_INT(scale_i16, int16_t, INT16_MIN, INT16_MAX)
DEFINE_SCALE_INT(scale_i32, int32_t, INT32_MIN, INT32_MAX)
DEFINE_SCALE_INT(scale_i64, int64_t, INT64_MIN, INT64_MAX)

static void scale_f32(float *restrict b, size_t n, float f) {
    for (size_t i = 0; i < n; i++)
        b[i] *= f;
}

static void scale_f64(double *restrict b, size_t n, double f) {
    for (size_t i = 0; i < n; i++)
        b[i] *= f;
}

void hvd__reduce_scale(void *buf, size_t n, hvd_dtype_t dtype, double factor) {
    if (factor == 1.0)
        return;
    switch (dtype) {
    case HVD_UINT8:
        scale_u8(buf, n, factor);
        break;
    case HVD_INT8:
        scale_i8(buf, n, factor);
        break;
    case HVD_UINT16:
        scale_u16(buf, n, factor);
        break;
    case HVD_INT16:
        scale_i16(buf, n, factor);
        break;
    case HVD_INT32:
        scale_i32(buf, n, factor);
        break;
    case HVD_INT64:
        scale_i64(buf, n, factor);
        break;
    case HVD_FLOAT32:
        scale_f32(buf, n, (float)factor);
        break;
    case HVD_FLOAT64:
        scale_f64(buf, n, factor);
        break;
    case HVD_FLOAT16:
    case HVD_BFLOAT16: {
        float a[HALF_BLOCK];
        for (size_t off = 0; off < n; off += HALF_BLOCK) {
            size_t m = n - off < HALF_BLOCK ? n - off : HALF_BLOCK;
            hvd__half_to_f32(a, (uint16_t *)buf + off, m, dtype);
            scale_f32(a, m, (float)factor);
            hvd__f32_to_half((uint16_t *)buf + off, a, m, dtype);
        }
        break;
    }
    case HVD_BOOL:
        break;
    }
}
