/* Autotune's parameter manager (autotune.h). */
#include "controller/autotune.h"

#include "common/error.h"
#include "controller/bayes_opt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUSION_MAX ((double)(64u << 20))
#define CYCLE_MIN_MS 1.0
#define CYCLE_MAX_MS 100.0

/* Horovod's starting points (fusion MiB, cycle ms). */
static const double STARTS[][2] = {{4, 5}, {32, 50}, {16, 25}, {8, 10}};
#define NSTARTS 4

enum { PH_BASELINE, PH_BAYES, PH_CATEGORICAL, PH_CONFIRM, PH_DONE };
/* The confirmation: the best and the starting configuration measured in turn, each this
 * many times. */
#define CONFIRM_ROUNDS 2
enum { K_CACHE, K_HIER_ALLREDUCE, K_HIER_ALLGATHER, NKNOBS };

struct hvd_tune {
    hvd_tune_config_t cfg;
    FILE *log;
    int phase;
    hvd_tune_params_t cur, best, start;
    double best_score;
    int have_best;
    double confirm[2 * CONFIRM_ROUNDS]; /* best, start, best, start, ... */
    int nconfirm;
    /* the sample in progress */
    int64_t start_us;
    uint64_t bytes;
    int steps, warmup_left;
    double scores[HVD_TUNE_SAMPLES];
    int nscores;
    /* Bayesian phase: which of (fusion, cycle) it tunes, and how many configurations so far */
    hvd_bo_t *bo;
    int dims, tune_fusion, tune_cycle, bayes_done;
    double x[2];
    int knob; /* categorical phase: the knob being tried */
};

static int *knob_of(hvd_tune_params_t *p, int k) {
    return k == K_CACHE            ? &p->cache_enabled
           : k == K_HIER_ALLREDUCE ? &p->hierarchical_allreduce
                                   : &p->hierarchical_allgather;
}

static int knob_tuned(const hvd_tune_t *t, int k) {
    switch (k) {
    case K_CACHE:
        return !t->cfg.pin_cache;
    case K_HIER_ALLREDUCE:
        return t->cfg.multi_host && !t->cfg.pin_hier_allreduce;
    default:
        return t->cfg.multi_host && !t->cfg.pin_hier_allgather;
    }
}

static void log_line(hvd_tune_t *t, const hvd_tune_params_t *p, double score) {
    if (!t->log)
        return;
    /* Horovod's columns; torus_allreduce is always 0 here (no torus allreduce) */
    fprintf(t->log, "%d,%d,0,%d,%g,%zu,%g\n", p->hierarchical_allreduce, p->hierarchical_allgather,
            p->cache_enabled, p->cycle_time_ms, p->fusion_threshold, score);
    fflush(t->log);
}

hvd_status_t hvd__tune_create(const hvd_tune_config_t *cfg, const hvd_tune_params_t *initial,
                              hvd_tune_t **t_p) {
    if (cfg->steps_per_sample < 1 || cfg->warmup_samples < 0 || cfg->max_samples < 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "autotune: steps per sample %d, warm-up samples %d, max samples %d",
                              cfg->steps_per_sample, cfg->warmup_samples, cfg->max_samples);
    hvd_tune_t *t = calloc(1, sizeof *t);
    if (!t)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for autotune");
    t->cfg = *cfg;
    t->cur = t->best = t->start = *initial;
    t->start_us = -1;
    t->warmup_left = cfg->warmup_samples;
    t->tune_fusion = !cfg->pin_fusion;
    t->tune_cycle = !cfg->pin_cycle;
    t->dims = t->tune_fusion + t->tune_cycle;
    t->knob = -1;
    hvd_status_t st = HVD_OK;
    if (t->dims)
        st = hvd__bo_create(t->dims, cfg->noise, 0x5eed, &t->bo);
    if (st == HVD_OK && cfg->log_path && *cfg->log_path) {
        t->log = fopen(cfg->log_path, "w");
        if (!t->log)
            st = hvd__error_set(HVD_ERR_IO, "autotune: cannot write the log %s", cfg->log_path);
        else
            fprintf(t->log, "hierarchical_allreduce,hierarchical_allgather,torus_allreduce,"
                            "cache_enabled,cycle_time_ms,tensor_fusion_threshold,score\n");
    }
    if (st != HVD_OK) {
        hvd__tune_destroy(t);
        return st;
    }
    t->cfg.log_path = NULL; /* (not kept: the caller's) */
    t->phase = PH_BASELINE;
    *t_p = t;
    return HVD_OK;
}

void hvd__tune_destroy(hvd_tune_t *t) {
    if (!t)
        return;
    if (t->log)
        fclose(t->log);
    hvd__bo_destroy(t->bo);
    free(t);
}

const hvd_tune_params_t *hvd__tune_params(const hvd_tune_t *t) {
    return &t->cur;
}

int hvd__tune_done(const hvd_tune_t *t) {
    return t->phase == PH_DONE;
}

