#include "runner/launch.h"

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/log.h"
#include "common/params.h"
#include "os/spawn.h"
#include "runner/output.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* After the middlemen are gone, output still buffered in pipes is drained for this long. */
#define DRAIN_MS 2000
/* A middleman that has not finished this long after its own kill deadline is killed. */
#define BACKSTOP_MS 3000

typedef struct {
    const hvd_slot_t *slot;
    hvd_spawn_t proc;
    hvd_output_stream_t out, err;
    int out_open, err_open;
    int running;     /* middleman not yet reaped */
    int reported;    /* final status known */
    int wait_status; /* the command's raw wait status */
    int64_t stop_ms; /* when it was asked to stop (0: not) */
} rank_t;

typedef struct {
    const hvd_launch_config_t *cfg;
    rank_t *ranks;
    size_t n;
    int first_failed; /* rank index, -1 */
    int interrupted;  /* signal that interrupted horovodrun, 0 if none */
} job_t;

/* Variables of horovodrun's environment that do not pass to workers (reference 3.2). */
static int excluded_env(const char *entry) {
    return strncmp(entry, "BASH_FUNC_", 10) == 0 || strncmp(entry, "OLDPWD=", 7) == 0 ||
           strncmp(entry, HVD_SECRET_ENV "=", strlen(HVD_SECRET_ENV) + 1) == 0 ||
           (strstr(entry, "CUDA_VISIBLE_DEVICES=") &&
            strstr(entry, "CUDA_VISIBLE_DEVICES=") < strchr(entry, '='));
}

/* The worker environment: horovodrun's own, then the exports, then the slot's variables
 * last so that computed values always win over inherited ones (quirk fixed). */
static hvd_status_t build_env(const hvd_launch_config_t *cfg, const hvd_slot_t *slot,
                              hvd_env_list_t *env) {
    hvd__env_list_init(env);
    hvd_status_t st = HVD_OK;
    for (char **e = environ; *e && st == HVD_OK; e++) {
        const char *eq = strchr(*e, '=');
        if (!eq || excluded_env(*e))
            continue;
        char name[256];
        size_t nl = (size_t)(eq - *e);
        if (nl >= sizeof name)
            continue;
        memcpy(name, *e, nl);
        name[nl] = '\0';
        st = hvd__env_list_set(env, name, eq + 1);
    }
    if (st == HVD_OK && cfg->exports)
        st = hvd__env_list_merge(env, cfg->exports);
    char secret_hex[HVD_SECRET_HEX_LEN + 1];
    hvd__secret_to_hex(cfg->secret, secret_hex);
    struct {
        const char *name;
        int value;
    } ints[] = {{"HOROVOD_RANK", slot->rank},
                {"HOROVOD_SIZE", slot->size},
                {"HOROVOD_LOCAL_RANK", slot->local_rank},
                {"HOROVOD_LOCAL_SIZE", slot->local_size},
                {"HOROVOD_CROSS_RANK", slot->cross_rank},
                {"HOROVOD_CROSS_SIZE", slot->cross_size}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0] && st == HVD_OK; i++)
        st = hvd__env_list_setf(env, ints[i].name, "%d", ints[i].value);
    if (st == HVD_OK)
        st = hvd__env_list_set(env, "HOROVOD_HOSTNAME", slot->host);
    if (st == HVD_OK)
        st = hvd__env_list_set(env, "PYTHONUNBUFFERED", "1");
    if (st == HVD_OK)
        st = hvd__env_list_set(env, HVD_SECRET_ENV, secret_hex);
    explicit_bzero(secret_hex, sizeof secret_hex);
    if (st != HVD_OK)
        hvd__env_list_fini(env);
    return st;
}

