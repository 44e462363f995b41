/* Reduction kernels: every dtype x op x awkward count against a reference computed here with
 * wider arithmetic and an independent decoding of the half-precision formats. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <hvd/hvd.h>

#include "collectives/dtype.h"
#include "collectives/reduce.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const size_t counts[] = {0, 1, 2, 3, 7, 17, 255, 256, 257, 1000, 4099};
static const hvd_dtype_t dtypes[] = {HVD_UINT8,   HVD_INT8,  HVD_UINT16,  HVD_INT16,
                                     HVD_INT32,   HVD_INT64, HVD_FLOAT16, HVD_FLOAT32,
                                     HVD_FLOAT64, HVD_BOOL,  HVD_BFLOAT16};
static const hvd_reduce_op_t ops[] = {HVD_SUM, HVD_MIN, HVD_MAX, HVD_PRODUCT, HVD_AVERAGE};

/* Decoding written from the format definitions, independent of the library's. */
static double decode_fp16(uint16_t h) {
    int sign = h >> 15, exp = (h >> 10) & 31, frac = h & 1023;
    double v = exp == 0 ? ldexp(frac, -24) : exp == 31 ? INFINITY : ldexp(1024 + frac, exp - 25);
    return sign ? -v : v;
}
static double decode_bf16(uint16_t b) {
    int sign = b >> 15, exp = (b >> 7) & 255, frac = b & 127;
    double v = exp == 0 ? ldexp(frac, -133) : exp == 255 ? INFINITY : ldexp(128 + frac, exp - 134);
    return sign ? -v : v;
}

static int is_signed(hvd_dtype_t t) {
    return t == HVD_INT8 || t == HVD_INT16 || t == HVD_INT32 || t == HVD_INT64;
}

/* Read element i as a double (integers exactly up to 2^53; int64 tests stay within). */
static long double get(const void *buf, size_t i, hvd_dtype_t t) {
    switch (t) {
    case HVD_UINT8:
    case HVD_BOOL:
        return ((const uint8_t *)buf)[i];
    case HVD_INT8:
        return ((const int8_t *)buf)[i];
    case HVD_UINT16:
        return ((const uint16_t *)buf)[i];
    case HVD_INT16:
        return ((const int16_t *)buf)[i];
    case HVD_INT32:
        return ((const int32_t *)buf)[i];
    case HVD_INT64:
        return (long double)((const int64_t *)buf)[i];
    case HVD_FLOAT32:
        return ((const float *)buf)[i];
    case HVD_FLOAT64:
        return ((const double *)buf)[i];
    case HVD_FLOAT16:
        return decode_fp16(((const uint16_t *)buf)[i]);
    case HVD_BFLOAT16:
        return decode_bf16(((const uint16_t *)buf)[i]);
    }
    return 0;
}

/* Wrap an exact integer result into the type's range (two's complement, modular). */
static long double wrap(__int128 v, hvd_dtype_t t) {
    int bits = (int)hvd__dtype_size(t) * 8;
    unsigned __int128 m = (unsigned __int128)v & (((unsigned __int128)1 << bits) - 1);
    if (is_signed(t) && (m >> (bits - 1)))
        return (long double)((__int128)m - ((__int128)1 << bits));
    return (long double)m;
}

static void fill(void *buf, size_t n, hvd_dtype_t t, unsigned *seed) {
    for (size_t i = 0; i < n; i++) {
        int r = (int)(rand_r(seed) % 41) - 20; /* small: float results exact */
        unsigned u = (unsigned)rand_r(seed);
        switch (t) {
        case HVD_UINT8:
            ((uint8_t *)buf)[i] = (uint8_t)u;
            break; /* full range: wraps */
        case HVD_INT8:
            ((int8_t *)buf)[i] = (int8_t)u;
            break;
        case HVD_UINT16:
            ((uint16_t *)buf)[i] = (uint16_t)u;
            break;
        case HVD_INT16:
            ((int16_t *)buf)[i] = (int16_t)u;
            break;
        case HVD_INT32:
            ((int32_t *)buf)[i] = (int32_t)(u * 2654435761u);
            break;
        case HVD_INT64:
            ((int64_t *)buf)[i] = (int64_t)((uint64_t)u << 20) - (1LL << 40);
            break;
        case HVD_FLOAT32:
            ((float *)buf)[i] = (float)r;
            break;
        case HVD_FLOAT64:
            ((double *)buf)[i] = r * 0.5;
            break;
        case HVD_FLOAT16:
            ((uint16_t *)buf)[i] = hvd__fp32_to_fp16((float)r);
            break;
        case HVD_BFLOAT16:
            ((uint16_t *)buf)[i] = hvd__fp32_to_bf16((float)(r / 2));
            break;
        case HVD_BOOL:
            ((uint8_t *)buf)[i] = (uint8_t)(u % 3);
            break; /* 2 is also true */
        }
    }
}

