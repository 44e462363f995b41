/* ssh, srun and rsh-agent command lines, and the reachability check (ssh.h). The check starts every
 * host's probe at once with posix_spawnp and keeps the last 4 KiB of each attempt's output, where
 * ssh says why it failed, to tell failures worth retrying from permanent ones. */
#include "runner/launch/ssh.h"

#include "common/clock.h"
#include "common/error.h"
#include "runner/process/capture.h"
#include "runner/slurm/slurm_alloc.h"
#include "runner/process/say.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* What the check keeps of each attempt's output (the end of it matters: ssh's reason). */
#define OUTPUT_CAP 4096

size_t hvd__shell_quote(const char *s, char *out, size_t out_size) {
    size_t n = 0;
#define PUT(c)                                                                                     \
    do {                                                                                           \
        if (n + 1 < out_size)                                                                      \
            out[n] = (c);                                                                          \
        n++;                                                                                       \
    } while (0)
    int safe = *s != '\0';
    for (const char *c = s; *c && safe; c++)
        safe = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
               strchr("@%+=:,./_-", *c);
    if (safe) {
        for (const char *c = s; *c; c++)
            PUT(*c);
    } else {
        PUT('\'');
        for (const char *c = s; *c; c++) {
            if (*c == '\'')
                for (const char *q = "'\"'\"'"; *q; q++)
                    PUT(*q);
            else
                PUT(*c);
        }
        PUT('\'');
    }
#undef PUT
    if (out_size)
        out[n < out_size ? n : out_size - 1] = '\0';
    return n;
}

void hvd__ssh_argv_free(char **argv) {
    for (char **a = argv; a && *a; a++)
        free(*a);
    free(argv);
}

/* The agent's words, then host and remote_command. */
static hvd_status_t agent_argv(const char *agent, const char *host, const char *remote_command,
                               char ***argv_p) {
    size_t words = 0;
    for (const char *c = agent; *c; c++)
        words += *c != ' ' && (c == agent || c[-1] == ' ');
    if (words == 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "the rsh agent '%s' names no program", agent);
    char **argv = calloc(words + 3, sizeof *argv);
    size_t n = 0;
    int failed = !argv;
    for (const char *c = agent; !failed && *c;) {
        size_t len = strcspn(c, " ");
        if (len)
            failed |= !(argv[n++] = strndup(c, len));
        c += len + (c[len] == ' ');
    }
    if (!failed)
        failed |= !(argv[n++] = strdup(host));
    if (!failed)
        failed |= !(argv[n++] = strdup(remote_command));
    if (failed) {
        hvd__ssh_argv_free(argv);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory building an rsh agent command");
    }
    *argv_p = argv;
    return HVD_OK;
}

hvd_status_t hvd__ssh_argv(const hvd_ssh_opts_t *opts, const char *host, const char *remote_command,
                           char ***argv_p) {
    if (opts && opts->agent)
        return agent_argv(opts->agent, host, remote_command, argv_p);
    char *v[32];
    size_t n = 0;
    v[n++] = strdup("ssh");
    const char *fixed[] = {"BatchMode=yes", "PasswordAuthentication=no",
                           "StrictHostKeyChecking=no"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        v[n++] = strdup("-o");
        v[n++] = strdup(fixed[i]);
    }
    char opt[64];
    snprintf(opt, sizeof opt, "ServerAliveInterval=%d", HVD_SSH_ALIVE_INTERVAL_S);
    v[n++] = strdup("-o");
    v[n++] = strdup(opt);
    snprintf(opt, sizeof opt, "ServerAliveCountMax=%d", HVD_SSH_ALIVE_COUNT);
    v[n++] = strdup("-o");
    v[n++] = strdup(opt);
    if (opts && opts->connect_timeout_s > 0) {
        snprintf(opt, sizeof opt, "ConnectTimeout=%d", opts->connect_timeout_s);
        v[n++] = strdup("-o");
        v[n++] = strdup(opt);
    }
    if (opts && opts->port > 0) {
        snprintf(opt, sizeof opt, "%d", opts->port);
        v[n++] = strdup("-p");
        v[n++] = strdup(opt);
    }
    if (opts && opts->identity) {
        v[n++] = strdup("-i");
        v[n++] = strdup(opts->identity);
    }
    v[n++] = strdup(host);
    v[n++] = strdup(remote_command);
    char **argv = calloc(n + 1, sizeof *argv);
    int failed = !argv;
    for (size_t i = 0; i < n; i++) {
        failed |= !v[i];
        if (argv)
            argv[i] = v[i];
        else
            free(v[i]);
    }
    if (failed) {
        hvd__ssh_argv_free(argv);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory building an ssh command");
    }
    *argv_p = argv;
    return HVD_OK;
}

