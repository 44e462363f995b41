/* The worker pool's event loop (workers_impl.h): workers' and sessions' pipes and frames,
 * signals, reaping, and the deadlines of stopping, killing and draining. */
#include "runner/launch/workers_impl.h"

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "common/params.h"
#include "os/spawn.h"
#include "runner/launch/exec_wire.h"
#include "runner/launch/output.h"
#include "runner/launch/remote_exec.h"
#include "runner/process/say.h"
#include "wire/le.h"

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

/* ---- workers and host sessions ----------------------------------------------------------------
 */

int hvd__wk_watch(hvd_workers_t *w, int fd, uint64_t tag) {
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = tag};
    return epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev);
}

static uint64_t tag_of(size_t i, int kind) {
    return (uint64_t)i << EV_SHIFT | (uint64_t)kind;
}

/* Watch a started process's stdout, stderr and control socket under index i; first_kind is
 * EV_OUT for a worker, EV_S_OUT for a session (the other two kinds follow it). 1 when all
 * three are watched. */
int hvd__wk_watch_proc(hvd_workers_t *w, const hvd_spawn_t *proc, size_t i, int first_kind,
                       int *out_open, int *err_open, int *ctl_open) {
    if (hvd__wk_watch(w, proc->out_fd, tag_of(i, first_kind)) == 0) {
        *out_open = 1;
        w->open_streams++;
    }
    if (hvd__wk_watch(w, proc->err_fd, tag_of(i, first_kind + 1)) == 0) {
        *err_open = 1;
        w->open_streams++;
    }
    *ctl_open = hvd__wk_watch(w, proc->ctl_fd, tag_of(i, first_kind + 2)) == 0;
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

void hvd__wk_session_stop(session_t *s) {
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
        hvd__wk_session_stop(s);
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
        hvd__wk_session_stop(s);
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
            hvd__wk_session_stop(s);
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
void hvd__wk_enforce_deadlines(hvd_workers_t *w) {
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
    hvd__wk_enforce_deadlines(w);
}

void hvd__workers_wake(hvd_workers_t *w) {
    uint64_t one = 1;
    ssize_t n = write(w->wakefd, &one, sizeof one);
    (void)n; /* a full counter already wakes the loop */
}

/* The variables every worker of a start shares: horovodrun's, then extra (its own variables
 * are set last, by the caller). Pointers into the lists, NULL-terminated. */
