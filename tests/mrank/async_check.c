/* Checks of libhvd's named asynchronous operations (the core's background negotiation,
 * response cache and fusion), run as N processes under horovodrun; every rank runs this
 * program with the same scenario name as argv[1].
 *
 * Written against the public header only. Every input is a small integer (or a half) drawn
 * from (tensor name, rank, index, step), so each rank computes every expected result itself
 * and results are exactly representable in every dtype used: comparisons are exact.
 *
 * Scenarios (tests/mrank/mrank.cmake and tests/e2e/test_core_*.sh run them):
 *   order      20 names (allreduce of many dtypes and ops, scaled, empty; broadcast from a
 *              non-zero root; allgather; alltoall; reducescatter) enqueued in a different
 *              order on every rank and waited in yet another, for 3 steps.
 *   fusion     100 small allreduces (counts 0, 1 and odd counts up to ~4000, four dtypes)
 *              enqueued then waited, 5 steps with the same names (the response cache).
 *   mixed      blocking allreduce / barrier / broadcast between async enqueues and waits,
 *              and a grouped allreduce.
 *   threads    three threads per rank enqueue and wait their own names while the main
 *              thread runs blocking collectives.
 *   duplicate  a name enqueued twice while in flight; names copied at enqueue; the longest
 *              name; argument errors; handles after release.
 *   mismatch   count, dtype, broadcast root, reduce op and operation type disagreements, also
 *              on a name the response cache knows; then normal work.
 *   partial    a name only rank 1 enqueues does not hold up other async or blocking work.
 *   join       rank r does 3 + r steps then joins: joined ranks contribute zeros.
 *   unwaited   an operation nobody waits for (hvd_poll only) completes through the
 *              background thread within a few cycle times: right after a tight loop of
 *              enqueue + wait (the loop drives the cycles) and after 120-210 ms of idleness
 *              (the thread backed off, or asleep on one rank).
 *   resting    hvd_wait_resting: results right beside another thread's hvd_wait calls, and
 *              waiting 20 ms at a time for a late rank costs its thread almost no CPU (where
 *              hvd_wait busy-polls first).
 *   evict      (with HOROVOD_CACHE_CAPACITY=1) a name waiting as a cache hit on rank 0 is
 *              evicted by a new name before the other ranks enqueue it.
 *   shutdown   one rank shuts down while the others wait: they get HVD_ERR_SHUT_DOWN naming
 *              it; then every rank re-initialises and it happens again with another rank.
 *   timeline   (--dir D) hvd_start_timeline / hvd_stop_timeline at run time; rank 0 writes
 *              D/rt1.json, D/rt2.json, D/rt3.json (tests/e2e/test_core_timeline.sh checks them).
 *   loop       (--steps N, 0 = until killed; --dir D) checked async steps; rank 0 writes its
 *              step count to D/step after each step and every rank its pid to D/pid.R.
 *   peer_death (--dir D) rank 1 _exit(3)s while the others wait on a handle; each survivor
 *              writes its wait's status, message and timing to D/rank.R (SIGTERM held).
 *   stall_late (--delay-ms T) rank 1 enqueues "late" T ms after the others, then, once the
 *              name is cached, "late_cached" T + 1000 ms after: both complete (the test
 *              script checks rank 0's stall warnings).
 *   stall_never (--dir D) rank 1 never enqueues "never" (it waits in a barrier instead);
 *              each rank writes its status and message to D/rank.R and exits 1 on failure.
 *
 * A failed check prints "FAIL async_check <scenario> [rank R of N] line L: ..." and exits 1.
 * Rank 0 prints "async_check <scenario>: ok (...)" when every check passed. */
#include <hvd/hvd.h>

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RANK_CHECK_PROGRAM "async_check"
#include "rank_check.h"

#include "check_clock.h"

#define GUARD 32
#define GUARD_BYTE 0x5a
#define SENTINEL_BYTE 0xa5

static long long g_checked; /* elements compared */

static struct {
    const char *dir;
    int steps;
    int delay_ms;
} opt = {NULL, 0, 3000};

/* (failing: rank_check.h) */

static void init_hvd(void) {
    OK(hvd_init());
    g_rank = hvd_rank();
    g_size = hvd_size();
    CHECK(g_rank >= 0 && g_size >= 1 && g_rank < g_size, "rank %d of %d", g_rank, g_size);
}

/* ---- data types: exact small values in every dtype ------------------------------------ */

static size_t dt_size(hvd_dtype_t dt) {
    switch (dt) {
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
    default:
        return 8;
    }
}

static const char *dt_name(hvd_dtype_t dt) {
    static const char *const n[] = {"uint8",   "int8",    "uint16",  "int16", "int32",   "int64",
                                    "float16", "float32", "float64", "bool",  "bfloat16"};
    return (unsigned)dt < sizeof n / sizeof n[0] ? n[dt] : "?";
}

static int dt_is_int(hvd_dtype_t dt) {
    return dt == HVD_UINT8 || dt == HVD_INT8 || dt == HVD_UINT16 || dt == HVD_INT16 ||
           dt == HVD_INT32 || dt == HVD_INT64;
}

static void store(hvd_dtype_t dt, void *buf, size_t i, double v) {
    switch (dt) {
    case HVD_UINT8:
        ((uint8_t *)buf)[i] = (uint8_t)(int64_t)v;
        break;
    case HVD_INT8:
        ((int8_t *)buf)[i] = (int8_t)(uint8_t)(int64_t)v;
        break;
    case HVD_UINT16:
        ((uint16_t *)buf)[i] = (uint16_t)(int64_t)v;
        break;
    case HVD_INT16:
        ((int16_t *)buf)[i] = (int16_t)(uint16_t)(int64_t)v;
        break;
    case HVD_INT32:
        ((int32_t *)buf)[i] = (int32_t)(uint32_t)(int64_t)v;
        break;
    case HVD_INT64:
        ((int64_t *)buf)[i] = (int64_t)v;
        break;
    case HVD_FLOAT16:
        ((uint16_t *)buf)[i] = f16_of(v);
        break;
    case HVD_BFLOAT16:
        ((uint16_t *)buf)[i] = bf16_of(v);
        break;
    case HVD_FLOAT32:
        ((float *)buf)[i] = (float)v;
        break;
    case HVD_FLOAT64:
        ((double *)buf)[i] = v;
        break;
    case HVD_BOOL:
        ((uint8_t *)buf)[i] = v != 0;
        break;
    }
}

static double load(hvd_dtype_t dt, const void *buf, size_t i) {
    switch (dt) {
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
        return (double)((const int64_t *)buf)[i];
    case HVD_FLOAT16:
        return f16_val(((const uint16_t *)buf)[i]);
    case HVD_BFLOAT16:
        return bf16_val(((const uint16_t *)buf)[i]);
    case HVD_FLOAT32:
        return ((const float *)buf)[i];
    case HVD_FLOAT64:
        return ((const double *)buf)[i];
    }
    return NAN;
}

/* What an integer value becomes in dt (two's complement wrap-around). */
static double wrap(hvd_dtype_t dt, double v) {
    if (!dt_is_int(dt))
        return v;
    uint64_t tmp = 0;
    store(dt, &tmp, 0, v);
    return load(dt, &tmp, 0);
}

/* ---- inputs ------------------------------------------------------------------------- */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* A uniform integer in [lo, hi] from (seed, rank, i, step). */
static long long pick(uint64_t seed, int rank, size_t i, int step, long long lo, long long hi) {
    uint64_t x = mix64(seed ^ mix64(((uint64_t)(unsigned)rank << 48) ^ ((uint64_t)i << 8) ^
                                    (uint64_t)(unsigned)step));
    return lo + (long long)(x % (uint64_t)(hi - lo + 1));
}

/* ---- one named operation ----------------------------------------------------------- */

enum { K_AR, K_BC, K_AG, K_A2A, K_RS };
static const char *const KIND_NAMES[] = {"allreduce", "broadcast", "allgather", "alltoall",
                                         "reducescatter"};

typedef struct {
    char name[1100];
    int kind;
    hvd_dtype_t dt;
    hvd_reduce_op_t op;
    size_t count;
    int root;
    int in_place;
    double pre, post; /* 0: 1.0 */
    long long lo, hi; /* inputs: integers in [lo, hi] ... */
    int times_size;   /* ... times the job size */
    int plus_half;    /* ... plus 0.5 */
    /* state */
    uint64_t seed;
    unsigned char *send, *recv;
    size_t send_n, recv_n;
    hvd_handle_t h;
} op_t;

static void op_define(op_t *o, const char *name, int kind, hvd_dtype_t dt, hvd_reduce_op_t op,
                      size_t count, long long lo, long long hi) {
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", name);
    o->kind = kind;
    o->dt = dt;
    o->op = op;
    o->count = count;
    o->lo = lo;
    o->hi = hi;
    o->seed = name_hash(name);
}

static double op_input(const op_t *o, int rank, size_t i, int step) {
    double v = (double)pick(o->seed, rank, i, step, o->lo, o->hi);
    if (o->times_size)
        v *= g_size;
    if (o->plus_half)
        v += 0.5;
    return v;
}

static double scale_of(double s) {
    return s == 0 ? 1.0 : s;
}

