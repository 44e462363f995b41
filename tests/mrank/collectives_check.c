/* Correctness check of libhvd's blocking collectives, run as N processes under horovodrun.
 *
 * Written against the public header only. Every rank can compute every other rank's input
 * from (rank, index, dtype, op, check) with a small generator, so each rank computes the
 * expected result of every collective by itself, in the simplest scalar way, and compares it
 * element by element (bitwise, except float AVERAGE with a size that is not a power of two,
 * which may differ from the exact quotient by one unit in the last place). Every rank must
 * also get bitwise identical results: a hash of what each rank received is compared across
 * ranks after every group of checks.
 *
 * Modes (--mode):
 *   check       (default) every collective x dtype x op x count, in place and out of place,
 *               argument errors, mismatches between ranks, calls outside init/shutdown.
 *   reinit      hvd_init / allreduce / hvd_shutdown repeated (--iters, default 100).
 *   soak        write --dir/pid.R, wait for --dir/go, then run checked collectives for
 *               --seconds (a test script meanwhile pesters the data-plane ports).
 *   digest      allreduces with inexact sums; rank 0 prints a hash of every result, the
 *               same from two jobs only when they sum every element in the same order.
 *
 * The first failure is printed with full detail (collective, dtype, op, count, in place,
 * index, expected, got, the inputs) and the program exits 1; --keep-going prints up to 30
 * failures and goes on. Rank 0 prints a one-line summary. */
#include <hvd/hvd.h>

#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "check_clock.h"

#define MAX_RANKS 256
#define GUARD 64

/* ---- options and global state ------------------------------------------------------- */

enum {
    C_ALLREDUCE,
    C_EX,
    C_REDUCESCATTER,
    C_ALLGATHER,
    C_ALLGATHERV,
    C_ALLTOALL,
    C_BROADCAST,
    C_BARRIER,
    C_ERRORS,
    C_MISMATCH,
    C_NCOLL
};
static const char *const COLL_NAMES[C_NCOLL] = {
    "allreduce", "ex",        "reducescatter", "allgather", "allgatherv",
    "alltoall",  "broadcast", "barrier",       "errors",    "mismatch"};

static struct {
    const char *mode;
    int quick;
    int big;
    int keep_going;
    int timeout;
    int verbose;
    unsigned dtype_mask, op_mask, coll_mask;
    size_t counts[64];
    int ncounts;
    size_t max_count;
    const char *dir;
    double seconds;
    int iters;
} opt;

static int g_rank = -1, g_size = 0;
static long long g_pass, g_fail;
static uint64_t g_hash;

__attribute__((format(printf, 1, 2))) static void failf(const char *fmt, ...) {
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    g_fail++;
    if (g_fail <= 30)
        fprintf(stderr, "FAIL [rank %d of %d]: %s\n", g_rank, g_size, buf);
    if (!opt.keep_going) {
        fflush(stdout);
        fflush(stderr);
        exit(1);
    }
}

__attribute__((format(printf, 1, 2))) static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "collectives_check [rank %d]: ", g_rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

/* ---- data types --------------------------------------------------------------------- */

enum { K_INT, K_BOOL, K_F16, K_BF16, K_F32, K_F64 };

typedef struct {
    const char *name;
    hvd_dtype_t dt;
    int size; /* bytes */
    int kind;
    int sgn; /* signed integer */
} dtinfo_t;

static const dtinfo_t DTS[] = {
    {"uint8", HVD_UINT8, 1, K_INT, 0},       {"int8", HVD_INT8, 1, K_INT, 1},
    {"uint16", HVD_UINT16, 2, K_INT, 0},     {"int16", HVD_INT16, 2, K_INT, 1},
    {"int32", HVD_INT32, 4, K_INT, 1},       {"int64", HVD_INT64, 8, K_INT, 1},
    {"float16", HVD_FLOAT16, 2, K_F16, 0},   {"float32", HVD_FLOAT32, 4, K_F32, 0},
    {"float64", HVD_FLOAT64, 8, K_F64, 0},   {"bool", HVD_BOOL, 1, K_BOOL, 0},
    {"bfloat16", HVD_BFLOAT16, 2, K_BF16, 0}};
#define NDTS ((int)(sizeof DTS / sizeof DTS[0]))

static const dtinfo_t *dt_by(hvd_dtype_t dt) {
    for (int i = 0; i < NDTS; i++)
        if (DTS[i].dt == dt)
            return &DTS[i];
    return NULL;
}

static const char *op_name(int op) {
    switch (op) {
    case HVD_AVERAGE:
        return "average";
    case HVD_SUM:
        return "sum";
    case HVD_ADASUM:
        return "adasum";
    case HVD_MIN:
        return "min";
    case HVD_MAX:
        return "max";
    case HVD_PRODUCT:
        return "product";
    }
    return "-";
}

static const int REDUCE_OPS[] = {HVD_SUM, HVD_AVERAGE, HVD_MIN, HVD_MAX, HVD_PRODUCT};
#define NOPS ((int)(sizeof REDUCE_OPS / sizeof REDUCE_OPS[0]))

static int is_float(const dtinfo_t *d) {
    return d->kind == K_F16 || d->kind == K_BF16 || d->kind == K_F32 || d->kind == K_F64;
}

static uint64_t mask_of(const dtinfo_t *d) {
    return d->size == 8 ? ~0ULL : ((1ULL << (8 * d->size)) - 1);
}

static int64_t sext(const dtinfo_t *d, uint64_t raw) {
    if (d->size == 8)
        return (int64_t)raw;
    uint64_t sign = 1ULL << (8 * d->size - 1);
    raw &= mask_of(d);
    return (int64_t)(raw ^ sign) - (int64_t)sign;
}

static uint64_t ld(const dtinfo_t *d, const void *buf, size_t i) {
    const unsigned char *p = (const unsigned char *)buf + i * (size_t)d->size;
    switch (d->size) {
    case 1:
        return *p;
    case 2: {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    default: {
        uint64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    }
}

static void st(const dtinfo_t *d, void *buf, size_t i, uint64_t raw) {
    unsigned char *p = (unsigned char *)buf + i * (size_t)d->size;
    switch (d->size) {
    case 1:
        *p = (unsigned char)raw;
        break;
    case 2: {
        uint16_t v = (uint16_t)raw;
        memcpy(p, &v, 2);
        break;
    }
    case 4: {
        uint32_t v = (uint32_t)raw;
        memcpy(p, &v, 4);
        break;
    }
    default:
        memcpy(p, &raw, 8);
        break;
    }
}

/* ---- float16 / bfloat16, written here independently (round to nearest, ties to even) -- */

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0) {
        float f = (float)m * (1.0f / 16777216.0f); /* m * 2^-24, exact */
        return (h & 0x8000u) ? -f : f;
    }
    if (e == 31)
        x = sign | 0x7f800000u | (m << 13);
    else
        x = sign | ((e + 112u) << 23) | (m << 13);
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static uint16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu, man = x & 0x7fffffu;
    if (exp == 0xff)
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10)
            return (uint16_t)sign;
        uint32_t mm = man | 0x800000u;
        int shift = 14 - e;
        uint32_t q = mm >> shift, rem = mm & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u)))
            q++;
        return (uint16_t)(sign | q);
    }
    uint32_t h = ((uint32_t)e << 10) | (man >> 13), rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++; /* a carry into the exponent is right, up to infinity */
    return (uint16_t)(sign | h);
}

static float bf16_to_f32(uint16_t b) {
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static uint16_t f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu))
        return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static float raw_to_f32(const dtinfo_t *d, uint64_t raw) {
    switch (d->kind) {
    case K_F16:
        return f16_to_f32((uint16_t)raw);
    case K_BF16:
        return bf16_to_f32((uint16_t)raw);
    default: {
        uint32_t v = (uint32_t)raw;
        float f;
        memcpy(&f, &v, 4);
        return f;
    }
    }
}

static uint64_t f32_to_raw(const dtinfo_t *d, float f) {
    switch (d->kind) {
    case K_F16:
        return f32_to_f16(f);
    case K_BF16:
        return f32_to_bf16(f);
    default: {
        uint32_t v;
        memcpy(&v, &f, 4);
        return v;
    }
    }
}

static double raw_to_f64(uint64_t raw) {
    double x;
    memcpy(&x, &raw, 8);
    return x;
}

static uint64_t f64_to_raw(double x) {
    uint64_t raw;
    memcpy(&raw, &x, 8);
    return raw;
}

/* A number for messages. */
static double raw_num(const dtinfo_t *d, uint64_t raw) {
    switch (d->kind) {
    case K_INT:
        return d->sgn ? (double)sext(d, raw) : (double)raw;
    case K_BOOL:
        return (double)raw;
    case K_F64:
        return raw_to_f64(raw);
    default:
        return (double)raw_to_f32(d, raw);
    }
}

static const char *fmt_val(const dtinfo_t *d, uint64_t raw, char *buf, size_t n) {
    if (d->kind == K_INT && d->sgn)
        snprintf(buf, n, "0x%0*" PRIx64 " (%" PRId64 ")", 2 * d->size, raw, sext(d, raw));
    else if (d->kind == K_INT || d->kind == K_BOOL)
        snprintf(buf, n, "0x%0*" PRIx64 " (%" PRIu64 ")", 2 * d->size, raw, raw);
    else
        snprintf(buf, n, "0x%0*" PRIx64 " (%.17g)", 2 * d->size, raw, raw_num(d, raw));
    return buf;
}

/* Distance in units in the last place between two values of a float type. */
static uint64_t ulp_dist(const dtinfo_t *d, uint64_t a, uint64_t b) {
    uint64_t sign = 1ULL << (8 * d->size - 1);
    int64_t oa = (a & sign) ? -(int64_t)(a & ~sign) : (int64_t)a;
    int64_t ob = (b & sign) ? -(int64_t)(b & ~sign) : (int64_t)b;
    return oa > ob ? (uint64_t)(oa - ob) : (uint64_t)(ob - oa);
}

