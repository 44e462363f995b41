/* horovodrun --mpi (mpi_run.h), in its three steps: detecting the MPI from `mpirun --version` run
 * under capture.h's deadline, building the mpirun command line in a growable buffer, and running it
 * under the relay. */
#include "runner/mpi/mpi_run.h"

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "runner/process/capture.h"
#include "runner/process/relay.h"
#include "runner/launch/ssh.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- implementation detection ---------------------------------------------------------------- */

hvd_mpi_impl_t hvd__mpi_impl_parse(int exit_ok, const char *output) {
    if (!exit_ok)
        return HVD_MPI_MISSING;
    if (!output)
        return HVD_MPI_UNKNOWN;
    if (strstr(output, "IBM Spectrum MPI"))
        return HVD_MPI_SPECTRUM;
    if (strstr(output, "Intel(R) MPI"))
        return HVD_MPI_INTEL;
    if (strstr(output, "Open MPI") || strstr(output, "OpenRTE"))
        return HVD_MPI_OPENMPI;
    if (strstr(output, "MPICH") || strstr(output, "HYDRA"))
        return HVD_MPI_MPICH;
    return HVD_MPI_UNKNOWN;
}

const char *hvd__mpi_impl_name(hvd_mpi_impl_t impl) {
    switch (impl) {
    case HVD_MPI_OPENMPI:
        return "Open MPI";
    case HVD_MPI_SPECTRUM:
        return "IBM Spectrum MPI";
    case HVD_MPI_MPICH:
        return "MPICH";
    case HVD_MPI_INTEL:
        return "Intel(R) MPI";
    case HVD_MPI_UNKNOWN:
        return "unknown MPI";
    case HVD_MPI_MISSING:
        return "no MPI";
    }
    return "no MPI";
}

const char *hvd__mpi_not_found_text(void) {
    return "horovodrun --mpi needs a supported MPI whose mpirun comes first in PATH: Open MPI "
           "4 or later, IBM Spectrum MPI, MPICH or Intel(R) MPI. Install one of them, start the "
           "job with mpirun yourself, or leave out --mpi (or give --gloo) to use horovodrun's "
           "own launcher, which needs no MPI.";
}

