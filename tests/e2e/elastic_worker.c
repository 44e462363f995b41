/* A deterministic elastic training program for the elastic tests (tests/e2e/test_elastic.sh
 * and by hand):
 *
 *   horovodrun --host-discovery-script d.sh -np 3 --min-np 2 elastic_worker --steps N
 *       --commit-every K [--sleep-ms M] [--state-mb S] [--print-pid] [--bench]
 *       [--hang-on-failure HOST] [--stop-file PATH]
 *
 * State: a step counter, an accumulator and a float64 vector (S MB, default 8 KiB), all
 * registered with hvd_elastic_state_add, so the library saves, restores and syncs them. Each
 * step every rank allreduces (AVERAGE) the value v = step, which every rank computes alike,
 * so the result must be step itself (a rank whose step differs from the others' is caught at
 * once); acc += result; three vector elements get +1; step++. Every K steps the state is
 * committed and rank 0 prints
 *     commit <step / K> step <step> size <world size> acc <acc>
 * (the counter only grows, whatever failures and resets happen). At the end every rank checks
 * acc == N (N - 1) / 2 and the vector's sum == 3 N exactly, so progress lost or counted twice
 * fails the run (exit 1), and rank 0 prints
 *     done step <N> acc <N (N - 1) / 2> resets <resets>
 * --print-pid: after every (re)initialisation every rank prints "pid <rank> <host> <pid>"
 * (host = HOROVOD_HOSTNAME), so a test can pick a victim to kill.
 * --hang-on-failure HOST: the worker on HOST, once a collective fails because a peer was lost,
 * hangs without calling hvd again (its agent still sends heartbeats): the driver must end it
 * after --elastic-timeout.
 * --stop-file PATH: at every commit the ranks agree (allreduce MAX) whether any of them sees
 * PATH; if one does, training ends there and the checks below take that step as N (a test
 * ends a job that must outlive something of unknown length without guessing its steps).
 * --bench: after every reset rank 0 prints, once its first allreduce of the new world
 * succeeded, "recovered <ms since this rank first saw the failure> <CLOCK_REALTIME ms>".
 * A worker the driver removes, or a job the driver stops, exits 0 after printing the reason
 * to stderr. */
#include <hvd/hvd.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    long long steps, commit_every;
    int sleep_ms;
    double state_mb;
    int print_pid, bench;
    const char *hang_host; /* --hang-on-failure HOST */
    const char *stop_file; /* --stop-file PATH */
} opts_t;

typedef struct {
    opts_t o;
    hvd_elastic_state_t *state;
    int64_t step;
    double acc;
    double *vec;
    size_t len;
    /* --bench: when this rank first saw the failure being recovered from (0: none) */
    int64_t failed_ms;
    int recovering;
} worker_t;

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void print_pid(const worker_t *w) {
    if (!w->o.print_pid)
        return;
    const char *host = getenv("HOROVOD_HOSTNAME");
    printf("pid %d %s %ld\n", hvd_rank(), host ? host : "localhost", (long)getpid());
}

/* A failure about to be recovered from: remember when this rank saw it first. */
static hvd_status_t failed(worker_t *w, hvd_status_t st, const char *what) {
    const char *host = getenv("HOROVOD_HOSTNAME");
    if (w->o.hang_host && host && strcmp(host, w->o.hang_host) == 0 && st == HVD_ERR_PEER_LOST) {
        /* a user's code that never calls hvd again (its agent still sends heartbeats) */
        fprintf(stderr, "elastic_worker: rank %d: %s failed; hanging as asked\n", hvd_rank(), what);
        for (;;)
            pause();
    }
    if (st == HVD_ERR_PEER_LOST || st == HVD_ERR_TIMEOUT || st == HVD_ERR_HOSTS_UPDATED) {
        if (!w->failed_ms)
            w->failed_ms = mono_ms();
        fprintf(stderr, "elastic_worker: rank %d: %s: %s (%s); recovering\n", hvd_rank(), what,
                hvd_status_str(st), hvd_last_error());
    } else {
        fprintf(stderr, "elastic_worker: rank %d: %s: %s: %s\n", hvd_rank(), what,
                hvd_status_str(st), hvd_last_error());
    }
    return st;
}

