#include "runner/settings.h"

#include "common/error.h"
#include "runner/config_file.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Destinations: what a flag (or a config key) sets. Aliases and --x/--no-x pairs share one
 * destination, which is also the unit of the config-file precedence rule. */
typedef enum {
    D_NP,
    D_VERSION,
    D_CHECK_BUILD,
    D_DISABLE_CACHE,
    D_START_TIMEOUT,
    D_NICS,
    D_NIC,
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
    D_HELP,
    D_HELP_ENV,
    D_COUNT
} dest_t;

/* How a flag's value is read. */
typedef enum {
    K_TRUE,  /* no value: sets 1 */
    K_FALSE, /* no value: sets 0 */
    K_INT,   /* one integer */
    K_FLOAT, /* one number */
    K_STR,   /* one string */
    K_INT2,  /* two integers (--blacklist-cooldown-range) */
    K_CTRL   /* no value: sets the controller given in ival */
} kind_t;

typedef struct {
    const char *names; /* space-separated aliases */
    dest_t dest;
    kind_t kind;
    int ival; /* K_CTRL: the controller */
} option_t;

/* clang-format off */
static const option_t options[] = {
    {"-np --num-proc", D_NP, K_INT, 0},
    {"-v --version", D_VERSION, K_TRUE, 0},
    {"-cb --check-build", D_CHECK_BUILD, K_TRUE, 0},
    {"--disable-cache", D_DISABLE_CACHE, K_TRUE, 0},
    {"--start-timeout", D_START_TIMEOUT, K_INT, 0},
    {"--network-interfaces", D_NICS, K_STR, 0},
    {"--network-interface", D_NIC, K_STR, 0},
    {"--output-filename", D_OUTPUT, K_STR, 0},
    {"--verbose", D_VERBOSE, K_TRUE, 0},
    {"--config-file", D_CONFIG, K_STR, 0},
    {"-p --ssh-port", D_SSH_PORT, K_INT, 0},
    {"-i --ssh-identity-file", D_SSH_ID, K_STR, 0},
    {"--fusion-threshold-mb", D_FUSION, K_INT, 0},
    {"--cycle-time-ms", D_CYCLE, K_FLOAT, 0},
    {"--cache-capacity", D_CACHE, K_INT, 0},
    {"--hierarchical-allreduce", D_HIER_AR, K_TRUE, 0},
    {"--no-hierarchical-allreduce", D_HIER_AR, K_FALSE, 0},
    {"--hierarchical-allgather", D_HIER_AG, K_TRUE, 0},
    {"--no-hierarchical-allgather", D_HIER_AG, K_FALSE, 0},
    {"--torus-allreduce", D_TORUS, K_TRUE, 0},
    {"--no-torus-allreduce", D_TORUS, K_FALSE, 0},
    {"--autotune", D_AUTOTUNE, K_TRUE, 0},
    {"--no-autotune", D_AUTOTUNE, K_FALSE, 0},
    {"--autotune-log-file", D_AT_LOG, K_STR, 0},
    {"--autotune-warmup-samples", D_AT_WARMUP, K_INT, 0},
    {"--autotune-steps-per-sample", D_AT_STEPS, K_INT, 0},
    {"--autotune-bayes-opt-max-samples", D_AT_BAYES, K_INT, 0},
    {"--autotune-gaussian-process-noise", D_AT_NOISE, K_FLOAT, 0},
    {"--min-np --min-num-proc", D_MIN_NP, K_INT, 0},
    {"--max-np --max-num-proc", D_MAX_NP, K_INT, 0},
    {"--slots-per-host", D_SLOTS, K_INT, 0},
    {"--elastic-timeout", D_ELASTIC_TIMEOUT, K_INT, 0},
    {"--reset-limit", D_RESET_LIMIT, K_INT, 0},
    {"--blacklist-cooldown-range", D_COOLDOWN, K_INT2, 0},
    {"--timeline-filename", D_TIMELINE, K_STR, 0},
    {"--timeline-mark-cycles", D_MARK_CYCLES, K_TRUE, 0},
    {"--no-timeline-mark-cycles", D_MARK_CYCLES, K_FALSE, 0},
    {"--stall-check", D_STALL_CHECK, K_TRUE, 0},
    {"--no-stall-check", D_STALL_CHECK, K_FALSE, 0},
    {"--stall-check-warning-time-seconds", D_STALL_WARN, K_INT, 0},
    {"--stall-check-shutdown-time-seconds", D_STALL_SHUT, K_INT, 0},
    {"--mpi-threads-disable", D_MPI_THREADS_DISABLE, K_TRUE, 0},
    {"--no-mpi-threads-disable", D_MPI_THREADS_DISABLE, K_FALSE, 0},
    {"--mpi-args", D_MPI_ARGS, K_STR, 0},
    {"--tcp", D_TCP, K_TRUE, 0},
    {"--binding-args", D_BINDING_ARGS, K_STR, 0},
    {"--num-nccl-streams", D_NCCL_STREAMS, K_INT, 0},
    {"--thread-affinity", D_THREAD_AFFINITY, K_STR, 0},
    {"--gloo-timeout-seconds", D_GLOO_TIMEOUT, K_INT, 0},
    {"--log-level", D_LOG_LEVEL, K_STR, 0},
    {"--log-with-timestamp --no-log-hide-timestamp", D_LOG_WITH_TS, K_TRUE, 0},
    {"--log-without-timestamp --log-hide-timestamp", D_LOG_WITH_TS, K_FALSE, 0},
    {"-prefix-timestamp --prefix-output-with-timestamp", D_PREFIX_TS, K_TRUE, 0},
    {"-H --hosts", D_HOSTS, K_STR, 0},
    {"-hostfile --hostfile", D_HOSTFILE, K_STR, 0},
    {"--host-discovery-script", D_DISCOVERY, K_STR, 0},
    {"--gloo", D_CONTROLLER, K_CTRL, HVD_CONTROLLER_GLOO},
    {"--mpi", D_CONTROLLER, K_CTRL, HVD_CONTROLLER_MPI},
    {"--jsrun", D_CONTROLLER, K_CTRL, HVD_CONTROLLER_JSRUN},
    {"--dry-run", D_DRY_RUN, K_TRUE, 0},
    {"-h --help", D_HELP, K_TRUE, 0},
    {"--help-env", D_HELP_ENV, K_TRUE, 0},
};