static void selftest_half(void) {
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu))
            continue; /* NaN */
        if (f32_to_f16(f16_to_f32((uint16_t)h)) != h)
            die("self-test: float16 round trip of 0x%04x", h);
        if ((h & 0x7f80u) == 0x7f80u && (h & 0x7fu))
            continue;
        if (f32_to_bf16(bf16_to_f32((uint16_t)h)) != h)
            die("self-test: bfloat16 round trip of 0x%04x", h);
    }
    /* ties go to even, overflow goes to infinity, tiny values to zero or the subnormals */
    struct {
        float f;
        uint16_t h;
    } c16[] = {{1.0f + 0x1p-11f, 0x3c00}, {1.0f + 0x3p-11f, 0x3c02}, {65504.0f, 0x7bff},
               {65519.0f, 0x7bff},        {65520.0f, 0x7c00},        {0x1p-24f, 0x0001},
               {0x1p-25f, 0x0000},        {0x1.8p-24f, 0x0002},      {0x1.000002p-25f, 0x0001},
               {-2.5f, 0xc100},           {0x1.ffcp-15f, 0x0400},    {0x1.ff4p-15f, 0x03fe}};
    for (size_t i = 0; i < sizeof c16 / sizeof c16[0]; i++)
        if (f32_to_f16(c16[i].f) != c16[i].h)
            die("self-test: float16 of %a gives 0x%04x, want 0x%04x", (double)c16[i].f,
                f32_to_f16(c16[i].f), c16[i].h);
    struct {
        float f;
        uint16_t b;
    } cb[] = {{1.0f + 0x1p-8f, 0x3f80}, {1.0f + 0x3p-8f, 0x3f82}, {1.0f + 0x1.04p-8f, 0x3f81}};
    for (size_t i = 0; i < sizeof cb / sizeof cb[0]; i++)
        if (f32_to_bf16(cb[i].f) != cb[i].b)
            die("self-test: bfloat16 of %a gives 0x%04x, want 0x%04x", (double)cb[i].f,
                f32_to_bf16(cb[i].f), cb[i].b);
#if defined(__FLT16_MAX__)
    /* where the compiler has _Float16, it must agree on many values */
    uint64_t s = 12345;
    for (int i = 0; i < 200000; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        uint32_t x = (uint32_t)(s >> 32);
        float f;
        memcpy(&f, &x, 4);
        if (f != f)
            continue;
        _Float16 g = (_Float16)f;
        uint16_t gb;
        memcpy(&gb, &g, 2);
        if (gb != f32_to_f16(f))
            die("self-test: float16 of %a: 0x%04x here, 0x%04x by the compiler", (double)f,
                f32_to_f16(f), gb);
    }
#endif
}

/* ---- the input generator ------------------------------------------------------------ */

static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

enum { DOM_BITS, DOM_REDUCE, DOM_SCALE };

typedef struct {
    const dtinfo_t *d;
    int op;
    int dom;
    uint64_t salt;
    uint64_t key[MAX_RANKS]; /* per rank, from the salt: filled by gen_make */
} gen_t;

static uint64_t salt_of(int coll, int dt, int op, size_t count, int inplace, int extra) {
    uint64_t h = mix((uint64_t)coll * 1000003ULL + (uint64_t)dt);
    h = mix(h ^ ((uint64_t)op + 17));
    h = mix(h ^ (uint64_t)count);
    h = mix(h ^ ((uint64_t)inplace * 77 + (uint64_t)(unsigned)extra * 7919));
    return h;
}

static const double PROD8[8] = {-1.0, 1.0, 2.0, 0.5, -2.0, 3.0, -3.0, 1.5};
static const double PROD4[4] = {-1.0, 1.0, 2.0, 0.5};

static void gen_make(gen_t *g, const dtinfo_t *d, int op, int dom, uint64_t salt) {
    g->d = d;
    g->op = op;
    g->dom = dom;
    g->salt = salt;
    for (int r = 0; r < MAX_RANKS && r < (g_size > 0 ? g_size : 1); r++)
        g->key[r] = mix(salt ^ ((uint64_t)(r + 1) * 0xD1B54A32D192ED03ULL));
}

/* Raw bits of rank `rank`'s element `idx`: the same on every rank. */
static uint64_t gen_raw(const gen_t *g, int rank, size_t idx) {
    const dtinfo_t *d = g->d;
    uint64_t h = mix(g->key[rank] ^ ((uint64_t)idx * 0x9E3779B97F4A7C15ULL));
    int and_op = g->op == HVD_MIN || g->op == HVD_PRODUCT;
    if (g->dom == DOM_BITS)
        return d->kind == K_BOOL ? (h & 1) : (h & mask_of(d));
    if (g->dom == DOM_SCALE) {
        /* small even values (at most 8, or -4..4 where signed): scaled sums stay exact and
         * in range for every type; for the narrow integers the largest value shrinks with
         * the ranks (a sum of 16 ranks' 8 x 3 overflows a uint8) */
        int64_t m = d->sgn || is_float(d) ? 4 : 8;
        if (d->kind == K_INT) {
            int64_t smax = (int64_t)(d->sgn ? mask_of(d) >> 1 : mask_of(d)) / 3 / g_size;
            if (smax < m)
                m = smax & ~(int64_t)1;
        }
        int64_t half = m / 2;
        int64_t v = d->sgn || is_float(d) ? 2 * (int64_t)(h % (uint64_t)(2 * half + 1)) - m
                                          : 2 * (int64_t)(h % (uint64_t)(half + 1));
        switch (d->kind) {
        case K_INT:
            return (uint64_t)v & mask_of(d);
        case K_F64:
            return f64_to_raw((double)v);
        default:
            return f32_to_raw(d, (float)v);
        }
    }
    switch (d->kind) {
    case K_BOOL:
        /* biased so that neither OR nor AND is almost always the same */
        return and_op ? (h % 8 != 0) : (h % 8 == 0);
    case K_INT: {
        uint64_t m = mask_of(d), smax = d->sgn ? m >> 1 : m;
        switch (h % 23) {
        case 0:
            return smax; /* largest */
        case 1:
            return d->sgn ? (smax + 1) & m : 0; /* smallest */
        case 2:
            return 0;
        case 3:
            return 1;
        case 4:
            return m; /* -1 or the largest unsigned */
        default:
            return ((h >> 7) | (h << 57)) & m; /* anything: sums and products wrap */
        }
    }
    case K_F16:
        if (g->op == HVD_PRODUCT)
            return f32_to_f16((float)PROD4[h % 4]);
        /* k/256 in [-8, 8]: exact in float16; float32 sums of up to 8 need 14 bits */
        return f32_to_f16((float)((int)(h % 4097) - 2048) / 256.0f);
    case K_BF16:
        if (g->op == HVD_PRODUCT)
            return f32_to_bf16((float)PROD4[h % 4]);
        /* k/32 in [-8, 8]: exact in bfloat16; sums need up to 11 bits, so rounding shows */
        return f32_to_bf16((float)((int)(h % 513) - 256) / 32.0f);
    case K_F32: {
        if (g->op == HVD_PRODUCT)
            return f32_to_raw(d, (float)PROD8[h % 8]);
        float f = (float)((int64_t)(h % (1ULL << 20)) - (1LL << 19)) / 256.0f;
        return f32_to_raw(d, f);
    }
    default: {
        if (g->op == HVD_PRODUCT)
            return f64_to_raw(PROD8[h % 8]);
        double x = ldexp((double)((int64_t)(h % (1ULL << 47)) - (1LL << 46)), -20);
        return f64_to_raw(x);
    }
    }
}

/* ---- the reference reductions ------------------------------------------------------- */

static int pow2(int n) {
    return n > 0 && (n & (n - 1)) == 0;
}

static uint64_t ref_reduce(const dtinfo_t *d, int op, const uint64_t *v, int n) {
    uint64_t m = mask_of(d);
    switch (d->kind) {
    case K_BOOL: {
        int and_op = op == HVD_MIN || op == HVD_PRODUCT;
        int acc = and_op;
        for (int r = 0; r < n; r++)
            acc = and_op ? (acc && v[r] != 0) : (acc || v[r] != 0);
        return (uint64_t)acc;
    }
    case K_INT: {
        if (op == HVD_SUM || op == HVD_AVERAGE) {
            uint64_t s = 0;
            for (int r = 0; r < n; r++)
                s += v[r];
            s &= m;
            if (op == HVD_SUM)
                return s;
            /* the sum wrapped to the type, then divided, truncating toward zero */
            if (d->sgn)
                return (uint64_t)(sext(d, s) / n) & m;
            return s / (uint64_t)n;
        }
        if (op == HVD_PRODUCT) {
            uint64_t p = 1;
            for (int r = 0; r < n; r++)
                p *= v[r];
            return p & m;
        }
        uint64_t best = v[0];
        for (int r = 1; r < n; r++) {
            int less = d->sgn ? sext(d, v[r]) < sext(d, best) : v[r] < best;
            int greater = d->sgn ? sext(d, v[r]) > sext(d, best) : v[r] > best;
            if ((op == HVD_MIN && less) || (op == HVD_MAX && greater))
                best = v[r];
        }
        return best;
    }
    case K_F64: {
        double acc = raw_to_f64(v[0]);
        for (int r = 1; r < n; r++) {
            double x = raw_to_f64(v[r]);
            switch (op) {
            case HVD_SUM:
            case HVD_AVERAGE:
                acc += x;
                break;
            case HVD_PRODUCT:
                acc *= x;
                break;
            case HVD_MIN:
                acc = x < acc ? x : acc;
                break;
            default:
                acc = x > acc ? x : acc;
                break;
            }
        }
        if (op == HVD_AVERAGE)
            acc /= n;
        return f64_to_raw(acc);
    }
    default: {
        /* float16, bfloat16, float32: in float32, in rank order, rounded once */
        float acc = raw_to_f32(d, v[0]);
        for (int r = 1; r < n; r++) {
            float x = raw_to_f32(d, v[r]);
            switch (op) {
            case HVD_SUM:
            case HVD_AVERAGE:
                acc += x;
                break;
            case HVD_PRODUCT:
                acc *= x;
                break;
            case HVD_MIN:
                acc = x < acc ? x : acc;
                break;
            default:
                acc = x > acc ? x : acc;
                break;
            }
        }
        if (op == HVD_AVERAGE)
            acc /= (float)n;
        return f32_to_raw(d, acc);
    }
    }
}

/* For messages only: integer AVERAGE computed from the unwrapped sum. */
static uint64_t alt_int_average(const dtinfo_t *d, const uint64_t *v, int n) {
    __int128 s = 0;
    for (int r = 0; r < n; r++)
        s += d->sgn ? (__int128)sext(d, v[r]) : (__int128)v[r];
    return (uint64_t)(s / n) & mask_of(d);
}

/* ---- checking ----------------------------------------------------------------------- */

