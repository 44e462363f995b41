/* Adasum's pairwise kernels (adasum_math.h). */
#include "collectives/adasum_math.h"

#include "collectives/allreduce_work.h"
#include "collectives/dtype.h"

#include <float.h>
#include <math.h>
#include <string.h>

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
#define DEFINE_SCALED_ADD(NAME, T, ATTR)                                                           \
    ATTR static void NAME(T *out, const T *a, double ca, const T *b, double cb, size_t n) {        \
        T fa = (T)ca, fb = (T)cb;                                                                  \
        for (size_t i = 0; i < n; i++)                                                             \
            out[i] = fa * a[i] + fb * b[i];                                                        \
    }
DEFINE_SCALED_ADD(scaled_add_f32, float, )
DEFINE_SCALED_ADD(scaled_add_f64, double, )

#ifdef HVD_ADASUM_AVX2
/* The dot products with AVX2 and FMA where the processor has them: four float64 vectors per
 * sum keep the fused multiply-adds' latency hidden (each a variable of its own: as arrays,
 * the compiler kept them in memory). On a slice in cache: 1.7 us per 16 Ki float32 elements,
 * against 5.8 for the portable version's scalar chains, whose share of a 1 MiB Adasum at np 2
 * was a fifth. Lane by lane the sums differ from the portable version's only in grouping. */
#define ADASUM_FMA3(X, Y, AB, AA, BB)                                                              \
    do {                                                                                           \
        AB = _mm256_fmadd_pd(X, Y, AB);                                                            \
        AA = _mm256_fmadd_pd(X, X, AA);                                                            \
        BB = _mm256_fmadd_pd(Y, Y, BB);                                                            \
    } while (0)
#define ADASUM_LOAD_F32(P) _mm256_cvtps_pd(_mm_loadu_ps(P))
#define ADASUM_LOAD_F64(P) _mm256_loadu_pd(P)
#define DEFINE_DOTS_AVX2(NAME, T, LOAD, TAIL)                                                      \
    __attribute__((target("avx2,fma"))) static void NAME(const T *a, const T *b, size_t n,         \
                                                         double *out) {                            \
        __m256d ab0 = _mm256_setzero_pd(), ab1 = ab0, ab2 = ab0, ab3 = ab0;                        \
        __m256d aa0 = ab0, aa1 = ab0, aa2 = ab0, aa3 = ab0, bb0 = ab0, bb1 = ab0, bb2 = ab0,       \
                bb3 = ab0;                                                                         \
        size_t i = 0;                                                                              \
        for (; i + 16 <= n; i += 16) {                                                             \
            __m256d x0 = LOAD(a + i), y0 = LOAD(b + i), x1 = LOAD(a + i + 4),                      \
                    y1 = LOAD(b + i + 4);                                                          \
            ADASUM_FMA3(x0, y0, ab0, aa0, bb0);                                                    \
            ADASUM_FMA3(x1, y1, ab1, aa1, bb1);                                                    \
            __m256d x2 = LOAD(a + i + 8), y2 = LOAD(b + i + 8), x3 = LOAD(a + i + 12),             \
                    y3 = LOAD(b + i + 12);                                                         \
            ADASUM_FMA3(x2, y2, ab2, aa2, bb2);                                                    \
            ADASUM_FMA3(x3, y3, ab3, aa3, bb3);                                                    \
        }                                                                                          \
        __m256d sum[3] = {_mm256_add_pd(_mm256_add_pd(ab0, ab1), _mm256_add_pd(ab2, ab3)),         \
                          _mm256_add_pd(_mm256_add_pd(aa0, aa1), _mm256_add_pd(aa2, aa3)),         \
                          _mm256_add_pd(_mm256_add_pd(bb0, bb1), _mm256_add_pd(bb2, bb3))};        \
        double lanes[4];                                                                           \
        for (int k = 0; k < 3; k++) {                                                              \
            _mm256_storeu_pd(lanes, sum[k]);                                                       \
            out[k] += (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);                               \
        }                                                                                          \
        TAIL(a + i, b + i, n - i, out); /* (the last n % 16 elements) */                           \
    }
