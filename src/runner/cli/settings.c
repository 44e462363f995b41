/* horovodrun's flags and config file into hvd_settings_t (settings.h). Flags and config keys both
 * set destinations (one per setting, shared by aliases and --x/--no-x pairs), where the config-file
 * precedence rule is applied; the values are then validated against the HOROVOD_* bounds and turned
 * into exports. */
#include "runner/cli/settings.h"

#include "common/error.h"
#include "common/log.h"
#include "runner/cli/config_file.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Destinations: what a flag or a config key sets. Aliases and --x/--no-x pairs share one
 * destination, which is also the unit of the config-file precedence rule. */
typedef enum {
    D_NP,
    D_VERSION,
    D_CHECK_BUILD,
    D_DISABLE_CACHE,
    D_START_TIMEOUT,
    D_NICS,
    D_OUTPUT,
    D_VERBOSE,
    D_CONFIG,
    D_SSH_PORT,
    D_SSH_ID,
    D_FUSION,
    D_CYCLE,
    D_CACHE,
    D_HIER_AR,
    D_HIER_AG,
    D_TORUS,
    D_AUTOTUNE,
    D_AT_LOG,
    D_AT_WARMUP,
    D_AT_STEPS,
    D_AT_BAYES,
    D_AT_NOISE,
    D_MIN_NP,
    D_MAX_NP,
    D_SLOTS,
    D_ELASTIC_TIMEOUT,
    D_RESET_LIMIT,
    D_COOLDOWN,
    D_TIMELINE,
    D_MARK_CYCLES,
    D_STALL_CHECK,
    D_STALL_WARN,
    D_STALL_SHUT,
    D_MPI_THREADS_DISABLE,
    D_MPI_ARGS,
    D_TCP,
    D_BINDING_ARGS,
    D_NCCL_STREAMS,
    D_THREAD_AFFINITY,
    D_GLOO_TIMEOUT,
    D_LOG_LEVEL,
    D_LOG_WITH_TS,
    D_PREFIX_TS,
    D_HOSTS,
    D_HOSTFILE,
    D_DISCOVERY,
    D_CONTROLLER,
    D_DRY_RUN,
    D_CHECK_NETWORK,
    D_RSH_AGENT,
    D_HELP,
    D_HELP_ENV,
    D_COUNT
} dest_t;

/* How a value is read. */
typedef enum {
    K_TRUE,  /* flag: sets 1 */
    K_FALSE, /* flag: sets 0 */
    K_CTRL,  /* flag: sets the controller in option_t.ival */
    K_INT,   /* one integer */
    K_FLOAT, /* one number */
    K_STR,   /* one string */
    K_NICS,  /* one comma list of interface names, added to the set */
    K_INT2   /* two integers (--blacklist-cooldown-range MIN MAX) */
} kind_t;

typedef struct {
    const char *names[3]; /* spellings, NULL-terminated */
    dest_t dest;
    kind_t kind;
    int ival;                /* K_CTRL: the controller */
    const char *replacement; /* deprecated spelling: what to write instead */
} option_t;

