#include "os/spawn.h"

#include "common/error.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Report records on the control socket: a tag byte and a 32-bit value. */
#define REPORT_PID 'P'
#define REPORT_STATUS 'S'
#define REPORT_LEN 5

int hvd__spawn_exit_code(int wait_status) {
    if (WIFEXITED(wait_status))
        return WEXITSTATUS(wait_status);
    if (WIFSIGNALED(wait_status))
        return 128 + WTERMSIG(wait_status);
    return 1;
}

void hvd__spawn_launcher_signals(sigset_t *set_p) {
    sigemptyset(set_p);
    sigaddset(set_p, SIGCHLD);
    sigaddset(set_p, SIGTERM);
    sigaddset(set_p, SIGINT);
    sigaddset(set_p, SIGHUP);
}

static int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void send_report(int fd, char tag, int32_t value) {
    char rec[REPORT_LEN];
    rec[0] = tag;
    memcpy(rec + 1, &value, 4);
    ssize_t r = send(fd, rec, sizeof rec, MSG_NOSIGNAL);
    (void)r;
}

/* Signal every process of the tree: the command's process group, every process of this
 * session, and every child (orphans reparented to us as subreaper, wherever they went).
 * Returns how many processes other than ourselves it found alive. */
static int signal_tree(pid_t cmd_pgid, int sig) {
    int found = 0;
    pid_t self = getpid();
    if (cmd_pgid > 0 && kill(-cmd_pgid, sig) == 0)
        found++;
    DIR *d = opendir("/proc");
    if (!d)
        return found;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0 || pid == self)
            continue;
        char path[64], buf[512];
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        /* fields after the command name "(...)": state ppid pgrp session */
        char *p = strrchr(buf, ')');
        char state;
        long ppid, pgrp, session;
        if (!p || sscanf(p + 1, " %c %ld %ld %ld", &state, &ppid, &pgrp, &session) != 4)
            continue;
        if (state == 'Z')
            continue;
        if (session == self || ppid == self) {
            kill((pid_t)pid, sig);
            found++;
        }
    }
    closedir(d);
    return found;
}

static void reap_all(pid_t cmd, int *cmd_status, int *cmd_done) {
    int st;
    pid_t p;
    while ((p = waitpid(-1, &st, WNOHANG)) > 0) {
        if (p == cmd) {
            *cmd_status = st;
            *cmd_done = 1;
        }
    }
}

/* Close every fd except the listed ones (fork inherits all of the launcher's: other ranks'
 * pipes, the rendezvous server's sockets). */
static void close_other_fds(const int *keep, int n) {
    int sorted[8];
    memcpy(sorted, keep, (size_t)n * sizeof *keep);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            int t = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = t;
        }
    unsigned lo = 3;
    for (int i = 0; i < n; i++) {
        if ((unsigned)sorted[i] > lo)
            close_range(lo, (unsigned)sorted[i] - 1, 0);
        if ((unsigned)sorted[i] + 1 > lo)
            lo = (unsigned)sorted[i] + 1;
    }
    close_range(lo, ~0u, 0);
}

static void exec_command(const hvd_spawn_config_t *cfg, int out_w, int err_w) {
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
        dup2(devnull, 0);
        close(devnull);
    }
    dup2(out_w, 1);
    dup2(err_w, 2);
    close_range(3, ~0u, 0);
    setpgid(0, 0);
    for (int sig = 1; sig < NSIG; sig++)
        signal(sig, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execvpe(cfg->argv[0], cfg->argv, cfg->envp);
    dprintf(2, "horovodrun: cannot execute '%s': %s\n", cfg->argv[0], strerror(errno));
    _exit(127);
}

