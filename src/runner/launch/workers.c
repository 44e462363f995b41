/* The worker pool (workers.h): a local worker under its own middleman, remote ones as ranks of a
 * host session (ssh to --internal-exec, frames read with exec_wire.h). One epoll set holds every
 * pipe and control socket, tagged with its owner's index, plus the signalfd and a wake eventfd;
 * RLIMIT_NOFILE is raised to fit them. */
#include "runner/launch/workers.h"

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/params.h"
#include "os/spawn.h"
#include "runner/launch/output.h"
#include "runner/launch/exec_wire.h"
#include "runner/launch/remote_exec.h"
#include "wire/le.h"
#include "runner/process/say.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
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
/* Reaping does not rely on SIGCHLD alone: look at least this often. */
#define REAP_TICK_MS 1000
#define READ_CHUNK 65536
/* How long destroy waits for workers it stops (grace + backstop + abandon cover the rest). */
#define DESTROY_TICK_MS 100

/* Event tags: a worker's or a session's index shifted left, and which of its fds is ready. */
enum { EV_OUT = 0, EV_ERR = 1, EV_CTL = 2, EV_S_OUT = 3, EV_S_ERR = 4, EV_S_CTL = 5 };
#define EV_SHIFT 3
#define EV_SIGNAL UINT64_MAX
#define EV_WAKE (UINT64_MAX - 1)

/* One ssh session running every rank of one start on one remote host, under `horovodrun
 * --internal-exec` over there (remote_exec.h): frames come back on ssh's stdout
 * (exec_wire.h), ssh's own messages on its stderr, stop/kill commands go out on its stdin. */
typedef struct {
    hvd_spawn_t proc; /* ssh, under a middleman */
    int in_fd;        /* our write end of ssh's stdin */
    char *host;
    size_t *ids, n; /* its workers' ids, by index in the session */
    size_t left;    /* of them not ended yet */
    hvd_exec_reader_t rx;
    hvd_output_stream_t err; /* tagged as the session's first rank */
    int out_open, err_open, ctl_open;
    int ready;    /* READY came (or ssh ended): no longer connecting */
    int finished; /* ssh ended and its workers were ended */
    int gone;     /* its middleman reaped or given up on */
    int64_t stop_ms, idle_ms;
} session_t;

typedef struct {
    hvd_slot_t slot; /* host owned */
    /* A local worker's middleman. A remote worker has no process here: its status is filled
     * in from its session's frames, and kill_sent is when KILL was sent for it. */
    hvd_spawn_t proc;
    session_t *s;   /* remote: its host session, else NULL */
    uint32_t index; /* in that session */
    hvd_output_stream_t out, err;
    int out_open, err_open, ctl_open; /* registered with epoll */
    int handled;                      /* final status passed to on_exit */
    int stopped;                      /* we asked it to stop: its exit is not a cause */
    int remote_stopped;               /* remote: its command is stopped by a signal (STATE) */
    long remote_pid;                  /* remote: its command's pid over there (STATE), or 0 */
    int gone;                         /* middleman reaped or given up on */
    int64_t stop_ms, gone_ms;
} worker_t;

struct hvd_workers {
    const hvd_workers_config_t *cfg;
    worker_t **w;
    size_t n, cap;
    session_t **sessions;
    size_t ns, scap;
    size_t sessions_live; /* ssh middlemen not gone */
    size_t connecting;    /* sessions started that did not say READY yet */
    int epfd, sfd, wakefd;
    sigset_t old_mask;
    int grace_ms;
    long nofile_soft; /* the limit workers start with, when we raised ours; 0 otherwise */
    struct rlimit saved_nofile;
    int raised_nofile;
    int stopping;    /* every worker was asked to stop */
    int interrupted; /* signal that interrupted horovodrun, 0 if none */
    size_t live;     /* workers started and not gone */
    size_t open_streams;
    int need_reap;
    int64_t last_reap_ms;
    char *rbuf;
    hvd_env_list_t base; /* environment shared by every worker */
};

/* ---- messages ------------------------------------------------------------------------------ */

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
int hvd__workers_excluded_name(const char *name, size_t len) {
    return (len >= 10 && memcmp(name, "BASH_FUNC_", 10) == 0) ||
           (len >= 6 && memcmp(name, "OLDPWD", 6) == 0) ||
           memmem(name, len, "CUDA_VISIBLE_DEVICES", 20) != NULL ||
           (len == strlen(HVD_SECRET_ENV) && memcmp(name, HVD_SECRET_ENV, len) == 0);
}

int hvd__workers_not_job_variable(const char *name, size_t len) {
    return hvd__workers_excluded_name(name, len) ||
           !((len >= 9 && memcmp(name, "HOROVOD_", 8) == 0) ||
             (len >= 5 && memcmp(name, "HVD_", 4) == 0));
}

static hvd_status_t build_base_env(hvd_workers_t *w) {
    hvd_env_list_t *env = &w->base;
    hvd__env_list_init(env);
    int agent = w->cfg->ssh && w->cfg->ssh->agent;
    hvd_status_t st = hvd__env_list_set_entries(
        env, environ, agent ? hvd__workers_not_job_variable : hvd__workers_excluded_name);
    if (st == HVD_OK && w->cfg->exports)
        st = hvd__env_list_merge(env, w->cfg->exports);
    for (size_t i = 0; i < sizeof slot_names / sizeof slot_names[0]; i++)
        hvd__env_list_unset(env, slot_names[i]);
    return st;
}