typedef struct {
    const char *coll;
    const dtinfo_t *d;
    int op;
    size_t count;
    int inplace;
    int root;
    const char *note;
} where_t;

static const char *where_str(const where_t *w, char *buf, size_t n) {
    int k = snprintf(buf, n, "%s dtype=%s", w->coll, w->d ? w->d->name : "-");
    if (w->op >= 0)
        k += snprintf(buf + k, n - (size_t)k, " op=%s", op_name(w->op));
    k += snprintf(buf + k, n - (size_t)k, " count=%zu inplace=%d", w->count, w->inplace);
    if (w->root >= 0)
        k += snprintf(buf + k, n - (size_t)k, " root=%d", w->root);
    if (w->note)
        snprintf(buf + k, n - (size_t)k, " [%s]", w->note);
    return buf;
}

static int expect_status(const where_t *w, hvd_status_t got, hvd_status_t want) {
    if (got == want) {
        g_pass++;
        return 1;
    }
    char wb[512];
    failf("%s: returned %s (%d)%s%s, expected %s", where_str(w, wb, sizeof wb), hvd_status_str(got),
          got, got != HVD_OK ? ": " : "", got != HVD_OK ? hvd_last_error() : "",
          hvd_status_str(want));
    return 0;
}

/* Reports one bad element with everything needed to reproduce it. */
static void report_elem(const where_t *w, const char *what, size_t idx, uint64_t exp, uint64_t got,
                        const uint64_t *inputs, const int *from, int ninputs) {
    char wb[512], eb[96], gb[96], ib[1024] = "";
    size_t k = 0;
    for (int r = 0; r < ninputs && k < sizeof ib - 100; r++) {
        char vb[96];
        k += (size_t)snprintf(ib + k, sizeof ib - k, "%s r%d=%s",
                              r ? "," : " inputs:", from ? from[r] : r,
                              fmt_val(w->d, inputs[r], vb, sizeof vb));
    }
    if (w->d->kind == K_INT && w->op == HVD_AVERAGE && inputs && !from) {
        char ab[96];
        k += (size_t)snprintf(ib + k, sizeof ib - k, " (average of the unwrapped sum: %s)",
                              fmt_val(w->d, alt_int_average(w->d, inputs, ninputs), ab, sizeof ab));
    }
    failf("%s: %s index=%zu expected=%s got=%s%s", where_str(w, wb, sizeof wb), what, idx,
          fmt_val(w->d, exp, eb, sizeof eb), fmt_val(w->d, got, gb, sizeof gb), ib);
}

static unsigned char *buf_new(size_t bytes) {
    unsigned char *p = malloc(bytes + GUARD);
    if (!p)
        die("out of memory (%zu bytes)", bytes);
    memset(p, 0x5A, bytes);
    memset(p + bytes, 0xA5, GUARD);
    return p;
}

static int guard_ok(const where_t *w, const unsigned char *p, size_t bytes, const char *which) {
    if (!p)
        return 1;
    for (size_t i = 0; i < GUARD; i++)
        if (p[bytes + i] != 0xA5) {
            char wb[512];
            failf("%s: %s written past its end (byte %zu after the last element is 0x%02x)",
                  where_str(w, wb, sizeof wb), which, i, p[bytes + i]);
            return 0;
        }
    return 1;
}

static void hash_bytes(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = g_hash ^ 0xcbf29ce484222325ULL;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        h = (h ^ w) * 0x100000001b3ULL;
        h ^= h >> 29;
    }
    for (; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ULL;
    g_hash = mix(h + n);
}

/* Checks buf[i] == reduction over `n` ranks of gen(rank, base + i). */
static int verify_reduced(const where_t *w, const gen_t *g, const void *buf, size_t count,
                          size_t base, int n) {
    uint64_t in[MAX_RANKS];
    int tol = is_float(w->d) && w->op == HVD_AVERAGE && !pow2(n);
    for (size_t i = 0; i < count; i++) {
        for (int r = 0; r < n; r++)
            in[r] = gen_raw(g, r, base + i);
        uint64_t exp = ref_reduce(w->d, w->op, in, n), got = ld(w->d, buf, i);
        if (got != exp && !(tol && ulp_dist(w->d, got, exp) <= 1)) {
            report_elem(w, "result", i, exp, got, in, NULL, n);
            return 0;
        }
    }
    g_pass++;
    return 1;
}

/* The same for a result every rank holds whole (an allreduce's), which the caller hashes for
 * agree(): each rank checks its 1/size share against the reference, and the hashes' agreement
 * extends that to every element on every rank. (Every rank checking everything cost the job
 * count * size^2 reference values: most of an np 8 run's CPU.) */
static int verify_reduced_shared(const where_t *w, const gen_t *g, const void *buf, size_t count,
                                 int n) {
    size_t lo = count * (size_t)g_rank / (size_t)g_size,
           hi = count * (size_t)(g_rank + 1) / (size_t)g_size;
    const unsigned char *p = (const unsigned char *)buf + lo * (size_t)w->d->size;
    if (lo == hi) {
        g_pass++;
        return 1;
    }
    /* (indices in a report are then relative to lo: say where the share starts) */
    where_t part = *w;
    char note[96];
    snprintf(note, sizeof note, "%s%sthis rank's share from index %zu", w->note ? w->note : "",
             w->note ? "; " : "", lo);
    part.note = note;
    return verify_reduced(&part, g, p, hi - lo, lo, n);
}

/* Checks buf[i] == gen(rank, base + i): the data of one rank. */
static int verify_copy(const where_t *w, const gen_t *g, const void *buf, size_t count, int rank,
                       size_t base, const char *what) {
    for (size_t i = 0; i < count; i++) {
        uint64_t exp = gen_raw(g, rank, base + i), got = ld(w->d, buf, i);
        if (got != exp) {
            char what2[128];
            snprintf(what2, sizeof what2, "%s (data of rank %d at its index %zu)", what, rank,
                     base + i);
            report_elem(w, what2, i, exp, got, NULL, NULL, 0);
            return 0;
        }
    }
    g_pass++;
    return 1;
}

static void fill(const gen_t *g, void *buf, size_t count, int rank, size_t base) {
    for (size_t i = 0; i < count; i++)
        st(g->d, buf, i, gen_raw(g, rank, base + i));
}

/* Every rank must have hashed the same bytes since the last call. */
static void agree(const char *label) {
    int64_t mine = (int64_t)g_hash, all[MAX_RANKS];
    hvd_status_t s = hvd_allgather(&mine, 1, all, HVD_INT64);
    where_t w = {"allgather(hash)", dt_by(HVD_INT64), -1, 1, 0, -1, label};
    if (expect_status(&w, s, HVD_OK)) {
        for (int r = 0; r < g_size; r++)
            if (all[r] != mine) {
                failf("%s: results differ between ranks: rank %d hash %016" PRIx64
                      ", rank %d hash %016" PRIx64,
                      label, g_rank, (uint64_t)mine, r, (uint64_t)all[r]);
                break;
            }
    }
    g_hash = 0;
}

/* (ADASUM is run here only where it is refused: adasum_check.c checks its values) */
static hvd_status_t reduce_status(const dtinfo_t *d, int op) {
    if (op == HVD_ADASUM || (d->kind == K_BOOL && op == HVD_AVERAGE))
        return HVD_ERR_INVALID_ARG;
    return HVD_OK;
}

/* ---- which checks to run ------------------------------------------------------------ */

static const size_t COUNTS_FULL[] = {0, 1, 2, 3, 7, 13, 31, 127, 1021, 4099, 65537, 262147};
static const size_t COUNTS_QUICK[] = {0, 1, 3, 13, 127, 1021, 65537, 262147};

static int want_coll(int c) {
    return (opt.coll_mask >> c) & 1u;
}
static int want_dt(const dtinfo_t *d) {
    return (opt.dtype_mask >> d->dt) & 1u;
}
static int want_op(int op) {
    return (opt.op_mask >> op) & 1u;
}

static int is_large(size_t count) {
    return count > 4099;
}

/* In --quick, counts above 4099 only for a few dtype/op pairs that cover the chunked paths:
 * float16 and bfloat16 (accumulation across chunks), a wrapping integer product, float32. */
static int large_ok(const dtinfo_t *d, int op) {
    if (!opt.quick)
        return 1;
    return (d->dt == HVD_FLOAT32 && op == HVD_SUM) || (d->dt == HVD_FLOAT16 && op == HVD_SUM) ||
           (d->dt == HVD_BFLOAT16 && op == HVD_AVERAGE) || (d->dt == HVD_INT64 && op == HVD_SUM) ||
           (d->dt == HVD_INT8 && op == HVD_PRODUCT) || (d->dt == HVD_UINT16 && op == HVD_MIN) ||
           (d->dt == HVD_BOOL && op == HVD_MAX) || (d->dt == HVD_UINT8 && op < 0);
}

static int count_ok(const dtinfo_t *d, int op, size_t count) {
    if (count > opt.max_count)
        return 0;
    return !is_large(count) || large_ok(d, op);
}

/* ---- allreduce and reducescatter ---------------------------------------------------- */

static void t_allreduce_one(const dtinfo_t *d, int op, size_t count, int inplace) {
    where_t w = {"allreduce", d, op, count, inplace, -1, NULL};
    gen_t g;
    gen_make(&g, d, op, DOM_REDUCE, salt_of(C_ALLREDUCE, d->dt, op, count, inplace, 0));
    size_t bytes = count * (size_t)d->size;
    int null_bufs = count == 0 && inplace; /* count 0 may come with NULL buffers */
    unsigned char *sb = null_bufs ? NULL : buf_new(bytes);
    unsigned char *rb = inplace ? sb : buf_new(bytes);
    if (sb)
        fill(&g, sb, count, g_rank, 0);
    hvd_status_t s = hvd_allreduce(sb, rb, count, d->dt, (hvd_reduce_op_t)op);
    if (expect_status(&w, s, reduce_status(d, op)) && s == HVD_OK) {
        if (rb)
            verify_reduced_shared(&w, &g, rb, count, g_size);
        else
            g_pass++; /* (count 0 with no buffers: nothing to check) */
        if (!inplace)
            verify_copy(&w, &g, sb, count, g_rank, 0, "send buffer changed");
        guard_ok(&w, sb, bytes, "buffer");
        if (!inplace)
            guard_ok(&w, rb, bytes, "recvbuf");
        if (rb)
            hash_bytes(rb, bytes);
    }
    free(sb);
    if (!inplace)
        free(rb);
}