/* clang-format off */
static const option_t options[] = {
    {{"-np", "--num-proc"}, D_NP, K_INT, 0, NULL},
    {{"-v", "--version"}, D_VERSION, K_TRUE, 0, NULL},
    {{"-cb", "--check-build"}, D_CHECK_BUILD, K_TRUE, 0, NULL},
    {{"--disable-cache"}, D_DISABLE_CACHE, K_TRUE, 0, NULL},
    {{"--start-timeout"}, D_START_TIMEOUT, K_INT, 0, NULL},
    {{"--network-interfaces"}, D_NICS, K_NICS, 0, NULL},
    {{"--network-interface"}, D_NICS, K_NICS, 1, NULL}, /* ival 1: one name per use */
    {{"--output-filename"}, D_OUTPUT, K_STR, 0, NULL},
    {{"--verbose"}, D_VERBOSE, K_TRUE, 0, NULL},
    {{"--config-file"}, D_CONFIG, K_STR, 0, NULL},
    {{"-p", "--ssh-port"}, D_SSH_PORT, K_INT, 0, NULL},
    {{"-i", "--ssh-identity-file"}, D_SSH_ID, K_STR, 0, NULL},
    {{"--fusion-threshold-mb"}, D_FUSION, K_INT, 0, NULL},
    {{"--cycle-time-ms"}, D_CYCLE, K_FLOAT, 0, NULL},
    {{"--cache-capacity"}, D_CACHE, K_INT, 0, NULL},
    {{"--hierarchical-allreduce"}, D_HIER_AR, K_TRUE, 0, NULL},
    {{"--no-hierarchical-allreduce"}, D_HIER_AR, K_FALSE, 0, NULL},
    {{"--hierarchical-allgather"}, D_HIER_AG, K_TRUE, 0, NULL},
    {{"--no-hierarchical-allgather"}, D_HIER_AG, K_FALSE, 0, NULL},
    {{"--torus-allreduce"}, D_TORUS, K_TRUE, 0, NULL},
    {{"--no-torus-allreduce"}, D_TORUS, K_FALSE, 0, NULL},
    {{"--autotune"}, D_AUTOTUNE, K_TRUE, 0, NULL},
    {{"--no-autotune"}, D_AUTOTUNE, K_FALSE, 0, NULL},
    {{"--autotune-log-file"}, D_AT_LOG, K_STR, 0, NULL},
    {{"--autotune-warmup-samples"}, D_AT_WARMUP, K_INT, 0, NULL},
    {{"--autotune-steps-per-sample"}, D_AT_STEPS, K_INT, 0, NULL},
    {{"--autotune-bayes-opt-max-samples"}, D_AT_BAYES, K_INT, 0, NULL},
    {{"--autotune-gaussian-process-noise"}, D_AT_NOISE, K_FLOAT, 0, NULL},
    {{"--min-np", "--min-num-proc"}, D_MIN_NP, K_INT, 0, NULL},
    {{"--max-np", "--max-num-proc"}, D_MAX_NP, K_INT, 0, NULL},
    {{"--slots-per-host"}, D_SLOTS, K_INT, 0, NULL},
    {{"--elastic-timeout"}, D_ELASTIC_TIMEOUT, K_INT, 0, NULL},
    {{"--reset-limit"}, D_RESET_LIMIT, K_INT, 0, NULL},
    {{"--blacklist-cooldown-range"}, D_COOLDOWN, K_INT2, 0, NULL},
    {{"--timeline-filename"}, D_TIMELINE, K_STR, 0, NULL},
    {{"--timeline-mark-cycles"}, D_MARK_CYCLES, K_TRUE, 0, NULL},
    {{"--no-timeline-mark-cycles"}, D_MARK_CYCLES, K_FALSE, 0, NULL},
    {{"--stall-check"}, D_STALL_CHECK, K_TRUE, 0, NULL},
    {{"--no-stall-check"}, D_STALL_CHECK, K_FALSE, 0, NULL},
    {{"--stall-check-warning-time-seconds"}, D_STALL_WARN, K_INT, 0, NULL},
    {{"--stall-check-shutdown-time-seconds"}, D_STALL_SHUT, K_INT, 0, NULL},
    {{"--mpi-threads-disable"}, D_MPI_THREADS_DISABLE, K_TRUE, 0, NULL},
    {{"--no-mpi-threads-disable"}, D_MPI_THREADS_DISABLE, K_FALSE, 0, NULL},
    {{"--mpi-args"}, D_MPI_ARGS, K_STR, 0, NULL},
    {{"--tcp"}, D_TCP, K_TRUE, 0, NULL},
    {{"--binding-args"}, D_BINDING_ARGS, K_STR, 0, NULL},
    {{"--num-nccl-streams"}, D_NCCL_STREAMS, K_INT, 0, NULL},
    {{"--thread-affinity"}, D_THREAD_AFFINITY, K_STR, 0, NULL},
    {{"--gloo-timeout-seconds"}, D_GLOO_TIMEOUT, K_INT, 0, NULL},
    {{"--log-level"}, D_LOG_LEVEL, K_STR, 0, NULL},
    {{"--log-with-timestamp"}, D_LOG_WITH_TS, K_TRUE, 0, NULL},
    {{"--log-without-timestamp"}, D_LOG_WITH_TS, K_FALSE, 0, NULL},
    {{"--no-log-hide-timestamp"}, D_LOG_WITH_TS, K_TRUE, 0, "--log-with-timestamp"},
    {{"--log-hide-timestamp"}, D_LOG_WITH_TS, K_FALSE, 0, "--log-without-timestamp"},
    {{"-prefix-timestamp", "--prefix-output-with-timestamp"}, D_PREFIX_TS, K_TRUE, 0, NULL},
    {{"-H", "--hosts"}, D_HOSTS, K_STR, 0, NULL},
    {{"-hostfile", "--hostfile"}, D_HOSTFILE, K_STR, 0, NULL},
    {{"--host-discovery-script"}, D_DISCOVERY, K_STR, 0, NULL},
    {{"--gloo"}, D_CONTROLLER, K_CTRL, HVD_CONTROLLER_GLOO, NULL},
    {{"--mpi"}, D_CONTROLLER, K_CTRL, HVD_CONTROLLER_MPI, NULL},
    {{"--jsrun"}, D_CONTROLLER, K_CTRL, HVD_CONTROLLER_JSRUN, NULL},
    {{"--dry-run"}, D_DRY_RUN, K_TRUE, 0, NULL},
    {{"--check-network"}, D_CHECK_NETWORK, K_TRUE, 0, NULL},
    {{"--internal-rsh-agent"}, D_RSH_AGENT, K_STR, 0, NULL},
    {{"-h", "--help"}, D_HELP, K_TRUE, 0, NULL},
    {{"--help-env"}, D_HELP_ENV, K_TRUE, 0, NULL},
};

/* The config file's keys (Horovod's; docs/reference.md, "`horovodrun`"). `controller` is handled
 * on its own. */
static const struct { const char *key; dest_t dest; kind_t kind; } config_keys[] = {
    {"params.fusion_threshold_mb", D_FUSION, K_INT},
    {"params.cycle_time_ms", D_CYCLE, K_FLOAT},
    {"params.cache_capacity", D_CACHE, K_INT},
    {"params.hierarchical_allreduce", D_HIER_AR, K_TRUE},
    {"params.hierarchical_allgather", D_HIER_AG, K_TRUE},
    {"params.torus_allreduce", D_TORUS, K_TRUE},
    {"autotune.enabled", D_AUTOTUNE, K_TRUE},
    {"autotune.log_file", D_AT_LOG, K_STR},
    {"autotune.warmup_samples", D_AT_WARMUP, K_INT},
    {"autotune.steps_per_sample", D_AT_STEPS, K_INT},
    {"autotune.bayes_opt_max_samples", D_AT_BAYES, K_INT},
    {"autotune.gaussian_process_noise", D_AT_NOISE, K_FLOAT},
    {"timeline.filename", D_TIMELINE, K_STR},
    {"timeline.mark_cycles", D_MARK_CYCLES, K_TRUE},
    {"stall_check.enabled", D_STALL_CHECK, K_TRUE},
    {"stall_check.warning_time_seconds", D_STALL_WARN, K_INT},
    {"stall_check.shutdown_time_seconds", D_STALL_SHUT, K_INT},
    {"library_options.mpi_threads_disable", D_MPI_THREADS_DISABLE, K_TRUE},
    {"library_options.num_nccl_streams", D_NCCL_STREAMS, K_INT},
    {"library_options.thread_affinity", D_THREAD_AFFINITY, K_STR},
    {"library_options.gloo_timeout_seconds", D_GLOO_TIMEOUT, K_INT},
    {"logging.level", D_LOG_LEVEL, K_STR},
    {"logging.with_timestamp", D_LOG_WITH_TS, K_TRUE},
    {"controller", D_CONTROLLER, K_CTRL},
};