DEFINE_DOTS_AVX2(dots_f32_avx2, float, ADASUM_LOAD_F32, dots_f32)
DEFINE_DOTS_AVX2(dots_f64_avx2, double, ADASUM_LOAD_F64, dots_f64)
/* (the combination in 32-byte vectors: half the stores) */
DEFINE_SCALED_ADD(scaled_add_f32_avx2, float, __attribute__((target("avx2,fma"))))
DEFINE_SCALED_ADD(scaled_add_f64_avx2, double, __attribute__((target("avx2,fma"))))

/* Whether the processor has AVX2 and FMA (asked once; every thread that asks gets the same
 * answer). */
static int have_avx2(void) {
    static int avx2 = -1;
    int has = __atomic_load_n(&avx2, __ATOMIC_RELAXED);
    if (has < 0) {
        has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        __atomic_store_n(&avx2, has, __ATOMIC_RELAXED);
    }
    return has;
}
#endif

/* NAME's AVX2 version where the processor has it, else NAME. */
#ifdef HVD_ADASUM_AVX2
#define AVX2_OR(NAME) (have_avx2() ? NAME##_avx2 : NAME)
#else
#define AVX2_OR(NAME) NAME
#endif

/* ---- the Gram matrix and weighted sums (hvd__adasum_gram, hvd__adasum_mix) ----------------- */

/* Where (i, j), i <= j, sits in an m x m Gram matrix's upper triangle, row by row. */
static size_t gram_at(int i, int j, int m) {
    return (size_t)i * (size_t)(2 * m - i + 1) / 2 + (size_t)(j - i);
}

/* out[gram_at(i, j, m)] += v[i] . v[j] over n elements, one dot product at a time in four
 * chains (the portable version, and the AVX2 one's for groups above four vectors) */
#define DEFINE_GRAM(NAME, T, ATTR)                                                                 \
    ATTR static void NAME(const T *const *v, int m, size_t n, double *out) {                       \
        for (int i = 0; i < m; i++)                                                                \
            for (int j = i; j < m; j++) {                                                          \
                const T *a = v[i], *b = v[j];                                                      \
                double d[4] = {0};                                                                 \
                size_t e = 0;                                                                      \
                for (; e + 4 <= n; e += 4)                                                         \
                    for (int l = 0; l < 4; l++)                                                    \
                        d[l] += (double)a[e + l] * b[e + l];                                       \
                for (; e < n; e++)                                                                 \
                    d[0] += (double)a[e] * b[e];                                                   \
                out[gram_at(i, j, m)] += (d[0] + d[1]) + (d[2] + d[3]);                            \
            }                                                                                      \
    }
DEFINE_GRAM(gram_f32, float, )
DEFINE_GRAM(gram_f64, double, )

/* out = the sum of w[i] v[i] over n elements, in T (the weights rounded to T, as the pairwise
 * combination's coefficients are); element e of out is written after element e of every v[i]
 * was read, so out may be one of v */
static void mix_f32(float *out, const float *const *v, const double *w, int m, size_t n) {
    float wf[HVD_ADASUM_GROUP_MAX];
    for (int i = 0; i < m; i++)
        wf[i] = (float)w[i];
    for (size_t e = 0; e < n; e++) {
        float acc = wf[0] * v[0][e];
        for (int i = 1; i < m; i++)
            acc += wf[i] * v[i][e];
        out[e] = acc;
    }
}
static void mix_f64(double *out, const double *const *v, const double *w, int m, size_t n) {
    for (size_t e = 0; e < n; e++) {
        double acc = w[0] * v[0][e];
        for (int i = 1; i < m; i++)
            acc += w[i] * v[i][e];
        out[e] = acc;
    }
}

#ifdef HVD_ADASUM_AVX2
/* out[i][k] = a[i] . b_k for four vectors a and two b: the products between two blocks of a
 * Gram matrix, each value loaded and widened once for the eight (six vectors and eight sums fit
 * the sixteen registers). */