/* --verbose: the command as `env VARS... command`, without the secret. */
static void print_command(const hvd_launch_config_t *cfg, const hvd_slot_t *slot) {
    char line[8192];
    size_t n = (size_t)snprintf(line, sizeof line,
                                "env HOROVOD_HOSTNAME=%s HOROVOD_RANK=%d HOROVOD_SIZE=%d "
                                "HOROVOD_LOCAL_RANK=%d HOROVOD_LOCAL_SIZE=%d "
                                "HOROVOD_CROSS_RANK=%d HOROVOD_CROSS_SIZE=%d",
                                slot->host, slot->rank, slot->size, slot->local_rank,
                                slot->local_size, slot->cross_rank, slot->cross_size);
    for (size_t i = 0; cfg->exports && i < cfg->exports->count && n < sizeof line; i++)
        n += (size_t)snprintf(line + n, sizeof line - n, " %s", cfg->exports->entries[i]);
    for (char *const *a = cfg->command; *a && n < sizeof line; a++)
        n += (size_t)snprintf(line + n, sizeof line - n, " %s", *a);
    if (n >= sizeof line)
        n = sizeof line - 1;
    dprintf(cfg->out_fd, "%.*s\n", (int)n, line);
}

static const char *signal_name(int sig) {
    static const struct {
        int sig;
        const char *name;
    } names[] = {{SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"},
                 {SIGILL, "SIGILL"},   {SIGABRT, "SIGABRT"}, {SIGFPE, "SIGFPE"},
                 {SIGKILL, "SIGKILL"}, {SIGSEGV, "SIGSEGV"}, {SIGPIPE, "SIGPIPE"},
                 {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGBUS, "SIGBUS"},
                 {SIGUSR1, "SIGUSR1"}, {SIGUSR2, "SIGUSR2"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].sig == sig)
            return names[i].name;
    return "signal";
}

static void describe_status(int wait_status, char *out, size_t out_size) {
    if (WIFSIGNALED(wait_status))
        snprintf(out, out_size, "killed by signal %d (%s)", WTERMSIG(wait_status),
                 signal_name(WTERMSIG(wait_status)));
    else
        snprintf(out, out_size, "exit code %d", hvd__spawn_exit_code(wait_status));
}

static void stop_all(job_t *job) {
    int64_t now = hvd__clock_now_ms();
    for (size_t i = 0; i < job->n; i++) {
        rank_t *r = &job->ranks[i];
        if (r->running && !r->stop_ms) {
            hvd__spawn_stop(&r->proc);
            r->stop_ms = now;
        }
    }
}

static void on_final_status(job_t *job, size_t i, int wait_status) {
    rank_t *r = &job->ranks[i];
    r->reported = 1;
    r->wait_status = wait_status;
    int code = hvd__spawn_exit_code(wait_status);
    /* Ranks we stopped are casualties, not causes. */
    if (code == 0 || r->stop_ms || job->first_failed >= 0 || job->interrupted)
        return;
    job->first_failed = (int)i;
    dprintf(job->cfg->err_fd, "Process %d exit with status code %d.\n", r->slot->rank, code);
    if (job->n > 1)
        dprintf(job->cfg->err_fd, "Terminating remaining workers after failure of Process %d.\n",
                r->slot->rank);
    stop_all(job);
}

static void reap(job_t *job) {
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        for (size_t i = 0; i < job->n; i++) {
            rank_t *r = &job->ranks[i];
            if (r->proc.pid != pid)
                continue;
            r->running = 0;
            if (!r->reported) {
                int status;
                /* the final report is written before the middleman exits */
                if (hvd__spawn_read_report(&r->proc, &status) == 1)
                    on_final_status(job, i, status);
                else /* middleman killed: its own status is all we know */
                    on_final_status(job, i, st);
            }
        }
    }
}

/* Backstop for a middleman that does not finish (stopped, or stuck): kill it and its
 * command's process group. */
static void enforce_deadlines(job_t *job) {
    int64_t now = hvd__clock_now_ms();
    for (size_t i = 0; i < job->n; i++) {
        rank_t *r = &job->ranks[i];
        if (r->running && r->stop_ms && now - r->stop_ms > job->cfg->kill_grace_ms + BACKSTOP_MS) {
            if (r->proc.cmd_pid > 0)
                kill(-r->proc.cmd_pid, SIGKILL);
            kill(r->proc.pid, SIGKILL);
        }
    }
}

static void read_stream(rank_t *r, int is_err) {
    int fd = is_err ? r->proc.err_fd : r->proc.out_fd;
    hvd_output_stream_t *s = is_err ? &r->err : &r->out;
    char buf[65536];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n > 0) {
            hvd__output_stream_feed(s, buf, (size_t)n);
            if ((size_t)n < sizeof buf)
                return;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        hvd__output_stream_eof(s); /* EOF or error: the stream is over */
        if (is_err)
            r->err_open = 0;
        else
            r->out_open = 0;
        return;
    }
}