/* The reduction over every rank in `ranks` (NULL: all) of element i. */
static double reduce_expected(const op_t *o, size_t i, int step, const int *active) {
    double acc = 0;
    int first = 1;
    for (int r = 0; r < g_size; r++) {
        double v = active && !active[r] ? 0.0 : op_input(o, r, i, step);
        v *= scale_of(o->pre);
        if (first) {
            acc = v;
            first = 0;
            continue;
        }
        switch (o->op) {
        case HVD_SUM:
        case HVD_AVERAGE:
            acc += v;
            break;
        case HVD_MIN:
            acc = v < acc ? v : acc;
            break;
        case HVD_MAX:
            acc = v > acc ? v : acc;
            break;
        case HVD_PRODUCT:
            acc *= v;
            break;
        default:
            fail_at(__LINE__, "op %d in a test", (int)o->op);
        }
    }
    if (o->op == HVD_AVERAGE)
        acc = dt_is_int(o->dt) ? (double)((long long)acc / g_size) : acc / g_size;
    return wrap(o->dt, acc * scale_of(o->post));
}

static void op_alloc(op_t *o) {
    size_t es = dt_size(o->dt), p = (size_t)g_size;
    switch (o->kind) {
    case K_AR:
    case K_BC:
        o->send_n = o->recv_n = o->count;
        break;
    case K_AG:
        o->send_n = o->count;
        o->recv_n = p * o->count;
        break;
    case K_A2A:
        o->send_n = o->recv_n = p * o->count;
        break;
    case K_RS:
        o->send_n = p * o->count;
        o->recv_n = o->count;
        break;
    }
    if (o->kind == K_AR && o->count == 0)
        return; /* NULL buffers with count 0 */
    o->recv = xmalloc(o->recv_n * es + GUARD);
    o->send = (o->in_place || o->kind == K_BC) ? o->recv : xmalloc(o->send_n * es + GUARD);
}

static void op_free(op_t *o) {
    if (o->send != o->recv)
        free(o->send);
    free(o->recv);
    o->send = o->recv = NULL;
}

/* Fill the inputs of step and poison the outputs. */
static void op_prepare(op_t *o, int step) {
    size_t es = dt_size(o->dt);
    if (!o->recv)
        return;
    memset(o->recv, SENTINEL_BYTE, o->recv_n * es);
    memset(o->recv + o->recv_n * es, GUARD_BYTE, GUARD);
    if (o->kind == K_BC && g_rank != o->root)
        return;
    for (size_t i = 0; i < o->send_n; i++)
        store(o->dt, o->send, i, op_input(o, g_rank, i, step));
    if (o->send != o->recv)
        memset(o->send + o->send_n * es, GUARD_BYTE, GUARD);
}

static void op_enqueue(op_t *o) {
    hvd_status_t st = HVD_ERR_INVALID_ARG;
    switch (o->kind) {
    case K_AR:
        st = hvd_allreduce_async_ex(o->name, o->send, o->recv, o->count, o->dt, o->op,
                                    scale_of(o->pre), scale_of(o->post), &o->h);
        break;
    case K_BC:
        st = hvd_broadcast_async(o->name, o->recv, o->count, o->dt, o->root, &o->h);
        break;
    case K_AG:
        st = hvd_allgather_async(o->name, o->send, o->count, o->recv, o->dt, &o->h);
        break;
    case K_A2A:
        st = hvd_alltoall_async(o->name, o->send, o->recv, o->count, o->dt, &o->h);
        break;
    case K_RS:
        st = hvd_reducescatter_async(o->name, o->send, o->recv, o->count, o->dt, o->op, &o->h);
        break;
    }
    if (st != HVD_OK)
        fail_at(__LINE__, "enqueueing %s '%s': %s: %s", KIND_NAMES[o->kind], o->name,
                hvd_status_str(st), hvd_last_error());
}

static void op_wait(op_t *o) {
    int pl = hvd_poll(o->h);
    CHECK(pl == 0 || pl == 1, "hvd_poll of the pending handle of '%s' returned %d", o->name, pl);
    hvd_status_t st = hvd_wait(o->h);
    if (st != HVD_OK)
        fail_at(__LINE__, "hvd_wait of %s '%s': %s: %s", KIND_NAMES[o->kind], o->name,
                hvd_status_str(st), hvd_last_error());
    pl = hvd_poll(o->h);
    CHECK(pl < 0, "hvd_poll of the released handle of '%s' returned %d", o->name, pl);
}

/* Float AVERAGE may divide by multiplying with 1 / size: within one unit in the last place
 * of the exact quotient when the size is not a power of two. */
static int near_ulp(hvd_dtype_t dt, double got, double want) {
    int bits;
    switch (dt) {
    case HVD_FLOAT16:
        bits = 10;
        break;
    case HVD_BFLOAT16:
        bits = 7;
        break;
    case HVD_FLOAT32:
        bits = 23;
        break;
    case HVD_FLOAT64:
        bits = 52;
        break;
    default:
        return 0;
    }
    if (want == 0 || (g_size & (g_size - 1)) == 0)
        return 0;
    return fabs(got - want) <= ldexp(1.0, ilogb(want) - bits);
}

/* Compare the output of step with what it must be; active (may be NULL) marks the ranks
 * that contributed to an allreduce (the others joined and gave zeros). */
static void op_check_active(const op_t *o, int step, const int *active) {
    size_t es = dt_size(o->dt), c = o->count;
    if (!o->recv)
        return;
    for (size_t i = 0; i < o->recv_n; i++) {
        double want = 0;
        switch (o->kind) {
        case K_AR:
            want = reduce_expected(o, i, step, active);
            break;
        case K_BC:
            want = op_input(o, o->root, i, step);
            break;
        case K_AG:
            want = op_input(o, (int)(i / c), i % c, step);
            break;
        case K_A2A:
            want = op_input(o, (int)(i / c), (size_t)g_rank * c + i % c, step);
            break;
        case K_RS: /* the reduction of element (rank * count + i) of every rank */
            want = reduce_expected(o, (size_t)g_rank * c + i, step, NULL);
            break;
        }
        double got = load(o->dt, o->recv, i);
        if (got != want && !(o->op == HVD_AVERAGE && near_ulp(o->dt, got, want)))
            fail_at(__LINE__,
                    "step %d: %s '%s' (%s, op %d, count %zu, root %d, %s, %d ranks): element "
                    "%zu is %.17g, expected %.17g",
                    step, KIND_NAMES[o->kind], o->name, dt_name(o->dt), (int)o->op, o->count,
                    o->root, o->in_place ? "in place" : "out of place", g_size, i, got, want);
    }
    __atomic_add_fetch(&g_checked, (long long)o->recv_n, __ATOMIC_RELAXED);
    for (size_t k = 0; k < GUARD; k++)
        CHECK(o->recv[o->recv_n * es + k] == GUARD_BYTE, "'%s': written past its %zu elements",
              o->name, o->recv_n);
}

static void op_check(const op_t *o, int step) {
    op_check_active(o, step, NULL);
}

/* ---- order -------------------------------------------------------------------------- */

#define NORDER 20

static void define_order_ops(op_t *ops) {
    int last = g_size - 1, second = g_size > 1 ? 1 : 0;
    op_t *o = ops;
    op_define(o++, "ord.ar.f32.sum", K_AR, HVD_FLOAT32, HVD_SUM, 1000, -1000, 1000);
    op_define(o, "ord.ar.f32.avg", K_AR, HVD_FLOAT32, HVD_AVERAGE, 777, -50, 50);
    o->times_size = 1;
    (o++)->in_place = 1;
    op_define(o++, "ord.ar.f16.sum", K_AR, HVD_FLOAT16, HVD_SUM, 513, -20, 20);
    op_define(o, "ord.ar.bf16.sum", K_AR, HVD_BFLOAT16, HVD_SUM, 300, -20, 20);
    (o++)->in_place = 1;
    op_define(o++, "ord.ar.i8.sum.wraps", K_AR, HVD_INT8, HVD_SUM, 129, -128, 127);
    op_define(o, "ord.ar.f64.max", K_AR, HVD_FLOAT64, HVD_MAX, 65, -1000000, 1000000);
    (o++)->plus_half = 1;
    op_define(o++, "ord.ar.f64.sum.big", K_AR, HVD_FLOAT64, HVD_SUM, 300001, -1000000, 1000000);
    op_define(o, "ord.ar.i32.min", K_AR, HVD_INT32, HVD_MIN, 31, -1000000000, 1000000000);
    (o++)->in_place = 1;
    op_define(o++, "ord.ar.u8.max", K_AR, HVD_UINT8, HVD_MAX, 17, 0, 255);
    op_define(o++, "ord.ar.i64.prod", K_AR, HVD_INT64, HVD_PRODUCT, 9, -3, 3);
    op_define(o, "ord.ar.f32.scaled", K_AR, HVD_FLOAT32, HVD_SUM, 50, -100, 100);
    o->pre = 0.5;
    (o++)->post = 4.0;
    op_define(o++, "ord.ar.empty", K_AR, HVD_FLOAT32, HVD_SUM, 0, 0, 0);
    op_define(o, "ord.bc.i32.root_last", K_BC, HVD_INT32, HVD_SUM, 1000, -100000, 100000);
    (o++)->root = last;
    op_define(o, "ord.bc.f16.root1", K_BC, HVD_FLOAT16, HVD_SUM, 33, -1000, 1000);
    (o++)->root = second;
    op_define(o++, "ord.ag.i32", K_AG, HVD_INT32, HVD_SUM, 37, -1000000, 1000000);
    op_define(o++, "ord.ag.f64.one", K_AG, HVD_FLOAT64, HVD_SUM, 1, -1000000, 1000000);
    op_define(o++, "ord.a2a.i16", K_A2A, HVD_INT16, HVD_SUM, 5, -30000, 30000);
    op_define(o++, "ord.a2a.f32", K_A2A, HVD_FLOAT32, HVD_SUM, 100, -1000, 1000);
    op_define(o++, "ord.rs.f32.sum", K_RS, HVD_FLOAT32, HVD_SUM, 64, -1000, 1000);
    op_define(o++, "ord.rs.i32.avg", K_RS, HVD_INT32, HVD_AVERAGE, 3, -1000, 1000);
    CHECK(o - ops == NORDER, "%d operations defined", (int)(o - ops));
}

