/* Running a helper under a deadline and capturing its output (capture.h). It is started with
 * posix_spawn, its process group and clean signal state set by spawn attributes; its exit is found
 * by polling waitpid at least every 50 ms, so no SIGCHLD handling is needed. */
#include "runner/process/capture.h"

#include "common/clock.h"
#include "common/error.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Read what is there, up to 64 KiB a call so that a writer that never stops cannot keep us
 * from the deadline; -1 at end of file or on error. */
static int capture_read(int fd, hvd_capture_buf_t *c) {
    char chunk[1024];
    for (int i = 0; i < 64; i++) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        if (n <= 0)
            return -1;
        size_t room = c->cap - 1 - c->len;
        size_t k = (size_t)n < room ? (size_t)n : room;
        c->overflow |= k < (size_t)n;
        memcpy(c->buf + c->len, chunk, k);
        c->len += k;
        c->buf[c->len] = '\0';
    }
    return 0;
}

void hvd__capture_keep_tail(char *buf, size_t cap, size_t *len, const char *data, size_t n) {
    if (n >= cap) {
        memcpy(buf, data + n - cap, cap);
        *len = cap;
        return;
    }
    if (*len + n > cap) {
        size_t drop = *len + n - cap;
        memmove(buf, buf + drop, *len - drop);
        *len -= drop;
    }
    memcpy(buf + *len, data, n);
    *len += n;
}

void hvd__capture_last_line(const char *text, size_t len, char *out, size_t size) {
    while (len && (text[len - 1] == '\n' || text[len - 1] == '\r'))
        len--;
    size_t start = len;
    while (start && text[start - 1] != '\n')
        start--;
    snprintf(out, size, "%.*s", (int)(len - start), text + start);
}

void hvd__capture_note(hvd_capture_buf_t *c, const char *reason) {
    size_t need = strlen(reason) + 2;
    if (need >= c->cap)
        need = c->cap - 1;
    if (c->len + need > c->cap - 1)
        c->len = c->cap - 1 - need;
    int n = snprintf(c->buf + c->len, c->cap - c->len, "%s%s\n",
                     c->len && c->buf[c->len - 1] != '\n' ? "\n" : "", reason);
    if (n > 0)
        c->len += (size_t)n < c->cap - c->len ? (size_t)n : c->cap - 1 - c->len;
}

static pid_t spawn(const hvd_capture_config_t *cfg, int out_fds[2], int err_fds[2]) {
    static char *const empty[] = {NULL};
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out_fds[1], 1);
    posix_spawn_file_actions_adddup2(&fa, cfg->err ? err_fds[1] : out_fds[1], 2);
    posix_spawnattr_init(&attr);
    /* A launcher reads its signals through a signalfd with them blocked; the child must not
     * inherit that mask, nor an ignored SIGPIPE. Its own process group lets the deadline end
     * whatever it started along with it. */
    sigset_t none, dfl;
    sigemptyset(&none);
    sigemptyset(&dfl);
    sigaddset(&dfl, SIGPIPE);
    sigaddset(&dfl, SIGINT);
    sigaddset(&dfl, SIGTERM);
    sigaddset(&dfl, SIGHUP);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &dfl);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                        POSIX_SPAWN_SETPGROUP);
    pid_t pid;
    int rc = posix_spawn(&pid, cfg->file, &fa, &attr, cfg->argv, cfg->envp ? cfg->envp : empty);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    return pid;
}

hvd_status_t hvd__capture_run(const hvd_capture_config_t *cfg, int *status_p, int *timed_out_p) {
    int out_fds[2] = {-1, -1}, err_fds[2] = {-1, -1};
    if (pipe2(out_fds, O_CLOEXEC) != 0 || (cfg->err && pipe2(err_fds, O_CLOEXEC) != 0)) {
        int e = errno;
        if (out_fds[0] >= 0) {
            close(out_fds[0]);
            close(out_fds[1]);
        }
        return hvd__error_set(HVD_ERR_IO, "cannot run %s: pipe: %s", cfg->file, strerror(e));
    }
    pid_t pid = spawn(cfg, out_fds, err_fds);
    int e = errno;
    close(out_fds[1]);
    if (cfg->err)
        close(err_fds[1]);
    if (pid < 0) {
        close(out_fds[0]);
        if (cfg->err)
            close(err_fds[0]);
        return hvd__error_set(HVD_ERR_IO, "cannot run %s: %s", cfg->file, strerror(e));
    }
    int fds[2] = {out_fds[0], cfg->err ? err_fds[0] : -1};
    hvd_capture_buf_t *bufs[2] = {cfg->out, cfg->err};
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0)
            fcntl(fds[i], F_SETFL, O_NONBLOCK);
    int64_t deadline = hvd__clock_now_ms() + cfg->timeout_ms, exited_ms = 0;
    int status = 0, exited = 0, timed_out = 0;
    while (fds[0] >= 0 || fds[1] >= 0 || !exited) {
        int64_t now = hvd__clock_now_ms();
        if (!exited && now >= deadline) {
            timed_out = 1;
            break;
        }
        if (exited && now - exited_ms >= HVD_CAPTURE_DRAIN_MS)
            break; /* something it left behind holds a pipe: what we have is enough */
        int wait = hvd__clock_remaining_ms(exited ? exited_ms + HVD_CAPTURE_DRAIN_MS : deadline);
        struct pollfd p[2] = {{.fd = fds[0], .events = POLLIN}, {.fd = fds[1], .events = POLLIN}};
        /* The exit is noticed by polling waitpid: wake at least every 50 ms. */
        if (poll(p, 2, wait < 50 ? wait : 50) > 0)
            for (int i = 0; i < 2; i++)
                if (fds[i] >= 0 && p[i].revents && capture_read(fds[i], bufs[i]) != 0) {
                    close(fds[i]);
                    fds[i] = -1;
                }
        if (!exited && waitpid(pid, &status, WNOHANG) == pid) {
            exited = 1;
            exited_ms = hvd__clock_now_ms();
        }
    }
    /* Whatever is still running in its process group (all of it on a timeout) is killed. */
    kill(-pid, SIGKILL);
    if (!exited) {
        kill(pid, SIGKILL);
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
    }
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0) {
            capture_read(fds[i], bufs[i]);
            close(fds[i]);
        }
    *status_p = status;
    *timed_out_p = timed_out;
    return HVD_OK;
}

hvd_status_t hvd__capture_shell(const char *command, int timeout_ms, hvd_capture_buf_t *out,
                                hvd_capture_buf_t *err, int *status_p, int *timed_out_p) {
    char *argv[] = {"sh", "-c", (char *)command, NULL};
    hvd_capture_config_t cc = {.file = "/bin/sh",
                               .argv = argv,
                               .envp = environ,
                               .timeout_ms = timeout_ms,
                               .out = out,
                               .err = err};
    return hvd__capture_run(&cc, status_p, timed_out_p);
}