static hvd_status_t slot_env(const hvd_workers_t *w, const hvd_slot_t *slot, hvd_env_list_t *vars) {
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
    if (st == HVD_OK && w->cfg->secret) {
        char hex[HVD_SECRET_HEX_LEN + 1];
        hvd__secret_to_hex(w->cfg->secret, hex);
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

static int is_slot_name(const char *entry) {
    const char *eq = strchr(entry, '=');
    for (size_t k = 0; eq && k < sizeof slot_names / sizeof slot_names[0]; k++)
        if (strlen(slot_names[k]) == (size_t)(eq - entry) &&
            strncmp(entry, slot_names[k], (size_t)(eq - entry)) == 0)
            return 1;
    return 0;
}

/* --verbose: `env <slot vars> <exports> <command>`, quoted like Horovod's, without the secret
 * and without the inherited environment (Horovod prints all of it, issue #2484). */
static void print_command(const hvd_workers_t *w, char *const *ssh_argv, const hvd_env_list_t *vars,
                          const hvd_env_list_t *extra) {
    strbuf_t b = {0};
    for (char *const *a = ssh_argv; a && *a; a++) {
        sb_quoted(&b, *a);
        sb_add(&b, " ", 1);
    }
    if (ssh_argv) {
        /* what the remote side runs, from the spec ssh carries on its stdin */
        sb_add(&b, "<<< cd ", 7);
        sb_quoted(&b, w->cfg->cwd ? w->cfg->cwd : ".");
        sb_add(&b, " && ", 4);
    }
    sb_add(&b, "env", 3);
    for (size_t i = 0; i < vars->count; i++)
        if (!is_secret_entry(vars->entries[i]))
            sb_assignment(&b, vars->entries[i]);
    const hvd_env_list_t *lists[] = {w->cfg->exports, extra};
    for (size_t l = 0; l < 2; l++)
        for (size_t i = 0; lists[l] && i < lists[l]->count; i++)
            if (!is_slot_name(lists[l]->entries[i]))
                sb_assignment(&b, lists[l]->entries[i]);
    for (char *const *a = w->cfg->command; *a; a++) {
        sb_add(&b, " ", 1);
        sb_quoted(&b, *a);
    }
    sb_add(&b, "\n", 1);
    if (!b.failed)
        hvd__say_bytes(w->cfg->out_fd, b.p, b.len);
    free(b.p);
}

/* ---- workers and host sessions ----------------------------------------------------------------
 */

static int watch(hvd_workers_t *w, int fd, uint64_t tag) {
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = tag};
    return epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev);
}

static uint64_t tag_of(size_t i, int kind) {
    return (uint64_t)i << EV_SHIFT | (uint64_t)kind;
}

/* Watch a started process's stdout, stderr and control socket under index i; first_kind is
 * EV_OUT for a worker, EV_S_OUT for a session (the other two kinds follow it). 1 when all
 * three are watched. */
static int watch_proc(hvd_workers_t *w, const hvd_spawn_t *proc, size_t i, int first_kind,
                      int *out_open, int *err_open, int *ctl_open) {
    if (watch(w, proc->out_fd, tag_of(i, first_kind)) == 0) {
        *out_open = 1;
        w->open_streams++;
    }
    if (watch(w, proc->err_fd, tag_of(i, first_kind + 1)) == 0) {
        *err_open = 1;
        w->open_streams++;
    }
    *ctl_open = watch(w, proc->ctl_fd, tag_of(i, first_kind + 2)) == 0;
    return *out_open && *err_open && *ctl_open;
}

static void close_ctl(hvd_workers_t *w, int *open_p, int *fd_p) {
    if (*open_p)
        epoll_ctl(w->epfd, EPOLL_CTL_DEL, *fd_p, NULL);
    *open_p = 0;
    if (*fd_p >= 0)
        close(*fd_p);
    *fd_p = -1;
}

static void session_stop(session_t *s) {
    if (!s->proc.stop_sent && !s->gone) {
        s->stop_ms = hvd__clock_now_ms();
        hvd__spawn_stop(&s->proc);
    }
}

/* Whether every rank of a session still running was asked to stop. */
static int all_stopped(const hvd_workers_t *w, const session_t *s) {
    for (size_t k = 0; k < s->n; k++) {
        const worker_t *r = w->w[s->ids[k]];
        if (!r->gone && !r->stopped)
            return 0;
    }
    return 1;
}

/* A command for one rank of a session (the caller marked the rank stopped first). It queues
 * behind the spec in ssh's input, so it also works while ssh is still connecting; but when
 * every rank of a session still connecting is to end, the session itself is ended (nothing
 * to wait for), and a command that cannot be written (the session is broken, or stalled with
 * its pipe full) ends the whole session too: their supervisor's input ends. */
static void session_command(const hvd_workers_t *w, session_t *s, const worker_t *r,
                            uint32_t what) {
    if (s->gone)
        return;
    uint8_t c[HVD_EXEC_COMMAND_LEN];
    hvd__exec_command_encode(c, what, r->index);
    /* at most PIPE_BUF bytes: written whole or not at all */
    if ((s->ready || !all_stopped(w, s)) && s->in_fd >= 0 &&
        write(s->in_fd, c, sizeof c) == (ssize_t)sizeof c)
        return;
    if (what == HVD_EXEC_KILL)
        hvd__spawn_kill(&s->proc);
    else
        session_stop(s);
}

void hvd__workers_stop(hvd_workers_t *w, size_t id) {
    worker_t *r = id < w->n ? w->w[id] : NULL;
    if (!r || r->gone || r->stopped)
        return;
    r->stopped = 1;
    r->stop_ms = hvd__clock_now_ms();
    if (r->s)
        session_command(w, r->s, r, HVD_EXEC_STOP);
    else
        hvd__spawn_stop(&r->proc);
}

void hvd__workers_stop_all(hvd_workers_t *w) {
    w->stopping = 1;
    for (size_t i = 0; i < w->n; i++)
        hvd__workers_stop(w, i);
}

/* SIGKILL a worker's tree (it is marked stopped already): its middleman's here, its host's
 * supervisor's over there. */
static void kill_now(const hvd_workers_t *w, worker_t *r) {
    if (!r->s) {
        hvd__spawn_kill(&r->proc);
    } else if (!r->proc.kill_sent) {
        r->proc.kill_sent = hvd__clock_now_ms();
        session_command(w, r->s, r, HVD_EXEC_KILL);
    }
}

