/* The middleman and the launcher's handle on it (spawn.h). In order: what is prepared before fork,
 * async-signal-safe helpers, the command (the grandchild), finding and signalling a rank's tree
 * through /proc (each signal pinned with a pidfd, so a reused pid is never hit), the middleman's
 * loop, the launcher's side. */
#include "os/spawn.h"

#include "common/clock.h"
#include "common/error.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Report records on the control socket (SOCK_SEQPACKET, so each arrives whole): a tag byte
 * and a 32-bit value in host order (both ends are the same program on the same host). */
#define REPORT_PID 'P'
#define REPORT_STATUS 'S'
#define REPORT_LEN 5

/* While ending a tree, how often the middleman looks for what is still alive. */
#define SCAN_FIRST_MS 20
#define SCAN_MAX_MS 200
/* After SIGKILL, how long to wait for processes that cannot die (uninterruptible sleep)
 * before the middleman gives up on them and exits anyway. */
#define GIVE_UP_MS 10000
/* While the command runs, the middleman wakes this often even without events, so that no
 * wait is unbounded (a lost SIGCHLD cannot hang it). */
#define IDLE_TICK_MS 1000

/* ---- prepared before fork ------------------------------------------------------------------ */

/* Everything the middleman and the command need, built in the launcher before fork so that
 * the child never allocates. */
typedef struct {
    char *const *argv;
    char *const *envp;
    char **paths;   /* files to try for argv[0], in PATH order, NULL-terminated */
    char **sh_argv; /* {"/bin/sh", <file>, argv[1..], NULL}: scripts without "#!" (ENOEXEC) */
    int grace_ms;
    long nofile_soft;
} exec_plan_t;

static char *const empty_env[] = {NULL};

static void plan_fini(exec_plan_t *plan) {
    if (plan->paths)
        for (char **p = plan->paths; *p; p++)
            free(*p);
    free(plan->paths);
    free(plan->sh_argv);
    memset(plan, 0, sizeof *plan);
}