static const char *const config_sections[] = {
    "params", "autotune", "timeline", "stall_check", "library_options", "logging"};

/* Numeric values the workers read: each is checked against the bounds of its HOROVOD_*
 * variable in the parameter table (scale: flag units per variable unit). */
static const struct { dest_t dest; const char *env; long long scale; } numeric_exports[] = {
    {D_FUSION, "HOROVOD_FUSION_THRESHOLD", 1048576},
    {D_CYCLE, "HOROVOD_CYCLE_TIME", 1},
    {D_CACHE, "HOROVOD_CACHE_CAPACITY", 1},
    {D_AT_WARMUP, "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", 1},
    {D_AT_STEPS, "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", 1},
    {D_AT_BAYES, "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", 1},
    {D_AT_NOISE, "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", 1},
    {D_STALL_WARN, "HOROVOD_STALL_CHECK_TIME_SECONDS", 1},
    {D_STALL_SHUT, "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", 1},
    {D_NCCL_STREAMS, "HOROVOD_NUM_NCCL_STREAMS", 1},
    {D_GLOO_TIMEOUT, "HOROVOD_GLOO_TIMEOUT_SECONDS", 1},
    {D_START_TIMEOUT, "HOROVOD_START_TIMEOUT", 1},
    {D_ELASTIC_TIMEOUT, "HOROVOD_ELASTIC_TIMEOUT", 1},
};

/* Launcher-only integers and their bounds. */
#define NP_MAX 1000000
static const struct { dest_t dest; long long min, max; } int_bounds[] = {
    {D_NP, 1, NP_MAX},   {D_MIN_NP, 1, NP_MAX},     {D_MAX_NP, 1, NP_MAX},
    {D_SLOTS, 1, NP_MAX}, {D_RESET_LIMIT, 0, INT_MAX}, {D_SSH_PORT, 1, 65535},
};
/* clang-format on */

#define N_OPTIONS (sizeof options / sizeof options[0])
#define N_CONFIG_KEYS (sizeof config_keys / sizeof config_keys[0])
#define MAX_NICS 64
#define WHERE_MAX 512

/* Parse state: one value per destination, and where it came from. */
typedef struct {
    int given[D_COUNT]; /* set by a flag on the command line */
    int set[D_COUNT];   /* has a value, from the command line or the config file */
    long long ival[D_COUNT];
    long long ival2[D_COUNT];
    double fval[D_COUNT];
    const char *sval[D_COUNT];
    char *owned[D_COUNT];           /* strings copied from the config file */
    const char *flag[D_COUNT];      /* who set it, for messages: a flag spelling or where[d] */
    char where[D_COUNT][WHERE_MAX]; /* "file:line: key" for values from the config file */
    char *nics[MAX_NICS];
    size_t nic_count;
} state_t;

/* ---- small parsers ---- */

static int parse_ll(const char *s, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end)
        return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

/* YAML 1.1 booleans as PyYAML reads them, plus 1/0 (ints, which the reference's truth tests
 * accept too). */
static int parse_yaml_bool(const char *s, int *out) {
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        if (strcasecmp(s, yes[i]) == 0)
            return *out = 1, 0;
        if (strcasecmp(s, no[i]) == 0)
            return *out = 0, 0;
    }
    return -1;
}

void hvd__settings_format_float(double value, char *out, size_t out_size) {
    /* Python's repr: positional for magnitudes in [1e-4, 1e16) with the fewest decimals (at
     * least one) that read back exactly; the shortest exponent form otherwise. */
    double mag = fabs(value);
    if (value == 0 || (mag >= 1e-4 && mag < 1e16)) {
        for (int dec = 1; dec <= 24; dec++) {
            snprintf(out, out_size, "%.*f", dec, value);
            if (strtod(out, NULL) == value)
                return;
        }
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, out_size, "%.*g", prec, value);
        if (strtod(out, NULL) == value)
            return;
    }
}

/* ---- command line ---- */

static int takes_values(kind_t k) {
    return k == K_INT2 ? 2 : k >= K_INT ? 1 : 0;
}

/* argparse's negative-number test (^-\d+$|^-\d*\.\d+$): such tokens are values, not options. */
static int is_negative_number(const char *s) {
    if (s[0] != '-')
        return 0;
    const char *p = s + 1;
    size_t ints = strspn(p, "0123456789");
    if (!p[ints])
        return ints > 0;
    if (p[ints] != '.')
        return 0;
    size_t frac = strspn(p + ints + 1, "0123456789");
    return frac > 0 && !p[ints + 1 + frac];
}

static int looks_like_option(const char *s) {
    return s[0] == '-' && s[1] && !is_negative_number(s);
}

/* Can s be the value of an option? argparse also takes tokens with a space ("-bind-to none")
 * as values, which --binding-args and --mpi-args rely on. */
static int can_be_value(const char *s) {
    return !looks_like_option(s) || strchr(s, ' ') != NULL;
}

typedef struct {
    const option_t *opt;
    const char *spelling;       /* the full spelling matched (static) */
    const char *explicit_value; /* from --opt=value or -pVALUE, or NULL */
} match_t;