static void report_failure(job_t *job) {
    rank_t *r = &job->ranks[job->first_failed];
    char what[96];
    describe_status(r->wait_status, what, sizeof what);
    int fd = job->cfg->err_fd;
    dprintf(fd, "horovodrun: the job failed: rank %d (host %s) was the first to fail, with %s.\n",
            r->slot->rank, r->slot->host, what);
    if (r->err.tail_count) {
        dprintf(fd, "horovodrun: last stderr lines of rank %d:\n", r->slot->rank);
        hvd__output_stream_write_tail(&r->err, fd, "    ");
    } else {
        dprintf(fd, "horovodrun: rank %d wrote nothing to stderr.\n", r->slot->rank);
    }
}

static hvd_status_t start_rank(job_t *job, size_t i) {
    const hvd_launch_config_t *cfg = job->cfg;
    rank_t *r = &job->ranks[i];
    int out_file = -1, err_file = -1;
    hvd_status_t st;
    if (cfg->output_dir) {
        st = hvd__output_open_files(cfg->output_dir, r->slot->rank, (int)job->n, &out_file,
                                    &err_file);
        if (st != HVD_OK)
            return st;
    }
    hvd__output_stream_init(&r->out, r->slot->rank, 0, cfg->out_fd, out_file,
                            cfg->prefix_timestamp);
    hvd__output_stream_init(&r->err, r->slot->rank, 1, cfg->err_fd, err_file,
                            cfg->prefix_timestamp);
    hvd_env_list_t env;
    st = build_env(cfg, r->slot, &env);
    if (st != HVD_OK)
        return st;
    if (cfg->verbose)
        print_command(cfg, r->slot);
    hvd_spawn_config_t sc = {
        .argv = cfg->command, .envp = env.entries, .grace_ms = cfg->kill_grace_ms};
    st = hvd__spawn_start(&sc, &r->proc);
    /* the environment holds the secret: wipe it before freeing */
    for (size_t k = 0; k < env.count; k++)
        explicit_bzero(env.entries[k], strlen(env.entries[k]));
    hvd__env_list_fini(&env);
    if (st != HVD_OK)
        return hvd__error_wrap(st, "rank %d", r->slot->rank);
    r->running = r->out_open = r->err_open = 1;
    return HVD_OK;
}

/* poll() entries: the signalfd, then per rank ctl, out, err. */
static size_t fill_pollfds(job_t *job, struct pollfd *p, int sfd) {
    size_t k = 0;
    p[k++] = (struct pollfd){.fd = sfd, .events = POLLIN};
    for (size_t i = 0; i < job->n; i++) {
        rank_t *r = &job->ranks[i];
        p[k++] = (struct pollfd){.fd = r->running && !r->reported ? r->proc.ctl_fd : -1,
                                 .events = POLLIN};
        p[k++] = (struct pollfd){.fd = r->out_open ? r->proc.out_fd : -1, .events = POLLIN};
        p[k++] = (struct pollfd){.fd = r->err_open ? r->proc.err_fd : -1, .events = POLLIN};
    }
    return k;
}

static void on_signals(job_t *job, int sfd) {
    struct signalfd_siginfo si;
    while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo == SIGCHLD)
            continue; /* reaped below in any case */
        if (!job->interrupted) {
            job->interrupted = (int)si.ssi_signo;
            dprintf(job->cfg->err_fd, "horovodrun: got %s, terminating all ranks.\n",
                    signal_name((int)si.ssi_signo));
            stop_all(job);
        } else {
            /* a second signal: no more grace */
            for (size_t i = 0; i < job->n; i++) {
                rank_t *r = &job->ranks[i];
                if (r->running && r->proc.cmd_pid > 0)
                    kill(-r->proc.cmd_pid, SIGKILL);
                if (r->running)
                    kill(r->proc.pid, SIGKILL);
            }
        }
    }
}

static int any_open(const job_t *job, int running_only) {
    for (size_t i = 0; i < job->n; i++) {
        const rank_t *r = &job->ranks[i];
        if (r->running || (!running_only && (r->out_open || r->err_open)))
            return 1;
    }
    return 0;
}