static const char *env_value(char *const *envp, const char *name) {
    size_t n = strlen(name);
    for (char *const *e = envp; *e; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

/* The candidate files for argv[0]: itself if it names a path, else each PATH directory in
 * turn (an empty element is the current directory, as execvp does). PATH is the command's
 * own, as when `env VAR=... cmd` runs it; without one, execvp's default. */
static hvd_status_t plan_init(const hvd_spawn_config_t *cfg, exec_plan_t *plan) {
    memset(plan, 0, sizeof *plan);
    plan->argv = cfg->argv;
    plan->envp = cfg->envp ? cfg->envp : empty_env;
    plan->grace_ms = cfg->grace_ms > 0 ? cfg->grace_ms : HVD_SPAWN_DEFAULT_GRACE_MS;
    plan->nofile_soft = cfg->nofile_soft;
    const char *name = cfg->argv[0];
    size_t name_len = strlen(name);
    const char *path = strchr(name, '/') ? NULL : env_value(plan->envp, "PATH");
    if (!strchr(name, '/') && !path)
        path = "/bin:/usr/bin";
    size_t count = 1;
    for (const char *c = path; c && *c; c++)
        count += *c == ':';
    plan->paths = calloc(count + 1, sizeof *plan->paths);
    size_t argc = 0;
    while (cfg->argv[argc])
        argc++;
    plan->sh_argv = calloc(argc + 2, sizeof *plan->sh_argv);
    if (!plan->paths || !plan->sh_argv)
        goto err_free_plan;
    if (!path) {
        if (!(plan->paths[0] = strdup(name)))
            goto err_free_plan;
    } else {
        size_t k = 0;
        for (const char *dir = path;; k++) {
            const char *end = strchr(dir, ':');
            size_t dir_len = end ? (size_t)(end - dir) : strlen(dir);
            char *file = malloc(dir_len + name_len + 3);
            if (!file)
                goto err_free_plan;
            if (dir_len == 0)
                file[0] = '.', dir_len = 1;
            else
                memcpy(file, dir, dir_len);
            file[dir_len] = '/';
            memcpy(file + dir_len + 1, name, name_len + 1);
            plan->paths[k] = file;
            if (!end)
                break;
            dir = end + 1;
        }
    }
    plan->sh_argv[0] = "/bin/sh";
    for (size_t i = 1; i < argc; i++)
        plan->sh_argv[i + 1] = cfg->argv[i];
    return HVD_OK;

err_free_plan:
    plan_fini(plan);
    return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory preparing to start '%s'", name);
}

/* ---- async-signal-safe helpers for the forked children --------------------------------------- */

typedef struct {
    char *p;
    size_t left;
} sbuf_t;

static void sb_str(sbuf_t *b, const char *s) {
    while (*s && b->left > 1) {
        *b->p++ = *s++;
        b->left--;
    }
    *b->p = '\0';
}

static void sb_int(sbuf_t *b, long v) {
    char digits[24];
    size_t n = 0;
    unsigned long u = v < 0 ? 0UL - (unsigned long)v : (unsigned long)v;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        digits[n++] = '-';
    char out[24];
    for (size_t i = 0; i < n; i++)
        out[i] = digits[n - 1 - i];
    out[n] = '\0';
    sb_str(b, out);
}

static void write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static void send_report(int fd, char tag, int32_t value) {
    char rec[REPORT_LEN];
    rec[0] = tag;
    memcpy(rec + 1, &value, sizeof value);
    while (send(fd, rec, sizeof rec, MSG_NOSIGNAL) < 0 && errno == EINTR)
        ;
}

/* Close every fd >= 3 except the listed ones. close_range() where the kernel has it (5.9+),
 * else one by one up to the fd limit. */
static void close_fds_except(const int *keep, int n) {
    int sorted[8]; /* n <= 8 */
    for (int i = 0; i < n; i++) {
        int j = i;
        for (; j > 0 && sorted[j - 1] > keep[i]; j--)
            sorted[j] = sorted[j - 1];
        sorted[j] = keep[i];
    }
    unsigned lo = 3;
    for (int i = 0; i <= n; i++) {
        unsigned hi = i < n ? (unsigned)sorted[i] : ~0U; /* close [lo, hi) */
        if (hi > lo && syscall(SYS_close_range, lo, hi - 1, 0) != 0) {
            struct rlimit rl;
            unsigned max = 65536;
            if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
                rl.rlim_cur < (rlim_t)(1u << 20))
                max = (unsigned)rl.rlim_cur;
            for (unsigned fd = lo; fd < hi && fd < max; fd++)
                close((int)fd);
        }
        if (i < n && (unsigned)sorted[i] + 1 > lo)
            lo = (unsigned)sorted[i] + 1;
    }
}

/* Make sure fd is not 0, 1 or 2, which are about to be replaced. */
static int move_above_stdio(int fd) {
    if (fd > 2)
        return fd;
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    return moved >= 0 ? moved : fd;
}

/* ---- the command (grandchild) -----------------------------------------------------------------
 */

static _Noreturn void command_main(exec_plan_t *plan, pid_t middleman, int in_r, int out_w,
                                   int err_w) {
    /* Its own process group, so that the tree can be signalled as a whole. */
    setpgid(0, 0);
    /* If the middleman is killed outright (OOM killer, kill -9), the command dies with it
     * instead of running on unsupervised; pdeathsig survives execve. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != middleman)
        _exit(126); /* the middleman died before the line above took effect */

    out_w = move_above_stdio(out_w);
    err_w = move_above_stdio(err_w);
    if (in_r >= 0) {
        dup2(in_r, 0);
    } else {
        /* not close-on-exec: if it lands on 0 (stdin was closed) it is the command's stdin */
        int null_fd = open("/dev/null", O_RDONLY);
        if (null_fd > 0)
            dup2(null_fd, 0);
    }
    dup2(out_w, 1);
    dup2(err_w, 2);
    close_fds_except(NULL, 0);

    if (plan->nofile_soft > 0) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
            rlim_t want = (rlim_t)plan->nofile_soft;
            rl.rlim_cur = rl.rlim_max != RLIM_INFINITY && want > rl.rlim_max ? rl.rlim_max : want;
            setrlimit(RLIMIT_NOFILE, &rl);
        }
    }
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            sigaction(sig, &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);

    /* execvp's search, on the prepared list: remember EACCES, stop at errors that are not
     * "not here". */
    int err = ENOENT, denied = 0;
    for (char **file = plan->paths; *file; file++) {
        execve(*file, plan->argv, plan->envp);
        err = errno;
        if (err == ENOEXEC) {
            plan->sh_argv[1] = *file;
            execve(plan->sh_argv[0], plan->sh_argv, plan->envp);
            err = errno;
        }
        if (err == EACCES)
            denied = 1;
        else if (err != ENOENT && err != ENOTDIR && err != ESTALE && err != ENODEV &&
                 err != ETIMEDOUT)
            break;
    }
    if (denied && (err == ENOENT || err == ENOTDIR))
        err = EACCES;
    char msg[1024];
    sbuf_t b = {msg, sizeof msg};
    sb_str(&b, "horovodrun: cannot execute '");
    sb_str(&b, plan->argv[0]);
    sb_str(&b, "': ");
    const char *desc = strerrordesc_np(err);
    if (desc) {
        sb_str(&b, desc);
    } else {
        sb_str(&b, "error ");
        sb_int(&b, err);
    }
    sb_str(&b, "\n");
    write_all(2, msg, strlen(msg));
    /* the shell's convention: 127 not found, 126 found but not executable */
    _exit(err == ENOENT || err == ENOTDIR ? 127 : 126);
}