/* The config file's keys (reference 1.11) and the destinations they set. */
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
    {"controller", D_CONTROLLER, K_STR},
};
/* clang-format on */

#define N_OPTIONS (sizeof options / sizeof options[0])
#define MAX_NICS 64

/* Parse state: one value slot per destination, and where it came from. */
typedef struct {
    int given[D_COUNT]; /* set on the command line */
    int set[D_COUNT];   /* set on the command line or by the config file */
    long long ival[D_COUNT];
    long long ival2[D_COUNT];
    double fval[D_COUNT];
    const char *sval[D_COUNT];
    char *owned[D_COUNT];         /* strings copied from the config file */
    const char *flag[D_COUNT];    /* spelling used, for messages */
    char cfg_where[D_COUNT][600]; /* "file:line: key" of values from the config file */
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

static int parse_yaml_bool(const char *s, int *out) {
    static const char *const yes[] = {"true", "yes", "on", "1"};
    static const char *const no[] = {"false", "no", "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0)
            return *out = 1, 0;
        if (strcasecmp(s, no[i]) == 0)
            return *out = 0, 0;
    }
    return -1;
}

void hvd__settings_format_float(double value, char *out, size_t out_size) {
    /* Python prints positionally for exponents in [-4, 16): the fewest decimals (at least
     * one) that read back exactly; beyond that, the shortest exponent form. */
    double mag = fabs(value);
    if (value == 0 || (mag >= 1e-4 && mag < 1e16)) {
        for (int dec = 1; dec <= 20; dec++) {
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

/* Does the space-separated alias list contain exactly name? */
static int has_name(const char *names, const char *name, size_t len) {
    for (const char *p = names; *p;) {
        const char *sp = strchr(p, ' ');
        size_t n = sp ? (size_t)(sp - p) : strlen(p);
        if (n == len && strncmp(p, name, len) == 0)
            return 1;
        if (!sp)
            break;
        p = sp + 1;
    }
    return 0;
}

/* Does any "--" alias start with the given prefix? */
static int has_prefix(const char *names, const char *prefix, size_t len) {
    for (const char *p = names; *p;) {
        const char *sp = strchr(p, ' ');
        size_t n = sp ? (size_t)(sp - p) : strlen(p);
        if (n >= len && p[1] == '-' && strncmp(p, prefix, len) == 0)
            return 1;
        if (!sp)
            break;
        p = sp + 1;
    }
    return 0;
}

/* Find the option named by token[0..len): exact alias first, then (for --long options) a
 * unique prefix, as argparse does. */
static hvd_status_t find_option(const char *token, size_t len, const option_t **opt_p) {
    for (size_t i = 0; i < N_OPTIONS; i++)
        if (has_name(options[i].names, token, len))
            return *opt_p = &options[i], HVD_OK;
    const option_t *found = NULL;
    char candidates[512] = "";
    size_t n = 0;
    int ambiguous = 0;
    if (len > 2 && token[1] == '-') {
        for (size_t i = 0; i < N_OPTIONS; i++) {
            if (!has_prefix(options[i].names, token, len))
                continue;
            if (found && found != &options[i])
                ambiguous = 1;
            if (!found)
                found = &options[i];
            const char *first_long = strstr(options[i].names, "--");
            if (n < sizeof candidates - 64)
                n += (size_t)snprintf(candidates + n, sizeof candidates - n, "%s%.*s",
                                      n ? ", " : "", (int)strcspn(first_long, " "), first_long);
        }
    }
    if (found && !ambiguous)
        return *opt_p = found, HVD_OK;
    if (ambiguous)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "ambiguous option %.*s could match %s", (int)len,
                              token, candidates);
    return hvd__error_set(HVD_ERR_INVALID_ARG, "unrecognized argument %.*s (see horovodrun --help)",
                          (int)len, token);
}

/* Store one value for a destination; flag names it in messages. */
static hvd_status_t store_value(state_t *s, dest_t d, kind_t kind, const char *flag, const char *v1,
                                const char *v2) {
    switch (kind) {
    case K_INT:
        if (parse_ll(v1, &s->ival[d]) != 0)
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: invalid int value: '%s'", flag, v1);
        break;
    case K_INT2:
        if (parse_ll(v1, &s->ival[d]) != 0 || parse_ll(v2, &s->ival2[d]) != 0)
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: invalid int values: '%s' '%s'", flag,
                                  v1, v2);
        break;
    case K_FLOAT:
        if (parse_double(v1, &s->fval[d]) != 0)
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: invalid float value: '%s'", flag, v1);
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
        break;
    }
    s->flag[d] = flag;
    s->set[d] = 1;
    return HVD_OK;
}

static hvd_status_t add_nics(state_t *s, const char *list, const char *flag) {
    const char *p = list;
    for (;;) {
        size_t n = strcspn(p, ",");
        if (n == 0)
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: empty interface name in '%s'", flag,
                                  list);
        int dup = 0;
        for (size_t i = 0; i < s->nic_count; i++)
            dup |= strlen(s->nics[i]) == n && strncmp(s->nics[i], p, n) == 0;
        if (!dup) {
            if (s->nic_count == MAX_NICS)
                return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: more than %d interfaces", flag,
                                      MAX_NICS);
            if (!(s->nics[s->nic_count] = strndup(p, n)))
                return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
            s->nic_count++;
        }
        if (!p[n])
            return HVD_OK;
        p += n + 1;
    }
}

