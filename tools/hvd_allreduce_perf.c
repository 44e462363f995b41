/* hvd_allreduce_perf: collective latency and bandwidth in the nccl-tests format.
 *
 *   horovodrun -np 2 hvd_allreduce_perf -b 8 -e 64M -f 2 [-m allreduce|allgather|broadcast|
 *              alltoall|reducescatter|step] [-d float32] [-o sum] [-w 5] [-n 20] [-c 1]
 *              [-r 0] [-I] [-N 100]
 *
 * For each size (bytes, from -b to -e multiplying by -f) it runs -w untimed warm-up calls and
 * -n timed ones, timing each call separately; "time" is the median per-call time of each
 * rank, the largest over the ranks (the job waits for its slowest rank). algbw is size /
 * time; busbw scales it by the traffic each rank must move (nccl-tests' factors), so the
 * numbers compare with nccl-tests'. With -c 1 (default) one more call checks every element
 * against values computed here independently, and #wrong counts the mismatches over all
 * ranks. Exit status 1 when any element was wrong.
 *
 * -o takes a list of ops (-o sum,adasum): every iteration then calls each in turn, and each
 * gets its row, so that ops compared on a machine whose speed drifts see the same moments.
 *
 * -m step models the gradient allreduces of one training step instead: -N tensors (default
 * 100) whose sizes grow geometrically from -b to -e bytes (default 4K to 1M; -f is unused),
 * as a model's gradients spread from biases to weight matrices, and with -N 1 one tensor of -e
 * bytes. It prints one row per way of reducing them, each timed per step (-w warm-up and -n
 * timed steps; time, algbw and busbw as above, with size = the bytes of all N tensors):
 *   async       N named hvd_allreduce_async calls ("step.0" ..), then hvd_wait on each: the
 *               way Horovod's DistributedOptimizer reduces gradients. The names come back
 *               every step, so negotiation hits the response cache, and tensors ready
 *               together are fused up to HOROVOD_FUSION_THRESHOLD bytes; the header prints
 *               the threshold in effect, and HOROVOD_FUSION_THRESHOLD=0 (or horovodrun
 *               --fusion-threshold-mb 0) gives this row without fusion;
 *   blocking    the same N tensors as N blocking hvd_allreduce calls in a row;
 *   one-buffer  one blocking hvd_allreduce of all N tensors' bytes: what a perfectly fused
 *               step approaches.
 * With -c 1 every step, warm-up included, is checked: each tensor holds the same small
 * integers as -m allreduce, so every sum is exact, and the output buffers are poisoned before
 * the step so that a stale result cannot pass. The preparation and the check are not timed,
 * and a barrier after them keeps one rank's checking out of the others' times. */
#include <hvd/hvd.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef enum {
    M_ALLREDUCE,
    M_ALLGATHER,
    M_BROADCAST,
    M_ALLTOALL,
    M_REDUCESCATTER,
    M_STEP,
    NMODES
} mode_t_;

static const char *MODES[] = {"allreduce", "allgather",     "broadcast",
                              "alltoall",  "reducescatter", "step"};
static const char *DTYPES[] = {"uint8",   "int8",    "uint16",  "int16", "int32",   "int64",
                               "float16", "float32", "float64", "bool",  "bfloat16"};
static const char *OPS[] = {"avg", "sum", "adasum", "min", "max", "prod"};
static const size_t DSIZE[] = {1, 1, 2, 2, 4, 8, 2, 4, 8, 1, 2};

typedef struct {
    mode_t_ mode;
    size_t minb, maxb;
    double factor;
    int warmup, iters, check, root, inplace;
    int ntensors; /* -m step */
    hvd_dtype_t dtype;
    hvd_reduce_op_t op;
    /* -o with a list: the ops, called in turn on every iteration (op is the current one) */
    hvd_reduce_op_t ops[6];
    int nops;
} opts_t;

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static size_t parse_size(const char *s) {
    char *end;
    double v = strtod(s, &end);
    if (*end == 'K' || *end == 'k')
        v *= 1024;
    else if (*end == 'M' || *end == 'm')
        v *= 1024 * 1024;
    else if (*end == 'G' || *end == 'g')
        v *= 1024.0 * 1024 * 1024;
    return v < 0 ? 0 : (size_t)v;
}