#define DEFINE_CROSS_AVX2(NAME, T, LOAD)                                                           \
    __attribute__((target("avx2,fma"))) static void NAME(                                          \
        const T *const *a, const T *b0, const T *b1, size_t n, double out[4][2]) {                 \
        __m256d s00 = _mm256_setzero_pd(), s01 = s00, s10 = s00, s11 = s00, s20 = s00, s21 = s00,  \
                s30 = s00, s31 = s00;                                                              \
        size_t e = 0;                                                                              \
        for (; e + 4 <= n; e += 4) {                                                               \
            __m256d y0 = LOAD(b0 + e), y1 = LOAD(b1 + e), x = LOAD(a[0] + e);                      \
            s00 = _mm256_fmadd_pd(x, y0, s00);                                                     \
            s01 = _mm256_fmadd_pd(x, y1, s01);                                                     \
            x = LOAD(a[1] + e);                                                                    \
            s10 = _mm256_fmadd_pd(x, y0, s10);                                                     \
            s11 = _mm256_fmadd_pd(x, y1, s11);                                                     \
            x = LOAD(a[2] + e);                                                                    \
            s20 = _mm256_fmadd_pd(x, y0, s20);                                                     \
            s21 = _mm256_fmadd_pd(x, y1, s21);                                                     \
            x = LOAD(a[3] + e);                                                                    \
            s30 = _mm256_fmadd_pd(x, y0, s30);                                                     \
            s31 = _mm256_fmadd_pd(x, y1, s31);                                                     \
        }                                                                                          \
        const __m256d all[8] = {s00, s01, s10, s11, s20, s21, s30, s31};                           \
        double lanes[4];                                                                           \
        for (int i = 0; i < 8; i++) {                                                              \
            _mm256_storeu_pd(lanes, all[i]);                                                       \
            out[i / 2][i % 2] = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);                     \
        }                                                                                          \
        for (; e < n; e++) /* (the last n % 4 elements) */                                         \
            for (int i = 0; i < 4; i++) {                                                          \
                out[i][0] += (double)a[i][e] * b0[e];                                              \
                out[i][1] += (double)a[i][e] * b1[e];                                              \
            }                                                                                      \
    }
DEFINE_CROSS_AVX2(cross_f32_avx2, float, ADASUM_LOAD_F32)
DEFINE_CROSS_AVX2(cross_f64_avx2, double, ADASUM_LOAD_F64)

/* A Gram matrix: two vectors' by the pairwise dot products' kernel; three or four in one pass,
 * each vector's four values loaded and widened once for all ten products (the pairwise way
 * widens each value once per product; three repeat the first, whose extra products are
 * dropped); five to eight as blocks: the first four's, the rest's, and the products between
 * them four by two (pair by pair, eight vectors took 2.5x the loads and products, and np 8
 * ran 10 % slower than combining level by level). */