static void t_reducescatter_one(const dtinfo_t *d, int op, size_t count, int inplace) {
    where_t w = {"reducescatter", d, op, count, inplace, -1, NULL};
    gen_t g;
    gen_make(&g, d, op, DOM_REDUCE, salt_of(C_REDUCESCATTER, d->dt, op, count, inplace, 0));
    size_t total = count * (size_t)g_size, sbytes = total * (size_t)d->size;
    size_t rbytes = count * (size_t)d->size;
    int null_bufs = count == 0 && inplace;
    unsigned char *sb = null_bufs ? NULL : buf_new(sbytes);
    unsigned char *rb = inplace ? sb : buf_new(rbytes);
    if (sb)
        fill(&g, sb, total, g_rank, 0);
    hvd_status_t s = hvd_reducescatter(sb, rb, count, d->dt, (hvd_reduce_op_t)op);
    if (expect_status(&w, s, reduce_status(d, op)) && s == HVD_OK) {
        verify_reduced(&w, &g, rb, count, (size_t)g_rank * count, g_size);
        if (!inplace) {
            verify_copy(&w, &g, sb, total, g_rank, 0, "send buffer changed");
            guard_ok(&w, rb, rbytes, "recvbuf");
        }
        guard_ok(&w, sb, sbytes, "sendbuf");
    }
    free(sb);
    if (!inplace)
        free(rb);
}

static void t_reductions(int coll) {
    const size_t *counts = opt.counts;
    for (int di = 0; di < NDTS; di++) {
        const dtinfo_t *d = &DTS[di];
        if (!want_dt(d))
            continue;
        double t0 = now_s();
        for (int oi = 0; oi < NOPS; oi++) {
            int op = REDUCE_OPS[oi];
            if (!want_op(op))
                continue;
            for (int ci = 0; ci < opt.ncounts; ci++) {
                if (!count_ok(d, op, counts[ci]))
                    continue;
                for (int inplace = 0; inplace < 2; inplace++) {
                    if (coll == C_ALLREDUCE)
                        t_allreduce_one(d, op, counts[ci], inplace);
                    else
                        t_reducescatter_one(d, op, counts[ci], inplace);
                }
            }
        }
        /* ADASUM is refused, whatever the count, by reducescatter and for non-float dtypes */
        if (want_op(HVD_ADASUM) && (coll != C_ALLREDUCE || !is_float(d))) {
            for (int inplace = 0; inplace < 2; inplace++) {
                if (coll == C_ALLREDUCE)
                    t_allreduce_one(d, HVD_ADASUM, inplace ? 7 : 0, inplace);
                else
                    t_reducescatter_one(d, HVD_ADASUM, inplace ? 7 : 0, inplace);
            }
        }
        if (coll == C_ALLREDUCE) {
            char label[64];
            snprintf(label, sizeof label, "allreduce %s", d->name);
            agree(label);
        }
        if (opt.verbose && g_rank == 0)
            printf("  %s %s: %.2f s\n", COLL_NAMES[coll], d->name, now_s() - t0);
    }
}

/* ---- allreduce_ex: scaling and communicators ---------------------------------------- */

static int comm_members(hvd_comm_t comm) {
    switch (comm) {
    case HVD_COMM_GLOBAL:
        return g_size;
    case HVD_COMM_LOCAL:
        /* one host: the local communicator is the global one */
        return hvd_local_size() == g_size ? g_size : -1;
    default:
        return hvd_cross_size() == 1 ? 1 : -1;
    }
}

static uint64_t ref_scaled(const dtinfo_t *d, int op, const uint64_t *v, int n, double pre,
                           double post) {
    if (d->kind == K_INT || d->kind == K_F64) {
        double acc = 0;
        for (int r = 0; r < n; r++)
            acc += pre * raw_num(d, v[r]);
        if (op == HVD_AVERAGE)
            acc /= n;
        acc *= post;
        if (d->kind == K_F64)
            return f64_to_raw(acc);
        return (uint64_t)(int64_t)trunc(acc) & mask_of(d);
    }
    float acc = 0;
    for (int r = 0; r < n; r++)
        acc += (float)pre * raw_to_f32(d, v[r]);
    if (op == HVD_AVERAGE)
        acc /= (float)n;
    acc *= (float)post;
    return f32_to_raw(d, acc);
}

static void t_ex_one(const dtinfo_t *d, int op, size_t count, int inplace, double pre, double post,
                     hvd_comm_t comm) {
    static const char *const CN[] = {"global", "local", "cross"};
    char note[96];
    snprintf(note, sizeof note, "prescale=%g postscale=%g comm=%s", pre, post, CN[comm]);
    where_t w = {"allreduce_ex", d, op, count, inplace, -1, note};
    int n = comm_members(comm);
    if (n < 0)
        return; /* several hosts: the members are not known here */
    gen_t g;
    gen_make(&g, d, op, DOM_SCALE,
             salt_of(C_EX, d->dt, op, count, inplace, (int)(pre * 8) + 100 * (int)comm));
    size_t bytes = count * (size_t)d->size;
    unsigned char *sb = buf_new(bytes), *rb = inplace ? sb : buf_new(bytes);
    /* the members' ranks in the communicator: on one host global = local, cross = self */
    int self = comm == HVD_COMM_CROSS ? 0 : g_rank;
    int gen_rank_of[MAX_RANKS];
    for (int r = 0; r < n; r++)
        gen_rank_of[r] = comm == HVD_COMM_CROSS ? g_rank : r;
    fill(&g, sb, count, gen_rank_of[self], 0);
    hvd_status_t s = hvd_allreduce_ex(sb, rb, count, d->dt, (hvd_reduce_op_t)op, pre, post, comm);
    if (expect_status(&w, s, HVD_OK)) {
        uint64_t in[MAX_RANKS];
        int tol = is_float(d) && op == HVD_AVERAGE && !pow2(n);
        for (size_t i = 0; i < count; i++) {
            for (int r = 0; r < n; r++)
                in[r] = gen_raw(&g, gen_rank_of[r], i);
            uint64_t exp = ref_scaled(d, op, in, n, pre, post), got = ld(d, rb, i);
            if (got != exp && !(tol && ulp_dist(d, got, exp) <= 1)) {
                report_elem(&w, "result", i, exp, got, in, gen_rank_of, n);
                break;
            }
        }
        g_pass++;
        guard_ok(&w, sb, bytes, "buffer");
        if (!inplace)
            guard_ok(&w, rb, bytes, "recvbuf");
    }
    free(sb);
    if (!inplace)
        free(rb);
}

static void t_ex(void) {
    static const double SCALES[][2] = {{0.5, 2.0}, {3.0, 0.25}, {2.0, 1.0}, {1.0, 0.5}};
    static const size_t EXC[] = {0, 1, 7, 1021, 65537};
    for (int di = 0; di < NDTS; di++) {
        const dtinfo_t *d = &DTS[di];
        if (!want_dt(d) || d->kind == K_BOOL)
            continue;
        for (int comm = 0; comm < 3; comm++)
            for (int si = 0; si < 4; si++)
                for (int oi = 0; oi < 2; oi++) {
                    int op = oi ? HVD_AVERAGE : HVD_SUM;
                    /* integer AVERAGE with scaling: where the rounding happens is not
                     * specified; only SUM is checked for integers */
                    if (!want_op(op) || (op == HVD_AVERAGE && d->kind == K_INT))
                        continue;
                    for (size_t ci = 0; ci < sizeof EXC / sizeof EXC[0]; ci++) {
                        size_t count = EXC[ci];
                        if (count > opt.max_count ||
                            (is_large(count) && d->dt != HVD_FLOAT32 && d->dt != HVD_INT32) ||
                            (is_large(count) && (opt.quick || comm != HVD_COMM_GLOBAL)))
                            continue;
                        t_ex_one(d, op, count, (int)(ci + (size_t)si) & 1, SCALES[si][0],
                                 SCALES[si][1], (hvd_comm_t)comm);
                    }
                }
    }
    /* 1.0 and 1.0 are plain allreduce, whatever the op */
    if (want_dt(dt_by(HVD_INT32))) {
        where_t w = {"allreduce_ex", dt_by(HVD_INT32), HVD_MIN, 13, 0, -1, "1.0/1.0"};
        gen_t g;
        gen_make(&g, w.d, HVD_MIN, DOM_REDUCE, salt_of(C_EX, HVD_INT32, HVD_MIN, 13, 0, 999));
        int32_t sb[13], rb[13];
        fill(&g, sb, 13, g_rank, 0);
        if (expect_status(
                &w, hvd_allreduce_ex(sb, rb, 13, HVD_INT32, HVD_MIN, 1.0, 1.0, HVD_COMM_GLOBAL),
                HVD_OK))
            verify_reduced(&w, &g, rb, 13, 0, g_size);
    }
}

/* ---- data movement ------------------------------------------------------------------ */

static void t_allgather_one(const dtinfo_t *d, size_t count) {
    where_t w = {"allgather", d, -1, count, 0, -1, NULL};
    gen_t g;
    gen_make(&g, d, -1, DOM_BITS, salt_of(C_ALLGATHER, d->dt, 0, count, 0, 0));
    size_t bytes = count * (size_t)d->size, rbytes = bytes * (size_t)g_size;
    unsigned char *sb = count ? buf_new(bytes) : NULL, *rb = count ? buf_new(rbytes) : NULL;
    if (sb)
        fill(&g, sb, count, g_rank, 0);
    hvd_status_t s = hvd_allgather(sb, count, rb, d->dt);
    if (expect_status(&w, s, HVD_OK)) {
        for (int q = 0; q < g_size; q++)
            if (!verify_copy(&w, &g, rb + (size_t)q * bytes, count, q, 0, "block"))
                break;
        guard_ok(&w, rb, rbytes, "recvbuf");
        if (sb)
            verify_copy(&w, &g, sb, count, g_rank, 0, "send buffer changed");
        if (rb)
            hash_bytes(rb, rbytes);
    }
    free(sb);
    free(rb);
}