void hvd__workers_kill(hvd_workers_t *w, size_t id) {
    worker_t *r = id < w->n ? w->w[id] : NULL;
    if (!r || r->gone)
        return;
    if (!r->stopped) {
        r->stopped = 1;
        r->stop_ms = hvd__clock_now_ms();
    }
    kill_now(w, r);
}

/* The worker's command ended (or its middleman did): tell the caller once. */
static void on_final(hvd_workers_t *w, size_t i) {
    worker_t *r = w->w[i];
    if (r->handled)
        return;
    r->handled = 1;
    if (w->cfg->on_exit)
        w->cfg->on_exit(w->cfg->arg, i, hvd__spawn_status(&r->proc), r->stopped);
}

static void mark_gone(hvd_workers_t *w, size_t i) {
    worker_t *r = w->w[i];
    r->gone = 1;
    r->gone_ms = hvd__clock_now_ms();
    w->live--;
    on_final(w, i);
    close_ctl(w, &r->ctl_open, &r->proc.ctl_fd);
}

/* A remote worker is over: its END came, or its session ended first (then it takes the
 * session's status, e.g. ssh's 255, unless its own arrived). */
static void end_remote(hvd_workers_t *w, size_t id, int status_if_unknown) {
    worker_t *r = w->w[id];
    if (r->gone)
        return;
    if (!r->proc.reported) {
        r->proc.reported = 1;
        r->proc.cmd_status = status_if_unknown;
    }
    hvd__output_stream_eof(&r->out);
    hvd__output_stream_eof(&r->err);
    r->s->left--;
    mark_gone(w, id);
}

static void on_frame(hvd_workers_t *w, session_t *s, const hvd_exec_frame_t *f) {
    if (f->type == HVD_EXEC_READY) {
        if (!s->ready) {
            s->ready = 1;
            w->connecting--;
        }
        return;
    }
    size_t id = s->ids[f->index];
    worker_t *r = w->w[id];
    if (r->gone)
        return;
    switch (f->type) {
    case HVD_EXEC_OUT:
    case HVD_EXEC_ERR:
        hvd__output_stream_feed(f->type == HVD_EXEC_OUT ? &r->out : &r->err, (const char *)f->data,
                                f->len);
        break;
    case HVD_EXEC_EXIT:
        if (!r->proc.reported) {
            r->proc.reported = 1;
            r->proc.cmd_status = (int)hvd__le32_get(f->data);
        }
        on_final(w, id); /* act now: the rank's output and end follow */
        break;
    case HVD_EXEC_END:
        end_remote(w, id, 126 << 8); /* the supervisor always sends EXIT first */
        break;
    case HVD_EXEC_STATE:
        r->remote_stopped = hvd__le32_get(f->data) != 0;
        r->remote_pid = (long)hvd__le32_get(f->data + 4); /* never signalled from here */
        break;
    }
}

/* ---- the pipes we read: a worker's stdout and stderr, a session's frames and stderr ---- */

/* One pipe, and where its bytes go: a tagged output stream, or (stream NULL) the frames of
 * session s. */
typedef struct {
    int *fd_p, *open_p;
    hvd_output_stream_t *stream;
    session_t *s;
} pipe_ref_t;

static pipe_ref_t worker_pipe(worker_t *r, int is_err) {
    return is_err ? (pipe_ref_t){&r->proc.err_fd, &r->err_open, &r->err, NULL}
                  : (pipe_ref_t){&r->proc.out_fd, &r->out_open, &r->out, NULL};
}

static pipe_ref_t session_pipe(session_t *s, int is_err) {
    return is_err ? (pipe_ref_t){&s->proc.err_fd, &s->err_open, &s->err, NULL}
                  : (pipe_ref_t){&s->proc.out_fd, &s->out_open, NULL, s};
}

static void pipe_close(hvd_workers_t *w, pipe_ref_t p) {
    if (*p.open_p) {
        if (p.stream)
            hvd__output_stream_eof(p.stream);
        epoll_ctl(w->epfd, EPOLL_CTL_DEL, *p.fd_p, NULL);
        *p.open_p = 0;
        w->open_streams--;
    }
    if (*p.fd_p >= 0)
        close(*p.fd_p);
    *p.fd_p = -1;
}

static void session_feed(hvd_workers_t *w, session_t *s, const char *data, size_t n);

static void pipe_take(hvd_workers_t *w, pipe_ref_t p, const char *data, size_t n) {
    if (p.stream)
        hvd__output_stream_feed(p.stream, data, n);
    else
        session_feed(w, p.s, data, n);
}

/* One read per wake-up (a chatty worker cannot starve the others); the end of the pipe, or an
 * error, closes it. */
static void pipe_read(hvd_workers_t *w, pipe_ref_t p) {
    ssize_t n = read(*p.fd_p, w->rbuf, READ_CHUNK);
    if (n > 0)
        pipe_take(w, p, w->rbuf, (size_t)n);
    else if (n == 0 || (errno != EAGAIN && errno != EINTR))
        pipe_close(w, p);
}

