/* The HOROVOD_* parameter table and its loader (params.h). Every value is checked against its
 * entry's kind and bounds; booleans read as Horovod's strtol(...) > 0 and also take
 * true/false/yes/no/on/off, and the secret's string is wiped before it is freed. */
#include "common/params.h"

#include "common/error.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define OFF(field) offsetof(hvd_params_t, field)
#define W HVD_PARAM_WORKER
#define L HVD_PARAM_LAUNCHER
#define IMAX 2147483647.0

/* clang-format off */
static const hvd_param_def_t table[] = {
    {"HOROVOD_RANK", HVD_PARAM_INT, "0", 0, IMAX, W, OFF(rank), "Global rank of this process (set by horovodrun)."},
    {"HOROVOD_SIZE", HVD_PARAM_INT, "1", 1, IMAX, W, OFF(size), "Number of processes in the job."},
    {"HOROVOD_LOCAL_RANK", HVD_PARAM_INT, "0", 0, IMAX, W, OFF(local_rank), "Rank among the processes on this host."},
    {"HOROVOD_LOCAL_SIZE", HVD_PARAM_INT, "1", 1, IMAX, W, OFF(local_size), "Number of processes on this host."},
    {"HOROVOD_CROSS_RANK", HVD_PARAM_INT, "0", 0, IMAX, W, OFF(cross_rank), "Index of this host among the hosts that have a process with this local rank."},
    {"HOROVOD_CROSS_SIZE", HVD_PARAM_INT, "1", 1, IMAX, W, OFF(cross_size), "Number of hosts that have a process with this local rank."},
    {"HOROVOD_HOSTNAME", HVD_PARAM_STR, "localhost", 0, 0, W, OFF(hostname), "Host name as written in -H / --hostfile; names the local scope."},
    {"HOROVOD_GLOO_RENDEZVOUS_ADDR", HVD_PARAM_STR, NULL, 0, 0, W, OFF(rendezvous_addr), "Address of the rendezvous store; unset means a job of size 1 without a launcher."},
    {"HOROVOD_GLOO_RENDEZVOUS_PORT", HVD_PARAM_INT, "-1", -1, 65535, W, OFF(rendezvous_port), "Port of the rendezvous store."},
    {"HOROVOD_GLOO_IFACE", HVD_PARAM_STR, "", 0, 0, W, OFF(gloo_iface), "Network interface for the data plane."},
    {"HOROVOD_GLOO_TIMEOUT_SECONDS", HVD_PARAM_INT, "30", 1, 86400, W, OFF(gloo_timeout_seconds), "Deadline in seconds for rendezvous waits and for every collective."},
    {"HVD_BUSY_POLL_US", HVD_PARAM_INT, "-1", -1, 10000000, W, OFF(busy_poll_us), "hvd: microseconds a collective busy-polls before sleeping in the kernel; -1 chooses 1000 (yielding the core on each idle turn after the first 50, or from the first when a host has more ranks than cores), or 0 when a machine has more than 64 ranks a core; 0 never busy-polls."},
    {"HVD_SHM", HVD_PARAM_BOOL, "1", 0, 0, W, OFF(shm), "hvd: ranks of one host exchange data through shared memory (memfd rings handed over an authenticated unix socket); 0 sends it over loopback TCP, as to other hosts."},
    {"HVD_CHECK_IN_ALL_MAX", HVD_PARAM_INT, "256", 0, IMAX, W, OFF(check_in_all_max), "hvd: static jobs of up to this many ranks read every rank's check-in record at hvd_init, so that after it they need nothing from horovodrun; bigger ones read the launcher's plan and count their machine's ranks, reach their host's ranks without asking, and learn other hosts' ranks' addresses from the store when they first connect to them (O(ranks) bytes in all instead of O(ranks^2): 1,024 ranks reading every record moved 157 MB through the launcher). 0: always the latter."},
    {"HVD_CMA", HVD_PARAM_BOOL, "0", 0, 0, W, OFF(cma), "hvd: 1 makes ranks of one host read large allgather blocks straight from each other's memory (process_vm_readv: one copy instead of two) where the system allows it (checked at init). Off by default: on the virtual machines measured, the kernel's page pinning made it slower than two copies through shared memory."},
    {"HVD_REPRODUCIBLE", HVD_PARAM_BOOL, "0", 0, 0, W, OFF(reproducible), "hvd: 1 makes every allreduce sum each element in rank order on every path, as the shared-memory arena of one host always does, so that its bits depend only on the inputs: the same whatever the hosts, launcher, transport, fusion or timing. Between hosts it exchanges each rank's share directly with every other rank instead of along the ring or hierarchically (the same bytes, more messages at once). Every rank must set the same value."},
    {"HVD_TCP_CONGESTION", HVD_PARAM_STR, "reno", 0, 0, W, OFF(tcp_congestion), "hvd: TCP congestion control of data connections; 'default' keeps the system's. reno because BBR's pacing halved large-message bandwidth on loopback."},
    {"HOROVOD_CONTROLLER", HVD_PARAM_STR, "gloo", 0, 0, W, OFF(controller), "Controller: gloo (built in) or mpi."},
    {"HOROVOD_CPU_OPERATIONS", HVD_PARAM_STR, "gloo", 0, 0, W, OFF(cpu_operations), "CPU collective implementation: gloo (built in) or mpi."},
    {"HOROVOD_ELASTIC", HVD_PARAM_BOOL, "0", 0, 0, W, OFF(elastic), "Set by horovodrun in elastic mode."},
    {"HOROVOD_ELASTIC_ROUND", HVD_PARAM_INT, "0", 0, IMAX, W, OFF(elastic_round), "Elastic mode: the round (world) a worker was started for; set by horovodrun."},
    {"HOROVOD_FUSION_THRESHOLD", HVD_PARAM_INT, "134217728", 0, 9.2e18, W, OFF(fusion_threshold), "Fusion buffer size in bytes; 0 disables fusion."},
    {"HOROVOD_CYCLE_TIME", HVD_PARAM_FLOAT, "1", 0, 1e9, W, OFF(cycle_time_ms), "Background cycle time in milliseconds."},
    {"HOROVOD_CACHE_CAPACITY", HVD_PARAM_INT, "1024", 0, IMAX, W, OFF(cache_capacity), "Response cache entries; 0 disables the cache."},
    {"HOROVOD_HIERARCHICAL_ALLREDUCE", HVD_PARAM_BOOL, "auto", -1, 0, W, OFF(hierarchical_allreduce), "Hierarchical allreduce (inside each host, then across hosts): 1 always, 0 never, auto (default, -1 here) where it is faster for the job's shape and the size."},
    {"HOROVOD_HIERARCHICAL_ALLGATHER", HVD_PARAM_BOOL, "auto", -1, 0, W, OFF(hierarchical_allgather), "Hierarchical allgather (inside each host, then across hosts): 1 always, 0 never, auto (default, -1 here) where it is faster for the job's shape and the size."},
    {"HOROVOD_TORUS_ALLREDUCE", HVD_PARAM_BOOL, "0", 0, 0, W, OFF(torus_allreduce), "Torus allreduce."},
    {"HOROVOD_AUTOTUNE", HVD_PARAM_BOOL, "0", 0, 0, W, OFF(autotune), "Tune fusion threshold and cycle time at run time."},
    {"HOROVOD_AUTOTUNE_LOG", HVD_PARAM_STR, NULL, 0, 0, W, OFF(autotune_log), "CSV file for autotune samples (rank 0)."},
    {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", HVD_PARAM_INT, "3", 0, IMAX, W, OFF(autotune_warmup_samples), "Autotune samples discarded at start."},
    {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", HVD_PARAM_INT, "10", 0, IMAX, W, OFF(autotune_steps_per_sample), "Steps per autotune sample."},
    {"HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", HVD_PARAM_INT, "20", 0, IMAX, W, OFF(autotune_bayes_opt_max_samples), "Maximum Bayesian optimisation samples."},
    {"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", HVD_PARAM_FLOAT, "0.8", 0, 1, W, OFF(autotune_gaussian_process_noise), "Gaussian process noise, in [0, 1]."},
    {"HOROVOD_TIMELINE", HVD_PARAM_STR, NULL, 0, 0, W, OFF(timeline), "Write a Chrome trace timeline to this file (DYNAMIC: none until one is started through the API)."},
    {"HOROVOD_TIMELINE_MARK_CYCLES", HVD_PARAM_BOOL, "0", 0, 0, W, OFF(timeline_mark_cycles), "Mark background cycles in the timeline."},
    {"HOROVOD_STALL_CHECK_DISABLE", HVD_PARAM_BOOL, "0", 0, 0, W, OFF(stall_check_disable), "Disable the stall inspector."},
    {"HOROVOD_STALL_CHECK_TIME_SECONDS", HVD_PARAM_INT, "60", 0, IMAX, W, OFF(stall_check_time_seconds), "Seconds before a stall warning."},
    {"HVD_STALL_STACKS", HVD_PARAM_BOOL, "0", 0, 0, W, OFF(stall_stacks), "hvd: 1 makes each stall warning ask the ranks it names as missing for their stacks: a Python program prints every thread's stack to its stderr (faulthandler, on SIGUSR2, which horovod's init registers then); a program with no handler for SIGUSR2 is never signalled."},
    {"HVD_STRAGGLER_STEPS", HVD_PARAM_INT, "0", 0, IMAX, W, OFF(straggler_steps), "hvd: every this many steps (a step: the first named collective comes round again), rank 0 logs each rank's average lateness in arriving at the collectives and the rank most often last (also in the timeline); 0 (default) never. hvd_report_stragglers (Python: hvd.report_stragglers) changes it while the job runs."},
    {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", HVD_PARAM_INT, "0", 0, IMAX, W, OFF(stall_shutdown_time_seconds), "Seconds of stall before shutting down; 0 never."},
    {"HOROVOD_LOG_LEVEL", HVD_PARAM_LOGLEVEL, "warning", 0, 0, W | L, OFF(log_level), "trace, debug, info, warning, error or fatal (any case); unknown values mean warning."},
    {"HOROVOD_LOG_HIDE_TIME", HVD_PARAM_BOOL, "0", 0, 0, W | L, OFF(log_hide_time), "Omit the timestamp from log lines."},
    {"HOROVOD_THREAD_AFFINITY", HVD_PARAM_STR, NULL, 0, 0, W, OFF(thread_affinity), "Comma list of core ids, one per local rank, for the background thread."},
    {"HOROVOD_NUM_NCCL_STREAMS", HVD_PARAM_INT, "1", 0, IMAX, W, OFF(num_nccl_streams), "NCCL streams (GPU builds only)."},
    {"HOROVOD_MPI_THREADS_DISABLE", HVD_PARAM_BOOL, "0", 0, 0, W, OFF(mpi_threads_disable), "Do not request MPI_THREAD_MULTIPLE."},
    {"HOROVOD_START_TIMEOUT", HVD_PARAM_INT, "30", 1, IMAX, L, OFF(start_timeout), "Launcher: deadline in seconds for start-up checks (default of --start-timeout)."},
    {"HOROVOD_ELASTIC_TIMEOUT", HVD_PARAM_INT, "600", 1, IMAX, W | L, OFF(elastic_timeout), "Elastic wait in seconds for enough slots (default of --elastic-timeout); a re-initialising worker waits this long plus HOROVOD_GLOO_TIMEOUT_SECONDS for its new place."},
    {HVD_SECRET_ENV, HVD_PARAM_STR, NULL, 0, 0, W, OFF(secret_key), "Job secret (hex) handed to workers by horovodrun; never printed."},
    {"HVD_SECRET_FILE", HVD_PARAM_STR, NULL, 0, 0, W, OFF(secret_file), "hvd: a file holding the job secret (64 hex digits), the same on every rank, for jobs formed through the program's store (hvd_init_store, the torch.distributed backend): the secret then never enters that store."},
};
/* clang-format on */

const hvd_param_def_t *hvd__params_table(size_t *count_p) {
    *count_p = sizeof table / sizeof table[0];
    return table;
}

static const char *env_lookup(const char *name, void *arg) {
    (void)arg;
    return getenv(name);
}

/* Booleans follow Horovod's strtol(...) > 0, and also accept true/false/yes/no/on/off. */
static int parse_bool(const char *s, int *out) {
    static const char *const yes[] = {"true", "yes", "on"};
    static const char *const no[] = {"false", "no", "off", ""};
    for (size_t i = 0; i < 3; i++)
        if (strcasecmp(s, yes[i]) == 0)
            return *out = 1, 0;
    for (size_t i = 0; i < 4; i++)
        if (strcasecmp(s, no[i]) == 0)
            return *out = 0, 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end != '\0')
        return -1;
    *out = v > 0;
    return 0;
}

static hvd_status_t set_one(hvd_params_t *p, const hvd_param_def_t *d, const char *value,
                            int from_env) {
    char *field = (char *)p + d->offset;
    const char *origin = from_env ? "" : " (default)";
    switch (d->kind) {
    case HVD_PARAM_INT: {
        char *end;
        errno = 0;
        long long v = strtoll(value, &end, 10);
        while (*end == ' ' || *end == '\t')
            end++;
        if (errno || end == value || *end != '\0')
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s='%s'%s is not an integer", d->name,
                                  value, origin);
        if ((double)v < d->min || (double)v > d->max)
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s=%lld is out of range [%.0f, %.0f]",
                                  d->name, v, d->min, d->max);
        if (d->offset == offsetof(hvd_params_t, fusion_threshold))
            *(long long *)field = v;
        else
            *(int *)field = (int)v;
        return HVD_OK;
    }
    case HVD_PARAM_FLOAT: {
        char *end;
        errno = 0;
        double v = strtod(value, &end);
        if (errno || end == value || *end != '\0' || !isfinite(v))
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s='%s' is not a number", d->name, value);
        if (v < d->min || v > d->max)
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s=%g is out of range [%g, %g]", d->name, v,
                                  d->min, d->max);
        *(double *)field = v;
        return HVD_OK;
    }
    case HVD_PARAM_BOOL:
        /* min -1 marks a switch that may also be left to hvd: "auto" reads as -1 */
        if (d->min < 0 && strcasecmp(value, "auto") == 0)
            return *(int *)field = -1, HVD_OK;
        if (parse_bool(value, (int *)field) != 0)
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s='%s' is not a boolean (use 0/1%s)",
                                  d->name, value,
                                  d->min < 0 ? ", true/false or auto" : " or true/false");
        return HVD_OK;
    case HVD_PARAM_LOGLEVEL:
        /* Horovod falls back to warning for unknown levels; so do we, without failing. */
        if (hvd__log_level_parse(value, (hvd_log_level_t *)field) != 0)
            *(hvd_log_level_t *)field = HVD_LOG_WARNING;
        return HVD_OK;
    case HVD_PARAM_STR: {
        char *copy = strdup(value);
        if (!copy)
            return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory reading %s", d->name);
        free(*(char **)field);
        *(char **)field = copy;
        return HVD_OK;
    }
    }
    return hvd__error_set(HVD_ERR_INVALID_ARG, "bad parameter kind for %s", d->name);
}

hvd_status_t hvd__params_load(hvd_params_t *params, hvd_params_lookup_fn lookup, void *arg) {
    hvd_params_t p;
    memset(&p, 0, sizeof p);
    if (!lookup)
        lookup = env_lookup;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        const hvd_param_def_t *d = &table[i];
        const char *value = lookup(d->name, arg);
        int from_env = value != NULL;
        if (!value)
            value = d->default_value;
        if (!value)
            continue;
        hvd_status_t st = set_one(&p, d, value, from_env);
        if (st != HVD_OK) {
            hvd__params_fini(&p);
            memset(params, 0, sizeof *params);
            return st;
        }
    }
    *params = p;
    return HVD_OK;
}

void hvd__params_fini(hvd_params_t *params) {
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (table[i].kind == HVD_PARAM_STR) {
            char **field = (char **)((char *)params + table[i].offset);
            if (*field && table[i].offset == offsetof(hvd_params_t, secret_key))
                explicit_bzero(*field, strlen(*field));
            free(*field);
            *field = NULL;
        }
    }
}
