/* Autotune's parameter manager (src/controller/autotune.h) on a simulated job whose
 * throughput is a known function of the knobs: it ends at a configuration within 5 % of the
 * best, never below the one it started from, within its budget of steps; a configuration
 * that scored high once by luck does not replace a better start; pinned knobs stay; the log
 * has Horovod's header, a line per configuration and the best last. */
#include "controller/autotune.h"

#include <hvd/hvd.h>

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

/* bytes per microsecond of a configuration: a peak at 24 MiB and 7 ms, the cache worth 10 %,
 * hierarchical allreduce 20 % (on several hosts) */
static double throughput(const hvd_tune_params_t *p) {
    double f = (double)p->fusion_threshold / (1 << 20), c = p->cycle_time_ms;
    double t =
        1000 * exp(-((f - 24) / 20) * ((f - 24) / 20) - ((c - 7) / 30) * ((c - 7) / 30)) + 50;
    return t * (p->cache_enabled ? 1.1 : 1.0) * (p->hierarchical_allreduce ? 1.2 : 1.0);
}

static int same_params(const hvd_tune_params_t *a, const hvd_tune_params_t *b) {
    return a->fusion_threshold == b->fusion_threshold && a->cycle_time_ms == b->cycle_time_ms &&
           a->cache_enabled == b->cache_enabled &&
           a->hierarchical_allreduce == b->hierarchical_allreduce &&
           a->hierarchical_allgather == b->hierarchical_allgather;
}

static const hvd_tune_params_t DEFAULTS = {
    .fusion_threshold = 128u << 20, .cycle_time_ms = 1, .cache_enabled = 1};

static hvd_tune_config_t config(void) {
    return (hvd_tune_config_t){
        .warmup_samples = 3, .steps_per_sample = 10, .max_samples = 20, .noise = 0.8};
}

/* Run the simulated job (steps of 100 MB, +-3 % noise) until tuning ends; the steps taken. */
static int simulate(hvd_tune_t *t, int max_steps) {
    int64_t now = 0;
    for (int k = 0; k < max_steps; k++) {
        const hvd_tune_params_t *p = hvd__tune_params(t);
        double us = 1e8 / throughput(p) * (1 + 0.03 * sin(k * 1.7));
        now += (int64_t)us;
        hvd__tune_step(t, (uint64_t)1e8, now);
        if (hvd__tune_done(t))
            return k + 1;
    }
    return -1;
}

static void test_reaches_the_best(void **state) {
    (void)state;
    hvd_tune_config_t cfg = config();
    hvd_tune_t *t;
    assert_int_equal(hvd__tune_create(&cfg, &DEFAULTS, &t), HVD_OK);
    int steps = simulate(t, 100000);
    /* 1 + 3 warm-up samples, then (1 + 20 + 1 cache + 4 confirming) configurations of 5
     * samples, 10 steps */
    assert_true(steps > 0 && steps <= 10 * (3 + 5 * 26) + 1);
    hvd_tune_params_t best = {
        .fusion_threshold = 24u << 20, .cycle_time_ms = 7, .cache_enabled = 1};
    const hvd_tune_params_t *got = hvd__tune_params(t);
    assert_true(throughput(got) >= 0.95 * throughput(&best));
    assert_true(throughput(got) >= throughput(&DEFAULTS));
    assert_int_equal(got->hierarchical_allreduce, 0); /* one host: never tuned */
    hvd__tune_destroy(t);
}

/* A job where the start is the best configuration (by 2 %), but every other one scores 10 %
 * higher the first time it runs (a transient: caches warming, another job's burst): the
 * search ends at a lucky one, and the confirmation goes back to the start. */
static void test_lucky_once_is_not_kept(void **state) {
    (void)state;
    hvd_tune_config_t cfg = config();
    hvd_tune_t *t;
    assert_int_equal(hvd__tune_create(&cfg, &DEFAULTS, &t), HVD_OK);
    hvd_tune_params_t seen[64];
    int nseen = 0;
    int64_t now = 0;
    for (int k = 0; k < 100000 && !hvd__tune_done(t); k++) {
        const hvd_tune_params_t *p = hvd__tune_params(t);
        int first = 1;
        for (int i = 0; i < nseen && first; i++)
            first = !same_params(&seen[i], p);
        double tp = same_params(p, &DEFAULTS) ? 100 : 98 * (first ? 1.1 : 1.0);
        now += (int64_t)(1e8 / tp);
        hvd_tune_params_t before = *p;
        if (hvd__tune_step(t, (uint64_t)1e8, now) && nseen < 64)
            seen[nseen++] = before; /* (its run is over: later runs are not lucky) */
    }
    assert_true(hvd__tune_done(t));
    assert_true(nseen > 10); /* (the search did try others) */
    assert_true(same_params(hvd__tune_params(t), &DEFAULTS));
    hvd__tune_destroy(t);
}