/* Read what the pipe holds now (up to DRAIN_MAX), then close it. */
#define DRAIN_MAX ((size_t)16 << 20)
static void pipe_drain(hvd_workers_t *w, pipe_ref_t p) {
    for (size_t total = 0; *p.open_p && total < DRAIN_MAX;) {
        ssize_t n = read(*p.fd_p, w->rbuf, READ_CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        pipe_take(w, p, w->rbuf, (size_t)n);
        total += (size_t)n;
    }
    pipe_close(w, p);
}

static void session_feed(hvd_workers_t *w, session_t *s, const char *data, size_t n) {
    hvd_exec_frame_t f;
    int got = hvd__exec_reader_feed(&s->rx, data, n) == HVD_OK ? 1 : -1;
    while (got == 1 && (got = hvd__exec_reader_next(&s->rx, &f)) == 1)
        on_frame(w, s, &f);
    if (got < 0) {
        hvd__say(w->cfg->err_fd, "horovodrun: stopping the ranks on %s: %s\n", s->host,
                 hvd_last_error());
        pipe_close(w, session_pipe(s, 0));
        session_stop(s);
    }
}

/* ssh has ended: everything it wrote is in its pipes. Take it, then end the workers that
 * the supervisor did not end itself. */
static void session_finish(hvd_workers_t *w, session_t *s) {
    if (s->finished)
        return;
    s->finished = 1;
    pipe_drain(w, session_pipe(s, 0));
    pipe_drain(w, session_pipe(s, 1));
    if (!s->ready) {
        s->ready = 1;
        w->connecting--;
    }
    if (s->in_fd >= 0)
        close(s->in_fd);
    s->in_fd = -1;
    int status = hvd__spawn_status(&s->proc);
    for (size_t k = 0; k < s->n; k++)
        end_remote(w, s->ids[k], status);
}

static void session_gone(hvd_workers_t *w, session_t *s) {
    s->gone = 1;
    w->sessions_live--;
    close_ctl(w, &s->ctl_open, &s->proc.ctl_fd);
    session_finish(w, s);
}

static void reap_all(hvd_workers_t *w) {
    w->need_reap = 0;
    w->last_reap_ms = hvd__clock_now_ms();
    for (size_t i = 0; i < w->n; i++) {
        worker_t *r = w->w[i];
        if (!r->s && !r->gone && hvd__spawn_reap(&r->proc))
            mark_gone(w, i);
    }
    for (size_t i = 0; i < w->ns; i++) {
        session_t *s = w->sessions[i];
        if (!s->gone && hvd__spawn_reap(&s->proc))
            session_gone(w, s);
    }
}

static void on_signals(hvd_workers_t *w) {
    struct signalfd_siginfo si;
    while (read(w->sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        int sig = (int)si.ssi_signo;
        if (sig == SIGCHLD) {
            w->need_reap = 1;
            continue;
        }
        const char *abbrev = sigabbrev_np(sig);
        if (!w->stopping) {
            w->interrupted = sig;
            hvd__say(w->cfg->err_fd, "horovodrun: received SIG%s, terminating all ranks.\n",
                     abbrev ? abbrev : "?");
            hvd__workers_stop_all(w);
        } else {
            /* asked while ending the job already: no more grace */
            if (!w->interrupted)
                w->interrupted = sig;
            hvd__say(w->cfg->err_fd, "horovodrun: received SIG%s again, killing all ranks now.\n",
                     abbrev ? abbrev : "?");
            for (size_t i = 0; i < w->n; i++)
                if (!w->w[i]->gone)
                    kill_now(w, w->w[i]);
        }
    }
}

static void on_session_event(hvd_workers_t *w, session_t *s, int kind) {
    if (kind == EV_S_OUT || kind == EV_S_ERR) {
        pipe_read(w, session_pipe(s, kind == EV_S_ERR));
        return;
    }
    if (hvd__spawn_read_report(&s->proc))
        session_finish(w, s); /* ssh ended: its ranks' fate is known now */
    if (s->proc.ctl_eof) {
        epoll_ctl(w->epfd, EPOLL_CTL_DEL, s->proc.ctl_fd, NULL);
        s->ctl_open = 0;
        w->need_reap = 1;
    }
}

static void on_event(hvd_workers_t *w, uint64_t tag) {
    if (tag == EV_SIGNAL) {
        on_signals(w);
        return;
    }
    if (tag == EV_WAKE) {
        uint64_t v;
        ssize_t n = read(w->wakefd, &v, sizeof v);
        (void)n;
        return;
    }
    size_t i = (size_t)(tag >> EV_SHIFT);
    int kind = (int)(tag & ((1u << EV_SHIFT) - 1));
    if (kind >= EV_S_OUT) {
        on_session_event(w, w->sessions[i], kind);
        return;
    }
    worker_t *r = w->w[i];
    switch (kind) {
    case EV_OUT:
    case EV_ERR:
        pipe_read(w, worker_pipe(r, kind == EV_ERR));
        break;
    case EV_CTL:
        if (hvd__spawn_read_report(&r->proc))
            on_final(w, i); /* the command ended: act now, the middleman cleans up after */
        if (r->proc.ctl_eof) {
            /* the middleman is exiting: reap it soon, stop watching the socket */
            epoll_ctl(w->epfd, EPOLL_CTL_DEL, r->proc.ctl_fd, NULL);
            r->ctl_open = 0;
            w->need_reap = 1;
        }
        break;
    }
}

/* A remote worker asked to stop that does not end is killed by its host's supervisor; one
 * that does not end even then has its whole ssh session killed. */
static void remote_deadlines(hvd_workers_t *w, worker_t *r, int64_t now) {
    if (r->gone)
        return;
    if (r->stopped && !r->proc.kill_sent && now - r->stop_ms >= w->grace_ms + BACKSTOP_MS) {
        hvd__say(w->cfg->err_fd,
                 "horovodrun: rank %d on %s did not end %d ms after being asked to; killing it.\n",
                 r->slot.rank, r->slot.host, w->grace_ms + BACKSTOP_MS);
        kill_now(w, r);
    }
    if (r->proc.kill_sent && now - r->proc.kill_sent >= ABANDON_MS && !r->s->proc.kill_sent) {
        hvd__say(w->cfg->err_fd,
                 "horovodrun: rank %d on %s is still there %d ms after SIGKILL; closing the ssh "
                 "session to %s.\n",
                 r->slot.rank, r->slot.host, ABANDON_MS, r->s->host);
        hvd__spawn_kill(&r->s->proc);
    }
}

/* Sessions whose ssh does not end when it should: every rank ended but the supervisor stays,
 * or stopped and not gone after the grace period, or killed and still not reaped. */
static void session_deadlines(hvd_workers_t *w, session_t *s, int64_t now) {
    if (s->gone)
        return;
    if (s->left == 0 && !s->proc.stop_sent) {
        if (!s->idle_ms)
            s->idle_ms = now;
        else if (now - s->idle_ms >= DRAIN_MS)
            session_stop(s);
    }
    if (s->proc.stop_sent && !s->proc.kill_sent && now - s->stop_ms >= w->grace_ms + BACKSTOP_MS)
        hvd__spawn_kill(&s->proc);
    if (s->proc.kill_sent && now - s->proc.kill_sent >= ABANDON_MS) {
        hvd__say(w->cfg->err_fd,
                 "horovodrun: the ssh session to %s (supervisor pid %d) is still there %d ms after "
                 "SIGKILL; giving up on it.\n",
                 s->host, (int)s->proc.pid, ABANDON_MS);
        if (!s->proc.reported)
            s->proc.mm_status = SIGKILL;
        session_gone(w, s);
    }
}

/* Deadlines that keep horovodrun from waiting forever on a middleman or a pipe. */
static void enforce_deadlines(hvd_workers_t *w) {
    int64_t now = hvd__clock_now_ms();
    for (size_t i = 0; i < w->ns; i++)
        session_deadlines(w, w->sessions[i], now);
    for (size_t i = 0; i < w->n; i++) {
        worker_t *r = w->w[i];
        if (r->s) {
            remote_deadlines(w, r, now);
            continue;
        }
        if (!r->gone && r->stopped && !r->proc.kill_sent &&
            now - r->stop_ms >= w->grace_ms + BACKSTOP_MS) {
            hvd__say(w->cfg->err_fd,
                     "horovodrun: rank %d (supervisor pid %d) did not end %d ms after being asked "
                     "to; killing it.\n",
                     r->slot.rank, (int)r->proc.pid, w->grace_ms + BACKSTOP_MS);
            hvd__spawn_kill(&r->proc);
        }
        if (!r->gone && r->proc.kill_sent && now - r->proc.kill_sent >= ABANDON_MS) {
            hvd__say(w->cfg->err_fd,
                     "horovodrun: rank %d (supervisor pid %d) is still there %d ms after SIGKILL; "
                     "giving up on it.\n",
                     r->slot.rank, (int)r->proc.pid, ABANDON_MS);
            if (!r->proc.reported)
                r->proc.mm_status = SIGKILL;
            mark_gone(w, i);
        }
        if (r->gone && (r->out_open || r->err_open) && now - r->gone_ms >= DRAIN_MS) {
            /* something outside the worker's tree holds its pipes: stop waiting for them, but
             * not before taking what they hold (a busy launcher with a thousand workers could
             * be this late to read a line the worker wrote as it exited) */
            pipe_drain(w, worker_pipe(r, 0));
            pipe_drain(w, worker_pipe(r, 1));
        }
    }
}

void hvd__workers_step(hvd_workers_t *w, int timeout_ms) {
    struct epoll_event evs[64];
    int k = epoll_wait(w->epfd, evs, 64, timeout_ms);
    for (int e = 0; e < k; e++)
        on_event(w, evs[e].data.u64);
    if (k < 0 && errno != EINTR)
        hvd__clock_sleep_ms(timeout_ms); /* cannot wait on fds: keep the cadence */
    if (w->need_reap || hvd__clock_now_ms() - w->last_reap_ms >= REAP_TICK_MS)
        reap_all(w);
    enforce_deadlines(w);
}

void hvd__workers_wake(hvd_workers_t *w) {
    uint64_t one = 1;
    ssize_t n = write(w->wakefd, &one, sizeof one);
    (void)n; /* a full counter already wakes the loop */
}

/* The variables every worker of a start shares: horovodrun's, then extra (its own variables
 * are set last, by the caller). Pointers into the lists, NULL-terminated. */
static char **shared_envp(const hvd_workers_t *w, const hvd_env_list_t *extra, size_t more) {
    size_t nb = w->base.count, ne = extra ? extra->count : 0;
    char **envp = malloc((nb + ne + more + 1) * sizeof *envp);
    if (!envp)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < nb; i++)
        envp[k++] = w->base.entries[i];
    for (size_t i = 0; i < ne; i++)
        if (!is_slot_name(extra->entries[i]))
            envp[k++] = extra->entries[i];
    envp[k] = NULL;
    return envp;
}

/* A worker's record, not yet started. */
static worker_t *worker_new(const hvd_workers_t *w, const hvd_slot_t *slot) {
    worker_t *r = calloc(1, sizeof *r);
    char *host = strdup(slot->host ? slot->host : "");
    if (!r || !host) {
        free(r);
        free(host);
        return NULL;
    }
    r->slot = *slot;
    r->slot.host = host;
    r->proc.out_fd = r->proc.err_fd = r->proc.ctl_fd = -1;
    hvd__output_stream_init(&r->out, slot->rank, 0, w->cfg->out_fd, -1, w->cfg->prefix_timestamp);
    hvd__output_stream_init(&r->err, slot->rank, 1, w->cfg->err_fd, -1, w->cfg->prefix_timestamp);
    return r;
}

static void worker_free(worker_t *r) {
    if (!r)
        return;
    hvd__spawn_close(&r->proc);
    hvd__output_stream_fini(&r->out);
    hvd__output_stream_fini(&r->err);
    free((char *)r->slot.host);
    free(r);
}

static void session_free(session_t *s) {
    if (!s)
        return;
    hvd__spawn_close(&s->proc);
    if (s->in_fd >= 0)
        close(s->in_fd);
    hvd__exec_reader_fini(&s->rx);
    hvd__output_stream_fini(&s->err);
    free(s->ids);
    free(s->host);
    free(s);
}

static hvd_status_t grow(void **p, size_t *cap, size_t need, size_t size) {
    if (need <= *cap)
        return HVD_OK;
    size_t c = *cap ? *cap : 16;
    while (c < need)
        c *= 2;
    void *grown = realloc(*p, c * size);
    if (!grown)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for workers");
    *p = grown;
    *cap = c;
    return HVD_OK;
}

static hvd_status_t start_local(hvd_workers_t *w, worker_t *r, size_t i,
                                const hvd_env_list_t *extra) {
    hvd_env_list_t vars;
    hvd_status_t st = slot_env(w, &r->slot, &vars);
    if (st != HVD_OK)
        return st;
    char **envp = shared_envp(w, extra, vars.count);
    if (!envp) {
        wipe_env(&vars);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory building an environment");
    }
    size_t k = 0;
    while (envp[k])
        k++;
    for (size_t v = 0; v < vars.count; v++)
        envp[k++] = vars.entries[v];
    envp[k] = NULL;
    if (w->cfg->verbose)
        print_command(w, NULL, &vars, extra);
    hvd_spawn_config_t sc = {.argv = w->cfg->command,
                             .envp = envp,
                             .grace_ms = w->grace_ms,
                             .nofile_soft = w->nofile_soft};
    st = hvd__spawn_start(&sc, &r->proc);
    free(envp);
    wipe_env(&vars);
    if (st != HVD_OK)
        return st;
    w->live++;
    if (watch_proc(w, &r->proc, i, EV_OUT, &r->out_open, &r->err_open, &r->ctl_open))
        return HVD_OK;
    return hvd__error_set(HVD_ERR_IO, "cannot watch the pipes of rank %d: %s", r->slot.rank,
                          strerror(errno));
}

/* The spec of a session's ranks (exec_wire.h) and ssh's argv to carry it. */
static hvd_status_t session_command_line(const hvd_workers_t *w, session_t *s, worker_t **rs,
                                         const hvd_env_list_t *extra, char ***ssh_argv_p,
                                         uint8_t **spec_p, size_t *spec_len_p) {
    const hvd_workers_config_t *cfg = w->cfg;
    hvd_env_list_t *vars = calloc(s->n, sizeof *vars);
    char ***rank_env = calloc(s->n, sizeof *rank_env);
    char **env = shared_envp(w, extra, 0);
    size_t made = 0;
    hvd_status_t st = vars && rank_env && env
                          ? HVD_OK
                          : hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for a remote start");
    for (; st == HVD_OK && made < s->n; made++) {
        st = slot_env(w, &rs[made]->slot, &vars[made]);
        if (st == HVD_OK)
            rank_env[made] = vars[made].entries;
    }
    if (st == HVD_OK)
        st = hvd__ssh_argv_program(cfg->ssh, s->host,
                                   cfg->remote_exe ? cfg->remote_exe : "horovodrun",
                                   HVD_EXEC_OPTION, ssh_argv_p);
    if (st == HVD_OK) {
        hvd_exec_spec_t spec = {.cwd = (char *)(cfg->cwd ? cfg->cwd : "."),
                                .grace_ms = (uint32_t)w->grace_ms,
                                .env = env,
                                .argv = (char **)cfg->command, /* only read */
                                .nranks = s->n,
                                .rank_env = rank_env};
        st = hvd__exec_spec_encode(&spec, spec_p, spec_len_p);
        if (st != HVD_OK) {
            hvd__ssh_argv_free(*ssh_argv_p);
            *ssh_argv_p = NULL;
        }
    }
    for (size_t k = 0; st == HVD_OK && cfg->verbose && k < s->n; k++)
        print_command(w, *ssh_argv_p, &vars[k], extra);
    for (size_t k = 0; vars && k < made; k++)
        wipe_env(&vars[k]);
    free(vars);
    free(rank_env);
    free(env);
    return st;
}

/* Write the spec into a ready session's pipe, made large enough first; ssh forwards it as
 * fast as the network takes it, so this waits at most SPEC_SEND_MS. */
#define SPEC_SEND_MS 5000
static hvd_status_t send_spec(const session_t *s, const uint8_t *spec, size_t len) {
    if (len > 65536)
        (void)fcntl(s->in_fd, F_SETPIPE_SZ, (int)len); /* best effort: else it waits below */
    int64_t deadline = hvd__clock_now_ms() + SPEC_SEND_MS;
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(s->in_fd, spec + off, len - off);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        int64_t left = deadline - hvd__clock_now_ms();
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN && left > 0) {
            struct pollfd p = {.fd = s->in_fd, .events = POLLOUT};
            poll(&p, 1, (int)left);
            continue;
        }
        return hvd__error_set(HVD_ERR_IO,
                              "cannot send the ranks' spec through the ssh session "
                              "to %s: %s",
                              s->host, n < 0 ? strerror(errno) : "its input is full");
    }
    return HVD_OK;
}