/* ---- the tree: finding and signalling every process of a rank ------------------------------ */

typedef struct {
    pid_t pid, ppid, pgrp, sid;
    int in_tree;
} proc_info_t;

/* The middleman's process table, mapped on first use (the middleman must not malloc). */
#define TABLE_CAP 65536
static proc_info_t *g_table;

static int parse_long(const char **p, long *v) {
    const char *s = *p;
    while (*s == ' ')
        s++;
    int neg = *s == '-';
    if (neg)
        s++;
    if (*s < '0' || *s > '9')
        return -1;
    long r = 0;
    while (*s >= '0' && *s <= '9')
        r = r * 10 + (*s++ - '0');
    *v = neg ? -r : r;
    *p = s;
    return 0;
}

/* /proc/<pid>/stat read into buf (size bytes), from its state on ("S ppid pgrp session ..."),
 * or NULL when the process is gone. System calls only: the middleman uses it. */
static const char *stat_fields(pid_t pid, char *buf, size_t size) {
    char path[40];
    sbuf_t b = {path, sizeof path};
    sb_str(&b, "/proc/");
    sb_int(&b, pid);
    sb_str(&b, "/stat");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n <= 0)
        return NULL;
    buf[n] = '\0';
    /* "pid (comm) state ...": comm may hold anything, so the state follows the last ')' */
    const char *p = memrchr(buf, ')', (size_t)n);
    return p && p[1] == ' ' && p[2] ? p + 2 : NULL;
}

/* Read pid, ppid, pgrp and session from /proc/<pid>/stat. -1 if the process is gone or is a
 * zombie (which no signal can affect and which its parent will reap). */
static int read_stat(pid_t pid, proc_info_t *pi) {
    char buf[512];
    const char *p = stat_fields(pid, buf, sizeof buf);
    if (!p)
        return -1;
    char state = p[0];
    if (state == 'Z' || state == 'X' || state == 'x')
        return -1;
    p += 1;
    long ppid, pgrp, sid;
    if (parse_long(&p, &ppid) || parse_long(&p, &pgrp) || parse_long(&p, &sid))
        return -1;
    pi->pid = pid;
    pi->ppid = (pid_t)ppid;
    pi->pgrp = (pid_t)pgrp;
    pi->sid = (pid_t)sid;
    pi->in_tree = 0;
    return 0;
}

/* Directly in the tree: our session (we lead it), the command's process group, or our child
 * (orphans are reparented to us as subreaper, even from other sessions). */
static int directly_in_tree(const proc_info_t *pi, pid_t self, pid_t pgid) {
    return pi->sid == self || (pgid > 0 && pi->pgrp == pgid) || pi->ppid == self;
}

/* Send sig to pid, but only if it is still the process we found: a pidfd pins the process,
 * and re-reading its stat through the same pid then checks that the pid was not reused. */