static const char *env_value(char *const *envp, const char *name) {
    size_t n = strlen(name);
    for (char *const *e = envp; e && *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

/* The first executable regular file called name in the directories of path (an empty element
 * is the current directory, as for execvp). 0 and the file in out, or -1. */
static int find_in_path(const char *name, const char *path, char *out, size_t cap) {
    for (const char *dir = path;;) {
        const char *end = strchr(dir, ':');
        size_t len = end ? (size_t)(end - dir) : strlen(dir);
        int n = len ? snprintf(out, cap, "%.*s/%s", (int)len, dir, name)
                    : snprintf(out, cap, "./%s", name);
        struct stat sb;
        if (n > 0 && (size_t)n < cap && stat(out, &sb) == 0 && S_ISREG(sb.st_mode) &&
            access(out, X_OK) == 0)
            return 0;
        if (!end)
            return -1;
        dir = end + 1;
    }
}

/* Run `file --version`, capturing into c, within timeout_ms. 1 when it exited 0; otherwise 0
 * with the reason written (and *timed_out_p set when the deadline ended it). */
static int run_version(const char *file, char *const *envp, int timeout_ms, hvd_capture_buf_t *c,
                       char *reason, size_t reason_cap, int *timed_out_p) {
    char *argv[] = {"mpirun", "--version", NULL};
    hvd_capture_config_t cc = {
        .file = file, .argv = argv, .envp = envp, .timeout_ms = timeout_ms, .out = c};
    int status = 0, timed_out = 0;
    if (hvd__capture_run(&cc, &status, &timed_out) != HVD_OK) {
        snprintf(reason, reason_cap, "cannot run %.900s --version: %s", file, hvd_last_error());
        return 0;
    }
    *timed_out_p = timed_out;
    if (timed_out)
        snprintf(reason, reason_cap, "%.900s --version did not finish within %d ms and was killed",
                 file, timeout_ms);
    else if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 1;
    else if (WIFEXITED(status))
        snprintf(reason, reason_cap, "%.900s --version failed with exit code %d", file,
                 WEXITSTATUS(status));
    else
        snprintf(reason, reason_cap, "%.900s --version was killed by signal %d", file,
                 WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return 0;
}

hvd_mpi_impl_t hvd__mpi_detect_timeout(char *const *envp, int timeout_ms, char *output,
                                       size_t cap) {
    char text[HVD_MPI_DETECT_OUTPUT_CAP];
    hvd_capture_buf_t c = {.buf = text, .cap = sizeof text};
    text[0] = '\0';
    if (timeout_ms <= 0)
        timeout_ms = HVD_MPI_DETECT_TIMEOUT_MS;
    char reason[1024] = "", file[4096];
    int exit_ok = 0, timed_out = 0;
    const char *path = env_value(envp, "PATH");
    if (find_in_path("mpirun", path ? path : "/bin:/usr/bin", file, sizeof file) != 0)
        snprintf(reason, sizeof reason, "mpirun was not found in PATH=%.900s",
                 path ? path : "(unset, so /bin:/usr/bin)");
    else
        exit_ok = run_version(file, envp, timeout_ms, &c, reason, sizeof reason, &timed_out);
    hvd_mpi_impl_t impl = hvd__mpi_impl_parse(exit_ok, text);
    if (impl == HVD_MPI_MISSING) {
        hvd__capture_note(&c, reason);
        hvd__error_set(timed_out ? HVD_ERR_TIMEOUT : HVD_ERR_IO, "%s", reason);
    }
    if (output && cap) {
        size_t k = c.len < cap - 1 ? c.len : cap - 1;
        memcpy(output, text, k);
        output[k] = '\0';
    }
    return impl;
}

hvd_mpi_impl_t hvd__mpi_detect(char *const *envp, char *output, size_t cap) {
    return hvd__mpi_detect_timeout(envp, HVD_MPI_DETECT_TIMEOUT_MS, output, cap);
}

/* ---- the command line ------------------------------------------------------------------------ */

typedef struct {
    char *p;
    size_t len, cap;
    int oom;
} sbuf_t;

static void sb_reserve(sbuf_t *b, size_t more) {
    if (b->oom || b->len + more + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = 1;
        return;
    }
    b->p = p;
    b->cap = cap;
}

static void sb_putn(sbuf_t *b, const char *s, size_t n) {
    sb_reserve(b, n);
    if (b->oom)
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_put(sbuf_t *b, const char *s) {
    sb_putn(b, s, strlen(s));
}

static void sb_putf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_putf(sbuf_t *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = 1;
        return;
    }
    sb_reserve(b, (size_t)n);
    if (b->oom)
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* s quoted for the shell (unchanged when it is made of safe characters only). */
static void sb_putq(sbuf_t *b, const char *s) {
    size_t n = hvd__shell_quote(s, NULL, 0);
    sb_reserve(b, n);
    if (b->oom)
        return;
    hvd__shell_quote(s, b->p + b->len, n + 1);
    b->len += n;
}

/* The space that ends a piece; an empty piece leaves only its space, as in Horovod. */
static void sb_sep(sbuf_t *b) {
    sb_putn(b, " ", 1);
}

/* s for use inside double quotes: the characters the shell still interprets there are
 * escaped (none in ordinary file names, which come out unchanged). */
static void sb_putdq(sbuf_t *b, const char *s) {
    for (; *s; s++) {
        if (strchr("\\\"$`", *s))
            sb_putn(b, "\\", 1);
        sb_putn(b, s, 1);
    }
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

hvd_status_t hvd__mpi_command(const hvd_mpi_config_t *c, char **cmd_p) {
    int ompi_like = c->impl == HVD_MPI_OPENMPI || c->impl == HVD_MPI_SPECTRUM;
    int hydra = c->impl == HVD_MPI_MPICH || c->impl == HVD_MPI_INTEL;
    if (!ompi_like && !hydra)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "cannot build an mpirun command for %s",
                              hvd__mpi_impl_name(c->impl));
    if (c->np < 1)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "mpirun needs -np >= 1, not %d", c->np);
    if (!c->argv || !c->argv[0])
        return hvd__error_set(HVD_ERR_INVALID_ARG, "no command to run under mpirun");
    if (c->rsh_agent && !ompi_like)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "%s's launcher takes a program without arguments, not the rsh "
                              "agent '%s': run with Open MPI's mpirun, or without MPI",
                              hvd__mpi_impl_name(c->impl), c->rsh_agent);
    /* Without a host list the job is np ranks on this machine. */
    hvd_host_t local = {.name = "localhost", .slots = c->np};
    const hvd_host_t *hosts = &local;
    size_t n_hosts = 1;
    if (c->hosts && c->hosts->count) {
        hosts = c->hosts->hosts;
        n_hosts = c->hosts->count;
    }
    if (hydra) {
        for (size_t i = 1; i < n_hosts; i++)
            if (hosts[i].slots != hosts[0].slots)
                return hvd__error_set(HVD_ERR_INVALID_ARG,
                                      "Different slots in -hosts parameter are not supported in "
                                      "Intel(R) MPI. Use -machinefile <machine_file> for this "
                                      "purpose.");
        if (c->nics_from_user && c->nic_count > 1)
            return hvd__error_set(HVD_ERR_INVALID_ARG,
                                  "Intel MPI and MPICH do not support multiple interfaces.");
    }

    sbuf_t b = {0};
    /* basic flags, -np, ppn, hosts */
    sb_put(&b, ompi_like ? "mpirun --allow-run-as-root --tag-output" : "mpirun -l");
    sb_putf(&b, " -np %d", c->np);
    if (hydra) {
        sb_putf(&b, " -ppn %d -hosts ", hosts[0].slots);
        for (size_t i = 0; i < n_hosts; i++) {
            if (i)
                sb_put(&b, ",");
            sb_putq(&b, hosts[i].name);
        }
    } else {
        sb_put(&b, " -H ");
        if (c->hosts_text) {
            sb_putq(&b, c->hosts_text);
        } else {
            sbuf_t h = {0};
            for (size_t i = 0; i < n_hosts; i++)
                sb_putf(&h, "%s%s:%d", i ? "," : "", hosts[i].name, hosts[i].slots);
            if (h.p)
                sb_putq(&b, h.p);
            b.oom |= h.oom;
            free(h.p);
        }
    }
    sb_sep(&b);
    /* binding: the user's choice only where the MPI follows it */
    if (c->impl == HVD_MPI_OPENMPI)
        sb_put(&b, c->binding_args ? c->binding_args : "-bind-to none -map-by slot");
    else if (c->impl == HVD_MPI_SPECTRUM)
        sb_put(&b,
               c->binding_args ? c->binding_args : "-bind-to socket -map-by socket -rank-by core");
    else if (c->impl == HVD_MPI_MPICH)
        sb_put(&b, "-bind-to none -map-by slot");
    sb_sep(&b);
    /* implementation flags */
    if (ompi_like) {
        const char *sep = "";
        if (c->impl == HVD_MPI_OPENMPI) {
            sb_put(&b, "-mca pml ob1 -mca btl ^openib");
            sep = " ";
        } else if (c->tcp) {
            sb_put(&b, "-tcp");
            sep = " ";
        }
        if (n_hosts >= HVD_MPI_LARGE_CLUSTER_HOSTS) {
            sb_putf(&b, "%s-mca plm_rsh_no_tree_spawn true -mca plm_rsh_num_concurrent %zu", sep,
                    n_hosts);
            sep = " ";
        }
        if (c->prefix_timestamp)
            sb_putf(&b, "%s--timestamp-output", sep);
    }
    sb_sep(&b);
    /* how mpirun reaches other hosts: the rsh agent, or ssh with the user's options */
    if (c->rsh_agent) {
        sb_put(&b, "-mca plm_rsh_agent \"");
        sb_putdq(&b, c->rsh_agent);
        sb_put(&b, "\"");
    } else if (c->ssh_port > 0 || c->ssh_identity) {
        sb_put(&b, ompi_like ? "-mca plm_rsh_args \"" : "-bootstrap=ssh -bootstrap-exec-args \"");
        if (c->ssh_port > 0)
            sb_putf(&b, "-p %d", c->ssh_port);
        if (c->ssh_identity) {
            sb_put(&b, c->ssh_port > 0 ? " -i " : "-i ");
            sb_putdq(&b, c->ssh_identity);
        }
        sb_put(&b, "\"");
    }
    sb_sep(&b);
    /* MPI's own TCP traffic */
    if (c->nic_count && (ompi_like || c->nics_from_user)) {
        sb_put(&b, ompi_like ? "-mca btl_tcp_if_include " : "-iface ");
        for (size_t i = 0; i < c->nic_count; i++) {
            if (i)
                sb_put(&b, ",");
            sb_putq(&b, c->nics[i]);
        }
    }
    sb_sep(&b);
    /* NCCL's sockets */
    if (c->nic_count) {
        sb_put(&b, ompi_like ? "-x NCCL_SOCKET_IFNAME=" : "-genv NCCL_SOCKET_IFNAME=");
        for (size_t i = 0; i < c->nic_count; i++) {
            if (i)
                sb_put(&b, ",");
            sb_putq(&b, c->nics[i]);
        }
    }
    sb_sep(&b);
    if (c->output_dir) {
        sb_put(&b, ompi_like ? "--output-filename " : "-outfile-pattern ");
        sb_putq(&b, c->output_dir);
    }
    sb_sep(&b);
    /* variables by name (MPICH and Intel MPI pass the whole environment themselves) */
    if (ompi_like && c->env_name_count) {
        const char **names = malloc(c->env_name_count * sizeof *names);
        if (names) {
            memcpy(names, c->env_names, c->env_name_count * sizeof *names);
            qsort(names, c->env_name_count, sizeof *names, by_name);
            for (size_t i = 0; i < c->env_name_count; i++)
                sb_putf(&b, "%s-x %s", i ? " " : "", names[i]);
            free(names);
        } else {
            b.oom = 1;
        }
    }
    sb_sep(&b);
    if (c->mpi_args)
        sb_put(&b, c->mpi_args);
    sb_sep(&b);
    for (char *const *a = c->argv; *a; a++) {
        if (a != c->argv)
            sb_put(&b, " ");
        sb_putq(&b, *a);
    }
    if (b.oom || !b.p) {
        free(b.p);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory building the mpirun command");
    }
    *cmd_p = b.p;
    return HVD_OK;
}

/* ---- running it ------------------------------------------------------------------------------ */

hvd_status_t hvd__mpi_env(char *const *base, char *const *launcher_env, hvd_env_list_t *env_p) {
    hvd_env_list_t env;
    hvd__env_list_init(&env);
    hvd_status_t st = HVD_OK;
    for (char *const *e = base; st == HVD_OK && e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq || eq == *e)
            continue; /* not a variable: nothing could read it */
        char *name = strndup(*e, (size_t)(eq - *e));
        st = name ? hvd__env_list_set(&env, name, eq + 1)
                  : hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory copying the environment");
        free(name);
    }
    const char *inherited[] = {"PATH", "PYTHONPATH"};
    for (size_t i = 0; st == HVD_OK && i < sizeof inherited / sizeof inherited[0]; i++) {
        const char *v = env_value(launcher_env, inherited[i]);
        if (v && !hvd__env_list_get(&env, inherited[i]))
            st = hvd__env_list_set(&env, inherited[i], v);
    }
    if (st != HVD_OK) {
        hvd__env_list_fini(&env);
        return st;
    }
    *env_p = env;
    return HVD_OK;
}

hvd_status_t hvd__mpi_run(const char *cmd, char *const *envp, int *exit_code_p) {
    char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
    hvd_relay_config_t rc = {.argv = argv, .envp = envp};
    int code;
    hvd_status_t st = hvd__relay_run(&rc, &code);
    if (st != HVD_OK)
        return hvd__error_wrap(st, "while starting mpirun");
    *exit_code_p = code;
    return HVD_OK;
}
