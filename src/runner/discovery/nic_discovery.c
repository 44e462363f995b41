/* The launcher's run of NIC discovery (nic_discovery.h): one task process per host under
 * os/spawn.h, its output drained to keep the last 2 KiB, checked from the driver's wait so that a
 * task that dies ends it at once. After a success the remote tasks are ended or handed to the
 * launch as ready sessions. */
#include "runner/discovery/nic_discovery.h"

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "os/spawn.h"
#include "runner/process/capture.h"
#include "runner/discovery/discovery_msg.h"
#include "runner/process/say.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

/* What is kept of a task's output: its last line says why it failed. */
#define TAIL_CAP 2048
/* Ending the tasks after the wait: SIGTERM, then SIGKILL after this; then give up. */
#define TASK_GRACE_MS 1000
#define TASK_END_MS 5000

typedef struct {
    const char *host;
    hvd_spawn_t proc;
    int in_fd; /* our write end of its stdin, when it may be kept for the launch */
    int started, reaped;
    int attempts;     /* ssh attempts so far (cfg->ssh_check) */
    int64_t retry_at; /* when to start it again after ssh failed; 0: not waiting */
    char tail[TAIL_CAP];
    size_t tail_len;
} task_t;

typedef struct {
    const hvd_nic_discovery_config_t *cfg;
    task_t *tasks;
    hvd_spawn_t **ending; /* room for every task's process, for end_procs */
    hvd_driver_t *d;
    int64_t deadline;
} run_t;

static hvd_status_t start_task(run_t *r, hvd_driver_t *d, size_t i);

/* Keep the last TAIL_CAP bytes of what a task wrote (stdout and stderr alike). */
static void drain(task_t *t, int *fd) {
    char buf[1024];
    while (*fd >= 0) {
        ssize_t n = read(*fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) {
            close(*fd);
            *fd = -1;
            return;
        }
        hvd__capture_keep_tail(t->tail, TAIL_CAP, &t->tail_len, buf, (size_t)n);
    }
}

static void poll_task(task_t *t) {
    drain(t, &t->proc.out_fd);
    drain(t, &t->proc.err_fd);
    if (t->proc.ctl_fd >= 0 && !t->proc.ctl_eof)
        hvd__spawn_read_report(&t->proc);
    if (!t->reaped && hvd__spawn_reap(&t->proc))
        t->reaped = 1;
}

/* With cfg->ssh_check, ssh failing to reach a host (its exit code 255) is retried as the ssh
 * check retries it; 1 when the task was set to start again. */
static int retry_ssh(run_t *r, task_t *t, int status) {
    int64_t now = hvd__clock_now_ms();
    if (!r->cfg->ssh_check || hvd__spawn_exit_code(status) != 255 ||
        t->attempts >= HVD_SSH_CHECK_ATTEMPTS ||
        hvd__ssh_failure_is_permanent(t->tail, t->tail_len) ||
        now + HVD_SSH_RETRY_PAUSE_MS >= r->deadline)
        return 0;
    hvd__spawn_close(&t->proc);
    if (t->in_fd >= 0)
        close(t->in_fd);
    t->in_fd = -1;
    t->started = t->reaped = 0;
    t->retry_at = now + HVD_SSH_RETRY_PAUSE_MS;
    return 1;
}

/* hvd__driver_wait's check: a task that ended badly ends the wait, naming its host. */
static int check_tasks(void *arg, char *msg, size_t size) {
    run_t *r = arg;
    for (size_t i = 0; i < r->cfg->count; i++) {
        task_t *t = &r->tasks[i];
        if (t->retry_at) {
            if (hvd__clock_now_ms() < t->retry_at)
                continue;
            t->retry_at = 0;
            if (start_task(r, r->d, i) != HVD_OK) {
                snprintf(msg, size, "%s", hvd_last_error());
                return 1;
            }
        }
        poll_task(t);
        if (!t->proc.reported && !t->reaped)
            continue;
        int status = hvd__spawn_status(&t->proc);
        if (hvd__spawn_exit_code(status) == 0)
            continue;
        drain(t, &t->proc.out_fd);
        drain(t, &t->proc.err_fd);
        if (retry_ssh(r, t, status))
            continue;
        if (r->cfg->ssh_check && hvd__spawn_exit_code(status) == 255) {
            /* as the separate ssh check would have said it */
            hvd__ssh_say_failure(r->cfg->err_fd, t->host, t->tail, t->tail_len);
            snprintf(msg, size,
                     "could not connect to some hosts via ssh: %s (ssh's own words are above)",
                     t->host);
            return 1;
        }
        char what[96], line[512];
        hvd__spawn_describe_status(status, what, sizeof what);
        hvd__capture_last_line(t->tail, t->tail_len, line, sizeof line);
        snprintf(msg, size, "the task service on host %s (%s) ended with %s%s%s", t->host,
                 !r->cfg->remote[i]                  ? "this machine"
                 : r->cfg->ssh && r->cfg->ssh->agent ? "through the rsh agent"
                 : r->cfg->ssh && r->cfg->ssh->srun  ? "through srun"
                                                     : "over ssh",
                 what, *line ? ": " : "", line);
        return 1;
    }
    return 0;
}