/* Whether a session opened before the launch can still take the host's ranks. */
static int usable(hvd_ready_session_t *ready) {
    if (!ready || ready->taken || ready->in_fd < 0)
        return 0;
    if (ready->proc.ctl_fd >= 0 && !ready->proc.ctl_eof)
        hvd__spawn_read_report(&ready->proc);
    return !ready->proc.reported && !hvd__spawn_reap(&ready->proc);
}

static hvd_status_t start_session(hvd_workers_t *w, session_t *s, worker_t **rs, size_t si,
                                  const hvd_env_list_t *extra, hvd_ready_session_t *ready) {
    char **ssh_argv = NULL;
    uint8_t *spec = NULL;
    size_t spec_len = 0;
    hvd_status_t st = session_command_line(w, s, rs, extra, &ssh_argv, &spec, &spec_len);
    if (st == HVD_OK && usable(ready)) {
        s->proc = ready->proc;
        s->in_fd = ready->in_fd;
        ready->taken = 1;
    } else if (st == HVD_OK) {
        /* ssh itself runs with horovodrun's environment; the workers' go in the spec */
        hvd_spawn_config_t sc = {.argv = ssh_argv,
                                 .envp = environ,
                                 .grace_ms = w->grace_ms,
                                 .nofile_soft = w->nofile_soft,
                                 .stdin_data = spec,
                                 .stdin_len = spec_len,
                                 .stdin_writer_p = &s->in_fd};
        st = hvd__spawn_start(&sc, &s->proc);
        ready = NULL;
    }
    if (st == HVD_OK) {
        w->sessions_live++;
        w->connecting++;
        if (!watch_proc(w, &s->proc, si, EV_S_OUT, &s->out_open, &s->err_open, &s->ctl_open))
            st = hvd__error_set(HVD_ERR_IO, "cannot watch the pipes of the ssh session to %s: %s",
                                s->host, strerror(errno));
    }
    if (st == HVD_OK && ready)
        st = send_spec(s, spec, spec_len);
    if (spec) {
        explicit_bzero(spec, spec_len);
        free(spec);
    }
    hvd__ssh_argv_free(ssh_argv);
    return st;
}

