#include "collectives/dtype.h"

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

/* _Float16 gives IEEE binary16 with correct rounding (hardware F16C where the compiler may use
 * it, libgcc otherwise), so there is no hand-written rounding to get wrong. */
float hvd__fp16_to_fp32(uint16_t h) {
    _Float16 v;
    memcpy(&v, &h, sizeof h);
    return (float)v;
}

uint16_t hvd__fp32_to_fp16(float f) {
    _Float16 v = (_Float16)f;
    uint16_t h;
    memcpy(&h, &v, sizeof h);
    return h;
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