static hvd_status_t start_task(run_t *r, hvd_driver_t *d, size_t i) {
    const hvd_nic_discovery_config_t *cfg = r->cfg;
    task_t *t = &r->tasks[i];
    char **ssh_argv = NULL;
    char *local_argv[] = {(char *)cfg->exe, HVD_TASK_OPTION, NULL};
    hvd_spawn_config_t sc = {.argv = local_argv, .envp = environ, .grace_ms = TASK_GRACE_MS};
    hvd_status_t st = HVD_OK;
    if (cfg->remote[i]) {
        st = hvd__ssh_argv_program(cfg->ssh, t->host, cfg->exe, HVD_TASK_OPTION, &ssh_argv);
        sc.argv = ssh_argv;
    }
    uint8_t *blob = NULL;
    size_t len = 0;
    if (st == HVD_OK)
        st = hvd__driver_task_input(d, i, &blob, &len);
    if (st == HVD_OK && cfg->verbose) {
        char line[8192] = "", word[4200];
        size_t used = 0;
        for (char *const *a = sc.argv; *a && used < sizeof line; a++) {
            hvd__shell_quote(*a, word, sizeof word);
            used +=
                (size_t)snprintf(line + used, sizeof line - used, "%s%s", used ? " " : "", word);
        }
        hvd__say(cfg->out_fd, "Launching horovod task function: %s\n", line);
    }
    if (st == HVD_OK) {
        t->tail_len = 0; /* what a failed ssh attempt said is replaced by this one's */
        t->attempts++;
        sc.stdin_data = blob;
        sc.stdin_len = len;
        if (cfg->keep_p && cfg->remote[i])
            sc.stdin_writer_p = &t->in_fd;
        st = hvd__spawn_start(&sc, &t->proc);
        t->started = st == HVD_OK;
    }
    if (blob)
        hvd__disc_input_free(blob, len);
    hvd__ssh_argv_free(ssh_argv);
    if (st != HVD_OK)
        return hvd__error_wrap(st, "cannot start the task service for host %s", t->host);
    return HVD_OK;
}

/* Stop every process still running and reap them all, within TASK_END_MS. */
static void end_procs(hvd_spawn_t **procs, size_t n) {
    for (size_t i = 0; i < n; i++)
        hvd__spawn_stop(procs[i]);
    int64_t kill_at = hvd__clock_now_ms() + TASK_GRACE_MS + 1000;
    int64_t give_up = hvd__clock_now_ms() + TASK_END_MS;
    for (;;) {
        size_t left = 0;
        for (size_t i = 0; i < n; i++) {
            if (procs[i]->reaped)
                continue;
            if (procs[i]->ctl_fd >= 0 && !procs[i]->ctl_eof)
                hvd__spawn_read_report(procs[i]);
            if (!hvd__spawn_reap(procs[i])) {
                left++;
                if (hvd__clock_now_ms() >= kill_at)
                    hvd__spawn_kill(procs[i]);
            }
        }
        if (left == 0 || hvd__clock_now_ms() >= give_up)
            break;
        hvd__clock_sleep_ms(20);
    }
    for (size_t i = 0; i < n; i++)
        hvd__spawn_close(procs[i]);
}

/* After a successful discovery, hand the remote tasks that still run to the caller (they go
 * on as their host's supervisor); end the others. */
static void end_or_keep_tasks(run_t *r, int keep) {
    const hvd_nic_discovery_config_t *cfg = r->cfg;
    hvd_ready_session_t *kept = keep ? calloc(cfg->count, sizeof *kept) : NULL;
    size_t n = 0, nkept = 0;
    for (size_t i = 0; i < cfg->count; i++) {
        task_t *t = &r->tasks[i];
        if (!t->started)
            continue;
        poll_task(t);
        if (kept && cfg->remote[i] && t->in_fd >= 0 && !t->proc.reported && !t->reaped) {
            kept[nkept++] =
                (hvd_ready_session_t){.host = t->host, .proc = t->proc, .in_fd = t->in_fd};
            continue;
        }
        if (t->in_fd >= 0)
            close(t->in_fd);
        t->in_fd = -1;
        r->ending[n++] = &t->proc;
    }
    end_procs(r->ending, n);
    if (keep) { /* none kept (out of memory) only means the launch opens its own sessions */
        *cfg->keep_p = kept;
        *cfg->nkeep_p = nkept;
    }
}