static int lookup(const char *s, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    if (strcmp(s, "float") == 0)
        return 7;
    if (strcmp(s, "average") == 0)
        return 0;
    if (strcmp(s, "product") == 0)
        return 5;
    return -1;
}

/* Modes that reduce (and so take -o). */
static int reduces(mode_t_ m) {
    return m == M_ALLREDUCE || m == M_REDUCESCATTER || m == M_STEP;
}

/* ---- element access through double, with the library's conversion rules ---- */

static float half_to_f(uint16_t h, int bf) {
    if (bf) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    int e = (h >> 10) & 31, m = h & 1023, s = h >> 15;
    float v = e == 0 ? ldexpf((float)m, -24) : ldexpf((float)(m | 1024), e - 25);
    return s ? -v : v;
}

static uint16_t f_to_half(float f, int bf) {
    /* Only used for small exact integers here, so no rounding is needed. */
    if (bf) {
        uint32_t u;
        memcpy(&u, &f, 4);
        return (uint16_t)(u >> 16);
    }
    if (f == 0)
        return 0;
    uint16_t s = f < 0 ? 0x8000 : 0;
    float a = fabsf(f);
    int e;
    float m = frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    return (uint16_t)(s | ((e + 14) << 10) | ((int)(m * 2048) & 1023));
}

static double get(const void *b, size_t i, hvd_dtype_t t) {
    switch (t) {
    case HVD_UINT8:
    case HVD_BOOL:
        return ((const uint8_t *)b)[i];
    case HVD_INT8:
        return ((const int8_t *)b)[i];
    case HVD_UINT16:
        return ((const uint16_t *)b)[i];
    case HVD_INT16:
        return ((const int16_t *)b)[i];
    case HVD_INT32:
        return ((const int32_t *)b)[i];
    case HVD_INT64:
        return (double)((const int64_t *)b)[i];
    case HVD_FLOAT16:
        return half_to_f(((const uint16_t *)b)[i], 0);
    case HVD_BFLOAT16:
        return half_to_f(((const uint16_t *)b)[i], 1);
    case HVD_FLOAT32:
        return ((const float *)b)[i];
    case HVD_FLOAT64:
        return ((const double *)b)[i];
    }
    return 0;
}

static void set(void *b, size_t i, hvd_dtype_t t, double v) {
    switch (t) {
    case HVD_UINT8:
        ((uint8_t *)b)[i] = (uint8_t)v;
        break;
    case HVD_BOOL:
        ((uint8_t *)b)[i] = v != 0;
        break;
    case HVD_INT8:
        ((int8_t *)b)[i] = (int8_t)v;
        break;
    case HVD_UINT16:
        ((uint16_t *)b)[i] = (uint16_t)v;
        break;
    case HVD_INT16:
        ((int16_t *)b)[i] = (int16_t)v;
        break;
    case HVD_INT32:
        ((int32_t *)b)[i] = (int32_t)v;
        break;
    case HVD_INT64:
        ((int64_t *)b)[i] = (int64_t)v;
        break;
    case HVD_FLOAT16:
        ((uint16_t *)b)[i] = f_to_half((float)v, 0);
        break;
    case HVD_BFLOAT16:
        ((uint16_t *)b)[i] = f_to_half((float)v, 1);
        break;
    case HVD_FLOAT32:
        ((float *)b)[i] = (float)v;
        break;
    case HVD_FLOAT64:
        ((double *)b)[i] = v;
        break;
    }
}

/* Input element i of rank r: small integers, so every reduction is exact in every dtype at
 * any rank count this tool is run with (products use 1 and 2 only). Adasum gets the same
 * vector on every rank, which it returns exactly (each pair's coefficients are 1/2); its
 * work does not depend on the values. */
static double value(const opts_t *o, int r, size_t i) {
    if (o->op == HVD_ADASUM && reduces(o->mode))
        r = 0;
    if (o->dtype == HVD_BOOL)
        return (double)((r + i) % 3 == 0);
    if (o->op == HVD_PRODUCT && reduces(o->mode))
        return (double)(1 + (r + i) % 2);
    return (double)((r + i) % 7);
}

static double expect_reduce(const opts_t *o, int size, size_t i) {
    double acc = value(o, 0, i);
    for (int r = 1; r < size && o->op != HVD_ADASUM; r++) {
        double v = value(o, r, i);
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
            break;
        }
    }
    if (o->dtype == HVD_BOOL)
        return acc != 0;
    if (o->op == HVD_AVERAGE) {
        acc /= size;
        if (o->dtype <= HVD_INT64)
            acc = (double)(long long)acc; /* toward zero, without libm's trunc */
    }
    return acc;
}

