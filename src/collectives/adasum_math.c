/* Adasum's pairwise kernels (adasum_math.h). */
#include "collectives/adasum_math.h"

#include "collectives/allreduce_work.h"
#include "collectives/dtype.h"

#include <float.h>
#include <math.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HVD_ADASUM_AVX2 1
#endif

#define DEFINE_DOTS(NAME, T)                                                                       \
    static void NAME(const T *a, const T *b, size_t n, double *out) {                              \
        /* four lanes: independent sums the processor overlaps (one chain took 18 % of a           \
         * 16 MiB Adasum at np 2, perf) */                                                         \
        double ab[4] = {0}, aa[4] = {0}, bb[4] = {0};                                              \
        size_t i = 0;                                                                              \
        for (; i + 4 <= n; i += 4)                                                                 \
            for (int l = 0; l < 4; l++) {                                                          \
                double x = a[i + l], y = b[i + l];                                                 \
                ab[l] += x * y;                                                                    \
                aa[l] += x * x;                                                                    \
                bb[l] += y * y;                                                                    \
            }                                                                                      \
        for (; i < n; i++) {                                                                       \
            double x = a[i], y = b[i];                                                             \
            ab[0] += x * y;                                                                        \
            aa[0] += x * x;                                                                        \
            bb[0] += y * y;                                                                        \
        }                                                                                          \
        out[0] += (ab[0] + ab[1]) + (ab[2] + ab[3]);                                               \
        out[1] += (aa[0] + aa[1]) + (aa[2] + aa[3]);                                               \
        out[2] += (bb[0] + bb[1]) + (bb[2] + bb[3]);                                               \
    }
DEFINE_DOTS(dots_f32, float)
DEFINE_DOTS(dots_f64, double)

/* out = ca a + cb b, in T: float32 values with float32 coefficients (their rounding is
 * below the result's own), which the compiler vectorises */
#define DEFINE_SCALED_ADD(NAME, T)                                                                 \
    static void NAME(T *out, const T *a, double ca, const T *b, double cb, size_t n) {             \
        T fa = (T)ca, fb = (T)cb;                                                                  \
        for (size_t i = 0; i < n; i++)                                                             \
            out[i] = fa * a[i] + fb * b[i];                                                        \
    }
DEFINE_SCALED_ADD(scaled_add_f32, float)
DEFINE_SCALED_ADD(scaled_add_f64, double)

#ifdef HVD_ADASUM_AVX2
/* The float32 dot products with AVX2 and FMA where the processor has them: four vectors of
 * four float64 lanes per sum keep the fused multiply-adds' latency hidden (the portable
 * version's scalar chains took 1.3x as long on a slice in cache, and its share of a 1 MiB
 * Adasum at np 2 was a fifth). Lane by lane the sums differ from the portable version's only
 * in their grouping. */
__attribute__((target("avx2,fma"))) static void dots_f32_avx2(const float *a, const float *b,
                                                              size_t n, double *out) {
    __m256d ab[4], aa[4], bb[4];
    for (int l = 0; l < 4; l++)
        ab[l] = aa[l] = bb[l] = _mm256_setzero_pd();
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 4; l++) {
            __m256d x = _mm256_cvtps_pd(_mm_loadu_ps(a + i + 4 * l));
            __m256d y = _mm256_cvtps_pd(_mm_loadu_ps(b + i + 4 * l));
            ab[l] = _mm256_fmadd_pd(x, y, ab[l]);
            aa[l] = _mm256_fmadd_pd(x, x, aa[l]);
            bb[l] = _mm256_fmadd_pd(y, y, bb[l]);
        }
    __m256d sum[3] = {_mm256_add_pd(_mm256_add_pd(ab[0], ab[1]), _mm256_add_pd(ab[2], ab[3])),
                      _mm256_add_pd(_mm256_add_pd(aa[0], aa[1]), _mm256_add_pd(aa[2], aa[3])),
                      _mm256_add_pd(_mm256_add_pd(bb[0], bb[1]), _mm256_add_pd(bb[2], bb[3]))};
    double lanes[4], r[3];
    for (int k = 0; k < 3; k++) {
        _mm256_storeu_pd(lanes, sum[k]);
        r[k] = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    }
    for (; i < n; i++) {
        double x = a[i], y = b[i];
        r[0] += x * y;
        r[1] += x * x;
        r[2] += y * y;
    }
    out[0] += r[0];
    out[1] += r[1];
    out[2] += r[2];
}
#endif

