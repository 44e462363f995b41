/* horovodrun's print-and-exit texts (help.h). Flags are listed from one table in Horovod's
 * argparse groups; --help-env prints the parameter table of params.h, so it cannot drift from what
 * is read. */
#include "runner/cli/help.h"

#include <hvd/hvd.h>

#include "common/params.h"

#include <string.h>

/* One help line: a group title (flags NULL) or a flag and its meaning. */
typedef struct {
    const char *flags;
    const char *text;
} help_line_t;

/* Groups and order follow Horovod's argparse groups, so users find flags where they expect
 * them. Hidden forms (--no-autotune, --stall-check, ...) are listed once, at the end. */
static const help_line_t help_lines[] = {
    {NULL, "positional arguments"},
    {"command [args ...]", "the program to run and its arguments: everything from"},
    {"", "the first argument that is not an option (or after --)"},

    {NULL, "optional arguments"},
    {"-h, --help", "show this help and exit"},
    {"--help-env", "print every HOROVOD_* variable with its default and exit"},
    {"-v, --version", "print the version and exit"},
    {"-np, --num-proc NP", "number of processes to start (exactly NP)"},
    {"-cb, --check-build", "print the frameworks, controllers and operations built in"},
    {"--dry-run", "print the slot plan, one line per rank, and exit"},
    {"--check-network", "probe every pair of hosts of -H or --hostfile on"},
    {"", "each interface that passes the interface filter, print"},
    {"", "the matrix with the cause of each failure, and exit"},
    {"", "(0: some interface works on every link)"},
    {"--disable-cache", "do not cache the results of the start-up checks"},
    {"--start-timeout SECONDS", "deadline of the start-up checks (default 30, or"},
    {"", "HOROVOD_START_TIMEOUT)"},
    {"--network-interfaces NIC,NIC", "interfaces (names or CIDR networks) to use"},
    {"--network-interface NIC", "one interface name or network (repeatable)"},
    {"--output-filename DIR", "also write each rank's output to DIR/rank.N/stdout and stderr"},
    {"--verbose", "print the start-up progress and every worker command"},
    {"--config-file FILE", "YAML file of parameters; command-line flags win over it"},

    {NULL, "SSH arguments"},
    {"-p, --ssh-port PORT", "ssh port of every remote host"},
    {"-i, --ssh-identity-file FILE", "ssh private key file"},

    {NULL, "tuneable parameter arguments"},
    {"--fusion-threshold-mb MB", "fusion buffer size (default 128; 0 disables fusion)"},
    {"--cycle-time-ms MS", "background cycle time (default 1)"},
    {"--cache-capacity N", "response cache entries (default 1024; 0 disables the cache)"},
    {"--hierarchical-allreduce", "allreduce within each host, then across hosts"},
    {"--no-hierarchical-allreduce", "pin hierarchical allreduce off (autotune leaves it)"},
    {"--hierarchical-allgather", "allgather within each host, then across hosts"},
    {"--no-hierarchical-allgather", "pin hierarchical allgather off (autotune leaves it)"},
    {"--torus-allreduce", "torus allreduce"},
    {"--no-torus-allreduce", "pin torus allreduce off (autotune leaves it)"},

    {NULL, "autotune arguments"},
    {"--autotune", "tune the parameters above while training"},
    {"--autotune-log-file FILE", "write the autotune samples to FILE"},
    {"--autotune-warmup-samples N", "samples discarded at the start (default 3)"},
    {"--autotune-steps-per-sample N", "steps per sample (default 10)"},
    {"--autotune-bayes-opt-max-samples N", "Bayesian optimisation samples (default 20)"},
    {"--autotune-gaussian-process-noise X", "noise of the Gaussian process, in [0, 1] "
                                            "(default 0.8)"},

    {NULL, "elastic arguments"},
    {"--min-np, --min-num-proc N", "minimum processes to keep training (switches on elastic)"},
    {"--max-np, --max-num-proc N", "maximum processes (default: no limit)"},
    {"--slots-per-host N", "slots of discovered hosts that do not say host:slots"},
    {"--elastic-timeout SECONDS", "wait for enough slots (default 600, or"},
    {"", "HOROVOD_ELASTIC_TIMEOUT)"},
    {"--reset-limit N", "maximum number of resets before the job fails"},
    {"--blacklist-cooldown-range MIN MAX", "seconds before a failed host is tried again "
                                           "(1..3600)"},

    {NULL, "timeline arguments"},
    {"--timeline-filename FILE", "write a Chrome trace timeline to FILE"},
    {"--timeline-mark-cycles", "mark the background cycles in the timeline"},

    {NULL, "stall check arguments"},
    {"--no-stall-check", "disable the stall check"},
    {"--stall-check-warning-time-seconds S", "warn after S seconds of stall (default 60)"},
    {"--stall-check-shutdown-time-seconds S", "shut down after S seconds of stall (default 0: "
                                              "never)"},

    {NULL, "library arguments"},
    {"--mpi-threads-disable", "do not ask MPI for multi-threading support"},
    {"--mpi-args=\"ARGS\"", "extra arguments for mpirun"},
    {"--tcp", "TCP only for the data plane (NCCL_IB_DISABLE=1)"},
    {"--binding-args=\"ARGS\"", "process binding arguments for mpirun"},
    {"--num-nccl-streams N", "NCCL streams per process (default 1)"},
    {"--thread-affinity CORES", "core id per local rank for the background thread (0,1,...)"},
    {"--gloo-timeout-seconds S", "deadline of rendezvous waits and collectives (default 30)"},

    {NULL, "logging arguments"},
    {"--log-level LEVEL", "TRACE, DEBUG, INFO, WARNING, ERROR or FATAL (default WARNING)"},
    {"--log-without-timestamp", "log lines without the time"},
    {"--log-with-timestamp", "log lines with the time (the default)"},
    {"-prefix-timestamp, --prefix-output-with-timestamp",
     "put the time before every forwarded output line"},

    {NULL, "host arguments"},
    {"-H, --hosts HOST:SLOTS,...", "hosts and their slots, in rank order (default "
                                   "localhost:NP)"},
    {"-hostfile, --hostfile FILE", "lines 'host slots=N' (or 'host': 1 slot); # comments"},
    {"--host-discovery-script FILE", "elastic: program printing host[:slots] lines"},

    {NULL, "controller arguments"},
    {"--gloo", "built-in TCP controller (the default)"},
    {"--mpi", "run through mpirun"},
    {"--jsrun", "run through jsrun (IBM LSF)"},
};

