/* horovodrun --internal-exec (remote_exec.h): read the spec within 60 s, start each rank under its
 * middleman, then run one poll loop over stdin, signals and every rank's descriptors. A rank's EXIT
 * goes out as soon as its status is known, its END once its tree is gone and its pipes drained (2 s
 * at most). */
#include "runner/launch/remote_exec.h"

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "os/spawn.h"
#include "runner/process/env_list.h"
#include "runner/launch/exec_wire.h"
#include "wire/le.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/uio.h>
#include <unistd.h>

extern char **environ;

/* The spec is in ssh's pipe before ssh even connects; this bounds a stalled connection. */
#define SPEC_READ_MS 60000
/* Once a rank's tree is gone, output still in flight is copied for at most this long (a
 * process that escaped the tree could hold a pipe open forever). */
#define DRAIN_MS 2000
/* A middleman asked to stop that is still there this long after its grace is killed. */
#define BACKSTOP_MS 5000
#define TICK_MS 100
/* How often each running rank's state (stopped by a signal or not) is looked at. */
#define STATE_MS 1000

typedef struct {
    hvd_spawn_t proc;
    int out_open, err_open;
    int stopping, gone, exit_sent, ended;
    int sent_stopped; /* the state last sent in a STATE frame */
    int64_t stop_ms, gone_ms;
} rank_t;

typedef struct {
    rank_t *ranks;
    struct pollfd *pfd; /* 2 + 3 per rank */
    size_t n, ended;
    int grace_ms;
    int in_open;
    int launcher_gone; /* our stdout broke: nothing more can be sent */
    int64_t state_ms;  /* when the ranks' states were last looked at */
    uint8_t cmd[HVD_EXEC_COMMAND_LEN];
    size_t cmd_len;
    char host[256];
    uint8_t buf[HVD_EXEC_FRAME_MAX];
} sup_t;

/* ---- reading the spec ------------------------------------------------------------------- */

/* NOTHING_ASKED when the input ends before its first byte: nothing was asked of us (a task
 * service that went on waiting for ranks the launcher then did not send). */
#define NOTHING_ASKED HVD_ERR_SHUT_DOWN
static hvd_status_t read_exact(int fd, uint8_t *buf, size_t len, int64_t deadline) {
    for (size_t off = 0; off < len;) {
        int64_t left = deadline - hvd__clock_now_ms();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = left > 0 ? poll(&p, 1, (int)left) : 0;
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            return hvd__error_set(HVD_ERR_TIMEOUT, "timed out reading the command from the "
                                                   "launcher");
        ssize_t n = read(fd, buf + off, len - off);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n == 0 && off == 0)
            return NOTHING_ASKED;
        if (n <= 0)
            return hvd__error_set(HVD_ERR_IO, "the launcher's input ended before the command "
                                              "was complete");
        off += (size_t)n;
    }
    return HVD_OK;
}

static hvd_status_t read_spec(hvd_exec_spec_t *spec) {
    int64_t deadline = hvd__clock_now_ms() + SPEC_READ_MS;
    uint8_t header[HVD_EXEC_SPEC_HEADER_LEN];
    size_t len;
    hvd_status_t st = read_exact(0, header, sizeof header, deadline);
    if (st == HVD_OK)
        st = hvd__exec_spec_header(header, &len);
    if (st != HVD_OK)
        return st;
    uint8_t *payload = malloc(len ? len : 1);
    if (!payload)
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory reading the command");
    st = read_exact(0, payload, len, deadline);
    if (st == NOTHING_ASKED) /* after a header it is a truncated spec */
        st = hvd__error_set(HVD_ERR_IO, "the launcher's input ended before the command was "
                                        "complete");
    if (st == HVD_OK)
        st = hvd__exec_spec_decode(payload, len, spec);
    explicit_bzero(payload, len);
    free(payload);
    return st;
}

/* ---- frames to the launcher ------------------------------------------------------------- */