static hvd_status_t on_reset(void *user) {
    worker_t *w = user;
    if (!w->failed_ms)
        w->failed_ms = mono_ms();
    w->recovering = 1;
    print_pid(w);
    return HVD_OK;
}

static hvd_status_t train(hvd_elastic_state_t *state, void *arg) {
    worker_t *w = arg;
    while (w->step < w->o.steps) {
        double v = (double)w->step, r = -1;
        hvd_status_t st = hvd_allreduce(&v, &r, 1, HVD_FLOAT64, HVD_AVERAGE);
        if (st != HVD_OK)
            return failed(w, st, "allreduce");
        if (r != (double)w->step) {
            fprintf(stderr,
                    "elastic_worker: rank %d: allreduce of step %lld gave %.17g: the ranks are "
                    "at different steps (state not synced?)\n",
                    hvd_rank(), (long long)w->step, r);
            return HVD_ERR_MISMATCH;
        }
        if (w->recovering && w->o.bench && hvd_rank() == 0)
            printf("recovered %lld %lld\n", (long long)(mono_ms() - w->failed_ms),
                   (long long)wall_ms());
        if (w->recovering) {
            w->recovering = 0;
            w->failed_ms = 0;
        }
        w->acc += r;
        w->vec[0] += 1;
        w->vec[w->len - 1] += 1;
        w->vec[(size_t)w->step % w->len] += 1;
        w->step++;
        if (w->o.sleep_ms > 0) {
            struct timespec ts = {w->o.sleep_ms / 1000, (long)(w->o.sleep_ms % 1000) * 1000000};
            nanosleep(&ts, NULL);
        }
        if (w->step % w->o.commit_every == 0) {
            st = hvd_elastic_commit(state);
            if (st != HVD_OK)
                return failed(w, st, "commit");
            if (hvd_rank() == 0)
                printf("commit %lld step %lld size %d acc %.17g\n",
                       (long long)(w->step / w->o.commit_every), (long long)w->step, hvd_size(),
                       w->acc);
            /* --stop-file: once any rank sees it, every rank ends here, at the same step */
            int32_t stop = w->o.stop_file && access(w->o.stop_file, F_OK) == 0, any = 0;
            if (w->o.stop_file) {
                st = hvd_allreduce(&stop, &any, 1, HVD_INT32, HVD_MAX);
                if (st != HVD_OK)
                    return failed(w, st, "stop-file agreement");
                if (any) {
                    w->o.steps = w->step;
                    break;
                }
            }
        }
    }
    return HVD_OK;
}

static int usage(void) {
    fprintf(stderr, "usage: elastic_worker --steps N --commit-every K [--sleep-ms M] "
                    "[--state-mb S] [--print-pid] [--bench] [--hang-on-failure HOST] "
                    "[--stop-file PATH]\n");
    return 2;
}