static hvd_status_t parse_argv(int argc, char **argv, state_t *s, hvd_settings_t *out) {
    int i = 1;
    for (; i < argc; i++) {
        const char *tok = argv[i];
        if (strcmp(tok, "--") == 0) {
            i++;
            break;
        }
        if (tok[0] != '-' || tok[1] == '\0')
            break; /* the user command starts here */
        const char *eq = strchr(tok, '=');
        size_t len = eq ? (size_t)(eq - tok) : strlen(tok);
        const option_t *opt = NULL;
        hvd_status_t st = find_option(tok, len, &opt);
        if (st != HVD_OK)
            return st;
        const char *v1 = NULL, *v2 = NULL;
        int nvals = opt->kind == K_INT2 ? 2 : (opt->kind <= K_FALSE || opt->kind == K_CTRL) ? 0 : 1;
        if (nvals == 0 && eq)
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%.*s takes no value", (int)len, tok);
        if (nvals >= 1) {
            if (eq) {
                v1 = eq + 1;
            } else if (i + 1 < argc) {
                v1 = argv[++i];
            } else {
                return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: expected %s", tok,
                                      nvals == 2 ? "two values" : "a value");
            }
        }
        if (nvals == 2) {
            if (i + 1 >= argc)
                return hvd__error_set(HVD_ERR_INVALID_ARG, "%.*s: expected two values", (int)len,
                                      tok);
            v2 = argv[++i];
        }
        /* --x and --no-x (and --gloo/--mpi/--jsrun) are mutually exclusive, as in argparse */
        if (s->given[opt->dest] && (opt->kind == K_CTRL || opt->kind <= K_FALSE) &&
            s->flag[opt->dest] && strcmp(s->flag[opt->dest], tok) != 0 &&
            (opt->kind == K_CTRL ? s->ival[opt->dest] != opt->ival
                                 : s->ival[opt->dest] != (opt->kind == K_TRUE)))
            return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: not allowed with %s", tok,
                                  s->flag[opt->dest]);
        if (opt->dest == D_NIC || opt->dest == D_NICS) {
            st = add_nics(s, v1, tok);
            if (st != HVD_OK)
                return st;
        }
        st = store_value(s, opt->dest, opt->kind, tok, v1, v2);
        if (st != HVD_OK)
            return st;
        if (opt->kind == K_CTRL)
            s->ival[opt->dest] = opt->ival;
        s->given[opt->dest] = 1;
    }
    out->command = i < argc ? &argv[i] : NULL;
    return HVD_OK;
}