static void stop_all(sup_t *s);

static void send_frame(sup_t *s, uint8_t type, uint32_t index, const void *data, size_t len) {
    if (s->launcher_gone)
        return;
    uint8_t h[HVD_EXEC_FRAME_HEADER_LEN];
    hvd__exec_frame_header(h, type, index, (uint32_t)len);
    struct iovec iov[2] = {{h, sizeof h}, {(void *)data, len}};
    int cnt = len ? 2 : 1;
    size_t left = sizeof h + len;
    while (left > 0) {
        ssize_t w = writev(1, iov, cnt);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            s->launcher_gone = 1; /* whoever read us is gone: so is the job */
            stop_all(s);
            return;
        }
        left -= (size_t)w;
        for (int i = 0; i < cnt && w > 0; i++) {
            size_t take = (size_t)w < iov[i].iov_len ? (size_t)w : iov[i].iov_len;
            iov[i].iov_base = (uint8_t *)iov[i].iov_base + take;
            iov[i].iov_len -= take;
            w -= (ssize_t)take;
        }
    }
}

static void send_exit(sup_t *s, size_t i) {
    rank_t *r = &s->ranks[i];
    if (r->exit_sent)
        return;
    r->exit_sent = 1;
    uint8_t status[4];
    hvd__le32_put(status, (uint32_t)hvd__spawn_status(&r->proc));
    send_frame(s, HVD_EXEC_EXIT, (uint32_t)i, status, sizeof status);
}

/* ---- the ranks -------------------------------------------------------------------------- */

static void stop_rank(rank_t *r) {
    if (!r->stopping && !r->gone) {
        r->stopping = 1;
        r->stop_ms = hvd__clock_now_ms();
        hvd__spawn_stop(&r->proc);
    }
}

static void stop_all(sup_t *s) {
    for (size_t i = 0; i < s->n; i++)
        stop_rank(&s->ranks[i]);
}

/* Copy what a rank wrote into one frame; end of file or an error closes the stream. */
static void forward(sup_t *s, size_t i, int is_err) {
    rank_t *r = &s->ranks[i];
    ssize_t n = read(is_err ? r->proc.err_fd : r->proc.out_fd, s->buf, sizeof s->buf);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0)
        *(is_err ? &r->err_open : &r->out_open) = 0;
    else
        send_frame(s, is_err ? HVD_EXEC_ERR : HVD_EXEC_OUT, (uint32_t)i, s->buf, (size_t)n);
}

/* Commands from the launcher; its end of input stops everything. */
static void read_commands(sup_t *s) {
    ssize_t n = read(0, s->cmd + s->cmd_len, sizeof s->cmd - s->cmd_len);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        s->in_open = 0;
        stop_all(s);
        return;
    }
    s->cmd_len += (size_t)n;
    if (s->cmd_len < sizeof s->cmd)
        return;
    s->cmd_len = 0;
    uint32_t what, index;
    if (hvd__exec_command_decode(s->cmd, s->n, &what, &index) != 0) {
        fprintf(stderr,
                "horovodrun (on %s): the launcher sent a malformed command; stopping "
                "every rank\n",
                s->host);
        s->in_open = 0;
        stop_all(s);
        return;
    }
    if (what == HVD_EXEC_STOP)
        stop_rank(&s->ranks[index]);
    else if (!s->ranks[index].gone)
        hvd__spawn_kill(&s->ranks[index].proc);
}

/* STATE for a running rank whose command was stopped by a signal or continued since the last
 * look. */
static void send_state(sup_t *s, size_t i) {
    rank_t *r = &s->ranks[i];
    int stopped = hvd__spawn_cmd_stopped(&r->proc);
    if (stopped == r->sent_stopped)
        return;
    r->sent_stopped = stopped;
    uint8_t data[HVD_EXEC_STATE_LEN];
    hvd__le32_put(data, (uint32_t)stopped);
    hvd__le32_put(data + 4, (uint32_t)r->proc.cmd_pid);
    send_frame(s, HVD_EXEC_STATE, (uint32_t)i, data, sizeof data);
}