/* srun of program on host, one task in a step of its own: --overlap shares the CPUs the
 * job's other steps hold (the ranks' own, the NIC discovery's) and --whole gives the step all
 * of the job's CPUs on the node (its ranks run under it; one task would get one CPU where
 * Slurm confines steps to what they asked for); --export=NONE keeps
 * horovodrun's environment out of the step, as ssh's login environment does (the ranks' come
 * in the spec); no MPI plugin and no CPU binding for the supervisor. A host of another
 * allocation (an elastic job grown by one) gets --jobid of the job that holds it. */
static hvd_status_t srun_argv(const char *host, const char *program, const char *option,
                              char ***argv_p) {
    char job[64];
    hvd_status_t st = hvd__slurm_job_of_host(hvd__slurm_getenv, NULL, host, job, sizeof job);
    if (st != HVD_OK)
        return st;
    const char *fixed[] = {"srun",          "--nodes=1",  "--ntasks=1",      "--overlap", "--whole",
                           "--export=NONE", "--mpi=none", "--cpu-bind=none", "--quiet"};
    size_t nf = sizeof fixed / sizeof fixed[0], n = 0;
    char **argv = calloc(nf + 5, sizeof *argv);
    int failed = !argv;
    for (size_t i = 0; !failed && i < nf; i++)
        failed |= !(argv[n++] = strdup(fixed[i]));
    char opt[512];
    if (!failed && *job) {
        snprintf(opt, sizeof opt, "--jobid=%s", job);
        failed |= !(argv[n++] = strdup(opt));
    }
    if (!failed) {
        snprintf(opt, sizeof opt, "--nodelist=%s", host); /* (host names are short words) */
        failed |= !(argv[n++] = strdup(opt)) || !(argv[n++] = strdup(program)) ||
                  !(argv[n++] = strdup(option));
    }
    if (failed) {
        for (size_t i = 0; argv && i < n; i++)
            free(argv[i]);
        free(argv);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory building an srun command");
    }
    *argv_p = argv;
    return HVD_OK;
}

hvd_status_t hvd__ssh_argv_program(const hvd_ssh_opts_t *opts, const char *host,
                                   const char *program, const char *option, char ***argv_p) {
    if (opts && opts->srun)
        return srun_argv(host, program, option, argv_p);
    size_t n = hvd__shell_quote(program, NULL, 0);
    char *cmd = malloc(n + 1 + strlen(option) + 1);
    if (!cmd)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory building an ssh command");
    hvd__shell_quote(program, cmd, n + 1);
    cmd[n] = ' ';
    strcpy(cmd + n + 1, option);
    hvd_status_t st = hvd__ssh_argv(opts, host, cmd, argv_p);
    free(cmd);
    return st;
}

/* ---- the reachability check -------------------------------------------------------------------
 */

typedef struct {
    const char *host;
    pid_t pid;    /* running attempt, 0 if none */
    int fd;       /* its output, -1 when closed */
    int attempts; /* started so far */
    int done, ok; /* finished: ok or failed for good */
    int status;   /* last attempt's wait status */
    int64_t start_ms, retry_at_ms;
    char out[OUTPUT_CAP];
    size_t out_len;
} probe_t;