static int scenario_order(void) {
    init_hvd();
    op_t *ops = xmalloc(NORDER * sizeof *ops);
    define_order_ops(ops);
    for (int i = 0; i < NORDER; i++)
        op_alloc(&ops[i]);
    int perm[NORDER], wait_order[NORDER];
    for (int step = 0; step < 3; step++) {
        /* enqueue: rotated by 3 * rank (and by step), reversed on odd ranks */
        for (int k = 0; k < NORDER; k++)
            perm[k] = (k + 3 * g_rank + 5 * step) % NORDER;
        if (g_rank % 2)
            for (int k = 0; k < NORDER / 2; k++) {
                int t = perm[k];
                perm[k] = perm[NORDER - 1 - k];
                perm[NORDER - 1 - k] = t;
            }
        /* wait: the reverse on even ranks, rotated by 7 on odd ones */
        for (int k = 0; k < NORDER; k++)
            wait_order[k] = g_rank % 2 ? perm[(k + 7) % NORDER] : perm[NORDER - 1 - k];
        for (int k = 0; k < NORDER; k++)
            op_prepare(&ops[k], step);
        for (int k = 0; k < NORDER; k++)
            op_enqueue(&ops[perm[k]]);
        for (int k = 0; k < NORDER; k++)
            op_wait(&ops[wait_order[k]]);
        for (int k = 0; k < NORDER; k++)
            op_check(&ops[k], step);
    }
    for (int i = 0; i < NORDER; i++)
        op_free(&ops[i]);
    free(ops);
    OK(hvd_shutdown());
    return 0;
}

/* ---- fusion ------------------------------------------------------------------------- */

#define NFUSE 100

static void define_fusion_ops(op_t *ops) {
    for (int i = 0; i < NFUSE; i++) {
        char name[32];
        snprintf(name, sizeof name, "fuse.%03d", i);
        size_t count = i == 0 ? 0 : i == 1 ? 1 : ((size_t)i * 397 % 4000) | 1;
        hvd_dtype_t dt = HVD_FLOAT32;
        hvd_reduce_op_t op = HVD_SUM;
        long long lo = -1000, hi = 1000;
        if (i % 5 == 2) {
            dt = HVD_INT32;
            lo = -1000000;
            hi = 1000000;
        } else if (i % 7 == 3) {
            dt = HVD_FLOAT64;
            op = HVD_MAX;
        } else if (i % 11 == 4) {
            dt = HVD_FLOAT16;
            lo = -100;
            hi = 100;
        }
        op_define(&ops[i], name, K_AR, dt, op, count, lo, hi);
        ops[i].in_place = i % 2;
        op_alloc(&ops[i]);
    }
}

static int scenario_fusion(void) {
    init_hvd();
    op_t *ops = xmalloc(NFUSE * sizeof *ops);
    define_fusion_ops(ops);
    for (int step = 0; step < 5; step++) {
        for (int i = 0; i < NFUSE; i++)
            op_prepare(&ops[i], step);
        /* odd ranks enqueue backwards */
        for (int i = 0; i < NFUSE; i++)
            op_enqueue(&ops[g_rank % 2 ? NFUSE - 1 - i : i]);
        for (int i = 0; i < NFUSE; i++)
            op_wait(&ops[i]);
        for (int i = 0; i < NFUSE; i++)
            op_check(&ops[i], step);
    }
    for (int i = 0; i < NFUSE; i++)
        op_free(&ops[i]);
    free(ops);
    OK(hvd_shutdown());
    return 0;
}

/* ---- mixed: blocking calls between async enqueues and waits; grouped allreduce -------- */

static void blocking_allreduce_check(int step, size_t count) {
    int32_t *a = xmalloc(count * sizeof *a), *b = xmalloc(count * sizeof *b);
    for (size_t i = 0; i < count; i++)
        a[i] = (int32_t)(g_rank * 1000 + (int)i + step);
    OK(hvd_allreduce(a, b, count, HVD_INT32, HVD_SUM));
    for (size_t i = 0; i < count; i++) {
        long long want =
            1000LL * g_size * (g_size - 1) / 2 + (long long)g_size * ((long long)i + step);
        CHECK(b[i] == want, "blocking allreduce step %d element %zu: %d, expected %lld", step, i,
              b[i], want);
    }
    free(a);
    free(b);
}

#define NGROUP 5

static int scenario_mixed(void) {
    init_hvd();
    op_t a, g, bc;
    op_define(&a, "mx.a", K_AR, HVD_FLOAT32, HVD_SUM, 1000, -1000, 1000);
    op_define(&g, "mx.gather", K_AG, HVD_INT64, HVD_SUM, 10, -1000000, 1000000);
    op_define(&bc, "mx.bcast", K_BC, HVD_FLOAT64, HVD_SUM, 70000, -1000000, 1000000);
    bc.root = g_size - 1;
    op_alloc(&a);
    op_alloc(&g);
    op_alloc(&bc);
    static const size_t gcounts[NGROUP] = {1, 0, 100, 3000, 7};
    op_t grp[NGROUP]; /* the grouped allreduce's tensors, checked like single ones */
    const void *gsend[NGROUP];
    void *grecv[NGROUP];
    hvd_handle_t gh[NGROUP];
    for (int i = 0; i < NGROUP; i++) {
        char name[32];
        snprintf(name, sizeof name, "mx.grp.%d", i);
        op_define(&grp[i], name, K_AR, HVD_FLOAT64, HVD_SUM, gcounts[i], -1000, 1000);
        grp[i].in_place = i == 2;
        op_alloc(&grp[i]);
    }
    for (int step = 0; step < 4; step++) {
        op_prepare(&a, step);
        op_prepare(&g, step);
        op_prepare(&bc, step);
        for (int i = 0; i < NGROUP; i++) {
            op_prepare(&grp[i], step);
            gsend[i] = grp[i].send;
            grecv[i] = grp[i].recv;
        }
        op_enqueue(&a);
        blocking_allreduce_check(step, 7);
        op_enqueue(&g);
        OK(hvd_barrier());
        OK(hvd_grouped_allreduce_async("mx.grp", NGROUP, gsend, grecv, gcounts, HVD_FLOAT64,
                                       HVD_SUM, gh));
        for (int i = 0; i < NGROUP; i++) {
            grp[i].h = gh[i];
            CHECK(gh[i] != a.h && gh[i] != g.h, "grouped handle %d repeats another handle", i);
            for (int j = 0; j < i; j++)
                CHECK(gh[i] != gh[j], "grouped handles %d and %d are both %lld", j, i, gh[i]);
        }
        /* a large blocking broadcast while async work is pending */
        OK(hvd_broadcast(bc.recv, bc.count, bc.dt, bc.root));
        op_check(&bc, step);
        blocking_allreduce_check(step, 3000); /* past the inline path */
        /* wait in a rank-dependent order */
        if (g_rank % 2) {
            for (int i = NGROUP - 1; i >= 0; i--)
                op_wait(&grp[i]);
            op_wait(&g);
            op_wait(&a);
        } else {
            op_wait(&a);
            OK(hvd_barrier());
            op_wait(&g);
            for (int i = 0; i < NGROUP; i++)
                op_wait(&grp[i]);
        }
        if (g_rank % 2)
            OK(hvd_barrier()); /* the even ranks' barrier, at another point */
        op_check(&a, step);
        op_check(&g, step);
        for (int i = 0; i < NGROUP; i++)
            op_check(&grp[i], step);
    }
    op_free(&a);
    op_free(&g);
    op_free(&bc);
    for (int i = 0; i < NGROUP; i++)
        op_free(&grp[i]);
    OK(hvd_shutdown());
    return 0;
}

/* ---- threads ------------------------------------------------------------------------ */

#define NTHREADS 3
#define PER_THREAD 8

typedef struct {
    int id;
    op_t ops[PER_THREAD];
} worker_t;

static void *worker_main(void *arg) {
    worker_t *w = arg;
    for (int step = 0; step < 6; step++) {
        for (int j = 0; j < PER_THREAD; j++)
            op_prepare(&w->ops[j], step);
        for (int j = 0; j < PER_THREAD; j++)
            op_enqueue(&w->ops[(j + g_rank + w->id) % PER_THREAD]);
        for (int j = PER_THREAD - 1; j >= 0; j--)
            op_wait(&w->ops[j]);
        for (int j = 0; j < PER_THREAD; j++)
            op_check(&w->ops[j], step);
    }
    return NULL;
}

