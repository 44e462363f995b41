/* hvd_allreduce_perf: collective latency and bandwidth in the nccl-tests format.
 *
 *   horovodrun -np 2 hvd_allreduce_perf -b 8 -e 64M -f 2 [-m allreduce|allgather|broadcast|
 *              alltoall|reducescatter] [-d float32] [-o sum] [-w 5] [-n 20] [-c 1] [-r 0] [-I]
 *
 * For each size (bytes, from -b to -e multiplying by -f) it runs -w untimed warm-up calls and
 * -n timed ones, timing each call separately; "time" is the median per-call time of each
 * rank, the largest over the ranks (the job waits for its slowest rank). algbw is size /
 * time; busbw scales it by the traffic each rank must move (nccl-tests' factors), so the
 * numbers compare with nccl-tests'. With -c 1 (default) one more call checks every element
 * against values computed here independently, and #wrong counts the mismatches over all
 * ranks. Exit status 1 when any element was wrong. */
#include <hvd/hvd.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef enum { M_ALLREDUCE, M_ALLGATHER, M_BROADCAST, M_ALLTOALL, M_REDUCESCATTER } mode_t_;

static const char *MODES[] = {"allreduce", "allgather", "broadcast", "alltoall", "reducescatter"};
static const char *DTYPES[] = {"uint8",   "int8",    "uint16",  "int16", "int32",   "int64",
                               "float16", "float32", "float64", "bool",  "bfloat16"};
static const char *OPS[] = {"avg", "sum", "adasum", "min", "max", "prod"};
static const size_t DSIZE[] = {1, 1, 2, 2, 4, 8, 2, 4, 8, 1, 2};

typedef struct {
    mode_t_ mode;
    size_t minb, maxb;
    double factor;
    int warmup, iters, check, root, inplace;
    hvd_dtype_t dtype;
    hvd_reduce_op_t op;
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
 * any rank count this tool is run with (products use 1 and 2 only). */
static double value(const opts_t *o, int r, size_t i) {
    if (o->dtype == HVD_BOOL)
        return (double)((r + i) % 3 == 0);
    if (o->op == HVD_PRODUCT && (o->mode == M_ALLREDUCE || o->mode == M_REDUCESCATTER))
        return (double)(1 + (r + i) % 2);
    return (double)((r + i) % 7);
}

static double expect_reduce(const opts_t *o, int size, size_t i) {
    double acc = value(o, 0, i);
    for (int r = 1; r < size; r++) {
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
            acc = trunc(acc);
    }
    return acc;
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
        *busf_p = 2.0 * (size - 1) / size;
        break;
    case M_BROADCAST:
        n = n ? n : 1;
        *count_p = *send_p = *recv_p = n;
        *busf_p = 1;
        break;
    case M_ALLGATHER: /* size = total received */
        n = n / (size_t)size ? n / (size_t)size : 1;
        *count_p = n;
        *send_p = n;
        *recv_p = n * (size_t)size;
        *busf_p = (double)(size - 1) / size;
        break;
    case M_ALLTOALL:
    case M_REDUCESCATTER: /* size = total sent */
        n = n / (size_t)size ? n / (size_t)size : 1;
        *count_p = n;
        *send_p = n * (size_t)size;
        *recv_p = o->mode == M_ALLTOALL ? n * (size_t)size : n;
        *busf_p = (double)(size - 1) / size;
        break;
    }
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
    }
    return HVD_ERR_INVALID_ARG;
}