static int start_attempt(probe_t *p, char **argv) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 2);
    posix_spawnattr_init(&attr);
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &dfl);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    int rc = posix_spawnp(&p->pid, argv[0], &fa, &attr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(fds[1]);
    if (rc != 0) {
        close(fds[0]);
        p->pid = 0;
        errno = rc;
        return -1;
    }
    fcntl(fds[0], F_SETFL, O_NONBLOCK);
    p->fd = fds[0];
    p->attempts++;
    p->out_len = 0;
    return 0;
}

static void read_output(probe_t *p) {
    char buf[1024];
    for (;;) {
        ssize_t n = read(p->fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0 || errno != EAGAIN) {
                close(p->fd);
                p->fd = -1;
            }
            return;
        }
        hvd__capture_keep_tail(p->out, OUTPUT_CAP, &p->out_len, buf, (size_t)n);
    }
}

int hvd__ssh_failure_is_permanent(const char *out, size_t len) {
    return memmem(out, len, "Permission denied", 17) ||
           memmem(out, len, "Could not resolve hostname", 26) ||
           memmem(out, len, "Host key verification failed", 28);
}

void hvd__ssh_say_failure(int fd, const char *host, const char *out, size_t len) {
    hvd__say(fd, "ssh not successful for host %s:\n%.*s%s%s", host, (int)len, out,
             len && out[len - 1] != '\n' ? "\n" : "",
             memmem(out, len, "Permission denied", 17)
                 ? "(horovodrun runs ssh with BatchMode=yes: key authentication must work "
                   "without a prompt, for the user and with -i/-p if given)\n"
                 : "");
}

static void finish_attempt(probe_t *p, int status, int64_t now, int64_t deadline, int verbose,
                           int out_fd) {
    p->pid = 0;
    if (p->fd >= 0) {
        read_output(p);
        if (p->fd >= 0)
            close(p->fd); /* a helper ssh left behind may hold it: what we have is enough */
        p->fd = -1;
    }
    p->status = status;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        p->done = p->ok = 1;
        if (verbose)
            hvd__say(out_fd, "ssh to %s: ok (%.2f s)\n", p->host,
                     (double)(now - p->start_ms) / 1e3);
        return;
    }
    if (p->attempts < HVD_SSH_CHECK_ATTEMPTS &&
        !hvd__ssh_failure_is_permanent(p->out, p->out_len) &&
        now + HVD_SSH_RETRY_PAUSE_MS < deadline) {
        p->retry_at_ms = now + HVD_SSH_RETRY_PAUSE_MS;
        return;
    }
    p->done = 1;
}