static int scenario_threads(void) {
    init_hvd();
    worker_t *ws = xmalloc(NTHREADS * sizeof *ws);
    pthread_t th[NTHREADS];
    for (int t = 0; t < NTHREADS; t++) {
        ws[t].id = t;
        for (int j = 0; j < PER_THREAD; j++) {
            char name[32];
            snprintf(name, sizeof name, "thr%d.%d", t, j);
            op_define(&ws[t].ops[j], name, j == 5 ? K_AG : K_AR, j % 2 ? HVD_INT32 : HVD_FLOAT32,
                      HVD_SUM, (size_t)(1 + j * 301), -1000, 1000);
            op_alloc(&ws[t].ops[j]);
        }
    }
    for (int t = 0; t < NTHREADS; t++)
        CHECK(pthread_create(&th[t], NULL, worker_main, &ws[t]) == 0, "pthread_create");
    /* blocking collectives on this thread meanwhile (only one thread runs those) */
    for (int step = 0; step < 20; step++) {
        blocking_allreduce_check(step, (size_t)(1 + step * 50));
        if (step % 5 == 0)
            OK(hvd_barrier());
    }
    for (int t = 0; t < NTHREADS; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < NTHREADS; t++)
        for (int j = 0; j < PER_THREAD; j++)
            op_free(&ws[t].ops[j]);
    free(ws);
    OK(hvd_shutdown());
    return 0;
}

/* ---- duplicate names and argument errors ------------------------------------------- */

static int scenario_duplicate(void) {
    float x[4] = {1, 2, 3, 4}, y[4];
    hvd_handle_t h = 0, h2 = 0;
    /* before hvd_init */
    EXPECT(HVD_ERR_SHUT_DOWN, hvd_allreduce_async("pre.init", x, y, 4, HVD_FLOAT32, HVD_SUM, &h));
    EXPECT(HVD_ERR_SHUT_DOWN, hvd_wait(12345));
    CHECK(hvd_poll(12345) < 0, "hvd_poll before init");
    EXPECT(HVD_ERR_SHUT_DOWN, hvd_join(NULL));
    init_hvd();

    /* The same name twice: the second fails at once, the first is unaffected. Rank r's name
     * is "dup.r", which no other rank enqueues before the barrier: it is surely still in
     * flight when the second enqueue comes. */
    op_t *dups = xmalloc((size_t)g_size * sizeof *dups), other;
    for (int q = 0; q < g_size; q++) {
        char name[32];
        snprintf(name, sizeof name, "dup.%d", q);
        op_define(&dups[q], name, K_AR, HVD_FLOAT32, HVD_SUM, 100, -1000, 1000);
        op_alloc(&dups[q]);
    }
    op_define(&other, "dup.other", K_AR, HVD_INT32, HVD_SUM, 10, -1000, 1000);
    op_alloc(&other);
    op_t *d = &dups[g_rank];
    for (int step = 0; step < 3; step++) {
        for (int q = 0; q < g_size; q++)
            op_prepare(&dups[q], step);
        op_prepare(&other, step);
        op_enqueue(d);
        float z[3] = {0};
        h2 = -77;
        EXPECT(HVD_ERR_INVALID_ARG,
               hvd_allreduce_async(d->name, z, z, 3, HVD_FLOAT32, HVD_SUM, &h2));
        HAS(hvd_last_error(), d->name);
        CHECK(h2 == -77, "a failed enqueue wrote the handle (%lld)", h2);
        /* another kind of operation under the name is refused just the same */
        EXPECT(HVD_ERR_INVALID_ARG, hvd_broadcast_async(d->name, z, 3, HVD_FLOAT32, 0, &h2));
        CHECK(hvd_poll(d->h) == 0, "'%s' completed before the other ranks enqueued it", d->name);
        OK(hvd_barrier());
        for (int q = 0; q < g_size; q++)
            if (q != g_rank)
                op_enqueue(&dups[q]);
        op_enqueue(&other);
        op_wait(&other);
        for (int q = g_size - 1; q >= 0; q--)
            op_wait(&dups[q]);
        for (int q = 0; q < g_size; q++)
            op_check(&dups[q], step);
        op_check(&other, step);
        /* released: waiting again is an error, and the name is free again (next step) */
        EXPECT(HVD_ERR_INVALID_ARG, hvd_wait(d->h));
    }

    /* A grouped allreduce whose name collides with one in flight is refused as a whole.
     * Rank r's group is "hold<r>"; "hold<r>.1" is in flight on rank r alone until the
     * barrier. */
    float gs[3][2] = {{1, 1}, {2, 2}, {3, 3}}, gr[3][2];
    const void *gsp[3] = {gs[0], gs[1], gs[2]};
    void *grp[3] = {gr[0], gr[1], gr[2]};
    size_t gc[3] = {2, 2, 2};
    hvd_handle_t hgs[3] = {-1, -1, -1};
    float *hold = xmalloc((size_t)g_size * 4 * sizeof *hold); /* per rank: .1 (2), .0 (1) */
    hvd_handle_t *hh = xmalloc((size_t)g_size * 2 * sizeof *hh);
    char hname[64];
    for (int q = 0; q < g_size; q++) {
        hold[4 * q] = 1;
        hold[4 * q + 1] = 2;
        hold[4 * q + 2] = 5;
    }
    snprintf(hname, sizeof hname, "hold%d.1", g_rank);
    OK(hvd_allreduce_async(hname, &hold[4 * g_rank], &hold[4 * g_rank], 2, HVD_FLOAT32, HVD_SUM,
                           &hh[2 * g_rank]));
    snprintf(hname, sizeof hname, "hold%d", g_rank);
    EXPECT(HVD_ERR_INVALID_ARG,
           hvd_grouped_allreduce_async(hname, 3, gsp, grp, gc, HVD_FLOAT32, HVD_SUM, hgs));
    snprintf(hname, sizeof hname, "hold%d.1", g_rank);
    HAS(hvd_last_error(), hname);
    CHECK(hgs[0] == -1 && hgs[1] == -1 && hgs[2] == -1, "a refused group wrote handles");
    /* nothing of the group was enqueued: hold<r>.0 is free */
    snprintf(hname, sizeof hname, "hold%d.0", g_rank);
    OK(hvd_allreduce_async(hname, &hold[4 * g_rank + 2], &hold[4 * g_rank + 2], 1, HVD_FLOAT32,
                           HVD_SUM, &hh[2 * g_rank + 1]));
    OK(hvd_barrier());
    for (int q = 0; q < g_size; q++) {
        if (q == g_rank)
            continue;
        snprintf(hname, sizeof hname, "hold%d.1", q);
        OK(hvd_allreduce_async(hname, &hold[4 * q], &hold[4 * q], 2, HVD_FLOAT32, HVD_SUM,
                               &hh[2 * q]));
        snprintf(hname, sizeof hname, "hold%d.0", q);
        OK(hvd_allreduce_async(hname, &hold[4 * q + 2], &hold[4 * q + 2], 1, HVD_FLOAT32, HVD_SUM,
                               &hh[2 * q + 1]));
    }
    for (int k = 0; k < 2 * g_size; k++)
        OK(hvd_wait(hh[k]));
    for (int q = 0; q < g_size; q++)
        CHECK(hold[4 * q] == g_size && hold[4 * q + 1] == 2 * g_size &&
                  hold[4 * q + 2] == 5 * g_size,
              "hold%d results %g %g %g", q, hold[4 * q], hold[4 * q + 1], hold[4 * q + 2]);
    free(hold);
    free(hh);
    /* now the whole group goes */
    OK(hvd_grouped_allreduce_async("grp", 3, gsp, grp, gc, HVD_FLOAT32, HVD_SUM, hgs));
    for (int i = 0; i < 3; i++) {
        OK(hvd_wait(hgs[i]));
        CHECK(gr[i][0] == (i + 1) * g_size && gr[i][1] == (i + 1) * g_size, "grp.%d: %g %g", i,
              gr[i][0], gr[i][1]);
    }

    /* names are copied at enqueue: the caller's buffer may change at once */
    char nbuf[64];
    for (int step = 0; step < 2; step++) {
        snprintf(nbuf, sizeof nbuf, "copied.name");
        int32_t v = g_rank + 1, w = 0;
        OK(hvd_allreduce_async(nbuf, &v, &w, 1, HVD_INT32, HVD_SUM, &h));
        memset(nbuf, 'X', sizeof nbuf - 1);
        nbuf[sizeof nbuf - 1] = '\0';
        OK(hvd_wait(h));
        CHECK(w == g_size * (g_size + 1) / 2, "copied.name: %d", w);
    }

    /* the longest name (1024 bytes) works; 1025 bytes and empty names do not */
    char *longname = xmalloc(1026);
    for (int i = 0; i < 1024; i++)
        longname[i] = (char)('a' + i % 26);
    longname[1024] = '\0';
    {
        int32_t v = 1, w = 0;
        OK(hvd_allreduce_async(longname, &v, &w, 1, HVD_INT32, HVD_SUM, &h));
        OK(hvd_wait(h));
        CHECK(w == g_size, "1024-byte name: %d", w);
        longname[1024] = 'z';
        longname[1025] = '\0';
        EXPECT(HVD_ERR_INVALID_ARG,
               hvd_allreduce_async(longname, &v, &w, 1, HVD_INT32, HVD_SUM, &h));
    }
    free(longname);
    EXPECT(HVD_ERR_INVALID_ARG, hvd_allreduce_async("", x, y, 4, HVD_FLOAT32, HVD_SUM, &h));
    EXPECT(HVD_ERR_INVALID_ARG, hvd_allreduce_async(NULL, x, y, 4, HVD_FLOAT32, HVD_SUM, &h));
    EXPECT(HVD_ERR_INVALID_ARG, hvd_allreduce_async("arg", x, y, 4, HVD_FLOAT32, HVD_SUM, NULL));
    EXPECT(HVD_ERR_INVALID_ARG, hvd_allreduce_async("arg", NULL, y, 4, HVD_FLOAT32, HVD_SUM, &h));
    EXPECT(HVD_ERR_INVALID_ARG, hvd_allreduce_async("arg", x, y, 4, (hvd_dtype_t)99, HVD_SUM, &h));
    EXPECT(HVD_ERR_INVALID_ARG,
           hvd_allreduce_async("arg", x, y, 4, HVD_FLOAT32, (hvd_reduce_op_t)42, &h));
    /* Adasum takes floating types only (adasum_check.c tests what it computes) */
    EXPECT(HVD_ERR_INVALID_ARG, hvd_allreduce_async("arg", x, y, 4, HVD_INT32, HVD_ADASUM, &h));
    EXPECT(HVD_ERR_INVALID_ARG, hvd_broadcast_async("arg", x, 4, HVD_FLOAT32, g_size, &h));
    EXPECT(HVD_ERR_INVALID_ARG, hvd_broadcast_async("arg", x, 4, HVD_FLOAT32, -1, &h));
    EXPECT(HVD_ERR_INVALID_ARG, hvd_reducescatter_async("arg", x, y, 1, HVD_FLOAT32, HVD_MAX, &h));
    EXPECT(HVD_ERR_INVALID_ARG,
           hvd_grouped_allreduce_async("arg", 0, NULL, NULL, NULL, HVD_FLOAT32, HVD_SUM, &h));
    EXPECT(HVD_ERR_INVALID_ARG, hvd_wait(-5));
    EXPECT(HVD_ERR_INVALID_ARG, hvd_wait(h + 1000000));
    CHECK(hvd_poll(h + 1000000) < 0, "hvd_poll of an unknown handle");
    /* none of the refused calls left anything behind: "arg" is free and works */
    OK(hvd_allreduce_async("arg", x, y, 4, HVD_FLOAT32, HVD_SUM, &h));
    OK(hvd_wait(h));
    for (int i = 0; i < 4; i++)
        CHECK(y[i] == x[i] * g_size, "arg[%d]: %g", i, y[i]);
    for (int q = 0; q < g_size; q++)
        op_free(&dups[q]);
    free(dups);
    op_free(&other);
    OK(hvd_shutdown());
    EXPECT(HVD_ERR_SHUT_DOWN, hvd_allreduce_async("post", x, y, 4, HVD_FLOAT32, HVD_SUM, &h));
    return 0;
}