static void signal_verified(const proc_info_t *found, pid_t self, pid_t pgid, int sig) {
    int pidfd = (int)syscall(SYS_pidfd_open, found->pid, 0);
    if (pidfd < 0) {
        if (errno == ENOSYS)
            kill(found->pid, sig);
        return;
    }
    proc_info_t now;
    if (read_stat(found->pid, &now) == 0 &&
        (directly_in_tree(&now, self, pgid) || now.ppid == found->ppid))
        syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0);
    close(pidfd);
}

/* Signal every live process of the tree with sig (0: only count). The tree is the command's
 * process group, our session, our children, and, transitively, their descendants wherever
 * they went (a daemon that called setsid() while its parent lives). Returns how many live
 * processes it found, not counting ourselves. */
static int tree_signal(pid_t self, pid_t pgid, int sig) {
    if (sig && pgid > 0)
        kill(-pgid, sig); /* first, and at once, so that nothing forked meanwhile escapes */
    if (!g_table) {
        void *m = mmap(NULL, TABLE_CAP * sizeof *g_table, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        g_table = m == MAP_FAILED ? NULL : m;
    }
    int found = 0;
    size_t n = 0;
    int dfd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return pgid > 0 && kill(-pgid, 0) == 0 ? 1 : 0;
    char dents[8192] __attribute__((aligned(8)));
    for (;;) {
        long got = syscall(SYS_getdents64, dfd, dents, sizeof dents);
        if (got <= 0)
            break;
        for (long off = 0; off < got;) {
            /* struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name */
            unsigned short reclen;
            memcpy(&reclen, dents + off + 16, sizeof reclen);
            const char *name = dents + off + 19;
            off += reclen;
            long pid = 0;
            const char *s = name;
            if (*s < '1' || *s > '9' || parse_long(&s, &pid) || *s)
                continue;
            proc_info_t pi;
            if ((pid_t)pid == self || read_stat((pid_t)pid, &pi) != 0)
                continue;
            pi.in_tree = directly_in_tree(&pi, self, pgid);
            if (g_table && n < TABLE_CAP) {
                g_table[n++] = pi;
            } else if (pi.in_tree) {
                /* no room to look for descendants: at least the direct members */
                found++;
                if (sig)
                    signal_verified(&pi, self, pgid, sig);
            }
        }
    }
    close(dfd);
    /* Descendants that left the session: their parent is in the tree. Repeat until nothing
     * changes; each pass reaches one more generation. */
    for (int changed = 1; changed;) {
        changed = 0;
        for (size_t i = 0; i < n; i++) {
            if (g_table[i].in_tree)
                continue;
            for (size_t j = 0; j < n; j++)
                if (g_table[j].in_tree && g_table[j].pid == g_table[i].ppid) {
                    g_table[i].in_tree = changed = 1;
                    break;
                }
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (!g_table[i].in_tree)
            continue;
        found++;
        if (sig)
            signal_verified(&g_table[i], self, pgid, sig);
    }
    return found;
}

/* ---- the middleman ------------------------------------------------------------------------------
 */

/* Reap every child that ended. Returns 1 when no child is left at all. */
static int reap_children(pid_t cmd, int *cmd_done, int *cmd_status) {
    int st;
    pid_t p;
    /* as subreaper we reap everything: the command, and orphans reparented to us */
    while ((p = waitpid(-1, &st, WNOHANG | __WALL)) > 0)
        if (p == cmd && !*cmd_done) {
            *cmd_done = 1;
            *cmd_status = st;
        }
    return p < 0 && errno == ECHILD;
}

static _Noreturn void middleman_main(exec_plan_t *plan, int ctl, int in_r, int in_w, int out_w,
                                     int err_w) {
    pid_t self = getpid();

    /* Keep only our three fds (fork copied all of the launcher's: other ranks' pipes, the
     * rendezvous server's sockets), with stdio on /dev/null so that the middleman does not
     * hold the launcher's terminal or pipes. */
    ctl = move_above_stdio(ctl);
    out_w = move_above_stdio(out_w);
    err_w = move_above_stdio(err_w);
    if (in_r >= 0) {
        in_r = move_above_stdio(in_r);
        in_w = move_above_stdio(in_w);
    }
    int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int fd = 0; fd < 3 && null_fd >= 0; fd++)
        if (fd != null_fd)
            dup2(null_fd, fd);
    /* in_w stays open until the middleman exits: the command's stdin ends with supervision */
    int keep[5] = {ctl, out_w, err_w, in_r, in_w};
    close_fds_except(keep, in_r >= 0 ? 5 : 3);

    setsid();
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    /* Stop requests by signal (SIGTERM, SIGINT, SIGHUP) and SIGCHLD come through a signalfd;
     * SIGPIPE is ignored so that reporting to a dead launcher cannot kill us. */
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, NULL);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);

    pid_t cmd = fork();
    if (cmd == 0)
        command_main(plan, self, in_r, out_w, err_w);
    if (cmd < 0) {
        int e = errno;
        char msg[512];
        sbuf_t b = {msg, sizeof msg};
        sb_str(&b, "horovodrun: cannot start '");
        sb_str(&b, plan->argv[0]);
        sb_str(&b, "': fork: ");
        sb_str(&b, strerrordesc_np(e) ? strerrordesc_np(e) : "error");
        sb_str(&b, "\n");
        write_all(err_w, msg, strlen(msg));
        send_report(ctl, REPORT_STATUS, W_EXITCODE(126, 0));
        _exit(126);
    }
    setpgid(cmd, cmd); /* the command does it too: whichever runs first */
    /* Only the command's tree may hold the write ends, so that EOF means it is gone. */
    close(out_w);
    close(err_w);
    if (in_r >= 0)
        close(in_r); /* the command is the only reader */
    send_report(ctl, REPORT_PID, cmd);

    int cmd_done = 0, cmd_status = 0, reported = 0, stopping = 0;
    int64_t kill_at = 0, give_up_at = 0, scan_ms = SCAN_FIRST_MS;
    for (;;) {
        int childless = reap_children(cmd, &cmd_done, &cmd_status);
        if (cmd_done && !reported) {
            /* report at once, before cleaning up, so that the launcher can act on a failure */
            send_report(ctl, REPORT_STATUS, cmd_status);
            reported = 1;
        }
        int64_t now = hvd__clock_now_ms();
        int begin_stop = 0;
        if (stopping) {
            int sig = now >= kill_at ? SIGKILL : 0;
            int alive = tree_signal(self, cmd_done ? 0 : cmd, sig);
            if (alive == 0 && cmd_done)
                break;
            if (now >= give_up_at)
                break; /* only unkillable processes are left (uninterruptible sleep) */
        } else if (cmd_done) {
            /* The command ended: whatever it left behind ends with it. Anything left has an
             * ancestor that is our child (orphans are reparented to us), so with no child
             * left there is nothing, and no scan of /proc: 2,048 middlemen each reading every
             * process's stat at the end of a job took seconds. */
            if (childless || tree_signal(self, 0, 0) == 0)
                break;
            begin_stop = 1;
        }

        struct pollfd p[2] = {{.fd = sfd, .events = POLLIN}, {.fd = ctl, .events = POLLIN}};
        int timeout = IDLE_TICK_MS;
        if (stopping) {
            timeout = (int)scan_ms;
            scan_ms = scan_ms * 2 > SCAN_MAX_MS ? SCAN_MAX_MS : scan_ms * 2;
            if (now < kill_at && kill_at - now < timeout)
                timeout = (int)(kill_at - now);
        }
        if (!begin_stop) {
            /* once stopping, the control socket no longer matters (and its EOF would spin) */
            int r = poll(p, stopping ? 1 : 2, timeout);
            if (r < 0 && errno != EINTR)
                hvd__clock_sleep_ms(timeout); /* cannot wait on fds: keep the cadence */
            if (r > 0 && (p[0].revents & POLLIN)) {
                struct signalfd_siginfo si;
                while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si)
                    if (si.ssi_signo != SIGCHLD)
                        begin_stop = 1;
            }
            if (r > 0 && !stopping && p[1].revents) {
                /* a byte, or end of file: the launcher shut its end, or died */
                char c;
                ssize_t got = recv(ctl, &c, 1, MSG_DONTWAIT);
                if (got >= 0 || (errno != EAGAIN && errno != EINTR) ||
                    (p[1].revents & (POLLHUP | POLLERR)))
                    begin_stop = 1;
            }
        }
        if (begin_stop && !stopping) {
            stopping = 1;
            tree_signal(self, cmd_done ? 0 : cmd, SIGTERM);
            /* a stopped process would hold SIGTERM until continued */
            tree_signal(self, cmd_done ? 0 : cmd, SIGCONT);
            kill_at = hvd__clock_now_ms() + plan->grace_ms;
            give_up_at = kill_at + GIVE_UP_MS;
        }
    }
    reap_children(cmd, &cmd_done, &cmd_status);
    if (!cmd_done)
        cmd_status = SIGKILL; /* gave up on it: it was sent SIGKILL and will die with us */
    if (!reported)
        send_report(ctl, REPORT_STATUS, cmd_status);
    _exit(hvd__spawn_exit_code(cmd_status));
}