#define NPATTERNS 7
static void av_counts(int pat, size_t *c) {
    for (int r = 0; r < g_size; r++) {
        switch (pat) {
        case 0:
            c[r] = (size_t)((r * 7 + 3) % 5); /* small, some zero */
            break;
        case 1:
            c[r] = r == g_size - 1 ? 13 : 0; /* only the last rank */
            break;
        case 2:
            c[r] = 0; /* nobody */
            break;
        case 3:
            c[r] = r == 0 ? 1 : 0; /* only the first rank */
            break;
        case 4:
            c[r] = 127; /* even */
            break;
        case 5:
            c[r] = r % 3 == 1 ? 0 : 1021 * (size_t)(r + 1) + (size_t)r; /* bigger, uneven */
            break;
        default:
            c[r] = r % 2 ? 65537 : 3; /* large next to tiny */
            break;
        }
    }
}

static void t_allgatherv_one(const dtinfo_t *d, int pat, int inplace) {
    size_t c[MAX_RANKS], off[MAX_RANKS + 1];
    av_counts(pat, c);
    off[0] = 0;
    for (int r = 0; r < g_size; r++)
        off[r + 1] = off[r] + c[r];
    size_t total = off[g_size], es = (size_t)d->size;
    char note[64];
    snprintf(note, sizeof note, "pattern %d, this rank %zu of %zu", pat, c[g_rank], total);
    where_t w = {"allgatherv", d, -1, total, inplace, -1, note};
    if (total > opt.max_count || (is_large(total) && !large_ok(d, -1)))
        return;
    gen_t g;
    gen_make(&g, d, -1, DOM_BITS, salt_of(C_ALLGATHERV, d->dt, 0, (size_t)pat, inplace, 0));
    unsigned char *rb = total ? buf_new(total * es) : NULL;
    unsigned char *sb = NULL;
    if (inplace) {
        if (rb) {
            sb = rb + off[g_rank] * es;
            fill(&g, sb, c[g_rank], g_rank, 0);
        }
    } else if (c[g_rank]) {
        sb = buf_new(c[g_rank] * es);
        fill(&g, sb, c[g_rank], g_rank, 0);
    }
    hvd_status_t s = hvd_allgatherv(sb, rb, c, d->dt);
    if (expect_status(&w, s, HVD_OK)) {
        for (int q = 0; q < g_size; q++)
            if (!verify_copy(&w, &g, rb + off[q] * es, c[q], q, 0, "block"))
                break;
        guard_ok(&w, rb, total * es, "recvbuf");
        if (!inplace && sb)
            verify_copy(&w, &g, sb, c[g_rank], g_rank, 0, "send buffer changed");
        if (rb)
            hash_bytes(rb, total * es);
    }
    if (!inplace)
        free(sb);
    free(rb);
}

static void t_alltoall_one(const dtinfo_t *d, size_t count, int inplace) {
    where_t w = {"alltoall", d, -1, count, inplace, -1, NULL};
    gen_t g;
    gen_make(&g, d, -1, DOM_BITS, salt_of(C_ALLTOALL, d->dt, 0, count, inplace, 0));
    size_t total = count * (size_t)g_size, bytes = total * (size_t)d->size;
    size_t bb = count * (size_t)d->size;
    unsigned char *sb = count ? buf_new(bytes) : NULL;
    unsigned char *rb = inplace ? sb : (count ? buf_new(bytes) : NULL);
    if (sb)
        fill(&g, sb, total, g_rank, 0);
    hvd_status_t s = hvd_alltoall(sb, rb, count, d->dt);
    if (expect_status(&w, s, HVD_OK)) {
        /* block i came from rank i: its elements for this rank */
        for (int i = 0; i < g_size; i++)
            if (!verify_copy(&w, &g, rb + (size_t)i * bb, count, i, (size_t)g_rank * count,
                             "block"))
                break;
        guard_ok(&w, rb, bytes, "recvbuf");
        if (!inplace && sb) {
            verify_copy(&w, &g, sb, total, g_rank, 0, "send buffer changed");
            guard_ok(&w, sb, bytes, "sendbuf");
        }
    }
    free(sb);
    if (!inplace)
        free(rb);
}

static void t_broadcast_one(const dtinfo_t *d, size_t count, int root) {
    where_t w = {"broadcast", d, -1, count, 1, root, NULL};
    gen_t g;
    gen_make(&g, d, -1, DOM_BITS, salt_of(C_BROADCAST, d->dt, root, count, 0, 0));
    size_t bytes = count * (size_t)d->size;
    unsigned char *b = count ? buf_new(bytes) : NULL;
    if (b && g_rank == root)
        fill(&g, b, count, root, 0);
    hvd_status_t s = hvd_broadcast(b, count, d->dt, root);
    if (expect_status(&w, s, HVD_OK)) {
        verify_copy(&w, &g, b, count, root, 0, "broadcast data");
        guard_ok(&w, b, bytes, "buffer");
        if (b)
            hash_bytes(b, bytes);
    }
    free(b);
}

static void t_movement(void) {
    for (int di = 0; di < NDTS; di++) {
        const dtinfo_t *d = &DTS[di];
        if (!want_dt(d))
            continue;
        char label[64];
        double t0 = now_s();
        if (want_coll(C_ALLGATHER)) {
            for (int ci = 0; ci < opt.ncounts; ci++)
                if (count_ok(d, -1, opt.counts[ci]))
                    t_allgather_one(d, opt.counts[ci]);
            snprintf(label, sizeof label, "allgather %s", d->name);
            agree(label);
        }
        if (want_coll(C_ALLGATHERV)) {
            for (int pat = 0; pat < NPATTERNS; pat++)
                for (int inplace = 0; inplace < 2; inplace++)
                    t_allgatherv_one(d, pat, inplace);
            snprintf(label, sizeof label, "allgatherv %s", d->name);
            agree(label);
        }
        if (want_coll(C_ALLTOALL))
            for (int ci = 0; ci < opt.ncounts; ci++)
                if (count_ok(d, -1, opt.counts[ci]))
                    for (int inplace = 0; inplace < 2; inplace++)
                        t_alltoall_one(d, opt.counts[ci], inplace);
        if (want_coll(C_BROADCAST)) {
            for (int root = 0; root < g_size; root++)
                for (int ci = 0; ci < opt.ncounts; ci++) {
                    size_t count = opt.counts[ci];
                    /* every count from the first and the last rank; small ones from all */
                    int edge = root == 0 || root == g_size - 1;
                    if (!count_ok(d, -1, count) || (!edge && count > 1021) ||
                        (opt.quick && !edge && count != 1 && count != 1021))
                        continue;
                    t_broadcast_one(d, count, root);
                }
            snprintf(label, sizeof label, "broadcast %s", d->name);
            agree(label);
        }
        if (opt.verbose && g_rank == 0)
            printf("  movement %s: %.2f s\n", d->name, now_s() - t0);
    }
}

/* ---- barrier ------------------------------------------------------------------------ */

static void t_barrier(void) {
    where_t w = {"barrier", NULL, -1, 0, 0, -1, NULL};
    for (int i = 0; i < 20; i++)
        if (!expect_status(&w, hvd_barrier(), HVD_OK))
            return;
    /* a late rank holds everybody: nobody leaves before it entered */
    int lates[2] = {0, g_size - 1};
    for (int k = 0; k < (g_size > 1 ? 2 : 1); k++) {
        int late = lates[k];
        long long entered = 0;
        if (g_rank == late) {
            usleep(300 * 1000);
            entered = real_ns();
        }
        hvd_status_t s = hvd_barrier();
        long long left = real_ns();
        w.note = "late rank";
        w.root = late;
        if (!expect_status(&w, s, HVD_OK))
            return;
        int64_t t = entered;
        if (!expect_status(&w, hvd_broadcast(&t, 1, HVD_INT64, late), HVD_OK))
            return;
        if (left < t)
            failf("barrier: rank %d left %.3f ms before rank %d entered", g_rank,
                  (double)(t - left) / 1e6, late);
        else
            g_pass++;
    }
}

/* ---- argument errors ---------------------------------------------------------------- */

