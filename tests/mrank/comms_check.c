/* Blocking allreduces on the global, local and cross communicators of a job on several
 * (pseudo-)hosts, every result checked exactly. Each call's data travels in the engine's
 * cycle messages when it is small enough (up to 64 KiB on communicators of at most four
 * ranks), and on several hosts with their arenas those messages go between hosts first and
 * then through each host's arena, in as many slot-sized steps as the longest bundle needs:
 * four hosts of two ranks with 64 KiB calls on the local communicator take two. On the
 * global communicator 8192 floats (32 KiB) are the most that ride in them; 8193 do not.
 * Every rank contributes rank + 1 + i at element i, so every sum is an exact integer in
 * float32.
 *
 *   horovodrun -np 8 -H 127.0.0.1:2,127.0.0.2:2,127.0.0.3:2,127.0.0.4:2 comms_check
 * Exit status 0 when every element of every call was right. */
#include <hvd/hvd.h>

#include <stdio.h>
#include <stdlib.h>

/* Global ranks of the members of comm that this rank belongs to, from every rank's
 * (local rank, cross rank) pair: same cross rank for local, same local rank for cross. */
static int members(hvd_comm_t comm, const int *pairs, int size, int *out) {
    int lr = hvd_local_rank(), cr = hvd_cross_rank(), n = 0;
    for (int r = 0; r < size; r++) {
        int same = comm == HVD_COMM_GLOBAL  ? 1
                   : comm == HVD_COMM_LOCAL ? pairs[2 * r + 1] == cr
                                            : pairs[2 * r] == lr;
        if (same)
            out[n++] = r;
    }
    return n;
}

int main(void) {
    if (hvd_init() != HVD_OK) {
        fprintf(stderr, "hvd_init: %s\n", hvd_last_error());
        return 1;
    }
    int rank = hvd_rank(), size = hvd_size(), bad = 0;
    int mine[2] = {hvd_local_rank(), hvd_cross_rank()};
    int *pairs = malloc(2 * (size_t)size * sizeof *pairs),
        *who = malloc((size_t)size * sizeof *who);
    size_t counts[] = {0, 1, 7, 4096, 8192, 8193, 16383, 16384};
    size_t most = 16384;
    float *in = malloc(most * sizeof *in), *out = malloc(most * sizeof *out);
    if (!pairs || !who || !in || !out || hvd_allgather(mine, 2, pairs, HVD_INT32) != HVD_OK) {
        fprintf(stderr, "rank %d: setup failed: %s\n", rank, hvd_last_error());
        return 1;
    }
    for (int round = 0; round < 3; round++) {
        for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
            for (int comm = 0; comm < 3; comm++) {
                size_t n = counts[c];
                int m = members((hvd_comm_t)comm, pairs, size, who);
                for (size_t i = 0; i < n; i++) {
                    in[i] = (float)(rank + 1 + (int)(i % 1000));
                    out[i] = -1.0f;
                }
                hvd_status_t st =
                    hvd_allreduce_ex(in, out, n, HVD_FLOAT32, HVD_SUM, 1.0, 1.0, (hvd_comm_t)comm);
                if (st != HVD_OK) {
                    fprintf(stderr, "rank %d: allreduce of %zu on comm %d: %s\n", rank, n, comm,
                            hvd_last_error());
                    return 1;
                }
                for (size_t i = 0; i < n; i++) {
                    double want = 0;
                    for (int k = 0; k < m; k++)
                        want += who[k] + 1 + (int)(i % 1000);
                    if (out[i] != (float)want && bad++ < 5)
                        fprintf(stderr, "rank %d: comm %d count %zu element %zu: %g, want %g\n",
                                rank, comm, n, i, out[i], want);
                }
            }
        }
    }
    int all = 0;
    if (hvd_allreduce(&bad, &all, 1, HVD_INT32, HVD_SUM) != HVD_OK) {
        fprintf(stderr, "rank %d: final allreduce: %s\n", rank, hvd_last_error());
        return 1;
    }
    if (rank == 0)
        printf("comms_check: %d ranks, %d local x %d hosts: %d wrong elements\n", size,
               hvd_local_size(), hvd_cross_size(), all);
    hvd_shutdown();
    free(pairs);
    free(who);
    free(in);
    free(out);
    return all != 0;
}