/* Deadlines and the end of each rank: EXIT as soon as the status is known, END once its tree
 * is reaped and its pipes drained. */
static void advance(sup_t *s) {
    int64_t now = hvd__clock_now_ms();
    int look = now - s->state_ms >= STATE_MS;
    if (look)
        s->state_ms = now;
    for (size_t i = 0; i < s->n; i++) {
        rank_t *r = &s->ranks[i];
        if (r->ended)
            continue;
        if (look && !r->gone && !r->proc.reported)
            send_state(s, i);
        if (!r->gone && hvd__spawn_reap(&r->proc)) {
            r->gone = 1;
            r->gone_ms = now;
            send_exit(s, i);
        }
        if (!r->gone && r->stopping && !r->proc.kill_sent &&
            now - r->stop_ms >= s->grace_ms + BACKSTOP_MS)
            hvd__spawn_kill(&r->proc);
        if (r->gone && now - r->gone_ms >= DRAIN_MS)
            r->out_open = r->err_open = 0;
        if (r->gone && !r->out_open && !r->err_open) {
            r->ended = 1;
            s->ended++;
            hvd__spawn_close(&r->proc);
            send_frame(s, HVD_EXEC_END, (uint32_t)i, NULL, 0);
        }
    }
}

static void supervise(sup_t *s, int sfd) {
    struct pollfd *p = s->pfd;
    while (s->ended < s->n) {
        size_t k = 0;
        p[k++] = (struct pollfd){.fd = sfd, .events = POLLIN};
        p[k++] = (struct pollfd){.fd = s->in_open ? 0 : -1, .events = POLLIN};
        for (size_t i = 0; i < s->n; i++) {
            rank_t *r = &s->ranks[i];
            int ctl = !r->ended && !r->proc.ctl_eof ? r->proc.ctl_fd : -1;
            p[k++] = (struct pollfd){.fd = ctl, .events = POLLIN};
            p[k++] = (struct pollfd){.fd = r->out_open ? r->proc.out_fd : -1, .events = POLLIN};
            p[k++] = (struct pollfd){.fd = r->err_open ? r->proc.err_fd : -1, .events = POLLIN};
        }
        int got = poll(p, k, TICK_MS);
        if (got < 0 && errno != EINTR)
            hvd__clock_sleep_ms(TICK_MS);
        if (got > 0 && p[0].revents) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si)
                if (si.ssi_signo != SIGCHLD)
                    stop_all(s);
        }
        if (got > 0 && p[1].revents)
            read_commands(s);
        for (size_t i = 0; got > 0 && i < s->n; i++) {
            const struct pollfd *q = &p[2 + 3 * i];
            if (q[0].revents && hvd__spawn_read_report(&s->ranks[i].proc))
                send_exit(s, i); /* the command ended: say so now, clean up after */
            if (q[1].revents)
                forward(s, i, 0);
            if (q[2].revents)
                forward(s, i, 1);
        }
        advance(s);
    }
}

/* ---- main ------------------------------------------------------------------------------- */

/* A rank's environment: this session's (what ssh gave us), the shared variables, its own. */
static hvd_status_t build_env(const hvd_exec_spec_t *spec, size_t i, hvd_env_list_t *env) {
    hvd__env_list_init(env);
    hvd_status_t st = hvd__env_list_set_entries(env, environ, NULL);
    if (st == HVD_OK)
        st = hvd__env_list_set_entries(env, spec->env, NULL);
    return st == HVD_OK ? hvd__env_list_set_entries(env, spec->rank_env[i], NULL) : st;
}

static void wipe_env(hvd_env_list_t *env) {
    for (size_t i = 0; i < env->count; i++)
        explicit_bzero(env->entries[i], strlen(env->entries[i]));
    hvd__env_list_fini(env);
}