static long double expected(long double a, long double b, hvd_dtype_t t, hvd_reduce_op_t op,
                            int avg_n) {
    if (t == HVD_BOOL) {
        int x = a != 0, y = b != 0;
        return (op == HVD_MIN || op == HVD_PRODUCT) ? (x && y) : (x || y);
    }
    int integer = t != HVD_FLOAT16 && t != HVD_FLOAT32 && t != HVD_FLOAT64 && t != HVD_BFLOAT16;
    long double r;
    switch (op) {
    case HVD_MIN:
        return a < b ? a : b;
    case HVD_MAX:
        return a > b ? a : b;
    case HVD_PRODUCT:
        return integer ? wrap((__int128)a * (__int128)b, t) : a * b;
    default:
        r = integer ? wrap((__int128)a + (__int128)b, t) : a + b;
        if (op == HVD_AVERAGE)
            r = integer ? (long double)((__int128)r / avg_n) : r / avg_n;
        return r;
    }
}

static void test_all_dtypes_ops_counts(void **state) {
    (void)state;
    unsigned seed = 12345;
    int checked = 0;
    for (size_t di = 0; di < sizeof dtypes / sizeof *dtypes; di++) {
        hvd_dtype_t t = dtypes[di];
        size_t es = hvd__dtype_size(t);
        for (size_t oi = 0; oi < sizeof ops / sizeof *ops; oi++) {
            hvd_reduce_op_t op = ops[oi];
            if (t == HVD_BOOL && op == HVD_AVERAGE)
                continue;
            assert_int_equal(hvd__reduce_check(t, op), HVD_OK);
            for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
                size_t n = counts[ci];
                /* exact-size buffers so ASan sees any overrun */
                void *a = malloc(n * es + 1), *b = malloc(n * es + 1), *orig = malloc(n * es + 1);
                fill(a, n, t, &seed);
                fill(b, n, t, &seed);
                memcpy(orig, a, n * es);
                int avg_n = t == HVD_UINT8 ? 300 : 4; /* 300: a divisor wider than the type */
                hvd__reduce(a, b, n, t, op);
                if (op == HVD_AVERAGE)
                    hvd__reduce_average(a, n, t, avg_n);
                for (size_t i = 0; i < n; i++) {
                    long double want = expected(get(orig, i, t), get(b, i, t), t, op, avg_n);
                    long double got = get(a, i, t);
                    if (want != got)
                        fail_msg("%s %s count %zu element %zu: %Lg op %Lg = %Lg, expected %Lg",
                                 hvd__dtype_name(t), hvd__reduce_op_name(op), n, i, get(orig, i, t),
                                 get(b, i, t), got, want);
                    checked++;
                }
                free(a);
                free(b);
                free(orig);
            }
        }
    }
    assert_true(checked > 100000);
}

/* The public size (the Python binding's) against the C types themselves. */
static void test_public_dtype_size(void **state) {
    (void)state;
    assert_int_equal(hvd_dtype_size(HVD_UINT8), sizeof(uint8_t));
    assert_int_equal(hvd_dtype_size(HVD_INT8), sizeof(int8_t));
    assert_int_equal(hvd_dtype_size(HVD_UINT16), sizeof(uint16_t));
    assert_int_equal(hvd_dtype_size(HVD_INT16), sizeof(int16_t));
    assert_int_equal(hvd_dtype_size(HVD_INT32), sizeof(int32_t));
    assert_int_equal(hvd_dtype_size(HVD_INT64), sizeof(int64_t));
    assert_int_equal(hvd_dtype_size(HVD_FLOAT16), 2);
    assert_int_equal(hvd_dtype_size(HVD_BFLOAT16), 2);
    assert_int_equal(hvd_dtype_size(HVD_FLOAT32), sizeof(float));
    assert_int_equal(hvd_dtype_size(HVD_FLOAT64), sizeof(double));
    assert_int_equal(hvd_dtype_size(HVD_BOOL), 1);
    assert_int_equal(hvd_dtype_size((hvd_dtype_t)99), 0);
    assert_int_equal(hvd_dtype_size((hvd_dtype_t)-1), 0);
}