static int same(const hvd_tune_params_t *a, const hvd_tune_params_t *b) {
    return a->fusion_threshold == b->fusion_threshold && a->cycle_time_ms == b->cycle_time_ms &&
           a->cache_enabled == b->cache_enabled &&
           a->hierarchical_allreduce == b->hierarchical_allreduce &&
           a->hierarchical_allgather == b->hierarchical_allgather;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The configuration of point x of the Bayesian phase (the pinned knob keeps its value). */
static void apply_point(hvd_tune_t *t, const double *x) {
    int i = 0;
    t->cur = t->best;
    if (t->tune_fusion)
        t->cur.fusion_threshold = (size_t)(x[i++] * FUSION_MAX);
    if (t->tune_cycle)
        t->cur.cycle_time_ms = CYCLE_MIN_MS + x[i] * (CYCLE_MAX_MS - CYCLE_MIN_MS);
    memcpy(t->x, x, sizeof t->x);
}

/* The search is over. The best of many noisy scores is likely one that was lucky, and a
 * configuration kept by luck would leave the job slower than it started: unless the best is
 * the starting configuration, the two are measured in turn CONFIRM_ROUNDS times each, and
 * the best is kept only if it scores higher over those rounds. */
static void confirm_or_end(hvd_tune_t *t) {
    if (t->phase != PH_CONFIRM && !same(&t->best, &t->start)) {
        t->phase = PH_CONFIRM;
        t->nconfirm = 0;
        t->cur = t->best;
        return;
    }
    if (t->phase == PH_CONFIRM) {
        double b = 0, s = 0;
        for (int i = 0; i < t->nconfirm; i++)
            *(i % 2 ? &s : &b) += t->confirm[i];
        if (s >= b) {
            t->best = t->start;
            t->best_score = s / CONFIRM_ROUNDS;
        }
    }
    t->cur = t->best;
    t->phase = PH_DONE;
    log_line(t, &t->best, t->best_score);
}

/* The next knob of the categorical phase to try flipped, or the end. */
static void next_knob(hvd_tune_t *t) {
    for (t->knob++; t->knob < NKNOBS; t->knob++) {
        if (knob_tuned(t, t->knob)) {
            t->cur = t->best;
            *knob_of(&t->cur, t->knob) = !*knob_of(&t->cur, t->knob);
            t->phase = PH_CATEGORICAL;
            return;
        }
    }
    confirm_or_end(t);
}

/* The Bayesian phase's next configuration, or on to the categorical phase. */
static void next_point(hvd_tune_t *t) {
    if (!t->dims || t->bayes_done >= t->cfg.max_samples) {
        next_knob(t);
        return;
    }
    double x[2] = {0.5, 0.5};
    if (t->bayes_done < NSTARTS) {
        int i = 0;
        if (t->tune_fusion)
            x[i++] = STARTS[t->bayes_done][0] * (1 << 20) / FUSION_MAX;
        if (t->tune_cycle)
            x[i] = (STARTS[t->bayes_done][1] - CYCLE_MIN_MS) / (CYCLE_MAX_MS - CYCLE_MIN_MS);
    } else {
        hvd__bo_next(t->bo, x);
    }
    t->phase = PH_BAYES;
    apply_point(t, x);
}

/* The current configuration scored score: record it, move to the next. */
static void scored(hvd_tune_t *t, double score) {
    log_line(t, &t->cur, score);
    if (t->phase == PH_CONFIRM) {
        t->confirm[t->nconfirm++] = score;
        if (t->nconfirm == 2 * CONFIRM_ROUNDS)
            confirm_or_end(t);
        else
            t->cur = t->nconfirm % 2 ? t->start : t->best;
        return;
    }
    if (!t->have_best || score > t->best_score) {
        t->best = t->cur;
        t->best_score = score;
        t->have_best = 1;
    }
    if (t->phase == PH_BAYES) {
        if (hvd__bo_add(t->bo, t->x, score) != HVD_OK)
            t->bayes_done = t->cfg.max_samples; /* (its table is full: stop there) */
        t->bayes_done++;
        next_point(t);
    } else if (t->phase == PH_BASELINE) {
        next_point(t);
    } else {
        next_knob(t);
    }
}

int hvd__tune_step(hvd_tune_t *t, uint64_t bytes, int64_t now_us) {
    if (t->phase == PH_DONE)
        return 0;
    if (t->start_us < 0) { /* the first report only starts the clock */
        t->start_us = now_us;
        return 0;
    }
    t->bytes += bytes;
    if (++t->steps < t->cfg.steps_per_sample)
        return 0;
    int64_t took = now_us - t->start_us;
    double score = (double)t->bytes / (double)(took > 0 ? took : 1);
    t->bytes = 0;
    t->steps = 0;
    t->start_us = now_us;
    if (t->warmup_left > 0) {
        t->warmup_left--;
        return 0;
    }
    t->scores[t->nscores++] = score;
    if (t->nscores < HVD_TUNE_SAMPLES)
        return 0;
    t->nscores = 0;
    qsort(t->scores, HVD_TUNE_SAMPLES, sizeof t->scores[0], cmp_double);
    hvd_tune_params_t before = t->cur;
    scored(t, t->scores[HVD_TUNE_SAMPLES / 2]);
    return !same(&before, &t->cur);
}