static void dots_f32_any(const float *a, const float *b, size_t n, double *out) {
#ifdef HVD_ADASUM_AVX2
    static int avx2 = -1; /* (every thread that looks computes the same answer) */
    int has = __atomic_load_n(&avx2, __ATOMIC_RELAXED);
    if (has < 0) {
        has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        __atomic_store_n(&avx2, has, __ATOMIC_RELAXED);
    }
    if (has) {
        dots_f32_avx2(a, b, n, out);
        return;
    }
#endif
    dots_f32(a, b, n, out);
}

/* The first part that ends after element lo (binary search: a fused buffer of many tensors
 * is visited chunk by chunk, and a walk from the first part for every chunk was quadratic). */
static size_t part_at(const hvd_adasum_parts_t *t, size_t lo) {
    size_t a = 0, b = t->nparts; /* the answer is in [a, b] */
    while (a < b) {
        size_t m = a + (b - a) / 2;
        if (t->starts[m + 1] <= lo)
            a = m + 1;
        else
            b = m;
    }
    return a;
}

/* The parts' overlap with [lo, hi), one at a time from part *k (part_at(t, lo) at first):
 * [*x, *y) the overlap of part *k, which the caller then steps past. Returns 0 at the end. */
static int next_overlap(const hvd_adasum_parts_t *t, size_t lo, size_t hi, size_t *k, size_t *x,
                        size_t *y) {
    for (; *k < t->nparts && t->starts[*k] < hi; ++*k) {
        size_t start = t->starts[*k], end = t->starts[*k + 1];
        *x = start > lo ? start : lo;
        *y = end < hi ? end : hi;
        if (*x < *y)
            return 1;
    }
    return 0;
}

void hvd__adasum_dots(const hvd_adasum_parts_t *t, double *sums, const void *a, const void *b,
                      size_t lo, size_t hi) {
    size_t k = part_at(t, lo), x, y;
    while (next_overlap(t, lo, hi, &k, &x, &y)) {
        size_t off = (x - lo) * t->wsize;
        if (t->w == HVD_FLOAT32)
            dots_f32_any((const float *)((const char *)a + off),
                         (const float *)((const char *)b + off), y - x, &sums[3 * k]);
        else
            dots_f64((const double *)((const char *)a + off),
                     (const double *)((const char *)b + off), y - x, &sums[3 * k]);
        k++;
    }
}

void hvd__adasum_combine(const hvd_adasum_parts_t *t, const double *sums, void *out, const void *a,
                         const void *b, size_t lo, size_t hi) {
    /* Horovod's bound: a squared norm below sqrt(DBL_MIN) counts as a zero vector */
    const double tiny = sqrt(DBL_MIN);
    size_t k = part_at(t, lo), x, y;
    while (next_overlap(t, lo, hi, &k, &x, &y)) {
        const double *m = &sums[3 * k];
        double ca = m[1] >= tiny ? 1.0 - m[0] / (2.0 * m[1]) : 1.0;
        double cb = m[2] >= tiny ? 1.0 - m[0] / (2.0 * m[2]) : 1.0;
        size_t off = (x - lo) * t->wsize;
        if (t->w == HVD_FLOAT32)
            scaled_add_f32((float *)((char *)out + off), (const float *)((const char *)a + off), ca,
                           (const float *)((const char *)b + off), cb, y - x);
        else
            scaled_add_f64((double *)((char *)out + off), (const double *)((const char *)a + off),
                           ca, (const double *)((const char *)b + off), cb, y - x);
        k++;
    }
}

void hvd__adasum_parts(hvd_adasum_parts_t *t, hvd_dtype_t dtype, size_t *starts,
                       const size_t *parts, size_t nparts, size_t count) {
    t->w = hvd__allreduce_work_dtype(dtype);
    t->wsize = hvd__dtype_size(t->w);
    t->starts = starts;
    t->nparts = parts && nparts ? nparts : 1;
    starts[0] = 0;
    if (!parts || !nparts)
        starts[1] = count;
    for (size_t k = 0; parts && k < nparts; k++)
        starts[k + 1] = starts[k] + parts[k];
}