static size_t add_candidate(match_t *c, size_t n, const option_t *opt, const char *spelling,
                            const char *value) {
    for (size_t i = 0; i < n; i++)
        if (c[i].opt == opt)
            return n; /* two aliases of one option are one candidate */
    c[n].opt = opt;
    c[n].spelling = spelling;
    c[n].explicit_value = value;
    return n + 1;
}

/* Find the option that tok names, as argparse does: an exact spelling (before any '='); else
 * for --long, every option with a spelling that starts with it; for a single dash, a
 * one-letter option with its value attached (-p2222) and every single-dash long option that
 * starts with it (-host -> -hostfile). One candidate wins; several are ambiguous. */
static hvd_status_t find_option(const char *tok, match_t *m) {
    const char *eq = strchr(tok, '=');
    size_t len = eq ? (size_t)(eq - tok) : strlen(tok);
    const char *value = eq ? eq + 1 : NULL;
    for (size_t i = 0; i < N_OPTIONS; i++)
        for (const char *const *n = options[i].names; *n; n++)
            if (strlen(*n) == len && strncmp(*n, tok, len) == 0) {
                *m = (match_t){&options[i], *n, value};
                return HVD_OK;
            }
    match_t cand[N_OPTIONS];
    size_t nc = 0;
    int long_form = tok[1] == '-';
    for (size_t i = 0; i < N_OPTIONS; i++) {
        for (const char *const *n = options[i].names; *n; n++) {
            int name_long = (*n)[1] == '-';
            if (!long_form && !name_long && strlen(*n) == 2 && (*n)[1] == tok[1] &&
                takes_values(options[i].kind) == 1)
                nc = add_candidate(cand, nc, &options[i], *n, tok + 2);
            else if (long_form == name_long && (long_form || strlen(*n) > 2) &&
                     len > (long_form ? 2u : 1u) && strlen(*n) > len && strncmp(*n, tok, len) == 0)
                nc = add_candidate(cand, nc, &options[i], *n, value);
        }
    }
    if (nc == 1) {
        *m = cand[0];
        return HVD_OK;
    }
    if (nc == 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "unrecognized option %.*s (see horovodrun --help)", (int)len, tok);
    char list[1024];
    size_t used = 0;
    list[0] = '\0';
    for (size_t i = 0; i < nc && used < sizeof list - 64; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "",
                                 cand[i].spelling);
    return hvd__error_set(HVD_ERR_INVALID_ARG, "ambiguous option: %.*s could match %s", (int)len,
                          tok, list);
}

/* Store one value for destination d; who names the flag or config key in messages. */
static hvd_status_t store_value(state_t *s, dest_t d, kind_t kind, const char *who, const char *v1,
                                const char *v2) {
    switch (kind) {
    case K_INT:
        if (parse_ll(v1, &s->ival[d]) != 0)
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: invalid int value: '%s'", who, v1);
        /* only the fusion threshold (MB, scaled later) may exceed an int */
        if (d != D_FUSION && (s->ival[d] < INT_MIN || s->ival[d] > INT_MAX))
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: %s is out of range", who, v1);
        break;
    case K_INT2:
        if (parse_ll(v1, &s->ival[d]) != 0 || parse_ll(v2, &s->ival2[d]) != 0)
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: invalid int values: '%s' '%s'", who, v1,
                                  v2);
        break;
    case K_FLOAT:
        if (parse_double(v1, &s->fval[d]) != 0)
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: invalid float value: '%s'", who, v1);
        break;
    case K_STR:
        s->sval[d] = v1;
        break;
    case K_TRUE:
        s->ival[d] = 1;
        break;
    case K_FALSE:
        s->ival[d] = 0;
        break;
    case K_CTRL:
    case K_NICS:
        break;
    }
    s->flag[d] = who;
    s->set[d] = 1;
    return HVD_OK;
}

static hvd_status_t add_nics(state_t *s, const char *list, const char *flag) {
    const char *p = list;
    for (;;) {
        size_t n = strcspn(p, ",");
        const char *name = p;
        while (n && (*name == ' ' || *name == '\t'))
            name++, n--;
        while (n && (name[n - 1] == ' ' || name[n - 1] == '\t'))
            n--;
        if (n == 0)
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: empty interface name in '%s'", flag,
                                  list);
        int dup = 0;
        for (size_t i = 0; i < s->nic_count; i++)
            dup |= strlen(s->nics[i]) == n && strncmp(s->nics[i], name, n) == 0;
        if (!dup) {
            if (s->nic_count == MAX_NICS)
                return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: more than %d interfaces", flag,
                                      MAX_NICS);
            if (!(s->nics[s->nic_count] = strndup(name, n)))
                return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
            s->nic_count++;
        }
        p += strcspn(p, ",");
        if (!*p)
            return HVD_OK;
        p++;
    }
}

/* --x after --no-x, --gloo after --mpi, and -H after --hostfile are errors, as in argparse's
 * mutually exclusive groups; repeating the same choice is not. */
static hvd_status_t check_exclusive(const state_t *s, const match_t *m) {
    const option_t *o = m->opt;
    dest_t d = o->dest;
    /* hosts come from one place */
    static const dest_t sources[] = {D_HOSTS, D_HOSTFILE, D_DISCOVERY};
    for (size_t i = 0; i < 3; i++)
        if ((d == D_HOSTS || d == D_HOSTFILE || d == D_DISCOVERY) && sources[i] != d &&
            s->given[sources[i]])
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "%s: not allowed with %s (-H/--hosts, --hostfile and "
                                  "--host-discovery-script are mutually exclusive)",
                                  m->spelling, s->flag[sources[i]]);
    if (!s->given[d])
        return HVD_OK;
    int conflict = 0;
    if (o->kind == K_CTRL)
        conflict = s->ival[d] != o->ival;
    else if (o->kind == K_TRUE || o->kind == K_FALSE)
        conflict = s->ival[d] != (o->kind == K_TRUE);
    if (conflict)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: not allowed with %s", m->spelling,
                              s->flag[d]);
    return HVD_OK;
}