static void fill(const opts_t *o, void *send, size_t nsend, int rank) {
    for (size_t i = 0; i < nsend; i++)
        set(send, i, o->dtype, value(o, rank, i));
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
        }
        /* Compare after the same conversion the library's output went through. */
        uint8_t tmp[8];
        set(tmp, 0, o->dtype, e);
        double want = get(tmp, 0, o->dtype), got = get(out, i, o->dtype);
        if (o->op == HVD_AVERAGE && o->dtype >= HVD_FLOAT16 && o->dtype != HVD_BOOL &&
            o->mode != M_BROADCAST && o->mode != M_ALLGATHER && o->mode != M_ALLTOALL) {
            if (fabs(got - e) > 1e-2 * fabs(e) + 1e-3)
                wrong++;
        } else if (got != want) {
            wrong++;
        }
    }
    return wrong;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void usage(FILE *f) {
    fprintf(f, "usage: hvd_allreduce_perf [-m allreduce|allgather|broadcast|alltoall|"
               "reducescatter] [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-w WARMUP] [-n ITERS]\n"
               "                          [-d DTYPE] [-o sum|avg|min|max|prod] [-r ROOT] "
               "[-c 0|1] [-I]\n"
               "Run under horovodrun. Sizes take K, M, G suffixes. -I runs in place.\n");
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
                .op = HVD_SUM};
    int c;
    while ((c = getopt(argc, argv, "m:b:e:f:w:n:d:o:r:c:Ih")) != -1) {
        int k;
        switch (c) {
        case 'm':
            if ((k = lookup(optarg, MODES, 5)) < 0) {
                fprintf(stderr, "hvd_allreduce_perf: unknown mode '%s'\n", optarg);
                return 2;
            }
            o.mode = (mode_t_)k;
            break;
        case 'b':
            o.minb = parse_size(optarg);
            break;
        case 'e':
            o.maxb = parse_size(optarg);
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
        case 'o':
            if ((k = lookup(optarg, OPS, 6)) < 0) {
                fprintf(stderr, "hvd_allreduce_perf: unknown op '%s'\n", optarg);
                return 2;
            }
            o.op = (hvd_reduce_op_t)k;
            break;
        case 'r':
            o.root = atoi(optarg);
            break;
        case 'c':
            o.check = atoi(optarg);
            break;
        case 'I':
            o.inplace = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (o.factor <= 1 || o.iters < 1 || o.minb < 1 || o.maxb < o.minb) {
        fprintf(stderr, "hvd_allreduce_perf: need -f > 1, -n >= 1 and 1 <= -b <= -e\n");
        return 2;
    }
    if (hvd_init() != HVD_OK) {
        fprintf(stderr, "hvd_allreduce_perf: hvd_init: %s\n", hvd_last_error());
        return 1;
    }
    int rank = hvd_rank(), size = hvd_size();
    int reduces = o.mode == M_ALLREDUCE || o.mode == M_REDUCESCATTER;
    if (rank == 0) {
        printf("# hvd_allreduce_perf: %s, %d ranks, %s%s%s, %d warm-up + %d timed calls per "
               "size, %s\n",
               MODES[o.mode], size, DTYPES[o.dtype], reduces ? " " : "", reduces ? OPS[o.op] : "",
               o.warmup, o.iters, o.inplace ? "in place" : "out of place");
        printf("# time: median per call (us), largest over ranks\n");
        printf("#%11s %12s %9s %7s %6s %10s %8s %8s %7s\n", "size", "count", "type", "redop",
               "root", "time", "algbw", "busbw", "#wrong");
        printf("#%11s %12s %9s %7s %6s %10s %8s %8s %7s\n", "(B)", "(elements)", "", "", "", "(us)",
               "(GB/s)", "(GB/s)", "");
        fflush(stdout);
    }
    double *times = malloc((size_t)o.iters * sizeof *times);
    long total_wrong = 0;
    int rc = 0;
    for (double b = (double)o.minb; b <= (double)o.maxb * 1.0000001; b *= o.factor) {
        size_t bytes = (size_t)b, count = 0, nsend = 0, nrecv = 0;
        double busf = 1;
        shape(&o, bytes, size, &count, &nsend, &nrecv, &busf);
        size_t es = DSIZE[o.dtype];
        void *send = calloc(nsend ? nsend : 1, es), *recv = calloc(nrecv ? nrecv : 1, es);
        if (!send || !recv || !times) {
            fprintf(stderr, "hvd_allreduce_perf: out of memory at %zu bytes\n", bytes);
            rc = 1;
            break;
        }
        fill(&o, send, nsend, rank);
        hvd_status_t st = HVD_OK;
        for (int i = 0; i < o.warmup && st == HVD_OK; i++)
            st = run_once(&o, send, recv, count);
        for (int i = 0; i < o.iters && st == HVD_OK; i++) {
            double t0 = now_us();
            st = run_once(&o, send, recv, count);
            times[i] = now_us() - t0;
        }
        if (st != HVD_OK) {
            fprintf(stderr, "hvd_allreduce_perf: rank %d: %s: %s\n", rank, hvd_status_str(st),
                    hvd_last_error());
            rc = 1;
            free(send);
            free(recv);
            break;
        }
        qsort(times, (size_t)o.iters, sizeof *times, cmp_double);
        double med = times[o.iters / 2], worst;
        if (o.iters % 2 == 0)
            med = (times[o.iters / 2 - 1] + times[o.iters / 2]) / 2;
        hvd_allreduce(&med, &worst, 1, HVD_FLOAT64, HVD_MAX);
        double wrong_d = 0, wrong_all = 0;
        if (o.check) {
            long w = check(&o, send, recv, count, nsend, rank, size);
            wrong_d = w < 0 ? 1e9 : (double)w;
        }
        hvd_allreduce(&wrong_d, &wrong_all, 1, HVD_FLOAT64, HVD_SUM);
        total_wrong += (long)wrong_all;
        size_t shown = (o.mode == M_ALLREDUCE || o.mode == M_BROADCAST ? count : count * size) * es;
        double algbw = (double)shown / (worst * 1e3);
        if (rank == 0) {
            char wr[24];
            if (o.check)
                snprintf(wr, sizeof wr, "%ld", (long)wrong_all);
            else
                snprintf(wr, sizeof wr, "N/A");
            printf("%12zu %12zu %9s %7s %6d %10.2f %8.3f %8.3f %7s\n", shown, count,
                   DTYPES[o.dtype], reduces ? OPS[o.op] : "none",
                   o.mode == M_BROADCAST ? o.root : -1, worst, algbw, algbw * busf, wr);
            fflush(stdout);
        }
        free(send);
        free(recv);
    }
    free(times);
    if (rank == 0 && rc == 0)
        printf("# Out of bounds values : %ld %s\n", total_wrong, total_wrong ? "FAILED" : "OK");
    hvd_shutdown();
    return rc ? rc : total_wrong ? 1 : 0;
}