/* busbw / algbw: the share of the data each rank must send (nccl-tests' factors). */
static double bus_factor(mode_t_ m, int size) {
    switch (m) {
    case M_ALLREDUCE:
    case M_STEP:
        return 2.0 * (size - 1) / size;
    case M_BROADCAST:
        return 1;
    default:
        return (double)(size - 1) / size;
    }
}

/* Element counts of the send and receive buffers, and the busbw factor, for a size. */
static void shape(const opts_t *o, size_t bytes, int size, size_t *count_p, size_t *send_p,
                  size_t *recv_p, double *busf_p) {
    size_t es = DSIZE[o->dtype];
    size_t n = bytes / es;
    switch (o->mode) {
    case M_ALLREDUCE:
        n = n ? n : 1;
        *count_p = *send_p = *recv_p = n;
        break;
    case M_BROADCAST:
        n = n ? n : 1;
        *count_p = *send_p = *recv_p = n;
        break;
    case M_ALLGATHER: /* size = total received */
        n = n / (size_t)size ? n / (size_t)size : 1;
        *count_p = n;
        *send_p = n;
        *recv_p = n * (size_t)size;
        break;
    case M_ALLTOALL:
    case M_REDUCESCATTER: /* size = total sent */
        n = n / (size_t)size ? n / (size_t)size : 1;
        *count_p = n;
        *send_p = n * (size_t)size;
        *recv_p = o->mode == M_ALLTOALL ? n * (size_t)size : n;
        break;
    case M_STEP:
    case NMODES:
        break;
    }
    *busf_p = bus_factor(o->mode, size);
}

static hvd_status_t run_once(const opts_t *o, void *send, void *recv, size_t count) {
    void *out = o->inplace ? send : recv;
    switch (o->mode) {
    case M_ALLREDUCE:
        return hvd_allreduce(send, out, count, o->dtype, o->op);
    case M_BROADCAST:
        return hvd_broadcast(send, count, o->dtype, o->root);
    case M_ALLGATHER:
        return hvd_allgather(send, count, recv, o->dtype);
    case M_ALLTOALL:
        return hvd_alltoall(send, out, count, o->dtype);
    case M_REDUCESCATTER:
        return hvd_reducescatter(send, recv, count, o->dtype, o->op);
    case M_STEP:
    case NMODES:
        break;
    }
    return HVD_ERR_INVALID_ARG;
}

static void fill(const opts_t *o, void *send, size_t nsend, int rank) {
    for (size_t i = 0; i < nsend; i++)
        set(send, i, o->dtype, value(o, rank, i));
}

/* Floating-point averages are compared within a tolerance: the division rounds. */
static int tolerant(const opts_t *o) {
    return o->op == HVD_AVERAGE && o->dtype >= HVD_FLOAT16 && o->dtype != HVD_BOOL &&
           reduces(o->mode);
}

/* 1 when element i of out is not the exact expected value e, compared after the same
 * conversion the library's output went through. */
static int wrong_at(const opts_t *o, const void *out, size_t i, double e) {
    double got = get(out, i, o->dtype);
    if (tolerant(o))
        return fabs(got - e) > 1e-2 * fabs(e) + 1e-3;
    uint8_t tmp[8];
    set(tmp, 0, o->dtype, e);
    return got != get(tmp, 0, o->dtype);
}

