#include "runner/launch.h"

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/params.h"
#include "os/spawn.h"
#include "runner/output.h"
#include "runner/remote_exec.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* A middleman asked to stop that is still running this long after its grace period is
 * SIGKILLed (with its command's process group). */
#define BACKSTOP_MS 5000
/* A middleman SIGKILLed this long ago and still not reaped (stuck in the kernel) is given up
 * on, so that horovodrun always ends. */
#define ABANDON_MS 5000
/* After a middleman is reaped, output still in its pipes is drained for at most this long (a
 * process that escaped the tree could hold a pipe open forever). */
#define DRAIN_MS 2000
/* Longest sleep of the event loop without events (reaping does not rely on SIGCHLD alone). */
#define IDLE_TICK_MS 1000
#define BUSY_TICK_MS 100
#define READ_CHUNK 65536
/* While starting many ranks, look at events after every few, so that an early failure or a
 * signal stops the start. */
#define START_BATCH 8

enum { EV_OUT = 0, EV_ERR = 1, EV_CTL = 2 };
#define EV_SIGNAL UINT64_MAX

typedef struct {
    const hvd_slot_t *slot;
    hvd_spawn_t proc;
    hvd_output_stream_t out, err;
    int started;
    int out_open, err_open, ctl_open; /* registered with epoll */
    int handled;                      /* final status looked at */
    int stopped;                      /* we asked it to stop: its exit is not a cause */
    int gone;                         /* middleman reaped or given up on */
    int64_t stop_ms, gone_ms;
} rank_t;

typedef struct {
    const hvd_launch_config_t *cfg;
    rank_t *ranks;
    size_t n;
    int epfd, sfd;
    int grace_ms;
    long nofile_soft; /* the limit ranks start with, when we raised ours; 0 otherwise */
    int stopping;     /* every rank was asked to stop */
    int first_failed; /* rank index, -1 */
    int interrupted;  /* signal that interrupted horovodrun, 0 if none */
    int exit_code;    /* set by the first of failure / interruption */
    size_t live;      /* middlemen started and not gone */
    size_t open_streams;
    int need_reap;
    int64_t last_reap_ms;
    char *rbuf;
    hvd_env_list_t base; /* environment shared by every rank */
} job_t;

/* ---- messages ------------------------------------------------------------------------------ */

static void write_str(int fd, const char *p, size_t len) {
    for (size_t off = 0; off < len;) {
        ssize_t w = write(fd, p + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return; /* a closed console is not a reason to stop the job */
        off += (size_t)w;
    }
}

/* The launcher's own messages: one write each, so they do not split tagged lines. */
static void say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(int fd, const char *fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n >= 0)
        write_str(fd, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* A growable string for --verbose lines. */
typedef struct {
    char *p;
    size_t len, cap;
    int failed;
} strbuf_t;

static void sb_add(strbuf_t *b, const char *s, size_t n) {
    if (b->failed)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *grown = realloc(b->p, cap);
        if (!grown) {
            b->failed = 1;
            return;
        }
        b->p = grown;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

/* Python's shlex.quote, as Horovod prints worker commands. */
static void sb_quoted(strbuf_t *b, const char *s) {
    char small[256];
    size_t need = hvd__shell_quote(s, small, sizeof small);
    if (need < sizeof small) {
        sb_add(b, small, need);
        return;
    }
    char *big = malloc(need + 1);
    if (!big) {
        b->failed = 1;
        return;
    }
    hvd__shell_quote(s, big, need + 1);
    sb_add(b, big, need);
    free(big);
}

static void sb_assignment(strbuf_t *b, const char *entry) {
    const char *eq = strchr(entry, '=');
    if (!eq)
        return;
    sb_add(b, " ", 1);
    sb_add(b, entry, (size_t)(eq - entry) + 1);
    sb_quoted(b, eq + 1);
}

/* ---- environment --------------------------------------------------------------------------- */

/* Set last for each rank, so that they win over anything inherited or exported. */
static const char *const slot_names[] = {
    "HOROVOD_HOSTNAME",   "HOROVOD_RANK",       "HOROVOD_SIZE",
    "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK",
    "HOROVOD_CROSS_SIZE", "PYTHONUNBUFFERED",   HVD_SECRET_ENV};

static int is_secret_entry(const char *entry) {
    size_t n = strlen(HVD_SECRET_ENV);
    return strncmp(entry, HVD_SECRET_ENV, n) == 0 && entry[n] == '=';
}

/* Variables of horovodrun's environment that workers do not inherit: Horovod's regexes
 * BASH_FUNC_.*, OLDPWD and .*CUDA_VISIBLE_DEVICES, matched as re.match does (anchored at the
 * start only, so OLDPWD also covers OLDPWD_X and the last any name containing
 * CUDA_VISIBLE_DEVICES), plus an inherited secret (each job has its own). */
int hvd__launch_excluded_name(const char *name, size_t len) {
    return (len >= 10 && memcmp(name, "BASH_FUNC_", 10) == 0) ||
           (len >= 6 && memcmp(name, "OLDPWD", 6) == 0) ||
           memmem(name, len, "CUDA_VISIBLE_DEVICES", 20) != NULL ||
           (len == strlen(HVD_SECRET_ENV) && memcmp(name, HVD_SECRET_ENV, len) == 0);
}

static hvd_status_t build_base_env(job_t *job) {
    hvd_env_list_t *env = &job->base;
    hvd__env_list_init(env);
    hvd_status_t st = hvd__env_list_set_entries(env, environ, hvd__launch_excluded_name);
    if (st == HVD_OK && job->cfg->exports)
        st = hvd__env_list_merge(env, job->cfg->exports);
    for (size_t i = 0; i < sizeof slot_names / sizeof slot_names[0]; i++)
        hvd__env_list_unset(env, slot_names[i]);
    return st;
}

static hvd_status_t slot_env(const job_t *job, const hvd_slot_t *slot, hvd_env_list_t *vars) {
    hvd__env_list_init(vars);
    hvd_status_t st = hvd__env_list_set(vars, "HOROVOD_HOSTNAME", slot->host);
    const struct {
        const char *name;
        int value;
    } ints[] = {{"HOROVOD_RANK", slot->rank},
                {"HOROVOD_SIZE", slot->size},
                {"HOROVOD_LOCAL_RANK", slot->local_rank},
                {"HOROVOD_LOCAL_SIZE", slot->local_size},
                {"HOROVOD_CROSS_RANK", slot->cross_rank},
                {"HOROVOD_CROSS_SIZE", slot->cross_size}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0] && st == HVD_OK; i++)
        st = hvd__env_list_setf(vars, ints[i].name, "%d", ints[i].value);
    if (st == HVD_OK)
        st = hvd__env_list_set(vars, "PYTHONUNBUFFERED", "1");
    if (st == HVD_OK && job->cfg->secret) {
        char hex[HVD_SECRET_HEX_LEN + 1];
        hvd__secret_to_hex(job->cfg->secret, hex);
        st = hvd__env_list_set(vars, HVD_SECRET_ENV, hex);
        explicit_bzero(hex, sizeof hex);
    }
    if (st != HVD_OK)
        hvd__env_list_fini(vars);
    return st;
}

static void wipe_env(hvd_env_list_t *vars) {
    for (size_t i = 0; i < vars->count; i++)
        if (is_secret_entry(vars->entries[i]))
            explicit_bzero(vars->entries[i], strlen(vars->entries[i]));
    hvd__env_list_fini(vars);
}

/* --verbose: `env <slot vars> <exports> <command>`, quoted like Horovod's, without the secret
 * and without the inherited environment (Horovod prints all of it, issue #2484). */
static void print_command(const job_t *job, char *const *ssh_argv, const hvd_env_list_t *vars) {
    strbuf_t b = {0};
    for (char *const *a = ssh_argv; a && *a; a++) {
        sb_quoted(&b, *a);
        sb_add(&b, " ", 1);
    }
    if (ssh_argv) {
        /* what the remote side runs, from the spec ssh carries on its stdin */
        sb_add(&b, "<<< cd ", 7);
        sb_quoted(&b, job->cfg->cwd ? job->cfg->cwd : ".");
        sb_add(&b, " && ", 4);
    }
    sb_add(&b, "env", 3);
    for (size_t i = 0; i < vars->count; i++)
        if (!is_secret_entry(vars->entries[i]))
            sb_assignment(&b, vars->entries[i]);
    const hvd_env_list_t *ex = job->cfg->exports;
    for (size_t i = 0; ex && i < ex->count; i++) {
        const char *eq = strchr(ex->entries[i], '=');
        int overridden = 0;
        for (size_t k = 0; eq && k < sizeof slot_names / sizeof slot_names[0]; k++)
            overridden |=
                strlen(slot_names[k]) == (size_t)(eq - ex->entries[i]) &&
                strncmp(ex->entries[i], slot_names[k], (size_t)(eq - ex->entries[i])) == 0;
        if (!overridden)
            sb_assignment(&b, ex->entries[i]);
    }
    for (char *const *a = job->cfg->command; *a; a++) {
        sb_add(&b, " ", 1);
        sb_quoted(&b, *a);
    }
    sb_add(&b, "\n", 1);
    if (!b.failed)
        write_str(job->cfg->out_fd, b.p, b.len);
    free(b.p);
}

/* ---- ranks ----------------------------------------------------------------------------------- */

static int watch(job_t *job, int fd, uint64_t tag) {
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = tag};
    return epoll_ctl(job->epfd, EPOLL_CTL_ADD, fd, &ev);
}

static void close_stream(job_t *job, rank_t *r, int is_err) {
    int *open_p = is_err ? &r->err_open : &r->out_open;
    int *fd_p = is_err ? &r->proc.err_fd : &r->proc.out_fd;
    if (*open_p) {
        hvd__output_stream_eof(is_err ? &r->err : &r->out);
        epoll_ctl(job->epfd, EPOLL_CTL_DEL, *fd_p, NULL);
        *open_p = 0;
        job->open_streams--;
    }
    if (*fd_p >= 0)
        close(*fd_p);
    *fd_p = -1;
}

static void close_ctl(job_t *job, rank_t *r) {
    if (r->ctl_open)
        epoll_ctl(job->epfd, EPOLL_CTL_DEL, r->proc.ctl_fd, NULL);
    r->ctl_open = 0;
    if (r->proc.ctl_fd >= 0)
        close(r->proc.ctl_fd);
    r->proc.ctl_fd = -1;
}

static void stop_all(job_t *job) {
    job->stopping = 1;
    int64_t now = hvd__clock_now_ms();
    for (size_t i = 0; i < job->n; i++) {
        rank_t *r = &job->ranks[i];
        if (r->started && !r->gone && !r->stopped) {
            hvd__spawn_stop(&r->proc);
            r->stopped = 1;
            r->stop_ms = now;
        }
    }
}

/* The rank's command ended (or its middleman did): a non-zero exit of a rank we did not stop
 * fails the job. */
static void on_final(job_t *job, size_t i) {
    rank_t *r = &job->ranks[i];
    if (r->handled)
        return;
    r->handled = 1;
    int code = hvd__spawn_exit_code(hvd__spawn_status(&r->proc));
    if (code == 0 || r->stopped)
        return;
    say(job->cfg->err_fd, "Process %d exit with status code %d.\n", r->slot->rank, code);
    if (job->first_failed >= 0 || job->interrupted)
        return;
    job->first_failed = (int)i;
    job->exit_code = code;
    if (job->n > 1)
        say(job->cfg->err_fd, "Terminating remaining workers after failure of Process %d.\n",
            r->slot->rank);
    stop_all(job);
}

static void mark_gone(job_t *job, size_t i) {
    rank_t *r = &job->ranks[i];
    r->gone = 1;
    r->gone_ms = hvd__clock_now_ms();
    job->live--;
    on_final(job, i);
    close_ctl(job, r);
}

static void reap_all(job_t *job) {
    job->need_reap = 0;
    job->last_reap_ms = hvd__clock_now_ms();
    for (size_t i = 0; i < job->n; i++) {
        rank_t *r = &job->ranks[i];
        if (r->started && !r->gone && hvd__spawn_reap(&r->proc))
            mark_gone(job, i);
    }
}

static void read_stream(job_t *job, rank_t *r, int is_err) {
    int fd = is_err ? r->proc.err_fd : r->proc.out_fd;
    /* one read per wake-up: a chatty rank cannot starve the others */
    ssize_t n = read(fd, job->rbuf, READ_CHUNK);
    if (n > 0) {
        hvd__output_stream_feed(is_err ? &r->err : &r->out, job->rbuf, (size_t)n);
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    close_stream(job, r, is_err); /* end of file, or an error: the stream is over */
}

static void on_signals(job_t *job) {
    struct signalfd_siginfo si;
    while (read(job->sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        int sig = (int)si.ssi_signo;
        if (sig == SIGCHLD) {
            job->need_reap = 1;
            continue;
        }
        const char *abbrev = sigabbrev_np(sig);
        if (!job->stopping) {
            job->interrupted = sig;
            job->exit_code = 128 + sig;
            say(job->cfg->err_fd, "horovodrun: received SIG%s, terminating all ranks.\n",
                abbrev ? abbrev : "?");
            stop_all(job);
        } else {
            /* asked again while ending the job: no more grace */
            say(job->cfg->err_fd, "horovodrun: received SIG%s again, killing all ranks now.\n",
                abbrev ? abbrev : "?");
            for (size_t i = 0; i < job->n; i++)
                if (job->ranks[i].started && !job->ranks[i].gone)
                    hvd__spawn_kill(&job->ranks[i].proc);
        }
    }
}

static void on_event(job_t *job, uint64_t tag) {
    if (tag == EV_SIGNAL) {
        on_signals(job);
        return;
    }
    size_t i = (size_t)(tag >> 2);
    rank_t *r = &job->ranks[i];
    switch ((int)(tag & 3)) {
    case EV_OUT:
        read_stream(job, r, 0);
        break;
    case EV_ERR:
        read_stream(job, r, 1);
        break;
    case EV_CTL:
        if (hvd__spawn_read_report(&r->proc))
            on_final(job, i); /* the command ended: act now, the middleman cleans up after */
        if (r->proc.ctl_eof) {
            /* the middleman is exiting: reap it soon, stop watching the socket */
            epoll_ctl(job->epfd, EPOLL_CTL_DEL, r->proc.ctl_fd, NULL);
            r->ctl_open = 0;
            job->need_reap = 1;
        }
        break;
    }
}

/* Deadlines that keep horovodrun from waiting forever on a middleman or a pipe. */
static void enforce_deadlines(job_t *job) {
    int64_t now = hvd__clock_now_ms();
    for (size_t i = 0; i < job->n; i++) {
        rank_t *r = &job->ranks[i];
        if (!r->started)
            continue;
        if (!r->gone && r->stopped && !r->proc.kill_sent &&
            now - r->stop_ms >= job->grace_ms + BACKSTOP_MS) {
            say(job->cfg->err_fd,
                "horovodrun: rank %d (supervisor pid %d) did not end %d ms after being asked "
                "to; killing it.\n",
                r->slot->rank, (int)r->proc.pid, job->grace_ms + BACKSTOP_MS);
            hvd__spawn_kill(&r->proc);
        }
        if (!r->gone && r->proc.kill_sent && now - r->proc.kill_sent >= ABANDON_MS) {
            say(job->cfg->err_fd,
                "horovodrun: rank %d (supervisor pid %d) is still there %d ms after SIGKILL; "
                "giving up on it.\n",
                r->slot->rank, (int)r->proc.pid, ABANDON_MS);
            if (!r->proc.reported)
                r->proc.mm_status = SIGKILL;
            mark_gone(job, i);
        }
        if (r->gone && (r->out_open || r->err_open) && now - r->gone_ms >= DRAIN_MS) {
            /* something outside the rank's tree holds its pipes: stop waiting for them */
            close_stream(job, r, 0);
            close_stream(job, r, 1);
        }
    }
}

static void loop_once(job_t *job, int timeout_ms) {
    struct epoll_event evs[64];
    int k = epoll_wait(job->epfd, evs, 64, timeout_ms);
    for (int e = 0; e < k; e++)
        on_event(job, evs[e].data.u64);
    if (k < 0 && errno != EINTR)
        hvd__clock_sleep_ms(timeout_ms); /* cannot wait on fds: keep the cadence */
    if (job->need_reap || hvd__clock_now_ms() - job->last_reap_ms >= IDLE_TICK_MS)
        reap_all(job);
    enforce_deadlines(job);
}

/* ssh's argv for a remote rank and the spec it carries on stdin (envp: the rank's whole
 * environment, secret included). */
static hvd_status_t remote_command(const job_t *job, const char *host, char *const *envp,
                                   char ***ssh_argv_p, uint8_t **spec_p, size_t *spec_len_p) {
    const hvd_launch_config_t *cfg = job->cfg;
    hvd_status_t st =
        hvd__ssh_argv_program(cfg->ssh, host, cfg->remote_exe ? cfg->remote_exe : "horovodrun",
                              HVD_EXEC_OPTION, ssh_argv_p);
    if (st == HVD_OK) {
        st = hvd__exec_spec_encode(cfg->cwd ? cfg->cwd : ".", envp, cfg->command, spec_p,
                                   spec_len_p);
        if (st != HVD_OK) {
            hvd__ssh_argv_free(*ssh_argv_p);
            *ssh_argv_p = NULL;
        }
    }
    return st;
}

static hvd_status_t start_rank(job_t *job, size_t i) {
    const hvd_launch_config_t *cfg = job->cfg;
    rank_t *r = &job->ranks[i];
    hvd_status_t st;
    if (cfg->output_dir) {
        st = hvd__output_open_files(cfg->output_dir, r->slot->rank, (int)job->n, &r->out.file_fd,
                                    &r->err.file_fd);
        if (st != HVD_OK)
            return st;
    }
    hvd_env_list_t vars;
    st = slot_env(job, r->slot, &vars);
    if (st != HVD_OK)
        return st;
    size_t nb = job->base.count;
    char **envp = malloc((nb + vars.count + 1) * sizeof *envp);
    if (!envp) {
        wipe_env(&vars);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory building an environment");
    }
    if (nb)
        memcpy(envp, job->base.entries, nb * sizeof *envp);
    memcpy(envp + nb, vars.entries, vars.count * sizeof *envp);
    envp[nb + vars.count] = NULL;
    hvd_spawn_config_t sc = {.argv = cfg->command,
                             .envp = envp,
                             .grace_ms = job->grace_ms,
                             .nofile_soft = job->nofile_soft};
    char **ssh_argv = NULL;
    uint8_t *spec = NULL;
    size_t spec_len = 0;
    if (cfg->remote && cfg->remote[i]) {
        /* ssh itself runs with horovodrun's environment; the rank's goes in the spec */
        st = remote_command(job, r->slot->host, envp, &ssh_argv, &spec, &spec_len);
        sc.argv = ssh_argv;
        sc.envp = environ;
        sc.stdin_data = spec;
        sc.stdin_len = spec_len;
    }
    if (st == HVD_OK && cfg->verbose)
        print_command(job, ssh_argv, &vars);
    if (st == HVD_OK)
        st = hvd__spawn_start(&sc, &r->proc);
    if (spec) {
        explicit_bzero(spec, spec_len);
        free(spec);
    }
    hvd__ssh_argv_free(ssh_argv);
    free(envp);
    wipe_env(&vars);
    if (st != HVD_OK)
        return st;
    r->started = 1;
    job->live++;
    if (watch(job, r->proc.out_fd, (uint64_t)i << 2 | EV_OUT) == 0) {
        r->out_open = 1;
        job->open_streams++;
    }
    if (watch(job, r->proc.err_fd, (uint64_t)i << 2 | EV_ERR) == 0) {
        r->err_open = 1;
        job->open_streams++;
    }
    r->ctl_open = watch(job, r->proc.ctl_fd, (uint64_t)i << 2 | EV_CTL) == 0;
    if (!r->out_open || !r->err_open || !r->ctl_open)
        return hvd__error_set(HVD_ERR_IO, "cannot watch rank %d's pipes: %s", r->slot->rank,
                              strerror(errno));
    return HVD_OK;
}

/* Each rank holds 3 fds here (5 with --output-filename); raise the soft limit to fit them,
 * and let ranks start with the limit horovodrun was given. */
static void fit_fd_limit(job_t *job, struct rlimit *saved, int *raised) {
    *raised = 0;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return;
    rlim_t need = 64 + (rlim_t)job->n * (job->cfg->output_dir ? 5 : 3);
    if (rl.rlim_cur >= need)
        return;
    *saved = rl;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0) {
        *raised = 1;
        job->nofile_soft = (long)saved->rlim_cur;
    }
}

static void report_failure(const job_t *job) {
    const rank_t *r = &job->ranks[job->first_failed];
    int fd = job->cfg->err_fd;
    char what[96];
    hvd__spawn_describe_status(hvd__spawn_status(&r->proc), what, sizeof what);
    say(fd, "horovodrun: rank %d (host %s) was the first to fail: %s.\n", r->slot->rank,
        r->slot->host, what);
    if (r->err.tail_count || r->err.tail_cr) {
        say(fd, "horovodrun: last lines rank %d wrote to stderr:\n", r->slot->rank);
        hvd__output_stream_write_tail(&r->err, fd, "    ");
    } else {
        say(fd, "horovodrun: rank %d wrote nothing to stderr.\n", r->slot->rank);
    }
}

hvd_status_t hvd__launch_run(const hvd_launch_config_t *cfg, int *exit_code_p) {
    if (!cfg->plan || cfg->plan->count == 0)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "nothing to launch: the slot plan is empty");
    if (!cfg->command || !cfg->command[0] || !cfg->command[0][0])
        return hvd__error_set(HVD_ERR_INVALID_ARG, "nothing to launch: no command");
    job_t job = {.cfg = cfg,
                 .n = cfg->plan->count,
                 .epfd = -1,
                 .sfd = -1,
                 .grace_ms =
                     cfg->kill_grace_ms > 0 ? cfg->kill_grace_ms : HVD_SPAWN_DEFAULT_GRACE_MS,
                 .first_failed = -1};
    hvd_status_t st = HVD_OK;
    job.ranks = calloc(job.n, sizeof *job.ranks);
    if (!job.ranks)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for %zu ranks", job.n);
    /* every rank's fds and streams are valid (closed) from here on, for the cleanup */
    for (size_t i = 0; i < job.n; i++) {
        rank_t *r = &job.ranks[i];
        r->slot = &cfg->plan->slots[i];
        r->proc.out_fd = r->proc.err_fd = r->proc.ctl_fd = -1;
        hvd__output_stream_init(&r->out, r->slot->rank, 0, cfg->out_fd, -1, cfg->prefix_timestamp);
        hvd__output_stream_init(&r->err, r->slot->rank, 1, cfg->err_fd, -1, cfg->prefix_timestamp);
    }
    job.rbuf = malloc(READ_CHUNK);
    if (!job.rbuf) {
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for the launch loop");
        goto free_job;
    }
    st = build_base_env(&job);
    if (st != HVD_OK)
        goto free_job;

    /* SIGCHLD, SIGINT, SIGTERM and SIGHUP arrive through a signalfd. */
    sigset_t mask, old_mask;
    hvd__spawn_launcher_signals(&mask);
    pthread_sigmask(SIG_BLOCK, &mask, &old_mask);
    job.sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    job.epfd = epoll_create1(EPOLL_CLOEXEC);
    if (job.sfd < 0 || job.epfd < 0 || watch(&job, job.sfd, EV_SIGNAL) != 0) {
        st = hvd__error_set(HVD_ERR_IO, "cannot set up the launch loop: %s", strerror(errno));
        goto restore_signals;
    }
    struct rlimit saved_nofile;
    int raised_nofile;
    fit_fd_limit(&job, &saved_nofile, &raised_nofile);

    /* Start every rank, looking at events now and then. */
    char start_error[512] = "";
    for (size_t i = 0; i < job.n && !job.stopping; i++) {
        st = start_rank(&job, i);
        if (st != HVD_OK) {
            snprintf(start_error, sizeof start_error, "cannot start rank %d: %s",
                     job.ranks[i].slot->rank, hvd_last_error());
            say(cfg->err_fd, "horovodrun: %s\n", start_error);
            stop_all(&job);
            break;
        }
        if (i % START_BATCH == START_BATCH - 1)
            loop_once(&job, 0);
    }
    /* Supervise until every middleman is gone and every pipe drained. */
    while (job.live > 0 || job.open_streams > 0)
        loop_once(&job, job.stopping || job.live == 0 ? BUSY_TICK_MS : IDLE_TICK_MS);

    if (st != HVD_OK) {
        hvd__error_set(st, "%s", start_error);
    } else {
        if (job.first_failed >= 0)
            report_failure(&job);
        *exit_code_p = job.exit_code;
    }
    if (raised_nofile)
        setrlimit(RLIMIT_NOFILE, &saved_nofile);
restore_signals:
    if (job.epfd >= 0)
        close(job.epfd);
    if (job.sfd >= 0)
        close(job.sfd);
    pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
free_job:
    for (size_t i = 0; i < job.n; i++) {
        hvd__spawn_close(&job.ranks[i].proc);
        hvd__output_stream_fini(&job.ranks[i].out);
        hvd__output_stream_fini(&job.ranks[i].err);
    }
    hvd__env_list_fini(&job.base);
    free(job.rbuf);
    free(job.ranks);
    return st;
}