static void t_errors(void) {
    const dtinfo_t *i32 = dt_by(HVD_INT32);
    where_t w = {"errors", i32, HVD_SUM, 5, 0, -1, NULL};
    int32_t a[5 * MAX_RANKS] = {0}, b[5 * MAX_RANKS] = {0};
    size_t counts[MAX_RANKS];
    for (int r = 0; r < g_size; r++)
        counts[r] = 5;
    const hvd_dtype_t BAD_DT[] = {(hvd_dtype_t)99, (hvd_dtype_t)-1, (hvd_dtype_t)11};
    const int BAD_OP[] = {99, -1, 6};
#define EXPECT_INVALID(note_, call_)                                                               \
    do {                                                                                           \
        w.note = note_;                                                                            \
        expect_status(&w, (call_), HVD_ERR_INVALID_ARG);                                           \
    } while (0)
    /* The same call valid first: the engine skips the checks of a call that differs from the
     * last one only in its buffers, which it must still check. */
    w.note = "allreduce valid before the NULL ones";
    expect_status(&w, hvd_allreduce(a, b, 5, HVD_INT32, HVD_SUM), HVD_OK);
    EXPECT_INVALID("allreduce NULL sendbuf", hvd_allreduce(NULL, b, 5, HVD_INT32, HVD_SUM));
    expect_status(&w, hvd_allreduce(a, b, 5, HVD_INT32, HVD_SUM), HVD_OK);
    EXPECT_INVALID("allreduce NULL recvbuf", hvd_allreduce(a, NULL, 5, HVD_INT32, HVD_SUM));
    EXPECT_INVALID("allreduce NULL both", hvd_allreduce(NULL, NULL, 5, HVD_INT32, HVD_SUM));
    for (int k = 0; k < 3; k++) {
        EXPECT_INVALID("allreduce bad dtype", hvd_allreduce(a, b, 5, BAD_DT[k], HVD_SUM));
        EXPECT_INVALID("allreduce bad dtype count 0",
                       hvd_allreduce(NULL, NULL, 0, BAD_DT[k], HVD_SUM));
        EXPECT_INVALID("allreduce bad op", hvd_allreduce(a, b, 5, HVD_INT32, BAD_OP[k]));
        EXPECT_INVALID("broadcast bad dtype", hvd_broadcast(a, 5, BAD_DT[k], 0));
        EXPECT_INVALID("allgather bad dtype", hvd_allgather(a, 5, b, BAD_DT[k]));
        EXPECT_INVALID("allgatherv bad dtype", hvd_allgatherv(a, b, counts, BAD_DT[k]));
        EXPECT_INVALID("alltoall bad dtype", hvd_alltoall(a, b, 5, BAD_DT[k]));
        EXPECT_INVALID("reducescatter bad dtype", hvd_reducescatter(a, b, 1, BAD_DT[k], HVD_SUM));
        EXPECT_INVALID("reducescatter bad op", hvd_reducescatter(a, b, 1, HVD_INT32, BAD_OP[k]));
        EXPECT_INVALID("allreduce_ex bad dtype",
                       hvd_allreduce_ex(a, b, 5, BAD_DT[k], HVD_SUM, 1, 1, HVD_COMM_GLOBAL));
    }
    EXPECT_INVALID("allreduce ADASUM of int32", hvd_allreduce(a, b, 5, HVD_INT32, HVD_ADASUM));
    EXPECT_INVALID("allreduce AVERAGE of BOOL", hvd_allreduce(a, b, 5, HVD_BOOL, HVD_AVERAGE));
    EXPECT_INVALID("broadcast NULL", hvd_broadcast(NULL, 5, HVD_INT32, 0));
    EXPECT_INVALID("broadcast root -1", hvd_broadcast(a, 5, HVD_INT32, -1));
    EXPECT_INVALID("broadcast root size", hvd_broadcast(a, 5, HVD_INT32, g_size));
    EXPECT_INVALID("broadcast root size+7", hvd_broadcast(a, 5, HVD_INT32, g_size + 7));
    EXPECT_INVALID("broadcast root -1 count 0", hvd_broadcast(NULL, 0, HVD_INT32, -1));
    EXPECT_INVALID("allgather NULL sendbuf", hvd_allgather(NULL, 5, b, HVD_INT32));
    EXPECT_INVALID("allgather NULL recvbuf", hvd_allgather(a, 5, NULL, HVD_INT32));
    EXPECT_INVALID("allgatherv NULL recvcounts", hvd_allgatherv(a, b, NULL, HVD_INT32));
    EXPECT_INVALID("allgatherv NULL sendbuf", hvd_allgatherv(NULL, b, counts, HVD_INT32));
    EXPECT_INVALID("allgatherv NULL recvbuf", hvd_allgatherv(a, NULL, counts, HVD_INT32));
    EXPECT_INVALID("alltoall NULL sendbuf", hvd_alltoall(NULL, b, 5, HVD_INT32));
    EXPECT_INVALID("alltoall NULL recvbuf", hvd_alltoall(a, NULL, 5, HVD_INT32));
    EXPECT_INVALID("reducescatter NULL sendbuf", hvd_reducescatter(NULL, b, 1, HVD_INT32, HVD_SUM));
    EXPECT_INVALID("reducescatter NULL recvbuf", hvd_reducescatter(a, NULL, 1, HVD_INT32, HVD_SUM));
    EXPECT_INVALID("reducescatter ADASUM", hvd_reducescatter(a, b, 1, HVD_FLOAT32, HVD_ADASUM));
    EXPECT_INVALID("reducescatter AVERAGE of BOOL",
                   hvd_reducescatter(a, b, 1, HVD_BOOL, HVD_AVERAGE));
    EXPECT_INVALID("allreduce_ex bad comm",
                   hvd_allreduce_ex(a, b, 5, HVD_INT32, HVD_SUM, 1, 1, (hvd_comm_t)7));
    EXPECT_INVALID("allreduce_ex bad comm -1",
                   hvd_allreduce_ex(a, b, 5, HVD_INT32, HVD_SUM, 1, 1, (hvd_comm_t)-1));
    EXPECT_INVALID("allreduce_ex MIN with prescale 2",
                   hvd_allreduce_ex(a, b, 5, HVD_INT32, HVD_MIN, 2.0, 1.0, HVD_COMM_GLOBAL));
    EXPECT_INVALID("allreduce_ex PRODUCT with postscale 0.5",
                   hvd_allreduce_ex(a, b, 5, HVD_FLOAT32, HVD_PRODUCT, 1.0, 0.5, HVD_COMM_GLOBAL));
    EXPECT_INVALID("allreduce_ex BOOL SUM with postscale 2",
                   hvd_allreduce_ex(a, b, 5, HVD_BOOL, HVD_SUM, 1.0, 2.0, HVD_COMM_GLOBAL));
    EXPECT_INVALID("allreduce_ex ADASUM of uint8",
                   hvd_allreduce_ex(a, b, 5, HVD_UINT8, HVD_ADASUM, 1.0, 1.0, HVD_COMM_LOCAL));
    EXPECT_INVALID("allreduce_ex NULL",
                   hvd_allreduce_ex(NULL, b, 5, HVD_FLOAT32, HVD_SUM, 1.0, 1.0, HVD_COMM_CROSS));
#undef EXPECT_INVALID
    /* none of that disturbed the communicator */
    w.note = "after the argument errors";
    gen_t g;
    gen_make(&g, i32, HVD_SUM, DOM_REDUCE, salt_of(C_ERRORS, HVD_INT32, HVD_SUM, 5, 0, 1));
    fill(&g, a, 5, g_rank, 0);
    if (expect_status(&w, hvd_allreduce(a, b, 5, HVD_INT32, HVD_SUM), HVD_OK))
        verify_reduced(&w, &g, b, 5, 0, g_size);
}

/* Collectives outside hvd_init .. hvd_shutdown. */
static void t_not_initialised(const char *when) {
    int32_t a[8] = {0}, b[8 * MAX_RANKS] = {0};
    size_t counts[MAX_RANKS] = {0};
    where_t w = {"not initialised", dt_by(HVD_INT32), -1, 1, 0, -1, NULL};
    char note[8][96];
    int k = 0;
#define EXPECT_SHUT(name_, call_)                                                                  \
    do {                                                                                           \
        snprintf(note[k & 7], sizeof note[0], "%s %s", name_, when);                               \
        w.note = note[k++ & 7];                                                                    \
        expect_status(&w, (call_), HVD_ERR_SHUT_DOWN);                                             \
    } while (0)
    EXPECT_SHUT("allreduce", hvd_allreduce(a, b, 1, HVD_INT32, HVD_SUM));
    EXPECT_SHUT("allreduce_ex",
                hvd_allreduce_ex(a, b, 1, HVD_INT32, HVD_SUM, 1.0, 1.0, HVD_COMM_GLOBAL));
    EXPECT_SHUT("broadcast", hvd_broadcast(a, 1, HVD_INT32, 0));
    EXPECT_SHUT("allgather", hvd_allgather(a, 1, b, HVD_INT32));
    EXPECT_SHUT("allgatherv", hvd_allgatherv(a, b, counts, HVD_INT32));
    EXPECT_SHUT("alltoall", hvd_alltoall(a, b, 1, HVD_INT32));
    EXPECT_SHUT("reducescatter", hvd_reducescatter(a, b, 1, HVD_INT32, HVD_SUM));
    EXPECT_SHUT("barrier", hvd_barrier());
    EXPECT_SHUT("shutdown", hvd_shutdown());
#undef EXPECT_SHUT
    if (hvd_is_initialized() != 0 || hvd_rank() != -1 || hvd_size() != -1)
        failf("%s: is_initialized=%d rank=%d size=%d, expected 0, -1, -1", when,
              hvd_is_initialized(), hvd_rank(), hvd_size());
}

/* ---- mismatches between ranks ------------------------------------------------------- */

static void sanity_allreduce(const char *after) {
    const dtinfo_t *d = dt_by(HVD_INT32);
    where_t w = {"allreduce", d, HVD_SUM, 11, 0, -1, after};
    gen_t g;
    gen_make(&g, d, HVD_SUM, DOM_REDUCE, salt_of(C_MISMATCH, HVD_INT32, 1, 11, 0, 0));
    int32_t a[11], b[11];
    fill(&g, a, 11, g_rank, 0);
    if (expect_status(&w, hvd_allreduce(a, b, 11, HVD_INT32, HVD_SUM), HVD_OK))
        verify_reduced(&w, &g, b, 11, 0, g_size);
}