/* Start rank i; one that cannot be started is reported and ends at once with code 126. */
static void start_rank(sup_t *s, const hvd_exec_spec_t *spec, size_t i) {
    rank_t *r = &s->ranks[i];
    r->proc = (hvd_spawn_t){.out_fd = -1, .err_fd = -1, .ctl_fd = -1};
    hvd_env_list_t env;
    hvd_status_t st = build_env(spec, i, &env);
    if (st == HVD_OK) {
        hvd_spawn_config_t sc = {.argv = spec->argv, .envp = env.entries, .grace_ms = s->grace_ms};
        st = hvd__spawn_start(&sc, &r->proc);
    }
    wipe_env(&env);
    if (st == HVD_OK) {
        r->out_open = r->err_open = 1;
        return;
    }
    fprintf(stderr, "horovodrun (on %s): cannot start the rank: %s\n", s->host, hvd_last_error());
    r->proc.reported = 1;
    r->proc.cmd_status = 126 << 8;
    r->gone = 1;
    r->gone_ms = hvd__clock_now_ms();
}

/* The host as the user wrote it (machines may share a host name: containers). */
static void name_host(sup_t *s, const hvd_exec_spec_t *spec) {
    gethostname(s->host, sizeof s->host - 1);
    char *const *lists[2] = {spec->env, spec->rank_env[0]};
    for (int l = 0; l < 2; l++)
        for (size_t i = 0; lists[l] && lists[l][i]; i++)
            if (strncmp(lists[l][i], "HOROVOD_HOSTNAME=", 17) == 0 && lists[l][i][17])
                snprintf(s->host, sizeof s->host, "%s", lists[l][i] + 17);
}

int hvd__remote_exec_main(void) {
    signal(SIGPIPE, SIG_IGN);
    static sup_t sup;
    sup_t *s = &sup;
    snprintf(s->host, sizeof s->host, "?");
    gethostname(s->host, sizeof s->host - 1);

    /* Until there are ranks to look after, a signal simply ends us. */
    hvd_exec_spec_t spec;
    hvd_status_t st = read_spec(&spec);
    if (st == NOTHING_ASKED)
        return 0;
    if (st != HVD_OK) {
        fprintf(stderr, "horovodrun (on %s): %s\n", s->host, hvd_last_error());
        return 126;
    }
    sigset_t mask;
    hvd__spawn_launcher_signals(&mask);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    name_host(s, &spec);
    s->n = spec.nranks;
    s->grace_ms = spec.grace_ms ? (int)spec.grace_ms : HVD_SPAWN_DEFAULT_GRACE_MS;
    s->ranks = calloc(s->n, sizeof *s->ranks);
    s->pfd = calloc(2 + 3 * s->n, sizeof *s->pfd);
    if (!s->ranks || !s->pfd) {
        fprintf(stderr, "horovodrun (on %s): out of memory for %zu ranks\n", s->host, s->n);
        hvd__exec_spec_fini(&spec);
        free(s->ranks);
        free(s->pfd);
        return 126;
    }
    const char *home = getenv("HOME");
    if (*spec.cwd && chdir(spec.cwd) != 0) /* ("": stay where the agent started us) */
        fprintf(stderr,
                "horovodrun (on %s): cannot change to the launcher's directory %s (%s); the "
                "command runs in %s\n",
                s->host, spec.cwd, strerror(errno), home ? home : "the login directory");
    for (size_t i = 0; i < s->n; i++)
        start_rank(s, &spec, i);
    hvd__exec_spec_fini(&spec);
    send_frame(s, HVD_EXEC_READY, 0, NULL, 0);
    s->in_open = 1;
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    supervise(s, sfd);
    if (sfd >= 0)
        close(sfd);
    free(s->ranks);
    free(s->pfd);
    return 0;
}