/* ---- mismatch ----------------------------------------------------------------------- */

/* Wait for h, which must fail with HVD_ERR_MISMATCH naming the tensor and two ranks. */
static void expect_mismatch(hvd_handle_t h, const char *name, const char *what) {
    hvd_status_t st = hvd_wait(h);
    char msg[4096];
    snprintf(msg, sizeof msg, "%s", st == HVD_OK ? "" : hvd_last_error());
    CHECK(st == HVD_ERR_MISMATCH, "'%s' (%s): hvd_wait returned %s, expected HVD_ERR_MISMATCH: %s",
          name, what, hvd_status_str(st), msg);
    char quoted[128];
    snprintf(quoted, sizeof quoted, "'%s'", name);
    HAS(msg, quoted);
    HAS(msg, what);
    /* rank 0 disagrees with every other rank: the message names rank 0 and another */
    HAS(msg, "rank 0");
    int other = 0;
    for (int r = 1; r < g_size; r++) {
        char rk[32];
        snprintf(rk, sizeof rk, "rank %d", r);
        other |= strstr(msg, rk) != NULL;
    }
    CHECK(other, "'%s': the message names no rank but 0: %s", name, msg);
}

static int scenario_mismatch(void) {
    init_hvd();
    CHECK(g_size >= 2, "mismatch needs 2 ranks or more");
    int r0 = g_rank == 0;
    float f[16] = {0}, fo[16];
    int32_t iv[16] = {0}, io[16], io2[8];
    hvd_handle_t h, hok;
    op_t good;
    op_define(&good, "mm.good", K_AR, HVD_FLOAT32, HVD_SUM, 500, -1000, 1000);
    op_alloc(&good);
    for (int round = 0; round < 2; round++) {
        /* count: rank 0 has 10 elements, the others 11; a good op goes along */
        op_prepare(&good, round);
        OK(hvd_allreduce_async("bad", f, fo, r0 ? 10 : 11, HVD_FLOAT32, HVD_SUM, &h));
        op_enqueue(&good);
        expect_mismatch(h, "bad", "shape");
        op_wait(&good);
        op_check(&good, round);
        /* dtype */
        OK(hvd_allreduce_async("bad_dtype", r0 ? (void *)f : (void *)iv,
                               r0 ? (void *)fo : (void *)io, 8, r0 ? HVD_FLOAT32 : HVD_INT32,
                               HVD_SUM, &h));
        expect_mismatch(h, "bad_dtype", "Mismatched data types");
        /* broadcast root */
        OK(hvd_broadcast_async("bad_root", iv, 4, HVD_INT32, r0 ? 0 : 1, &h));
        expect_mismatch(h, "bad_root", "root");
        /* reduce op */
        OK(hvd_allreduce_async("bad_op", f, fo, 4, HVD_FLOAT32, r0 ? HVD_SUM : HVD_MAX, &h));
        expect_mismatch(h, "bad_op", "reduction op");
        /* scale factors */
        OK(hvd_allreduce_async_ex("bad_scale", f, fo, 4, HVD_FLOAT32, HVD_SUM, r0 ? 1.0 : 2.0, 1.0,
                                  &h));
        expect_mismatch(h, "bad_scale", "factors");
        /* operation type */
        if (r0)
            OK(hvd_allreduce_async("bad_type", f, fo, 4, HVD_FLOAT32, HVD_SUM, &h));
        else
            OK(hvd_allgather_async("bad_type", f, 4, fo, HVD_FLOAT32, &h));
        expect_mismatch(h, "bad_type", "operations");
    }
    /* a name the response cache knows, then a disagreement on it, then agreement again */
    for (int step = 0; step < 4; step++) {
        int bad = step == 2;
        size_t n = bad && r0 ? 9 : 8;
        for (int i = 0; i < 8; i++)
            iv[i] = g_rank + i + step;
        OK(hvd_allreduce_async("cached", iv, io, n, HVD_INT32, HVD_SUM, &h));
        OK(hvd_allreduce_async("cached.ok", iv, io2, 8, HVD_INT32, HVD_SUM, &hok));
        if (bad) {
            expect_mismatch(h, "cached", "shape");
        } else {
            OK(hvd_wait(h));
            for (int i = 0; i < 8; i++)
                CHECK(io[i] == g_size * (g_size - 1) / 2 + g_size * (i + step),
                      "cached step %d [%d] = %d", step, i, io[i]);
        }
        OK(hvd_wait(hok));
        for (int i = 0; i < 8; i++)
            CHECK(io2[i] == g_size * (g_size - 1) / 2 + g_size * (i + step),
                  "cached.ok step %d [%d] = %d", step, i, io2[i]);
    }
    /* a mismatched blocking call too, and everything still works afterwards */
    EXPECT(HVD_ERR_MISMATCH, hvd_allreduce(f, fo, r0 ? 3 : 4, HVD_FLOAT32, HVD_SUM));
    blocking_allreduce_check(0, 100);
    OK(hvd_barrier());
    op_prepare(&good, 7);
    op_enqueue(&good);
    op_wait(&good);
    op_check(&good, 7);
    op_free(&good);
    OK(hvd_shutdown());
    return 0;
}

/* ---- partial: a name on some ranks only ------------------------------------------- */

static int scenario_partial(void) {
    init_hvd();
    CHECK(g_size >= 2, "partial needs 2 ranks or more");
    op_t only, but0, work[4];
    op_define(&only, "only_rank1", K_AR, HVD_FLOAT32, HVD_SUM, 10, -1000, 1000);
    op_define(&but0, "all_but_rank0", K_AR, HVD_INT32, HVD_SUM, 1000, -1000, 1000);
    op_define(&work[0], "pw.ar", K_AR, HVD_FLOAT32, HVD_SUM, 3000, -1000, 1000);
    op_define(&work[1], "pw.ag", K_AG, HVD_INT32, HVD_SUM, 11, -1000, 1000);
    op_define(&work[2], "pw.bc", K_BC, HVD_INT16, HVD_SUM, 50, -1000, 1000);
    work[2].root = g_size - 1;
    op_define(&work[3], "pw.rs", K_RS, HVD_FLOAT32, HVD_SUM, 20, -1000, 1000);
    op_alloc(&only);
    op_alloc(&but0);
    for (int i = 0; i < 4; i++)
        op_alloc(&work[i]);
    op_prepare(&only, 0);
    op_prepare(&but0, 0);
    if (g_rank == 1)
        op_enqueue(&only);
    if (g_rank != 0)
        op_enqueue(&but0);
    for (int step = 0; step < 5; step++) {
        for (int i = 0; i < 4; i++)
            op_prepare(&work[i], step);
        for (int i = 0; i < 4; i++)
            op_enqueue(&work[(i + g_rank) % 4]);
        blocking_allreduce_check(step, 5);
        OK(hvd_barrier());
        for (int i = 3; i >= 0; i--)
            op_wait(&work[i]);
        for (int i = 0; i < 4; i++)
            op_check(&work[i], step);
        if (g_rank == 1)
            CHECK(hvd_poll(only.h) == 0, "only_rank1 completed while only rank 1 enqueued it");
        if (g_rank != 0)
            CHECK(hvd_poll(but0.h) == 0, "all_but_rank0 completed without rank 0");
    }
    /* clean up: the others join in, everything completes. The barrier first: without it
     * rank 0 could enqueue all_but_rank0 while a slower rank still polls it in step 4. */
    OK(hvd_barrier());
    if (g_rank != 1)
        op_enqueue(&only);
    if (g_rank == 0)
        op_enqueue(&but0);
    op_wait(&only);
    op_wait(&but0);
    op_check(&only, 0);
    op_check(&but0, 0);
    op_free(&only);
    op_free(&but0);
    for (int i = 0; i < 4; i++)
        op_free(&work[i]);
    OK(hvd_shutdown());
    return 0;
}