/* ---- config file ---- */

typedef struct {
    state_t *s;
    const char *file;
} config_ctx_t;

static hvd_status_t config_visit(const char *path, const char *value, int line, void *arg) {
    config_ctx_t *c = arg;
    state_t *s = c->s;
    for (size_t i = 0; i < sizeof config_keys / sizeof config_keys[0]; i++) {
        if (strcmp(config_keys[i].key, path) != 0)
            continue;
        dest_t d = config_keys[i].dest;
        if (s->given[d])
            return HVD_OK; /* a flag on the command line wins (reference precedence) */
        char *where = s->cfg_where[d];
        snprintf(where, sizeof s->cfg_where[d], "%s:%d: %s", c->file, line, path);
        if (d == D_CONTROLLER) {
            if (strcasecmp(value, "gloo") == 0)
                s->ival[d] = HVD_CONTROLLER_GLOO;
            else if (strcasecmp(value, "mpi") == 0)
                s->ival[d] = HVD_CONTROLLER_MPI;
            else
                return hvd__error_set(HVD_ERR_INVALID_ARG,
                                      "%s: '%s' is not a controller (gloo or mpi)", where, value);
            s->set[d] = 1;
            return HVD_OK;
        }
        if (config_keys[i].kind == K_TRUE) {
            int b;
            if (parse_yaml_bool(value, &b) != 0)
                return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: '%s' is not true or false", where,
                                      value);
            s->ival[d] = b;
            s->set[d] = 1;
            s->flag[d] = where;
            return HVD_OK;
        }
        if (config_keys[i].kind == K_STR) {
            free(s->owned[d]);
            if (!(s->owned[d] = strdup(value)))
                return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
            value = s->owned[d];
        }
        return store_value(s, d, config_keys[i].kind, where, value, NULL);
    }
    fprintf(stderr, "horovodrun: warning: %s:%d: unknown config key '%s' ignored\n", c->file, line,
            path);
    return HVD_OK;
}

/* ---- validation and exports ---- */

static hvd_status_t check_min(const state_t *s, dest_t d, long long min) {
    if (s->set[d] && s->ival[d] < min)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: must be %s %lld (got %lld)", s->flag[d],
                              min == 0 ? "non-negative, >=" : "at least", min, s->ival[d]);
    return HVD_OK;
}

