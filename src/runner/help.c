#include "runner/help.h"

#include <hvd/hvd.h>

#include "common/params.h"

void hvd__help_print_usage(FILE *out) {
    fputs("usage: horovodrun [options] -np N [-H host:slots,... | --hostfile FILE] command "
          "[args...]\n"
          "\n"
          "Runs command as N processes with Horovod's worker environment, tags their output by\n"
          "rank, and ends the whole job when one process fails. Long options may be abbreviated\n"
          "to any unambiguous prefix; --opt value and --opt=value both work.\n"
          "\n"
          "general:\n"
          "  -np, --num-proc N            number of processes to start (exactly N)\n"
          "  -H, --hosts h1:2,h2:4        hosts and slots, in rank order (default "
          "localhost:N)\n"
          "  -hostfile, --hostfile FILE   lines 'host slots=N'; blank lines and # comments "
          "allowed\n"
          "  --dry-run                    print the slot plan, one line per rank, and exit\n"
          "  --start-timeout S            deadline for start-up checks (default 30)\n"
          "  --output-filename DIR        also write DIR/rank.N/stdout and stderr\n"
          "  -prefix-timestamp, --prefix-output-with-timestamp\n"
          "                               put the time before each forwarded line\n"
          "  --verbose                    print start-up progress and worker commands\n"
          "  --config-file FILE           YAML with Horovod's keys; command-line flags win\n"
          "  --network-interface NAME     data-plane interface (repeatable)\n"
          "  --network-interfaces A,B     comma-separated interfaces\n"
          "  --disable-cache              do not cache start-up check results\n"
          "  -v, --version                print the version and exit\n"
          "  -cb, --check-build           print what this build supports and exit\n"
          "  -h, --help                   print this help and exit\n"
          "  --help-env                   print every HOROVOD_* variable and exit\n"
          "\n"
          "ssh:\n"
          "  -p, --ssh-port PORT          ssh port of every remote host\n"
          "  -i, --ssh-identity-file FILE ssh private key\n"
          "\n"
          "controller:\n"
          "  --gloo                       the built-in TCP path (default)\n"
          "  --mpi                        run through mpirun\n"
          "  --jsrun                      run through jsrun (IBM LSF)\n"
          "  --mpi-args=\"...\"             extra mpirun arguments\n"
          "  --binding-args=\"...\"         mpirun process binding arguments\n"
          "  --tcp                        TCP only (NCCL_IB_DISABLE=1)\n"
          "\n"
          "tuneable parameters:\n"
          "  --fusion-threshold-mb MB     fusion buffer size (HOROVOD_FUSION_THRESHOLD)\n"
          "  --cycle-time-ms MS           background cycle time (HOROVOD_CYCLE_TIME)\n"
          "  --cache-capacity N           response cache size (HOROVOD_CACHE_CAPACITY)\n"
          "  --[no-]hierarchical-allreduce, --[no-]hierarchical-allgather, "
          "--[no-]torus-allreduce\n"
          "\n"
          "autotune:\n"
          "  --autotune, --autotune-log-file FILE, --autotune-warmup-samples N,\n"
          "  --autotune-steps-per-sample N, --autotune-bayes-opt-max-samples N,\n"
          "  --autotune-gaussian-process-noise X (0..1)\n"
          "\n"
          "elastic:\n"
          "  --min-np, --min-num-proc N   minimum processes (switches on elastic mode)\n"
          "  --max-np, --max-num-proc N   maximum processes\n"
          "  --slots-per-host N           slots for discovered hosts without :slots\n"
          "  --host-discovery-script FILE prints host[:slots] per line\n"
          "  --elastic-timeout S          wait for enough slots (default 600)\n"
          "  --reset-limit N              maximum number of resets\n"
          "  --blacklist-cooldown-range MIN MAX\n"
          "                               cooldown of failed hosts, seconds\n"
          "\n"
          "timeline and stall check:\n"
          "  --timeline-filename FILE, --timeline-mark-cycles\n"
          "  --no-stall-check, --stall-check-warning-time-seconds S,\n"
          "  --stall-check-shutdown-time-seconds S\n"
          "\n"
          "library options:\n"
          "  --mpi-threads-disable, --num-nccl-streams N, --thread-affinity 0,1,...,\n"
          "  --gloo-timeout-seconds S     deadline of rendezvous waits and collectives\n"
          "\n"
          "logging:\n"
          "  --log-level {TRACE,DEBUG,INFO,WARNING,ERROR,FATAL}\n"
          "  --log-with-timestamp, --log-without-timestamp\n"
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
    fprintf(out, "horovodrun (hvd) %s, following Horovod %s\n", hvd_version(),
            HVD_HOROVOD_COMPAT_VERSION);
}

void hvd__help_print_check_build(FILE *out) {
    fprintf(out,
            "Horovod v%s (hvd %s):\n\n"
            "Available Frameworks:\n"
            "    [ ] TensorFlow\n"
            "    [ ] PyTorch\n"
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