static void t_mismatch(void) {
    if (g_size < 2)
        return;
    int last = g_size - 1, me = g_rank;
    size_t cnt[MAX_RANKS];
    enum { NCASES = 19 };
    for (int c = 0; c < NCASES; c++) {
        const char *what = "?";
        hvd_status_t s = HVD_OK;
        unsigned char *sb = buf_new(8 * 70000 * (size_t)g_size);
        unsigned char *rb = buf_new(8 * 70000 * (size_t)g_size);
        memset(sb, 0, 8 * 70000 * (size_t)g_size);
        switch (c) {
        case 0:
            what = "allreduce count: rank 0 10, others 11";
            s = hvd_allreduce(sb, rb, me == 0 ? 10 : 11, HVD_INT32, HVD_SUM);
            break;
        case 1:
            what = "allreduce count: last rank 12, others 11";
            s = hvd_allreduce(sb, rb, me == last ? 12 : 11, HVD_INT32, HVD_SUM);
            break;
        case 2:
            what = "allreduce dtype: rank 0 float32, others int32";
            s = hvd_allreduce(sb, rb, 10, me == 0 ? HVD_FLOAT32 : HVD_INT32, HVD_SUM);
            break;
        case 3:
            what = "allreduce dtype: last rank float64, others float32";
            s = hvd_allreduce(sb, rb, 10, me == last ? HVD_FLOAT64 : HVD_FLOAT32, HVD_SUM);
            break;
        case 4:
            what = "allreduce op: rank 0 SUM, others MAX";
            s = hvd_allreduce(sb, rb, 10, HVD_INT32, me == 0 ? HVD_SUM : HVD_MAX);
            break;
        case 5:
            what = "allreduce count: rank 0 0, others 1";
            s = me == 0 ? hvd_allreduce(NULL, NULL, 0, HVD_INT32, HVD_SUM)
                        : hvd_allreduce(sb, rb, 1, HVD_INT32, HVD_SUM);
            break;
        case 6:
            what = "allreduce count: rank 0 65537, others 65536";
            s = hvd_allreduce(sb, rb, me == 0 ? 65537 : 65536, HVD_FLOAT32, HVD_SUM);
            break;
        case 7:
            what = "broadcast root: rank 0 root 0, others root 1";
            s = hvd_broadcast(sb, 10, HVD_INT32, me == 0 ? 0 : 1);
            break;
        case 8:
            what = "broadcast count: last rank 11, others 10";
            s = hvd_broadcast(sb, me == last ? 11 : 10, HVD_INT32, 0);
            break;
        case 9:
            what = "allgather count: rank 0 5, others 6";
            s = hvd_allgather(sb, me == 0 ? 5 : 6, rb, HVD_INT32);
            break;
        case 10:
            what = "allgather dtype: last rank int64, others float64";
            s = hvd_allgather(sb, 5, rb, me == last ? HVD_INT64 : HVD_FLOAT64);
            break;
        case 11:
            what = "allgatherv recvcounts: rank 0 says rank 0 has 4, others say 5";
            for (int r = 0; r < g_size; r++)
                cnt[r] = 5;
            if (me == 0)
                cnt[0] = 4;
            s = hvd_allgatherv(sb, rb, cnt, HVD_INT32);
            break;
        case 12:
            what = "alltoall count: rank 0 3, others 4";
            s = hvd_alltoall(sb, rb, me == 0 ? 3 : 4, HVD_INT32);
            break;
        case 13:
            what = "reducescatter count: rank 0 3, others 4";
            s = hvd_reducescatter(sb, rb, me == 0 ? 3 : 4, HVD_INT32, HVD_SUM);
            break;
        case 14:
            what = "reducescatter op: last rank MIN, others SUM";
            s = hvd_reducescatter(sb, rb, 4, HVD_INT32, me == last ? HVD_MIN : HVD_SUM);
            break;
        case 15:
            what = "collective: rank 0 allreduce, others broadcast";
            s = me == 0 ? hvd_allreduce(sb, rb, 10, HVD_INT32, HVD_SUM)
                        : hvd_broadcast(sb, 10, HVD_INT32, 0);
            break;
        case 16:
            what = "collective: last rank barrier, others allreduce of count 0";
            s = me == last ? hvd_barrier() : hvd_allreduce(NULL, NULL, 0, HVD_INT32, HVD_SUM);
            break;
        case 17:
            /* over 1 MiB: on one host rank 0 would read the others' buffers in place while
             * they copy theirs into the arena (shm_allreduce.c), had they not to agree */
            what = "allreduce_ex prescale: rank 0 1.0, others 2.0, 1.1 MB";
            s = hvd_allreduce_ex(sb, rb, 280000, HVD_FLOAT32, HVD_SUM, me == 0 ? 1.0 : 2.0, 1.0,
                                 HVD_COMM_GLOBAL);
            break;
        default:
            what = "allreduce_ex: rank 0 op SUM, others op AVERAGE";
            s = hvd_allreduce_ex(sb, rb, 8, HVD_FLOAT32, me == 0 ? HVD_SUM : HVD_AVERAGE, 1.0, 1.0,
                                 HVD_COMM_GLOBAL);
            break;
        }
        where_t w = {"mismatch", NULL, -1, 0, 0, -1, what};
        if (expect_status(&w, s, HVD_ERR_MISMATCH)) {
            const char *msg = hvd_last_error();
            if (!strstr(msg, "rank"))
                failf("mismatch [%s]: message does not name a rank: \"%s\"", what, msg);
            else
                g_pass++;
            if (opt.verbose && g_rank == 0)
                printf("  mismatch [%s]: %s\n", what, msg);
        }
        free(sb);
        free(rb);
        char after[160];
        snprintf(after, sizeof after, "after mismatch: %s", what);
        sanity_allreduce(after);
    }
    /* the chunked paths still work too, and from 1 MiB the one reading the peers' buffers in
     * place on one host (shm_allreduce.c: by_cma), in place too */
    const dtinfo_t *f32 = dt_by(HVD_FLOAT32);
    if (65537 <= opt.max_count) {
        t_allreduce_one(f32, HVD_SUM, 65537, 0);
        t_allgather_one(f32, 65537);
    }
    if (300001 <= opt.max_count) {
        t_allreduce_one(f32, HVD_SUM, 300001, 0);
        t_allreduce_one(f32, HVD_AVERAGE, 300001, 1);
    }
}

/* ---- one allreduce of more than 64 MiB ---------------------------------------------- */

static void t_big(void) {
    const dtinfo_t *d = dt_by(HVD_FLOAT32);
    size_t count = (16u << 20) + 3;
    where_t w = {"allreduce", d, HVD_SUM, count, 0, -1, "64 MiB"};
    gen_t g;
    gen_make(&g, d, HVD_SUM, DOM_REDUCE, salt_of(C_ALLREDUCE, HVD_FLOAT32, 1, count, 0, 64));
    float *sb = malloc(count * 4), *rb = malloc(count * 4);
    if (!sb || !rb)
        die("out of memory for the 64 MiB allreduce");
    fill(&g, sb, count, g_rank, 0);
    double t0 = now_s();
    hvd_status_t s = hvd_allreduce(sb, rb, count, HVD_FLOAT32, HVD_SUM);
    double dt = now_s() - t0;
    if (expect_status(&w, s, HVD_OK)) {
        verify_reduced_shared(&w, &g, rb, count, g_size);
        hash_bytes(rb, count * 4);
        agree("64 MiB allreduce");
    }
    if (g_rank == 0)
        printf("64 MiB allreduce: %.3f s (%.0f MB/s algorithm bandwidth)\n", dt,
               (double)count * 4 / dt / 1e6);
    free(sb);
    free(rb);
}

/* ---- modes -------------------------------------------------------------------------- */

static hvd_status_t init(void) {
    hvd_config_t cfg;
    hvd_config_init(&cfg);
    cfg.timeout_seconds = opt.timeout;
    return hvd_init_ex(&cfg);
}

/* horovodrun's variables, or Open MPI's under `horovodrun --mpi`, or a Slurm step's */
static void check_topology(void) {
    const char *s = getenv("HOROVOD_SIZE"), *r = getenv("HOROVOD_RANK");
    if (!r && getenv("OMPI_COMM_WORLD_RANK")) {
        s = getenv("OMPI_COMM_WORLD_SIZE");
        r = getenv("OMPI_COMM_WORLD_RANK");
    } else if (!r) {
        s = getenv("SLURM_STEP_NUM_TASKS");
        r = getenv("SLURM_PROCID");
    }
    int want_size = s ? atoi(s) : 1, want_rank = r ? atoi(r) : 0;
    if (g_size != want_size || g_rank != want_rank)
        failf("topology: rank %d size %d, environment says rank %d size %d", g_rank, g_size,
              want_rank, want_size);
    if (g_size > MAX_RANKS)
        die("this check handles at most %d ranks", MAX_RANKS);
}

static int mode_check(void) {
    double t0 = now_s();
    selftest_half();
    t_not_initialised("before hvd_init");
    hvd_status_t s = init();
    if (s != HVD_OK)
        die("hvd_init: %s: %s", hvd_status_str(s), hvd_last_error());
    g_rank = hvd_rank();
    g_size = hvd_size();
    check_topology();
    struct {
        int coll;
        const char *name;
    } sections[] = {{C_ERRORS, "errors"},
                    {C_ALLREDUCE, "allreduce"},
                    {C_EX, "allreduce_ex"},
                    {C_ALLGATHER, "movement"},
                    {C_BARRIER, "barrier"},
                    {C_MISMATCH, "mismatch"},
                    {C_REDUCESCATTER, "reducescatter"}};
    for (size_t i = 0; i < sizeof sections / sizeof sections[0]; i++) {
        int c = sections[i].coll;
        if (c == C_ALLGATHER) {
            if (!want_coll(C_ALLGATHER) && !want_coll(C_ALLGATHERV) && !want_coll(C_ALLTOALL) &&
                !want_coll(C_BROADCAST))
                continue;
        } else if (!want_coll(c)) {
            continue;
        }
        double ts = now_s();
        long long p0 = g_pass;
        switch (c) {
        case C_ERRORS:
            t_errors();
            break;
        case C_ALLREDUCE:
        case C_REDUCESCATTER:
            t_reductions(c);
            break;
        case C_EX:
            t_ex();
            break;
        case C_ALLGATHER:
            t_movement();
            break;
        case C_BARRIER:
            t_barrier();
            break;
        default:
            t_mismatch();
            break;
        }
        if (g_rank == 0 && opt.verbose)
            printf("section %s: %lld checks, %.2f s\n", sections[i].name, g_pass - p0,
                   now_s() - ts);
    }
    if (opt.big)
        t_big();
    /* everybody learns whether anybody failed */
    int64_t fails = g_fail, all = 0;
    s = hvd_allreduce(&fails, &all, 1, HVD_INT64, HVD_SUM);
    if (s != HVD_OK)
        failf("final allreduce of the failure counts: %s: %s", hvd_status_str(s), hvd_last_error());
    s = hvd_shutdown();
    if (s != HVD_OK)
        failf("hvd_shutdown: %s: %s", hvd_status_str(s), hvd_last_error());
    int rank = g_rank;
    t_not_initialised("after hvd_shutdown");
    if (rank == 0)
        printf("collectives_check: np=%d %s: %lld checks passed, %lld failed on rank 0, %lld on "
               "all ranks, %.1f s\n",
               g_size, opt.quick ? "quick" : "full", g_pass, g_fail, (long long)all, now_s() - t0);
    return g_fail || all ? 1 : 0;
}

static int mode_reinit(void) {
    double t0 = now_s();
    int iters = opt.iters > 0 ? opt.iters : 100;
    for (int it = 0; it < iters; it++) {
        hvd_status_t s = init();
        if (s != HVD_OK)
            die("iteration %d: hvd_init: %s: %s", it, hvd_status_str(s), hvd_last_error());
        g_rank = hvd_rank();
        g_size = hvd_size();
        if (it == 0)
            check_topology();
        if (!hvd_is_initialized())
            failf("iteration %d: hvd_is_initialized() is 0 after hvd_init", it);
        int32_t v[3] = {g_rank, it, 1}, r[3] = {-1, -1, -1};
        s = hvd_allreduce(v, r, 3, HVD_INT32, HVD_SUM);
        if (s != HVD_OK)
            failf("iteration %d: allreduce: %s: %s", it, hvd_status_str(s), hvd_last_error());
        else if (r[0] != g_size * (g_size - 1) / 2 || r[1] != g_size * it || r[2] != g_size)
            failf("iteration %d: allreduce gave %d %d %d, expected %d %d %d", it, r[0], r[1], r[2],
                  g_size * (g_size - 1) / 2, g_size * it, g_size);
        else
            g_pass++;
        if (it % 10 == 9) /* now and then through the chunked path too */
            t_allreduce_one(dt_by(HVD_FLOAT32), HVD_SUM, 65537, it % 20 == 9);
        s = hvd_shutdown();
        if (s != HVD_OK)
            failf("iteration %d: hvd_shutdown: %s: %s", it, hvd_status_str(s), hvd_last_error());
        if (hvd_is_initialized())
            failf("iteration %d: hvd_is_initialized() is 1 after hvd_shutdown", it);
    }
    if (g_rank == 0)
        printf("collectives_check: np=%d reinit: %d init/allreduce/shutdown cycles, %lld checks "
               "passed, %lld failed, %.1f s\n",
               g_size, iters, g_pass, g_fail, now_s() - t0);
    return g_fail ? 1 : 0;
}