static hvd_status_t validate(const state_t *s) {
    static const struct {
        dest_t d;
        long long min;
    } mins[] = {{D_NP, 1},           {D_START_TIMEOUT, 1},   {D_FUSION, 0},
                {D_CACHE, 0},        {D_AT_WARMUP, 0},       {D_AT_STEPS, 0},
                {D_AT_BAYES, 0},     {D_MIN_NP, 1},          {D_MAX_NP, 1},
                {D_SLOTS, 1},        {D_ELASTIC_TIMEOUT, 0}, {D_RESET_LIMIT, 0},
                {D_STALL_WARN, 0},   {D_STALL_SHUT, 0},      {D_NCCL_STREAMS, 0},
                {D_GLOO_TIMEOUT, 1}, {D_SSH_PORT, 1}};
    for (size_t i = 0; i < sizeof mins / sizeof mins[0]; i++) {
        hvd_status_t st = check_min(s, mins[i].d, mins[i].min);
        if (st != HVD_OK)
            return st;
    }
    if (s->set[D_SSH_PORT] && s->ival[D_SSH_PORT] > 65535)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: %lld is not a port", s->flag[D_SSH_PORT],
                              s->ival[D_SSH_PORT]);
    if (s->set[D_NP] && s->ival[D_NP] > 1000000)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "-np %lld is too large", s->ival[D_NP]);
    if (s->set[D_CYCLE] && s->fval[D_CYCLE] < 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: must be non-negative (got %g)",
                              s->flag[D_CYCLE], s->fval[D_CYCLE]);
    if (s->set[D_AT_NOISE] && (s->fval[D_AT_NOISE] < 0 || s->fval[D_AT_NOISE] > 1))
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: must be in [0, 1] (got %g)",
                              s->flag[D_AT_NOISE], s->fval[D_AT_NOISE]);
    if (s->set[D_FUSION] && s->ival[D_FUSION] > (1LL << 43) / 1048576)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "%s: %lld MB is too large", s->flag[D_FUSION],
                              s->ival[D_FUSION]);
    if (s->set[D_COOLDOWN] && (s->ival[D_COOLDOWN] < 1 || s->ival2[D_COOLDOWN] > 3600 ||
                               s->ival[D_COOLDOWN] > s->ival2[D_COOLDOWN]))
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "--blacklist-cooldown-range: need 1 <= MIN <= MAX <= 3600 seconds "
                              "(got %lld %lld)",
                              s->ival[D_COOLDOWN], s->ival2[D_COOLDOWN]);
    if (s->set[D_MIN_NP] && s->set[D_MAX_NP] && s->ival[D_MAX_NP] < s->ival[D_MIN_NP])
        return hvd__error_set(HVD_ERR_INVALID_ARG, "--max-np %lld is below --min-np %lld",
                              s->ival[D_MAX_NP], s->ival[D_MIN_NP]);
    if (s->set[D_THREAD_AFFINITY]) {
        const char *p = s->sval[D_THREAD_AFFINITY];
        size_t n = strspn(p, "0123456789,");
        if (!*p || p[n] || strstr(p, ",,") || *p == ',' || p[strlen(p) - 1] == ',')
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "%s: '%s' is not a comma list of core ids (e.g. 0,1,2,3)",
                                  s->flag[D_THREAD_AFFINITY], p);
    }
    if (s->set[D_LOG_LEVEL]) {
        hvd_log_level_t lv;
        if (hvd__log_level_parse(s->sval[D_LOG_LEVEL], &lv) != 0)
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "%s: '%s' is not one of TRACE, DEBUG, INFO, WARNING, ERROR, "
                                  "FATAL",
                                  s->flag[D_LOG_LEVEL], s->sval[D_LOG_LEVEL]);
    }
    int sources = s->given[D_HOSTS] + s->given[D_HOSTFILE] + s->given[D_DISCOVERY];
    if (sources > 1)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "-H/--hosts, --hostfile and --host-discovery-script are mutually "
                              "exclusive");
    return HVD_OK;
}

static hvd_status_t export_int(hvd_env_list_t *e, const char *name, long long v) {
    return hvd__env_list_setf(e, name, "%lld", v);
}

static hvd_status_t export_float(hvd_env_list_t *e, const char *name, double v) {
    char buf[64];
    hvd__settings_format_float(v, buf, sizeof buf);
    return hvd__env_list_set(e, name, buf);
}