/* ---- the launcher's side -----------------------------------------------------------------------
 */

int hvd__spawn_cmd_stopped(const hvd_spawn_t *proc) {
    if (proc->cmd_pid <= 0 || proc->reported)
        return 0;
    char buf[512];
    const char *p = stat_fields(proc->cmd_pid, buf, sizeof buf);
    return p && *p == 'T';
}

int hvd__spawn_exit_code(int wait_status) {
    if (WIFEXITED(wait_status))
        return WEXITSTATUS(wait_status);
    if (WIFSIGNALED(wait_status))
        return 128 + WTERMSIG(wait_status);
    return 1;
}

void hvd__spawn_describe_status(int wait_status, char *out, size_t out_size) {
    if (WIFSIGNALED(wait_status)) {
        int sig = WTERMSIG(wait_status);
        const char *abbrev = sigabbrev_np(sig);
        snprintf(out, out_size, "killed by signal %d (%s%s)", sig, abbrev ? "SIG" : "",
                 abbrev ? abbrev : "unknown signal");
    } else {
        snprintf(out, out_size, "exit code %d", hvd__spawn_exit_code(wait_status));
    }
}

void hvd__spawn_launcher_signals(sigset_t *set_p) {
    sigemptyset(set_p);
    sigaddset(set_p, SIGCHLD);
    sigaddset(set_p, SIGTERM);
    sigaddset(set_p, SIGINT);
    sigaddset(set_p, SIGHUP);
}