static hvd_status_t parse_one(int argc, char **argv, int *i, state_t *s) {
    match_t m = {0};
    hvd_status_t st = find_option(argv[*i], &m);
    if (st != HVD_OK)
        return st;
    const option_t *o = m.opt;
    int nvals = takes_values(o->kind);
    const char *v1 = NULL, *v2 = NULL;
    if (nvals == 0 && m.explicit_value)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s takes no value (got '%s')", m.spelling,
                              argv[*i]);
    if (nvals == 2 && m.explicit_value)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s takes two values: %s MIN MAX", m.spelling,
                              m.spelling);
    if (nvals == 1 && m.explicit_value) {
        v1 = m.explicit_value;
    } else if (nvals >= 1) {
        if (*i + nvals >= argc || !can_be_value(argv[*i + 1]) ||
            (nvals == 2 && !can_be_value(argv[*i + 2])))
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: expected %s", m.spelling,
                                  nvals == 2 ? "2 arguments" : "one argument");
        v1 = argv[++*i];
        if (nvals == 2)
            v2 = argv[++*i];
    }
    if (o->replacement)
        HVD_LOG_W("%s is deprecated; use %s", m.spelling, o->replacement);
    st = check_exclusive(s, &m);
    if (st != HVD_OK)
        return st;
    if (o->kind == K_NICS) {
        if (o->ival && strchr(v1, ','))
            HVD_LOG_W("%s with a comma list is deprecated; use --network-interfaces %s or "
                      "repeat %s",
                      m.spelling, v1, m.spelling);
        st = add_nics(s, v1, m.spelling);
        if (st != HVD_OK)
            return st;
    }
    st = store_value(s, o->dest, o->kind, m.spelling, v1, v2);
    if (st != HVD_OK)
        return st;
    if (o->kind == K_CTRL)
        s->ival[o->dest] = o->ival;
    s->given[o->dest] = 1;
    return HVD_OK;
}

/* The options end at "--" (dropped) or at the first argument that is not an option; the
 * rest is the user command, options included (argparse.REMAINDER). */
static hvd_status_t parse_argv(int argc, char **argv, state_t *s, char ***command_p) {
    int i = 1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            i++;
            break;
        }
        if (!looks_like_option(argv[i]))
            break;
        hvd_status_t st = parse_one(argc, argv, &i, s);
        if (st != HVD_OK)
            return st;
    }
    *command_p = i < argc ? &argv[i] : NULL;
    return HVD_OK;
}

/* ---- config file ---- */

static int is_section(const char *path) {
    for (size_t i = 0; i < sizeof config_sections / sizeof config_sections[0]; i++)
        if (strcmp(config_sections[i], path) == 0)
            return 1;
    return 0;
}

static hvd_status_t config_controller(state_t *s, const hvd_config_entry_t *e, const char *who) {
    if (strcasecmp(e->value, "gloo") == 0)
        s->ival[D_CONTROLLER] = HVD_CONTROLLER_GLOO;
    else if (strcasecmp(e->value, "mpi") == 0)
        s->ival[D_CONTROLLER] = HVD_CONTROLLER_MPI;
    else
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: '%s' is not a controller (gloo or mpi)",
                              who, e->value);
    s->set[D_CONTROLLER] = 1;
    s->flag[D_CONTROLLER] = who;
    return HVD_OK;
}

static hvd_status_t config_visit(const hvd_config_entry_t *e, void *arg) {
    state_t *s = arg;
    size_t k = 0;
    while (k < N_CONFIG_KEYS && strcmp(config_keys[k].key, e->path) != 0)
        k++;
    if (k == N_CONFIG_KEYS) {
        if (is_section(e->path) && e->kind == HVD_CONFIG_NULL)
            return HVD_OK; /* "params:" with nothing under it */
        if (is_section(e->path))
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "%s:%d: '%s' must be a section (indented 'key: value' lines)",
                                  e->file, e->line, e->path);
        HVD_LOG_W("%s:%d: unknown config key '%s' ignored", e->file, e->line, e->path);
        return HVD_OK;
    }
    dest_t d = config_keys[k].dest;
    kind_t kind = config_keys[k].kind;
    char *who = s->where[d];
    snprintf(who, WHERE_MAX, "%s:%d: %s", e->file, e->line, e->path);
    if (e->kind == HVD_CONFIG_MAPPING || e->kind == HVD_CONFIG_SEQUENCE)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: must be a single value, not a %s", who,
                              e->kind == HVD_CONFIG_MAPPING ? "section" : "list");
    if (s->given[d])
        return HVD_OK; /* a flag anywhere on the command line wins (Horovod's precedence) */
    if (e->kind == HVD_CONFIG_NULL) {
        /* PyYAML reads an empty value as None, which the reference stores: "not set" */
        s->set[d] = 0;
        return HVD_OK;
    }
    if (kind == K_CTRL)
        return config_controller(s, e, who);
    if (kind == K_TRUE) {
        int b;
        if (parse_yaml_bool(e->value, &b) != 0)
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: '%s' is not true or false", who,
                                  e->value);
        s->ival[d] = b;
        s->set[d] = 1;
        s->flag[d] = who;
        return HVD_OK;
    }
    const char *value = e->value;
    if (kind == K_STR) {
        free(s->owned[d]);
        if (!(s->owned[d] = strdup(value)))
            return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
        value = s->owned[d];
    }
    return store_value(s, d, kind, who, value, NULL);
}

