/* The worker pool (workers.h): a local worker under its own middleman, remote ones as ranks of a
 * host session (ssh to --internal-exec, frames read with exec_wire.h). Creating and destroying
 * it, and what it tells its caller; the rest is in workers_env.c, workers_io.c and
 * workers_start.c over workers_impl.h. RLIMIT_NOFILE is raised to fit every descriptor. */
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
        st = hvd__wk_build_base_env(w);
    if (st == HVD_OK) {
        /* SIGCHLD, SIGINT, SIGTERM and SIGHUP arrive through a signalfd. */
        w->sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
        w->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        w->epfd = epoll_create1(EPOLL_CLOEXEC);
        if (w->sfd < 0 || w->wakefd < 0 || w->epfd < 0 ||
            hvd__wk_watch(w, w->sfd, EV_SIGNAL) != 0 || hvd__wk_watch(w, w->wakefd, EV_WAKE) != 0)
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
     * and abandon deadlines of hvd__wk_enforce_deadlines). */
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
        hvd__wk_worker_free(w->w[i]);
    free(w->w);
    for (size_t i = 0; i < w->ns; i++)
        hvd__wk_session_free(w->sessions[i]);
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