static void run_loop(job_t *job, int sfd) {
    size_t max = 1 + 3 * job->n;
    struct pollfd *p = calloc(max, sizeof *p);
    if (!p)
        return;
    int64_t drain_deadline = 0;
    while (any_open(job, 0)) {
        if (!any_open(job, 1)) {
            /* Every middleman is gone; a stray descendant might still hold a pipe. */
            if (!drain_deadline)
                drain_deadline = hvd__clock_now_ms() + DRAIN_MS;
            else if (hvd__clock_now_ms() >= drain_deadline)
                break;
        }
        size_t k = fill_pollfds(job, p, sfd);
        int timeout = drain_deadline ? hvd__clock_remaining_ms(drain_deadline) : 200;
        int n = poll(p, k, timeout > 200 ? 200 : timeout);
        if (n < 0 && errno != EINTR)
            break;
        if (n > 0 && p[0].revents)
            on_signals(job, sfd);
        for (size_t i = 0; n > 0 && i < job->n; i++) {
            rank_t *r = &job->ranks[i];
            struct pollfd *q = &p[1 + 3 * i];
            if (q[0].revents) {
                int status;
                int got = hvd__spawn_read_report(&r->proc, &status);
                if (got == 1)
                    on_final_status(job, i, status);
            }
            if (q[1].revents)
                read_stream(r, 0);
            if (q[2].revents)
                read_stream(r, 1);
        }
        reap(job);
        enforce_deadlines(job);
    }
    free(p);
}

hvd_status_t hvd__launch_run(const hvd_launch_config_t *cfg, int *exit_code_p) {
    job_t job = {.cfg = cfg, .n = cfg->plan->count, .first_failed = -1};
    job.ranks = calloc(job.n, sizeof *job.ranks);
    if (!job.ranks)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for %zu ranks", job.n);
    /* SIGCHLD, SIGINT, SIGTERM and SIGHUP arrive through a signalfd; the caller blocked them in
     * every thread before starting any (main.c), and we block them here too for tests that
     * call this directly from a single thread. */
    sigset_t mask, old;
    hvd__spawn_launcher_signals(&mask);
    pthread_sigmask(SIG_BLOCK, &mask, &old);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    hvd_status_t st = HVD_OK;
    if (sfd < 0) {
        st = hvd__error_set(HVD_ERR_IO, "signalfd: %s", strerror(errno));
        goto out;
    }
    for (size_t i = 0; i < job.n; i++) {
        rank_t *r = &job.ranks[i];
        r->slot = &cfg->plan->slots[i];
        r->proc.out_fd = r->proc.err_fd = r->proc.ctl_fd = -1;
        hvd__output_stream_init(&r->out, r->slot->rank, 0, cfg->out_fd, -1, 0);
        hvd__output_stream_init(&r->err, r->slot->rank, 1, cfg->err_fd, -1, 0);
    }
    for (size_t i = 0; i < job.n; i++) {
        st = start_rank(&job, i);
        if (st != HVD_OK) {
            dprintf(cfg->err_fd, "horovodrun: cannot start rank %zu: %s\n", i, hvd_last_error());
            stop_all(&job);
            break;
        }
    }
    run_loop(&job, sfd);
    /* whatever is still running now is past every deadline */
    for (size_t i = 0; i < job.n; i++) {
        rank_t *r = &job.ranks[i];
        if (r->running) {
            if (r->proc.cmd_pid > 0)
                kill(-r->proc.cmd_pid, SIGKILL);
            kill(r->proc.pid, SIGKILL);
            waitpid(r->proc.pid, NULL, 0);
        }
    }
    if (st == HVD_OK) {
        if (job.interrupted)
            *exit_code_p = 128 + job.interrupted;
        else if (job.first_failed >= 0) {
            report_failure(&job);
            *exit_code_p = hvd__spawn_exit_code(job.ranks[job.first_failed].wait_status);
        } else
            *exit_code_p = 0;
    }
    close(sfd);
out:
    for (size_t i = 0; i < job.n; i++) {
        hvd__spawn_close(&job.ranks[i].proc);
        hvd__output_stream_fini(&job.ranks[i].out);
        hvd__output_stream_fini(&job.ranks[i].err);
    }
    free(job.ranks);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return st;
}