static hvd_status_t room_for(hvd_workers_t *w, const hvd_slot_t *slot, size_t n) {
    if (w->n + n > w->cfg->max_workers)
        return hvd__error_set(HVD_ERR_TOO_LARGE,
                              "cannot start rank %d on %s: %zu workers were started already",
                              slot->rank, slot->host, w->n);
    return grow((void **)&w->w, &w->cap, w->n + n, sizeof *w->w);
}

static hvd_status_t open_files(const hvd_workers_t *w, worker_t *r) {
    if (!w->cfg->output_dir)
        return HVD_OK;
    return hvd__output_open_files(w->cfg->output_dir, r->slot.rank, w->cfg->output_np,
                                  &r->out.file_fd, &r->err.file_fd);
}

hvd_status_t hvd__workers_start_remote(hvd_workers_t *w, const hvd_slot_t *slots, size_t n,
                                       const hvd_env_list_t *extra, hvd_ready_session_t *ready,
                                       size_t *ids) {
    if (n == 0 || n > HVD_EXEC_MAX_RANKS)
        return hvd__error_set(HVD_ERR_INVALID_ARG, "cannot start %zu ranks on one host at once", n);
    hvd_status_t st = room_for(w, &slots[0], n);
    if (st == HVD_OK)
        st = grow((void **)&w->sessions, &w->scap, w->ns + 1, sizeof *w->sessions);
    if (st != HVD_OK)
        return st;
    session_t *s = calloc(1, sizeof *s);
    worker_t **rs = calloc(n, sizeof *rs);
    if (s) {
        s->in_fd = -1;
        s->proc.out_fd = s->proc.err_fd = s->proc.ctl_fd = -1;
        s->host = strdup(slots[0].host ? slots[0].host : "");
        s->ids = calloc(n, sizeof *s->ids);
        s->n = s->left = n;
        hvd__exec_reader_init(&s->rx, n);
        hvd__output_stream_init(&s->err, slots[0].rank, 1, w->cfg->err_fd, -1,
                                w->cfg->prefix_timestamp);
    }
    size_t made = 0;
    if (!s || !rs || !s->host || !s->ids)
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for a remote start");
    for (; st == HVD_OK && made < n; made++) {
        if (!(rs[made] = worker_new(w, &slots[made])))
            st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for a worker");
        else
            st = open_files(w, rs[made]);
        if (st == HVD_OK) {
            rs[made]->s = s;
            rs[made]->index = (uint32_t)made;
            s->ids[made] = w->n + made;
        }
    }
    if (st == HVD_OK)
        st = start_session(w, s, rs, w->ns, extra, ready);
    if (st != HVD_OK && (!s || !s->proc.pid)) {
        for (size_t k = 0; k < n && rs; k++)
            worker_free(rs[k]);
        free(rs);
        session_free(s);
        return hvd__error_wrap(st, "cannot start rank %d on %s", slots[0].rank, slots[0].host);
    }
    /* started (perhaps without its pipes watched): supervise it like the others */
    w->sessions[w->ns++] = s;
    for (size_t k = 0; k < n; k++) {
        w->w[w->n++] = rs[k];
        w->live++;
        if (ids)
            ids[k] = s->ids[k];
    }
    free(rs);
    if (st != HVD_OK) {
        session_stop(s);
        return hvd__error_wrap(st, "cannot start rank %d on %s", slots[0].rank, slots[0].host);
    }
    return HVD_OK;
}

