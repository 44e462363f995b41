/* The one table of HOROVOD_* parameters. Every environment variable hvd honours is declared
 * here once, with its type, default, bounds and meaning; it is read in one pass at start-up
 * (hvd_init in workers, main() in horovodrun), and nothing else in the project calls getenv.
 * The README's environment reference and `horovodrun --help-env` are printed from this table. */
#ifndef HVD_COMMON_PARAMS_H
#define HVD_COMMON_PARAMS_H

#include <hvd/types.h>

#include <stddef.h>

#include "common/log.h"

typedef enum {
    HVD_PARAM_INT,
    HVD_PARAM_FLOAT,
    HVD_PARAM_BOOL,
    HVD_PARAM_STR,
    HVD_PARAM_LOGLEVEL
} hvd_param_kind_t;

/* Who reads a variable: the worker library, the launcher, or both. */
#define HVD_PARAM_WORKER 1u
#define HVD_PARAM_LAUNCHER 2u

typedef struct hvd_params {
    /* topology set by the launcher */
    int rank, size, local_rank, local_size, cross_rank, cross_size;
    char *hostname;
    /* rendezvous and network */
    char *rendezvous_addr;
    int rendezvous_port;
    char *gloo_iface;
    int gloo_timeout_seconds;
    int busy_poll_us; /* -1: automatic */
    char *tcp_congestion;
    int shm;              /* same-host peers through shared memory */
    int cma;              /* same-host blocks read with process_vm_readv where allowed */
    int reproducible;     /* allreduce sums in rank order on every path */
    int check_in_all_max; /* static jobs up to this size read every check-in record */
    char *controller;
    char *cpu_operations;
    int elastic;
    int elastic_round; /* the round a worker was started for (elastic mode) */
    /* core tuning */
    long long fusion_threshold;
    double cycle_time_ms;
    int cache_capacity;
    int hierarchical_allreduce, hierarchical_allgather; /* 1, 0, or -1: auto */
    int torus_allreduce;
    int autotune;
    char *autotune_log;
    int autotune_warmup_samples, autotune_steps_per_sample, autotune_bayes_opt_max_samples;
    double autotune_gaussian_process_noise;
    char *timeline;
    int timeline_mark_cycles;
    int stall_check_disable, stall_check_time_seconds, stall_shutdown_time_seconds;
    int stall_stacks;    /* HVD_STALL_STACKS */
    int straggler_steps; /* HVD_STRAGGLER_STEPS */
    hvd_log_level_t log_level;
    int log_hide_time;
    char *thread_affinity;
    int num_nccl_streams;
    int mpi_threads_disable;
    /* launcher */
    int start_timeout;
    int elastic_timeout;
    /* the job secret, hex; never logged */
    char *secret_key;
    char *secret_file; /* HVD_SECRET_FILE: where a store-formed job's secret is */
} hvd_params_t;

typedef struct {
    const char *name;
    hvd_param_kind_t kind;
    const char *default_value; /* NULL: unset */
    double min, max;           /* bounds for INT and FLOAT */
    unsigned readers;          /* HVD_PARAM_WORKER | HVD_PARAM_LAUNCHER */
    size_t offset;             /* field in hvd_params_t */
    const char *help;
} hvd_param_def_t;

/* Returns the value of variable name, or NULL when unset. */
typedef const char *(*hvd_params_lookup_fn)(const char *name, void *arg);

/* Fill *params from the environment (lookup NULL) or from lookup(name, arg). Unset variables
 * take their defaults. A malformed or out-of-range value is HVD_ERR_INVALID_ARG naming the
 * variable and the value. On error *params is left zeroed. Owns the strings it stores. */
hvd_status_t hvd__params_load(hvd_params_t *params, hvd_params_lookup_fn lookup, void *arg);

/* Free the strings of a loaded table (safe on a zeroed one). */
void hvd__params_fini(hvd_params_t *params);

/* The table itself, for documentation and for the launcher's pass-through rules. */
const hvd_param_def_t *hvd__params_table(size_t *count_p);

/* Name of the variable that carries the job secret from launcher to workers. */
#define HVD_SECRET_ENV "_HOROVOD_SECRET_KEY"

#endif