static int set_nonblocking(int fd) {
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* A pipe holding all of data, made large enough first, so that writing never blocks and the
 * command finds everything there when it starts. */
static int fill_stdin_pipe(const void *data, size_t len, int fds[2]) {
    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    if (len > 65536 && fcntl(fds[1], F_SETPIPE_SZ, (int)len) < 0)
        goto fail;
    if (set_nonblocking(fds[1]) != 0)
        goto fail;
    for (size_t off = 0; off < len;) {
        ssize_t w = write(fds[1], (const char *)data + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            goto fail;
        off += (size_t)w;
    }
    return 0;
fail:;
    int e = errno;
    close(fds[0]);
    close(fds[1]);
    fds[0] = fds[1] = -1;
    errno = e ? e : EIO;
    return -1;
}

hvd_status_t hvd__spawn_start(const hvd_spawn_config_t *cfg, hvd_spawn_t *proc_p) {
    if (!cfg->argv || !cfg->argv[0] || !cfg->argv[0][0])
        return hvd__error_set(HVD_ERR_INVALID_ARG, "no command to start");
    if (cfg->stdin_data && cfg->stdin_len > HVD_SPAWN_STDIN_MAX)
        return hvd__error_set(HVD_ERR_INVALID_ARG,
                              "cannot start '%s': its input is %zu bytes, more than the %d "
                              "a command can be given",
                              cfg->argv[0], cfg->stdin_len, HVD_SPAWN_STDIN_MAX);
    exec_plan_t plan;
    hvd_status_t st = plan_init(cfg, &plan);
    if (st != HVD_OK)
        return st;
    int in[2] = {-1, -1}, out[2], err[2], ctl[2];
    const char *what = "pipe";
    if (cfg->stdin_data && fill_stdin_pipe(cfg->stdin_data, cfg->stdin_len, in) != 0) {
        what = "stdin pipe";
        goto err_free_plan;
    }
    if (pipe2(out, O_CLOEXEC) != 0)
        goto err_close_in;
    if (pipe2(err, O_CLOEXEC) != 0)
        goto err_close_out;
    what = "socketpair";
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) != 0)
        goto err_close_err;
    /* the command's ends stay blocking; ours never block the launcher's loop */
    what = "fcntl";
    if (set_nonblocking(out[0]) || set_nonblocking(err[0]) || set_nonblocking(ctl[0]))
        goto err_close_ctl;
    what = "fork";
    pid_t pid = fork();
    if (pid < 0)
        goto err_close_ctl;
    if (pid == 0)
        middleman_main(&plan, ctl[1], in[0], in[1], out[1], err[1]);
    if (in[0] >= 0) {
        close(in[0]);
        if (cfg->stdin_writer_p)
            *cfg->stdin_writer_p = in[1];
        else
            close(in[1]);
    }
    close(out[1]);
    close(err[1]);
    close(ctl[1]);
    plan_fini(&plan);
    *proc_p = (hvd_spawn_t){.pid = pid, .out_fd = out[0], .err_fd = err[0], .ctl_fd = ctl[0]};
    return HVD_OK;

err_close_ctl:
    close(ctl[0]);
    close(ctl[1]);
err_close_err:
    close(err[0]);
    close(err[1]);
err_close_out:
    close(out[0]);
    close(out[1]);
err_close_in:
    if (in[0] >= 0) {
        close(in[0]);
        close(in[1]);
    }
err_free_plan:;
    int e = errno;
    plan_fini(&plan);
    return hvd__error_set(HVD_ERR_IO, "cannot start '%s': %s: %s", cfg->argv[0], what, strerror(e));
}