/* ---- join --------------------------------------------------------------------------- */

static int scenario_join(void) {
    init_hvd();
    int steps = 3 + g_rank, max_steps = 3 + g_size - 1;
    int *active = xmalloc((size_t)g_size * sizeof *active);
    op_t gs, ga;
    op_define(&gs, "g", K_AR, HVD_FLOAT32, HVD_SUM, 1000, -1000, 1000);
    op_define(&ga, "g.avg", K_AR, HVD_FLOAT64, HVD_AVERAGE, 33, -1000, 1000);
    ga.times_size = 1; /* AVERAGE divides by the job size: exact */
    op_alloc(&gs);
    op_alloc(&ga);
    for (int step = 0; step < steps; step++) {
        for (int r = 0; r < g_size; r++)
            active[r] = step < 3 + r;
        op_prepare(&gs, step);
        op_prepare(&ga, step);
        /* a name never seen before (not in the response cache) every step too */
        char fname[32];
        snprintf(fname, sizeof fname, "fresh.%d", step);
        op_t fr;
        op_define(&fr, fname, K_AR, HVD_INT32, HVD_SUM, 5, -1000, 1000);
        op_alloc(&fr);
        op_prepare(&fr, step);
        op_enqueue(&gs);
        op_enqueue(&fr);
        op_enqueue(&ga);
        op_wait(&ga);
        op_wait(&fr);
        op_wait(&gs);
        op_check_active(&gs, step, active);
        op_check_active(&ga, step, active);
        op_check_active(&fr, step, active);
        op_free(&fr);
    }
    if (g_rank == g_size - 1 && g_size > 1) {
        /* every other rank has joined: only allreduce works now */
        int32_t v[3] = {1, 2, 3}, w[6];
        hvd_handle_t h;
        OK(hvd_allgather_async("ag.while.joined", v, 3, w, HVD_INT32, &h));
        hvd_status_t st = hvd_wait(h);
        CHECK(st != HVD_OK, "allgather succeeded while ranks had joined");
        HAS(hvd_last_error(), "Join");
    }
    int last = -2;
    OK(hvd_join(&last));
    CHECK(last == g_size - 1, "hvd_join: last joined rank %d, expected %d", last, g_size - 1);
    (void)max_steps;
    /* everybody is back: a normal step */
    for (int r = 0; r < g_size; r++)
        active[r] = 1;
    op_prepare(&gs, 100);
    op_enqueue(&gs);
    op_wait(&gs);
    op_check_active(&gs, 100, active);
    /* a second join, all ranks at once: they agree on who was last */
    int last2 = -2;
    OK(hvd_join(&last2));
    CHECK(last2 >= 0 && last2 < g_size, "second hvd_join: last joined rank %d", last2);
    int32_t mine = last2, *all = xmalloc((size_t)g_size * sizeof *all);
    OK(hvd_allgather(&mine, 1, all, HVD_INT32));
    for (int r = 0; r < g_size; r++)
        CHECK(all[r] == last2, "second join: rank %d says %d joined last, this rank says %d", r,
              all[r], last2);
    blocking_allreduce_check(1, 10);
    free(all);
    free(active);
    op_free(&gs);
    op_free(&ga);
    OK(hvd_shutdown());
    return 0;
}

/* ---- evict: a pending cache hit whose entry is evicted ------------------------------ */

/* Run with HOROVOD_CACHE_CAPACITY=1 (and a timeline): rank 0 enqueues "ev.x", a name the
 * cache knows, which waits for rank 1 as a cache hit; meanwhile "ev.y", new, is negotiated
 * and cached, evicting "ev.x" from the only cache entry, so rank 0's pending "ev.x" goes to
 * the coordinator instead. Every result must be right (and the timeline consistent). */
static int scenario_evict(void) {
    init_hvd();
    CHECK(g_size >= 2, "evict needs 2 ranks or more");
    op_t x, y;
    op_define(&x, "ev.x", K_AR, HVD_FLOAT32, HVD_SUM, 100, -1000, 1000);
    op_define(&y, "ev.y", K_AR, HVD_INT32, HVD_SUM, 10, -1000, 1000);
    op_alloc(&x);
    op_alloc(&y);
    for (int round = 0; round < 3; round++) {
        /* every rank: ev.x, now in the cache */
        op_prepare(&x, 2 * round);
        op_enqueue(&x);
        op_wait(&x);
        op_check(&x, 2 * round);
        OK(hvd_barrier());
        op_prepare(&x, 2 * round + 1);
        op_prepare(&y, round);
        if (g_rank == 0)
            op_enqueue(&x); /* a hit, waiting for the others */
        op_enqueue(&y);     /* new: negotiated, cached, evicts ev.x */
        op_wait(&y);
        op_check(&y, round);
        if (g_rank != 0)
            op_enqueue(&x);
        op_wait(&x);
        op_check(&x, 2 * round + 1);
    }
    op_free(&x);
    op_free(&y);
    OK(hvd_shutdown());
    return 0;
}

/* ---- unwaited ----------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Enqueue o and poll (never wait) until it is done: the seconds that took. */
static double poll_until_done(op_t *o, int step) {
    op_prepare(o, step);
    double t0 = now_s();
    op_enqueue(o);
    int pl;
    while ((pl = hvd_poll(o->h)) == 0) {
        CHECK(now_s() - t0 < 30, "'%s' not done 30 s after the enqueue, polled only", o->name);
        usleep(100);
    }
    CHECK(pl == 1, "hvd_poll of '%s' returned %d", o->name, pl);
    double dt = now_s() - t0;
    op_wait(o); /* done: releases the handle */
    op_check(o, step);
    return dt;
}

/* The background thread moves what nobody waits for. A push wakes it only when it would
 * sleep past the push's cycle time (engine.c): after a loop of waited calls it is due within
 * a cycle time anyway; after idleness it sleeps up to 50 ms (1 s on one rank) and the push
 * must wake it. A lost wake-up shows in the median: about 25 ms (500 ms alone), against
 * about one cycle time (1 ms) here. */
static int scenario_unwaited(void) {
    init_hvd();
    enum { ROUNDS = 12 };
    op_t x, u;
    op_define(&x, "uw.loop", K_AR, HVD_FLOAT32, HVD_SUM, 1, -1000, 1000);
    op_define(&u, "uw.alone", K_AR, HVD_INT32, HVD_SUM, 7, -1000, 1000);
    op_alloc(&x);
    op_alloc(&u);
    double hot[ROUNDS], idle[ROUNDS];
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < 300; i++) {
            op_prepare(&x, i);
            op_enqueue(&x);
            op_wait(&x);
        }
        op_check(&x, 299);
        hot[round] = poll_until_done(&u, 2 * round);
        /* idle for 120 to 210 ms: the thread's back-off (1, 2, 4 .. 50 ms) meets the push
         * at a different point of its sleep each round */
        usleep((useconds_t)(120 + (round * 37) % 90) * 1000);
        idle[round] = poll_until_done(&u, 2 * round + 1);
    }
    qsort(hot, ROUNDS, sizeof hot[0], cmp_double);
    qsort(idle, ROUNDS, sizeof idle[0], cmp_double);
    double hot_ms = 1e3 * hot[ROUNDS / 2], idle_ms = 1e3 * idle[ROUNDS / 2];
    if (g_rank == 0)
        printf("async_check unwaited: median %.2f ms after a loop, %.2f ms after idleness\n",
               hot_ms, idle_ms);
    CHECK(hot_ms < 10, "an unwaited operation after a loop took %.1f ms (median)", hot_ms);
    CHECK(idle_ms < 10, "an unwaited operation after idleness took %.1f ms (median)", idle_ms);
    op_free(&x);
    op_free(&u);
    OK(hvd_shutdown());
    return 0;
}

/* ---- resting ------------------------------------------------------------------------ */

static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *resting_peer_main(void *arg) {
    op_t *o = arg;
    for (int step = 0; step < 200; step++) {
        op_prepare(o, step);
        op_enqueue(o);
        op_wait(o);
        op_check(o, step);
    }
    return NULL;
}

/* Rank 0's waits while every other rank enqueues 20 ms late: the thread CPU seconds they
 * took, waited with hvd_wait_resting or hvd_wait. */