/* digest: allreduces whose sums are inexact (each rank's values spread over 20 binary orders
 * of magnitude, so that the order of a sum shows in its last bits), through the small path,
 * the large one and past a fusion buffer's size, in float32, float64, float16 and bfloat16,
 * sum and average, one prescaled and postscaled; rank 0 prints a hash of every result. Jobs
 * that sum every element in the same order print the same digest (tests/e2e/test_shm.sh). */
static uint16_t digest_bits(int rank, size_t i, int kind) {
    uint64_t x = mix(((uint64_t)rank << 40) ^ i ^ ((uint64_t)kind << 56));
    if (kind == 0) /* float16: sign, exponent 5..24 of 0..30, mantissa */
        return (uint16_t)((x & 0x8000u) | ((5 + (x >> 16) % 20) << 10) | ((x >> 32) & 0x3ffu));
    /* bfloat16: sign, exponent 117..136 of 0..254, mantissa */
    return (uint16_t)((x & 0x8000u) | ((117 + (x >> 16) % 20) << 7) | ((x >> 32) & 0x7fu));
}

static double digest_value(int rank, size_t i) {
    uint64_t x = mix(((uint64_t)rank << 40) ^ i);
    return ((double)(x >> 11) / 9007199254740992.0 - 0.5) * ldexp(1.0, (int)((x >> 3) % 20) - 10);
}

static int mode_digest(void) {
    hvd_status_t s = init();
    if (s != HVD_OK)
        die("hvd_init: %s: %s", hvd_status_str(s), hvd_last_error());
    g_rank = hvd_rank();
    g_size = hvd_size();
    static const size_t counts[] = {1000, 100003, (1u << 20) + 7};
    static const struct {
        hvd_dtype_t dt;
        hvd_reduce_op_t op;
        double pre, post;
    } calls[] = {{HVD_FLOAT32, HVD_SUM, 1.0, 1.0},      {HVD_FLOAT32, HVD_AVERAGE, 1.0, 1.0},
                 {HVD_FLOAT64, HVD_SUM, 1.0, 1.0},      {HVD_FLOAT16, HVD_SUM, 1.0, 1.0},
                 {HVD_BFLOAT16, HVD_AVERAGE, 1.0, 1.0}, {HVD_FLOAT32, HVD_SUM, 0.37, 1.9}};
    size_t max = counts[sizeof counts / sizeof counts[0] - 1];
    unsigned char *in = malloc(max * 8), *out = malloc(max * 8);
    if (!in || !out)
        die("out of memory for the digest's buffers");
    for (size_t c = 0; c < sizeof calls / sizeof calls[0]; c++) {
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
            size_t n = counts[k];
            for (size_t i = 0; i < n; i++) {
                double v = digest_value(g_rank, i);
                if (calls[c].dt == HVD_FLOAT32)
                    ((float *)in)[i] = (float)v;
                else if (calls[c].dt == HVD_FLOAT64)
                    ((double *)in)[i] = v;
                else
                    ((uint16_t *)in)[i] = digest_bits(g_rank, i, calls[c].dt == HVD_BFLOAT16);
            }
            s = hvd_allreduce_ex(in, out, n, calls[c].dt, calls[c].op, calls[c].pre, calls[c].post,
                                 HVD_COMM_GLOBAL);
            if (s != HVD_OK)
                die("digest allreduce %zu of %zu elements: %s: %s", c, n, hvd_status_str(s),
                    hvd_last_error());
            hash_bytes(out, n * (size_t)dt_by(calls[c].dt)->size);
        }
    }
    uint64_t digest = g_hash;
    agree("digest");
    if (g_rank == 0)
        printf("collectives_check: np=%d digest %016" PRIx64 " (%s)\n", g_size, digest,
               g_fail ? "ranks differ" : "the same on every rank");
    free(in);
    free(out);
    s = hvd_shutdown();
    if (s != HVD_OK)
        die("hvd_shutdown: %s: %s", hvd_status_str(s), hvd_last_error());
    return g_fail ? 1 : 0;
}

static int file_exists(const char *dir, const char *name) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

static int mode_soak(void) {
    if (!opt.dir)
        die("--mode soak needs --dir");
    hvd_status_t s = init();
    if (s != HVD_OK)
        die("hvd_init: %s: %s", hvd_status_str(s), hvd_last_error());
    g_rank = hvd_rank();
    g_size = hvd_size();
    char path[600];
    snprintf(path, sizeof path, "%s/pid.%d", opt.dir, g_rank);
    FILE *f = fopen(path, "w");
    if (!f)
        die("cannot write %s", path);
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    /* no collective yet, so no data connection yet: strangers get in first */
    double t0 = now_s();
    while (!file_exists(opt.dir, "go")) {
        if (now_s() - t0 > 30)
            die("--dir/go did not appear within 30 s");
        usleep(20 * 1000);
    }
    double seconds = opt.seconds > 0 ? opt.seconds : 4;
    const dtinfo_t *f32 = dt_by(HVD_FLOAT32), *i32 = dt_by(HVD_INT32), *u8 = dt_by(HVD_UINT8);
    int it = 0;
    t0 = now_s();
    for (;; it++) {
        t_allreduce_one(i32, HVD_SUM, 1021, it & 1);
        t_allreduce_one(f32, HVD_SUM, 65537, 0);
        t_broadcast_one(u8, 300, it % g_size);
        t_allgather_one(f32, 13);
        int32_t stop = g_rank == 0 && now_s() - t0 > seconds;
        where_t w = {"broadcast(stop)", i32, -1, 1, 1, 0, NULL};
        if (!expect_status(&w, hvd_broadcast(&stop, 1, HVD_INT32, 0), HVD_OK) || stop)
            break;
    }
    agree("soak");
    s = hvd_shutdown();
    if (s != HVD_OK)
        failf("hvd_shutdown: %s: %s", hvd_status_str(s), hvd_last_error());
    printf("rank %d: soak ok: %d iterations, %lld checks passed, %lld failed\n", g_rank, it + 1,
           g_pass, g_fail);
    return g_fail ? 1 : 0;
}

/* ---- options ------------------------------------------------------------------------ */

static unsigned parse_names(const char *list, int kind) {
    unsigned m = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int found = 0;
        if (kind == 0) {
            for (int i = 0; i < NDTS; i++)
                if (!strcmp(t, DTS[i].name)) {
                    m |= 1u << DTS[i].dt;
                    found = 1;
                }
        } else if (kind == 1) {
            for (int op = 0; op <= HVD_PRODUCT; op++)
                if (!strcmp(t, op_name(op))) {
                    m |= 1u << op;
                    found = 1;
                }
        } else {
            for (int c = 0; c < C_NCOLL; c++)
                if (!strcmp(t, COLL_NAMES[c])) {
                    m |= 1u << c;
                    found = 1;
                }
        }
        if (!found)
            die("unknown name '%s'", t);
    }
    return m;
}

static void usage(void) {
    fprintf(stderr,
            "usage: collectives_check [--mode check|reinit|soak|digest]\n"
            "  [--quick] [--big] [--keep-going] [--verbose] [--timeout S]\n"
            "  [--dtypes a,b] [--ops sum,average,min,max,product,adasum]\n"
            "  [--colls allreduce,ex,reducescatter,allgather,allgatherv,alltoall,broadcast,\n"
            "           barrier,errors,mismatch] [--counts 0,1,...] [--max-count N]\n"
            "  [--dir DIR]\n"
            "  [--seconds S] [--iters N]\n");
    exit(2);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    opt.mode = "check";
    opt.dtype_mask = opt.op_mask = opt.coll_mask = ~0u;
    opt.max_count = (size_t)-1;
    const char *counts = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define VAL() (v ? (i++, v) : (usage(), ""))
        if (!strcmp(a, "--mode"))
            opt.mode = VAL();
        else if (!strcmp(a, "--quick"))
            opt.quick = 1;
        else if (!strcmp(a, "--big"))
            opt.big = 1;
        else if (!strcmp(a, "--keep-going"))
            opt.keep_going = 1;
        else if (!strcmp(a, "--verbose"))
            opt.verbose = 1;
        else if (!strcmp(a, "--timeout"))
            opt.timeout = atoi(VAL());
        else if (!strcmp(a, "--dtypes"))
            opt.dtype_mask = parse_names(VAL(), 0);
        else if (!strcmp(a, "--ops"))
            opt.op_mask = parse_names(VAL(), 1);
        else if (!strcmp(a, "--colls"))
            opt.coll_mask = parse_names(VAL(), 2);
        else if (!strcmp(a, "--counts"))
            counts = VAL();
        else if (!strcmp(a, "--max-count"))
            opt.max_count = strtoull(VAL(), NULL, 10);
        else if (!strcmp(a, "--dir"))
            opt.dir = VAL();
        else if (!strcmp(a, "--seconds"))
            opt.seconds = atof(VAL());
        else if (!strcmp(a, "--iters"))
            opt.iters = atoi(VAL());
        else
            usage();
#undef VAL
    }
    if (counts) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", counts);
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && opt.ncounts < 64;
             t = strtok_r(NULL, ",", &save))
            opt.counts[opt.ncounts++] = strtoull(t, NULL, 10);
    } else {
        const size_t *src = opt.quick ? COUNTS_QUICK : COUNTS_FULL;
        int n = opt.quick ? (int)(sizeof COUNTS_QUICK / sizeof COUNTS_QUICK[0])
                          : (int)(sizeof COUNTS_FULL / sizeof COUNTS_FULL[0]);
        for (int i = 0; i < n; i++)
            opt.counts[opt.ncounts++] = src[i];
    }
    if (!strcmp(opt.mode, "check"))
        return mode_check();
    if (!strcmp(opt.mode, "reinit"))
        return mode_reinit();
    if (!strcmp(opt.mode, "soak"))
        return mode_soak();
    if (!strcmp(opt.mode, "digest"))
        return mode_digest();
    usage();
    return 2;
}