void hvd__ready_sessions_end(hvd_ready_session_t *sessions, size_t n) {
    hvd_spawn_t **procs = calloc(n ? n : 1, sizeof *procs);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (sessions[i].taken)
            continue;
        if (sessions[i].in_fd >= 0)
            close(sessions[i].in_fd);
        hvd_spawn_t *one = &sessions[i].proc;
        if (procs)
            procs[k++] = one;
        else
            end_procs(&one, 1); /* out of memory: one at a time, still bounded */
    }
    end_procs(procs, k);
    free(procs);
    free(sessions);
}

hvd_status_t hvd__nic_discovery_run(const hvd_nic_discovery_config_t *cfg,
                                    hvd_disc_result_t *result_p) {
    if (cfg->verbose)
        hvd__say(cfg->out_fd, "Testing interfaces on all the hosts.\n");
    hvd_driver_config_t dc = {.secret = cfg->secret,
                              .hosts = cfg->hosts,
                              .host_count = cfg->count,
                              .nics = cfg->nics,
                              .nic_count = cfg->nic_count,
                              .timeout_s = cfg->timeout_s,
                              .mesh = cfg->mesh};
    hvd_driver_t *d = NULL;
    hvd_status_t st = hvd__driver_start(&dc, &d);
    if (st != HVD_OK)
        return st;
    if (cfg->verbose) {
        size_t n = 0;
        const hvd_netif_t *addrs = hvd__driver_addrs(d, &n);
        char list[1024] = "";
        size_t used = 0;
        for (size_t i = 0; i < n && used < sizeof list; i++)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? " " : "",
                                     addrs[i].addr);
        hvd__say(cfg->out_fd, "Driver service listening on port %d of %s.\n", hvd__driver_port(d),
                 list);
    }
    run_t r = {.cfg = cfg,
               .tasks = calloc(cfg->count, sizeof *r.tasks),
               .ending = calloc(cfg->count, sizeof *r.ending)};
    if (!r.tasks || !r.ending) {
        free(r.tasks);
        free(r.ending);
        hvd__driver_stop(d);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    }
    int64_t deadline = hvd__clock_now_ms() + (int64_t)cfg->timeout_s * 1000;
    r.d = d;
    r.deadline = deadline;
    if (cfg->ssh_check && cfg->verbose)
        hvd__say(cfg->out_fd,
                 "Checking ssh on all remote hosts (by starting their task services).\n");
    for (size_t i = 0; i < cfg->count; i++) {
        r.tasks[i].host = cfg->hosts[i];
        r.tasks[i].in_fd = -1;
        r.tasks[i].proc.out_fd = r.tasks[i].proc.err_fd = r.tasks[i].proc.ctl_fd = -1;
    }
    for (size_t i = 0; i < cfg->count && st == HVD_OK; i++)
        st = start_task(&r, d, i);
    if (st == HVD_OK) {
        if (cfg->verbose)
            hvd__say(cfg->out_fd, "Attempted to launch horovod task servers.\n"
                                  "Waiting for the hosts to acknowledge.\n");
        st = hvd__driver_wait(d, deadline, check_tasks, &r, result_p);
        if (st == HVD_OK && cfg->ssh_check && cfg->verbose)
            hvd__say(cfg->out_fd, cfg->ssh && cfg->ssh->agent
                                      ? "The rsh agent reached all the hosts.\n"
                                  : cfg->ssh && cfg->ssh->srun
                                      ? "srun reached all the remote hosts.\n"
                                      : "SSH was successful into all the remote hosts.\n");
        if (cfg->mesh && (st == HVD_OK || st == HVD_ERR_NOT_FOUND)) {
            hvd__say_text(cfg->out_fd, "", hvd__driver_message(d));
        } else if (st != HVD_OK && st != HVD_ERR_PEER_LOST && *hvd__driver_message(d)) {
            /* the whole matrix (the last error keeps only its first KiB) */
            hvd__say_text(cfg->err_fd, "horovodrun: ", hvd__driver_message(d));
            hvd__error_set(st, "NIC discovery failed (what each host reached is above)");
        }
    }
    end_or_keep_tasks(&r, st == HVD_OK && cfg->keep_p);
    free(r.tasks);
    free(r.ending);
    hvd__driver_stop(d);
    if (st == HVD_OK && cfg->verbose && !cfg->mesh) {
        char list[1024] = "";
        size_t used = 0;
        for (size_t i = 0; i < result_p->nic_count && used < sizeof list; i++)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? " " : "",
                                     result_p->nics[i]);
        hvd__say(cfg->out_fd,
                 "Host-to-host interface checking successful.\nInterfaces on all the hosts were "
                 "successfully checked.\nCommon interface found: %s\n",
                 list);
    }
    return st;
}