static double late_waits_cpu(op_t *o, int resting, int first_step) {
    double cpu = 0;
    for (int i = 0; i < 10; i++) {
        int step = first_step + i;
        OK(hvd_barrier());
        op_prepare(o, step);
        if (g_rank != 0)
            usleep(20 * 1000);
        op_enqueue(o);
        double c0 = thread_cpu_s();
        hvd_status_t st = resting ? hvd_wait_resting(o->h) : hvd_wait(o->h);
        cpu += thread_cpu_s() - c0;
        if (st != HVD_OK)
            fail_at(__LINE__, "waiting for '%s': %s: %s", o->name, hvd_status_str(st),
                    hvd_last_error());
        op_check(o, step);
    }
    return cpu;
}

static int scenario_resting(void) {
    init_hvd();
    op_t a, b, late;
    op_define(&a, "rest.a", K_AR, HVD_FLOAT32, HVD_SUM, 1000, -1000, 1000);
    op_define(&b, "rest.b", K_AR, HVD_INT32, HVD_SUM, 33, -1000, 1000);
    op_define(&late, "rest.late", K_AR, HVD_FLOAT64, HVD_SUM, 5, -1000, 1000);
    op_alloc(&a);
    op_alloc(&b);
    op_alloc(&late);
    /* one thread waits resting, the other as usual, on the same engine */
    pthread_t th;
    CHECK(pthread_create(&th, NULL, resting_peer_main, &b) == 0, "pthread_create");
    for (int step = 0; step < 200; step++) {
        op_prepare(&a, step);
        op_enqueue(&a);
        OK(hvd_wait_resting(a.h));
        op_check(&a, step);
    }
    CHECK(pthread_join(th, NULL) == 0, "pthread_join");
    if (g_size > 1) {
        double rest = late_waits_cpu(&late, 1, 0), spin = late_waits_cpu(&late, 0, 10);
        if (g_rank == 0)
            printf("async_check resting: 10 waits of 20 ms took %.2f ms of CPU resting, %.2f "
                   "ms with hvd_wait\n",
                   1e3 * rest, 1e3 * spin);
        if (g_rank == 0)
            CHECK(rest < 0.008, "10 resting waits of 20 ms took %.1f ms of CPU", 1e3 * rest);
    }
    op_free(&a);
    op_free(&b);
    op_free(&late);
    OK(hvd_shutdown());
    return 0;
}

/* ---- shutdown ----------------------------------------------------------------------- */

static void shutdown_round(int shutter, int round) {
    op_t warm;
    op_define(&warm, "sd.warm", K_AR, HVD_FLOAT32, HVD_SUM, 100, -1000, 1000);
    op_alloc(&warm);
    op_prepare(&warm, round);
    op_enqueue(&warm);
    op_wait(&warm);
    op_check(&warm, round);
    op_free(&warm);
    float v[4] = {1, 2, 3, 4}, w[4];
    hvd_handle_t h = -1;
    if (g_rank != shutter)
        OK(hvd_allreduce_async("sd.pending", v, w, 4, HVD_FLOAT32, HVD_SUM, &h));
    /* after this barrier every other rank has its pending handle */
    OK(hvd_barrier());
    if (g_rank == shutter) {
        double t0 = now_s();
        OK(hvd_shutdown());
        CHECK(now_s() - t0 < 10, "hvd_shutdown took %.1f s", now_s() - t0);
        CHECK(!hvd_is_initialized(), "initialised after hvd_shutdown");
        EXPECT(HVD_ERR_SHUT_DOWN,
               hvd_allreduce_async("sd.after", v, w, 4, HVD_FLOAT32, HVD_SUM, &h));
        EXPECT(HVD_ERR_SHUT_DOWN, hvd_allreduce(v, w, 4, HVD_FLOAT32, HVD_SUM));
        return;
    }
    char who[32];
    snprintf(who, sizeof who, "rank %d", shutter);
    hvd_status_t st = hvd_wait(h);
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", st == HVD_OK ? "" : hvd_last_error());
    CHECK(st == HVD_ERR_SHUT_DOWN, "pending hvd_wait after %s shut down: %s (%s)", who,
          hvd_status_str(st), msg);
    HAS(msg, who);
    /* every later call fails the same way, at once */
    double t0 = now_s();
    EXPECT(HVD_ERR_SHUT_DOWN, hvd_allreduce(v, w, 4, HVD_FLOAT32, HVD_SUM));
    HAS(hvd_last_error(), who);
    EXPECT(HVD_ERR_SHUT_DOWN, hvd_barrier());
    EXPECT(HVD_ERR_SHUT_DOWN, hvd_allreduce_async("sd.after", v, w, 4, HVD_FLOAT32, HVD_SUM, &h));
    HAS(hvd_last_error(), who);
    EXPECT(HVD_ERR_SHUT_DOWN, hvd_broadcast_async("sd.after2", v, 4, HVD_FLOAT32, 0, &h));
    EXPECT(HVD_ERR_SHUT_DOWN, hvd_join(NULL));
    CHECK(now_s() - t0 < 2, "failing calls after a peer's shutdown took %.1f s", now_s() - t0);
    OK(hvd_shutdown());
    CHECK(!hvd_is_initialized(), "initialised after hvd_shutdown");
}

static int scenario_shutdown(void) {
    init_hvd();
    CHECK(g_size >= 2, "shutdown needs 2 ranks or more");
    shutdown_round(0, 0);
    /* again, with every rank re-initialised and the last rank shutting down */
    init_hvd();
    shutdown_round(g_size - 1, 1);
    return 0;
}

/* ---- timeline ----------------------------------------------------------------------- */

static void timeline_path(char *out, size_t n, const char *file) {
    /* other ranks are given paths of their own, which must never be created */
    if (g_rank == 0)
        snprintf(out, n, "%s/%s", opt.dir, file);
    else
        snprintf(out, n, "%s/rank%d.%s", opt.dir, g_rank, file);
}

static void timeline_ops(const char *prefix, int steps) {
    op_t o[4];
    char n[64];
    snprintf(n, sizeof n, "%s.a", prefix);
    op_define(&o[0], n, K_AR, HVD_FLOAT32, HVD_SUM, 1000, -1000, 1000);
    snprintf(n, sizeof n, "%s.b", prefix);
    op_define(&o[1], n, K_AR, HVD_FLOAT32, HVD_SUM, 10, -1000, 1000);
    snprintf(n, sizeof n, "%s.bc", prefix);
    op_define(&o[2], n, K_BC, HVD_INT32, HVD_SUM, 10, -1000, 1000);
    o[2].root = g_size - 1;
    snprintf(n, sizeof n, "%s.ag", prefix);
    op_define(&o[3], n, K_AG, HVD_INT32, HVD_SUM, 10, -1000, 1000);
    for (int i = 0; i < 4; i++)
        op_alloc(&o[i]);
    for (int step = 0; step < steps; step++) {
        for (int i = 0; i < 4; i++) {
            op_prepare(&o[i], step);
            op_enqueue(&o[i]);
        }
        for (int i = 0; i < 4; i++)
            op_wait(&o[i]);
        for (int i = 0; i < 4; i++)
            op_check(&o[i], step);
    }
    for (int i = 0; i < 4; i++)
        op_free(&o[i]);
}

static int scenario_timeline(void) {
    CHECK(opt.dir, "timeline needs --dir");
    init_hvd();
    char p[1024];
    EXPECT(HVD_ERR_INVALID_ARG, hvd_start_timeline(NULL, 0));
    EXPECT(HVD_ERR_INVALID_ARG, hvd_start_timeline("", 0));
    timeline_path(p, sizeof p, "rt1.json");
    OK(hvd_start_timeline(p, 1));
    OK(hvd_barrier());
    timeline_ops("tl", 3);
    blocking_allreduce_check(0, 10);
    OK(hvd_barrier());
    /* a second start replaces the first file (which stays complete) */
    timeline_path(p, sizeof p, "rt2.json");
    OK(hvd_start_timeline(p, 0));
    OK(hvd_barrier());
    timeline_ops("tl2", 2);
    OK(hvd_barrier());
    OK(hvd_stop_timeline());
    OK(hvd_barrier());
    timeline_ops("after_stop", 1);
    OK(hvd_barrier());
    timeline_path(p, sizeof p, "rt3.json");
    OK(hvd_start_timeline(p, 0));
    /* a start that cannot create its file (rank 0 writes) fails and keeps the current one */
    snprintf(p, sizeof p, "%s/no/such/dir/x.json", opt.dir);
    if (g_rank == 0)
        EXPECT(HVD_ERR_IO, hvd_start_timeline(p, 0));
    else
        OK(hvd_start_timeline(p, 0));
    OK(hvd_barrier());
    timeline_ops("tl3", 1);
    OK(hvd_barrier());
    OK(hvd_shutdown()); /* closes rt3 */
    if (g_rank == 0)
        printf("async_check timeline: ok (rt1, rt2, rt3 written)\n");
    return 0;
}

/* ---- loop (timeline of a long run) ---------------------------------------------------- */

