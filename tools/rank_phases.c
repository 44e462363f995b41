/* Where a big job's time goes, rank by rank: run under horovodrun with HVD_BENCH_T0 set to the
 * launch time (seconds since the epoch, as `date +%s.%N` prints it), each rank prints
 *   phases RANK STARTED INITIALISED REDUCED ENDED
 * in seconds since then: when its main began, when hvd_init returned, when its first
 * allreduce (one float, every rank) returned, and when hvd_shutdown did. A benchmark's probe
 * (tools/bench_many_ranks.sh --phases), not a test: it exits 1 on any failure. */
#include <hvd/hvd.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(void) {
    const char *t0_text = getenv("HVD_BENCH_T0");
    double t0 = t0_text ? atof(t0_text) : 0, started = now_s() - t0;
    hvd_status_t st = hvd_init();
    double initialised = now_s() - t0;
    if (st != HVD_OK) {
        fprintf(stderr, "rank_phases: hvd_init: %s\n", hvd_last_error());
        return 1;
    }
    int rank = hvd_rank(), size = hvd_size();
    float x = 1.0f;
    st = hvd_allreduce(&x, &x, 1, HVD_FLOAT32, HVD_SUM);
    double reduced = now_s() - t0;
    if (st != HVD_OK || x != (float)size) {
        fprintf(stderr, "rank_phases: allreduce: %s (%g, not %d)\n",
                st != HVD_OK ? hvd_last_error() : "wrong sum", (double)x, size);
        return 1;
    }
    st = hvd_shutdown();
    double ended = now_s() - t0;
    if (st != HVD_OK) {
        fprintf(stderr, "rank_phases: hvd_shutdown: %s\n", hvd_last_error());
        return 1;
    }
    printf("phases %d %.3f %.3f %.3f %.3f\n", rank, started, initialised, reduced, ended);
    return 0;
}