/* ---- validation ---- */

static const hvd_param_def_t *param_def(const char *name) {
    size_t n;
    const hvd_param_def_t *t = hvd__params_table(&n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(t[i].name, name) == 0)
            return &t[i];
    return NULL;
}

static hvd_status_t out_of_range(const char *who, double min, double max, double v,
                                 const char *got) {
    if (v < min && max >= 1e9)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: must be >= %.15g (got %s)", who, min, got);
    return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: must be in [%.15g, %.15g] (got %s)", who, min,
                          max, got);
}

static hvd_status_t check_numeric_exports(const state_t *s) {
    for (size_t i = 0; i < sizeof numeric_exports / sizeof numeric_exports[0]; i++) {
        dest_t d = numeric_exports[i].dest;
        const hvd_param_def_t *def = param_def(numeric_exports[i].env);
        if (!s->set[d] || !def)
            continue;
        double scale = (double)numeric_exports[i].scale;
        double min = ceil(def->min / scale), max = floor(def->max / scale);
        char got[64];
        if (def->kind == HVD_PARAM_FLOAT) {
            hvd__settings_format_float(s->fval[d], got, sizeof got);
            if (s->fval[d] < min || s->fval[d] > max)
                return out_of_range(s->flag[d], min, max, s->fval[d], got);
        } else {
            snprintf(got, sizeof got, "%lld", s->ival[d]);
            if ((double)s->ival[d] < min || (double)s->ival[d] > max)
                return out_of_range(s->flag[d], min, max, (double)s->ival[d], got);
        }
    }
    for (size_t i = 0; i < sizeof int_bounds / sizeof int_bounds[0]; i++) {
        dest_t d = int_bounds[i].dest;
        if (s->set[d] && (s->ival[d] < int_bounds[i].min || s->ival[d] > int_bounds[i].max)) {
            char got[32];
            snprintf(got, sizeof got, "%lld", s->ival[d]);
            return out_of_range(s->flag[d], (double)int_bounds[i].min, (double)int_bounds[i].max,
                                (double)s->ival[d], got);
        }
    }
    return HVD_OK;
}

/* "0,1,2,3": one core id per local rank (the reference's int type was a quirk). */
static int is_core_list(const char *p) {
    if (!*p)
        return 0;
    for (;;) {
        size_t n = strspn(p, "0123456789");
        if (n == 0 || n > 9)
            return 0;
        p += n;
        if (!*p)
            return 1;
        if (*p++ != ',')
            return 0;
    }
}

static hvd_status_t validate(const state_t *s) {
    hvd_status_t st = check_numeric_exports(s);
    if (st != HVD_OK)
        return st;
    if (s->set[D_COOLDOWN] && (s->ival[D_COOLDOWN] < 1 || s->ival2[D_COOLDOWN] > 3600 ||
                               s->ival[D_COOLDOWN] > s->ival2[D_COOLDOWN]))
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "%s: need 1 <= MIN <= MAX <= 3600 seconds (got %lld %lld)",
                              s->flag[D_COOLDOWN], s->ival[D_COOLDOWN], s->ival2[D_COOLDOWN]);
    if (s->set[D_MIN_NP] && s->set[D_MAX_NP] && s->ival[D_MAX_NP] < s->ival[D_MIN_NP])
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s %lld is less than %s %lld",
                              s->flag[D_MAX_NP], s->ival[D_MAX_NP], s->flag[D_MIN_NP],
                              s->ival[D_MIN_NP]);
    if (s->set[D_NP] && s->set[D_MIN_NP] && s->ival[D_MIN_NP] > s->ival[D_NP])
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s %lld is more than %s %lld",
                              s->flag[D_MIN_NP], s->ival[D_MIN_NP], s->flag[D_NP], s->ival[D_NP]);
    if (s->set[D_NP] && s->set[D_MAX_NP] && s->ival[D_NP] > s->ival[D_MAX_NP])
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s %lld is more than %s %lld", s->flag[D_NP],
                              s->ival[D_NP], s->flag[D_MAX_NP], s->ival[D_MAX_NP]);
    if (s->set[D_THREAD_AFFINITY] && !is_core_list(s->sval[D_THREAD_AFFINITY]))
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "%s: '%s' is not a comma list of core ids, one per local rank (e.g. "
                              "0,1,2,3)",
                              s->flag[D_THREAD_AFFINITY], s->sval[D_THREAD_AFFINITY]);
    hvd_log_level_t lv;
    if (s->set[D_LOG_LEVEL] && hvd__log_level_parse(s->sval[D_LOG_LEVEL], &lv) != 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "%s: '%s' is not one of TRACE, DEBUG, INFO, WARNING, ERROR, FATAL",
                              s->flag[D_LOG_LEVEL], s->sval[D_LOG_LEVEL]);
    return HVD_OK;
}

/* ---- exports ---- */

static hvd_status_t export_int(hvd_env_list_t *e, const char *name, long long v) {
    return hvd__env_list_setf(e, name, "%lld", v);
}

static hvd_status_t export_float(hvd_env_list_t *e, const char *name, double v) {
    char buf[64];
    hvd__settings_format_float(v, buf, sizeof buf);
    return hvd__env_list_set(e, name, buf);
}

/* The variables horovodrun exports (Horovod's config_parser.set_env_from_args; docs/reference.md,
 * "`horovodrun`"), in its order; only for what was set. */
