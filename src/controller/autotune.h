/* Autotune's parameter manager (Horovod's HOROVOD_AUTOTUNE): while the job trains, it scores
 * each configuration of the engine's knobs by the bytes allreduced per microsecond and moves
 * to the next, until its budget is spent; then it keeps the best.
 *
 * Order, as Horovod's: the fusion threshold (0-64 MiB) and the cycle time (1-100 ms) are tuned
 * together by Bayesian optimisation (bayes_opt.h), from Horovod's four starting points, for
 * at most max_samples configurations; then each two-valued knob (the response cache on or off;
 * hierarchical allreduce and allgather, on jobs of several hosts) is tried the other way and
 * kept the better way. A pinned knob (set by the user: an environment variable or a flag) is
 * never changed. Last (hvd's own, not Horovod's), unless the best is the configuration the
 * job started with: the two are scored in turn, twice each, and the best is kept only if it
 * wins those rounds, so that a configuration that was only lucky once does not leave the job
 * slower than it started.
 *
 * A configuration's score is the median of SAMPLES samples, each steps_per_sample steps
 * long (hvd__tune_step reports one step: the bytes it allreduced); the first warmup_samples
 * samples of the run are not scored. With a log path, every scored configuration (the
 * confirmation's rounds too) is a CSV line under Horovod's header, and the one kept the last
 * line.
 *
 * Pure bookkeeping: the engine reports steps and applies hvd__tune_params when told they
 * changed (rank 0 decides; core/ makes every rank switch at the same cycle). Not thread
 * safe: one owner. */
#ifndef HVD_CONTROLLER_AUTOTUNE_H
#define HVD_CONTROLLER_AUTOTUNE_H

#include <hvd/types.h>

#include <stddef.h>
#include <stdint.h>

/* Samples per configuration (their median is its score). */
#define HVD_TUNE_SAMPLES 5

typedef struct {
    size_t fusion_threshold; /* bytes */
    double cycle_time_ms;
    int cache_enabled;
    int hierarchical_allreduce, hierarchical_allgather;
} hvd_tune_params_t;

typedef struct {
    int warmup_samples;   /* HOROVOD_AUTOTUNE_WARMUP_SAMPLES, 3 */
    int steps_per_sample; /* HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE, 10 */
    int max_samples;      /* HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES, 20 */
    double noise;         /* HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE, 0.8 */
    /* knobs the user set: not tuned */
    int pin_fusion, pin_cycle, pin_cache, pin_hier_allreduce, pin_hier_allgather;
    int multi_host;       /* the hierarchical knobs are tuned only then */
    const char *log_path; /* HOROVOD_AUTOTUNE_LOG, or NULL */
} hvd_tune_config_t;

typedef struct hvd_tune hvd_tune_t;

/* initial: the configuration the job starts with (the pinned knobs keep its values). */
hvd_status_t hvd__tune_create(const hvd_tune_config_t *cfg, const hvd_tune_params_t *initial,
                              hvd_tune_t **t_p);
void hvd__tune_destroy(hvd_tune_t *t);

/* One step ended at now_us, having allreduced bytes since the previous one. Returns 1 when
 * the configuration changed (hvd__tune_params), else 0. */
int hvd__tune_step(hvd_tune_t *t, uint64_t bytes, int64_t now_us);

const hvd_tune_params_t *hvd__tune_params(const hvd_tune_t *t);

/* 1 once tuning has ended (the best configuration is in force). */
int hvd__tune_done(const hvd_tune_t *t);

#endif
