/* hvd_init_store without horovodrun: this program forks N ranks that form a job through a
 * store of their own (one file per key in a fresh directory, written whole by rename), as the
 * torch.distributed backend does through torch's store. Scenarios (argv[1]):
 *
 *   job N          every rank initialises, allreduces its rank (the sum is checked), runs a
 *                  second hvd_init_store in the same store (new keys: no stale records), and
 *                  the secret travelled through the store (rank 0 published it)
 *   secret_file N  HVD_SECRET_FILE on every rank: the job forms and no secret key is written
 *   missing N      rank N-1 never calls hvd_init_store: every other rank fails within the
 *                  timeout (2 s) with HVD_ERR_TIMEOUT naming rank N-1
 *   bad_args       NULL store or callbacks, a rank outside the size: HVD_ERR_INVALID_ARG
 *
 * Exit status 0 when every rank passed. */
#include <hvd/hvd.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char dir[256];

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: %s:%d: ", g_rank, __FILE__, __LINE__);                       \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static int g_rank = -1;

static void key_path(const char *key, char *out, size_t n) {
    snprintf(out, n, "%s/%s", dir, key);
}

static hvd_status_t file_set(void *user, const char *key, const void *value, size_t len) {
    (void)user;
    char path[512], tmp[600];
    key_path(key, path, sizeof path);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(value, 1, len, f) != len || fclose(f) != 0)
        return HVD_ERR_IO;
    return rename(tmp, path) == 0 ? HVD_OK : HVD_ERR_IO;
}

static hvd_status_t file_get(void *user, const char *key, int timeout_ms, void *buf, size_t cap,
                             size_t *len_p) {
    (void)user;
    char path[512];
    key_path(key, path, sizeof path);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        FILE *f = fopen(path, "rb");
        if (f) {
            size_t n = fread(buf, 1, cap, f);
            fseek(f, 0, SEEK_END);
            long total = ftell(f);
            fclose(f);
            *len_p = total > 0 ? (size_t)total : n;
            return HVD_OK;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        long ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (ms >= timeout_ms)
            return HVD_ERR_TIMEOUT;
        usleep(2000);
    }
}

static const char *file_error(void *user) {
    (void)user;
    return "the test store failed";
}

static hvd_store_t store_for(int rank, int size) {
    hvd_store_t s = {.rank = rank,
                     .size = size,
                     .route_addr = "127.0.0.1",
                     .set = file_set,
                     .get = file_get,
                     .last_error = file_error,
                     .user = NULL};
    return s;
}

static int key_exists(const char *key) {
    char path[512];
    struct stat st;
    key_path(key, path, sizeof path);
    return stat(path, &st) == 0;
}

static void run_job(int rank, int size, int generations) {
    hvd_config_t cfg;
    hvd_config_init(&cfg);
    cfg.timeout_seconds = 20;
    for (int g = 0; g < generations; g++) {
        hvd_store_t s = store_for(rank, size);
        hvd_status_t st = hvd_init_store(&cfg, &s);
        CHECK(st == HVD_OK, "hvd_init_store (generation %d): %s", g, hvd_last_error());
        CHECK(hvd_rank() == rank && hvd_size() == size, "rank %d of %d", hvd_rank(), hvd_size());
        CHECK(hvd_local_size() == size && hvd_local_rank() == rank, "local %d of %d",
              hvd_local_rank(), hvd_local_size());
        double v = rank + 1, sum = 0;
        st = hvd_allreduce(&v, &sum, 1, HVD_FLOAT64, HVD_SUM);
        CHECK(st == HVD_OK, "allreduce: %s", hvd_last_error());
        CHECK(sum == size * (size + 1) / 2.0, "sum %g", sum);
        /* a message between neighbours on the same job */
        if (size > 1) {
            int out = rank * 10 + g, in = -1;
            hvd_handle_t hs, hr;
            CHECK(hvd_send_async(&out, 1, HVD_INT32, (rank + 1) % size, 3, &hs) == HVD_OK, "send");
            CHECK(hvd_recv_async(&in, 1, HVD_INT32, (rank + size - 1) % size, 3, &hr) == HVD_OK,
                  "recv");
            CHECK(hvd_wait(hs) == HVD_OK && hvd_wait(hr) == HVD_OK, "p2p: %s", hvd_last_error());
            CHECK(in == ((rank + size - 1) % size) * 10 + g, "received %d", in);
        }
        CHECK(hvd_shutdown() == HVD_OK, "shutdown");
    }
}