#define DEFINE_GRAM_AVX2(NAME, T, LOAD, DOTS, CROSS)                                               \
    __attribute__((target("avx2,fma"))) static void NAME(const T *const *v, int m, size_t n,       \
                                                         double *out) {                            \
        if (m == 1) {                                                                              \
            double d[3] = {0};                                                                     \
            DOTS(v[0], v[0], n, d);                                                                \
            out[0] += d[1];                                                                        \
            return;                                                                                \
        }                                                                                          \
        if (m > 4) { /* the first four's matrix, the rest's, and the products between */           \
            double sub[10] = {0}, rest[10] = {0}, cross[4][2];                                     \
            NAME(v, 4, n, sub);                                                                    \
            NAME(v + 4, m - 4, n, rest);                                                           \
            for (int i = 0; i < 4; i++)                                                            \
                for (int j = i; j < 4; j++)                                                        \
                    out[gram_at(i, j, m)] += sub[gram_at(i, j, 4)];                                \
            for (int i = 4; i < m; i++)                                                            \
                for (int j = i; j < m; j++)                                                        \
                    out[gram_at(i, j, m)] += rest[gram_at(i - 4, j - 4, m - 4)];                   \
            for (int j = 4; j < m; j += 2) {                                                       \
                CROSS(v, v[j], v[j + 1 < m ? j + 1 : j], n, cross);                                \
                for (int i = 0; i < 4; i++)                                                        \
                    for (int k = 0; k < 2 && j + k < m; k++)                                       \
                        out[gram_at(i, j + k, m)] += cross[i][k];                                  \
            }                                                                                      \
            return;                                                                                \
        }                                                                                          \
        if (m == 2) {                                                                              \
            double d[3] = {0};                                                                     \
            DOTS(v[0], v[1], n, d);                                                                \
            out[0] += d[1], out[1] += d[0], out[2] += d[2];                                        \
            return;                                                                                \
        }                                                                                          \
        const T *p0 = v[0], *p1 = v[1], *p2 = v[2], *p3 = m > 3 ? v[3] : p0;                       \
        __m256d s00 = _mm256_setzero_pd(), s01 = s00, s02 = s00, s03 = s00, s11 = s00, s12 = s00,  \
                s13 = s00, s22 = s00, s23 = s00, s33 = s00;                                        \
        size_t e = 0;                                                                              \
        for (; e + 4 <= n; e += 4) {                                                               \
            __m256d x0 = LOAD(p0 + e), x1 = LOAD(p1 + e), x2 = LOAD(p2 + e), x3 = LOAD(p3 + e);    \
            s00 = _mm256_fmadd_pd(x0, x0, s00);                                                    \
            s01 = _mm256_fmadd_pd(x0, x1, s01);                                                    \
            s02 = _mm256_fmadd_pd(x0, x2, s02);                                                    \
            s03 = _mm256_fmadd_pd(x0, x3, s03);                                                    \
            s11 = _mm256_fmadd_pd(x1, x1, s11);                                                    \
            s12 = _mm256_fmadd_pd(x1, x2, s12);                                                    \
            s13 = _mm256_fmadd_pd(x1, x3, s13);                                                    \
            s22 = _mm256_fmadd_pd(x2, x2, s22);                                                    \
            s23 = _mm256_fmadd_pd(x2, x3, s23);                                                    \
            s33 = _mm256_fmadd_pd(x3, x3, s33);                                                    \
        }                                                                                          \
        const __m256d all[10] = {s00, s01, s02, s03, s11, s12, s13, s22, s23, s33};                \
        double sum[4][4], lanes[4];                                                                \
        for (int i = 0, at = 0; i < 4; i++)                                                        \
            for (int j = i; j < 4; j++, at++) {                                                    \
                _mm256_storeu_pd(lanes, all[at]);                                                  \
                sum[i][j] = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);                         \
            }                                                                                      \
        const T *p[4] = {p0, p1, p2, p3};                                                          \
        for (; e < n; e++) /* (the last n % 4 elements) */                                         \
            for (int i = 0; i < 4; i++)                                                            \
                for (int j = i; j < 4; j++)                                                        \
                    sum[i][j] += (double)p[i][e] * p[j][e];                                        \
        for (int i = 0; i < m; i++)                                                                \
            for (int j = i; j < m; j++)                                                            \
                out[gram_at(i, j, m)] += sum[i][j];                                                \
    }
DEFINE_GRAM_AVX2(gram_f32_avx2, float, ADASUM_LOAD_F32, dots_f32_avx2, cross_f32_avx2)
DEFINE_GRAM_AVX2(gram_f64_avx2, double, ADASUM_LOAD_F64, dots_f64_avx2, cross_f64_avx2)
/* The weighted sum a vector register at a time (left to the compiler, the loop over the vectors
 * inside the loop over elements stayed scalar, and a tile of sums in between took three passes
 * more: either way it cost as much as combining level by level). */
#define DEFINE_MIX_AVX2(NAME, T, VEC, SET1, LOADU, STOREU, MUL, FMADD, TAIL)                       \
    __attribute__((target("avx2,fma"))) static void NAME(T *out, const T *const *v,                \
                                                         const double *w, int m, size_t n) {       \
        const size_t lanes = sizeof(VEC) / sizeof(T);                                              \
        VEC wv[HVD_ADASUM_GROUP_MAX];                                                              \
        for (int i = 0; i < m; i++)                                                                \
            wv[i] = SET1((T)w[i]);                                                                 \
        size_t e = 0;                                                                              \
        for (; e + lanes <= n; e += lanes) {                                                       \
            VEC acc = MUL(wv[0], LOADU(v[0] + e));                                                 \
            for (int i = 1; i < m; i++)                                                            \
                acc = FMADD(wv[i], LOADU(v[i] + e), acc);                                          \
            STOREU(out + e, acc);                                                                  \
        }                                                                                          \
        const T *rest[HVD_ADASUM_GROUP_MAX];                                                       \
        for (int i = 0; i < m; i++)                                                                \
            rest[i] = v[i] + e;                                                                    \
        TAIL(out + e, rest, w, m, n - e);                                                          \
    }