hvd_status_t hvd__workers_start(hvd_workers_t *w, const hvd_slot_t *slot, int remote,
                                const hvd_env_list_t *extra, size_t *id_p) {
    if (remote)
        return hvd__workers_start_remote(w, slot, 1, extra, NULL, id_p);
    hvd_status_t st = room_for(w, slot, 1);
    if (st != HVD_OK)
        return st;
    worker_t *r = worker_new(w, slot);
    if (!r)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for a worker");
    size_t i = w->n;
    st = open_files(w, r);
    if (st == HVD_OK)
        st = start_local(w, r, i, extra);
    if (st != HVD_OK && !r->proc.pid) {
        worker_free(r); /* nothing started: nothing to supervise */
        return hvd__error_wrap(st, "cannot start rank %d on %s", slot->rank, slot->host);
    }
    /* started (perhaps without its pipes watched): supervise it like the others */
    w->w[w->n++] = r;
    if (st != HVD_OK) {
        hvd__workers_stop(w, i);
        return hvd__error_wrap(st, "cannot start rank %d on %s", slot->rank, slot->host);
    }
    *id_p = i;
    return HVD_OK;
}

size_t hvd__workers_connecting(const hvd_workers_t *w) {
    return w->connecting;
}

/* Each worker holds 3 fds here (4 for a remote host's session of one rank; 2 more with
 * --output-filename), and the store serving them one connection each (cfg->extra_fds); raise
 * the soft limit to fit them, and let workers start with the limit horovodrun was given. */
