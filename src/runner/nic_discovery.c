#include "runner/nic_discovery.h"

#include <hvd/hvd.h>

#include "common/clock.h"
#include "common/error.h"
#include "os/spawn.h"
#include "runner/capture.h"
#include "runner/discovery_msg.h"

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
    int started, reaped;
    char tail[TAIL_CAP];
    size_t tail_len;
} task_t;

typedef struct {
    const hvd_nic_discovery_config_t *cfg;
    task_t *tasks;
} run_t;

static void say(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(int fd, const char *fmt, ...) {
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0 && write(fd, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1) < 0)
        return;
}

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

/* hvd__driver_wait's check: a task that ended badly ends the wait, naming its host. */
static int check_tasks(void *arg, char *msg, size_t size) {
    run_t *r = arg;
    for (size_t i = 0; i < r->cfg->count; i++) {
        task_t *t = &r->tasks[i];
        poll_task(t);
        if (!t->proc.reported && !t->reaped)
            continue;
        int status = hvd__spawn_status(&t->proc);
        if (hvd__spawn_exit_code(status) == 0)
            continue;
        drain(t, &t->proc.out_fd);
        drain(t, &t->proc.err_fd);
        char what[96], line[512];
        hvd__spawn_describe_status(status, what, sizeof what);
        hvd__capture_last_line(t->tail, t->tail_len, line, sizeof line);
        snprintf(msg, size, "the task service on host %s (%s) ended with %s%s%s", t->host,
                 r->cfg->remote[i] ? "over ssh" : "this machine", what, *line ? ": " : "", line);
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
        say(cfg->out_fd, "Launching horovod task function: %s\n", line);
    }
    if (st == HVD_OK) {
        sc.stdin_data = blob;
        sc.stdin_len = len;
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

/* Stop every task still running and reap them all, within TASK_END_MS. */
static void end_tasks(run_t *r) {
    for (size_t i = 0; i < r->cfg->count; i++)
        if (r->tasks[i].started)
            hvd__spawn_stop(&r->tasks[i].proc);
    int64_t kill_at = hvd__clock_now_ms() + TASK_GRACE_MS + 1000;
    int64_t give_up = hvd__clock_now_ms() + TASK_END_MS;
    for (;;) {
        size_t left = 0;
        for (size_t i = 0; i < r->cfg->count; i++) {
            task_t *t = &r->tasks[i];
            if (!t->started || t->reaped)
                continue;
            poll_task(t);
            if (!t->reaped) {
                left++;
                if (hvd__clock_now_ms() >= kill_at)
                    hvd__spawn_kill(&t->proc);
            }
        }
        if (left == 0 || hvd__clock_now_ms() >= give_up)
            break;
        hvd__clock_sleep_ms(20);
    }
    for (size_t i = 0; i < r->cfg->count; i++)
        hvd__spawn_close(&r->tasks[i].proc);
}

hvd_status_t hvd__nic_discovery_run(const hvd_nic_discovery_config_t *cfg,
                                    hvd_disc_result_t *result_p) {
    if (cfg->verbose)
        say(cfg->out_fd, "Testing interfaces on all the hosts.\n");
    hvd_driver_config_t dc = {.secret = cfg->secret,
                              .hosts = cfg->hosts,
                              .host_count = cfg->count,
                              .nics = cfg->nics,
                              .nic_count = cfg->nic_count,
                              .timeout_s = cfg->timeout_s};
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
        say(cfg->out_fd, "Driver service listening on port %d of %s.\n", hvd__driver_port(d), list);
    }
    run_t r = {.cfg = cfg, .tasks = calloc(cfg->count, sizeof *r.tasks)};
    if (!r.tasks) {
        hvd__driver_stop(d);
        return hvd__error_set(HVD_ERR_NO_MEMORY, "out of memory");
    }
    int64_t deadline = hvd__clock_now_ms() + (int64_t)cfg->timeout_s * 1000;
    for (size_t i = 0; i < cfg->count; i++) {
        r.tasks[i].host = cfg->hosts[i];
        r.tasks[i].proc.out_fd = r.tasks[i].proc.err_fd = r.tasks[i].proc.ctl_fd = -1;
    }
    for (size_t i = 0; i < cfg->count && st == HVD_OK; i++)
        st = start_task(&r, d, i);
    if (st == HVD_OK) {
        if (cfg->verbose)
            say(cfg->out_fd, "Attempted to launch horovod task servers.\n"
                             "Waiting for the hosts to acknowledge.\n");
        st = hvd__driver_wait(d, deadline, check_tasks, &r, result_p);
        if (st != HVD_OK && st != HVD_ERR_PEER_LOST && *hvd__driver_message(d)) {
            /* the whole matrix (the last error keeps only its first KiB) */
            say(cfg->err_fd, "horovodrun: %s\n", hvd__driver_message(d));
            hvd__error_set(st, "NIC discovery failed (what each host reached is above)");
        }
    }
    end_tasks(&r);
    free(r.tasks);
    hvd__driver_stop(d);
    if (st == HVD_OK && cfg->verbose) {
        char list[1024] = "";
        size_t used = 0;
        for (size_t i = 0; i < result_p->nic_count && used < sizeof list; i++)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? " " : "",
                                     result_p->nics[i]);
        say(cfg->out_fd,
            "Host-to-host interface checking successful.\nInterfaces on all the hosts were "
            "successfully checked.\nCommon interface found: %s\n",
            list);
    }
    return st;
}
