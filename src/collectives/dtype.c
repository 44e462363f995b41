/* Element sizes and names (dtype.h), the public hvd_dtype_size among them, and the IEEE half and
 * bfloat16 conversions, written with bit operations rather than _Float16 (not every compiler we
 * build with has it) and rounding to nearest even. */
#include "collectives/dtype.h"

#include <hvd/hvd.h>

#include <string.h>

size_t hvd__dtype_size(hvd_dtype_t dtype) {
    switch (dtype) {
    case HVD_UINT8:
    case HVD_INT8:
    case HVD_BOOL:
        return 1;
    case HVD_UINT16:
    case HVD_INT16:
    case HVD_FLOAT16:
    case HVD_BFLOAT16:
        return 2;
    case HVD_INT32:
    case HVD_FLOAT32:
        return 4;
    case HVD_INT64:
    case HVD_FLOAT64:
        return 8;
    }
    return 0;
}

size_t hvd_dtype_size(hvd_dtype_t dtype) {
    return hvd__dtype_size(dtype);
}

const char *hvd__dtype_name(hvd_dtype_t dtype) {
    static const char *const names[] = {"uint8",   "int8",  "uint16",  "int16",
                                        "int32",   "int64", "float16", "float32",
                                        "float64", "bool",  "bfloat16"};
    return (unsigned)dtype < sizeof names / sizeof names[0] ? names[dtype] : "unknown";
}

const char *hvd__reduce_op_name(hvd_reduce_op_t op) {
    static const char *const names[] = {"average", "sum", "adasum", "min", "max", "product"};
    return (unsigned)op < sizeof names / sizeof names[0] ? names[op] : "unknown";
}

/* IEEE binary16 by bit manipulation: exact decoding, and rounding to nearest with ties to
 * even; written out rather than using _Float16, which not every compiler we build with has. */
float hvd__fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 31u, frac = h & 1023u;
    uint32_t bits;
    if (exp == 0) {
        float f = (float)frac * 0x1p-24f; /* zero or subnormal: exact */
        memcpy(&bits, &f, sizeof bits);
        bits |= sign;
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (frac << 13); /* infinity or NaN (payload kept) */
    } else {
        bits = sign | ((exp + 112u) << 23) | (frac << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

uint16_t hvd__fp32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t absx = x & 0x7fffffffu;
    if (absx > 0x7f800000u) /* NaN: keep it a quiet NaN */
        return (uint16_t)(sign | 0x7e00u | ((absx >> 13) & 0x3ffu));
    if (absx >= 0x38800000u) { /* half's normal range (2^-14 and up) */
        /* round at bit 13, ties to even; a carry into the exponent is the right result */
        uint32_t r = absx + 0xfffu + ((absx >> 13) & 1u);
        uint32_t h = (r - (112u << 23)) >> 13;
        return (uint16_t)(sign | (h >= 0x7c00u ? 0x7c00u : h));
    }
    uint32_t e = absx >> 23;
    if (e < 102) /* below 2^-25: rounds to zero */
        return sign;
    /* subnormal: the value in units of 2^-24 is m >> shift, rounded to nearest even */
    uint32_t m = (absx & 0x7fffffu) | 0x800000u, shift = 126u - e;
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u)))
        q++;
    return (uint16_t)(sign | q);
}

float hvd__bf16_to_fp32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t hvd__fp32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* NaN stays a (quiet) NaN */
    u += 0x7fffu + ((u >> 16) & 1u);         /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}
