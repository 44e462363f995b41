/* The relay (relay.h): one poll loop over the signalfd, the middleman's control socket, the
 * command's stdout and stderr and, when asked, our stdin. It ends once the middleman is reaped and
 * both pipes are closed, or 2 s after the reap if something outside the tree still holds them. */
#include "runner/process/relay.h"

#include "common/clock.h"
#include "os/spawn.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

/* Once the tree is gone, output still in flight is copied for at most this long. */
#define DRAIN_MS 2000
/* A middleman asked to stop that is still there this long after its grace is killed. */
#define BACKSTOP_MS 5000

typedef struct {
    hvd_spawn_t proc;
    int grace_ms;
    int stopping, gone;
    int64_t stop_ms, gone_ms;
} relay_t;

static int write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void stop(relay_t *r) {
    if (!r->stopping) {
        r->stopping = 1;
        r->stop_ms = hvd__clock_now_ms();
        hvd__spawn_stop(&r->proc);
    }
}

/* Copy what the command wrote; -1 at end of file (the stream is over). */
static int forward(relay_t *r, int from, int to, char *buf, size_t size) {
    ssize_t n = read(from, buf, size);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (n <= 0)
        return -1;
    if (write_all(to, buf, (size_t)n) != 0)
        stop(r);
    return 0;
}

static int supervise(relay_t *r, int sfd, int watch_stdin) {
    static char buf[65536];
    int in_open = watch_stdin, out_open = 1, err_open = 1;
    while (!r->gone || out_open || err_open) {
        struct pollfd p[5] = {{.fd = sfd, .events = POLLIN},
                              {.fd = r->proc.ctl_fd, .events = POLLIN},
                              {.fd = out_open ? r->proc.out_fd : -1, .events = POLLIN},
                              {.fd = err_open ? r->proc.err_fd : -1, .events = POLLIN},
                              {.fd = in_open ? 0 : -1, .events = POLLIN}};
        if (r->proc.ctl_eof || r->proc.ctl_fd < 0)
            p[1].fd = -1;
        int n = poll(p, 5, 100);
        if (n < 0 && errno != EINTR)
            hvd__clock_sleep_ms(100);
        if (n > 0 && (p[0].revents & POLLIN)) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si)
                if (si.ssi_signo != SIGCHLD)
                    stop(r);
        }
        if (n > 0 && p[1].revents)
            hvd__spawn_read_report(&r->proc);
        if (n > 0 && p[2].revents && forward(r, r->proc.out_fd, 1, buf, sizeof buf) != 0)
            out_open = 0;
        if (n > 0 && p[3].revents && forward(r, r->proc.err_fd, 2, buf, sizeof buf) != 0)
            err_open = 0;
        if (n > 0 && p[4].revents) {
            /* nothing is expected on stdin: only its end matters */
            ssize_t got = read(0, buf, sizeof buf);
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
                in_open = 0;
                stop(r);
            }
        }
        int64_t now = hvd__clock_now_ms();
        if (!r->gone && hvd__spawn_reap(&r->proc)) {
            r->gone = 1;
            r->gone_ms = now;
        }
        if (!r->gone && r->stopping && !r->proc.kill_sent &&
            now - r->stop_ms >= r->grace_ms + BACKSTOP_MS)
            hvd__spawn_kill(&r->proc);
        if (r->gone && now - r->gone_ms >= DRAIN_MS)
            out_open = err_open = 0; /* something outside the tree holds the pipes */
    }
    return hvd__spawn_exit_code(hvd__spawn_status(&r->proc));
}

hvd_status_t hvd__relay_run(const hvd_relay_config_t *cfg, int *exit_code_p) {
    sigset_t mask;
    hvd__spawn_launcher_signals(&mask);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    relay_t r = {.proc = {.out_fd = -1, .err_fd = -1, .ctl_fd = -1},
                 .grace_ms = cfg->grace_ms > 0 ? cfg->grace_ms : HVD_SPAWN_DEFAULT_GRACE_MS};
    hvd_spawn_config_t sc = {.argv = cfg->argv, .envp = cfg->envp, .grace_ms = r.grace_ms};
    hvd_status_t st = hvd__spawn_start(&sc, &r.proc);
    if (st != HVD_OK)
        return st;
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    *exit_code_p = supervise(&r, sfd, cfg->stop_on_stdin_eof);
    hvd__spawn_close(&r.proc);
    if (sfd >= 0)
        close(sfd);
    return HVD_OK;
}