static hvd_status_t build_exports(const state_t *s, hvd_env_list_t *e) {
    hvd_status_t st = HVD_OK;
#define TRY(x)                                                                                     \
    do {                                                                                           \
        if ((st = (x)) != HVD_OK)                                                                  \
            return st;                                                                             \
    } while (0)
    if (s->set[D_FUSION])
        TRY(export_int(e, "HOROVOD_FUSION_THRESHOLD", s->ival[D_FUSION] * 1048576LL));
    if (s->set[D_CYCLE])
        TRY(export_float(e, "HOROVOD_CYCLE_TIME", s->fval[D_CYCLE]));
    if (s->set[D_CACHE])
        TRY(export_int(e, "HOROVOD_CACHE_CAPACITY", s->ival[D_CACHE]));
    if (s->set[D_HIER_AR])
        TRY(export_int(e, "HOROVOD_HIERARCHICAL_ALLREDUCE", s->ival[D_HIER_AR]));
    if (s->set[D_HIER_AG])
        TRY(export_int(e, "HOROVOD_HIERARCHICAL_ALLGATHER", s->ival[D_HIER_AG]));
    if (s->set[D_TORUS])
        TRY(export_int(e, "HOROVOD_TORUS_ALLREDUCE", s->ival[D_TORUS]));
    /* the autotune knobs mean nothing without the autotuner, so they go only with it */
    if (s->set[D_AUTOTUNE] && s->ival[D_AUTOTUNE]) {
        TRY(hvd__env_list_set(e, "HOROVOD_AUTOTUNE", "1"));
        if (s->set[D_AT_LOG])
            TRY(hvd__env_list_set(e, "HOROVOD_AUTOTUNE_LOG", s->sval[D_AT_LOG]));
        if (s->set[D_AT_WARMUP])
            TRY(export_int(e, "HOROVOD_AUTOTUNE_WARMUP_SAMPLES", s->ival[D_AT_WARMUP]));
        if (s->set[D_AT_STEPS])
            TRY(export_int(e, "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", s->ival[D_AT_STEPS]));
        if (s->set[D_AT_BAYES])
            TRY(export_int(e, "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", s->ival[D_AT_BAYES]));
        if (s->set[D_AT_NOISE])
            TRY(export_float(e, "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", s->fval[D_AT_NOISE]));
    }
    /* an empty file name means no timeline, as the reference's truth test has it */
    if (s->set[D_TIMELINE] && *s->sval[D_TIMELINE]) {
        TRY(hvd__env_list_set(e, "HOROVOD_TIMELINE", s->sval[D_TIMELINE]));
        if (s->set[D_MARK_CYCLES])
            TRY(export_int(e, "HOROVOD_TIMELINE_MARK_CYCLES", s->ival[D_MARK_CYCLES]));
    }
    if (s->set[D_STALL_CHECK])
        TRY(export_int(e, "HOROVOD_STALL_CHECK_DISABLE", !s->ival[D_STALL_CHECK]));
    if (s->set[D_STALL_WARN])
        TRY(export_int(e, "HOROVOD_STALL_CHECK_TIME_SECONDS", s->ival[D_STALL_WARN]));
    if (s->set[D_STALL_SHUT])
        TRY(export_int(e, "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", s->ival[D_STALL_SHUT]));
    if (s->set[D_MPI_THREADS_DISABLE])
        TRY(export_int(e, "HOROVOD_MPI_THREADS_DISABLE", s->ival[D_MPI_THREADS_DISABLE]));
    if (s->set[D_NCCL_STREAMS])
        TRY(export_int(e, "HOROVOD_NUM_NCCL_STREAMS", s->ival[D_NCCL_STREAMS]));
    if (s->set[D_THREAD_AFFINITY])
        TRY(hvd__env_list_set(e, "HOROVOD_THREAD_AFFINITY", s->sval[D_THREAD_AFFINITY]));
    if (s->set[D_GLOO_TIMEOUT])
        TRY(export_int(e, "HOROVOD_GLOO_TIMEOUT_SECONDS", s->ival[D_GLOO_TIMEOUT]));
    if (s->set[D_TCP] && s->ival[D_TCP])
        TRY(hvd__env_list_set(e, "NCCL_IB_DISABLE", "1"));
    if (s->set[D_LOG_LEVEL])
        TRY(hvd__env_list_set(e, "HOROVOD_LOG_LEVEL", s->sval[D_LOG_LEVEL]));
    if (s->set[D_LOG_WITH_TS])
        TRY(export_int(e, "HOROVOD_LOG_HIDE_TIME", !s->ival[D_LOG_WITH_TS]));
#undef TRY
    return HVD_OK;
}

/* ---- entry points ---- */

static void state_fini(state_t *s) {
    for (int d = 0; d < D_COUNT; d++)
        free(s->owned[d]);
    for (size_t i = 0; i < s->nic_count; i++)
        free(s->nics[i]);
}

/* The checks of a run (not of the print-and-exit modes): config, bounds, required parts. */
static hvd_status_t check_run(state_t *s, const hvd_settings_t *r) {
    hvd_status_t st = HVD_OK;
    if (s->given[D_CONFIG]) {
        st = hvd__config_file_read(s->sval[D_CONFIG], config_visit, s);
        if (st != HVD_OK)
            return st;
    }
    st = validate(s);
    if (st != HVD_OK)
        return st;
    /* the network check needs hosts only (-np, when given, picks them as a launch would) */
    if (s->given[D_CHECK_NETWORK])
        return s->given[D_DISCOVERY] ? hvd__error_set(HVD_ERR_INVALID_ARG,
                                                      "--check-network checks the hosts of -H or "
                                                      "--hostfile, not a discovery script's")
                                     : HVD_OK;
    /* with a discovery script the hosts, not -np, say how many ranks there are */
    if (!s->set[D_NP] && !s->given[D_DISCOVERY])
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "the following argument is required: -np/--num-proc");
    if (!r->command)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "no command to run: give it after the options, e.g. horovodrun "
                              "-np %lld python train.py",
                              s->set[D_NP] ? s->ival[D_NP] : 2);
    return HVD_OK;
}