#define FLAG_WIDTH 36

void hvd__help_print_usage(FILE *out) {
    fputs("usage: horovodrun [-h] [-v] -np NP [-H HOST:SLOTS,... | --hostfile FILE] [options]\n"
          "                  command [args ...]\n"
          "\n"
          "Starts NP copies of command with Horovod's worker environment, tags their output by\n"
          "rank, and ends the whole job when one of them fails. A long option may be shortened\n"
          "to any unambiguous prefix (--slots for --slots-per-host); --opt value and\n"
          "--opt=value both work.\n",
          out);
    for (size_t i = 0; i < sizeof help_lines / sizeof help_lines[0]; i++) {
        const help_line_t *l = &help_lines[i];
        if (!l->flags)
            fprintf(out, "\n%s:\n", l->text);
        else if (strlen(l->flags) >= FLAG_WIDTH)
            fprintf(out, "  %s\n  %-*s %s\n", l->flags, FLAG_WIDTH, "", l->text);
        else
            fprintf(out, "  %-*s %s\n", FLAG_WIDTH, l->flags, l->text);
    }
    fputs("\n"
          "Also accepted: --no-autotune, --no-timeline-mark-cycles, --stall-check,\n"
          "--no-mpi-threads-disable, and the deprecated --log-hide-timestamp and\n"
          "--no-log-hide-timestamp.\n"
          "\n"
          "exit status: 0 on success; 2 for usage errors; 1 if the job could not be run; else\n"
          "the first failing rank's exit code (128+signal if it was killed by a signal).\n",
          out);
}

void hvd__help_print_env(FILE *out) {
    size_t n;
    const hvd_param_def_t *t = hvd__params_table(&n);
    fprintf(out, "%-42s %-10s %s\n", "VARIABLE", "DEFAULT", "MEANING");
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%-42s %-10s %s%s\n", t[i].name,
                t[i].default_value ? (*t[i].default_value ? t[i].default_value : "\"\"")
                                   : "(unset)",
                (t[i].readers & HVD_PARAM_WORKER) ? "" : "[launcher] ", t[i].help);
}

void hvd__help_print_version(FILE *out) {
    fprintf(out, "horovodrun (hvd) %s, compatible with Horovod %s\n", hvd_version(),
            HVD_HOROVOD_COMPAT_VERSION);
}

/* PyTorch is there when this build made the horovod package (horovod.torch) beside it,
 * TensorFlow when it also built horovod.tensorflow's kernels. */
#ifdef HVD_WITH_PYTORCH
#define HVD_PYTORCH_MARK "X"
#else
#define HVD_PYTORCH_MARK " "
#endif
#ifdef HVD_WITH_TENSORFLOW
#define HVD_TENSORFLOW_MARK "X"
#else
#define HVD_TENSORFLOW_MARK " "
#endif

void hvd__help_print_check_build(FILE *out) {
    fprintf(out,
            "Horovod v%s (hvd %s):\n\n"
            "Available Frameworks:\n"
            "    [" HVD_TENSORFLOW_MARK "] TensorFlow\n"
            "    [" HVD_PYTORCH_MARK "] PyTorch\n"
            "    [ ] MXNet\n\n"
            "Available Controllers:\n"
            "    [ ] MPI\n"
            "    [X] Gloo\n\n"
            "Available Tensor Operations:\n"
            "    [ ] NCCL\n"
            "    [ ] DDL\n"
            "    [ ] CCL\n"
            "    [ ] MPI\n"
            "    [X] Gloo\n",
            HVD_HOROVOD_COMPAT_VERSION, hvd_version());
}

void hvd__help_print_plan(FILE *out, const hvd_slot_plan_t *plan) {
    for (size_t i = 0; i < plan->count; i++) {
        char line[512];
        hvd__slot_format(&plan->slots[i], line, sizeof line);
        fprintf(out, "%s\n", line);
    }
}