static void write_file(const char *name, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void write_file(const char *name, const char *fmt, ...) {
    char path[1024], tmp[1100];
    snprintf(path, sizeof path, "%s/%s", opt.dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    CHECK(f, "cannot write %s", tmp);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    CHECK(fclose(f) == 0, "cannot write %s", tmp);
    CHECK(rename(tmp, path) == 0, "cannot rename %s", tmp);
}

static int scenario_loop(void) {
    init_hvd();
    if (opt.dir) {
        char n[32];
        snprintf(n, sizeof n, "pid.%d", g_rank);
        write_file(n, "%d\n", (int)getpid());
    }
    double t0 = now_s();
    int step = 0;
    for (; opt.steps <= 0 || step < opt.steps; step++) {
        CHECK(now_s() - t0 < 60, "loop: still running after 60 s");
        timeline_ops("loop", 1);
        if (g_rank == 0 && opt.dir)
            write_file("step", "%d\n", step + 1);
    }
    OK(hvd_shutdown());
    if (g_rank == 0)
        printf("async_check loop: ok (%d steps)\n", step);
    return 0;
}

/* Keep horovodrun's SIGTERM (sent to every rank once one has failed) pending until exit, in
 * every thread (the library's start after this). Blocked rather than ignored: a signal that
 * is ignored still stops a traced process, and LeakSanitizer traces the process at exit, so
 * an ignored SIGTERM arriving then stalls the leak check until horovodrun's SIGKILL. */
static void hold_sigterm(void) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    CHECK(pthread_sigmask(SIG_BLOCK, &set, NULL) == 0, "pthread_sigmask");
    signal(SIGPIPE, SIG_IGN);
}

/* ---- peer death --------------------------------------------------------------------- */

static void clean_msg(char *m) {
    for (; *m; m++)
        if (*m == '\n')
            *m = ' ';
}

static int scenario_peer_death(void) {
    CHECK(opt.dir, "peer_death needs --dir");
    /* horovodrun SIGTERMs every rank as soon as one fails: the survivors hold it off, so
     * that what they report is the library's doing, and write it down before anything else */
    hold_sigterm();
    init_hvd();
    CHECK(g_size >= 2, "peer_death needs 2 ranks or more");
    const int victim = 1;
    op_t warm;
    op_define(&warm, "pd.warm", K_AR, HVD_FLOAT32, HVD_SUM, 100000, -1000, 1000);
    op_alloc(&warm);
    op_prepare(&warm, 0);
    op_enqueue(&warm);
    op_wait(&warm);
    op_check(&warm, 0);
    float v[8] = {1}, w[8], u[8] = {2}, x[8];
    hvd_handle_t h[3];
    /* names the victim enqueues too, and one it never does */
    OK(hvd_allreduce_async("pd.both", v, w, 8, HVD_FLOAT32, HVD_SUM, &h[0]));
    if (g_rank != victim)
        OK(hvd_allreduce_async("pd.never", u, u, 8, HVD_FLOAT32, HVD_SUM, &h[1]));
    OK(hvd_barrier());
    if (g_rank == victim) {
        write_file("victim", "pid=%d t_ns=%lld\n", (int)getpid(), real_ns());
        _exit(3);
    }
    long long t_call = real_ns();
    hvd_status_t st = hvd_wait(h[1]);
    long long t_err = real_ns();
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", st == HVD_OK ? "" : hvd_last_error());
    clean_msg(msg);
    /* pd.both completed before the barrier or fails the same way */
    hvd_status_t st_both = hvd_wait(h[0]);
    /* later calls fail at once with the first cause */
    double t1 = now_s();
    hvd_status_t st_async = hvd_allreduce_async("pd.after", v, x, 8, HVD_FLOAT32, HVD_SUM, &h[2]);
    char msg2[2048];
    snprintf(msg2, sizeof msg2, "%s", st_async == HVD_OK ? "" : hvd_last_error());
    clean_msg(msg2);
    if (st_async == HVD_OK)
        hvd_wait(h[2]);
    hvd_status_t st_block = hvd_allreduce(v, x, 8, HVD_FLOAT32, HVD_SUM);
    double later_ms = (now_s() - t1) * 1e3;
    t1 = now_s();
    hvd_status_t st_shut = hvd_shutdown();
    double shut_ms = (now_s() - t1) * 1e3;
    char name[32];
    snprintf(name, sizeof name, "rank.%d", g_rank);
    write_file(name,
               "status=%s\nmsg=%s\ncall_ns=%lld\nerr_ns=%lld\nboth=%s\nafter_async=%s\n"
               "after_async_msg=%s\nafter_blocking=%s\nlater_ms=%.0f\nshutdown=%s\n"
               "shutdown_ms=%.0f\n",
               hvd_status_str(st), msg, t_call, t_err, hvd_status_str(st_both),
               hvd_status_str(st_async), msg2, hvd_status_str(st_block), later_ms,
               hvd_status_str(st_shut), shut_ms);
    printf("rank %d: wait returned %s after the victim died: %s\n", g_rank, hvd_status_str(st),
           msg);
    fflush(stdout);
    op_free(&warm);
    return 0;
}

/* ---- stalls ------------------------------------------------------------------------- */

static void late_op(const char *name, int delay_ms, int round) {
    int32_t v[4], w[4];
    for (int i = 0; i < 4; i++)
        v[i] = g_rank + i + round;
    hvd_handle_t h;
    if (g_rank == 1)
        sleep_ms(delay_ms); /* the point of the test: rank 1 is late */
    double t0 = now_s();
    OK(hvd_allreduce_async(name, v, w, 4, HVD_INT32, HVD_SUM, &h));
    OK(hvd_wait(h));
    for (int i = 0; i < 4; i++)
        CHECK(w[i] == g_size * (g_size - 1) / 2 + g_size * (i + round), "%s[%d] = %d", name, i,
              w[i]);
    printf("rank %d: %s ok after %.1f s\n", g_rank, name, now_s() - t0);
    fflush(stdout);
}

static int scenario_stall_late(void) {
    init_hvd();
    CHECK(g_size >= 2, "stall_late needs 2 ranks or more");
    late_op("late", opt.delay_ms, 0);
    late_op("late_cached", 0, 1); /* now in the response cache */
    OK(hvd_barrier());
    late_op("late_cached", opt.delay_ms + 1000, 2);
    OK(hvd_barrier());
    OK(hvd_shutdown());
    if (g_rank == 0)
        printf("async_check stall_late: ok\n");
    return 0;
}

static int scenario_stall_never(void) {
    CHECK(opt.dir, "stall_never needs --dir");
    hold_sigterm();
    init_hvd();
    CHECK(g_size >= 2, "stall_never needs 2 ranks or more");
    float v[4] = {1, 2, 3, 4}, w[4];
    OK(hvd_allreduce(v, w, 4, HVD_FLOAT32, HVD_SUM));
    double t0 = now_s();
    hvd_status_t st;
    if (g_rank == 1) {
        st = hvd_barrier(); /* never submits "never" */
    } else {
        hvd_handle_t h;
        OK(hvd_allreduce_async("never", v, w, 4, HVD_FLOAT32, HVD_SUM, &h));
        st = hvd_wait(h);
    }
    double secs = now_s() - t0;
    char msg[4096];
    snprintf(msg, sizeof msg, "%s", st == HVD_OK ? "" : hvd_last_error());
    clean_msg(msg);
    char name[32];
    snprintf(name, sizeof name, "rank.%d", g_rank);
    write_file(name, "status=%s\nmsg=%s\nseconds=%.1f\n", hvd_status_str(st), msg, secs);
    printf("rank %d: %s after %.1f s: %s\n", g_rank, hvd_status_str(st), secs, msg);
    fflush(stdout);
    hvd_shutdown();
    return st == HVD_OK ? 0 : 1;
}

/* ---- main --------------------------------------------------------------------------- */

/* self: the program checks everything itself (rank 0 then reports "ok"); otherwise a test
 * script judges what the ranks wrote. */
static const struct {
    const char *name;
    int (*fn)(void);
    int self;
} SCENARIOS[] = {
    {"order", scenario_order, 1},
    {"fusion", scenario_fusion, 1},
    {"mixed", scenario_mixed, 1},
    {"threads", scenario_threads, 1},
    {"duplicate", scenario_duplicate, 1},
    {"mismatch", scenario_mismatch, 1},
    {"partial", scenario_partial, 1},
    {"join", scenario_join, 1},
    {"shutdown", scenario_shutdown, 1},
    {"evict", scenario_evict, 1},
    {"unwaited", scenario_unwaited, 1},
    {"resting", scenario_resting, 1},
    {"timeline", scenario_timeline, 0},
    {"loop", scenario_loop, 0},
    {"peer_death", scenario_peer_death, 0},
    {"stall_late", scenario_stall_late, 0},
    {"stall_never", scenario_stall_never, 0},
};

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: async_check SCENARIO [--dir D] [--steps N] [--delay-ms T]\n");
        return 2;
    }
    g_scn = argv[1];
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            opt.dir = argv[++i];
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            opt.steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--delay-ms") && i + 1 < argc)
            opt.delay_ms = atoi(argv[++i]);
        else {
            fprintf(stderr, "async_check: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (size_t i = 0; i < sizeof SCENARIOS / sizeof SCENARIOS[0]; i++) {
        if (strcmp(SCENARIOS[i].name, g_scn) != 0)
            continue;
        double t0 = now_s();
        int rc = SCENARIOS[i].fn();
        if (rc == 0 && g_rank == 0 && SCENARIOS[i].self)
            printf("async_check %s: ok (%d ranks, %lld elements checked on rank 0, %.2f s)\n",
                   g_scn, g_size, g_checked, now_s() - t0);
        return rc;
    }
    fprintf(stderr, "async_check: unknown scenario %s\n", g_scn);
    return 2;
}