static int scenario_bad_args(void) {
    g_rank = 0;
    hvd_store_t s = store_for(0, 1);
    CHECK(hvd_init_store(NULL, NULL) == HVD_ERR_INVALID_ARG, "NULL store");
    CHECK(strstr(hvd_last_error(), "store is NULL"), "%s", hvd_last_error());
    s.get = NULL;
    CHECK(hvd_init_store(NULL, &s) == HVD_ERR_INVALID_ARG, "NULL get");
    s = store_for(2, 2);
    CHECK(hvd_init_store(NULL, &s) == HVD_ERR_INVALID_ARG, "rank 2 of 2");
    CHECK(strstr(hvd_last_error(), "rank 2 is not a rank of a job of size 2"), "%s",
          hvd_last_error());
    CHECK(!hvd_is_initialized(), "initialised after refusals");
    /* size 1 needs no store traffic at all */
    s = store_for(0, 1);
    CHECK(hvd_init_store(NULL, &s) == HVD_OK, "alone: %s", hvd_last_error());
    CHECK(hvd_size() == 1, "size %d", hvd_size());
    CHECK(hvd_shutdown() == HVD_OK, "shutdown");
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s job|secret_file|missing N | bad_args\n", argv[0]);
        return 2;
    }
    const char *scenario = argv[1];
    snprintf(dir, sizeof dir, "%s/hvd-store-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    if (strcmp(scenario, "bad_args") == 0)
        return scenario_bad_args();
    int size = argc > 2 ? atoi(argv[2]) : 2;
    if (strcmp(scenario, "secret_file") == 0) {
        char path[512];
        snprintf(path, sizeof path, "%s.secret", dir);
        FILE *f = fopen(path, "w");
        if (!f)
            return 1;
        fprintf(f, "  %s\n", "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
        fclose(f);
        setenv("HVD_SECRET_FILE", path, 1);
    }
    unsetenv("HOROVOD_GLOO_RENDEZVOUS_ADDR"); /* (a store of its own, whatever the caller runs) */
    unsetenv("HOROVOD_RANK");
    pid_t pids[64];
    for (int r = 0; r < size && r < 64; r++) {
        if ((pids[r] = fork()) == 0) {
            g_rank = r;
            if (strcmp(scenario, "missing") == 0) {
                if (r == size - 1)
                    _exit(0); /* never checks in */
                hvd_config_t cfg;
                hvd_config_init(&cfg);
                cfg.timeout_seconds = 2;
                hvd_store_t s = store_for(r, size);
                hvd_status_t st = hvd_init_store(&cfg, &s);
                CHECK(st == HVD_ERR_TIMEOUT, "expected a timeout, got %s: %s", hvd_status_str(st),
                      hvd_last_error());
                char want[64];
                snprintf(want, sizeof want, "rank %d never checked in", size - 1);
                CHECK(strstr(hvd_last_error(), want), "the message: %s", hvd_last_error());
                _exit(0);
            }
            run_job(r, size, strcmp(scenario, "job") == 0 ? 2 : 1);
            _exit(0);
        }
    }
    int failed = 0;
    for (int r = 0; r < size; r++) {
        int status = 0;
        waitpid(pids[r], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "rank %d failed (status 0x%x)\n", r, status);
            failed = 1;
        }
    }
    g_rank = -1;
    if (!failed && strcmp(scenario, "job") == 0 && size > 1) { /* (alone: no store traffic) */
        CHECK(key_exists("hvd.0.secret") && key_exists("hvd.1.secret"),
              "rank 0 published no secret in the store");
        CHECK(key_exists("hvd.1.rank_0"), "the second generation's records are missing");
    }
    if (!failed && strcmp(scenario, "secret_file") == 0)
        CHECK(!key_exists("hvd.0.secret"), "a secret entered the store despite HVD_SECRET_FILE");
    if (!failed)
        printf("store_init_check %s: every rank passed\n", scenario);
    return failed;
}