/* Number of wrong elements after one checked call on this rank. */
static long check(const opts_t *o, void *send, void *recv, size_t count, size_t nsend, int rank,
                  int size) {
    fill(o, send, nsend, rank);
    if (run_once(o, send, recv, count) != HVD_OK)
        return -1;
    const void *out = (o->inplace && o->mode != M_ALLGATHER && o->mode != M_REDUCESCATTER) ||
                              o->mode == M_BROADCAST
                          ? send
                          : recv;
    long wrong = 0;
    size_t nout = o->mode == M_REDUCESCATTER                        ? count
                  : o->mode == M_ALLGATHER || o->mode == M_ALLTOALL ? count * (size_t)size
                                                                    : count;
    for (size_t i = 0; i < nout; i++) {
        double e = 0;
        switch (o->mode) {
        case M_ALLREDUCE:
            e = expect_reduce(o, size, i);
            break;
        case M_BROADCAST:
            e = value(o, o->root, i);
            break;
        case M_ALLGATHER:
            e = value(o, (int)(i / count), i % count);
            break;
        case M_ALLTOALL:
            e = value(o, (int)(i / count), (size_t)rank * count + i % count);
            break;
        case M_REDUCESCATTER:
            e = expect_reduce(o, size, (size_t)rank * count + i);
            break;
        case M_STEP:
        case NMODES:
            break;
        }
        wrong += wrong_at(o, out, i, e);
    }
    return wrong;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of this rank's n times (sorted in place), the largest over the ranks: the job
 * waits for its slowest rank. Every rank calls it at the same point. */
static double median_over_ranks(double *times, int n) {
    qsort(times, (size_t)n, sizeof *times, cmp_double);
    double med = n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2, worst = med;
    hvd_allreduce(&med, &worst, 1, HVD_FLOAT64, HVD_MAX);
    return worst;
}

/* The sum over the ranks of this rank's wrong-element count; a failed check (-1) counts as
 * a huge number so that it cannot go unnoticed. Every rank calls it at the same point. */
static long wrong_over_ranks(long wrong) {
    double mine = wrong < 0 ? 1e9 : (double)wrong, all = 0;
    hvd_allreduce(&mine, &all, 1, HVD_FLOAT64, HVD_SUM);
    return (long)all;
}

/* The #wrong column: the count, or N/A without -c. */
static const char *wrong_column(const opts_t *o, long wrong, char buf[24]) {
    if (o->check)
        snprintf(buf, 24, "%ld", wrong);
    else
        snprintf(buf, 24, "N/A");
    return buf;
}

static void report_failure(int rank, hvd_status_t st) {
    fprintf(stderr, "hvd_allreduce_perf: rank %d: %s: %s\n", rank, hvd_status_str(st),
            hvd_last_error());
}

/* ---- one collective per call, over a range of sizes ---- */

/* Returns the exit status; *wrong_p receives the wrong elements over all sizes and ranks. */
static int run_sizes(const opts_t *o_in, int rank, int size, long *wrong_p) {
    opts_t cur = *o_in, *o = &cur;
    int red = reduces(o->mode), nops = red ? o->nops : 1;
    if (rank == 0) {
        char ops[64] = "";
        for (int k = 0; red && k < nops; k++)
            snprintf(ops + strlen(ops), sizeof ops - strlen(ops), "%s%s", k ? "," : " ",
                     OPS[o->ops[k]]);
        printf("# hvd_allreduce_perf: %s, %d ranks, %s%s, %d warm-up + %d timed calls per "
               "size%s, %s\n",
               MODES[o->mode], size, DTYPES[o->dtype], ops, o->warmup, o->iters,
               nops > 1 ? " and op, the ops in turn" : "",
               o->inplace ? "in place" : "out of place");
        printf("# time: median per call (us), largest over ranks\n");
        printf("#%11s %12s %9s %7s %6s %10s %8s %8s %7s\n", "size", "count", "type", "redop",
               "root", "time", "algbw", "busbw", "#wrong");
        printf("#%11s %12s %9s %7s %6s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "", "", "(us)",
               "(GB/s)", "(GB/s)", "");
        fflush(stdout);
    }
    double *times = malloc((size_t)o->iters * (size_t)nops * sizeof *times);
    long total_wrong = 0;
    int rc = 0;
    for (double b = (double)o->minb; b <= (double)o->maxb * 1.0000001; b *= o->factor) {
        size_t bytes = (size_t)b, count = 0, nsend = 0, nrecv = 0;
        double busf = 1;
        shape(o, bytes, size, &count, &nsend, &nrecv, &busf);
        size_t es = DSIZE[o->dtype];
        void *send = calloc(nsend ? nsend : 1, es), *recv = calloc(nrecv ? nrecv : 1, es);
        if (!send || !recv || !times) {
            fprintf(stderr, "hvd_allreduce_perf: out of memory at %zu bytes\n", bytes);
            free(send);
            free(recv);
            rc = 1;
            break;
        }
        fill(o, send, nsend, rank);
        hvd_status_t st = HVD_OK;
        /* with several ops, in turn: this machine's speed drifts, and every op sees the same */
        for (int i = 0; i < o->warmup && st == HVD_OK; i++)
            for (int k = 0; k < nops && st == HVD_OK; k++) {
                o->op = o->ops[k];
                st = run_once(o, send, recv, count);
            }
        for (int i = 0; i < o->iters && st == HVD_OK; i++)
            for (int k = 0; k < nops && st == HVD_OK; k++) {
                o->op = o->ops[k];
                double t0 = now_us();
                st = run_once(o, send, recv, count);
                times[(size_t)k * (size_t)o->iters + (size_t)i] = now_us() - t0;
            }
        if (st != HVD_OK) {
            report_failure(rank, st);
            rc = 1;
            free(send);
            free(recv);
            break;
        }
        for (int k = 0; k < nops; k++) {
            o->op = o->ops[k];
            double worst = median_over_ranks(times + (size_t)k * (size_t)o->iters, o->iters);
            long wrong = o->check ? check(o, send, recv, count, nsend, rank, size) : 0;
            long wrong_all = wrong_over_ranks(wrong);
            total_wrong += wrong_all;
            size_t shown =
                (o->mode == M_ALLREDUCE || o->mode == M_BROADCAST ? count : count * size) * es;
            double algbw = (double)shown / (worst * 1e3);
            if (rank == 0) {
                char wr[24];
                printf("%12zu %12zu %9s %7s %6d %10.2f %8.3f %8.3f %7s\n", shown, count,
                       DTYPES[o->dtype], red ? OPS[o->op] : "none",
                       o->mode == M_BROADCAST ? o->root : -1, worst, algbw, algbw * busf,
                       wrong_column(o, wrong_all, wr));
                fflush(stdout);
            }
        }
        free(send);
        free(recv);
    }
    free(times);
    *wrong_p = total_wrong;
    return rc;
}

/* ---- -m step: the gradient allreduces of a training step ---- */

typedef enum { V_ASYNC, V_BLOCKING, V_ONE_BUFFER, NVARIANTS } variant_t;
static const char *VARIANTS[] = {"async", "blocking", "one-buffer"};

/* The N tensors of a step lie one after the other in one send (and one receive) buffer, so
 * that the one-buffer variant reduces exactly the same bytes in one call. Tensor t holds the
 * first count[t] elements of the pattern -m allreduce would use, so every tensor's expected
 * result is a prefix of the largest one's, computed once. */
typedef struct {
    int n;
    size_t *count, *offset; /* elements, per tensor */
    size_t total, largest;  /* elements in all, in the largest tensor */
    char (*names)[24];      /* "step.<t>": the same names every step */
    hvd_handle_t *handles;
    void *send, *recv; /* total elements each; recv == send in place */
    void *input;       /* this rank's input pattern, largest elements */
    void *want;        /* the expected result, as the library's dtype stores it */
    double *exact;     /* the expected result before conversion (tolerant checks) */
} step_t;

static void step_fini(step_t *s) {
    free(s->count);
    free(s->offset);
    free(s->names);
    free(s->handles);
    if (s->recv != s->send)
        free(s->recv);
    free(s->send);
    free(s->input);
    free(s->want);
    free(s->exact);
}

/* x^(1/k) for x >= 1 and k >= 1, by bisection on the k-th power (this tool links no libm). */
static double nth_root(double x, int k) {
    double lo = 1, hi = x;
    for (int it = 0; it < 100; it++) {
        double mid = (lo + hi) / 2, p = 1, b = mid;
        for (int e = k; e; e >>= 1, b *= b) /* mid^k by squaring */
            if (e & 1)
                p *= b;
        if (p > x)
            hi = mid;
        else
            lo = mid;
    }
    return lo;
}

/* Lay out the N tensors: geometric sizes from -b to -e bytes, rounded to whole elements (at
 * least one). Returns 0, or -1 when out of memory. */
static int step_init(const opts_t *o, int rank, int size, step_t *s) {
    size_t es = DSIZE[o->dtype];
    memset(s, 0, sizeof *s);
    s->n = o->ntensors;
    s->count = calloc((size_t)s->n, sizeof *s->count);
    s->offset = calloc((size_t)s->n, sizeof *s->offset);
    s->names = calloc((size_t)s->n, sizeof *s->names);
    s->handles = calloc((size_t)s->n, sizeof *s->handles);
    if (!s->count || !s->offset || !s->names || !s->handles)
        return -1;
    double r = s->n == 1 ? 1 : nth_root((double)o->maxb / (double)o->minb, s->n - 1);
    double bytes = s->n == 1 ? (double)o->maxb : (double)o->minb;
    for (int t = 0; t < s->n; t++, bytes *= r) {
        if (t == s->n - 1)
            bytes = (double)o->maxb; /* exactly, whatever the rounding on the way */
        size_t count = (size_t)(bytes / (double)es + 0.5);
        s->count[t] = count ? count : 1;
        s->offset[t] = s->total;
        s->total += s->count[t];
        s->largest = s->count[t] > s->largest ? s->count[t] : s->largest;
        snprintf(s->names[t], sizeof s->names[t], "step.%d", t);
    }
    s->send = malloc(s->total * es);
    s->recv = o->inplace ? s->send : malloc(s->total * es);
    s->input = malloc(s->largest * es);
    s->want = malloc(s->largest * es);
    s->exact = malloc(s->largest * sizeof *s->exact);
    if (!s->send || !s->recv || !s->input || !s->want || !s->exact)
        return -1;
    fill(o, s->input, s->largest, rank);
    for (size_t i = 0; i < s->largest; i++) {
        s->exact[i] = expect_reduce(o, size, i);
        set(s->want, i, o->dtype, s->exact[i]);
    }
    for (int t = 0; t < s->n; t++)
        memcpy((char *)s->send + s->offset[t] * es, s->input, s->count[t] * es);
    return 0;
}

/* Before a checked step: inputs back in place (a step in place overwrote them), otherwise
 * outputs poisoned (0xff bytes are NaN, or -1, or not a bool, never an expected value). */
static void step_prepare(const opts_t *o, step_t *s) {
    size_t es = DSIZE[o->dtype];
    if (o->inplace) {
        for (int t = 0; t < s->n; t++)
            memcpy((char *)s->send + s->offset[t] * es, s->input, s->count[t] * es);
    } else {
        memset(s->recv, 0xff, s->total * es);
    }
}

/* Wrong elements of this rank's results: a bytewise comparison with the expected prefix,
 * and the element-by-element one of -m allreduce where that differs or a tolerance applies. */
static long step_check(const opts_t *o, const step_t *s) {
    size_t es = DSIZE[o->dtype];
    long wrong = 0;
    for (int t = 0; t < s->n; t++) {
        const char *out = (const char *)s->recv + s->offset[t] * es;
        if (!tolerant(o) && memcmp(out, s->want, s->count[t] * es) == 0)
            continue;
        for (size_t i = 0; i < s->count[t]; i++)
            wrong += wrong_at(o, out, i, s->exact[i]);
    }
    return wrong;
}

/* One step's allreduces, the variant's way. */
static hvd_status_t step_run(const opts_t *o, step_t *s, variant_t v) {
    size_t es = DSIZE[o->dtype];
    char *send = s->send, *recv = s->recv;
    hvd_status_t st = HVD_OK;
    int enqueued = 0;
    switch (v) {
    case V_ONE_BUFFER:
        return hvd_allreduce(send, recv, s->total, o->dtype, o->op);
    case V_BLOCKING:
        for (int t = 0; t < s->n && st == HVD_OK; t++)
            st = hvd_allreduce(send + s->offset[t] * es, recv + s->offset[t] * es, s->count[t],
                               o->dtype, o->op);
        return st;
    case V_ASYNC:
        for (int t = 0; t < s->n && st == HVD_OK; t++) {
            st =
                hvd_allreduce_async(s->names[t], send + s->offset[t] * es, recv + s->offset[t] * es,
                                    s->count[t], o->dtype, o->op, &s->handles[t]);
            enqueued += st == HVD_OK; /* a failed call has no handle */
        }
        /* Wait for everything enqueued, even after a failure, so that no operation still
         * uses the buffers when this returns. */
        for (int t = 0; t < enqueued; t++) {
            hvd_status_t wst = hvd_wait(s->handles[t]);
            st = st != HVD_OK ? st : wst;
        }
        return st;
    case NVARIANTS:
        break;
    }
    return HVD_ERR_INVALID_ARG;
}

/* Run one variant: -w warm-up and -n timed steps, each checked with -c. Returns HVD_OK with
 * the median step time of the slowest rank in *time_p and this rank's wrong elements in
 * *wrong_p, or the first failure. */
static hvd_status_t step_variant(const opts_t *o, step_t *s, variant_t v, double *times,
                                 double *time_p, long *wrong_p) {
    long wrong = 0;
    for (int it = 0; it < o->warmup + o->iters; it++) {
        hvd_status_t st = HVD_OK;
        if (o->check) {
            step_prepare(o, s);
            if ((st = hvd_barrier()) != HVD_OK)
                return st;
        }
        double t0 = now_us();
        st = step_run(o, s, v);
        double dt = now_us() - t0;
        if (st != HVD_OK)
            return st;
        if (it >= o->warmup)
            times[it - o->warmup] = dt;
        if (o->check)
            wrong += step_check(o, s);
    }
    *time_p = median_over_ranks(times, o->iters);
    *wrong_p = wrong;
    return HVD_OK;
}

/* The fusion threshold the core uses, as the environment sets it (described for the header:
 * the tool cannot ask the library). */
static void describe_fusion(char *buf, size_t len) {
    const char *env = getenv("HOROVOD_FUSION_THRESHOLD");
    if (!env || !*env)
        snprintf(buf, len, "134217728 B (the default; HOROVOD_FUSION_THRESHOLD=0 turns it off)");
    else if (strtoull(env, NULL, 10) == 0)
        snprintf(buf, len, "%s B (HOROVOD_FUSION_THRESHOLD: no fusion)", env);
    else
        snprintf(buf, len, "%s B (HOROVOD_FUSION_THRESHOLD)", env);
}

static int run_step(const opts_t *o, int rank, int size, long *wrong_p) {
    size_t es = DSIZE[o->dtype];
    step_t s;
    double *times = malloc((size_t)o->iters * sizeof *times);
    if (step_init(o, rank, size, &s) != 0 || !times) {
        fprintf(stderr, "hvd_allreduce_perf: out of memory for %d tensors of up to %zu bytes\n",
                o->ntensors, o->maxb);
        step_fini(&s);
        free(times);
        return 1;
    }
    size_t step_bytes = s.total * es;
    if (rank == 0) {
        char fusion[128];
        describe_fusion(fusion, sizeof fusion);
        printf("# hvd_allreduce_perf: step, %d ranks, %s %s, %d tensor%s of %zu..%zu B "
               "(geometric), %zu B per step, %d warm-up + %d timed steps per variant, %s\n",
               size, DTYPES[o->dtype], OPS[o->op], s.n, s.n == 1 ? "" : "s", s.count[0] * es,
               s.count[s.n - 1] * es, step_bytes, o->warmup, o->iters,
               o->inplace ? "in place" : "out of place");
        printf("# fusion threshold: %s\n", fusion);
        printf("# time: median per step (us), largest over ranks\n");
        printf("#%11s %8s %12s %9s %7s %10s %8s %8s %7s\n", "variant", "calls", "bytes", "type",
               "redop", "time", "algbw", "busbw", "#wrong");
        printf("#%11s %8s %12s %9s %7s %10s %8s %8s %7s\n", "", "", "(B)", "", "", "(us)", "(GB/s)",
               "(GB/s)", "");
        fflush(stdout);
    }
    long total_wrong = 0;
    int rc = 0;
    for (int v = 0; v < NVARIANTS; v++) {
        double worst = 0;
        long wrong = 0;
        hvd_status_t st = step_variant(o, &s, (variant_t)v, times, &worst, &wrong);
        if (st != HVD_OK) {
            report_failure(rank, st);
            rc = 1;
            break;
        }
        long wrong_all = wrong_over_ranks(wrong);
        total_wrong += wrong_all;
        double algbw = (double)step_bytes / (worst * 1e3);
        if (rank == 0) {
            char wr[24];
            printf("%12s %8d %12zu %9s %7s %10.2f %8.3f %8.3f %7s\n", VARIANTS[v],
                   v == V_ONE_BUFFER ? 1 : s.n, step_bytes, DTYPES[o->dtype], OPS[o->op], worst,
                   algbw, algbw * bus_factor(M_STEP, size), wrong_column(o, wrong_all, wr));
            fflush(stdout);
        }
    }
    step_fini(&s);
    free(times);
    *wrong_p = total_wrong;
    return rc;
}

static void usage(FILE *f) {
    fprintf(f, "usage: hvd_allreduce_perf [-m allreduce|allgather|broadcast|alltoall|"
               "reducescatter|step] [-b MINBYTES] [-e MAXBYTES] [-f FACTOR]\n"
               "                          [-w WARMUP] [-n ITERS] [-d DTYPE] "
               "[-o sum|avg|adasum|min|max|prod[,OP...]] [-r ROOT] [-c 0|1] [-I] [-N TENSORS]\n"
               "Run under horovodrun. Sizes take K, M, G suffixes. -I runs in place. -o with a "
               "list (-o sum,adasum)\ncalls the ops in turn and prints a row for each.\n"
               "-m step: a training step's allreduces, -N tensors (default 100) sized "
               "geometrically from -b to -e\n"
               "(default 4K to 1M), reduced async (fused up to HOROVOD_FUSION_THRESHOLD), "
               "blocking one by one, and as one buffer.\n");
}

int main(int argc, char **argv) {
    opts_t o = {.mode = M_ALLREDUCE,
                .minb = 8,
                .maxb = 64 << 20,
                .factor = 2,
                .warmup = 5,
                .iters = 20,
                .check = 1,
                .dtype = HVD_FLOAT32,
                .op = HVD_SUM,
                .ops = {HVD_SUM},
                .nops = 1,
                .ntensors = 100};
    int c, have_b = 0, have_e = 0;
    while ((c = getopt(argc, argv, "m:b:e:f:w:n:d:o:r:c:IN:h")) != -1) {
        int k;
        switch (c) {
        case 'm':
            if ((k = lookup(optarg, MODES, NMODES)) < 0) {
                fprintf(stderr, "hvd_allreduce_perf: unknown mode '%s'\n", optarg);
                return 2;
            }
            o.mode = (mode_t_)k;
            break;
        case 'b':
            o.minb = parse_size(optarg);
            have_b = 1;
            break;
        case 'e':
            o.maxb = parse_size(optarg);
            have_e = 1;
            break;
        case 'f':
            o.factor = atof(optarg);
            break;
        case 'w':
            o.warmup = atoi(optarg);
            break;
        case 'n':
            o.iters = atoi(optarg);
            break;
        case 'd':
            if ((k = lookup(optarg, DTYPES, 11)) < 0) {
                fprintf(stderr, "hvd_allreduce_perf: unknown dtype '%s'\n", optarg);
                return 2;
            }
            o.dtype = (hvd_dtype_t)k;
            break;
        case 'o': {
            char list[128], *save = NULL;
            snprintf(list, sizeof list, "%s", optarg);
            o.nops = 0;
            for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if ((k = lookup(t, OPS, 6)) < 0 || o.nops == 6) {
                    fprintf(stderr, "hvd_allreduce_perf: unknown op '%s' (or more than 6)\n", t);
                    return 2;
                }
                o.ops[o.nops++] = (hvd_reduce_op_t)k;
            }
            if (o.nops == 0) {
                fprintf(stderr, "hvd_allreduce_perf: -o needs an op\n");
                return 2;
            }
            o.op = o.ops[0];
            break;
        }
        case 'r':
            o.root = atoi(optarg);
            break;
        case 'c':
            o.check = atoi(optarg);
            break;
        case 'I':
            o.inplace = 1;
            break;
        case 'N':
            o.ntensors = atoi(optarg);
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (o.mode == M_STEP) {
        o.minb = have_b ? o.minb : 4 << 10;
        o.maxb = have_e ? o.maxb : 1 << 20;
    }
    if (o.factor <= 1 || o.iters < 1 || o.warmup < 0 || o.minb < 1 || o.maxb < o.minb) {
        fprintf(stderr, "hvd_allreduce_perf: need -f > 1, -n >= 1, -w >= 0 and 1 <= -b <= -e\n");
        return 2;
    }
    if (o.mode == M_STEP && (o.ntensors < 1 || o.ntensors > 1000000)) {
        fprintf(stderr, "hvd_allreduce_perf: need 1 <= -N <= 1000000\n");
        return 2;
    }
    if (hvd_init() != HVD_OK) {
        fprintf(stderr, "hvd_allreduce_perf: hvd_init: %s\n", hvd_last_error());
        return 1;
    }
    int rank = hvd_rank(), size = hvd_size();
    long total_wrong = 0;
    int rc = o.mode == M_STEP ? run_step(&o, rank, size, &total_wrong)
                              : run_sizes(&o, rank, size, &total_wrong);
    if (rank == 0 && rc == 0)
        printf("# Out of bounds values : %ld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
    hvd_shutdown();
    return rc ? rc : total_wrong ? 1 : 0;
}