/* The variables horovodrun exports (reference 1.3-1.9): only for what was set. */
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
    if (s->set[D_TIMELINE]) {
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

static void state_fini(state_t *s) {
    for (int d = 0; d < D_COUNT; d++)
        free(s->owned[d]);
    for (size_t i = 0; i < s->nic_count; i++)
        free(s->nics[i]);
}

hvd_status_t hvd__settings_parse(int argc, char **argv, const hvd_params_t *launcher_env,
                                 hvd_settings_t *out) {
    state_t *s = calloc(1, sizeof *s);
    hvd_settings_t r;
    memset(&r, 0, sizeof r);
    memset(out, 0, sizeof *out);
    if (!s)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    hvd__env_list_init(&r.exports);
    hvd_status_t st = parse_argv(argc, argv, s, &r);
    if (st == HVD_OK && s->given[D_CONFIG]) {
        config_ctx_t c = {s, s->sval[D_CONFIG]};
        st = hvd__config_file_read(s->sval[D_CONFIG], config_visit, &c);
    }
    if (st == HVD_OK)
        st = validate(s);
    r.show_help = s->given[D_HELP];
    r.show_help_env = s->given[D_HELP_ENV];
    r.show_version = s->given[D_VERSION];
    r.show_check_build = s->given[D_CHECK_BUILD];
    int print_only = r.show_help || r.show_help_env || r.show_version || r.show_check_build;
    if (st == HVD_OK && !print_only) {
        if (!s->set[D_NP])
            st = hvd__error_set(HVD_ERR_INVALID_ARG,
                                "the following argument is required: -np/--num-proc");
        else if (!r.command)
            st = hvd__error_set(HVD_ERR_INVALID_ARG,
                                "no command to run: give it after the options, e.g. horovodrun "
                                "-np %lld python train.py",
                                s->ival[D_NP]);
    }
    if (st == HVD_OK)
        st = build_exports(s, &r.exports);
    if (st != HVD_OK)
        goto err;

    r.dry_run = s->given[D_DRY_RUN];
    r.num_proc = s->set[D_NP] ? (int)s->ival[D_NP] : -1;
    r.hosts = s->sval[D_HOSTS];
    r.hostfile = s->sval[D_HOSTFILE];
    r.discovery_script = s->sval[D_DISCOVERY];
    r.start_timeout =
        s->set[D_START_TIMEOUT] ? (int)s->ival[D_START_TIMEOUT] : launcher_env->start_timeout;
    r.output_dir = s->sval[D_OUTPUT];
    r.prefix_timestamp = s->given[D_PREFIX_TS];
    r.verbose = s->given[D_VERBOSE];
    r.disable_cache = s->given[D_DISABLE_CACHE];
    r.config_file = s->sval[D_CONFIG];
    r.ssh_port = s->set[D_SSH_PORT] ? (int)s->ival[D_SSH_PORT] : 0;
    r.ssh_identity_file = s->sval[D_SSH_ID];
    r.controller =
        s->set[D_CONTROLLER] ? (hvd_controller_t)s->ival[D_CONTROLLER] : HVD_CONTROLLER_DEFAULT;
    r.mpi_args = s->sval[D_MPI_ARGS];
    r.binding_args = s->sval[D_BINDING_ARGS];
    r.elastic = s->given[D_MIN_NP] || s->given[D_DISCOVERY];
    r.min_np = s->set[D_MIN_NP] ? (int)s->ival[D_MIN_NP] : r.num_proc;
    r.max_np = s->set[D_MAX_NP] ? (int)s->ival[D_MAX_NP] : -1;
    r.slots_per_host = s->set[D_SLOTS] ? (int)s->ival[D_SLOTS] : 0;
    r.elastic_timeout =
        s->set[D_ELASTIC_TIMEOUT] ? (int)s->ival[D_ELASTIC_TIMEOUT] : launcher_env->elastic_timeout;
    r.reset_limit = s->set[D_RESET_LIMIT] ? (int)s->ival[D_RESET_LIMIT] : -1;
    r.cooldown_min = s->set[D_COOLDOWN] ? (int)s->ival[D_COOLDOWN] : 0;
    r.cooldown_max = s->set[D_COOLDOWN] ? (int)s->ival2[D_COOLDOWN] : 0;
    r.log_level = launcher_env->log_level;
    if (s->set[D_LOG_LEVEL])
        hvd__log_level_parse(s->sval[D_LOG_LEVEL], &r.log_level);
    r.log_hide_time = s->set[D_LOG_WITH_TS] ? !s->ival[D_LOG_WITH_TS] : launcher_env->log_hide_time;
    /* config-file strings must outlive the state: keep them with the settings */
    if (s->nic_count) {
        r.nics = calloc(s->nic_count, sizeof *r.nics);
        if (!r.nics) {
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
            goto err;
        }
        memcpy(r.nics, s->nics, s->nic_count * sizeof *r.nics);
        r.nic_count = s->nic_count;
        s->nic_count = 0;
    }
    /* Strings from the config file are only read into exports (copied); none is referenced
     * by the public fields, so the state can go. */
    state_fini(s);
    free(s);
    *out = r;
    return HVD_OK;
err:
    hvd__env_list_fini(&r.exports);
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