static int parse(int argc, char **argv, opts_t *o) {
    memset(o, 0, sizeof *o);
    o->commit_every = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--print-pid") == 0) {
            o->print_pid = 1;
            continue;
        }
        if (strcmp(a, "--bench") == 0) {
            o->bench = 1;
            continue;
        }
        if (!v)
            return -1;
        if (strcmp(a, "--hang-on-failure") == 0) {
            o->hang_host = v;
            i++;
            continue;
        }
        if (strcmp(a, "--stop-file") == 0) {
            o->stop_file = v;
            i++;
            continue;
        }
        char *end;
        if (strcmp(a, "--steps") == 0)
            o->steps = strtoll(v, &end, 10);
        else if (strcmp(a, "--commit-every") == 0)
            o->commit_every = strtoll(v, &end, 10);
        else if (strcmp(a, "--sleep-ms") == 0)
            o->sleep_ms = (int)strtol(v, &end, 10);
        else if (strcmp(a, "--state-mb") == 0)
            o->state_mb = strtod(v, &end);
        else
            return -1;
        if (*end)
            return -1;
        i++;
    }
    /* N (N - 1) / 2 stays an exact double below 2^53 */
    if (o->steps < 1 || o->steps > 100000000 || o->commit_every < 1 || o->sleep_ms < 0 ||
        o->state_mb < 0 || o->state_mb > 4096)
        return -1;
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    worker_t w = {0};
    if (parse(argc, argv, &w.o) != 0)
        return usage();
    w.len = w.o.state_mb > 0 ? (size_t)(w.o.state_mb * 1048576.0 / sizeof(double)) : 1024;
    if (w.len < 2)
        w.len = 2;
    w.vec = calloc(w.len, sizeof *w.vec);
    if (!w.vec) {
        fprintf(stderr, "elastic_worker: out of memory for %zu doubles\n", w.len);
        return 1;
    }
    /* A first init can fail when the driver gives up on the round as it forms (a worker
     * died before checking in); calling hvd_init again joins the driver's next round. */
    hvd_status_t st;
    while ((st = hvd_init()) != HVD_OK) {
        if (st == HVD_ERR_SHUT_DOWN) {
            fprintf(stderr, "elastic_worker: %s\n", hvd_last_error());
            free(w.vec);
            return 0;
        }
        if (st != HVD_ERR_PEER_LOST && st != HVD_ERR_TIMEOUT) {
            fprintf(stderr, "elastic_worker: hvd_init: %s: %s\n", hvd_status_str(st),
                    hvd_last_error());
            free(w.vec);
            return 1;
        }
        fprintf(stderr, "elastic_worker: hvd_init: %s; trying again\n", hvd_last_error());
    }
    print_pid(&w);
    hvd_elastic_callbacks_t cb = {.reset = on_reset, .user = &w};
    int rc = 1;
    if ((st = hvd_elastic_state_create(&cb, &w.state)) != HVD_OK ||
        (st = hvd_elastic_state_add(w.state, "step", &w.step, 1, HVD_INT64)) != HVD_OK ||
        (st = hvd_elastic_state_add(w.state, "acc", &w.acc, 1, HVD_FLOAT64)) != HVD_OK ||
        (st = hvd_elastic_state_add(w.state, "vec", w.vec, w.len, HVD_FLOAT64)) != HVD_OK) {
        fprintf(stderr, "elastic_worker: state: %s\n", hvd_last_error());
        goto out;
    }
    st = hvd_elastic_run(w.state, train, &w);
    if (st == HVD_ERR_SHUT_DOWN) {
        /* removed from the job, or the job stopped: not a failure of this worker */
        fprintf(stderr, "elastic_worker: %s\n", hvd_last_error());
        rc = 0;
        goto out;
    }
    if (st != HVD_OK) {
        fprintf(stderr, "elastic_worker: rank %d: hvd_elastic_run: %s: %s\n", hvd_rank(),
                hvd_status_str(st), hvd_last_error());
        goto out;
    }
    double want = (double)w.o.steps * (double)(w.o.steps - 1) / 2, sum = 0;
    for (size_t i = 0; i < w.len; i++)
        sum += w.vec[i];
    if (w.step != w.o.steps || w.acc != want || sum != 3.0 * (double)w.o.steps) {
        fprintf(stderr,
                "elastic_worker: rank %d: wrong result: step %lld acc %.17g (want %.17g), "
                "vector sum %.17g (want %.17g)\n",
                hvd_rank(), (long long)w.step, w.acc, want, sum, 3.0 * (double)w.o.steps);
        goto out;
    }
    if (hvd_rank() == 0)
        printf("done step %lld acc %.17g resets %d\n", (long long)w.step, w.acc,
               hvd_elastic_resets(w.state));
    rc = 0;
out:
    hvd_elastic_state_destroy(w.state);
    if (hvd_is_initialized() && hvd_shutdown() != HVD_OK && rc == 0) {
        fprintf(stderr, "elastic_worker: hvd_shutdown: %s\n", hvd_last_error());
        rc = 1;
    }
    free(w.vec);
    return rc;
}