/* The middleman's life: never returns. */
static void middleman(const hvd_spawn_config_t *cfg, int ctl, int out_w, int err_w) {
    int keep[] = {ctl, out_w, err_w};
    close_other_fds(keep, 3);
    setsid();
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    sigset_t mask;
    hvd__spawn_launcher_signals(&mask);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    pid_t cmd = fork();
    if (cmd == 0)
        exec_command(cfg, out_w, err_w);
    close(out_w);
    close(err_w);
    if (cmd < 0) {
        send_report(ctl, REPORT_STATUS, 127 << 8);
        _exit(127);
    }
    setpgid(cmd, cmd); /* also done by the child: whichever runs first */
    send_report(ctl, REPORT_PID, cmd);

    int cmd_status = 0, cmd_done = 0, stopping = 0;
    int64_t kill_at = 0;
    for (;;) {
        reap_all(cmd, &cmd_status, &cmd_done);
        if (cmd_done && !stopping) {
            /* The command is gone: end whatever it left behind, then report. */
            stopping = 1;
            if (signal_tree(0, SIGTERM) == 0)
                break;
            kill_at = mono_ms() + cfg->grace_ms;
        }
        if (stopping) {
            int left = signal_tree(cmd_done ? 0 : cmd, 0);
            if (cmd_done && left == 0)
                break;
            if (mono_ms() >= kill_at) {
                signal_tree(cmd_done ? 0 : cmd, SIGKILL);
                kill_at = mono_ms() + 1000; /* and again, for anything forked meanwhile */
            }
        }
        struct pollfd p[2] = {{.fd = sfd, .events = POLLIN}, {.fd = ctl, .events = POLLIN}};
        int timeout = stopping ? 50 : 1000;
        if (poll(p, stopping ? 1 : 2, timeout) < 0 && errno != EINTR)
            break;
        if (p[0].revents) {
            struct signalfd_siginfo si;
            int stop_signal = 0;
            while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si)
                stop_signal |= si.ssi_signo != SIGCHLD;
            if (stop_signal && !stopping) {
                stopping = 1;
                signal_tree(cmd, SIGTERM);
                kill_at = mono_ms() + cfg->grace_ms;
            }
        }
        if (!stopping && p[1].revents) {
            /* the launcher shut its end, or died: end the tree */
            stopping = 1;
            signal_tree(cmd, SIGTERM);
            kill_at = mono_ms() + cfg->grace_ms;
        }
    }
    send_report(ctl, REPORT_STATUS, cmd_status);
    _exit(hvd__spawn_exit_code(cmd_status));
}

hvd_status_t hvd__spawn_start(const hvd_spawn_config_t *cfg, hvd_spawn_t *proc_p) {
    int out[2], err[2], ctl[2];
    if (pipe2(out, O_CLOEXEC) != 0)
        goto err_none;
    if (pipe2(err, O_CLOEXEC) != 0)
        goto err_out;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) != 0)
        goto err_err;
    pid_t pid = fork();
    if (pid < 0)
        goto err_ctl;
    if (pid == 0) {
        close(out[0]);
        close(err[0]);
        close(ctl[0]);
        middleman(cfg, ctl[1], out[1], err[1]);
    }
    close(out[1]);
    close(err[1]);
    close(ctl[1]);
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    fcntl(ctl[0], F_SETFL, O_NONBLOCK);
    *proc_p = (hvd_spawn_t){.pid = pid, .out_fd = out[0], .err_fd = err[0], .ctl_fd = ctl[0]};
    return HVD_OK;

err_ctl:
    close(ctl[0]);
    close(ctl[1]);
err_err:
    close(err[0]);
    close(err[1]);
err_out:
    close(out[0]);
    close(out[1]);
err_none:
    return hvd__error_set(HVD_ERR_IO, "cannot start '%s': %s", cfg->argv[0], strerror(errno));
}

void hvd__spawn_stop(hvd_spawn_t *proc) {
    if (proc->stop_sent || proc->ctl_fd < 0)
        return;
    shutdown(proc->ctl_fd, SHUT_WR);
    proc->stop_sent = 1;
}

int hvd__spawn_read_report(hvd_spawn_t *proc, int *status_p) {
    char rec[REPORT_LEN];
    for (;;) {
        ssize_t n = recv(proc->ctl_fd, rec, sizeof rec, MSG_PEEK);
        if (n == 0)
            return -1;
        if (n < (ssize_t)sizeof rec)
            return 0; /* partial record: wait for the rest (records are 5 bytes) */
        n = recv(proc->ctl_fd, rec, sizeof rec, 0);
        int32_t v;
        memcpy(&v, rec + 1, 4);
        if (rec[0] == REPORT_PID) {
            proc->cmd_pid = v;
        } else if (rec[0] == REPORT_STATUS) {
            *status_p = v;
            return 1;
        }
    }
}

void hvd__spawn_close(hvd_spawn_t *proc) {
    int *fds[] = {&proc->out_fd, &proc->err_fd, &proc->ctl_fd};
    for (size_t i = 0; i < 3; i++) {
        if (*fds[i] >= 0)
            close(*fds[i]);
        *fds[i] = -1;
    }
}