static void test_pinned_knobs_stay(void **state) {
    (void)state;
    hvd_tune_config_t cfg = config();
    cfg.pin_cycle = 1;
    cfg.pin_cache = 1;
    cfg.multi_host = 1;
    hvd_tune_params_t start = DEFAULTS;
    start.cycle_time_ms = 30;
    start.cache_enabled = 0;
    hvd_tune_t *t;
    assert_int_equal(hvd__tune_create(&cfg, &start, &t), HVD_OK);
    int64_t now = 0;
    for (int k = 0; k < 100000 && !hvd__tune_done(t); k++) {
        const hvd_tune_params_t *p = hvd__tune_params(t);
        assert_true(p->cycle_time_ms == 30 && p->cache_enabled == 0); /* at every step */
        now += (int64_t)(1e8 / throughput(p));
        hvd__tune_step(t, (uint64_t)1e8, now);
    }
    assert_true(hvd__tune_done(t));
    const hvd_tune_params_t *got = hvd__tune_params(t);
    assert_true(fabs((double)got->fusion_threshold / (1 << 20) - 24) < 6);
    assert_int_equal(got->hierarchical_allreduce, 1); /* several hosts: tuned, and it pays */
    hvd__tune_destroy(t);
}

static void test_log(void **state) {
    (void)state;
    char path[] = "/tmp/hvd-autotune-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    hvd_tune_config_t cfg = config();
    cfg.max_samples = 6;
    cfg.log_path = path;
    hvd_tune_t *t;
    assert_int_equal(hvd__tune_create(&cfg, &DEFAULTS, &t), HVD_OK);
    assert_true(simulate(t, 100000) > 0);
    hvd_tune_params_t best = *hvd__tune_params(t);
    hvd__tune_destroy(t);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[256], last[256] = "";
    assert_non_null(fgets(line, sizeof line, f));
    assert_string_equal(line, "hierarchical_allreduce,hierarchical_allgather,torus_allreduce,"
                              "cache_enabled,cycle_time_ms,tensor_fusion_threshold,score\n");
    int rows = 0;
    while (fgets(line, sizeof line, f)) {
        int ha, hg, torus, cache;
        double cycle, score;
        size_t fusion;
        assert_int_equal(sscanf(line, "%d,%d,%d,%d,%lf,%zu,%lf", &ha, &hg, &torus, &cache, &cycle,
                                &fusion, &score),
                         7);
        assert_true(score > 0);
        snprintf(last, sizeof last, "%s", line);
        rows++;
    }
    fclose(f);
    unlink(path);
    /* the starting configuration, 6 of the Bayesian phase, the cache flipped, the
     * confirmation's 4 rounds, the best */
    assert_int_equal(rows, 1 + 6 + 1 + 4 + 1);
    char want[256];
    snprintf(want, sizeof want, "%d,%d,0,%d,%g,%zu,", best.hierarchical_allreduce,
             best.hierarchical_allgather, best.cache_enabled, best.cycle_time_ms,
             best.fusion_threshold);
    assert_memory_equal(last, want, strlen(want));
}

static void test_bad_config(void **state) {
    (void)state;
    hvd_tune_config_t cfg = config();
    cfg.steps_per_sample = 0;
    hvd_tune_t *t;
    assert_int_equal(hvd__tune_create(&cfg, &DEFAULTS, &t), HVD_ERR_INVALID_ARG);
    cfg = config();
    cfg.log_path = "/nonexistent-dir/log.csv";
    assert_int_equal(hvd__tune_create(&cfg, &DEFAULTS, &t), HVD_ERR_IO);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reaches_the_best),  cmocka_unit_test(test_lucky_once_is_not_kept),
        cmocka_unit_test(test_pinned_knobs_stay), cmocka_unit_test(test_log),
        cmocka_unit_test(test_bad_config),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