static void fill_settings(const state_t *s, const hvd_params_t *env, hvd_settings_t *r) {
    r->show_help = s->given[D_HELP];
    r->show_help_env = s->given[D_HELP_ENV];
    r->show_version = s->given[D_VERSION];
    r->show_check_build = s->given[D_CHECK_BUILD];
    r->dry_run = s->given[D_DRY_RUN];
    r->check_network = s->given[D_CHECK_NETWORK];
    r->num_proc = -1; /* print-and-exit modes, or elastic without -np and --min-np */
    if (s->set[D_NP])
        r->num_proc = (int)s->ival[D_NP];
    else if (s->given[D_DISCOVERY] && s->set[D_MIN_NP])
        r->num_proc = (int)s->ival[D_MIN_NP];
    r->hosts = s->sval[D_HOSTS];
    r->hostfile = s->sval[D_HOSTFILE];
    r->discovery_script = s->sval[D_DISCOVERY];
    r->rsh_agent = s->sval[D_RSH_AGENT];
    r->start_timeout = s->set[D_START_TIMEOUT] ? (int)s->ival[D_START_TIMEOUT] : env->start_timeout;
    r->output_dir = s->sval[D_OUTPUT];
    r->prefix_timestamp = s->given[D_PREFIX_TS];
    r->verbose = s->given[D_VERBOSE];
    r->disable_cache = s->given[D_DISABLE_CACHE];
    r->config_file = s->sval[D_CONFIG];
    r->ssh_port = s->set[D_SSH_PORT] ? (int)s->ival[D_SSH_PORT] : 0;
    r->ssh_identity_file = s->sval[D_SSH_ID];
    r->controller =
        s->set[D_CONTROLLER] ? (hvd_controller_t)s->ival[D_CONTROLLER] : HVD_CONTROLLER_DEFAULT;
    r->mpi_args = s->sval[D_MPI_ARGS];
    r->binding_args = s->sval[D_BINDING_ARGS];
    r->tcp = s->given[D_TCP];
    r->elastic = s->given[D_MIN_NP] || s->given[D_DISCOVERY];
    r->min_np = s->set[D_MIN_NP] ? (int)s->ival[D_MIN_NP] : r->num_proc > 0 ? r->num_proc : 1;
    r->max_np = s->set[D_MAX_NP] ? (int)s->ival[D_MAX_NP] : -1;
    r->slots_per_host = s->set[D_SLOTS] ? (int)s->ival[D_SLOTS] : 0;
    r->elastic_timeout =
        s->set[D_ELASTIC_TIMEOUT] ? (int)s->ival[D_ELASTIC_TIMEOUT] : env->elastic_timeout;
    r->gloo_timeout =
        s->set[D_GLOO_TIMEOUT] ? (int)s->ival[D_GLOO_TIMEOUT] : env->gloo_timeout_seconds;
    r->reset_limit = s->set[D_RESET_LIMIT] ? (int)s->ival[D_RESET_LIMIT] : -1;
    r->cooldown_min = s->set[D_COOLDOWN] ? (int)s->ival[D_COOLDOWN] : 0;
    r->cooldown_max = s->set[D_COOLDOWN] ? (int)s->ival2[D_COOLDOWN] : 0;
    r->log_level = env->log_level;
    if (s->set[D_LOG_LEVEL])
        hvd__log_level_parse(s->sval[D_LOG_LEVEL], &r->log_level);
    r->log_hide_time = s->set[D_LOG_WITH_TS] ? !s->ival[D_LOG_WITH_TS] : env->log_hide_time;
}

hvd_status_t hvd__settings_parse(int argc, char **argv, const hvd_params_t *launcher_env,
                                 hvd_settings_t *settings) {
    hvd_settings_t r;
    hvd_status_t st;
    memset(&r, 0, sizeof r);
    memset(settings, 0, sizeof *settings);
    hvd__env_list_init(&r.exports);
    /* the state is large (a message buffer per destination), so it lives on the heap */
    state_t *s = calloc(1, sizeof *s);
    if (!s)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory parsing the command line");
    st = parse_argv(argc, argv, s, &r.command);
    if (st != HVD_OK)
        goto err_free_state;
    int print_only =
        s->given[D_HELP] || s->given[D_HELP_ENV] || s->given[D_VERSION] || s->given[D_CHECK_BUILD];
    if (!print_only) {
        st = check_run(s, &r);
        if (st == HVD_OK)
            st = build_exports(s, &r.exports);
        if (st != HVD_OK)
            goto err_free_exports;
    }
    fill_settings(s, launcher_env, &r);
    if (s->nic_count) {
        r.nics = calloc(s->nic_count, sizeof *r.nics);
        if (!r.nics) {
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory parsing the command line");
            goto err_free_exports;
        }
        memcpy(r.nics, s->nics, s->nic_count * sizeof *r.nics);
        r.nic_count = s->nic_count;
        s->nic_count = 0; /* moved into the settings */
    }
    /* Public string fields point into argv only; config-file strings were copied into the
     * exports, so the state can go. */
    state_fini(s);
    free(s);
    *settings = r;
    return HVD_OK;
err_free_exports:
    hvd__env_list_fini(&r.exports);
err_free_state:
    state_fini(s);
    free(s);
    return st;
}

void hvd__settings_fini(hvd_settings_t *settings) {
    for (size_t i = 0; i < settings->nic_count; i++)
        free(settings->nics[i]);
    free(settings->nics);
    hvd__env_list_fini(&settings->exports);
    memset(settings, 0, sizeof *settings);
}