static void test_check(void **state) {
    (void)state;
    assert_int_equal(hvd__reduce_check(HVD_FLOAT32, HVD_ADASUM), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "adasum"));
    assert_int_equal(hvd__reduce_check(HVD_BOOL, HVD_AVERAGE), HVD_ERR_INVALID_ARG);
    assert_int_equal(hvd__reduce_check((hvd_dtype_t)42, HVD_SUM), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "dtype 42"));
    assert_int_equal(hvd__reduce_check(HVD_INT8, (hvd_reduce_op_t)9), HVD_ERR_INVALID_ARG);
    assert_non_null(strstr(hvd_last_error(), "op 9"));
}

static void test_half_conversions(void **state) {
    (void)state;
    assert_int_equal(hvd__fp32_to_fp16(1.0f), 0x3c00);
    assert_int_equal(hvd__fp32_to_fp16(-2.0f), 0xc000);
    assert_int_equal(hvd__fp32_to_fp16(65504.0f), 0x7bff);
    assert_int_equal(hvd__fp32_to_fp16(65520.0f), 0x7c00); /* rounds up to infinity */
    assert_int_equal(hvd__fp32_to_fp16(0x1p-24f), 0x0001); /* smallest subnormal */
    assert_int_equal(hvd__fp32_to_fp16(2049.0f), 0x6800);  /* tie to even: 2048 */
    assert_int_equal(hvd__fp32_to_fp16(2051.0f), 0x6802);  /* tie to even: 2052 */
    assert_int_equal(hvd__fp32_to_fp16(65519.0f), 0x7bff); /* below the halfway point */
    assert_int_equal(hvd__fp32_to_fp16(1e10f), 0x7c00);
    assert_int_equal(hvd__fp32_to_fp16(-INFINITY), 0xfc00);
    assert_int_equal(hvd__fp32_to_fp16(0x1p-25f), 0x0000);     /* tie to even: 0 */
    assert_int_equal(hvd__fp32_to_fp16(0x1.8p-24f), 0x0002);   /* tie to even: 2 */
    assert_int_equal(hvd__fp32_to_fp16(0x1.4p-24f), 0x0001);   /* below the tie */
    assert_int_equal(hvd__fp32_to_fp16(0x1.ffcp-15f), 0x0400); /* tie: up to 2^-14 */
    assert_int_equal(hvd__fp32_to_fp16(-0.0f), 0x8000);
    assert_true(isnan(hvd__fp16_to_fp32(hvd__fp32_to_fp16(NAN))));
    assert_int_equal(hvd__fp32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(hvd__fp32_to_bf16(1.00390625f), 0x3f80); /* 1 + 2^-8: tie to even */
    assert_int_equal(hvd__fp32_to_bf16(1.01171875f), 0x3f82); /* 1 + 3*2^-8: tie to even */
    assert_int_equal(hvd__fp32_to_bf16(INFINITY), 0x7f80);
    assert_true(isnan(hvd__bf16_to_fp32(hvd__fp32_to_bf16(NAN))));
    /* every fp16 value round-trips through float32 */
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = hvd__fp16_to_fp32((uint16_t)h);
        if (isnan(f))
            continue;
        assert_true((double)f == decode_fp16((uint16_t)h));
        assert_int_equal(hvd__fp32_to_fp16(f), h);
    }
}

static void test_round_once(void **state) {
    (void)state;
    /* 2048 + 1 + 1 in float16: pairwise rounding loses both ones (2049 ties to 2048), a
     * float32 accumulator rounded once keeps them (2050 is representable). */
    uint16_t x = hvd__fp32_to_fp16(2048.0f), one = hvd__fp32_to_fp16(1.0f);
    uint16_t pair = x;
    hvd__reduce(&pair, &one, 1, HVD_FLOAT16, HVD_SUM);
    hvd__reduce(&pair, &one, 1, HVD_FLOAT16, HVD_SUM);
    assert_true(hvd__fp16_to_fp32(pair) == 2048.0f);
    float acc;
    hvd__half_to_f32(&acc, &x, 1, HVD_FLOAT16);
    hvd__reduce_acc_f32(&acc, &one, 1, HVD_FLOAT16, HVD_SUM);
    hvd__reduce_acc_f32(&acc, &one, 1, HVD_FLOAT16, HVD_SUM);
    uint16_t once;
    hvd__f32_to_half(&once, &acc, 1, HVD_FLOAT16);
    assert_true(hvd__fp16_to_fp32(once) == 2050.0f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_dtypes_ops_counts),
        cmocka_unit_test(test_public_dtype_size),
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_half_conversions),
        cmocka_unit_test(test_round_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