hvd_status_t hvd__ssh_check_hosts(const hvd_ssh_opts_t *opts, const char *const *hosts,
                                  size_t count, int timeout_s, int verbose, int out_fd,
                                  int err_fd) {
    if (count == 0 || (opts && (opts->srun || opts->agent)))
        return HVD_OK;
    if (verbose)
        hvd__say(out_fd, "Checking ssh on all remote hosts.\n");
    hvd_ssh_opts_t o = opts ? *opts : (hvd_ssh_opts_t){0};
    o.connect_timeout_s = HVD_SSH_CHECK_CONNECT_S < timeout_s ? HVD_SSH_CHECK_CONNECT_S
                                                              : (timeout_s > 0 ? timeout_s : 1);
    probe_t *probes = calloc(count, sizeof *probes);
    char ***argvs = calloc(count, sizeof *argvs);
    hvd_status_t st = probes && argvs ? HVD_OK : hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < count && st == HVD_OK; i++) {
        probes[i] = (probe_t){.host = hosts[i], .fd = -1};
        st = hvd__ssh_argv(&o, hosts[i], "true", &argvs[i]);
    }
    int64_t t0 = hvd__clock_now_ms(), deadline = t0 + (int64_t)timeout_s * 1000;
    for (size_t i = 0; i < count && st == HVD_OK; i++) {
        probes[i].start_ms = t0;
        if (start_attempt(&probes[i], argvs[i]) != 0)
            st = hvd__error_set(HVD_ERR_IO, "cannot run ssh for host %s: %s", hosts[i],
                                strerror(errno));
    }
    size_t left = st == HVD_OK ? count : 0;
    struct pollfd *pfd = st == HVD_OK ? calloc(count, sizeof *pfd) : NULL;
    if (st == HVD_OK && !pfd)
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    while (st == HVD_OK && left > 0) {
        int64_t now = hvd__clock_now_ms();
        if (now >= deadline)
            break;
        for (size_t i = 0; i < count; i++)
            pfd[i] = (struct pollfd){.fd = probes[i].fd, .events = POLLIN};
        int wait = (int)(deadline - now < 100 ? deadline - now : 100);
        if (poll(pfd, count, wait) < 0 && errno != EINTR)
            hvd__clock_sleep_ms(wait);
        now = hvd__clock_now_ms();
        for (size_t i = 0; i < count; i++) {
            probe_t *p = &probes[i];
            if (p->done)
                continue;
            if (p->fd >= 0 && pfd[i].revents)
                read_output(p);
            int status;
            if (p->pid > 0 && waitpid(p->pid, &status, WNOHANG) == p->pid) {
                finish_attempt(p, status, now, deadline, verbose, out_fd);
                left -= p->done;
            } else if (p->pid == 0 && now >= p->retry_at_ms) {
                if (start_attempt(p, argvs[i]) != 0) {
                    p->done = 1;
                    left--;
                }
            }
        }
    }
    /* Whatever is still running ran out of time. */
    for (size_t i = 0; st == HVD_OK && i < count; i++) {
        probe_t *p = &probes[i];
        if (p->done)
            continue;
        if (p->pid > 0) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &p->status, 0);
            p->pid = 0;
        }
        if (p->fd >= 0) {
            read_output(p);
            if (p->fd >= 0)
                close(p->fd);
            p->fd = -1;
        }
        p->done = 1;
        int n = snprintf(p->out + p->out_len, OUTPUT_CAP - p->out_len,
                         "%s(no answer within the --start-timeout of %d s)\n",
                         p->out_len && p->out[p->out_len - 1] != '\n' ? "\n" : "", timeout_s);
        if (n > 0)
            p->out_len += (size_t)n < OUTPUT_CAP - p->out_len ? (size_t)n : 0;
    }
    if (st == HVD_OK) {
        char failed[1024] = "";
        size_t nf = 0, used = 0;
        for (size_t i = 0; i < count; i++) {
            probe_t *p = &probes[i];
            if (p->ok)
                continue;
            hvd__ssh_say_failure(err_fd, p->host, p->out, p->out_len);
            int n = snprintf(failed + used, sizeof failed - used, "%s%s", nf ? ", " : "", p->host);
            if (n > 0 && (size_t)n < sizeof failed - used)
                used += (size_t)n;
            nf++;
        }
        if (nf)
            st = hvd__error_set(HVD_ERR_IO,
                                "could not connect to some hosts via ssh: %s (ssh's own "
                                "words are above)",
                                failed);
        else if (verbose)
            hvd__say(out_fd, "SSH was successful into all the remote hosts.\n");
    }
    for (size_t i = 0; probes && i < count; i++) {
        if (probes[i].pid > 0) {
            kill(probes[i].pid, SIGKILL);
            waitpid(probes[i].pid, NULL, 0);
        }
        if (probes[i].fd >= 0)
            close(probes[i].fd);
        if (argvs)
            hvd__ssh_argv_free(argvs[i]);
    }
    free(pfd);
    free(probes);
    free(argvs);
    return st;
}