static void fit_fd_limit(hvd_workers_t *w) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return;
    rlim_t need =
        64 + (rlim_t)w->cfg->extra_fds + (rlim_t)w->cfg->max_workers * (w->cfg->output_dir ? 6 : 4);
    if (rl.rlim_cur >= need)
        return;
    w->saved_nofile = rl;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0) {
        w->raised_nofile = 1;
        w->nofile_soft = (long)w->saved_nofile.rlim_cur;
    }
}

hvd_status_t hvd__workers_create(const hvd_workers_config_t *cfg, hvd_workers_t **w_p) {
    hvd_workers_t *w = calloc(1, sizeof *w);
    if (!w)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for the launch loop");
    w->cfg = cfg;
    w->epfd = w->sfd = w->wakefd = -1;
    w->grace_ms = cfg->kill_grace_ms > 0 ? cfg->kill_grace_ms : HVD_SPAWN_DEFAULT_GRACE_MS;
    w->last_reap_ms = hvd__clock_now_ms();
    hvd__env_list_init(&w->base);
    sigset_t mask;
    hvd__spawn_launcher_signals(&mask);
    pthread_sigmask(SIG_BLOCK, &mask, &w->old_mask);
    hvd_status_t st = HVD_OK;
    w->rbuf = malloc(READ_CHUNK);
    if (!w->rbuf)
        st = hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory for the launch loop");
    if (st == HVD_OK)
        st = build_base_env(w);
    if (st == HVD_OK) {
        /* SIGCHLD, SIGINT, SIGTERM and SIGHUP arrive through a signalfd. */
        w->sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        w->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        w->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (w->sfd < 0 || w->wakefd < 0 || w->epfd < 0 || watch(w, w->sfd, EV_SIGNAL) != 0 ||
            watch(w, w->wakefd, EV_WAKE) != 0)
            st = hvd__error_set(HVD_ERR_IO, "cannot set up the launch loop: %s", strerror(errno));
    }
    if (st != HVD_OK) {
        hvd__workers_destroy(w);
        return st;
    }
    fit_fd_limit(w);
    *w_p = w;
    return HVD_OK;
}

void hvd__workers_destroy(hvd_workers_t *w) {
    if (!w)
        return;
    /* Nothing may outlive the pool: stop what runs and wait for it (bounded by the backstop
     * and abandon deadlines of enforce_deadlines). */
    if (w->epfd >= 0) {
        if (w->live > 0)
            hvd__workers_stop_all(w);
        while (hvd__workers_busy(w))
            hvd__workers_step(w, DESTROY_TICK_MS);
    }
    if (w->raised_nofile)
        setrlimit(RLIMIT_NOFILE, &w->saved_nofile);
    if (w->epfd >= 0)
        close(w->epfd);
    if (w->sfd >= 0)
        close(w->sfd);
    if (w->wakefd >= 0)
        close(w->wakefd);
    pthread_sigmask(SIG_SETMASK, &w->old_mask, NULL);
    for (size_t i = 0; i < w->n; i++)
        worker_free(w->w[i]);
    free(w->w);
    for (size_t i = 0; i < w->ns; i++)
        session_free(w->sessions[i]);
    free(w->sessions);
    hvd__env_list_fini(&w->base);
    free(w->rbuf);
    free(w);
}

size_t hvd__workers_live(const hvd_workers_t *w) {
    return w->live;
}

int hvd__workers_busy(const hvd_workers_t *w) {
    return w->live > 0 || w->open_streams > 0 || w->sessions_live > 0;
}

int hvd__workers_interrupted(const hvd_workers_t *w) {
    return w->interrupted;
}

int hvd__workers_running(const hvd_workers_t *w, size_t id) {
    return id < w->n && !w->w[id]->gone;
}

int hvd__workers_stopped(const hvd_workers_t *w, size_t id, long *pid_p) {
    const worker_t *r = id < w->n ? w->w[id] : NULL;
    if (!r || r->gone) {
        *pid_p = 0;
        return 0;
    }
    *pid_p = r->s ? r->remote_pid : (long)r->proc.cmd_pid;
    return r->s ? r->remote_stopped : hvd__spawn_cmd_stopped(&r->proc);
}

const hvd_slot_t *hvd__workers_slot(const hvd_workers_t *w, size_t id) {
    return id < w->n ? &w->w[id]->slot : NULL;
}

void hvd__workers_report(const hvd_workers_t *w, size_t id, const char *who) {
    const worker_t *r = w->w[id];
    int fd = w->cfg->err_fd;
    char what[96];
    hvd__spawn_describe_status(hvd__spawn_status(&r->proc), what, sizeof what);
    hvd__say(fd, "horovodrun: %s was the first to fail: %s.\n", who, what);
    if (r->err.tail_count || r->err.tail_cr) {
        hvd__say(fd, "horovodrun: last lines rank %d wrote to stderr:\n", r->slot.rank);
        hvd__output_stream_write_tail(&r->err, fd, "    ");
    } else {
        hvd__say(fd, "horovodrun: rank %d wrote nothing to stderr.\n", r->slot.rank);
    }
    if (r->s && (r->s->err.tail_count || r->s->err.tail_cr)) {
        const hvd_ssh_opts_t *via = w->cfg->ssh;
        hvd__say(fd, "horovodrun: last lines of the %s session to %s:\n",
                 via && via->agent  ? "rsh agent's"
                 : via && via->srun ? "srun"
                                    : "ssh",
                 r->s->host);
        hvd__output_stream_write_tail(&r->s->err, fd, "    ");
    }
}

void hvd__workers_say(const hvd_workers_t *w, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    hvd__vsay(w->cfg->err_fd, fmt, ap);
    va_end(ap);
}
