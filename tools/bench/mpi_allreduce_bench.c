/* MPI peer (Open MPI and MPICH) for tools/compare_allreduce.sh: float32 MPI_Allreduce(MPI_SUM).
 *
 * Not built by CMake (the tools/ glob builds hvd tools; this subfolder is not globbed): the script
 * compiles it with Open MPI's mpicc and with mpicc.mpich. Usage:
 *   mpirun -np N mpi_allreduce_bench [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-w WARMUP] [-n ITERS]
 *                                    [-i]     (-i: in place, MPI_IN_PLACE)
 * Sizes take K/M/G suffixes (powers of 1024). For every size from -b to -e (times -f each step)
 * rank 0 prints `size_bytes median_us wrong`: the median per-iteration time of each rank, the
 * largest of those over ranks (the slowest rank is what a training step waits for, and this is
 * what hvd_allreduce_perf reports), and how many result elements were wrong over all ranks. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long long parse_size(const char *s) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || v < 0)
        return -1;
    switch (*end) {
    case 'K':
    case 'k':
        v <<= 10;
        end++;
        break;
    case 'M':
    case 'm':
        v <<= 20;
        end++;
        break;
    case 'G':
    case 'g':
        v <<= 30;
        end++;
        break;
    default:
        break;
    }
    return *end ? -1 : v;
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void usage(void) {
    fprintf(stderr, "usage: mpi_allreduce_bench [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] "
                    "[-w WARMUP] [-n ITERS]\n");
}

int main(int argc, char **argv) {
    long long minb = 8, maxb = 8 << 20, factor = 2, warmup = 5, iters = 20;
    int opt, inplace = 0;
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    while ((opt = getopt(argc, argv, "b:e:f:w:n:i")) != -1) {
        if (opt == 'i') {
            inplace = 1;
            continue;
        }
        long long v = opt == '?' ? -1 : parse_size(optarg); /* no optarg for '?' */
        switch (opt) {
        case 'b':
            minb = v;
            break;
        case 'e':
            maxb = v;
            break;
        case 'f':
            factor = v;
            break;
        case 'w':
            warmup = v;
            break;
        case 'n':
            iters = v;
            break;
        default:
            v = -1;
            break;
        }
        if (v < 0) {
            if (rank == 0)
                usage();
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    if (optind != argc || minb < 1 || maxb < minb || maxb / 4 > INT_MAX || factor < 1 ||
        iters < 1 || iters > 10000000 || warmup > 10000000) {
        if (rank == 0)
            usage();
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    /* Every rank contributes rank+1, so the exact sum is size*(size+1)/2, representable in a
     * float for any realistic size: the check is exact, not a tolerance. */
    const float expect = (float)size * (float)(size + 1) / 2.0f;
    size_t maxcount = maxb / 4 > 0 ? (size_t)(maxb / 4) : 1;
    float *send = malloc(maxcount * sizeof *send), *recv = malloc(maxcount * sizeof *recv);
    double *t = malloc((size_t)iters * sizeof *t);
    if (!send || !recv || !t) {
        fprintf(stderr, "rank %d: out of memory for %zu floats\n", rank, maxcount);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t i = 0; i < maxcount; i++)
        send[i] = (float)(rank + 1);

    if (rank == 0)
        printf("# mpi_allreduce_bench np=%d float32 sum: size_bytes median_us wrong\n", size);
    for (long long bytes = minb; bytes <= maxb;) {
        int count = bytes / 4 > 0 ? (int)(bytes / 4) : 1;
        /* in place (-i): recv is the buffer, and its values grow call by call (to inf, which
         * costs a float add no more than any other value); the check below refills it */
        const void *in = inplace ? MPI_IN_PLACE : send;
        for (long long i = 0; i < warmup; i++)
            MPI_Allreduce(in, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        /* Poison the output so a call that does nothing cannot pass the check. */
        memset(recv, 0xff, (size_t)count * sizeof *recv);
        MPI_Barrier(MPI_COMM_WORLD); /* start the timed loop together */
        for (long long i = 0; i < iters; i++) {
            double t0 = now_us();
            MPI_Allreduce(in, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            t[i] = now_us() - t0;
        }
        if (inplace) { /* one more call on fresh inputs, for the check */
            memcpy(recv, send, (size_t)count * sizeof *recv);
            MPI_Allreduce(MPI_IN_PLACE, recv, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        }
        long long wrong = 0, wrong_all = 0;
        for (int i = 0; i < count; i++)
            wrong += recv[i] != expect;
        double med = median(t, (int)iters), med_max = 0;
        MPI_Reduce(&med, &med_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        MPI_Reduce(&wrong, &wrong_all, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            printf("%lld %.2f %lld\n", bytes, med_max, wrong_all);
            fflush(
                stdout); /* mpirun forwards per line; keep partial results if a later size dies */
        }
        if (factor < 2 || bytes > maxb / factor)
            break;
        bytes *= factor;
    }
    free(t);
    free(recv);
    free(send);
    MPI_Finalize();
    return 0;
}