void hvd__spawn_stop(hvd_spawn_t *proc) {
    if (proc->stop_sent || proc->ctl_fd < 0)
        return;
    /* end of file on the middleman's side; if it already went away this changes nothing */
    shutdown(proc->ctl_fd, SHUT_WR);
    proc->stop_sent = 1;
}

void hvd__spawn_kill(hvd_spawn_t *proc) {
    if (proc->reaped || proc->pid <= 0)
        return; /* a reaped pid may already belong to someone else */
    if (!proc->kill_sent)
        proc->kill_sent = hvd__clock_now_ms();
    if (proc->cmd_pid > 0 && !proc->reported)
        kill(-proc->cmd_pid, SIGKILL);
    kill(proc->pid, SIGKILL);
}

int hvd__spawn_read_report(hvd_spawn_t *proc) {
    int final = 0;
    while (proc->ctl_fd >= 0 && !proc->ctl_eof) {
        char rec[REPORT_LEN + 1];
        ssize_t n = recv(proc->ctl_fd, rec, sizeof rec, MSG_DONTWAIT);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            break;
        if (n <= 0) {
            proc->ctl_eof = 1; /* end of file, or the socket failed: nothing more will come */
            break;
        }
        if (n != REPORT_LEN)
            continue; /* not one of ours */
        int32_t v;
        memcpy(&v, rec + 1, sizeof v);
        if (rec[0] == REPORT_PID) {
            proc->cmd_pid = v;
        } else if (rec[0] == REPORT_STATUS && !proc->reported) {
            proc->cmd_status = v;
            proc->reported = 1;
            final = 1;
        }
    }
    return final;
}

int hvd__spawn_reap(hvd_spawn_t *proc) {
    if (proc->reaped)
        return 1;
    if (proc->pid <= 0)
        return 0;
    int st;
    pid_t r;
    while ((r = waitpid(proc->pid, &st, WNOHANG)) < 0 && errno == EINTR)
        ;
    if (r == proc->pid) {
        proc->mm_status = st;
    } else if (r < 0 && errno == ECHILD) {
        /* reaped behind our back (SIGCHLD set to SIG_IGN): all we can know is the report */
        proc->mm_status = proc->reported ? proc->cmd_status : W_EXITCODE(1, 0);
    } else {
        return 0;
    }
    proc->reaped = 1;
    /* the final report was sent before the middleman exited: pick it up if not yet read */
    hvd__spawn_read_report(proc);
    return 1;
}

int hvd__spawn_status(const hvd_spawn_t *proc) {
    return proc->reported ? proc->cmd_status : proc->mm_status;
}

void hvd__spawn_close(hvd_spawn_t *proc) {
    int *fds[] = {&proc->out_fd, &proc->err_fd, &proc->ctl_fd};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; i++) {
        if (*fds[i] >= 0)
            close(*fds[i]);
        *fds[i] = -1;
    }
}