DEFINE_MIX_AVX2(mix_f32_avx2, float, __m256, _mm256_set1_ps, _mm256_loadu_ps, _mm256_storeu_ps,
                _mm256_mul_ps, _mm256_fmadd_ps, mix_f32)
DEFINE_MIX_AVX2(mix_f64_avx2, double, __m256d, _mm256_set1_pd, _mm256_loadu_pd, _mm256_storeu_pd,
                _mm256_mul_pd, _mm256_fmadd_pd, mix_f64)
#endif

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
            (AVX2_OR(dots_f32))((const float *)((const char *)a + off),
                                (const float *)((const char *)b + off), y - x, &sums[3 * k]);
        else
            (AVX2_OR(dots_f64))((const double *)((const char *)a + off),
                                (const double *)((const char *)b + off), y - x, &sums[3 * k]);
        k++;
    }
}

void hvd__adasum_coeffs(double ab, double aa, double bb, double *ca, double *cb) {
    /* Horovod's bound: a squared norm below sqrt(DBL_MIN) counts as a zero vector */
    const double tiny = sqrt(DBL_MIN);
    *ca = aa >= tiny ? 1.0 - ab / (2.0 * aa) : 1.0;
    *cb = bb >= tiny ? 1.0 - ab / (2.0 * bb) : 1.0;
}

void hvd__adasum_combine(const hvd_adasum_parts_t *t, const double *sums, void *out, const void *a,
                         const void *b, size_t lo, size_t hi) {
    size_t k = part_at(t, lo), x, y;
    while (next_overlap(t, lo, hi, &k, &x, &y)) {
        double ca, cb;
        hvd__adasum_coeffs(sums[3 * k], sums[3 * k + 1], sums[3 * k + 2], &ca, &cb);
        size_t off = (x - lo) * t->wsize;
        if (t->w == HVD_FLOAT32)
            (AVX2_OR(scaled_add_f32))((float *)((char *)out + off),
                                      (const float *)((const char *)a + off), ca,
                                      (const float *)((const char *)b + off), cb, y - x);
        else
            (AVX2_OR(scaled_add_f64))((double *)((char *)out + off),
                                      (const double *)((const char *)a + off), ca,
                                      (const double *)((const char *)b + off), cb, y - x);
        k++;
    }
}

void hvd__adasum_gram(const hvd_adasum_parts_t *t, double *sums, const void *const *v, int m,
                      size_t lo, size_t hi) {
    size_t k = part_at(t, lo), x, y, per = gram_at(m - 1, m - 1, m) + 1;
    const char *at[HVD_ADASUM_GROUP_MAX];
    while (next_overlap(t, lo, hi, &k, &x, &y)) {
        for (int i = 0; i < m; i++)
            at[i] = (const char *)v[i] + (x - lo) * t->wsize;
        if (t->w == HVD_FLOAT32)
            (AVX2_OR(gram_f32))((const float *const *)at, m, y - x, &sums[per * k]);
        else
            (AVX2_OR(gram_f64))((const double *const *)at, m, y - x, &sums[per * k]);
        k++;
    }
}

void hvd__adasum_mix(const hvd_adasum_parts_t *t, const double *w, void *out, const void *const *v,
                     int m, size_t lo, size_t hi) {
    size_t k = part_at(t, lo), x, y;
    const char *at[HVD_ADASUM_GROUP_MAX];
    while (next_overlap(t, lo, hi, &k, &x, &y)) {
        size_t off = (x - lo) * t->wsize;
        for (int i = 0; i < m; i++)
            at[i] = (const char *)v[i] + off;
        if (t->w == HVD_FLOAT32)
            (AVX2_OR(mix_f32))((float *)((char *)out + off), (const float *const *)at,
                               &w[(size_t)m * k], m, y - x);
        else
            (AVX2_OR(mix_f64))((double *)((char *)out + off), (const double *const *)at,
                               &w[(size_t)m * k], m, y - x);
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
